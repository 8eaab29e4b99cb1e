//! The `BenchTarget` trait every benchmarked file system implements, and the simulated device
//! they all run on. Invariant: every target of one run gets a `SimFlash` built from the same
//! `BenchDevice` (profile, geometry, chip count, seed), so their counts are comparable.

use fsoc_media::FlashStats;
use fsoc_media::{NandError, Nanos, Profile, SimConfig, SimFlash};

/// Whether a metadata change must be on flash when the call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Committed before the call returns (fsync / transaction point).
    Commit,
    /// May stay in RAM until the next `commit`. Targets that always commit (littlefs commits
    /// on every close and remove) treat this like `Commit`.
    Deferred,
}

/// One file system under test, driven through paths as an application would.
pub trait BenchTarget: Sized {
    const NAME: &'static str;
    /// The target's tunables (cache sizes, commit policy, ...).
    type Settings: Clone + core::fmt::Debug;
    /// Formats a fresh device and mounts it.
    fn format(flash: SimFlash, seed: u64, settings: &Self::Settings) -> Result<Self, BenchError>;
    /// Mounts a device formatted by `format` with the same settings (and cleanly unmounted).
    fn mount(flash: SimFlash, settings: &Self::Settings) -> Result<Self, BenchError>;
    /// Cleanly unmounts and hands the device back.
    fn unmount(self) -> Result<SimFlash, BenchError>;
    fn create_directory(&mut self, path: &str) -> Result<(), BenchError>;
    /// Creates a new file (it must not exist) holding `bytes`.
    fn create_file(&mut self, path: &str, bytes: &[u8], durability: Durability) -> Result<(), BenchError>;
    /// Opens an existing file for reading and closes it, reading nothing.
    fn open_file(&mut self, path: &str) -> Result<(), BenchError>;
    /// Reads a whole file (`size_bytes_max` bounds the buffer).
    fn read_file(&mut self, path: &str, size_bytes_max: usize) -> Result<Vec<u8>, BenchError>;
    fn delete_file(&mut self, path: &str, durability: Durability) -> Result<(), BenchError>;
    /// A transaction point: everything before it is durable afterwards.
    fn commit(&mut self) -> Result<(), BenchError>;
    /// The device, for its counters.
    fn flash(&mut self) -> &mut SimFlash;
    /// The target's virtual clock: when everything it issued so far has completed.
    fn now_ns(&mut self) -> Nanos;
    /// The settings, for the JSON report.
    fn settings_json(settings: &Self::Settings) -> serde_json::Value;
}

/// The simulated device every target runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchDevice {
    pub profile: Profile,
    pub chip_count: u32,
    pub block_count: u32,
    pub seed: u64,
}

impl BenchDevice {
    /// The device of the peer benchmarks: one MLC chip of the size the littlefs harness needs
    /// (`littlefs::BLOCK_COUNT` blocks).
    pub fn littlefs_mlc_chip(seed: u64) -> BenchDevice {
        BenchDevice { profile: Profile::Mlc, chip_count: 1, block_count: crate::littlefs::BLOCK_COUNT as u32, seed }
    }

    pub fn sim_config(&self) -> SimConfig {
        SimConfig::new(self.profile, self.chip_count, self.block_count, self.seed)
    }

    pub fn create(&self) -> Result<SimFlash, BenchError> {
        Ok(SimFlash::create(self.sim_config())?)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let config = self.sim_config();
        let geometry = config.geometry;
        let timing = config.timing;
        let device_bytes = geometry.chip_data_bytes() * u64::from(self.chip_count);
        // The physical write limit of STYLE §10: chips × page size ÷ page program time.
        let program_busy_ns = config.program_busy_ns();
        let write_limit_bytes_per_s =
            u64::from(self.chip_count) * u64::from(geometry.page_data_bytes) * 1_000_000_000 / program_busy_ns;
        serde_json::json!({
            "profile": self.profile.name(),
            "chip_count": self.chip_count,
            "block_count": self.block_count,
            "page_size_bytes": geometry.page_data_bytes,
            "spare_size_bytes": geometry.spare_bytes,
            "pages_per_block": geometry.pages_per_block,
            "block_size_bytes": geometry.block_data_bytes(),
            "device_size_bytes": device_bytes,
            "read_latency_us": timing.read_latency_ns / 1_000,
            "program_latency_us": timing.program_latency_ns / 1_000,
            "erase_latency_us": timing.erase_latency_ns / 1_000,
            "bus_ns_per_byte": timing.bus_ns_per_byte,
            "page_read_busy_ns": config.read_busy_ns(),
            "page_program_busy_ns": program_busy_ns,
            "write_limit_bytes_per_s": write_limit_bytes_per_s,
            "seed": self.seed,
        })
    }
}

/// Flash counters and clock at one instant; the difference of two is one measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    pub now_ns: Nanos,
}

impl Snapshot {
    pub fn take<T: BenchTarget>(target: &mut T) -> Snapshot {
        let now_ns = target.now_ns();
        let totals = target.flash().counters().totals();
        Snapshot { reads: totals.reads, programs: totals.programs, erases: totals.erases, now_ns }
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &Snapshot) -> Measurement {
        assert!(later.now_ns >= self.now_ns, "clock went back: {} -> {}", self.now_ns, later.now_ns);
        assert!(later.reads >= self.reads, "read counter went back (counters reset mid-measurement?)");
        Measurement {
            reads: later.reads - self.reads,
            programs: later.programs - self.programs,
            erases: later.erases - self.erases,
            sim_ns: later.now_ns - self.now_ns,
        }
    }
}

/// Flash operations and simulated time of one measured step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measurement {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    pub sim_ns: Nanos,
}

impl Measurement {
    pub fn add(&mut self, other: &Measurement) {
        self.reads += other.reads;
        self.programs += other.programs;
        self.erases += other.erases;
        self.sim_ns += other.sim_ns;
    }

    /// `sim_us` is rounded down to whole microseconds; sums are taken over nanoseconds.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "reads": self.reads,
            "programs": self.programs,
            "erases": self.erases,
            "sim_us": self.sim_ns / 1_000,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("flash: {0}")]
    Nand(#[from] NandError),
    #[error("fsoc: {operation} {path}: {source}")]
    Fsoc { operation: &'static str, path: String, source: fsoc_core::FsError },
    /// `nand` is the flash error behind an `LFS_ERR_IO`, if the storage adapter saw one.
    #[error("littlefs: {operation} {path}: error {code}{}", nand.as_ref().map(|e| format!(" (flash: {e})")).unwrap_or_default())]
    Littlefs { operation: &'static str, path: String, code: i32, nand: Option<NandError> },
    #[error("{target}: {path}: read back {actual_bytes} bytes that differ from the {expected_bytes} written")]
    ContentMismatch { target: &'static str, path: String, expected_bytes: usize, actual_bytes: usize },
    #[error("invalid benchmark configuration: {reason}")]
    InvalidConfig { reason: String },
    /// A step of a wall-clock benchmark failed (creating its files, a read or write).
    #[error("benchmark: {0}")]
    Setup(String),
}
