//! `ImageStore`: a `PageStore` kept in a sparse image file, so a simulated device survives
//! between runs. The byte layout is normative in docs/FORMAT.md, section "Image file".
//!
//! Invariants: all-zero metadata means "erased, erase count 0, good", so a new image is created
//! with `set_len` and only written where something changes (a 1 GiB device costs a few KiB of
//! disk until used); opening never trusts the file: every header field is checked before any
//! offset derived from it is used, and malformed input yields an `ImageError`, never a panic.
#![deny(clippy::unwrap_used, clippy::indexing_slicing, clippy::host_endian_bytes)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::string::{String, ToString};
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

use crate::geometry::{Geometry, Profile};
use crate::sim::{SimConfig, SimFlash};
use crate::store::{
    BadMark, BlockMeta, ContentsBatchFetch, ContentsFetch, PageMeta, PageState, PageStore, PAGE_FLIPS_MAX,
};
use crate::{BlockAddress, NandError, PageAddress};
use fsoc_flash::codec::{DecodeError, Reader, Writer};

/// First 8 bytes of every image file.
pub const IMAGE_MAGIC: [u8; 8] = *b"FSOCNAND";
/// Layout version written by this code; other versions are refused.
pub const IMAGE_FORMAT_VERSION: u32 = 1;
/// Bytes reserved for the header; tables start here.
pub const HEADER_REGION_BYTES: u64 = 4096;
/// Bytes of the header covered by the CRC (everything before the CRC field).
pub const HEADER_CRC_COVERED_BYTES: usize = 88;
/// Encoded header length: the covered bytes plus the 4-byte CRC.
pub const HEADER_BYTES: usize = HEADER_CRC_COVERED_BYTES + 4;
/// Size of one block-table entry.
pub const BLOCK_ENTRY_BYTES: usize = 16;
/// Size of one page-table entry: 8 bytes of state and flags, then the flip positions.
pub const PAGE_ENTRY_BYTES: usize = 8 + 4 * PAGE_FLIPS_MAX;
/// Tables and the data area start on multiples of this.
pub const REGION_ALIGNMENT_BYTES: u64 = 4096;
/// Largest chip count an image may declare (same bound as `SimConfig::validate`).
pub const CHIP_COUNT_MAX: u32 = 1024;

const _: () = assert!(HEADER_BYTES as u64 <= HEADER_REGION_BYTES);
const _: () = assert!(PAGE_ENTRY_BYTES == 72, "docs/FORMAT.md documents 72-byte page entries");

const BLOCK_FLAG_ERASE_INCOMPLETE: u8 = 1 << 0;
const BLOCK_FLAG_HAS_LAST_PROGRAMMED: u8 = 1 << 1;
const PAGE_FLAG_EXCESS_DAMAGE: u8 = 1 << 0;

/// CRC-32C (Castagnoli), the checksum used by every fsoc on-disk structure (fsoc-flash's codec).
pub use fsoc_flash::codec::crc32c;

/// Why an image file could not be created, opened or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("image {operation}: {message}")]
    Io { operation: &'static str, message: String },
    #[error("image too short: need {needed_bytes} bytes, file has {actual_bytes}")]
    Truncated { needed_bytes: u64, actual_bytes: u64 },
    /// A table entry or header field the codec could not read (callers check lengths first,
    /// so this names a broken internal size rather than a short file).
    #[error("image: {0}")]
    Decode(#[from] DecodeError),
    #[error("not an fsoc flash image: magic {found:02x?}, expected \"FSOCNAND\"")]
    BadMagic { found: [u8; 8] },
    #[error("unsupported image format version {found} (this build reads version {IMAGE_FORMAT_VERSION})")]
    UnsupportedVersion { found: u32 },
    #[error("image header checksum stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksumMismatch { stored: u32, computed: u32 },
    #[error("image geometry invalid: {reason}")]
    InvalidGeometry { reason: &'static str },
    #[error("image header: unknown profile code {code}")]
    UnknownProfile { code: u32 },
    #[error("image header: {field} is {stored}, geometry requires {expected}")]
    LayoutMismatch { field: &'static str, stored: u64, expected: u64 },
    #[error("image file is {actual_bytes} bytes, geometry requires {expected_bytes}")]
    FileSizeMismatch { expected_bytes: u64, actual_bytes: u64 },
    #[error("image {structure} entry {index}: {reason} (value {value})")]
    CorruptEntry { structure: &'static str, index: u64, reason: &'static str, value: u64 },
    #[error("image configuration: {0}")]
    Config(NandError),
}

impl From<ImageError> for NandError {
    fn from(error: ImageError) -> Self {
        match error {
            ImageError::Config(inner) => inner,
            other => NandError::Image(other.to_string()),
        }
    }
}

fn io_error(operation: &'static str) -> impl FnOnce(std::io::Error) -> ImageError {
    move |error| ImageError::Io { operation, message: error.to_string() }
}

/// The device description stored in an image header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageHeader {
    pub profile: Profile,
    pub geometry: Geometry,
    pub chip_count: u32,
    pub ecc_correctable_bits_per_512: u32,
    pub endurance_cycles: u32,
    pub seed: u64,
}

/// Byte offsets of the regions of an image, all derived from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    pub block_table_offset: u64,
    pub page_table_offset: u64,
    pub data_offset: u64,
    pub file_size_bytes: u64,
    /// Bytes of one page slot in the data area (data then spare).
    pub page_slot_bytes: u64,
}

fn align_up(value: u64) -> Option<u64> {
    value.checked_add(REGION_ALIGNMENT_BYTES - 1).map(|sum| sum / REGION_ALIGNMENT_BYTES * REGION_ALIGNMENT_BYTES)
}

impl ImageLayout {
    /// Computes the layout of an image with this geometry and chip count; `None` on overflow.
    pub fn compute(geometry: &Geometry, chip_count: u32) -> Option<ImageLayout> {
        let block_total = u64::from(chip_count).checked_mul(u64::from(geometry.block_count))?;
        let page_total = block_total.checked_mul(u64::from(geometry.pages_per_block))?;
        let page_slot_bytes = u64::from(geometry.page_data_bytes) + u64::from(geometry.spare_bytes);
        let block_table_offset = HEADER_REGION_BYTES;
        let page_table_offset =
            align_up(block_table_offset.checked_add(block_total.checked_mul(BLOCK_ENTRY_BYTES as u64)?)?)?;
        let data_offset = align_up(page_table_offset.checked_add(page_total.checked_mul(PAGE_ENTRY_BYTES as u64)?)?)?;
        let file_size_bytes = data_offset.checked_add(page_total.checked_mul(page_slot_bytes)?)?;
        Some(ImageLayout { block_table_offset, page_table_offset, data_offset, file_size_bytes, page_slot_bytes })
    }
}

impl ImageHeader {
    /// Encodes the header (docs/FORMAT.md, "Image file" header table), CRC included.
    pub fn encode(&self, layout: &ImageLayout) -> [u8; HEADER_BYTES] {
        let mut writer = Writer::with_capacity(HEADER_BYTES);
        writer.raw(&IMAGE_MAGIC);
        writer.raw(&IMAGE_FORMAT_VERSION.to_le_bytes());
        writer.raw(&self.profile.code().to_le_bytes());
        writer.raw(&self.geometry.page_data_bytes.to_le_bytes());
        writer.raw(&self.geometry.spare_bytes.to_le_bytes());
        writer.raw(&self.geometry.pages_per_block.to_le_bytes());
        writer.raw(&self.geometry.block_count.to_le_bytes());
        writer.raw(&self.chip_count.to_le_bytes());
        writer.raw(&self.ecc_correctable_bits_per_512.to_le_bytes());
        writer.raw(&self.endurance_cycles.to_le_bytes());
        writer.raw(&0u32.to_le_bytes());
        writer.raw(&self.seed.to_le_bytes());
        writer.raw(&layout.block_table_offset.to_le_bytes());
        writer.raw(&layout.page_table_offset.to_le_bytes());
        writer.raw(&layout.data_offset.to_le_bytes());
        writer.raw(&layout.file_size_bytes.to_le_bytes());
        assert_eq!(writer.bytes.len(), HEADER_CRC_COVERED_BYTES, "header fields fill the CRC-covered bytes");
        let crc = crc32c(&writer.bytes);
        writer.u32_le(crc);
        fixed_size(writer.bytes)
    }

    /// Decodes and checks a header against the file's length. Checks run in the order of
    /// docs/FORMAT.md's validity rules, so each malformed file gets the most specific error.
    pub fn decode(bytes: &[u8], file_size_bytes: u64) -> Result<(ImageHeader, ImageLayout), ImageError> {
        if bytes.len() < HEADER_BYTES {
            return Err(ImageError::Truncated { needed_bytes: HEADER_BYTES as u64, actual_bytes: file_size_bytes });
        }
        let mut reader = Reader::new("image header", bytes);
        let magic = reader.array::<8>()?;
        if magic != IMAGE_MAGIC {
            return Err(ImageError::BadMagic { found: magic });
        }
        let version = reader.u32_le()?;
        if version != IMAGE_FORMAT_VERSION {
            return Err(ImageError::UnsupportedVersion { found: version });
        }
        let profile_code = reader.u32_le()?;
        let geometry = Geometry {
            page_data_bytes: reader.u32_le()?,
            spare_bytes: reader.u32_le()?,
            pages_per_block: reader.u32_le()?,
            block_count: reader.u32_le()?,
        };
        let chip_count = reader.u32_le()?;
        let ecc_correctable_bits_per_512 = reader.u32_le()?;
        let endurance_cycles = reader.u32_le()?;
        let _reserved = reader.u32_le()?;
        let seed = reader.u64_le()?;
        let stored_layout = [
            ("block_table_offset", reader.u64_le()?),
            ("page_table_offset", reader.u64_le()?),
            ("data_offset", reader.u64_le()?),
            ("file_size_bytes", reader.u64_le()?),
        ];
        let stored_crc = reader.u32_le()?;
        let covered = bytes
            .get(..HEADER_CRC_COVERED_BYTES)
            .ok_or(ImageError::Truncated { needed_bytes: HEADER_BYTES as u64, actual_bytes: file_size_bytes })?;
        let computed_crc = crc32c(covered);
        if stored_crc != computed_crc {
            return Err(ImageError::HeaderChecksumMismatch { stored: stored_crc, computed: computed_crc });
        }
        let profile = Profile::from_code(profile_code).ok_or(ImageError::UnknownProfile { code: profile_code })?;
        geometry.validate().map_err(|reason| ImageError::InvalidGeometry { reason })?;
        if chip_count == 0 || chip_count > CHIP_COUNT_MAX {
            return Err(ImageError::InvalidGeometry { reason: "chip_count must be within 1..=1024" });
        }
        if endurance_cycles == 0 {
            return Err(ImageError::InvalidGeometry { reason: "endurance_cycles must be at least 1" });
        }
        let layout = ImageLayout::compute(&geometry, chip_count)
            .ok_or(ImageError::InvalidGeometry { reason: "image size overflows 64 bits" })?;
        let expected =
            [layout.block_table_offset, layout.page_table_offset, layout.data_offset, layout.file_size_bytes];
        for ((field, stored), expected) in stored_layout.into_iter().zip(expected) {
            if stored != expected {
                return Err(ImageError::LayoutMismatch { field, stored, expected });
            }
        }
        if file_size_bytes != layout.file_size_bytes {
            return Err(ImageError::FileSizeMismatch {
                expected_bytes: layout.file_size_bytes,
                actual_bytes: file_size_bytes,
            });
        }
        let header =
            ImageHeader { profile, geometry, chip_count, ecc_correctable_bits_per_512, endurance_cycles, seed };
        Ok((header, layout))
    }

    /// The simulator configuration an image describes (default faults and error model).
    pub fn sim_config(&self) -> SimConfig {
        let mut config = SimConfig::new(self.profile, self.chip_count, self.geometry.block_count, self.seed);
        config.geometry = self.geometry;
        config.ecc_correctable_bits_per_512 = self.ecc_correctable_bits_per_512;
        config.endurance_cycles = self.endurance_cycles;
        config
    }
}

fn encode_block_entry(meta: &BlockMeta) -> [u8; BLOCK_ENTRY_BYTES] {
    let mut writer = Writer::with_capacity(BLOCK_ENTRY_BYTES);
    writer.raw(&meta.erase_count.to_le_bytes());
    writer.raw(&[meta.bad_mark.code()]);
    let mut flags = 0;
    if meta.erase_incomplete {
        flags |= BLOCK_FLAG_ERASE_INCOMPLETE;
    }
    if meta.last_programmed_page_index.is_some() {
        flags |= BLOCK_FLAG_HAS_LAST_PROGRAMMED;
    }
    writer.raw(&[flags, 0, 0]);
    writer.raw(&meta.last_programmed_page_index.unwrap_or(0).to_le_bytes());
    writer.raw(&0u32.to_le_bytes());
    fixed_size(writer.bytes)
}

fn decode_block_entry(bytes: &[u8], index: u64, pages_per_block: u32) -> Result<BlockMeta, ImageError> {
    let mut reader = Reader::new("block table entry", bytes);
    let corrupt = |reason, value| ImageError::CorruptEntry { structure: "block table", index, reason, value };
    let erase_count = reader.u32_le()?;
    let bad_code = reader.u8()?;
    let bad_mark =
        BadMark::from_code(bad_code).ok_or_else(|| corrupt("unknown bad-block mark", u64::from(bad_code)))?;
    let flags = reader.u8()?;
    if flags & !(BLOCK_FLAG_ERASE_INCOMPLETE | BLOCK_FLAG_HAS_LAST_PROGRAMMED) != 0 {
        return Err(corrupt("unknown flags", u64::from(flags)));
    }
    let _reserved = reader.array::<2>()?;
    let last_programmed = reader.u32_le()?;
    let _reserved_tail = reader.u32_le()?;
    let last_programmed_page_index = if flags & BLOCK_FLAG_HAS_LAST_PROGRAMMED != 0 {
        if last_programmed >= pages_per_block {
            return Err(corrupt("last programmed page beyond block", u64::from(last_programmed)));
        }
        Some(last_programmed)
    } else {
        None
    };
    Ok(BlockMeta {
        erase_count,
        bad_mark,
        last_programmed_page_index,
        erase_incomplete: flags & BLOCK_FLAG_ERASE_INCOMPLETE != 0,
    })
}

fn encode_page_entry(meta: &PageMeta) -> [u8; PAGE_ENTRY_BYTES] {
    let mut writer = Writer::with_capacity(PAGE_ENTRY_BYTES);
    let flags = if meta.excess_damage { PAGE_FLAG_EXCESS_DAMAGE } else { 0 };
    writer.raw(&[meta.state.code(), meta.flip_count, flags, 0, 0, 0, 0, 0]);
    for position in meta.flip_positions {
        writer.raw(&position.to_le_bytes());
    }
    fixed_size(writer.bytes)
}

/// An encoder's output as the fixed-size array its layout promises.
// Invariant: each encoder writes a fixed sequence of fields whatever the values (the unit
// tests round-trip every structure), so no input reaches this panic.
#[allow(clippy::panic)]
fn fixed_size<const N: usize>(bytes: Vec<u8>) -> [u8; N] {
    let length = bytes.len();
    bytes.try_into().unwrap_or_else(|_| panic!("encoder wrote {length} bytes where its layout has {N}"))
}

fn decode_page_entry(bytes: &[u8], index: u64, page_bit_count: u32) -> Result<PageMeta, ImageError> {
    let mut reader = Reader::new("page table entry", bytes);
    let corrupt = |reason, value| ImageError::CorruptEntry { structure: "page table", index, reason, value };
    let state_code = reader.u8()?;
    let state = PageState::from_code(state_code).ok_or_else(|| corrupt("unknown page state", u64::from(state_code)))?;
    let flip_count = reader.u8()?;
    if usize::from(flip_count) > PAGE_FLIPS_MAX {
        return Err(corrupt("flip count beyond 16", u64::from(flip_count)));
    }
    let flags = reader.u8()?;
    if flags & !PAGE_FLAG_EXCESS_DAMAGE != 0 {
        return Err(corrupt("unknown flags", u64::from(flags)));
    }
    let _reserved = reader.array::<5>()?;
    let mut flip_positions = [0u32; PAGE_FLIPS_MAX];
    for (slot_index, slot) in flip_positions.iter_mut().enumerate() {
        *slot = reader.u32_le()?;
        if slot_index < usize::from(flip_count) && *slot >= page_bit_count {
            return Err(corrupt("flip position beyond page", u64::from(*slot)));
        }
    }
    Ok(PageMeta { state, flip_positions, flip_count, excess_damage: flags & PAGE_FLAG_EXCESS_DAMAGE != 0 })
}

/// Writes gathered in memory before they reach the file, at most this many contents bytes...
const PENDING_CONTENTS_BYTES_MAX: usize = 1 << 20;
/// ... and this many page or block entries.
const PENDING_ENTRIES_MAX: usize = 4096;

/// A run's allocation (at least one slot): a run that fills up is followed by a new one, so no
/// run is ever reallocated...
const RUN_BYTES_MAX: usize = 128 << 10;
/// ... and this many written-back runs are kept for reuse, so a steady stream of small
/// write-backs (one per fsync) allocates nothing.
const SPARE_RUNS_MAX: usize = 8;

/// Changes made since the last write-back, by index in the file's tables: the latest
/// contents of each page, in runs of neighbouring pages (key: the run's first page; value: its
/// slots end to end), the latest entry of each page, and which block entries (cached in
/// `block_metas`) changed. A write-back applies them in ascending file order, one system call
/// per run, instead of three per programmed page.
#[derive(Debug)]
struct Pending {
    /// The bounds: `PENDING_CONTENTS_BYTES_MAX` and `PENDING_ENTRIES_MAX` unless set lower;
    /// 0 writes every change through at once.
    contents_bytes_max: usize,
    entries_max: usize,
    contents: BTreeMap<u64, Vec<u8>>,
    contents_bytes: usize,
    page_entries: BTreeMap<u64, [u8; PAGE_ENTRY_BYTES]>,
    blocks: BTreeSet<u64>,
    /// Buffers of written-back runs, reused for the next ones (at most `SPARE_RUNS_MAX`).
    spare_buffers: Vec<Vec<u8>>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            contents_bytes_max: PENDING_CONTENTS_BYTES_MAX,
            entries_max: PENDING_ENTRIES_MAX,
            contents: BTreeMap::new(),
            contents_bytes: 0,
            page_entries: BTreeMap::new(),
            blocks: BTreeSet::new(),
            spare_buffers: Vec::new(),
        }
    }
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.contents.is_empty() && self.page_entries.is_empty() && self.blocks.is_empty()
    }

    fn is_full(&self) -> bool {
        self.contents_bytes >= self.contents_bytes_max
            || self.page_entries.len() >= self.entries_max
            || self.blocks.len() >= self.entries_max
    }

    /// The pending slot of page `index` (`slot_bytes` long), if there is one.
    fn slot(&self, index: u64, slot_bytes: usize) -> Option<&[u8]> {
        let (first, run) = self.contents.range(..=index).next_back()?;
        let start = usize::try_from(index - first).ok()?.checked_mul(slot_bytes)?;
        run.get(start..start.checked_add(slot_bytes)?)
    }

    /// Records `data` then `spare` as the contents of page `index`: in place if the page is
    /// pending already, else at the end of the run just before it if its allocation has room,
    /// else as a new run allocated for up to `slots_to_block_end` slots and `RUN_BYTES_MAX`
    /// (never reallocated, so a run's heap is what it was given).
    fn store(&mut self, index: u64, data: &[u8], spare: &[u8], slots_to_block_end: usize) {
        let slot_bytes = data.len() + spare.len();
        if let Some((first, run)) = self.contents.range_mut(..=index).next_back() {
            let start = usize::try_from(index - first).ok().and_then(|pages| pages.checked_mul(slot_bytes));
            if let Some(start) = start {
                if let Some(slot) = run.get_mut(start..start + slot_bytes) {
                    let (slot_data, slot_spare) = slot.split_at_mut(data.len());
                    slot_data.copy_from_slice(data);
                    slot_spare.copy_from_slice(spare);
                    return;
                }
                if start == run.len() && run.len() + slot_bytes <= run.capacity() {
                    run.extend_from_slice(data);
                    run.extend_from_slice(spare);
                    self.contents_bytes += slot_bytes;
                    return;
                }
            }
        }
        let mut run = self.spare_buffers.pop().unwrap_or_default();
        run.clear();
        let slots_max = self.contents_bytes_max.min(RUN_BYTES_MAX).div_ceil(slot_bytes).max(1);
        run.reserve_exact(slots_to_block_end.clamp(1, slots_max) * slot_bytes);
        run.extend_from_slice(data);
        run.extend_from_slice(spare);
        self.contents.insert(index, run);
        self.contents_bytes += slot_bytes;
    }
}

/// Writes `items` (ascending indices, each `stride` bytes long, at `base + index * stride`)
/// with one `pwrite` per run of consecutive indices. `run` is scratch space.
fn write_runs<'a>(
    file: &File,
    items: impl Iterator<Item = (u64, &'a [u8])>,
    base: u64,
    stride: u64,
    run: &mut Vec<u8>,
    operation: &'static str,
) -> Result<(), ImageError> {
    let mut run_start: Option<u64> = None;
    let mut next_index = 0u64;
    for (index, bytes) in items {
        if run_start.is_some() && index != next_index {
            if let Some(start) = run_start.take() {
                file.write_all_at(run, base + start * stride).map_err(io_error(operation))?;
            }
            run.clear();
        }
        run_start.get_or_insert(index);
        run.extend_from_slice(bytes);
        next_index = index + 1;
    }
    if let Some(start) = run_start {
        file.write_all_at(run, base + start * stride).map_err(io_error(operation))?;
    }
    run.clear();
    Ok(())
}

/// A `PageStore` in an image file. The block table is cached in memory (16 bytes per block).
/// Changes gather in memory (`Pending`, bounded) and reach the file at every write barrier,
/// flush and drop, and when the buffer fills, in file order: whatever a process death loses
/// is a suffix of the work since the last barrier, which is what `Flash::write_barrier`
/// allows a device to lose.
#[derive(Debug)]
pub struct ImageStore {
    /// Shared with reads that run outside the simulator's lock (`start_read_contents`).
    file: Arc<File>,
    header: ImageHeader,
    layout: ImageLayout,
    block_metas: Vec<BlockMeta>,
    /// What is known of each page's entry without reading the file: 0 unknown (read the
    /// entry), else 1 + the state code of an entry with no flips and no damage (the common
    /// case), so most reads and programs skip a system call. One byte per page; the file stays
    /// the record (every change is written through).
    known_states: RefCell<Vec<u8>>,
    pending: Pending,
}

/// `known_states` value for a page whose entry is `meta`, or 0 when it carries more than a
/// state (flips, damage) and must be read.
fn known_state(meta: &PageMeta) -> u8 {
    if meta.flip_count == 0 && !meta.excess_damage {
        1 + meta.state.code()
    } else {
        0
    }
}

impl ImageStore {
    /// Creates a new image at `path` (which must not exist) for this configuration. Only the
    /// header is written; the rest of the file is a hole that reads as zeros.
    pub fn create(path: &Path, config: &SimConfig) -> Result<ImageStore, ImageError> {
        config.validate().map_err(ImageError::Config)?;
        let header = ImageHeader {
            profile: config.profile,
            geometry: config.geometry,
            chip_count: config.chip_count,
            ecc_correctable_bits_per_512: config.ecc_correctable_bits_per_512,
            endurance_cycles: config.endurance_cycles,
            seed: config.seed,
        };
        let layout = ImageLayout::compute(&config.geometry, config.chip_count)
            .ok_or(ImageError::InvalidGeometry { reason: "image size overflows 64 bits" })?;
        let file = open_image_file(path, true).map_err(io_error("create"))?;
        file.set_len(layout.file_size_bytes).map_err(io_error("set length"))?;
        file.write_all_at(&header.encode(&layout), 0).map_err(io_error("write header"))?;
        let block_total = config.chip_count as usize * config.geometry.block_count as usize;
        let page_total = block_total * config.geometry.pages_per_block as usize;
        let erased = known_state(&PageMeta::default());
        Ok(ImageStore {
            file: Arc::new(file),
            header,
            layout,
            block_metas: vec![BlockMeta::default(); block_total],
            known_states: RefCell::new(vec![erased; page_total]),
            pending: Pending::default(),
        })
    }

    /// Opens an existing image, checking its header and block table.
    pub fn open(path: &Path) -> Result<ImageStore, ImageError> {
        let file = open_image_file(path, false).map_err(io_error("open"))?;
        let file_size_bytes = file.metadata().map_err(io_error("stat"))?.len();
        let header_bytes_available =
            usize::try_from(file_size_bytes).map_or(HEADER_BYTES, |size| size.min(HEADER_BYTES));
        let mut header_bytes = vec![0u8; header_bytes_available];
        file.read_exact_at(&mut header_bytes, 0).map_err(io_error("read header"))?;
        let (header, layout) = ImageHeader::decode(&header_bytes, file_size_bytes)?;
        // The header is checked (chip count and block count bounded), but the table must also
        // fit this target's memory.
        let block_total = usize::try_from(u64::from(header.chip_count) * u64::from(header.geometry.block_count))
            .map_err(|_| ImageError::InvalidGeometry { reason: "block table larger than this target's memory" })?;
        let table_bytes = block_total
            .checked_mul(BLOCK_ENTRY_BYTES)
            .ok_or(ImageError::InvalidGeometry { reason: "block table larger than this target's memory" })?;
        let mut table = vec![0u8; table_bytes];
        file.read_exact_at(&mut table, layout.block_table_offset).map_err(io_error("read block table"))?;
        let mut block_metas = Vec::with_capacity(block_total);
        for (index, entry) in table.chunks_exact(BLOCK_ENTRY_BYTES).enumerate() {
            block_metas.push(decode_block_entry(entry, index as u64, header.geometry.pages_per_block)?);
        }
        let page_total = block_metas.len() * header.geometry.pages_per_block as usize;
        Ok(ImageStore {
            file: Arc::new(file),
            header,
            layout,
            block_metas,
            known_states: RefCell::new(vec![0; page_total]),
            pending: Pending::default(),
        })
    }

    pub fn header(&self) -> &ImageHeader {
        &self.header
    }

    pub fn layout(&self) -> &ImageLayout {
        &self.layout
    }

    /// All block entries, chip-major (for wear reports).
    pub fn block_metas(&self) -> &[BlockMeta] {
        &self.block_metas
    }

    fn block_index(&self, block: BlockAddress) -> u64 {
        assert!(block.chip.0 < self.header.chip_count, "image: chip {:?} out of range", block.chip);
        assert!(block.block.0 < self.header.geometry.block_count, "image: block {block:?} out of range");
        u64::from(block.chip.0) * u64::from(self.header.geometry.block_count) + u64::from(block.block.0)
    }

    fn page_index(&self, page: PageAddress) -> u64 {
        assert!(page.page_index < self.header.geometry.pages_per_block, "image: page {page:?} out of range");
        self.block_index(page.block_address()) * u64::from(self.header.geometry.pages_per_block)
            + u64::from(page.page_index)
    }

    /// The error for a block index (from `block_index`) the cached block table does not hold.
    fn no_block_entry(&self, index: u64) -> NandError {
        NandError::OutOfRange { what: "image block table entry", value: index, limit: self.block_metas.len() as u64 }
    }

    fn page_entry_offset(&self, page: PageAddress) -> u64 {
        self.layout.page_table_offset + self.page_index(page) * PAGE_ENTRY_BYTES as u64
    }

    /// The page's entry as the file holds it.
    fn read_page_meta(&self, page: PageAddress) -> Result<PageMeta, NandError> {
        let mut entry = [0u8; PAGE_ENTRY_BYTES];
        match self.pending.page_entries.get(&self.page_index(page)) {
            Some(pending) => entry = *pending,
            None => self
                .file
                .read_exact_at(&mut entry, self.page_entry_offset(page))
                .map_err(io_error("read page entry"))?,
        }
        let page_bit_count = crate::ecc::page_bit_count(&self.header.geometry);
        Ok(decode_page_entry(&entry, self.page_index(page), page_bit_count)?)
    }

    fn page_slot_offset(&self, page: PageAddress) -> u64 {
        self.layout.data_offset + self.page_index(page) * self.layout.page_slot_bytes
    }

    /// A reader of this image's page slots usable from any thread without the store. What it
    /// reads is what the file holds: a caller must know the page's latest contents are written
    /// back (not still pending here), as fsoc-array's store does for its chip workers.
    pub fn slot_reader(&self) -> SlotReader {
        SlotReader { file: Arc::clone(&self.file), header: self.header, layout: self.layout }
    }

    /// Applies every pending change to the file (contents, then page entries, then block
    /// entries, each in ascending order).
    pub fn write_back(&mut self) -> Result<(), NandError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = &mut self.pending;
        for (first, run) in &pending.contents {
            let offset = self.layout.data_offset + first * self.layout.page_slot_bytes;
            self.file.write_all_at(run, offset).map_err(io_error("write page"))?;
        }
        let mut run = Vec::new();
        let entries = pending.page_entries.iter().map(|(index, entry)| (*index, entry.as_slice()));
        let stride = PAGE_ENTRY_BYTES as u64;
        write_runs(&self.file, entries, self.layout.page_table_offset, stride, &mut run, "write page entry")?;
        let block_entries: Vec<(u64, [u8; BLOCK_ENTRY_BYTES])> = pending
            .blocks
            .iter()
            .filter_map(|&index| {
                let meta = usize::try_from(index).ok().and_then(|slot| self.block_metas.get(slot))?;
                Some((index, encode_block_entry(meta)))
            })
            .collect();
        let blocks = block_entries.iter().map(|(index, entry)| (*index, entry.as_slice()));
        let stride = BLOCK_ENTRY_BYTES as u64;
        write_runs(&self.file, blocks, self.layout.block_table_offset, stride, &mut run, "write block entry")?;
        pending.blocks.clear();
        pending.page_entries.clear();
        pending.contents_bytes = 0;
        let spare_buffers = &mut pending.spare_buffers;
        for (_, buffer) in std::mem::take(&mut pending.contents) {
            if spare_buffers.len() < SPARE_RUNS_MAX {
                spare_buffers.push(buffer);
            }
        }
        Ok(())
    }

    /// Bounds the changes gathered before a write-back to `bytes` of page contents (and as
    /// many entries as pages of that size); 0 writes every change through at once, for tests
    /// that measure the heap of the engine above without this buffer.
    pub fn set_write_behind_bytes_max(&mut self, bytes: usize) -> Result<(), NandError> {
        self.write_back()?;
        let slot_bytes = usize::try_from(self.layout.page_slot_bytes).unwrap_or(usize::MAX).max(1);
        self.pending.contents_bytes_max = bytes.min(PENDING_CONTENTS_BYTES_MAX);
        self.pending.entries_max = (bytes / slot_bytes).min(PENDING_ENTRIES_MAX);
        Ok(())
    }

    /// Closes the store dropping every change not yet written back, as the death of the
    /// process would (for tests that emulate one).
    pub fn abandon(mut self) {
        self.pending.contents.clear();
        self.pending.page_entries.clear();
        self.pending.blocks.clear();
    }

    /// Writes back once the pending changes reach their bound.
    fn write_back_if_full(&mut self) -> Result<(), NandError> {
        if self.pending.is_full() {
            self.write_back()?;
        }
        Ok(())
    }
}

impl Drop for ImageStore {
    fn drop(&mut self) {
        // Nowhere to report a failure here: callers that need to know call `flush` first.
        let _ = self.write_back();
    }
}

/// Reads page slots of an image file from any thread (`ImageStore::slot_reader`).
#[derive(Clone, Debug)]
pub struct SlotReader {
    file: Arc<File>,
    header: ImageHeader,
    layout: ImageLayout,
}

impl SlotReader {
    /// Reads page `page`'s slot (data, then spare) as the file holds it.
    pub fn read(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        let geometry = &self.header.geometry;
        let out_of_range = |what: &'static str, value: u32, limit: u32| NandError::OutOfRange {
            what,
            value: u64::from(value),
            limit: u64::from(limit),
        };
        if page.chip.0 >= self.header.chip_count {
            return Err(out_of_range("chip", page.chip.0, self.header.chip_count));
        }
        if page.block.0 >= geometry.block_count {
            return Err(out_of_range("block", page.block.0, geometry.block_count));
        }
        if page.page_index >= geometry.pages_per_block {
            return Err(out_of_range("page", page.page_index, geometry.pages_per_block));
        }
        if data.len() != geometry.page_data_bytes as usize || spare.len() != geometry.spare_bytes as usize {
            return Err(NandError::BufferSize {
                what: "page slot",
                expected_bytes: (geometry.page_data_bytes + geometry.spare_bytes) as usize,
                actual_bytes: data.len() + spare.len(),
            });
        }
        let block_index = u64::from(page.chip.0) * u64::from(geometry.block_count) + u64::from(page.block.0);
        let page_index = block_index * u64::from(geometry.pages_per_block) + u64::from(page.page_index);
        read_slot(&self.file, self.layout.data_offset + page_index * self.layout.page_slot_bytes, data, spare)
    }
}

/// Reads a page's slot at `offset` into `data` and then `spare` (adjacent in the file) with one
/// `preadv`; a short count (not expected of a regular file) is finished by plain reads.
fn read_slot(file: &File, offset: u64, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
    use std::os::fd::AsRawFd;
    let total = data.len() + spare.len();
    let vectors = [
        libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() },
        libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() },
    ];
    let file_offset =
        libc::off_t::try_from(offset).map_err(|_| io_error("read page")(std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: both vectors point at live, exclusively borrowed buffers of the stated lengths
    // for the whole call, and the descriptor belongs to `file`, which outlives the call.
    let count = unsafe { libc::preadv(file.as_raw_fd(), vectors.as_ptr(), 2, file_offset) };
    if usize::try_from(count).ok() == Some(total) {
        return Ok(());
    }
    file.read_exact_at(data, offset).map_err(io_error("read page"))?;
    file.read_exact_at(spare, offset + data.len() as u64).map_err(io_error("read page spare"))?;
    Ok(())
}

/// Slots read by one `preadv` at most (two vectors each, within the kernel's IOV_MAX of 1024).
const SLOTS_PER_READ_MAX: usize = 256;

/// Reads `reads` (batch position, slot offset) into the batch's buffers: runs of neighbouring
/// slots (consecutive positions at consecutive offsets) with one `preadv` each.
fn read_slots(
    file: &File,
    reads: &[(usize, u64)],
    slot_stride: u64,
    data: &mut [&mut [u8]],
    spares: &mut [u8],
    spare_bytes: usize,
) -> Result<(), NandError> {
    use std::os::fd::AsRawFd;
    let batch_length = data.len() as u64;
    let out_of_batch =
        || NandError::OutOfRange { what: "batch position", value: reads.len() as u64, limit: batch_length };
    // The batch's buffers, each page's data and spare as one pair.
    let mut pairs: Vec<(&mut [u8], &mut [u8])> = data
        .iter_mut()
        .zip(spares.chunks_exact_mut(spare_bytes.max(1)))
        .map(|(data, spare)| (&mut **data, spare))
        .collect();
    let mut index = 0;
    while let Some(&(first_position, first_offset)) = reads.get(index) {
        // The run: reads at consecutive positions and consecutive slots.
        let mut length = 1;
        while length < SLOTS_PER_READ_MAX
            && reads.get(index + length).is_some_and(|&(position, offset)| {
                position == first_position + length && offset == first_offset + length as u64 * slot_stride
            })
        {
            length += 1;
        }
        let run = pairs.get_mut(first_position..first_position + length).ok_or_else(out_of_batch)?;
        let mut vectors = Vec::with_capacity(2 * length);
        let mut total = 0;
        for (data, spare) in run.iter_mut() {
            vectors.push(libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() });
            vectors.push(libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() });
            total += data.len() + spare.len();
        }
        let count = match (libc::off_t::try_from(first_offset), libc::c_int::try_from(vectors.len())) {
            // SAFETY: every vector points at a live buffer of the batch, exclusively borrowed
            // through `run` for the whole call, with its own length; the descriptor belongs to
            // `file`, which outlives the call.
            (Ok(offset), Ok(vector_count)) => unsafe {
                libc::preadv(file.as_raw_fd(), vectors.as_ptr(), vector_count, offset)
            },
            _ => -1,
        };
        if usize::try_from(count).ok() != Some(total) {
            // A short or failed vectored read (not expected of a regular file): page by page.
            for (slot, (data, spare)) in run.iter_mut().enumerate() {
                read_slot(file, first_offset + slot as u64 * slot_stride, data, spare)?;
            }
        }
        index += length;
    }
    Ok(())
}

/// Opens the image for reading and writing, without access-time updates where the kernel
/// allows it (the owner or root; others open it plainly).
fn open_image_file(path: &Path, create: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |flags: i32| {
        let mut options = OpenOptions::new();
        options.read(true).write(true).custom_flags(flags);
        if create {
            options.create_new(true);
        }
        options.open(path)
    };
    match open(libc::O_NOATIME) {
        Err(error) if error.raw_os_error() == Some(libc::EPERM) => open(0),
        result => result,
    }
}

impl PageStore for ImageStore {
    fn geometry(&self) -> Geometry {
        self.header.geometry
    }

    fn chip_count(&self) -> u32 {
        self.header.chip_count
    }

    fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError> {
        let index = self.block_index(block);
        let slot = usize::try_from(index).ok().and_then(|slot| self.block_metas.get(slot));
        slot.copied().ok_or_else(|| self.no_block_entry(index))
    }

    fn set_block_meta(&mut self, block: BlockAddress, meta: &BlockMeta) -> Result<(), NandError> {
        let index = self.block_index(block);
        let missing = self.no_block_entry(index);
        let slot = usize::try_from(index).ok().and_then(|slot| self.block_metas.get_mut(slot)).ok_or(missing)?;
        *slot = *meta;
        self.pending.blocks.insert(index);
        self.write_back_if_full()
    }

    fn page_meta(&self, page: PageAddress) -> Result<PageMeta, NandError> {
        // An index that does not fit memory has no cached state: the file is read.
        let index = usize::try_from(self.page_index(page)).unwrap_or(usize::MAX);
        let known = self.known_states.borrow().get(index).copied().unwrap_or(0);
        if let Some(state) = known.checked_sub(1).and_then(PageState::from_code) {
            return Ok(PageMeta { state, ..PageMeta::default() });
        }
        let meta = self.read_page_meta(page)?;
        if let Some(slot) = self.known_states.borrow_mut().get_mut(index) {
            *slot = known_state(&meta);
        }
        Ok(meta)
    }

    fn set_page_meta(&mut self, page: PageAddress, meta: &PageMeta) -> Result<(), NandError> {
        let page_index = self.page_index(page);
        self.pending.page_entries.insert(page_index, encode_page_entry(meta));
        let index = usize::try_from(page_index).unwrap_or(usize::MAX);
        if let Some(slot) = self.known_states.get_mut().get_mut(index) {
            *slot = known_state(meta);
        }
        self.write_back_if_full()
    }

    fn write_contents(&mut self, page: PageAddress, data: &[u8], spare: &[u8]) -> Result<(), NandError> {
        let geometry = self.header.geometry;
        assert_eq!(data.len(), geometry.page_data_bytes as usize, "image: data size");
        assert_eq!(spare.len(), geometry.spare_bytes as usize, "image: spare size");
        // Data and spare are adjacent in the slot, and slots of neighbouring pages in the file.
        let index = self.page_index(page);
        let slots_to_block_end = (self.header.geometry.pages_per_block - page.page_index) as usize;
        self.pending.store(index, data, spare, slots_to_block_end);
        self.write_back_if_full()
    }

    fn read_contents(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        if let Some(slot) = self.pending.slot(self.page_index(page), data.len() + spare.len()) {
            let (stored_data, stored_spare) = slot.split_at(data.len());
            data.copy_from_slice(stored_data);
            spare.copy_from_slice(stored_spare);
            return Ok(());
        }
        read_slot(&self.file, self.page_slot_offset(page), data, spare)
    }

    /// Pages not pending are read from the file without the simulator's lock, neighbouring
    /// slots with one `preadv` each (data and spare buffers alternating).
    fn start_read_contents_many(&self, pages: &[(usize, PageAddress)]) -> Option<ContentsBatchFetch> {
        let slot_bytes = fsoc_flash::convert::usize_from_u64(self.layout.page_slot_bytes);
        if pages.iter().any(|(_, page)| self.pending.slot(self.page_index(*page), slot_bytes).is_some()) {
            return None;
        }
        let file = Arc::clone(&self.file);
        let reads: Vec<(usize, u64)> =
            pages.iter().map(|(position, page)| (*position, self.page_slot_offset(*page))).collect();
        let spare_bytes = self.header.geometry.spare_bytes as usize;
        let slot_stride = self.layout.page_slot_bytes;
        Some(Box::new(move |data: &mut [&mut [u8]], spares: &mut [u8]| {
            read_slots(&file, &reads, slot_stride, data, spares, spare_bytes)
        }))
    }

    /// A page not pending is read from the file without the simulator's lock, so readers on
    /// several threads overlap (the file is not written meanwhile: writes need `&mut`).
    fn start_read_contents(&self, page: PageAddress) -> Option<ContentsFetch> {
        if self
            .pending
            .slot(self.page_index(page), fsoc_flash::convert::usize_from_u64(self.layout.page_slot_bytes))
            .is_some()
        {
            return None;
        }
        let file = Arc::clone(&self.file);
        let offset = self.page_slot_offset(page);
        Some(Box::new(move |data: &mut [u8], spare: &mut [u8]| read_slot(&file, offset, data, spare)))
    }

    /// Zeroes the block's page entries in one write. The old contents stay in the data area;
    /// an erased entry means they are never read.
    fn reset_block_pages(&mut self, block: BlockAddress) -> Result<(), NandError> {
        let first_page = PageAddress { chip: block.chip, block: block.block, page_index: 0 };
        let pages = self.header.geometry.pages_per_block as usize;
        let first_index = self.page_index(first_page);
        for index in first_index..first_index + pages as u64 {
            self.pending.page_entries.insert(index, [0u8; PAGE_ENTRY_BYTES]);
        }
        // As in `page_meta`, an index beyond memory has no cached states to reset.
        let first = usize::try_from(first_index).unwrap_or(usize::MAX);
        let erased = known_state(&PageMeta::default());
        if let Some(slots) = first.checked_add(pages).and_then(|end| self.known_states.get_mut().get_mut(first..end)) {
            slots.fill(erased);
        }
        self.write_back_if_full()
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.write_back()?;
        self.file.sync_data().map_err(io_error("sync"))?;
        Ok(())
    }

    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.write_back()
    }
}

impl SimFlash<ImageStore> {
    /// Creates a new device image at `path` (the file must not exist), fresh from the factory.
    pub fn create_image(path: &Path, config: SimConfig) -> Result<Self, ImageError> {
        let store = ImageStore::create(path, &config)?;
        let mut flash = SimFlash::with_store(config, store).map_err(ImageError::Config)?;
        flash.mark_factory_bad_blocks().map_err(ImageError::Config)?;
        Ok(flash)
    }

    /// Opens an existing device image with the configuration its header records (default
    /// faults and bit-error model; change them with `set_fault_config`).
    pub fn open_image(path: &Path) -> Result<Self, ImageError> {
        let store = ImageStore::open(path)?;
        let config = store.header().sim_config();
        SimFlash::with_store(config, store).map_err(ImageError::Config)
    }
}

/// The volume id for a new volume: `given`, or reproducible from SOURCE_DATE_EPOCH and `seed`,
/// or random (so two volumes made with the same seed never pass each other's chip-set check).
/// `fsoc mkfs` and the Python package's `Image.create` both take it from here.
pub fn new_volume_id(given: Option<u64>, seed: u64) -> Result<u64, String> {
    if let Some(id) = given {
        return Ok(id);
    }
    if let Some(epoch) = source_date_epoch()? {
        return Ok(crate::rng::hash64(epoch, seed, 0x766f_6c75_6d65, 0).max(1));
    }
    let mut bytes = [0u8; 8];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|error| format!("/dev/urandom: {error} (give a volume id)"))?;
    Ok(u64::from_le_bytes(bytes).max(1))
}

/// SOURCE_DATE_EPOCH (reproducible builds), if set.
pub fn source_date_epoch() -> Result<Option<u64>, String> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(text) => {
            text.trim().parse().map(Some).map_err(|_| format!("SOURCE_DATE_EPOCH={text:?} is not a number of seconds"))
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn header() -> ImageHeader {
        ImageHeader {
            profile: Profile::Mlc8k,
            geometry: Profile::Mlc8k.geometry(16),
            chip_count: 2,
            ecc_correctable_bits_per_512: 4,
            endurance_cycles: 5000,
            seed: 0x1234_5678_9abc_def0,
        }
    }

    #[test]
    fn header_round_trips() {
        let header = header();
        let layout = ImageLayout::compute(&header.geometry, header.chip_count).expect("layout");
        let bytes = header.encode(&layout);
        assert_eq!(ImageHeader::decode(&bytes, layout.file_size_bytes), Ok((header, layout)));
    }

    // Checks the layout arithmetic for a small MLC 8 KiB image: 32 blocks, 8192 pages.
    #[test]
    fn layout_is_aligned_and_adds_up() {
        let layout = ImageLayout::compute(&Profile::Mlc8k.geometry(16), 2).expect("layout");
        assert_eq!(layout.block_table_offset, 4096);
        assert_eq!(layout.page_table_offset, 8192, "32 entries x 16 bytes round up to one 4 KiB unit");
        assert_eq!(layout.data_offset, 8192 + 8192 * 72);
        assert_eq!(layout.file_size_bytes, layout.data_offset + 8192 * (8192 + 448));
    }

    // Checks that every truncation of a valid header is refused with an error, not a panic.
    #[test]
    fn every_truncated_header_is_refused() {
        let header = header();
        let layout = ImageLayout::compute(&header.geometry, header.chip_count).expect("layout");
        let bytes = header.encode(&layout);
        for length in 0..HEADER_BYTES {
            let prefix = bytes.get(..length).expect("prefix");
            assert!(ImageHeader::decode(prefix, length as u64).is_err(), "length {length} accepted");
        }
    }

    // Checks that seeded random corruptions of a header never panic and are all refused (one
    // flipped byte always breaks the magic, the version or the CRC).
    #[test]
    fn corrupted_headers_are_refused() {
        let header = header();
        let layout = ImageLayout::compute(&header.geometry, header.chip_count).expect("layout");
        let bytes = header.encode(&layout);
        let mut rng = crate::rng::SeededRng::new(5);
        for _ in 0..2000 {
            let mut corrupted = bytes;
            let index = rng.below(HEADER_BYTES as u64) as usize;
            let flip = 1 + rng.below(255) as u8;
            if let Some(byte) = corrupted.get_mut(index) {
                *byte ^= flip;
            }
            assert!(ImageHeader::decode(&corrupted, layout.file_size_bytes).is_err(), "byte {index} ^ {flip}");
        }
    }

    #[test]
    fn entries_round_trip_and_reject_garbage() {
        let block = BlockMeta {
            erase_count: 77,
            bad_mark: BadMark::Grown,
            last_programmed_page_index: Some(12),
            erase_incomplete: true,
        };
        assert_eq!(decode_block_entry(&encode_block_entry(&block), 0, 64), Ok(block));
        assert_eq!(decode_block_entry(&[0; 16], 0, 64), Ok(BlockMeta::default()));
        let mut page = PageMeta { state: PageState::Garbage, ..PageMeta::default() };
        page.add_flip(5);
        page.add_flip(999);
        page.excess_damage = true;
        assert_eq!(decode_page_entry(&encode_page_entry(&page), 0, 16_896), Ok(page));
        assert_eq!(decode_page_entry(&[0; 72], 0, 16_896), Ok(PageMeta::default()));
        let mut bad_state = [0u8; 72];
        bad_state[0] = 9;
        assert!(matches!(decode_page_entry(&bad_state, 3, 16_896), Err(ImageError::CorruptEntry { index: 3, .. })));
        assert!(decode_block_entry(&[0; 15], 0, 64).is_err());
    }

    /// A page's contents, distinct per `(page_index, round)`.
    fn page_bytes(geometry: &Geometry, page_index: u32, round: u8) -> (Vec<u8>, Vec<u8>) {
        let data = (0..geometry.page_data_bytes).map(|byte| (byte as u8) ^ (page_index as u8) ^ round).collect();
        let spare = vec![round ^ 0x5a; geometry.spare_bytes as usize];
        (data, spare)
    }

    fn programmed() -> PageMeta {
        PageMeta { state: PageState::Programmed, ..PageMeta::default() }
    }

    // Checks the write-behind buffer: pending changes read back before they reach the file
    // (including a page rewritten after its block's reset, and runs that are not neighbours);
    // a write barrier, a flush or a drop puts them in the file; `abandon` loses exactly what
    // came after the last barrier, as the death of the process would.
    #[test]
    fn pending_changes_read_back_and_reach_the_file_at_barriers() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("chip.img");
        let config = SimConfig::new(Profile::Slc, 1, 8, 7);
        let geometry = config.geometry;
        let block = |index: u32| BlockAddress::new(0, index);
        let page = |block_index: u32, page_index: u32| PageAddress::new(0, block_index, page_index);
        let read = |store: &ImageStore, address: PageAddress| {
            let mut data = vec![0u8; geometry.page_data_bytes as usize];
            let mut spare = vec![0u8; geometry.spare_bytes as usize];
            store.read_contents(address, &mut data, &mut spare).expect("read");
            (data, spare)
        };
        let mut store = ImageStore::create(&path, &config).expect("create");
        // Pages 0..4 of block 1 and page 2 of block 3: two runs.
        for page_index in 0..4 {
            let (data, spare) = page_bytes(&geometry, page_index, 1);
            store.write_contents(page(1, page_index), &data, &spare).expect("write");
            store.set_page_meta(page(1, page_index), &programmed()).expect("meta");
        }
        let (data, spare) = page_bytes(&geometry, 2, 9);
        store.write_contents(page(3, 2), &data, &spare).expect("write");
        store.set_page_meta(page(3, 2), &programmed()).expect("meta");
        let worn = BlockMeta { erase_count: 3, ..BlockMeta::default() };
        store.set_block_meta(block(1), &worn).expect("block");
        assert_eq!(read(&store, page(1, 2)), page_bytes(&geometry, 2, 1));
        assert_eq!(read(&store, page(3, 2)), page_bytes(&geometry, 2, 9));
        // Reset block 1, program page 0 again: the latest of each reaches the file.
        store.reset_block_pages(block(1)).expect("reset");
        let (data, spare) = page_bytes(&geometry, 0, 2);
        store.write_contents(page(1, 0), &data, &spare).expect("write");
        store.set_page_meta(page(1, 0), &programmed()).expect("meta");
        assert_eq!(read(&store, page(1, 0)), page_bytes(&geometry, 0, 2));
        assert_eq!(store.page_meta(page(1, 1)).expect("meta").state, PageState::Erased);
        store.write_barrier().expect("barrier");
        // After the barrier: a change the abandoned store never writes back.
        let (data, spare) = page_bytes(&geometry, 5, 3);
        store.write_contents(page(2, 5), &data, &spare).expect("write");
        store.set_page_meta(page(2, 5), &programmed()).expect("meta");
        store.set_block_meta(block(2), &worn).expect("block");
        store.abandon();

        let store = ImageStore::open(&path).expect("open");
        assert_eq!(read(&store, page(1, 0)), page_bytes(&geometry, 0, 2));
        assert_eq!(store.page_meta(page(1, 0)).expect("meta").state, PageState::Programmed);
        assert_eq!(store.page_meta(page(1, 1)).expect("meta").state, PageState::Erased);
        assert_eq!(read(&store, page(3, 2)), page_bytes(&geometry, 2, 9));
        assert_eq!(store.page_meta(page(3, 2)).expect("meta").state, PageState::Programmed);
        assert_eq!(store.block_meta(block(1)).expect("block").erase_count, 3);
        assert_eq!(store.page_meta(page(2, 5)).expect("meta").state, PageState::Erased, "abandoned after barrier");
        assert_eq!(store.block_meta(block(2)).expect("block").erase_count, 0, "abandoned after barrier");
        drop(store);

        // A drop writes back too.
        let mut store = ImageStore::open(&path).expect("open");
        let (data, spare) = page_bytes(&geometry, 5, 4);
        store.write_contents(page(2, 5), &data, &spare).expect("write");
        store.set_page_meta(page(2, 5), &programmed()).expect("meta");
        drop(store);
        let store = ImageStore::open(&path).expect("open");
        assert_eq!(read(&store, page(2, 5)), page_bytes(&geometry, 5, 4));
    }

    // Checks that the buffer stays bounded: a stream of programs larger than the bound is
    // written back on the way, and every page reads back from the file.
    #[test]
    fn pending_contents_stay_bounded() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("chip.img");
        let config = SimConfig::new(Profile::Slc, 1, 128, 7);
        let geometry = config.geometry;
        let slot_bytes = (geometry.page_data_bytes + geometry.spare_bytes) as usize;
        let mut store = ImageStore::create(&path, &config).expect("create");
        let pages = (2 * PENDING_CONTENTS_BYTES_MAX / slot_bytes) as u32;
        let per_block = geometry.pages_per_block;
        let address = |index: u32| PageAddress::new(0, index / per_block, index % per_block);
        for index in 0..pages {
            let (data, spare) = page_bytes(&geometry, index, 1);
            store.write_contents(address(index), &data, &spare).expect("write");
            store.set_page_meta(address(index), &programmed()).expect("meta");
            assert!(store.pending.contents_bytes < PENDING_CONTENTS_BYTES_MAX + slot_bytes, "bounded");
        }
        drop(store);
        let store = ImageStore::open(&path).expect("open");
        for index in (0..pages).step_by(97) {
            let mut data = vec![0u8; geometry.page_data_bytes as usize];
            let mut spare = vec![0u8; geometry.spare_bytes as usize];
            store.read_contents(address(index), &mut data, &mut spare).expect("read");
            assert_eq!((data, spare), page_bytes(&geometry, index, 1), "page {index}");
        }
    }
}
