//! Seed 000's Fig. 15: bytes on the host–device bus per file operation, with the file system
//! on the chip (fsoc serve, 9P2000.L, reached with fsoc-client) and on the host (the host runs
//! fsoc over `RemoteFlash`, and the device exports raw pages: `fsoc serve --raw`). Both
//! devices are the same simulated chip array in RAM; both servers count the frames they read
//! and write (`WireCounters`), so every figure is a count of real protocol bytes, and
//! deterministic.
//!
//! Each operation runs `operations` times on its own objects, and the bytes of the batch are
//! divided by the count. Two regimes, each on fresh devices: `durable_each`, every operation
//! followed by a transaction point (the FSOC host's `sync`, a Tfsync; the conventional host's
//! `transact`), as seed 000's FAT host on a CompactFlash card wrote its metadata at every
//! operation; and `batched`, one transaction point per batch, as a host with a write-back
//! cache would. Before the read batch the conventional host remounts, so its reads are cold
//! (the device's own caches are not on the bus, and are not dropped).

use std::io;
use std::path::{Path, PathBuf};

use fsoc_core::OpenFlags;
use fsoc_media::{Profile, SimConfig};
use serde_json::{json, Value};

use super::harness::{io_setup, settle, setup, Conventional, OnChip, Traffic};
use crate::target::BenchError;

/// The operations of Fig. 15, in the order they run (each on what the earlier ones left).
pub const OPERATIONS: [&str; 8] = ["mkdir", "create", "write", "read", "rename", "readdir", "delete", "rmdir"];

/// What one run does.
#[derive(Clone, Copy, Debug)]
pub struct OnChipConfig {
    /// Objects per operation batch.
    pub operations: u32,
    /// Bytes a write or read moves per file.
    pub payload_bytes: usize,
    pub chips: u32,
    pub blocks_per_chip: u32,
    pub seed: u64,
}

/// When the host makes its changes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    /// A transaction point after every operation.
    DurableEach,
    /// One transaction point per batch.
    Batched,
}

impl Regime {
    pub const ALL: [Regime; 2] = [Regime::DurableEach, Regime::Batched];

    pub fn name(self) -> &'static str {
        match self {
            Regime::DurableEach => "durable_each",
            Regime::Batched => "batched",
        }
    }
}

impl OnChipConfig {
    /// 500 objects per operation, 64 KiB read and written per file.
    pub fn full(seed: u64) -> OnChipConfig {
        OnChipConfig { operations: 500, payload_bytes: 64 << 10, chips: 2, blocks_per_chip: 1024, seed }
    }

    pub fn quick(seed: u64) -> OnChipConfig {
        OnChipConfig { operations: 50, ..OnChipConfig::full(seed) }
    }

    pub(crate) fn sim_config(&self) -> SimConfig {
        SimConfig::new(Profile::Mlc, self.chips, self.blocks_per_chip, self.seed)
    }
}

fn payload(index: u32, length: usize) -> Vec<u8> {
    (0..length).map(|offset| (offset as u32).wrapping_mul(31).wrapping_add(index) as u8).collect()
}

/// One batch of `operation` through 9P, ending in a sync (and one after each operation in
/// `Regime::DurableEach`).
fn on_chip_batch(chip: &OnChip, operation: &str, config: &OnChipConfig, regime: Regime) -> io::Result<()> {
    let client = chip.client();
    for index in 0..config.operations {
        if regime == Regime::DurableEach && index > 0 {
            client.sync()?;
        }
        match operation {
            "mkdir" => client.create_dir(format!("/d{index}"))?,
            "create" => drop(client.create(format!("/f{index}"))?),
            "write" => client.write(format!("/f{index}"), payload(index, config.payload_bytes))?,
            "read" => {
                let bytes = client.read(format!("/f{index}"))?;
                if bytes != payload(index, config.payload_bytes) {
                    return Err(io::Error::other(format!("read back /f{index} wrong")));
                }
            }
            "rename" => client.rename(format!("/f{index}"), format!("/g{index}"))?,
            "readdir" => {
                if index == 0 {
                    let entries = client.read_dir("/")?.count();
                    if entries < 2 * config.operations as usize {
                        return Err(io::Error::other(format!("listed {entries} entries")));
                    }
                }
            }
            "delete" => client.remove_file(format!("/g{index}"))?,
            "rmdir" => client.remove_dir(format!("/d{index}"))?,
            other => return Err(io::Error::other(format!("unknown operation {other}"))),
        }
    }
    client.sync()
}

/// The same batch by the conventional host, ending in a commit (and a transaction point after
/// each operation in `Regime::DurableEach`).
fn conventional_batch(
    host: &mut Conventional,
    operation: &str,
    config: &OnChipConfig,
    regime: Regime,
) -> Result<(), fsoc_core::FsError> {
    let fs = host.fs();
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    for index in 0..config.operations {
        if regime == Regime::DurableEach && index > 0 {
            fs.transact()?;
        }
        match operation {
            "mkdir" => drop(fs.mkdir(format!("/d{index}").as_bytes(), 0o755)?),
            "create" => {
                let fd = fs.open(format!("/f{index}").as_bytes(), flags, 0o644)?;
                fs.close(fd)?;
            }
            "write" => {
                let fd = fs.open(format!("/f{index}").as_bytes(), flags, 0o644)?;
                fs.pwrite(fd, 0, &payload(index, config.payload_bytes))?;
                fs.close(fd)?;
            }
            "read" => {
                let (inode, _) = fs.stat(format!("/f{index}").as_bytes())?;
                let bytes = fs.read(inode, 0, config.payload_bytes)?;
                assert_eq!(bytes, payload(index, config.payload_bytes), "conventional read of /f{index}");
            }
            "rename" => fs.rename_path(format!("/f{index}").as_bytes(), format!("/g{index}").as_bytes())?,
            "readdir" => {
                if index == 0 {
                    let entries = fs.readdir_path(b"/")?.len();
                    assert!(entries >= 2 * config.operations as usize, "listed {entries} entries");
                }
            }
            "delete" => fs.unlink(format!("/g{index}").as_bytes())?,
            "rmdir" => fs.rmdir(format!("/d{index}").as_bytes())?,
            other => unreachable!("unknown operation {other}"),
        }
    }
    fs.commit()
}

/// Runs every operation in both modes; the report's `operations` holds, per operation, the
/// bytes and messages per object in each mode and the FSOC/conventional byte ratio.
pub fn run(config: &OnChipConfig, directory: &Path, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    let mut regimes = serde_json::Map::new();
    for regime in Regime::ALL {
        regimes.insert(regime.name().to_string(), Value::Object(run_regime(config, directory, regime, progress)?));
    }
    Ok(json!({
        "config": {
            "operations_per_batch": config.operations,
            "payload_bytes": config.payload_bytes,
            "chips": config.chips,
            "profile": "mlc",
            "blocks_per_chip": config.blocks_per_chip,
            "seed": config.seed,
            "regimes": {
                "durable_each": "a transaction point after every operation (9P Tfsync; the conventional host's transact)",
                "batched": "one transaction point per batch",
            },
        },
        "regimes": regimes,
        "targets": {
            "regime": "durable_each",
            "metadata_bytes_ratio_max": 0.05,
            "read_write_bytes_ratio_band": [0.98, 1.02],
        },
    }))
}

fn run_regime(
    config: &OnChipConfig,
    directory: &Path,
    regime: Regime,
    progress: &mut dyn FnMut(&str),
) -> Result<serde_json::Map<String, Value>, BenchError> {
    let socket = |name: &str| -> PathBuf { directory.join(format!("{}-{name}", regime.name())) };
    let serve = super::harness::quiet_serve_config();
    let chip = OnChip::start(&config.sim_config(), serve, &socket("9p.sock"))?;
    let mut host = Conventional::start(&config.sim_config(), &socket("raw.sock"))?;
    let mut rows = serde_json::Map::new();
    for operation in OPERATIONS {
        progress(&format!("{}: {operation}", regime.name()));
        settle(&chip.counters);
        chip.counters.reset();
        on_chip_batch(&chip, operation, config, regime).map_err(io_setup(operation))?;
        settle(&chip.counters);
        let fsoc = Traffic::of(&chip.counters);
        if operation == "read" {
            host.remount()?;
        }
        host.counters.reset();
        conventional_batch(&mut host, operation, config, regime)
            .map_err(|error| setup(operation)(error.to_string()))?;
        let conventional = Traffic::of(&host.counters);
        let count = f64::from(config.operations);
        rows.insert(
            operation.to_string(),
            json!({
                "fsoc_bytes_per_op": fsoc.bytes as f64 / count,
                "fsoc_messages_per_op": fsoc.messages as f64 / count,
                "conventional_bytes_per_op": conventional.bytes as f64 / count,
                "conventional_messages_per_op": conventional.messages as f64 / count,
                "bytes_ratio": fsoc.bytes as f64 / (conventional.bytes as f64).max(1.0),
            }),
        );
    }
    Ok(rows)
}
