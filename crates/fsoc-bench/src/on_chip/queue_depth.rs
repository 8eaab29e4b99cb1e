//! Queued commands (seed 002's NCQ, depth 32) over 9P: 4 KiB random reads of one file on a
//! 4-chip array with 1, 4 and 32 requests in flight, against the array's raw random-read
//! rate measured in the same harness.
//!
//! The reads really go over the protocol with that many in flight (one client, as many threads
//! as the depth, the server's workers executing them against the shared volume), and each is
//! checked. Device time cannot come from that run's clocks: the engine's virtual clock is
//! shared by its reader threads, and the order in which they reach the chips follows the
//! machine's scheduling. So the meter traces every page read with its spare tag (a data page
//! names its file page, so it belongs to exactly one request), and the requests are then
//! replayed in virtual time on the simulator's own per-chip timelines (a fresh `SimFlash` of
//! the same configuration): a closed loop keeping `depth` requests outstanding, each taking the
//! device CPU (one core, first come first served: its 9P frames, one engine call, its pages)
//! and then its pages on their chips, each chip serving in issue order. The raw rate is the
//! same replay of the same pages with no file system: no CPU, 32 in flight.
//!
//! Invariant: the replay issues requests in nondecreasing virtual time, so each chip's queue
//! (`SimFlash`: start = max(issue, busy_until)) sees them in the order a real device would.

use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use fsoc_core::segment::PageTag;
use fsoc_flash::{Flash, PageAddress};
use fsoc_media::{Profile, SimConfig, SimFlash};
use fsoc_serve::ServeConfig;
use serde_json::{json, Value};

use super::cost::Setting;
use super::harness::{io_setup, setup, OnChip, TracedRead};
use crate::target::BenchError;

/// Bytes per read.
pub const READ_BYTES: usize = 4096;

/// The depths reported.
pub const DEPTHS: [usize; 3] = [1, 4, 32];

#[derive(Clone, Copy, Debug)]
pub struct QueueDepthConfig {
    pub chips: u32,
    pub blocks_per_chip: u32,
    pub file_bytes: usize,
    pub reads: usize,
    pub seed: u64,
}

impl QueueDepthConfig {
    /// 4 chips of TLC (4 KiB pages, so a 4 KiB read is one page on one chip), a 64 MiB file,
    /// 2,048 reads per depth.
    pub fn full(seed: u64) -> QueueDepthConfig {
        QueueDepthConfig { chips: 4, blocks_per_chip: 256, file_bytes: 64 << 20, reads: 2048, seed }
    }

    pub fn quick(seed: u64) -> QueueDepthConfig {
        QueueDepthConfig { file_bytes: 8 << 20, reads: 256, ..Self::full(seed) }
    }

    pub fn sim_config(&self) -> SimConfig {
        SimConfig::new(Profile::Tlc, self.chips, self.blocks_per_chip, self.seed)
    }

    fn offsets(&self) -> Vec<u64> {
        let units = (self.file_bytes / READ_BYTES) as u64;
        assert!(self.reads as u64 <= units, "{} distinct reads of a {units}-page file", self.reads);
        let mut state = self.seed ^ 0xd1b5_4a32_d192_ed03;
        let mut chosen = std::collections::HashSet::new();
        let mut offsets = Vec::with_capacity(self.reads);
        while offsets.len() < self.reads {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = state % units;
            if chosen.insert(unit) {
                offsets.push(unit * READ_BYTES as u64);
            }
        }
        offsets
    }
}

/// The file's contents: each 4 KiB unit starts with its index, so a read checks itself.
fn unit_contents(unit: u64) -> [u8; READ_BYTES] {
    let mut bytes = [0x5Au8; READ_BYTES];
    bytes[..8].copy_from_slice(&unit.to_le_bytes());
    bytes
}

/// One request of the replay: its device CPU time and its pages.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub cpu_ns: u64,
    pub pages: Vec<PageAddress>,
}

/// What one depth's run over the protocol gave.
struct Run {
    requests: Vec<Request>,
    frames_per_request: f64,
    bytes_per_request: f64,
    /// Page reads no request could be given (tree nodes read during the run).
    unattributed_reads: usize,
}

/// Replays `requests` with `depth` outstanding on fresh chips of `sim`; returns the virtual
/// time from the first issue to the last completion.
pub fn replay(sim: &SimConfig, requests: &[Request], depth: usize) -> Result<u64, BenchError> {
    assert!(depth >= 1, "a depth of at least one");
    let chips = SimFlash::create(sim.clone()).map_err(|error| setup("replay chips")(error.to_string()))?;
    let mut data = vec![0u8; sim.geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; sim.geometry.spare_bytes as usize];
    // Slots free at these times (a min-heap through Reverse).
    let mut slots: BinaryHeap<std::cmp::Reverse<u64>> = (0..depth).map(|_| std::cmp::Reverse(0)).collect();
    let (mut cpu_free_ns, mut end_ns, mut last_issue_ns) = (0u64, 0u64, 0u64);
    for request in requests {
        let std::cmp::Reverse(issue_ns) = slots.pop().expect("depth slots");
        assert!(issue_ns >= last_issue_ns, "requests issued out of time order");
        last_issue_ns = issue_ns;
        let started_ns = issue_ns.max(cpu_free_ns);
        cpu_free_ns = started_ns + request.cpu_ns;
        let mut done_ns = cpu_free_ns;
        for page in &request.pages {
            let completed = chips
                .read_page(cpu_free_ns, *page, &mut data, &mut spare)
                .map_err(|error| setup("replay read")(error.to_string()))?;
            done_ns = done_ns.max(completed.done_ns);
        }
        end_ns = end_ns.max(done_ns);
        slots.push(std::cmp::Reverse(done_ns));
    }
    Ok(end_ns)
}

fn run_depth(chip: &OnChip, setting: &Setting, depth: usize, offsets: &[u64]) -> Result<Run, BenchError> {
    let file = chip.client().open("/data").map_err(io_setup("open"))?;
    let (traffic, _) = chip.reading();
    chip.meter.start_trace();
    let next = AtomicUsize::new(0);
    let outcome: io::Result<()> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..depth)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    let mut buffer = vec![0u8; READ_BYTES];
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&offset) = offsets.get(index) else { return Ok(()) };
                        let read = file.read_at(&mut buffer, offset)?;
                        let unit = offset / READ_BYTES as u64;
                        if read != READ_BYTES || buffer[..] != unit_contents(unit)[..] {
                            return Err(io::Error::other(format!("read of unit {unit} came back wrong")));
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|worker| worker.join().unwrap_or_else(|_| Err(io::Error::other("panicked"))))
    });
    outcome.map_err(io_setup("queued reads"))?;
    let trace = chip.meter.take_trace();
    let (traffic_after, _) = chip.reading();
    drop(file);
    let traffic = traffic_after.since(&traffic);
    let count = offsets.len() as f64;
    let frames_per_request = traffic.messages as f64 / count;
    let by_unit: HashMap<u64, usize> =
        offsets.iter().enumerate().map(|(index, offset)| (offset / READ_BYTES as u64, index)).collect();
    let mut requests = vec![Request::default(); offsets.len()];
    let mut unattributed = Vec::new();
    for TracedRead { page, tag } in trace {
        match tag {
            Some(PageTag::Data { page_index, .. }) if by_unit.contains_key(&page_index) => {
                requests[by_unit[&page_index]].pages.push(page);
            }
            _ => unattributed.push(page),
        }
    }
    // Pages no request claims (tree nodes) are charged to the first request: they are read
    // once, before the data they lead to.
    let unattributed_reads = unattributed.len();
    if let Some(first) = requests.first_mut() {
        first.pages.extend(unattributed);
    }
    let cpu = setting.cpu;
    for request in &mut requests {
        let cycles = cpu.cycles_per_call
            + cpu.cycles_per_page * request.pages.len() as f64
            + cpu.cycles_per_message * frames_per_request;
        request.cpu_ns = setting.device_ns(cycles).round() as u64;
    }
    Ok(Run { requests, frames_per_request, bytes_per_request: traffic.bytes as f64 / count, unattributed_reads })
}

/// Random 4 KiB reads at each depth of `DEPTHS`, device CPU from `setting` (the modern one:
/// a device that queues commands is not a CompactFlash card).
pub fn run(
    config: &QueueDepthConfig,
    setting: &Setting,
    directory: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, BenchError> {
    let sim = config.sim_config();
    let serve = ServeConfig {
        workers_per_connection_max: 32,
        requests_in_flight_max: 32,
        ..super::harness::quiet_serve_config()
    };
    progress("queue depth: writing the file");
    let chip = OnChip::start(&sim, serve, &directory.join("queue-9p.sock"))?;
    let units = (config.file_bytes / READ_BYTES) as u64;
    let contents: Vec<u8> = (0..units).flat_map(unit_contents).collect();
    chip.write_in_order("/data", &contents).map_err(io_setup("setup"))?;
    drop(contents);
    // Warm the device's node cache: one read per MiB reaches every leaf of the file's extents.
    {
        let file = chip.client().open("/data").map_err(io_setup("warm"))?;
        let mut buffer = vec![0u8; READ_BYTES];
        for offset in (0..config.file_bytes as u64).step_by(1 << 20) {
            file.read_at(&mut buffer, offset).map_err(io_setup("warm"))?;
        }
    }
    let offsets = config.offsets();
    let page_read_ns = sim.read_busy_ns();
    let mut rows = Vec::new();
    let mut raw_requests = None;
    for depth in DEPTHS {
        progress(&format!("queue depth {depth}"));
        let run = run_depth(&chip, setting, depth, &offsets)?;
        let time_ns = replay(&sim, &run.requests, depth)?;
        let pages: usize = run.requests.iter().map(|request| request.pages.len()).sum();
        let bus_ns_per_request = setting.bus.latency_per_message_ns * run.frames_per_request
            + run.bytes_per_request * 1e9 / setting.bus.bandwidth_bytes_per_s;
        let reads_per_s = offsets.len() as f64 * 1e9 / time_ns as f64;
        rows.push(json!({
            "depth": depth,
            "reads": offsets.len(),
            "pages_read": pages,
            "unattributed_page_reads": run.unattributed_reads,
            "frames_per_read": run.frames_per_request,
            "bytes_per_read": run.bytes_per_request,
            "device_cpu_us_per_read": run.requests.iter().map(|request| request.cpu_ns).sum::<u64>() as f64
                / offsets.len() as f64 / 1e3,
            "device_time_us": time_ns as f64 / 1e3,
            "reads_per_s": reads_per_s,
            "mb_per_s": reads_per_s * READ_BYTES as f64 / 1e6,
            "bus_limited_reads_per_s": reads_per_s.min(1e9 / bus_ns_per_request),
        }));
        raw_requests.get_or_insert_with(|| {
            run.requests.iter().map(|request| Request { cpu_ns: 0, pages: request.pages.clone() }).collect::<Vec<_>>()
        });
    }
    drop(chip);
    let raw_requests = raw_requests.unwrap_or_default();
    let raw_time_ns = replay(&sim, &raw_requests, 32)?;
    let raw_reads_per_s = raw_requests.len() as f64 * 1e9 / raw_time_ns as f64;
    let one = rows.first().and_then(|row| row["reads_per_s"].as_f64()).unwrap_or(f64::NAN);
    for row in &mut rows {
        let rate = row["reads_per_s"].as_f64().unwrap_or(f64::NAN);
        row["speedup_over_depth_1"] = json!(rate / one);
        row["fraction_of_raw"] = json!(rate / raw_reads_per_s);
    }
    Ok(json!({
        "config": {
            "profile": "tlc",
            "page_bytes": sim.geometry.page_data_bytes,
            "chips": config.chips,
            "blocks_per_chip": config.blocks_per_chip,
            "file_bytes": config.file_bytes,
            "read_bytes": READ_BYTES,
            "seed": config.seed,
            "setting": setting.name,
            "device_clock_mhz": setting.device_clock_hz / 1e6,
        },
        "page_read_us": page_read_ns as f64 / 1e3,
        "raw": {
            "depth": 32,
            "reads_per_s": raw_reads_per_s,
            "mb_per_s": raw_reads_per_s * READ_BYTES as f64 / 1e6,
            "limit_reads_per_s": f64::from(config.chips) * 1e9 / page_read_ns as f64,
        },
        "depths": rows,
        "targets": { "speedup_32_over_1_min": 3.5, "fraction_of_raw_min": 0.85 },
    }))
}
