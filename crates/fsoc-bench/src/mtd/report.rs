//! The results of `fsoc bench mtd` as they are written to JSON and read back: the figures, the
//! issue's targets checked against them, the Markdown tables of the README and docs/RAW-NAND.md,
//! and the SVG chart (through fsoc-bench's svg_chart). Knows nothing of how the figures were measured.
//!
//! Invariant: every figure here comes from the run the JSON records; what was not measured is
//! `None` (shown as "not measured") and never estimated.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::svg_chart::{self, LogScale};

/// Page reads, page programs and block erases of the raw-NAND layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlashOps {
    pub page_reads: u64,
    pub page_programs: u64,
    pub block_erases: u64,
}

impl FlashOps {
    /// The operations between `before` and `self` (counters only grow).
    pub fn since(&self, before: &FlashOps) -> FlashOps {
        assert!(
            self.page_reads >= before.page_reads
                && self.page_programs >= before.page_programs
                && self.block_erases >= before.block_erases,
            "kprobe counts went backwards: {before:?} then {self:?}"
        );
        FlashOps {
            page_reads: self.page_reads - before.page_reads,
            page_programs: self.page_programs - before.page_programs,
            block_erases: self.block_erases - before.block_erases,
        }
    }

    /// How long nandsim busy-waits for these operations with `delays` on a chip of pages of
    /// `page_size_bytes`.
    pub fn delay_seconds(&self, delays: &NandDelays, page_size_bytes: u64) -> f64 {
        let microseconds = self.page_reads * delays.page_read_us(page_size_bytes)
            + self.page_programs * delays.page_program_us(page_size_bytes)
            + self.block_erases * delays.block_erase_us();
        microseconds as f64 / 1e6
    }
}

/// nandsim's delay parameters (its names and units: microseconds, milliseconds for erase,
/// nanoseconds per byte on the bus).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NandDelays {
    pub access_delay_us: u64,
    pub programm_delay_us: u64,
    pub erase_delay_ms: u64,
    pub input_cycle_ns: u64,
    pub output_cycle_ns: u64,
}

impl NandDelays {
    /// Samsung K9F2G08U0B (2 Gbit SLC, 2 KiB + 64 B pages, 128 KiB blocks: the chip whose ID
    /// bytes 0xec,0xda the benchmark gives nandsim), from its datasheet's features: random read
    /// tR 25 µs (max.), page program tPROG 200 µs (typ.), block erase tBERS 1.5 ms (typ.),
    /// serial access tRC 25 ns (min.), write cycle tWC 25 ns (min.). nandsim takes whole
    /// milliseconds for the erase, so 1.5 ms becomes 2 ms.
    pub const K9F2G08U0B: NandDelays = NandDelays {
        access_delay_us: 25,
        programm_delay_us: 200,
        erase_delay_ms: 2,
        input_cycle_ns: 25,
        output_cycle_ns: 25,
    };

    pub const SOURCE: &'static str = "Samsung K9F2G08U0B datasheet (2 Gbit SLC NAND, 2 KiB pages, 128 KiB blocks): \
        tR 25 us max, tPROG 200 us typ, tBERS 1.5 ms typ (nandsim takes whole ms: 2), tRC = tWC = 25 ns";

    /// One page read as nandsim delays it (drivers/mtd/nand/raw/nandsim.c, ACTION_CPY:
    /// access_delay, then input_cycle × page size / 1000 µs, integer division, 8-bit bus).
    pub fn page_read_us(&self, page_size_bytes: u64) -> u64 {
        self.access_delay_us + self.input_cycle_ns * page_size_bytes / 1000
    }

    /// One page program (ACTION_PRGPAGE: programm_delay, then output_cycle × page size / 1000).
    pub fn page_program_us(&self, page_size_bytes: u64) -> u64 {
        self.programm_delay_us + self.output_cycle_ns * page_size_bytes / 1000
    }

    /// One block erase (ACTION_SECERASE: mdelay(erase_delay)).
    pub fn block_erase_us(&self) -> u64 {
        self.erase_delay_ms * 1000
    }

    /// nandsim's module parameters for these delays, with the delays switched on.
    pub fn module_parameters(&self) -> Vec<String> {
        vec![
            "do_delays=1".into(),
            format!("access_delay={}", self.access_delay_us),
            format!("programm_delay={}", self.programm_delay_us),
            format!("erase_delay={}", self.erase_delay_ms),
            format!("input_cycle={}", self.input_cycle_ns),
            format!("output_cycle={}", self.output_cycle_ns),
        ]
    }
}

/// The delays used, and what one operation costs with them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DelaysReport {
    pub do_delays: bool,
    #[serde(flatten)]
    pub parameters: NandDelays,
    pub page_read_us: u64,
    pub page_program_us: u64,
    pub block_erase_us: u64,
    pub source: String,
}

/// The simulated chip as the kernel's MTD layer describes it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Geometry {
    pub nandsim_id_bytes: String,
    pub page_size_bytes: u64,
    pub oob_size_bytes: u64,
    pub oob_free_bytes: u64,
    pub erase_block_size_bytes: u64,
    pub size_bytes: u64,
}

/// Flash operations and wall time of one measured step.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Counted {
    #[serde(flatten)]
    pub ops: FlashOps,
    pub wall_seconds: f64,
    /// The part of the wall time nandsim's busy-waits account for (ops × delay per op); the
    /// rest is the file system's CPU time under emulation and process start-up.
    pub flash_delay_seconds: f64,
}

impl Counted {
    pub fn new(ops: FlashOps, wall_seconds: f64, delays: &NandDelays, page_size_bytes: u64) -> Counted {
        Counted { ops, wall_seconds, flash_delay_seconds: ops.delay_seconds(delays, page_size_bytes) }
    }
}

/// Repeated mounts of one file system on one chip size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountFigures {
    /// Of the first mount (the others are compared with it).
    #[serde(flatten)]
    pub ops: FlashOps,
    pub same_counts_every_repetition: bool,
    pub wall_seconds: Vec<f64>,
    pub wall_seconds_median: f64,
    pub flash_delay_seconds: f64,
}

impl MountFigures {
    /// Figures from the repetitions (at least one).
    pub fn from_samples(samples: &[Counted]) -> MountFigures {
        let first = samples.first().expect("at least one mount repetition");
        let mut walls: Vec<f64> = samples.iter().map(|sample| sample.wall_seconds).collect();
        let wall_seconds = walls.clone();
        walls.sort_by(f64::total_cmp);
        MountFigures {
            ops: first.ops,
            same_counts_every_repetition: samples.iter().all(|sample| sample.ops == first.ops),
            wall_seconds,
            wall_seconds_median: walls[walls.len() / 2],
            flash_delay_seconds: first.flash_delay_seconds,
        }
    }
}

/// fsoc's mount against UBI's attach plus UBIFS's mount on one chip size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountRow {
    pub size_label: String,
    pub size_bytes: u64,
    pub erase_blocks: u64,
    /// nandsim's overridesize (2^N erase blocks), when the size is not the ID bytes' own.
    pub overridesize: Option<u32>,
    pub fsoc: Option<MountFigures>,
    pub ubi_ubifs: Option<MountFigures>,
    /// UBI + UBIFS's median time over fsoc's (above 1: fsoc mounts faster).
    pub fsoc_speedup: Option<f64>,
    pub errors: Vec<String>,
}

/// Durable small-file creates on one file system.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SmallFilesFigures {
    #[serde(flatten)]
    pub counted: Counted,
    pub page_programs_per_fsync: f64,
    pub block_erases_per_fsync: f64,
    pub page_reads_per_fsync: f64,
    pub milliseconds_per_create: f64,
    /// The unmount right after the creates: the index work a file system deferred past the
    /// last fsync (UBIFS's journal commit, fsoc's full commit of its pending delta). Absent
    /// from results made before it was counted.
    #[serde(default)]
    pub unmount: Option<Counted>,
    /// Page programs of the creates and that unmount, per create: what the workload costs once
    /// nothing is owed.
    #[serde(default)]
    pub page_programs_per_create_settled: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SmallFiles {
    pub files: u32,
    pub size_min_bytes: u32,
    pub size_max_bytes: u32,
    pub seed: u64,
    pub fsoc: Option<SmallFilesFigures>,
    pub ubi_ubifs: Option<SmallFilesFigures>,
    pub errors: Vec<String>,
}

/// One file written in large writes (fsync at the end), then read back after a remount.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SequentialFigures {
    pub write: Counted,
    pub write_mib_per_second: f64,
    pub read: Counted,
    pub read_mib_per_second: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sequential {
    pub file_bytes: u64,
    pub request_bytes: u64,
    pub fsoc: Option<SequentialFigures>,
    pub ubi_ubifs: Option<SequentialFigures>,
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Postmark {
    /// PostMark's commands (without `set location`).
    pub configuration: Vec<String>,
    pub fsoc: Option<Counted>,
    pub ubi_ubifs: Option<Counted>,
    pub errors: Vec<String>,
}

/// One of issue 17's targets against what the run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    /// `None`: not measured (the figure is missing).
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub benchmark: String,
    pub quick: bool,
    pub code: Option<String>,
    /// The machine running the guest, as the caller described it.
    pub host: Option<String>,
    pub kernel: String,
    pub machine: String,
    pub geometry: Geometry,
    pub delays: DelaysReport,
    pub counting: String,
    pub fsoc_mount: String,
    pub ubi_ubifs_setup: String,
    pub mount_tree_files: u32,
    pub mount_tree_bytes: u64,
    pub mount_repetitions: u32,
    pub mount: Vec<MountRow>,
    pub workload_chip_size_bytes: u64,
    pub small_files: SmallFiles,
    pub sequential: Sequential,
    pub postmark: Postmark,
    pub targets: Vec<TargetCheck>,
    pub not_measured: Vec<String>,
    pub notes: Vec<String>,
    pub wall_seconds: f64,
}

impl Report {
    /// The JSON a run writes: pretty, ending in a newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("an mtd report has only numbers, strings and lists") + "\n"
    }

    /// Reads a finished run's JSON back, its targets checked again so the tables follow the
    /// targets as this version states them.
    pub fn from_json(text: &str) -> Result<Report, serde_json::Error> {
        let mut report: Report = serde_json::from_str(text)?;
        report.targets = check_targets(&report);
        Ok(report)
    }
}

/// The largest size issue 17 asks for: 8 GiB.
const TARGET_SIZE_MAX_BYTES: u64 = 8 << 30;
const TARGET_MOUNT_READS_MAX: u64 = 16;
const TARGET_SPEEDUP_MIN: f64 = 10.0;
const TARGET_SPEEDUP_SIZE_BYTES: u64 = 2 << 30;

/// Issue 17's targets, checked against the report's figures.
pub fn check_targets(report: &Report) -> Vec<TargetCheck> {
    let mut checks = Vec::new();

    let measured: Vec<(&MountRow, &MountFigures)> =
        report.mount.iter().filter_map(|row| row.fsoc.as_ref().map(|figures| (row, figures))).collect();
    let reads: Vec<String> =
        measured.iter().map(|(row, figures)| format!("{} at {}", figures.ops.page_reads, row.size_label)).collect();
    let largest = measured.iter().map(|(row, _)| row.size_bytes).max().unwrap_or(0);
    let all_within = measured.iter().all(|(_, figures)| figures.ops.page_reads <= TARGET_MOUNT_READS_MAX);
    checks.push(TargetCheck {
        target: "fsoc mount on MTD: at most 16 page reads from 256 MiB to 8 GiB".into(),
        measured: if measured.is_empty() {
            "not measured".into()
        } else if largest < TARGET_SIZE_MAX_BYTES {
            format!("{} (sizes above {} not measured)", reads.join(", "), size_label(largest))
        } else {
            reads.join(", ")
        },
        met: if measured.is_empty() || (all_within && largest < TARGET_SIZE_MAX_BYTES) {
            None
        } else {
            Some(all_within)
        },
    });

    let at_2g = report.mount.iter().find(|row| row.size_bytes == TARGET_SPEEDUP_SIZE_BYTES);
    let speedup = at_2g.and_then(|row| Some((row.fsoc.as_ref()?, row.ubi_ubifs.as_ref()?, row.fsoc_speedup?)));
    checks.push(TargetCheck {
        target: "at 2 GiB with nandsim delays: fsoc mount at least 10x faster than UBI attach + UBIFS mount".into(),
        measured: match speedup {
            Some((fsoc, ubi, ratio)) => format!(
                "fsoc {:.3} s, UBI + UBIFS {:.3} s (medians): {ratio:.1}x",
                fsoc.wall_seconds_median, ubi.wall_seconds_median
            ),
            None => "not measured".into(),
        },
        met: speedup.map(|(_, _, ratio)| ratio >= TARGET_SPEEDUP_MIN),
    });

    let small = &report.small_files;
    let programs = small.fsoc.as_ref().zip(small.ubi_ubifs.as_ref());
    checks.push(TargetCheck {
        target: "page programs per durable small-file create at most UBIFS's".into(),
        measured: match programs {
            Some((fsoc, ubi)) => {
                let settled = fsoc.page_programs_per_create_settled.zip(ubi.page_programs_per_create_settled);
                format!(
                    "fsoc {:.2}, UBIFS {:.2} programs per fsync'd create{}",
                    fsoc.page_programs_per_fsync,
                    ubi.page_programs_per_fsync,
                    settled.map_or(String::new(), |(fsoc, ubi)| format!(
                        " ({fsoc:.2} and {ubi:.2} with the unmount that follows)"
                    ))
                )
            }
            None => "not measured".into(),
        },
        met: programs.map(|(fsoc, ubi)| fsoc.page_programs_per_fsync <= ubi.page_programs_per_fsync),
    });
    checks
}

/// "256 MiB", "2 GiB".
pub fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn figure(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(value) => format!("{value:.decimals$}"),
        None => "not measured".into(),
    }
}

fn count(value: Option<u64>) -> String {
    match value {
        Some(value) => group_thousands(value),
        None => "not measured".into(),
    }
}

/// 131094 → "131,094".
pub fn group_thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

fn met_word(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "not measured",
    }
}

/// The Markdown tables for the README and docs/RAW-NAND.md: mount per size, then the
/// workloads, then the targets.
pub fn markdown_tables(report: &Report) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "| chip (nandsim, {} B pages, {} KiB blocks) | fsoc mount: page reads | UBI attach + UBIFS mount: page reads | fsoc mount (s) | UBI + UBIFS (s) | fsoc faster by |",
        report.geometry.page_size_bytes,
        report.geometry.erase_block_size_bytes >> 10
    );
    text.push_str("|---|---|---|---|---|---|\n");
    for row in &report.mount {
        let _ = writeln!(
            text,
            "| {} ({} blocks) | {} | {} | {} | {} | {} |",
            row.size_label,
            group_thousands(row.erase_blocks),
            count(row.fsoc.as_ref().map(|figures| figures.ops.page_reads)),
            count(row.ubi_ubifs.as_ref().map(|figures| figures.ops.page_reads)),
            figure(row.fsoc.as_ref().map(|figures| figures.wall_seconds_median), 3),
            figure(row.ubi_ubifs.as_ref().map(|figures| figures.wall_seconds_median), 2),
            row.fsoc_speedup.map_or("not measured".into(), |ratio| format!("{ratio:.1}x")),
        );
    }
    text.push('\n');

    let small = &report.small_files;
    let sequential = &report.sequential;
    let postmark = &report.postmark;
    let _ = writeln!(
        text,
        "| workload ({} chip, delays on) | fsoc | UBI + UBIFS | fsoc/UBIFS |",
        size_label(report.workload_chip_size_bytes)
    );
    text.push_str("|---|---|---|---|\n");
    let mut row = |label: String, fsoc: Option<f64>, ubi: Option<f64>, decimals: usize| {
        let ratio = fsoc.zip(ubi).filter(|(_, ubi)| *ubi > 0.0).map(|(fsoc, ubi)| fsoc / ubi);
        let _ = writeln!(
            text,
            "| {label} | {} | {} | {} |",
            figure(fsoc, decimals),
            figure(ubi, decimals),
            ratio.map_or("–".into(), |ratio| format!("{ratio:.2}"))
        );
    };
    let files = format!(
        "{} files of {} B–{} KiB, each fsync'd",
        group_thousands(u64::from(small.files)),
        small.size_min_bytes,
        small.size_max_bytes >> 10
    );
    row(
        format!("page programs per fsync ({files})"),
        small.fsoc.as_ref().map(|figures| figures.page_programs_per_fsync),
        small.ubi_ubifs.as_ref().map(|figures| figures.page_programs_per_fsync),
        2,
    );
    row(
        "page programs per create, with the unmount that follows".into(),
        small.fsoc.as_ref().and_then(|figures| figures.page_programs_per_create_settled),
        small.ubi_ubifs.as_ref().and_then(|figures| figures.page_programs_per_create_settled),
        2,
    );
    row(
        "block erases per fsync".into(),
        small.fsoc.as_ref().map(|figures| figures.block_erases_per_fsync),
        small.ubi_ubifs.as_ref().map(|figures| figures.block_erases_per_fsync),
        3,
    );
    row(
        "page reads per fsync".into(),
        small.fsoc.as_ref().map(|figures| figures.page_reads_per_fsync),
        small.ubi_ubifs.as_ref().map(|figures| figures.page_reads_per_fsync),
        2,
    );
    row(
        "ms per durable create".into(),
        small.fsoc.as_ref().map(|figures| figures.milliseconds_per_create),
        small.ubi_ubifs.as_ref().map(|figures| figures.milliseconds_per_create),
        2,
    );
    let mib = sequential.file_bytes >> 20;
    row(
        format!("sequential write of {mib} MiB + fsync (MiB/s)"),
        sequential.fsoc.as_ref().map(|figures| figures.write_mib_per_second),
        sequential.ubi_ubifs.as_ref().map(|figures| figures.write_mib_per_second),
        2,
    );
    row(
        format!(
            "  its page programs (a {mib} MiB file is {} pages)",
            sequential.file_bytes / report.geometry.page_size_bytes.max(1)
        ),
        sequential.fsoc.as_ref().map(|figures| figures.write.ops.page_programs as f64),
        sequential.ubi_ubifs.as_ref().map(|figures| figures.write.ops.page_programs as f64),
        0,
    );
    row(
        format!("sequential read of {mib} MiB after remount (MiB/s)"),
        sequential.fsoc.as_ref().map(|figures| figures.read_mib_per_second),
        sequential.ubi_ubifs.as_ref().map(|figures| figures.read_mib_per_second),
        2,
    );
    row(
        "  its page reads".into(),
        sequential.fsoc.as_ref().map(|figures| figures.read.ops.page_reads as f64),
        sequential.ubi_ubifs.as_ref().map(|figures| figures.read.ops.page_reads as f64),
        0,
    );
    row(
        "PostMark wall time (s)".into(),
        postmark.fsoc.map(|counted| counted.wall_seconds),
        postmark.ubi_ubifs.map(|counted| counted.wall_seconds),
        1,
    );
    row(
        "  its page programs".into(),
        postmark.fsoc.map(|counted| counted.ops.page_programs as f64),
        postmark.ubi_ubifs.map(|counted| counted.ops.page_programs as f64),
        0,
    );
    row(
        "  its block erases".into(),
        postmark.fsoc.map(|counted| counted.ops.block_erases as f64),
        postmark.ubi_ubifs.map(|counted| counted.ops.block_erases as f64),
        0,
    );
    row(
        "  its page reads".into(),
        postmark.fsoc.map(|counted| counted.ops.page_reads as f64),
        postmark.ubi_ubifs.map(|counted| counted.ops.page_reads as f64),
        0,
    );
    text.push('\n');

    text.push_str("| target (issue 17) | measured | |\n|---|---|---|\n");
    for check in &report.targets {
        let _ = writeln!(text, "| {} | {} | {} |", check.target, check.measured, met_word(check.met));
    }
    text
}

const FSOC_COLOR: &str = "#1f77b4";
const UBI_COLOR: &str = "#d62728";

/// Two panels against the chip size (log axes): page reads of a mount, and its median wall
/// time with nandsim's delays; fsoc and UBI + UBIFS as one line each.
pub fn render_chart(report: &Report) -> String {
    const PANEL_WIDTH: f64 = 330.0;
    const PANEL_HEIGHT: f64 = 240.0;
    const LEFT: f64 = 70.0;
    const GAP: f64 = 90.0;
    const TOP: f64 = 60.0;
    let width = LEFT + 2.0 * PANEL_WIDTH + GAP + 30.0;
    let height = TOP + PANEL_HEIGHT + 80.0;
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, height);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="14">fsoc vs UBI + UBIFS on nandsim ({} B pages, delays of {}): mount against chip size</text>"#,
        report.geometry.page_size_bytes,
        svg_chart::escape(report.delays.source.split(" datasheet").next().unwrap_or("a datasheet")),
    );
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="40" fill="{FSOC_COLOR}">━ fsoc mount</text><text x="{}" y="40" fill="{UBI_COLOR}">━ UBI attach + UBIFS mount</text>"##,
        LEFT + 120.0
    );
    let sizes: Vec<f64> = report.mount.iter().map(|row| row.size_bytes as f64 / (1u64 << 30) as f64).collect();
    let (size_min, size_max) =
        sizes.iter().fold((f64::MAX, f64::MIN), |(low, high), size| (low.min(*size), high.max(*size)));
    let (size_min, size_max) = if sizes.is_empty() { (0.25, 8.0) } else { (size_min, size_max) };
    type Pick = fn(&MountFigures) -> f64;
    let panels: [(&str, Pick); 2] = [
        ("page reads (kprobes)", |figures| figures.ops.page_reads.max(1) as f64),
        ("wall time, s (median)", |figures| figures.wall_seconds_median.max(1e-4)),
    ];
    for (index, (title, pick)) in panels.iter().enumerate() {
        let left = LEFT + index as f64 * (PANEL_WIDTH + GAP);
        let values: Vec<f64> = report
            .mount
            .iter()
            .flat_map(|row| [row.fsoc.as_ref(), row.ubi_ubifs.as_ref()])
            .flatten()
            .map(pick)
            .collect();
        let (value_min, value_max) =
            values.iter().fold((f64::MAX, f64::MIN), |(low, high), value| (low.min(*value), high.max(*value)));
        let (value_min, value_max) = if values.is_empty() { (1.0, 10.0) } else { (value_min, value_max) };
        let x_scale = LogScale::new(size_min, size_max, left, PANEL_WIDTH);
        let y_scale = LogScale::new(value_min, value_max, TOP, PANEL_HEIGHT);
        svg_chart::frame(&mut svg, left, TOP, PANEL_WIDTH, PANEL_HEIGHT);
        y_scale.grid(&mut svg, left, PANEL_WIDTH);
        let _ = writeln!(svg, r#"<text x="{left}" y="{}" font-size="12">{title}</text>"#, TOP - 6.0);
        // The measured sizes label the x axis (decades of GiB would hide 256 MiB … 8 GiB).
        for (row, size) in report.mount.iter().zip(&sizes) {
            let x = x_scale.x(*size);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                TOP + PANEL_HEIGHT,
                TOP + PANEL_HEIGHT + 14.0,
                svg_chart::escape(&row.size_label)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">chip size (log scale)</text>"#,
            left + PANEL_WIDTH / 2.0,
            TOP + PANEL_HEIGHT + 32.0
        );
        for (color, side) in [(FSOC_COLOR, 0), (UBI_COLOR, 1)] {
            let points: Vec<(f64, f64)> = report
                .mount
                .iter()
                .zip(&sizes)
                .filter_map(|(row, size)| {
                    let figures = if side == 0 { row.fsoc.as_ref() } else { row.ubi_ubifs.as_ref() }?;
                    Some((x_scale.x(*size), y_scale.y(pick(figures))))
                })
                .collect();
            if !points.is_empty() {
                svg_chart::series(&mut svg, &points, color, 3.0);
            }
        }
    }
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="{}" fill="#555">{}</text>"##,
        height - 12.0,
        svg_chart::escape(&format!(
            "Counted by kprobes on nand_read_page_op in one guest run (Linux {}, QEMU TCG); {}.",
            report.kernel,
            report.code.as_deref().unwrap_or("code version not recorded")
        ))
    );
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(reads: u64, seconds: f64) -> MountFigures {
        let delays = NandDelays::K9F2G08U0B;
        MountFigures::from_samples(&[Counted::new(
            FlashOps { page_reads: reads, page_programs: 0, block_erases: 0 },
            seconds,
            &delays,
            2048,
        )])
    }

    fn sample_report() -> Report {
        let delays = NandDelays::K9F2G08U0B;
        let row = |bytes: u64, fsoc: Option<MountFigures>, ubi: Option<MountFigures>| MountRow {
            size_label: size_label(bytes),
            size_bytes: bytes,
            erase_blocks: bytes >> 17,
            overridesize: None,
            fsoc_speedup: fsoc.as_ref().zip(ubi.as_ref()).map(|(f, u)| u.wall_seconds_median / f.wall_seconds_median),
            fsoc,
            ubi_ubifs: ubi,
            errors: Vec::new(),
        };
        let counted =
            Counted::new(FlashOps { page_reads: 3, page_programs: 2000, block_erases: 4 }, 2.0, &delays, 2048);
        let small = |programs: f64| SmallFilesFigures {
            counted,
            page_programs_per_fsync: programs,
            block_erases_per_fsync: 0.01,
            page_reads_per_fsync: 0.1,
            milliseconds_per_create: 2.0,
            unmount: Some(counted),
            page_programs_per_create_settled: Some(programs + 0.25),
        };
        let mut report = Report {
            benchmark: "fsoc bench mtd".into(),
            quick: false,
            code: Some("test".into()),
            host: None,
            kernel: "6.1".into(),
            machine: "test".into(),
            geometry: Geometry { page_size_bytes: 2048, erase_block_size_bytes: 131072, ..Geometry::default() },
            delays: DelaysReport {
                do_delays: true,
                parameters: delays,
                page_read_us: delays.page_read_us(2048),
                page_program_us: delays.page_program_us(2048),
                block_erase_us: delays.block_erase_us(),
                source: NandDelays::SOURCE.into(),
            },
            counting: String::new(),
            fsoc_mount: String::new(),
            ubi_ubifs_setup: String::new(),
            mount_tree_files: 10,
            mount_tree_bytes: 1000,
            mount_repetitions: 1,
            mount: vec![
                row(256 << 20, Some(figures(14, 0.2)), Some(figures(4386, 1.0))),
                row(2 << 30, Some(figures(15, 0.2)), Some(figures(32_790, 4.0))),
                row(8 << 30, None, Some(figures(131_094, 16.0))),
            ],
            workload_chip_size_bytes: 256 << 20,
            small_files: SmallFiles {
                files: 1000,
                size_min_bytes: 100,
                size_max_bytes: 4096,
                seed: 1,
                fsoc: Some(small(1.5)),
                ubi_ubifs: Some(small(2.0)),
                errors: Vec::new(),
            },
            sequential: Sequential {
                file_bytes: 64 << 20,
                request_bytes: 1 << 20,
                fsoc: None,
                ubi_ubifs: None,
                errors: vec!["not run".into()],
            },
            postmark: Postmark { configuration: Vec::new(), fsoc: Some(counted), ubi_ubifs: None, errors: Vec::new() },
            targets: Vec::new(),
            not_measured: Vec::new(),
            notes: Vec::new(),
            wall_seconds: 1.0,
        };
        report.targets = check_targets(&report);
        report
    }

    // nandsim's own arithmetic for the K9F2G08U0B delays on 2 KiB pages: 25 + 25 × 2048 / 1000
    // = 76 µs per read, 200 + 51 = 251 µs per program, 2 ms per erase.
    #[test]
    fn delays_follow_nandsim_arithmetic() {
        let delays = NandDelays::K9F2G08U0B;
        assert_eq!((delays.page_read_us(2048), delays.page_program_us(2048), delays.block_erase_us()), (76, 251, 2000));
        let ops = FlashOps { page_reads: 1000, page_programs: 100, block_erases: 10 };
        assert!((ops.delay_seconds(&delays, 2048) - (0.076 + 0.0251 + 0.02)).abs() < 1e-9);
        assert!(delays.module_parameters().contains(&"do_delays=1".to_string()));
    }

    // The targets read the figures: 8 GiB without an fsoc figure leaves the flat-reads target
    // not measured; 2 GiB's ratio of 20 meets the speed target; 1.5 ≤ 2 programs meets the last.
    #[test]
    fn targets_from_figures() {
        let report = sample_report();
        let met: Vec<Option<bool>> = report.targets.iter().map(|check| check.met).collect();
        assert_eq!(met, [None, Some(true), Some(true)], "{:#?}", report.targets);
        assert!(
            report.targets[0].measured.contains("sizes above 2 GiB not measured"),
            "{}",
            report.targets[0].measured
        );
        let mut missed = report.clone();
        missed.mount[1].fsoc = Some(figures(17, 0.2));
        assert_eq!(check_targets(&missed)[0].met, Some(false), "17 reads is over 16");
    }

    // A JSON written by a run reads back into the same report, and the tables and the chart
    // say "not measured" for what is missing instead of inventing a figure.
    #[test]
    fn json_round_trip_tables_and_chart() {
        let report = sample_report();
        let json = serde_json::to_string_pretty(&report).expect("serialize");
        let back: Report = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(serde_json::to_string_pretty(&back).expect("serialize"), json);
        let tables = markdown_tables(&back);
        assert!(tables.contains("| 256 MiB (2,048 blocks) | 14 | 4,386 | 0.200 | 1.00 | 5.0x |"), "{tables}");
        assert!(tables.contains("| 8 GiB (65,536 blocks) | not measured | 131,094 |"), "{tables}");
        assert!(
            tables.contains("| page programs per create, with the unmount that follows | 1.75 | 2.25 | 0.78 |"),
            "{tables}"
        );
        assert!(
            report.targets[2].measured.contains("(1.75 and 2.25 with the unmount that follows)"),
            "{:#?}",
            report.targets
        );
        assert!(
            tables.contains("sequential write of 64 MiB + fsync (MiB/s) | not measured | not measured | – |"),
            "{tables}"
        );
        let chart = render_chart(&back);
        assert!(chart.starts_with("<svg") && chart.ends_with("</svg>\n"), "{chart}");
        assert_eq!(chart.matches("<polyline").count(), 4, "two series in two panels");
        assert!(chart.contains(">8 GiB<"), "{chart}");
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(4386), "4,386");
        assert_eq!(group_thousands(131_094), "131,094");
    }
}
