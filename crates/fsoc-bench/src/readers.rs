//! Parallel readers on a threaded chip array (wall-clock time: this measures the engine's
//! concurrency, not the simulated device).
//!
//! A 4-chip MLC array of chip files (`ThreadedFlash`, one worker thread per chip) holds four
//! large files. Two measurements, each against its own baseline in the same run:
//! - throughput: one thread reads one file end to end, then four threads each read a
//!   different file at once (through one shared `&FileSystem`); the ratio of aggregate MB/s;
//! - latency: 4 KiB reads at random offsets on an idle volume, then the same while a writer
//!   thread streams 64 KiB writes each followed by a transaction point (fsync); median and p99
//!   of each, and their ratios. The writer runs twice: as the FUSE mount and the 9P server do,
//!   holding the volume exclusively while it changes it and starts the commit, then waiting
//!   for the flash's flush with the volume released (`FileSystem::begin_fsync`); and, for
//!   comparison in the same run, holding the volume through the flush too (`fsync`).
//!
//! Readers hold a shared `RwLock` guard around each call, as the FUSE mount does.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use fsoc_array::ThreadedFlash;
use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::rng::SeededRng;
use fsoc_media::{Profile, SimConfig};
use serde_json::{json, Value};

use crate::svg_chart::{self, LinearScale};
use crate::target::BenchError;

/// What to run.
#[derive(Clone, Debug)]
pub struct ReadersConfig {
    pub chip_count: u32,
    /// Erase blocks per chip.
    pub block_count: u32,
    /// Size of each of the four files.
    pub file_bytes: usize,
    /// Bytes per read call in the throughput runs.
    pub read_bytes: usize,
    /// Random 4 KiB reads per latency run.
    pub latency_reads: usize,
    /// The paced writer's period: one fsync'd 64 KiB write per period, in both locking modes,
    /// so their latencies are compared at the same write load (an unpaced writer's rate depends
    /// on how much CPU the readers leave it, which differs between the modes).
    pub writer_period: Duration,
    pub seed: u64,
}

impl ReadersConfig {
    /// Four 32 MiB files on four 256 MiB chips.
    pub fn full(seed: u64) -> ReadersConfig {
        ReadersConfig {
            chip_count: 4,
            block_count: 2048,
            file_bytes: 32 << 20,
            read_bytes: 1 << 20,
            latency_reads: 10_000,
            writer_period: Duration::from_millis(2),
            seed,
        }
    }

    /// A few seconds' worth, for a smoke run.
    pub fn quick(seed: u64) -> ReadersConfig {
        ReadersConfig { file_bytes: 4 << 20, latency_reads: 500, ..ReadersConfig::full(seed) }
    }
}

const FILES: usize = 4;
const LATENCY_READ_BYTES: usize = 4096;
const WRITER_CHUNK_BYTES: usize = 64 << 10;

fn bench_error(context: &str) -> impl Fn(String) -> BenchError + '_ {
    move |reason| BenchError::Setup(format!("{context}: {reason}"))
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

/// CPU seconds this process has used (every thread, user and system).
fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always a valid target.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A throughput run: aggregate MB/s and the CPUs it kept busy on average (the readers and the
/// chip workers together: CPU seconds over wall seconds).
struct Throughput {
    mb_s: f64,
    cpus_busy: f64,
}

/// Reads `inodes[i]` end to end on thread i, all at once.
fn read_files(
    volume: &RwLock<FileSystem<ThreadedFlash>>,
    inodes: &[u64],
    config: &ReadersConfig,
) -> Result<Throughput, BenchError> {
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = inodes
            .iter()
            .map(|&inode| {
                scope.spawn(move || {
                    let mut offset = 0usize;
                    while offset < config.file_bytes {
                        let guard = volume.read().map_err(|_| "lock poisoned".to_string())?;
                        let bytes =
                            guard.read(inode, offset as u64, config.read_bytes).map_err(|error| error.to_string())?;
                        drop(guard);
                        if bytes.is_empty() {
                            return Err(format!("short file: {offset} bytes"));
                        }
                        offset += bytes.len();
                    }
                    Ok(offset)
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap_or_else(|_| Err("reader panicked".into()))).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    let mut total = 0usize;
    for result in results {
        total += result.map_err(bench_error("read"))?;
    }
    Ok(Throughput { mb_s: total as f64 / 1e6 / elapsed, cpus_busy: cpu / elapsed.max(1e-9) })
}

/// 4 KiB reads at seeded random offsets of `inode`; latencies sorted.
fn read_latencies(
    volume: &RwLock<FileSystem<ThreadedFlash>>,
    inode: u64,
    config: &ReadersConfig,
    seed: u64,
) -> Result<Vec<Duration>, BenchError> {
    let mut rng = SeededRng::new(seed);
    let mut latencies = Vec::with_capacity(config.latency_reads);
    let pages = (config.file_bytes / LATENCY_READ_BYTES) as u64;
    for _ in 0..config.latency_reads {
        let offset = rng.below(pages) * LATENCY_READ_BYTES as u64;
        let started = Instant::now();
        let guard = volume.read().map_err(|_| BenchError::Setup("lock poisoned".into()))?;
        let bytes =
            guard.read(inode, offset, LATENCY_READ_BYTES).map_err(|error| BenchError::Setup(error.to_string()))?;
        drop(guard);
        latencies.push(started.elapsed());
        if bytes.len() != LATENCY_READ_BYTES {
            return Err(BenchError::Setup(format!("short read at {offset}")));
        }
    }
    latencies.sort_unstable();
    Ok(latencies)
}

/// Whether the benchmark's writer keeps the volume locked while the flash flushes its commit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FlushHeld {
    /// `begin_fsync` under the lock, the flush's wait after releasing it (the engine's way).
    Released,
    /// `fsync` under the lock: readers wait for the flush too.
    Held,
}

/// 4 KiB read latencies on `inode` while a writer streams fsync'd 64 KiB writes to
/// `writer_file` (one per `pace` if given, else back to back); also how long the writer held
/// the volume for each write and fsync, sorted.
fn loaded_latencies(
    volume: &RwLock<FileSystem<ThreadedFlash>>,
    writer_file: u64,
    inode: u64,
    config: &ReadersConfig,
    flush: FlushHeld,
    pace: Option<Duration>,
) -> Result<(Vec<Duration>, Vec<Duration>), BenchError> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<(Vec<Duration>, Vec<Duration>), BenchError> {
        let writer = scope.spawn(|| -> Result<Vec<Duration>, String> {
            let data = vec![0x5au8; WRITER_CHUNK_BYTES];
            let mut held = Vec::new();
            let mut offset = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::Acquire) {
                if let Some(period) = pace {
                    next += period;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                let mut fs = volume.write().map_err(|_| "lock poisoned".to_string())?;
                let locked = Instant::now();
                fs.write(writer_file, offset, &data).map_err(|error| error.to_string())?;
                match flush {
                    FlushHeld::Held => {
                        fs.fsync(writer_file).map_err(|error| error.to_string())?;
                        drop(fs);
                        held.push(locked.elapsed());
                    }
                    FlushHeld::Released => {
                        let started = fs.begin_fsync(writer_file).map_err(|error| error.to_string())?;
                        drop(fs);
                        held.push(locked.elapsed());
                        started.wait().map_err(|error| error.to_string())?;
                    }
                }
                // Rewrite the same 8 MiB so the volume does not fill.
                offset = (offset + WRITER_CHUNK_BYTES as u64) % (8 << 20);
            }
            held.sort_unstable();
            Ok(held)
        });
        let loaded = read_latencies(volume, inode, config, config.seed ^ 1);
        stop.store(true, Ordering::Release);
        let writes = writer.join().unwrap_or_else(|_| Err("writer panicked".into())).map_err(bench_error("writer"))?;
        Ok((loaded?, writes))
    })
}

fn microseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Runs the parallel-readers benchmark on chip files in /dev/shm (else the temporary
/// directory), removed afterwards, and returns its JSON report.
pub fn run_in_scratch(quick: bool, seed: u64, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    let config = if quick { ReadersConfig::quick(seed) } else { ReadersConfig::full(seed) };
    let shm = Path::new("/dev/shm");
    let directory = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
        .join(format!("fsoc-readers-{}", std::process::id()));
    std::fs::create_dir(&directory).map_err(|error| BenchError::Setup(format!("{}: {error}", directory.display())))?;
    let report = run(&config, &directory, progress);
    let _ = std::fs::remove_dir_all(&directory);
    report
}

/// Runs both measurements on chip files created under `directory` (removed afterwards).
pub fn run(config: &ReadersConfig, directory: &Path, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    let base = directory.join("readers-array");
    let sim = SimConfig::new(Profile::Mlc, config.chip_count, config.block_count, config.seed);
    let flash = ThreadedFlash::create(&base, sim).map_err(|error| BenchError::Setup(error.to_string()))?;
    let paths = flash.paths().to_vec();
    let result = measure(config, flash, progress);
    for path in paths {
        let _ = std::fs::remove_file(path);
    }
    result
}

fn measure(config: &ReadersConfig, flash: ThreadedFlash, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    let setup = |error: fsoc_core::FsError| BenchError::Setup(error.to_string());
    let mut fs = FileSystem::format(flash, FsConfig::default(), config.seed).map_err(setup)?;
    progress("writing the files");
    let mut inodes = Vec::new();
    let chunk: Vec<u8> = (0..1usize << 20).map(|index| (index % 251) as u8).collect();
    for index in 0..FILES {
        let name = format!("file{index}");
        let inode = fs.create(1, name.as_bytes(), FileKind::File, 0o644, 0, 0, None).map_err(setup)?;
        let mut offset = 0;
        while offset < config.file_bytes {
            let length = chunk.len().min(config.file_bytes - offset);
            fs.write(inode, offset as u64, &chunk[..length]).map_err(setup)?;
            offset += length;
        }
        inodes.push(inode);
    }
    let writer_file = fs.create(1, b"stream", FileKind::File, 0o644, 0, 0, None).map_err(setup)?;
    fs.commit_for_sync().map_err(setup)?;
    let volume = RwLock::new(fs);

    progress("throughput: one reader");
    // Warm-up pass, so both runs start with the same cache state (the node cache holds the
    // upper tree levels after it).
    read_files(&volume, &inodes[..1], config)?;
    let one = read_files(&volume, &inodes[..1], config)?;
    progress("throughput: four readers");
    let four = read_files(&volume, &inodes, config)?;

    progress("latency: idle");
    let idle = read_latencies(&volume, inodes[0], config, config.seed)?;
    let (idle_median, idle_p99) = (percentile(&idle, 0.5), percentile(&idle, 0.99));
    let mut rows = Vec::new();
    for (pace, flush, what) in [
        (None, FlushHeld::Released, "flush outside the lock"),
        (None, FlushHeld::Held, "flush inside the lock"),
        (Some(config.writer_period), FlushHeld::Released, "flush outside the lock, paced writer"),
        (Some(config.writer_period), FlushHeld::Held, "flush inside the lock, paced writer"),
    ] {
        progress(&format!("latency: with a writer streaming fsync'd writes ({what})"));
        let (loaded, held) = loaded_latencies(&volume, writer_file, inodes[0], config, flush, pace)?;
        rows.push(latency_row(idle_median, idle_p99, &loaded, &held));
    }
    let mut rows = rows.into_iter();
    let (Some(mut unpaced), Some(unpaced_held), Some(paced), Some(paced_held)) =
        (rows.next(), rows.next(), rows.next(), rows.next())
    else {
        return Err(BenchError::Setup("latency rows missing".into()));
    };

    let cpus = std::thread::available_parallelism().map_or(1, |count| count.get());
    // What four readers could reach at most on this machine: four times one reader, unless
    // the CPUs run out first (one reader and its chip workers already keep `one.cpus_busy`
    // CPUs busy).
    let ratio_bound = (cpus as f64 / one.cpus_busy.max(1e-9)).min(FILES as f64);
    if let Value::Object(fields) = &mut unpaced {
        fields.insert("idle_median_us".into(), json!(microseconds(idle_median)));
        fields.insert("idle_p99_us".into(), json!(microseconds(idle_p99)));
        fields.insert("target_ratio_max".into(), json!(3.0));
        fields.insert("flush_inside_lock".into(), unpaced_held);
        fields.insert(
            "paced".into(),
            json!({
                "writer_period_us": microseconds(config.writer_period),
                "flush_outside_lock": paced,
                "flush_inside_lock": paced_held,
            }),
        );
    }
    Ok(json!({
        "config": {
            "chips": config.chip_count,
            "profile": "mlc",
            "file_mib": config.file_bytes >> 20,
            "read_bytes": config.read_bytes,
            "latency_reads": config.latency_reads,
            "seed": config.seed,
            "cpus": cpus,
        },
        "throughput": {
            "one_reader_mb_s": one.mb_s,
            "four_readers_mb_s": four.mb_s,
            "ratio": four.mb_s / one.mb_s.max(1e-9),
            "one_reader_cpus_busy": one.cpus_busy,
            "four_readers_cpus_busy": four.cpus_busy,
            "ratio_bound_on_this_machine": ratio_bound,
            "target_ratio_min": 3.0,
        },
        "latency": unpaced,
    }))
}

/// One latency comparison: read latencies under a writer against the idle ones, and how long
/// the writer held the volume per write and fsync.
fn latency_row(idle_median: Duration, idle_p99: Duration, loaded: &[Duration], held: &[Duration]) -> Value {
    let (median, p99) = (percentile(loaded, 0.5), percentile(loaded, 0.99));
    json!({
        "with_writer_median_us": microseconds(median),
        "with_writer_p99_us": microseconds(p99),
        "median_ratio": microseconds(median) / microseconds(idle_median).max(1e-9),
        "p99_ratio": microseconds(p99) / microseconds(idle_p99).max(1e-9),
        "writer_fsyncs": held.len(),
        "writer_locked_median_us": microseconds(percentile(held, 0.5)),
        "writer_locked_p99_us": microseconds(percentile(held, 0.99)),
    })
}

/// The chart `fsoc report` shows: read latency idle and with the writer (flush outside the
/// lock, and holding it), median and p99, as bars.
pub fn chart(report: &Value) -> String {
    let number = |value: &Value| value.as_f64().filter(|value| value.is_finite());
    let latency = &report["latency"];
    let paced = &latency["paced"];
    let (outside, held) = if paced.is_object() {
        (&paced["flush_outside_lock"], &paced["flush_inside_lock"])
    } else {
        (latency, &latency["flush_inside_lock"])
    };
    let groups = [
        ("idle", number(&latency["idle_median_us"]), number(&latency["idle_p99_us"])),
        (
            "writer, flush outside the lock",
            number(&outside["with_writer_median_us"]),
            number(&outside["with_writer_p99_us"]),
        ),
        ("writer holding the lock", number(&held["with_writer_median_us"]), number(&held["with_writer_p99_us"])),
    ];
    const LEFT: f64 = 70.0;
    const TOP: f64 = 50.0;
    const WIDTH: f64 = 480.0;
    const HEIGHT: f64 = 220.0;
    let high = groups.iter().flat_map(|(_, median, p99)| [*median, *p99]).flatten().fold(1.0, f64::max);
    let axis = LinearScale::new(0.0, high * 1.1, TOP, HEIGHT);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, LEFT + WIDTH + 30.0, TOP + HEIGHT + 60.0);
    svg_chart::label(
        &mut svg,
        LEFT,
        22.0,
        "start",
        "4 KiB read latency, 4-chip array of chip files (µs, wall clock; paced writer)",
    );
    svg_chart::frame(&mut svg, LEFT, TOP, WIDTH, HEIGHT);
    axis.grid(&mut svg, LEFT, WIDTH);
    let slot = WIDTH / groups.len() as f64;
    for (index, (name, median, p99)) in groups.iter().enumerate() {
        let left = LEFT + slot * index as f64 + slot * 0.15;
        for (offset, value, color) in [(0.0, median, "#1f77b4"), (slot * 0.35, p99, "#ff7f0e")] {
            if let Some(value) = value {
                let top = axis.y(*value);
                svg_chart::bar(&mut svg, left + offset, top, slot * 0.3, axis.y(0.0) - top, color);
                svg_chart::label(&mut svg, left + offset + slot * 0.15, top - 3.0, "middle", &format!("{value:.0}"));
            }
        }
        svg_chart::label(&mut svg, left + slot * 0.35, TOP + HEIGHT + 16.0, "middle", name);
    }
    svg_chart::bar(&mut svg, LEFT, TOP + HEIGHT + 32.0, 10.0, 10.0, "#1f77b4");
    svg_chart::label(&mut svg, LEFT + 14.0, TOP + HEIGHT + 41.0, "start", "median");
    svg_chart::bar(&mut svg, LEFT + 80.0, TOP + HEIGHT + 32.0, 10.0, 10.0, "#ff7f0e");
    svg_chart::label(&mut svg, LEFT + 94.0, TOP + HEIGHT + 41.0, "start", "p99");
    svg_chart::end(&mut svg);
    svg
}
