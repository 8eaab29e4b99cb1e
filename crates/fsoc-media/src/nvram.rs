//! `Nvram`: a byte-addressable persistent memory (FeRAM, MRAM or PCM) of 1 KiB to 16 MiB, with a
//! virtual clock, datasheet timing and energy, and seeded power-cut faults that tear a write at
//! 8-byte granularity. Seed 004 keeps file-system metadata in such a part; issue 10 puts fsoc's
//! commit log there.
//!
//! **Timing.** Every part here is a parallel x16 SRAM-like device. An access touches the bus
//! words (`bus_width_bytes`) that overlap its byte range; words are grouped in pages of
//! `page_words` (page-mode reads). The first word of each page touched costs `first_word_ns`,
//! every further word of the same page `page_word_ns`; parts without page mode have
//! `page_words = 1`. An access issued at virtual time `t` starts at `max(t, busy_until)` and
//! completes one duration later, as a NAND chip does in `sim`. Energy is supply voltage ×
//! active current × duration, the formula of `energy` (so energy per byte = VDD × I × cycle ÷
//! bytes per cycle).
//!
//! **Power cuts (the fault model).** Writes are the only cut points (a cut during a read changes
//! nothing stored). `schedule_power_cut(k)`: the next `k` writes complete; write `k + 1` is in
//! flight when power fails and returns `PowerLost`, as does every later access until
//! `restore_power`. The interrupted write is *torn*: only whole aligned 8-byte words are atomic
//! (`ATOMIC_WORD_BYTES`). The write's byte range is cut into the aligned 8-byte words it
//! overlaps — a partial word at an unaligned start or end counts as a word and covers only the
//! write's bytes in it — and each such word either holds all its new bytes or all its old ones,
//! never a mix. Which words land is a `TearPattern` drawn from the seed and the write's index
//! alone (so a replay tears identically):
//! - 1 in 8: nothing lands (power failed before the first word reached the cells);
//! - 1 in 8: everything lands (only the completion was lost);
//! - 1 in 4: an ascending prefix of uniformly chosen length 0..=n lands (a part written in
//!   address order);
//! - 1 in 2: each word lands independently with probability 1/2 (a controller or write-back
//!   cache may persist words in any order).
//!
//! A log built on this must therefore survive *any* subset of the words of the write in flight,
//! and nothing beyond that write is ever lost: every completed write is whole. After the cut,
//! re-opening the same backing (`into_backing`, then `Nvram::new`) sees exactly the persisted
//! bytes. A crash test enumerates cut points as the flash's do: run the workload once, read
//! `writes_count()` = n, then for each k in 0..n run it again on a fresh device with
//! `schedule_power_cut(k)`.
//!
//! Invariants: a rejected access (bounds, power lost) changes nothing: no bytes, time or
//! counters; an interrupted write costs no time or counters either (as an interrupted NAND
//! program), only its torn words. Zero-length accesses are accepted, change nothing and are not
//! counted (in particular they are not cut points).
#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use alloc::string::String;

use crate::faults::{FaultConfig, FaultState, OperationFate};
use crate::rng::{hash64, SeededRng};
use crate::stats::NvramCounters;
use crate::{Completed, NandError, Nanos};

/// Smallest NVRAM a device may have (seed 004's smallest cache size).
pub const NVRAM_SIZE_BYTES_MIN: u64 = 1024;
/// Largest NVRAM a device may have (seed 004's board module size).
pub const NVRAM_SIZE_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// The unit a power cut cannot split: an aligned 8-byte word holds all of a write's bytes in it
/// or none. (The MR4A16B keeps 7 ECC bits per 64 data bits, so a 64-bit word is its natural
/// atomic unit; for the other parts it is the contract a controller with 64-bit writes gives.)
pub const ATOMIC_WORD_BYTES: u64 = 8;

const _: () = assert!(NVRAM_SIZE_BYTES_MIN.is_multiple_of(ATOMIC_WORD_BYTES));
const _: () = assert!(NVRAM_SIZE_BYTES_MAX.is_multiple_of(ATOMIC_WORD_BYTES));

/// Salt of the tear-pattern draw, so it is independent of the flash's patterns of the same seed.
const SALT_NVRAM_TEAR: u64 = 0x6e76_7465_6172; // "nvtear"

/// The memory technologies the model knows, each with the timing of one cited part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NvramTechnology {
    /// Ferroelectric RAM (seed 004's board used Ramtron FeRAM).
    FeRam,
    /// Magnetoresistive RAM (toggle MRAM).
    Mram,
    /// Phase-change memory.
    Pcm,
}

impl NvramTechnology {
    pub const ALL: [NvramTechnology; 3] = [NvramTechnology::FeRam, NvramTechnology::Mram, NvramTechnology::Pcm];

    /// The datasheet timing of the part this technology stands for.
    pub fn timing(self) -> NvramTiming {
        match self {
            NvramTechnology::FeRam => FERAM_FM22L16,
            NvramTechnology::Mram => MRAM_MR4A16B,
            NvramTechnology::Pcm => PCM_NP8P128A13,
        }
    }

    /// Short lower-case name for command lines and reports.
    pub fn name(self) -> &'static str {
        match self {
            NvramTechnology::FeRam => "feram",
            NvramTechnology::Mram => "mram",
            NvramTechnology::Pcm => "pcm",
        }
    }

    /// The technology named `name` (as `name` spells it; "fram" and "pram" are accepted too).
    pub fn from_name(name: &str) -> Option<NvramTechnology> {
        match name {
            "feram" | "fram" => Some(NvramTechnology::FeRam),
            "mram" => Some(NvramTechnology::Mram),
            "pcm" | "pram" => Some(NvramTechnology::Pcm),
            _ => None,
        }
    }
}

impl core::fmt::Display for NvramTechnology {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// How one direction (reads or writes) of a part spends time and current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessTiming {
    /// Bus words per page: words after the first of a page cost `page_word_ns` (1 = no page
    /// mode, every word costs `first_word_ns`).
    pub page_words: u32,
    /// Time of the first word of a page (for parts without page mode: the cycle time).
    pub first_word_ns: Nanos,
    /// Time of each further word of the same page.
    pub page_word_ns: Nanos,
    /// Active supply current during the access.
    pub current_microamps: u32,
}

/// The timing and energy figures of one NVRAM part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvramTiming {
    /// Part number and datasheet the figures come from (shown by reports).
    pub part: &'static str,
    /// Width of the data bus (2 for the x16 parts here).
    pub bus_width_bytes: u32,
    pub supply_millivolts: u32,
    pub read: AccessTiming,
    pub write: AccessTiming,
}

/// Ramtron (now Infineon/Cypress) FM22L16, 4 Mbit parallel F-RAM, 256K × 16, datasheet
/// "FM22L16 4Mbit Asynchronous F-RAM Memory", Rev. 3.0, May 2010, page 1 (features):
/// "55 ns Access Time, 110 ns Cycle Time", "NoDelay™ Writes", "2.7V – 3.6V Power Supply",
/// "Low Active Current (8 mA typ.)".
/// - Reads and writes take one 110 ns cycle per x16 word: F-RAM writes at bus speed ("NoDelay"),
///   and back-to-back random accesses are paced by the cycle time, not the 55 ns access time.
///   The part's page mode (to 40 MHz) is not modelled: its page size is not among the figures
///   cited here, so the model stays at the conservative random-access cycle.
/// - VDD = 3.3 V (within 2.7–3.6 V; the NAND energy model's supply too); I = 8 mA typ for both.
/// - Per byte: 110 ns ÷ 2 bytes = 55 ns; energy 3.3 V × 8 mA × 110 ns ÷ 2 bytes = 1.452 nJ.
pub const FERAM_FM22L16: NvramTiming = NvramTiming {
    part: "Ramtron FM22L16 (Rev. 3.0, May 2010)",
    bus_width_bytes: 2,
    supply_millivolts: 3_300,
    read: AccessTiming { page_words: 1, first_word_ns: 110, page_word_ns: 110, current_microamps: 8_000 },
    write: AccessTiming { page_words: 1, first_word_ns: 110, page_word_ns: 110, current_microamps: 8_000 },
};

/// Everspin MR4A16B, 16 Mbit parallel toggle MRAM, 1M × 16, datasheet "MR4A16B 1M x 16 MRAM",
/// Rev. 11.7, 3/2018, page 1 (features): "+3.3 Volt power supply", "Fast 35 ns read/write
/// cycle"; introduction: internal ECC with "7 ECC parity bits for every 64 data bits".
/// - Reads and writes take one 35 ns cycle per x16 word (symmetric SRAM-compatible timing).
/// - VDD = 3.3 V.
/// - ASSUMPTION: the active currents (IDDR, IDDW in the datasheet's power-supply table) could
///   not be retrieved when this was written. We take 55 mA for reads and 105 mA for writes, the
///   typical values we recall from Everspin's 35 ns parallel toggle-MRAM datasheets (unverified;
///   check against the MR4A16B table before quoting MRAM energy). Writes draw about twice the
///   read current because toggle MRAM switches a bit with field currents on its write lines.
/// - Per byte: 35 ns ÷ 2 bytes = 17.5 ns; energy 3.3 V × 55 mA × 35 ns ÷ 2 = 3.176 nJ read,
///   3.3 V × 105 mA × 35 ns ÷ 2 = 6.064 nJ written.
pub const MRAM_MR4A16B: NvramTiming = NvramTiming {
    part: "Everspin MR4A16B (Rev. 11.7, 3/2018; currents assumed)",
    bus_width_bytes: 2,
    supply_millivolts: 3_300,
    read: AccessTiming { page_words: 1, first_word_ns: 35, page_word_ns: 35, current_microamps: 55_000 },
    write: AccessTiming { page_words: 1, first_word_ns: 35, page_word_ns: 35, current_microamps: 105_000 },
};

/// Numonyx Omneo P8P PCM (NP8P128A13T1760E), 128 Mbit parallel phase-change memory, 8M × 16,
/// datasheet 316144-07, July 2010, page 1 (product features): "115 ns initial read access"
/// (0 to +70 °C grade), "25 ns 8-word asynchronous-page read", "VCC (core) voltage:
/// 2.7 V – 3.6 V", "Bit alterable write operation" (no erase before a write).
/// - Reads: 115 ns for the first word of an 8-word (16-byte) page, 25 ns for each further word
///   of the same page. Sequential: (115 + 7 × 25) ns ÷ 16 bytes = 18.1 ns per byte.
/// - Writes: the P8P takes words at a 70 ns bus write cycle into a 64-byte buffer that hides the
///   cell program time (Denali Memory Blog, "Numonyx 128-Mbit serial and parallel I/O PCM",
///   22 April 2010); the sustained rate is the vendor's "written ... at a rate of 1 megabyte a
///   second" (Numonyx CTO Ed Doller, CNet via Neowin, 2008). We charge that sustained rate per
///   word: 1 µs per byte = 2,000 ns per x16 word. (The datasheet's program-time table was not
///   retrievable; this is a vendor figure, not a datasheet one.)
/// - VDD = 3.3 V (within 2.7–3.6 V).
/// - ASSUMPTION: the read and program currents (ICC) could not be retrieved. We take 25 mA for
///   both, the active current the NAND energy model (`energy`) assumes: the P8P targets NOR
///   flash sockets, whose parts draw currents of that order.
/// - Per byte: energy 3.3 V × 25 mA × 1 µs = 82.5 nJ written; a sequential read costs
///   3.3 V × 25 mA × 290 ns ÷ 16 bytes = 1.495 nJ per byte.
pub const PCM_NP8P128A13: NvramTiming = NvramTiming {
    part: "Numonyx Omneo P8P NP8P128A13 (316144-07, July 2010; write rate vendor-quoted, currents assumed)",
    bus_width_bytes: 2,
    supply_millivolts: 3_300,
    read: AccessTiming { page_words: 8, first_word_ns: 115, page_word_ns: 25, current_microamps: 25_000 },
    write: AccessTiming { page_words: 1, first_word_ns: 2_000, page_word_ns: 2_000, current_microamps: 25_000 },
};

impl AccessTiming {
    /// Busy time of one access to bytes `offset..offset + length_bytes` on a bus of
    /// `bus_width_bytes` (0 for an empty access).
    pub fn duration_ns(&self, bus_width_bytes: u32, offset: u64, length_bytes: u64) -> Nanos {
        if length_bytes == 0 {
            return 0;
        }
        let word_bytes = u64::from(bus_width_bytes.max(1));
        let page_bytes = word_bytes * u64::from(self.page_words.max(1));
        let last_byte = offset + (length_bytes - 1);
        let word_count = last_byte / word_bytes - offset / word_bytes + 1;
        let page_count = last_byte / page_bytes - offset / page_bytes + 1;
        // Every page touched contains at least one touched word.
        debug_assert!(word_count >= page_count, "{word_count} words in {page_count} pages");
        page_count * self.first_word_ns + (word_count - page_count) * self.page_word_ns
    }
}

impl NvramTiming {
    /// Busy time of reading `length_bytes` at `offset`.
    pub fn read_duration_ns(&self, offset: u64, length_bytes: u64) -> Nanos {
        self.read.duration_ns(self.bus_width_bytes, offset, length_bytes)
    }

    /// Busy time of writing `length_bytes` at `offset`.
    pub fn write_duration_ns(&self, offset: u64, length_bytes: u64) -> Nanos {
        self.write.duration_ns(self.bus_width_bytes, offset, length_bytes)
    }

    /// Energy in pJ of a read that kept the part busy `duration_ns`.
    pub fn read_energy_pj(&self, duration_ns: Nanos) -> u64 {
        energy_pj(self.supply_millivolts, self.read.current_microamps, duration_ns)
    }

    /// Energy in pJ of a write that kept the part busy `duration_ns`.
    pub fn write_energy_pj(&self, duration_ns: Nanos) -> u64 {
        energy_pj(self.supply_millivolts, self.write.current_microamps, duration_ns)
    }

    /// Checks the figures make sense (a custom timing may come from a caller).
    pub fn validate(&self) -> Result<(), NvramError> {
        if !matches!(self.bus_width_bytes, 1 | 2 | 4 | 8) {
            return Err(NvramError::InvalidConfig { reason: "bus_width_bytes must be 1, 2, 4 or 8" });
        }
        if self.read.page_words == 0 || self.write.page_words == 0 {
            return Err(NvramError::InvalidConfig { reason: "page_words must be at least 1" });
        }
        Ok(())
    }
}

/// Energy in pJ of drawing `current_microamps` at `supply_millivolts` for `duration_ns`:
/// mV × µA × ns = 1e-18 J = 1e-6 pJ (rounded to nearest).
fn energy_pj(supply_millivolts: u32, current_microamps: u32, duration_ns: Nanos) -> u64 {
    let attojoules = u128::from(supply_millivolts) * u128::from(current_microamps) * u128::from(duration_ns);
    u64::try_from((attojoules + 500_000) / 1_000_000).unwrap_or(u64::MAX)
}

/// Everything that defines a simulated NVRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvramConfig {
    /// `NVRAM_SIZE_BYTES_MIN..=NVRAM_SIZE_BYTES_MAX`, a multiple of `ATOMIC_WORD_BYTES`.
    pub size_bytes: u64,
    pub technology: NvramTechnology,
    /// The technology's cited figures unless a caller overrides them.
    pub timing: NvramTiming,
    /// Seeds the tear patterns (see the module documentation).
    pub seed: u64,
}

impl NvramConfig {
    /// A config with the technology's datasheet timing. The size is checked by `validate`
    /// (and by `Nvram::new`), not here.
    pub fn new(size_bytes: u64, technology: NvramTechnology, seed: u64) -> Self {
        NvramConfig { size_bytes, technology, timing: technology.timing(), seed }
    }

    /// Checks the configuration; returns the first problem found.
    pub fn validate(&self) -> Result<(), NvramError> {
        if !(NVRAM_SIZE_BYTES_MIN..=NVRAM_SIZE_BYTES_MAX).contains(&self.size_bytes) {
            return Err(NvramError::InvalidSize { size_bytes: self.size_bytes, reason: "outside 1 KiB..=16 MiB" });
        }
        if !self.size_bytes.is_multiple_of(ATOMIC_WORD_BYTES) {
            return Err(NvramError::InvalidSize { size_bytes: self.size_bytes, reason: "not a multiple of 8 bytes" });
        }
        self.timing.validate()
    }
}

/// Typed errors of the NVRAM model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NvramError {
    #[error("NVRAM size {size_bytes} bytes: {reason}")]
    InvalidSize { size_bytes: u64, reason: &'static str },
    #[error("NVRAM access of {length_bytes} bytes at offset {offset} is beyond its {size_bytes} bytes")]
    OutOfRange { offset: u64, length_bytes: u64, size_bytes: u64 },
    #[error("NVRAM: power lost")]
    PowerLost,
    #[error("NVRAM backing holds {actual_bytes} bytes, the config says {expected_bytes}")]
    BackingSize { expected_bytes: u64, actual_bytes: u64 },
    #[error("NVRAM backing {operation}: {message}")]
    Backing { operation: &'static str, message: String },
    #[error("invalid NVRAM configuration: {reason}")]
    InvalidConfig { reason: &'static str },
}

impl From<NvramError> for NandError {
    fn from(error: NvramError) -> Self {
        match error {
            NvramError::PowerLost => NandError::PowerLost,
            NvramError::OutOfRange { offset, length_bytes, size_bytes } => NandError::OutOfRange {
                what: "NVRAM access end",
                value: offset.saturating_add(length_bytes),
                limit: size_bytes,
            },
            NvramError::InvalidSize { reason, .. } | NvramError::InvalidConfig { reason } => {
                NandError::InvalidConfig { reason }
            }
            other @ (NvramError::BackingSize { .. } | NvramError::Backing { .. }) => {
                NandError::Image(alloc::string::ToString::to_string(&other))
            }
        }
    }
}

/// Where an NVRAM's bytes live. Offsets are relative to the region; `Nvram` checks bounds
/// before calling, and implementations check again (a wrong offset is an error, never a panic).
/// A `write_at` must be whole when it returns `Ok` (the tearing is `Nvram`'s job, not the
/// backing's).
pub trait NvramBacking {
    /// Bytes in the region.
    fn size_bytes(&self) -> u64;
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), NvramError>;
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<(), NvramError>;
    /// Makes written bytes durable where the backing can lose them (a file: `fdatasync`).
    fn persist(&mut self) -> Result<(), NvramError> {
        Ok(())
    }
}

fn out_of_range(offset: u64, length_bytes: usize, size_bytes: u64) -> NvramError {
    NvramError::OutOfRange { offset, length_bytes: length_bytes as u64, size_bytes }
}

/// An NVRAM region kept in memory (zero-filled when new). Surviving a simulated power cut only
/// needs the value to survive: re-open it with `Nvram::new(config, nvram.into_backing())`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamBacking {
    bytes: alloc::vec::Vec<u8>,
}

impl RamBacking {
    /// A zero-filled region of `size_bytes` (refused above `NVRAM_SIZE_BYTES_MAX`).
    pub fn new(size_bytes: u64) -> Result<Self, NvramError> {
        if size_bytes > NVRAM_SIZE_BYTES_MAX {
            return Err(NvramError::InvalidSize { size_bytes, reason: "outside 1 KiB..=16 MiB" });
        }
        let length = usize::try_from(size_bytes)
            .map_err(|_| NvramError::InvalidSize { size_bytes, reason: "does not fit in memory" })?;
        Ok(RamBacking { bytes: alloc::vec![0; length] })
    }

    /// The region's bytes (for tests and dumps).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn range(&self, offset: u64, length_bytes: usize) -> Result<core::ops::Range<usize>, NvramError> {
        let size_bytes = self.size_bytes();
        let start = usize::try_from(offset).map_err(|_| out_of_range(offset, length_bytes, size_bytes))?;
        let end = start.checked_add(length_bytes).ok_or_else(|| out_of_range(offset, length_bytes, size_bytes))?;
        if end > self.bytes.len() {
            return Err(out_of_range(offset, length_bytes, size_bytes));
        }
        Ok(start..end)
    }
}

impl NvramBacking for RamBacking {
    fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), NvramError> {
        let range = self.range(offset, buffer.len())?;
        let source = self.bytes.get(range).ok_or_else(|| out_of_range(offset, buffer.len(), self.size_bytes()))?;
        buffer.copy_from_slice(source);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<(), NvramError> {
        let range = self.range(offset, bytes.len())?;
        let size_bytes = self.size_bytes();
        let target = self.bytes.get_mut(range).ok_or_else(|| out_of_range(offset, bytes.len(), size_bytes))?;
        target.copy_from_slice(bytes);
        Ok(())
    }
}

#[cfg(feature = "std")]
pub use file_section::FileSection;

#[cfg(feature = "std")]
mod file_section {
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::FileExt;
    use std::path::Path;
    use std::string::ToString;

    use super::{out_of_range, NvramBacking, NvramError, NVRAM_SIZE_BYTES_MAX};

    fn io_error(operation: &'static str) -> impl FnOnce(std::io::Error) -> NvramError {
        move |error| NvramError::Backing { operation, message: error.to_string() }
    }

    /// An NVRAM region kept in a section of a file (`offset_bytes..offset_bytes + size_bytes`),
    /// read and written with `pread`/`pwrite`, so a device keeps its NVRAM between runs next to
    /// (or inside) its flash image. Bytes outside the section are never touched.
    #[derive(Debug)]
    pub struct FileSection {
        file: File,
        offset_bytes: u64,
        size_bytes: u64,
    }

    impl FileSection {
        /// Opens `path` for reading and writing, creating it if missing, and extends it with
        /// zeros if it ends before the section does (it is never shortened).
        pub fn create(path: &Path, offset_bytes: u64, size_bytes: u64) -> Result<Self, NvramError> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(io_error("create"))?;
            let end = section_end(offset_bytes, size_bytes)?;
            let file_size_bytes = file.metadata().map_err(io_error("stat"))?.len();
            if file_size_bytes < end {
                file.set_len(end).map_err(io_error("extend"))?;
            }
            Ok(FileSection { file, offset_bytes, size_bytes })
        }

        /// Opens an existing file that must already hold the whole section.
        pub fn open(path: &Path, offset_bytes: u64, size_bytes: u64) -> Result<Self, NvramError> {
            let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_error("open"))?;
            Self::from_file(file, offset_bytes, size_bytes)
        }

        /// Uses an already open file (e.g. a clone of an image file's handle); it must already
        /// hold the whole section.
        pub fn from_file(file: File, offset_bytes: u64, size_bytes: u64) -> Result<Self, NvramError> {
            let end = section_end(offset_bytes, size_bytes)?;
            let file_size_bytes = file.metadata().map_err(io_error("stat"))?.len();
            if file_size_bytes < end {
                return Err(NvramError::BackingSize {
                    expected_bytes: size_bytes,
                    actual_bytes: file_size_bytes.saturating_sub(offset_bytes),
                });
            }
            Ok(FileSection { file, offset_bytes, size_bytes })
        }

        pub fn offset_bytes(&self) -> u64 {
            self.offset_bytes
        }

        /// Forces written bytes to stable storage (`fdatasync`); simulated power cuts do not
        /// need it, a host crash does.
        pub fn sync(&self) -> Result<(), NvramError> {
            self.file.sync_data().map_err(io_error("sync"))
        }

        pub fn into_file(self) -> File {
            self.file
        }

        /// The file offset of `offset` inside the section, after a bounds check.
        fn file_offset(&self, offset: u64, length_bytes: usize) -> Result<u64, NvramError> {
            let end = offset.checked_add(length_bytes as u64);
            match end {
                Some(end) if end <= self.size_bytes => Ok(self.offset_bytes + offset),
                _ => Err(out_of_range(offset, length_bytes, self.size_bytes)),
            }
        }
    }

    fn section_end(offset_bytes: u64, size_bytes: u64) -> Result<u64, NvramError> {
        if size_bytes > NVRAM_SIZE_BYTES_MAX {
            return Err(NvramError::InvalidSize { size_bytes, reason: "outside 1 KiB..=16 MiB" });
        }
        offset_bytes.checked_add(size_bytes).ok_or(NvramError::InvalidConfig { reason: "section end overflows" })
    }

    impl NvramBacking for FileSection {
        fn size_bytes(&self) -> u64 {
            self.size_bytes
        }

        fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), NvramError> {
            let file_offset = self.file_offset(offset, buffer.len())?;
            self.file.read_exact_at(buffer, file_offset).map_err(io_error("read"))
        }

        fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<(), NvramError> {
            let file_offset = self.file_offset(offset, bytes.len())?;
            self.file.write_all_at(bytes, file_offset).map_err(io_error("write"))
        }

        fn persist(&mut self) -> Result<(), NvramError> {
            self.sync()
        }
    }
}

/// Which aligned 8-byte words of an interrupted write reached the cells (see the module
/// documentation for how it is drawn). Word positions count from 0 at the write's first word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TearPattern {
    /// No word landed.
    Nothing,
    /// Every word landed; only the completion was lost.
    Everything,
    /// The first `word_count` words, in ascending address order, landed.
    Prefix { word_count: u64 },
    /// Each word landed independently with probability 1/2 (`hash64(key, position)`).
    Scattered { key: u64 },
}

impl TearPattern {
    /// Draws the pattern of the write with 1-based index `write_index` (`Nvram::writes_count`
    /// when it started) covering `word_count` words: a function of the seed and the index only.
    pub fn draw(seed: u64, write_index: u64, word_count: u64) -> TearPattern {
        let mut rng = SeededRng::new(hash64(seed, SALT_NVRAM_TEAR, write_index, word_count));
        match rng.below(8) {
            0 => TearPattern::Nothing,
            1 => TearPattern::Everything,
            2 | 3 => TearPattern::Prefix { word_count: rng.range(0, word_count) },
            _ => TearPattern::Scattered { key: rng.next_u64() },
        }
    }

    /// Whether the word at `position` (0-based within the write) landed.
    pub fn lands(&self, position: u64) -> bool {
        match *self {
            TearPattern::Nothing => false,
            TearPattern::Everything => true,
            TearPattern::Prefix { word_count } => position < word_count,
            TearPattern::Scattered { key } => hash64(key, SALT_NVRAM_TEAR, position, 0) & 1 == 1,
        }
    }
}

/// What the last power cut did to the write in flight (for tests and crash-test reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornWrite {
    /// 1-based index of the interrupted write among all writes started.
    pub write_index: u64,
    pub offset: u64,
    pub length_bytes: u64,
    /// Aligned 8-byte words the write overlapped (partial end words included).
    pub word_count: u64,
    pub pattern: TearPattern,
    /// How many of them landed.
    pub words_landed: u64,
}

/// A simulated NVRAM device: a byte-addressable persistent region with a virtual clock,
/// accounting and seeded power cuts (see the module documentation).
#[derive(Debug)]
pub struct Nvram<B: NvramBacking = RamBacking> {
    config: NvramConfig,
    backing: B,
    busy_until_ns: Nanos,
    counters: NvramCounters,
    /// Counts writes (the cut points) and holds the power switch, with the flash's rules.
    fault_state: FaultState,
    last_tear: Option<TornWrite>,
}

impl Nvram<RamBacking> {
    /// A new zero-filled NVRAM in memory.
    pub fn in_ram(config: NvramConfig) -> Result<Self, NvramError> {
        config.validate()?;
        let backing = RamBacking::new(config.size_bytes)?;
        Nvram::new(config, backing)
    }
}

impl<B: NvramBacking> Nvram<B> {
    /// Wraps a backing (new or holding an earlier run's bytes: this is also "remount"). The
    /// backing must hold exactly `config.size_bytes`.
    pub fn new(config: NvramConfig, backing: B) -> Result<Self, NvramError> {
        config.validate()?;
        if backing.size_bytes() != config.size_bytes {
            return Err(NvramError::BackingSize {
                expected_bytes: config.size_bytes,
                actual_bytes: backing.size_bytes(),
            });
        }
        Ok(Nvram {
            config,
            backing,
            busy_until_ns: 0,
            counters: NvramCounters::default(),
            fault_state: FaultState::new(0, &FaultConfig::none()),
            last_tear: None,
        })
    }

    pub fn config(&self) -> &NvramConfig {
        &self.config
    }

    pub fn size_bytes(&self) -> u64 {
        self.config.size_bytes
    }

    pub fn technology(&self) -> NvramTechnology {
        self.config.technology
    }

    pub fn timing(&self) -> &NvramTiming {
        &self.config.timing
    }

    /// Virtual time at which the device finishes its last access.
    pub fn busy_until_ns(&self) -> Nanos {
        self.busy_until_ns
    }

    /// Accounting since creation or the last `reset_counters`.
    pub fn counters(&self) -> NvramCounters {
        self.counters
    }

    pub fn reset_counters(&mut self) {
        self.counters = NvramCounters::default();
    }

    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// Consumes the device, returning its backing (to re-open it after a cut, or close a file).
    pub fn into_backing(self) -> B {
        self.backing
    }

    /// Reads `buffer.len()` bytes at `offset`, issued at virtual time `issue_ns`; returns the
    /// completion time.
    pub fn read(&mut self, issue_ns: Nanos, offset: u64, buffer: &mut [u8]) -> Result<Completed<()>, NvramError> {
        let length_bytes = buffer.len() as u64;
        self.check_access(offset, length_bytes)?;
        if length_bytes == 0 {
            return Ok(Completed { value: (), done_ns: issue_ns });
        }
        self.backing.read_at(offset, buffer)?;
        let busy_ns = self.config.timing.read_duration_ns(offset, length_bytes);
        let energy_pj = self.config.timing.read_energy_pj(busy_ns);
        self.counters.reads += 1;
        self.counters.bytes_read += length_bytes;
        self.counters.energy_pj += energy_pj;
        Ok(Completed { value: (), done_ns: self.occupy(issue_ns, busy_ns) })
    }

    /// Writes `bytes` at `offset`, issued at virtual time `issue_ns`; returns the completion
    /// time. If power fails during this write it returns `PowerLost` and leaves the write torn
    /// (the module documentation says how).
    pub fn write(&mut self, issue_ns: Nanos, offset: u64, bytes: &[u8]) -> Result<Completed<()>, NvramError> {
        let length_bytes = bytes.len() as u64;
        self.check_access(offset, length_bytes)?;
        if length_bytes == 0 {
            return Ok(Completed { value: (), done_ns: issue_ns });
        }
        // From here on the write is a cut point.
        if self.fault_state.begin_operation() == OperationFate::Interrupted {
            self.tear(offset, bytes)?;
            return Err(NvramError::PowerLost);
        }
        self.backing.write_at(offset, bytes)?;
        let busy_ns = self.config.timing.write_duration_ns(offset, length_bytes);
        let energy_pj = self.config.timing.write_energy_pj(busy_ns);
        self.counters.writes += 1;
        self.counters.bytes_written += length_bytes;
        self.counters.energy_pj += energy_pj;
        Ok(Completed { value: (), done_ns: self.occupy(issue_ns, busy_ns) })
    }

    // ---- faults -----------------------------------------------------------------------------

    /// Writes started so far, including one a cut interrupted (zero-length writes excluded):
    /// the cut points of a workload.
    pub fn writes_count(&self) -> u64 {
        self.fault_state.operations_count()
    }

    /// Cuts power after `after_writes` more writes: those complete, the next one is torn.
    pub fn schedule_power_cut(&mut self, after_writes: u64) {
        self.fault_state.schedule_power_cut(after_writes);
    }

    pub fn cancel_power_cut(&mut self) {
        self.fault_state.cancel_power_cut();
    }

    /// Cuts power now, between writes: nothing is torn.
    pub fn cut_power_now(&mut self) {
        self.fault_state.cut_power_now();
    }

    /// Powers the device back on; its bytes are whatever the cut left. (Re-opening the backing
    /// with `Nvram::new` is the same from the bytes' point of view.)
    pub fn restore_power(&mut self) {
        self.fault_state.restore_power();
    }

    pub fn power_is_lost(&self) -> bool {
        self.fault_state.power_is_lost()
    }

    /// The write the last power cut tore, if any.
    pub fn last_tear(&self) -> Option<TornWrite> {
        self.last_tear
    }

    // ---- internals --------------------------------------------------------------------------

    fn check_access(&self, offset: u64, length_bytes: u64) -> Result<(), NvramError> {
        if self.fault_state.power_is_lost() {
            return Err(NvramError::PowerLost);
        }
        let size_bytes = self.config.size_bytes;
        match offset.checked_add(length_bytes) {
            Some(end) if end <= size_bytes => Ok(()),
            _ => Err(NvramError::OutOfRange { offset, length_bytes, size_bytes }),
        }
    }

    /// Occupies the device for `busy_ns` from `max(issue_ns, busy_until)`; returns the end.
    fn occupy(&mut self, issue_ns: Nanos, busy_ns: Nanos) -> Nanos {
        let done_ns = issue_ns.max(self.busy_until_ns) + busy_ns;
        self.busy_until_ns = done_ns;
        self.counters.busy_ns += busy_ns;
        done_ns
    }

    /// Writes the words of an interrupted write that its tear pattern lets land, each word's
    /// bytes in one backing write (so a word is whole or untouched).
    fn tear(&mut self, offset: u64, bytes: &[u8]) -> Result<(), NvramError> {
        let end = offset + bytes.len() as u64;
        let first_word = offset / ATOMIC_WORD_BYTES;
        let word_count = (end - 1) / ATOMIC_WORD_BYTES - first_word + 1;
        let write_index = self.fault_state.operations_count();
        let pattern = TearPattern::draw(self.config.seed, write_index, word_count);
        let mut words_landed = 0;
        for position in 0..word_count {
            if !pattern.lands(position) {
                continue;
            }
            let word_start = (first_word + position) * ATOMIC_WORD_BYTES;
            let piece_start = word_start.max(offset);
            let piece_end = (word_start + ATOMIC_WORD_BYTES).min(end);
            let source_range = usize::try_from(piece_start - offset).ok().zip(usize::try_from(piece_end - offset).ok());
            let piece = source_range
                .and_then(|(start, end)| bytes.get(start..end))
                .ok_or_else(|| out_of_range(piece_start, bytes.len(), self.config.size_bytes))?;
            self.backing.write_at(piece_start, piece)?;
            words_landed += 1;
        }
        self.last_tear = Some(TornWrite {
            write_index,
            offset,
            length_bytes: bytes.len() as u64,
            word_count,
            pattern,
            words_landed,
        });
        Ok(())
    }
}

#[cfg(test)]
// Tests index fixed-size arrays they build themselves.
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    // Checks the duration formula on page boundaries: PCM pages are 16 bytes, x16 words.
    #[test]
    fn page_mode_read_durations() {
        let timing = PCM_NP8P128A13;
        assert_eq!(timing.read_duration_ns(0, 1), 115);
        assert_eq!(timing.read_duration_ns(0, 2), 115);
        assert_eq!(timing.read_duration_ns(0, 3), 115 + 25);
        assert_eq!(timing.read_duration_ns(0, 16), 115 + 7 * 25);
        assert_eq!(timing.read_duration_ns(15, 2), 2 * 115, "two pages, one word each");
        assert_eq!(timing.read_duration_ns(1, 2), 115 + 25, "unaligned: two words of one page");
        assert_eq!(timing.read_duration_ns(0, 0), 0);
    }

    // Checks the unit arithmetic: 3.3 V × 8 mA × 110 ns = 2.904 nJ = 2904 pJ.
    #[test]
    fn feram_word_energy() {
        assert_eq!(FERAM_FM22L16.write_energy_pj(110), 2_904);
        assert_eq!(FERAM_FM22L16.read_energy_pj(110), 2_904);
    }

    #[test]
    fn tear_patterns_cover_every_kind() {
        let mut kinds = [false; 4];
        for write_index in 0..200 {
            let index = match TearPattern::draw(5, write_index, 10) {
                TearPattern::Nothing => 0,
                TearPattern::Everything => 1,
                TearPattern::Prefix { word_count } => {
                    assert!(word_count <= 10);
                    2
                }
                TearPattern::Scattered { .. } => 3,
            };
            kinds[index] = true;
        }
        assert_eq!(kinds, [true; 4]);
    }
}

// ---- the file system's view: `fsoc_flash::NvramDevice` ---------------------------------------

impl NvramTechnology {
    /// The code the superblock stores (`NvramDevice::technology_code`).
    pub fn code(self) -> u8 {
        match self {
            NvramTechnology::FeRam => 1,
            NvramTechnology::Mram => 2,
            NvramTechnology::Pcm => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<NvramTechnology> {
        NvramTechnology::ALL.into_iter().find(|technology| technology.code() == code)
    }
}

impl<B: NvramBacking + Send + Sync> fsoc_flash::NvramDevice for Nvram<B> {
    fn size_bytes(&self) -> u64 {
        self.config.size_bytes
    }

    fn technology_code(&self) -> u8 {
        self.config.technology.code()
    }

    fn read(&mut self, issue_ns: Nanos, offset: u64, buffer: &mut [u8]) -> Result<Completed<()>, NandError> {
        Ok(Nvram::read(self, issue_ns, offset, buffer)?)
    }

    fn write(&mut self, issue_ns: Nanos, offset: u64, bytes: &[u8]) -> Result<Completed<()>, NandError> {
        Ok(Nvram::write(self, issue_ns, offset, bytes)?)
    }

    fn persist(&mut self) -> Result<(), NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        Ok(self.backing.persist()?)
    }
}

/// An `Nvram` shared between the file system and whoever watches it (a crash harness scheduling
/// cuts and reading the bytes afterwards, a benchmark reading counters): clones are handles to
/// one device.
#[cfg(feature = "std")]
#[derive(Clone, Debug)]
pub struct SharedNvram<B: NvramBacking = RamBacking>(std::sync::Arc<std::sync::Mutex<Nvram<B>>>);

#[cfg(feature = "std")]
impl<B: NvramBacking> SharedNvram<B> {
    pub fn new(nvram: Nvram<B>) -> Self {
        SharedNvram(std::sync::Arc::new(std::sync::Mutex::new(nvram)))
    }

    /// Runs `f` on the device (a poisoned lock is taken over: the device holds no invariant a
    /// panicking holder could break half-way).
    pub fn with<T>(&self, f: impl FnOnce(&mut Nvram<B>) -> T) -> T {
        let mut guard = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}

#[cfg(feature = "std")]
impl<B: NvramBacking + Send + Sync> fsoc_flash::NvramDevice for SharedNvram<B> {
    fn size_bytes(&self) -> u64 {
        self.with(|nvram| nvram.size_bytes())
    }

    fn technology_code(&self) -> u8 {
        self.with(|nvram| nvram.technology().code())
    }

    fn read(&mut self, issue_ns: Nanos, offset: u64, buffer: &mut [u8]) -> Result<Completed<()>, NandError> {
        self.with(|nvram| fsoc_flash::NvramDevice::read(nvram, issue_ns, offset, buffer))
    }

    fn write(&mut self, issue_ns: Nanos, offset: u64, bytes: &[u8]) -> Result<Completed<()>, NandError> {
        self.with(|nvram| fsoc_flash::NvramDevice::write(nvram, issue_ns, offset, bytes))
    }

    fn persist(&mut self) -> Result<(), NandError> {
        self.with(fsoc_flash::NvramDevice::persist)
    }
}

/// The file beside a volume that stands for its NVRAM (`fsoc mkfs --nvram`): `NAME.nvram`, where
/// NAME is the image or an array's base. The CLI and the Python package both find it here.
#[cfg(feature = "std")]
pub fn sidecar_path(name: &std::path::Path) -> std::path::PathBuf {
    let mut path = name.as_os_str().to_os_string();
    path.push(".nvram");
    std::path::PathBuf::from(path)
}

/// Opens the NVRAM file of the volume `name` if it exists: the whole file is the NVRAM's bytes.
/// Timed as FeRAM (the superblock records the technology the volume was made with). `Ok(None)`
/// when there is no such file; an error when the path is not a regular file or cannot be
/// opened.
#[cfg(feature = "std")]
pub fn open_sidecar(name: &std::path::Path) -> Result<Option<Nvram<FileSection>>, NvramError> {
    let path = sidecar_path(name);
    let size_bytes = match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_file() => metadata.len(),
        Ok(_) => {
            return Err(NvramError::Backing {
                operation: "open",
                message: alloc::string::String::from("not a regular file"),
            })
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(NvramError::Backing { operation: "open", message: error.to_string() }),
    };
    let section = FileSection::open(&path, 0, size_bytes)?;
    Nvram::new(NvramConfig::new(size_bytes, NvramTechnology::FeRam, 0), section).map(Some)
}
