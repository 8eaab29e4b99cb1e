//! `ImageStore`: a `PageStore` kept in a sparse image file, so a simulated device survives
//! between runs. The byte layout is normative in docs/FORMAT.md, section "Image file".
//!
//! Invariants: all-zero metadata means "erased, erase count 0, good", so a new image is created
//! with `set_len` and only written where something changes (a 1 GiB device costs a few KiB of
//! disk until used); opening never trusts the file: every header field is checked before any
//! offset derived from it is used, and malformed input yields an `ImageError`, never a panic.
#![deny(clippy::unwrap_used, clippy::indexing_slicing, clippy::host_endian_bytes)]

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

use crate::geometry::{Geometry, Profile};
use crate::sim::{SimConfig, SimFlash};
use crate::store::{BadMark, BlockMeta, PageMeta, PageState, PageStore, PAGE_FLIPS_MAX};
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

/// A `PageStore` in an image file. The block table is cached in memory (16 bytes per block)
/// and written through; page entries and contents are read and written in place.
#[derive(Debug)]
pub struct ImageStore {
    file: File,
    header: ImageHeader,
    layout: ImageLayout,
    block_metas: Vec<BlockMeta>,
    /// What is known of each page's entry without reading the file: 0 unknown (read the
    /// entry), else 1 + the state code of an entry with no flips and no damage (the common
    /// case), so most reads and programs skip a system call. One byte per page; the file stays
    /// the record (every change is written through).
    known_states: RefCell<Vec<u8>>,
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
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(io_error("create"))?;
        file.set_len(layout.file_size_bytes).map_err(io_error("set length"))?;
        file.write_all_at(&header.encode(&layout), 0).map_err(io_error("write header"))?;
        let block_total = config.chip_count as usize * config.geometry.block_count as usize;
        let page_total = block_total * config.geometry.pages_per_block as usize;
        let erased = known_state(&PageMeta::default());
        Ok(ImageStore {
            file,
            header,
            layout,
            block_metas: vec![BlockMeta::default(); block_total],
            known_states: RefCell::new(vec![erased; page_total]),
        })
    }

    /// Opens an existing image, checking its header and block table.
    pub fn open(path: &Path) -> Result<ImageStore, ImageError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_error("open"))?;
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
        Ok(ImageStore { file, header, layout, block_metas, known_states: RefCell::new(vec![0; page_total]) })
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
        self.file.read_exact_at(&mut entry, self.page_entry_offset(page)).map_err(io_error("read page entry"))?;
        let page_bit_count = crate::ecc::page_bit_count(&self.header.geometry);
        Ok(decode_page_entry(&entry, self.page_index(page), page_bit_count)?)
    }

    fn page_slot_offset(&self, page: PageAddress) -> u64 {
        self.layout.data_offset + self.page_index(page) * self.layout.page_slot_bytes
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
        let offset = self.layout.block_table_offset + index * BLOCK_ENTRY_BYTES as u64;
        let missing = self.no_block_entry(index);
        let slot = usize::try_from(index).ok().and_then(|slot| self.block_metas.get_mut(slot)).ok_or(missing)?;
        self.file.write_all_at(&encode_block_entry(meta), offset).map_err(io_error("write block entry"))?;
        *slot = *meta;
        Ok(())
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
        self.file
            .write_all_at(&encode_page_entry(meta), self.page_entry_offset(page))
            .map_err(io_error("write page entry"))?;
        let index = usize::try_from(self.page_index(page)).unwrap_or(usize::MAX);
        if let Some(slot) = self.known_states.get_mut().get_mut(index) {
            *slot = known_state(meta);
        }
        Ok(())
    }

    fn write_contents(&mut self, page: PageAddress, data: &[u8], spare: &[u8]) -> Result<(), NandError> {
        let geometry = self.header.geometry;
        assert_eq!(data.len(), geometry.page_data_bytes as usize, "image: data size");
        assert_eq!(spare.len(), geometry.spare_bytes as usize, "image: spare size");
        // Data and spare are adjacent in the slot: one write (a copy is cheaper than a call).
        let mut slot = Vec::with_capacity(data.len() + spare.len());
        slot.extend_from_slice(data);
        slot.extend_from_slice(spare);
        self.file.write_all_at(&slot, self.page_slot_offset(page)).map_err(io_error("write page"))?;
        Ok(())
    }

    fn read_contents(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        // One read of the adjacent data and spare, split after.
        let mut slot = vec![0u8; data.len() + spare.len()];
        self.file.read_exact_at(&mut slot, self.page_slot_offset(page)).map_err(io_error("read page"))?;
        let (stored_data, stored_spare) = slot.split_at(data.len());
        data.copy_from_slice(stored_data);
        spare.copy_from_slice(stored_spare);
        Ok(())
    }

    /// Zeroes the block's page entries in one write. The old contents stay in the data area;
    /// an erased entry means they are never read.
    fn reset_block_pages(&mut self, block: BlockAddress) -> Result<(), NandError> {
        let first_page = PageAddress { chip: block.chip, block: block.block, page_index: 0 };
        let pages = self.header.geometry.pages_per_block as usize;
        let zeros = vec![0u8; pages * PAGE_ENTRY_BYTES];
        self.file.write_all_at(&zeros, self.page_entry_offset(first_page)).map_err(io_error("reset page entries"))?;
        // As in `page_meta`, an index beyond memory has no cached states to reset.
        let first = usize::try_from(self.page_index(first_page)).unwrap_or(usize::MAX);
        let erased = known_state(&PageMeta::default());
        if let Some(slots) = first.checked_add(pages).and_then(|end| self.known_states.get_mut().get_mut(first..end)) {
            slots.fill(erased);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.file.sync_data().map_err(io_error("sync"))?;
        Ok(())
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
}
