//! `fsoc report`: every benchmark of the project in one run, written as one self-contained
//! page (`DIR/index.html`, the charts inline) and one JSON (`DIR/report.json`), each
//! benchmark's own JSON and SVG beside them.
//!
//! The benchmarks run in this process (the simulated ones: `crashtest`, `bench scaling`,
//! `mount`, `readers`, `fsio`, `fsoc`, `postmark`) or as this program started again (`bench
//! fuse` and `bench mtd`, which need root, FUSE, a loop device or nandsim and catch Ctrl-C
//! themselves). Each becomes a section: what was measured, fsoc's figure, the peer's figure in
//! the same harness (littlefs, the conventional device, ext4 through the mount, UBI + UBIFS),
//! the seed's published figure where the seed states one, the ratio, and the command that
//! reproduces it. A benchmark that cannot run here or that `--skip` names is not run: its
//! section says why and, where the repository keeps its committed results, shows those,
//! marked as read from that file. Nothing a benchmark does stops the report; a failure is
//! recorded in its section and makes the command exit non-zero once the report is written.

mod benches;
mod html;
mod seeds;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};

/// `fsoc report`'s options.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Directory for index.html, report.json and each benchmark's JSON and SVG (created if
    /// missing; files of an earlier report there are replaced).
    #[arg(long, default_value = "fsoc-report", value_name = "DIR")]
    out: PathBuf,
    /// Run every benchmark at the size of the committed figures (about 3 minutes; `bench
    /// fuse` as root a few more) instead of the quick runs (about 10 s; `bench fuse --quick`
    /// about 20 s more).
    #[arg(long)]
    full: bool,
    /// Comma-separated benchmarks to leave out: crashtest, scaling, mount, readers, fsio,
    /// fsoc, postmark, fuse, mtd. The report names them with the reason, and shows the
    /// committed results of those the repository keeps (fuse, mtd), marked as such.
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    skip: Vec<String>,
    /// Seed of every simulated benchmark (chips, workloads, power cuts).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Which way fsoc is better: a lower value (times, bytes, reads) or a higher one (rates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Better {
    Lower,
    Higher,
    /// Neither (a count, an error, a speed-up read against the seed's).
    Neither,
}

/// One figure of one experiment: fsoc's, the peer's in the same harness, and the seed's.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Row {
    /// The seed (000–004) whose experiment this is, if any.
    pub seed: Option<&'static str>,
    pub experiment: String,
    pub unit: String,
    pub fsoc: Option<f64>,
    pub peer_name: Option<String>,
    pub peer: Option<f64>,
    /// fsoc ÷ peer.
    pub ratio: Option<f64>,
    pub better: Better,
    /// The ratio in words ("fsoc 2.6× better").
    pub reading: Option<String>,
    /// What the seed published for this experiment, with where.
    pub seed_figure: Option<String>,
    /// Set when this row was read from a committed results file instead of measured now.
    pub committed_file: Option<String>,
    /// Show the ratio as a share (3.4%) rather than a factor, as the seed states it.
    pub ratio_as_percent: bool,
}

impl Row {
    pub fn new(experiment: impl Into<String>, unit: &str, fsoc: Option<f64>) -> Row {
        Row {
            seed: None,
            experiment: experiment.into(),
            unit: unit.to_string(),
            fsoc: fsoc.filter(|value| value.is_finite()),
            peer_name: None,
            peer: None,
            ratio: None,
            better: Better::Neither,
            reading: None,
            seed_figure: None,
            committed_file: None,
            ratio_as_percent: false,
        }
    }

    /// Shows the ratio as a share of the peer's figure.
    pub fn ratio_in_percent(mut self) -> Row {
        self.ratio_as_percent = true;
        self
    }

    /// The peer's figure in the same harness; sets the ratio fsoc ÷ peer and its reading.
    pub fn peer(mut self, name: &str, value: Option<f64>, better: Better) -> Row {
        self.peer_name = Some(name.to_string());
        self.peer = value.filter(|value| value.is_finite());
        self.better = better;
        if let (Some(fsoc), Some(peer)) = (self.fsoc, self.peer) {
            if peer != 0.0 {
                let ratio = fsoc / peer;
                self.ratio = Some(ratio);
                self.reading = Some(reading(ratio, better));
            }
        }
        self
    }

    /// A limit fsoc's figure cannot pass (the raw chips): the ratio is the share of it reached.
    pub fn limit(mut self, name: &str, value: Option<f64>) -> Row {
        self = self.peer(name, value, Better::Higher);
        self.reading = self.ratio.map(|ratio| format!("{:.1}% of the limit", ratio * 100.0));
        self
    }

    /// A ratio that is itself the comparison (fsoc's rate against a limit, say).
    pub fn better(mut self, better: Better) -> Row {
        self.better = better;
        self
    }

    /// The seed this experiment comes from, and what it published (None: no figure).
    pub fn seed(mut self, seed: &'static str, figure: Option<&str>) -> Row {
        self.seed = Some(seed);
        self.seed_figure = figure.map(str::to_string);
        self
    }
}

/// fsoc ÷ peer in words, by which way is better.
fn reading(ratio: f64, better: Better) -> String {
    if !ratio.is_finite() || ratio <= 0.0 {
        return match better {
            Better::Lower if ratio == 0.0 => "fsoc needs none".into(),
            _ => "–".into(),
        };
    }
    if (ratio - 1.0).abs() < 0.01 {
        return "about equal".into();
    }
    let factor = if ratio > 1.0 { ratio } else { 1.0 / ratio };
    let fsoc_better = match better {
        Better::Lower => ratio < 1.0,
        Better::Higher => ratio > 1.0,
        Better::Neither => return format!("fsoc {} the peer", html::times(ratio)),
    };
    format!("fsoc {} {}", html::times(factor), if fsoc_better { "better" } else { "worse" })
}

/// A target of an issue that a benchmark checks.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Target {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

/// A chart shown inline: the SVG text and the file it is in.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Chart {
    pub file: String,
    #[serde(skip)]
    pub svg: String,
}

/// What one benchmark gave: figures, charts, files written, checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    pub rows: Vec<Row>,
    pub charts: Vec<Chart>,
    /// Files this run wrote into the output directory (names relative to it).
    pub files: Vec<String>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
    /// The section's figures in one line (the summary table's).
    pub headline: String,
    /// Problems the measurement found (power-cut failures): the command exits non-zero.
    pub alarms: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Run now.
    Measured,
    /// Not run now (see the reason); its figures come from committed results files.
    Committed,
    /// Not run now (see the reason), and no committed figures exist.
    Skipped,
    /// Run now, and it failed (see the reason).
    Failed,
}

/// One benchmark's section of the report.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Section {
    pub name: &'static str,
    pub title: &'static str,
    pub seeds: &'static [&'static str],
    pub what: &'static str,
    pub peers: &'static str,
    pub status: Status,
    /// Why it was not run (or how it failed).
    pub reason: Option<String>,
    /// The figures in one line.
    pub headline: String,
    /// quick or full, for a measured section.
    pub mode: Option<&'static str>,
    pub command: String,
    pub wall_seconds: f64,
    pub rows: Vec<Row>,
    pub charts: Vec<Chart>,
    pub files: Vec<String>,
    pub committed_files: Vec<String>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
}

/// What every benchmark runner is given.
pub(crate) struct Context<'a> {
    pub out: &'a Path,
    pub full: bool,
    pub seed: u64,
    pub progress: &'a Progress,
}

impl Context<'_> {
    pub fn mode(&self) -> &'static str {
        if self.full {
            "full"
        } else {
            "quick"
        }
    }

    /// Writes `text` to `name` in the output directory and remembers it among the outcome's files.
    pub fn write(&self, outcome: &mut Outcome, name: &str, text: &str) -> Result<(), String> {
        let path = self.out.join(name);
        std::fs::write(&path, text).map_err(|error| format!("{}: {error}", path.display()))?;
        outcome.files.push(name.to_string());
        Ok(())
    }

    /// Writes a JSON value (pretty) as `name`.
    pub fn write_json(&self, outcome: &mut Outcome, name: &str, value: &Value) -> Result<(), String> {
        let text = serde_json::to_string_pretty(value).map_err(|error| error.to_string())?;
        self.write(outcome, name, &(text + "\n"))
    }

    /// Writes a chart as `name` and shows it inline.
    pub fn chart(&self, outcome: &mut Outcome, name: &str, svg: String) -> Result<(), String> {
        self.write(outcome, name, &svg)?;
        outcome.charts.push(Chart { file: name.to_string(), svg });
        Ok(())
    }
}

/// Progress bars: one over the benchmarks, one for the benchmark running (its own steps,
/// counted where it counts them). Without a terminal, a line per benchmark on stderr.
pub(crate) struct Progress {
    multi: MultiProgress,
    overall: ProgressBar,
    current: ProgressBar,
}

impl Progress {
    fn new(benchmarks: u64) -> Progress {
        let target =
            if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let multi = MultiProgress::with_draw_target(target);
        let overall = multi.add(ProgressBar::new(benchmarks));
        overall.set_style(
            ProgressStyle::with_template("{spinner} fsoc report [{bar:30}] {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        overall.enable_steady_tick(Duration::from_millis(120));
        let current = multi.add(ProgressBar::new(0));
        current.set_style(Self::text_style());
        Progress { multi, overall, current }
    }

    fn text_style() -> ProgressStyle {
        ProgressStyle::with_template("  {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner())
    }

    fn hidden(&self) -> bool {
        self.multi.is_hidden()
    }

    fn start(&self, name: &str, title: &str) {
        self.overall.set_message(name.to_string());
        self.current.set_style(Self::text_style());
        self.current.set_length(0);
        self.current.set_position(0);
        self.current.set_message(title.to_string());
        if self.hidden() {
            eprintln!("fsoc report: {name}: {title}…");
        }
    }

    /// A line of the running benchmark's own progress.
    pub fn message(&self, text: &str) {
        self.current.set_message(text.to_string());
    }

    /// `done` of `total` steps of the running benchmark, with what they are.
    pub fn counts(&self, done: u64, total: u64, what: &str) {
        if self.current.length() != Some(total) || self.current.position() > done {
            self.current.set_style(
                ProgressStyle::with_template("  [{bar:30}] {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            self.current.set_length(total);
        }
        self.current.set_position(done);
        self.current.set_message(what.to_string());
    }

    /// Keeps the bars moving while waiting on a program.
    pub fn tick(&self) {
        self.current.tick();
    }

    fn finish_one(&self, line: &str) {
        self.overall.inc(1);
        // Without a terminal the start lines show the progress and the summary follows.
        if !self.hidden() {
            let _ = self.multi.println(line);
        }
    }

    fn finish(&self) {
        self.current.finish_and_clear();
        self.overall.finish_and_clear();
    }
}

/// `fsoc report`.
pub fn run(args: ReportArgs) -> Result<(), String> {
    let benchmarks = benches::all();
    for name in &args.skip {
        if !benchmarks.iter().any(|benchmark| benchmark.name == name) {
            let names: Vec<&str> = benchmarks.iter().map(|benchmark| benchmark.name).collect();
            return Err(format!("--skip {name}: no such benchmark (the benchmarks: {})", names.join(", ")));
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|error| format!("{}: {error}", args.out.display()))?;
    let started = Instant::now();
    let header_start = machine_and_code();
    let progress = Progress::new(benchmarks.len() as u64);
    let context = Context { out: &args.out, full: args.full, seed: args.seed, progress: &progress };
    let mut sections = Vec::new();
    let mut alarms = Vec::new();
    for benchmark in &benchmarks {
        progress.start(benchmark.name, benchmark.title);
        let section_started = Instant::now();
        let unavailable = if args.skip.iter().any(|name| name == benchmark.name) {
            Some(format!("left out with --skip {}", benchmark.name))
        } else {
            (benchmark.unavailable)(args.full)
        };
        let (status, reason, outcome) = match unavailable {
            Some(reason) => match benchmark.committed.map(|committed| committed(&context)) {
                Some(Ok(outcome)) => (Status::Committed, Some(reason), outcome),
                Some(Err(error)) => (
                    Status::Skipped,
                    Some(format!("{reason}; its committed results could not be read: {error}")),
                    Outcome::default(),
                ),
                None => (Status::Skipped, Some(reason), Outcome::default()),
            },
            None => match (benchmark.run)(&context) {
                Ok(outcome) => (Status::Measured, None, outcome),
                Err(error) => (Status::Failed, Some(error), Outcome::default()),
            },
        };
        let wall_seconds = if status == Status::Measured || status == Status::Failed {
            section_started.elapsed().as_secs_f64()
        } else {
            0.0
        };
        let committed_files = committed_files(&outcome.rows);
        alarms.extend(outcome.alarms.iter().map(|alarm| format!("{}: {alarm}", benchmark.name)));
        if status == Status::Failed {
            alarms.push(format!("{} failed: {}", benchmark.name, reason.as_deref().unwrap_or("")));
        }
        let section = Section {
            name: benchmark.name,
            title: benchmark.title,
            seeds: benchmark.seeds,
            what: benchmark.what,
            peers: benchmark.peers,
            status,
            reason,
            headline: outcome.headline,
            mode: (status == Status::Measured).then(|| context.mode()),
            command: (benchmark.command)(args.full, args.seed),
            wall_seconds,
            rows: outcome.rows,
            charts: outcome.charts,
            files: outcome.files,
            committed_files,
            targets: outcome.targets,
            notes: outcome.notes,
        };
        progress.finish_one(&status_line(&section));
        sections.push(section);
    }
    progress.finish();
    let header = Header {
        mode: context.mode(),
        seed: args.seed,
        command: command_line(&args),
        wall_seconds: started.elapsed().as_secs_f64(),
        load_average_end: load_average(),
        ..header_start
    };
    let report = report_json(&header, &sections);
    let json_path = args.out.join("report.json");
    let text = serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|error| format!("{}: {error}", json_path.display()))?;
    let html_path = args.out.join("index.html");
    std::fs::write(&html_path, html::page(&header, &sections))
        .map_err(|error| format!("{}: {error}", html_path.display()))?;
    for section in &sections {
        println!("{}", status_line(section));
    }
    println!(
        "wrote {} and {} ({} mode, {:.0} s)",
        html_path.display(),
        json_path.display(),
        header.mode,
        header.wall_seconds
    );
    if alarms.is_empty() {
        Ok(())
    } else {
        Err(format!("the report is written, but:\n  - {}", alarms.join("\n  - ")))
    }
}

/// One line per benchmark: its status, and why or how long.
fn status_line(section: &Section) -> String {
    match section.status {
        Status::Measured => {
            format!("{:>9}: measured ({}, {:.1} s)", section.name, section.mode.unwrap_or("?"), section.wall_seconds)
        }
        Status::Committed => format!(
            "{:>9}: not run ({}); committed figures from {}",
            section.name,
            section.reason.as_deref().unwrap_or(""),
            section.committed_files.join(", ")
        ),
        Status::Skipped => format!("{:>9}: skipped ({})", section.name, section.reason.as_deref().unwrap_or("")),
        Status::Failed => format!("{:>9}: FAILED: {}", section.name, section.reason.as_deref().unwrap_or("")),
    }
}

fn committed_files(rows: &[Row]) -> Vec<String> {
    let mut files: Vec<String> = rows.iter().filter_map(|row| row.committed_file.clone()).collect();
    files.sort();
    files.dedup();
    files
}

fn command_line(args: &ReportArgs) -> String {
    let mut command = format!("fsoc report --out {}", args.out.display());
    if args.full {
        command.push_str(" --full");
    }
    if !args.skip.is_empty() {
        command.push_str(&format!(" --skip {}", args.skip.join(",")));
    }
    if args.seed != 1 {
        command.push_str(&format!(" --seed {}", args.seed));
    }
    command
}

/// The run as a whole: when, where, what code, how.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Header {
    pub mode: &'static str,
    pub seed: u64,
    pub command: String,
    pub generated_utc: String,
    pub code: String,
    pub version: &'static str,
    pub machine: String,
    pub load_average_start: String,
    pub load_average_end: String,
    pub wall_seconds: f64,
}

fn machine_and_code() -> Header {
    let now = time::OffsetDateTime::now_utc();
    let generated_utc = format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute()
    );
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |count| count.get());
    let kernel =
        std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|text| text.trim().to_string()).unwrap_or_default();
    let memory_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("MemTotal:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib >> 10);
    Header {
        generated_utc,
        code: git_commit(),
        version: env!("CARGO_PKG_VERSION"),
        machine: format!("{cpu_model}, {cpus} CPUs, {memory_mib} MiB, Linux {kernel}"),
        load_average_start: load_average(),
        ..Header::default()
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The git commit of the working directory, if it is a checkout (with "+ changes" when the
/// tracked files differ from it).
fn git_commit() -> String {
    let output = |arguments: &[&str]| {
        std::process::Command::new("git")
            .args(arguments)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
    };
    match output(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            let dirty = output(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|text| !text.is_empty());
            if dirty {
                format!("{commit} + uncommitted changes")
            } else {
                commit
            }
        }
        _ => "unknown (not run in a git checkout)".into(),
    }
}

/// report.json: the header, every benchmark (its status and rows), and the rows again by seed.
fn report_json(header: &Header, sections: &[Section]) -> Value {
    let by_seed: Vec<Value> = seeds::SEEDS
        .iter()
        .map(|seed| {
            let experiments: Vec<Value> = sections
                .iter()
                .flat_map(|section| {
                    section.rows.iter().filter(|row| row.seed == Some(seed.id)).map(move |row| {
                        let mut value = serde_json::to_value(row).unwrap_or(Value::Null);
                        value["benchmark"] = json!(section.name);
                        value["status"] = json!(section.status);
                        value
                    })
                })
                .collect();
            json!({"seed": seed.id, "file": seed.file, "title": seed.title, "experiments": experiments})
        })
        .collect();
    json!({
        "report": header,
        "ratio": "fsoc ÷ peer; `better` says which way is better for fsoc",
        "status": {
            "measured": "run now, in the report's mode",
            "committed": "not run now (reason); figures read from the committed results files named",
            "skipped": "not run now (reason); no figures",
            "failed": "run now and failed (reason)",
        },
        "benchmarks": sections,
        "seeds": by_seed,
    })
}
