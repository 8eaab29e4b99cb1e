//! The workloads of `fsoc bench fuse`, each run in a directory of the volume measured: PostMark
//! in seed 004's configuration, dbench, four fio jobs, and a metadata storm; and the parsers of
//! their reports. Knows nothing of which file system it runs on.
//!
//! Invariant: every workload gets the same parameters on every file system (fixed seeds where
//! the tool has one), and its figures come from the tool's own report or from wall time around
//! it, never from anything the file system says about itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::mounts::{check_interrupted, run_program, run_program_ok};

const MIB: u64 = 1 << 20;

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Times: the fsoc/ext4 ratio above 1 means fsoc is slower.
    Lower,
    /// Rates: the fsoc/ext4 ratio below 1 means fsoc is slower.
    Higher,
}

impl Better {
    pub fn name(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// One figure a workload reports.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    pub better: Better,
}

const fn time(name: &'static str, label: &'static str) -> Metric {
    Metric { name, label, unit: "s", better: Better::Lower }
}

const fn rate(name: &'static str, label: &'static str, unit: &'static str) -> Metric {
    Metric { name, label, unit, better: Better::Higher }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Postmark,
    Dbench,
    Fio,
    MetadataStorm,
    SmallWrites,
}

impl Workload {
    pub const ALL: [Workload; 5] =
        [Workload::Postmark, Workload::Dbench, Workload::Fio, Workload::MetadataStorm, Workload::SmallWrites];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Postmark => "postmark",
            Workload::Dbench => "dbench",
            Workload::Fio => "fio",
            Workload::MetadataStorm => "metadata_storm",
            Workload::SmallWrites => "small_writes",
        }
    }

    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|workload| workload.name() == name)
    }

    /// The program the workload runs (found on PATH before the run).
    pub fn program(self) -> &'static str {
        match self {
            Workload::Postmark => "postmark",
            Workload::Dbench => "dbench",
            Workload::Fio => "fio",
            Workload::MetadataStorm => "ls",
            // Runs in this process; `ls` stands for "nothing to install".
            Workload::SmallWrites => "ls",
        }
    }

    pub fn metrics(self) -> &'static [Metric] {
        const POSTMARK: [Metric; 1] = [time("wall_s", "wall time")];
        const DBENCH: [Metric; 1] = [rate("throughput_mb_s", "throughput", "MB/s")];
        const FIO: [Metric; 4] = [
            rate("seq_write_mib_s", "seq. write 1 MiB", "MiB/s"),
            rate("seq_read_mib_s", "seq. read 1 MiB", "MiB/s"),
            rate("rand_write_iops", "rand. write 4 KiB+fsync", "IOPS"),
            rate("rand_read_iops", "rand. read 4 KiB", "IOPS"),
        ];
        const STORM: [Metric; 4] =
            [time("create_s", "create"), time("ls_s", "ls -l"), time("delete_s", "delete"), time("total_s", "total")];
        const SMALL: [Metric; 2] = [
            rate("append_4b_writes_s", "4 B O_APPEND writes, 6 writers", "writes/s"),
            rate("write_512b_fsync_s", "512 B write + fsync", "ops/s"),
        ];
        match self {
            Workload::Postmark => &POSTMARK,
            Workload::Dbench => &DBENCH,
            Workload::Fio => &FIO,
            Workload::MetadataStorm => &STORM,
            Workload::SmallWrites => &SMALL,
        }
    }
}

/// How big each workload is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Scale {
    pub postmark_subdirectories: u32,
    pub postmark_files: u32,
    pub postmark_size_min_bytes: u32,
    pub postmark_size_max_bytes: u32,
    pub postmark_transactions: u32,
    pub postmark_block_bytes: u32,
    /// A fixed seed, so both file systems see the same operations.
    pub postmark_seed: u32,
    pub dbench_clients: u32,
    pub dbench_seconds: u32,
    pub fio_sequential_bytes: u64,
    /// Random jobs stop after this long if they have not covered the file yet.
    pub fio_random_seconds: u32,
    pub storm_files: u32,
    /// How long each small-write phase runs.
    pub small_write_seconds: f64,
    /// Limit for any one program run.
    pub program_timeout_seconds: u64,
}

impl Scale {
    /// Seed 004's PostMark (10 subdirectories, 1,000 files of 512 B–16 KiB, 10,000
    /// transactions, 512 B reads and writes, unbuffered), dbench 4 clients for 10 s, fio on a
    /// 256 MiB file, 10,000 files in the metadata storm.
    pub fn full() -> Scale {
        Scale {
            postmark_subdirectories: 10,
            postmark_files: 1000,
            postmark_size_min_bytes: 512,
            postmark_size_max_bytes: 16384,
            postmark_transactions: 10_000,
            postmark_block_bytes: 512,
            postmark_seed: 4,
            dbench_clients: 4,
            dbench_seconds: 10,
            fio_sequential_bytes: 256 * MIB,
            fio_random_seconds: 15,
            storm_files: 10_000,
            small_write_seconds: 5.0,
            program_timeout_seconds: 900,
        }
    }

    /// A smoke run: everything scaled down so both file systems finish in well under a minute.
    pub fn quick() -> Scale {
        Scale {
            postmark_files: 100,
            postmark_transactions: 1000,
            dbench_seconds: 3,
            fio_sequential_bytes: 32 * MIB,
            fio_random_seconds: 2,
            storm_files: 1000,
            small_write_seconds: 1.0,
            program_timeout_seconds: 120,
            ..Scale::full()
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.program_timeout_seconds)
    }

    /// PostMark's commands (it reads them from a file given as its argument).
    pub fn postmark_script(&self, location: &Path) -> String {
        format!(
            "set location {}\nset subdirectories {}\nset number {}\nset size {} {}\nset transactions {}\n\
             set read {}\nset write {}\nset buffering false\nset seed {}\nrun\nquit\n",
            location.display(),
            self.postmark_subdirectories,
            self.postmark_files,
            self.postmark_size_min_bytes,
            self.postmark_size_max_bytes,
            self.postmark_transactions,
            self.postmark_block_bytes,
            self.postmark_block_bytes,
            self.postmark_seed,
        )
    }
}

/// Where dbench's load file may be (Debian installs the first).
pub const DBENCH_LOADFILES: [&str; 2] = ["/usr/share/dbench/client.txt", "/usr/local/share/dbench/client.txt"];

/// What the workloads need besides their program.
pub struct Tools {
    pub dbench_loadfile: Option<PathBuf>,
}

/// The directory of `program` on PATH, as `command -v` finds it.
pub fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|directory| directory.join(program)).find(|path| {
        fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
    })
}

/// Why `workload` cannot run here, if it cannot.
pub fn missing_tool(workload: Workload, tools: &Tools) -> Option<String> {
    if find_program(workload.program()).is_none() {
        return Some(format!("{} is not installed (scripts/setup.sh installs it)", workload.program()));
    }
    if workload == Workload::Dbench && tools.dbench_loadfile.is_none() {
        return Some(format!("dbench's load file is missing (looked for {})", DBENCH_LOADFILES.join(", ")));
    }
    None
}

/// Runs `workload` in `directory` (on the volume measured); program output goes to `scratch`.
/// Returns each of `workload.metrics()` in order.
pub fn run(
    workload: Workload,
    directory: &Path,
    scratch: &Path,
    scale: &Scale,
    tools: &Tools,
) -> Result<Vec<f64>, String> {
    fs::create_dir(directory).map_err(|error| format!("{}: {error}", directory.display()))?;
    let values = match workload {
        Workload::Postmark => postmark(directory, scratch, scale)?,
        Workload::Dbench => dbench(directory, scratch, scale, tools)?,
        Workload::Fio => fio(directory, scratch, scale)?,
        Workload::MetadataStorm => metadata_storm(directory, scratch, scale)?,
        Workload::SmallWrites => small_writes(directory, scale)?,
    };
    assert_eq!(values.len(), workload.metrics().len(), "{} returned a value per metric", workload.name());
    Ok(values)
}

fn postmark(directory: &Path, scratch: &Path, scale: &Scale) -> Result<Vec<f64>, String> {
    let script = scratch.join("postmark.cfg");
    fs::write(&script, scale.postmark_script(directory)).map_err(|error| format!("{}: {error}", script.display()))?;
    let output = run_program_ok(Command::new("postmark").arg(&script), scratch, scale.timeout())?;
    let _ = fs::remove_file(&script);
    // PostMark reports whole seconds only: the wall time of the process is the measurement.
    if !output.stdout.contains("Deleting subdirectories...Done") {
        return Err(format!("postmark did not finish its run: {}", output.describe()));
    }
    Ok(vec![output.wall.as_secs_f64()])
}

/// `Throughput 1024.37 MB/sec  4 clients …` → 1024.37.
pub fn parse_dbench_throughput(stdout: &str) -> Option<f64> {
    let line = stdout.lines().rev().find(|line| line.trim_start().starts_with("Throughput "))?;
    line.split_whitespace().nth(1)?.parse().ok().filter(|value: &f64| value.is_finite())
}

fn dbench(directory: &Path, scratch: &Path, scale: &Scale, tools: &Tools) -> Result<Vec<f64>, String> {
    let loadfile = tools.dbench_loadfile.as_ref().ok_or("dbench's load file is missing")?;
    let output = run_program_ok(
        Command::new("dbench")
            .arg("-D")
            .arg(directory)
            .arg("-t")
            .arg(scale.dbench_seconds.to_string())
            .arg("-c")
            .arg(loadfile)
            .arg(scale.dbench_clients.to_string()),
        scratch,
        scale.timeout(),
    )?;
    let throughput = parse_dbench_throughput(&output.stdout)
        .ok_or_else(|| format!("dbench printed no throughput: {}", output.describe()))?;
    Ok(vec![throughput])
}

/// The read or write side of fio's JSON report: (bytes per second, operations per second).
pub fn parse_fio_json(stdout: &str, direction: &str) -> Result<(f64, f64), String> {
    // fio may print notes before the JSON document.
    let start = stdout.find('{').ok_or("fio printed no JSON")?;
    let report: serde_json::Value =
        serde_json::from_str(&stdout[start..]).map_err(|error| format!("fio's JSON: {error}"))?;
    let job = report["jobs"].get(0).ok_or("fio's JSON has no job")?;
    if let Some(error) = job["error"].as_i64().filter(|&error| error != 0) {
        return Err(format!("fio job failed with error {error}"));
    }
    let side = &job[direction];
    let bytes_per_second =
        side["bw_bytes"].as_f64().ok_or_else(|| format!("fio's JSON has no {direction}.bw_bytes"))?;
    let iops = side["iops"].as_f64().ok_or_else(|| format!("fio's JSON has no {direction}.iops"))?;
    if side["io_bytes"].as_u64() == Some(0) {
        return Err(format!("fio moved no bytes ({direction})"));
    }
    Ok((bytes_per_second, iops))
}

/// Empties the kernel's page cache (dirty pages written first), so reads come from the file
/// system, not from memory the previous job filled.
pub fn drop_caches() -> Result<(), String> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|error| format!("/proc/sys/vm/drop_caches: {error}"))
}

/// Four fio jobs on one file: sequential 1 MiB writes (fsync at the end), sequential 1 MiB
/// reads, random 4 KiB writes each followed by fsync, random 4 KiB reads; the page cache is
/// dropped before each read job.
fn fio(directory: &Path, scratch: &Path, scale: &Scale) -> Result<Vec<f64>, String> {
    let file = directory.join("fio.dat");
    let size = format!("--size={}", scale.fio_sequential_bytes);
    let runtime = format!("--runtime={}", scale.fio_random_seconds);
    let job = |name: &str, extra: &[&str]| -> Result<String, String> {
        check_interrupted()?;
        let mut command = Command::new("fio");
        command
            .arg(format!("--name={name}"))
            .arg(format!("--filename={}", file.display()))
            .args(["--ioengine=psync", "--output-format=json", "--randrepeat=1", &size])
            .args(extra);
        Ok(run_program_ok(&mut command, scratch, scale.timeout())?.stdout)
    };
    let (write_bytes_per_second, _) =
        parse_fio_json(&job("seq_write", &["--rw=write", "--bs=1M", "--end_fsync=1"])?, "write")?;
    drop_caches()?;
    let (read_bytes_per_second, _) = parse_fio_json(&job("seq_read", &["--rw=read", "--bs=1M"])?, "read")?;
    let (_, write_iops) =
        parse_fio_json(&job("rand_write", &["--rw=randwrite", "--bs=4k", "--fsync=1", &runtime])?, "write")?;
    drop_caches()?;
    let (_, read_iops) = parse_fio_json(&job("rand_read", &["--rw=randread", "--bs=4k", &runtime])?, "read")?;
    fs::remove_file(&file).map_err(|error| format!("{}: {error}", file.display()))?;
    Ok(vec![write_bytes_per_second / MIB as f64, read_bytes_per_second / MIB as f64, write_iops, read_iops])
}

/// Creates `storm_files` empty files in one directory, lists it with the real `ls -l` (output
/// discarded), deletes them all; the wall time of each phase and their sum.
fn metadata_storm(directory: &Path, scratch: &Path, scale: &Scale) -> Result<Vec<f64>, String> {
    let name = |index: u32| directory.join(format!("f{index:06}"));
    let started = Instant::now();
    for index in 0..scale.storm_files {
        if index % 256 == 0 {
            check_interrupted()?;
        }
        fs::File::create(name(index)).map_err(|error| format!("create {}: {error}", name(index).display()))?;
    }
    let create = started.elapsed();
    let output = run_program(Command::new("ls").arg("-l").arg(directory), scratch, scale.timeout(), false)?;
    if !output.status.success() {
        return Err(format!("ls -l {} failed: {}", directory.display(), output.describe()));
    }
    let list = output.wall;
    let started = Instant::now();
    for index in 0..scale.storm_files {
        if index % 256 == 0 {
            check_interrupted()?;
        }
        fs::remove_file(name(index)).map_err(|error| format!("delete {}: {error}", name(index).display()))?;
    }
    let delete = started.elapsed();
    let seconds = [create, list, delete].map(|phase| phase.as_secs_f64());
    Ok(vec![seconds[0], seconds[1], seconds[2], seconds.iter().sum()])
}

/// Issue 18's small writes, each phase for `small_write_seconds`: six threads appending 4-byte
/// records to one file opened O_APPEND (writes per second in all; the file's final size must
/// be 4 bytes per write, or the run fails), then one thread writing 512 bytes and calling
/// fsync after each (operations per second).
fn small_writes(directory: &Path, scale: &Scale) -> Result<Vec<f64>, String> {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    const WRITERS: usize = 6;
    let phase = Duration::from_secs_f64(scale.small_write_seconds);
    let appended = directory.join("append.log");
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let counts: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (appended, stop) = (&appended, &stop);
                scope.spawn(move || -> Result<u64, String> {
                    let mut file = fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(appended)
                        .map_err(|error| format!("{}: {error}", appended.display()))?;
                    let record = [b'0' + writer as u8, b'a', b'b', b'\n'];
                    let mut writes = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        file.write_all(&record).map_err(|error| format!("append: {error}"))?;
                        writes += 1;
                    }
                    Ok(writes)
                })
            })
            .collect();
        std::thread::sleep(phase);
        stop.store(true, Ordering::Relaxed);
        threads.into_iter().map(|thread| thread.join().unwrap_or_else(|_| Err("writer panicked".into()))).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let writes: u64 = counts.into_iter().sum::<Result<u64, String>>()?;
    let size = fs::metadata(&appended).map_err(|error| format!("{}: {error}", appended.display()))?.len();
    if size != 4 * writes {
        return Err(format!("O_APPEND lost writes: {writes} 4-byte writes made a file of {size} bytes"));
    }
    fs::remove_file(&appended).map_err(|error| format!("{}: {error}", appended.display()))?;
    check_interrupted()?;

    let synced = directory.join("fsync.dat");
    let mut file = fs::File::create(&synced).map_err(|error| format!("{}: {error}", synced.display()))?;
    let block = [0x5au8; 512];
    let started = Instant::now();
    let mut operations = 0u64;
    while started.elapsed() < phase {
        file.write_all(&block).map_err(|error| format!("write: {error}"))?;
        file.sync_all().map_err(|error| format!("fsync: {error}"))?;
        operations += 1;
    }
    let fsync_elapsed = started.elapsed().as_secs_f64();
    drop(file);
    fs::remove_file(&synced).map_err(|error| format!("{}: {error}", synced.display()))?;
    Ok(vec![writes as f64 / elapsed, operations as f64 / fsync_elapsed])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dbench_throughput() {
        let stdout = " Flush   7113     0.002     4.165\n\nThroughput 1024.37 MB/sec  4 clients  4 procs  max_latency=16.133 ms\n";
        assert_eq!(parse_dbench_throughput(stdout), Some(1024.37));
        assert_eq!(parse_dbench_throughput("no result\n"), None);
        assert_eq!(parse_dbench_throughput("Throughput lots MB/sec\n"), None);
    }

    #[test]
    fn parses_fio_json_after_notes() {
        let stdout = "note: both iodepth >= 1 and synchronous I/O engine are selected\n\
                      {\"jobs\": [{\"error\": 0, \"write\": {\"bw_bytes\": 1048576, \"iops\": 256.5, \"io_bytes\": 4096}}]}";
        assert_eq!(parse_fio_json(stdout, "write"), Ok((1048576.0, 256.5)));
        assert!(parse_fio_json(stdout, "read").is_err(), "no read side");
        assert!(parse_fio_json("{\"jobs\": [{\"error\": 5}]}", "write").unwrap_err().contains("error 5"));
        assert!(parse_fio_json("garbage", "write").is_err());
    }

    // Seed 004's configuration, command by command.
    #[test]
    fn postmark_script_is_seed_004() {
        let script = Scale::full().postmark_script(Path::new("/mnt/x"));
        for line in [
            "set location /mnt/x",
            "set subdirectories 10",
            "set number 1000",
            "set size 512 16384",
            "set transactions 10000",
            "set read 512",
            "set write 512",
            "set buffering false",
            "run",
            "quit",
        ] {
            assert!(script.lines().any(|candidate| candidate == line), "missing {line:?} in\n{script}");
        }
    }

    // Every workload names its metrics, uniquely within it.
    #[test]
    fn workloads_have_distinct_metrics() {
        for workload in Workload::ALL {
            let names: Vec<&str> = workload.metrics().iter().map(|metric| metric.name).collect();
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            assert!(!names.is_empty() && unique.len() == names.len(), "{}: {names:?}", workload.name());
            assert_eq!(Workload::from_name(workload.name()), Some(workload));
        }
    }
}
