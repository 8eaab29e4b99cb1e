//! Seed 000's Table 2: elapsed time of a 1 MiB sequential read (in 4 KiB reads), 500 file
//! creates and an Andrew-like copy phase (a source tree of mixed file sizes copied into a
//! new tree), with the file system on the chip and on the host.
//!
//! Each workload runs on a fresh pair of devices (same chips, same seed); its frames, chip
//! pages and simulated chip time are counted (`Work`) and turned into time by a `Setting`
//! (`cost`), as Eqs. (1)–(2) of the seed add them: nothing overlaps, each call blocks.
//! Creates and copied files are made durable one by one (a create opened O_SYNC, a copied
//! file's Tfsync; the conventional host's transact), as the seed's FAT host wrote its metadata at every operation. Before the read
//! the conventional host remounts, so its tree pages come over the bus cold (the device's
//! caches are not on the bus, and are not dropped).

use std::io;
use std::path::Path;

use fsoc_client::Client;
use fsoc_core::{FileSystem, FsError, OpenFlags};
use fsoc_media::{Profile, SimConfig};
use fsoc_serve::RemoteFlash;
use serde_json::{json, Value};

use super::cost::{Elapsed, Mode, Setting, Work};
use super::harness::{io_setup, setup, Conventional, OnChip};
use crate::target::BenchError;

/// The three workloads of Table 2, in report order.
pub const WORKLOADS: [&str; 3] = ["read_1mib", "create_500", "andrew_copy"];

/// Bytes read per call in the read workload (seed 000's unit of data).
pub const READ_UNIT_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug)]
pub struct Table2Config {
    pub read_bytes: usize,
    pub creates: u32,
    /// Directories of the Andrew-like source tree, and files in each.
    pub andrew_directories: u32,
    pub andrew_files_per_directory: u32,
    pub chips: u32,
    pub blocks_per_chip: u32,
    pub seed: u64,
}

impl Table2Config {
    /// The seed's sizes: 1 MiB, 500 creates; Andrew's source tree of 70 files in 5 directories.
    pub fn full(seed: u64) -> Table2Config {
        Table2Config {
            read_bytes: 1 << 20,
            creates: 500,
            andrew_directories: 5,
            andrew_files_per_directory: 14,
            chips: 2,
            blocks_per_chip: 1024,
            seed,
        }
    }

    pub fn quick(seed: u64) -> Table2Config {
        Table2Config {
            read_bytes: 256 << 10,
            creates: 50,
            andrew_directories: 2,
            andrew_files_per_directory: 6,
            ..Self::full(seed)
        }
    }

    pub fn sim_config(&self) -> SimConfig {
        SimConfig::new(Profile::Mlc, self.chips, self.blocks_per_chip, self.seed)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "read_bytes": self.read_bytes,
            "read_unit_bytes": READ_UNIT_BYTES,
            "creates": self.creates,
            "andrew_directories": self.andrew_directories,
            "andrew_files_per_directory": self.andrew_files_per_directory,
            "andrew_source_bytes": self.andrew_files().iter().map(|(_, size)| size).sum::<usize>(),
            "profile": "mlc",
            "chips": self.chips,
            "blocks_per_chip": self.blocks_per_chip,
            "seed": self.seed,
        })
    }

    /// The Andrew-like source tree: (path below the tree's root, size). Sizes are log-uniform
    /// from 128 B to 32 KiB, drawn from the seed (Andrew's source: about 70 files, 200 KB).
    pub fn andrew_files(&self) -> Vec<(String, usize)> {
        let mut state = self.seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut files = Vec::new();
        for directory in 0..self.andrew_directories {
            for file in 0..self.andrew_files_per_directory {
                let fraction = (next() % 10_000) as f64 / 10_000.0;
                let size = (128.0 * 256f64.powf(fraction)) as usize;
                files.push((format!("d{directory}/f{file}.c"), size));
            }
        }
        files
    }
}

pub(crate) fn contents(salt: usize, length: usize) -> Vec<u8> {
    (0..length).map(|offset| (offset.wrapping_mul(131) ^ salt.wrapping_mul(7)) as u8).collect()
}

/// Counts of one workload in both modes.
#[derive(Clone, Copy, Debug)]
pub struct Counted {
    pub fsoc: Work,
    pub conventional: Work,
}

/// Counts `body` on the chip. What it returns is dropped after the count: a `File` whose
/// Tclunk goes out without waiting would otherwise be counted or not as the server's reading
/// thread happens to run.
fn fsoc_step<T>(chip: &OnChip, body: impl FnOnce(&Client) -> io::Result<T>) -> Result<(Work, T), BenchError> {
    let (traffic, chips) = chip.reading();
    let kept = body(chip.client()).map_err(io_setup("workload on the chip"))?;
    let (traffic_after, chips_after) = chip.reading();
    let traffic = traffic_after.since(&traffic);
    // The engine's calls are the workload's, counted on the conventional host's side.
    Ok((Work { traffic, chips: chips_after.since(&chips), fs_calls: 0 }, kept))
}

fn conventional_step(
    host: &mut Conventional,
    body: impl FnOnce(&mut FileSystem<RemoteFlash>, &mut u64) -> Result<(), FsError>,
) -> Result<Work, BenchError> {
    let (traffic, chips) = host.reading();
    let mut fs_calls = 0;
    body(host.fs(), &mut fs_calls).map_err(|error| setup("workload on the host")(error.to_string()))?;
    let (traffic_after, chips_after) = host.reading();
    Ok(Work { traffic: traffic_after.since(&traffic), chips: chips_after.since(&chips), fs_calls })
}

const CREATE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: false,
    truncate: false,
    append: false,
    directory: false,
};

/// Runs one workload on fresh devices and counts it in both modes.
pub fn count(config: &Table2Config, workload: &str, directory: &Path) -> Result<Counted, BenchError> {
    let serve = super::harness::quiet_serve_config();
    let chip = OnChip::start(&config.sim_config(), serve, &directory.join(format!("{workload}-9p.sock")))?;
    let mut host = Conventional::start(&config.sim_config(), &directory.join(format!("{workload}-raw.sock")))?;
    let counted = match workload {
        "read_1mib" => {
            let data = contents(1, config.read_bytes);
            chip.write_in_order("/big", &data).map_err(io_setup("setup"))?;
            write_file(host.fs(), b"/big", &data).map_err(|error| setup("setup")(error.to_string()))?;
            host.remount()?;
            let units = config.read_bytes / READ_UNIT_BYTES;
            let fsoc = fsoc_step(&chip, |client| {
                let file = client.open("/big")?;
                let mut buffer = vec![0u8; READ_UNIT_BYTES];
                for unit in 0..units {
                    let offset = unit * READ_UNIT_BYTES;
                    let read = file.read_at(&mut buffer, offset as u64)?;
                    if buffer[..read] != data[offset..offset + READ_UNIT_BYTES] {
                        return Err(io::Error::other(format!("unit {unit} read back wrong")));
                    }
                }
                Ok(file)
            })?;
            // The file's clunk is not counted (see `fsoc_step`).
            let (fsoc, _file) = fsoc;
            let conventional = conventional_step(&mut host, |fs, calls| {
                let (inode, _) = fs.stat(b"/big")?;
                *calls += 1;
                for unit in 0..units {
                    let offset = unit * READ_UNIT_BYTES;
                    let bytes = fs.read(inode, offset as u64, READ_UNIT_BYTES)?;
                    *calls += 1;
                    assert_eq!(bytes, data[offset..offset + READ_UNIT_BYTES], "unit {unit}");
                }
                Ok(())
            })?;
            Counted { fsoc, conventional }
        }
        "create_500" => {
            let (fsoc, ()) = fsoc_step(&chip, |client| {
                // O_SYNC: the create is durable with its reply, one message where a create
                // and a Tfsync take two (the conventional host transacts after each).
                for index in 0..config.creates {
                    let mut options = fsoc_client::OpenOptions::new();
                    drop(
                        options
                            .write(true)
                            .create(true)
                            .truncate(true)
                            .sync(true)
                            .open(client, format!("/c{index}"))?,
                    );
                }
                Ok(())
            })?;
            let conventional = conventional_step(&mut host, |fs, calls| {
                for index in 0..config.creates {
                    let fd = fs.open(format!("/c{index}").as_bytes(), CREATE, 0o644)?;
                    fs.close(fd)?;
                    fs.transact()?;
                    *calls += 3;
                }
                Ok(())
            })?;
            Counted { fsoc, conventional }
        }
        "andrew_copy" => {
            let files = config.andrew_files();
            host.fs().mkdir(b"/src", 0o755).map_err(|error| setup("setup")(error.to_string()))?;
            for directory in 0..config.andrew_directories {
                let path = format!("/src/d{directory}");
                chip.client().create_dir_all(&path).map_err(io_setup("setup"))?;
                host.fs().mkdir(path.as_bytes(), 0o755).map_err(|error| setup("setup")(error.to_string()))?;
            }
            for (index, (path, size)) in files.iter().enumerate() {
                let data = contents(index, *size);
                chip.write_in_order(&format!("/src/{path}"), &data).map_err(io_setup("setup"))?;
                write_file(host.fs(), format!("/src/{path}").as_bytes(), &data)
                    .map_err(|error| setup("setup")(error.to_string()))?;
            }
            chip.client().sync().map_err(io_setup("setup"))?;
            host.fs().commit().map_err(|error| setup("setup")(error.to_string()))?;
            let (fsoc, ()) = fsoc_step(&chip, |client| {
                client.create_dir("/dst")?;
                for directory in 0..config.andrew_directories {
                    client.create_dir(format!("/dst/d{directory}"))?;
                }
                client.sync()?;
                for (path, size) in &files {
                    let bytes = client.read(format!("/src/{path}"))?;
                    if bytes.len() != *size {
                        return Err(io::Error::other(format!("/src/{path}: {} bytes", bytes.len())));
                    }
                    client.write(format!("/dst/{path}"), &bytes)?;
                    client.sync()?;
                }
                Ok(())
            })?;
            let conventional = conventional_step(&mut host, |fs, calls| {
                fs.mkdir(b"/dst", 0o755)?;
                for directory in 0..config.andrew_directories {
                    fs.mkdir(format!("/dst/d{directory}").as_bytes(), 0o755)?;
                }
                fs.transact()?;
                *calls += u64::from(config.andrew_directories) + 2;
                for (path, size) in &files {
                    let (inode, _) = fs.stat(format!("/src/{path}").as_bytes())?;
                    let bytes = fs.read(inode, 0, *size)?;
                    assert_eq!(bytes.len(), *size, "/src/{path}");
                    let fd = fs.open(format!("/dst/{path}").as_bytes(), CREATE, 0o644)?;
                    fs.pwrite(fd, 0, &bytes)?;
                    fs.close(fd)?;
                    fs.transact()?;
                    *calls += 6;
                }
                Ok(())
            })?;
            Counted { fsoc, conventional }
        }
        other => return Err(BenchError::Setup(format!("unknown workload {other}"))),
    };
    let counted = Counted {
        fsoc: Work { fs_calls: counted.conventional.fs_calls, ..counted.fsoc },
        conventional: counted.conventional,
    };
    drop(chip);
    Ok(counted)
}

fn write_file(fs: &mut FileSystem<RemoteFlash>, path: &[u8], data: &[u8]) -> Result<(), FsError> {
    let fd = fs.open(path, CREATE, 0o644)?;
    fs.pwrite(fd, 0, data)?;
    fs.close(fd)?;
    fs.commit()
}

fn work_json(work: &Work) -> Value {
    json!({
        "bytes": work.traffic.bytes,
        "messages": work.traffic.messages,
        "fs_calls": work.fs_calls,
        "pages_read": work.chips.pages_read,
        "pages_programmed": work.chips.pages_programmed,
        "blocks_erased": work.chips.blocks_erased,
        "chip_time_us": work.chips.done_max_ns as f64 / 1e3,
    })
}

/// Table 2 for every workload: the counts in both modes, and the elapsed time under each
/// setting with the conventional ÷ FSOC ratio (above 1: FSOC is faster).
pub fn run(
    config: &Table2Config,
    settings: &[Setting],
    directory: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, BenchError> {
    let mut rows = serde_json::Map::new();
    for workload in WORKLOADS {
        progress(&format!("table 2: {workload}"));
        let counted = count(config, workload, directory)?;
        let mut elapsed = serde_json::Map::new();
        for setting in settings {
            let fsoc = Elapsed::of(&counted.fsoc, Mode::OnChip, setting);
            let conventional = Elapsed::of(&counted.conventional, Mode::Conventional, setting);
            elapsed.insert(
                setting.name.to_string(),
                json!({
                    "fsoc": fsoc.to_json(),
                    "conventional": conventional.to_json(),
                    "conventional_over_fsoc": conventional.total_ns() / fsoc.total_ns(),
                }),
            );
        }
        rows.insert(
            workload.to_string(),
            json!({
                "counts": { "fsoc": work_json(&counted.fsoc), "conventional": work_json(&counted.conventional) },
                "elapsed": elapsed,
            }),
        );
    }
    Ok(json!({ "config": config.to_json(), "workloads": rows }))
}
