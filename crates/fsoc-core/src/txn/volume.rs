//! A volume: the segment log, the two B+trees and the metaroot areas, with format, mount and
//! the commit protocol (docs/DESIGN.md walks through what survives a power cut at each step).
//!
//! Commit order: (1) flush dirty tree nodes, (2) write dirty segment-table pages, (3) wait for
//! every program, (4) program one metaroot page, (5) wait for it. Only after (5) may pages the
//! transaction dropped be reused. A failure anywhere poisons the volume: it refuses further
//! changes until remounted, so nothing half-done is ever built upon.

use alloc::vec::Vec;

use alloc::boxed::Box;

use fsoc_flash::{Flash, FlushWait, NandError, NvramDevice, PageAddress, ReadStatus};

use crate::address::LogAddress;
use crate::btree::{Tree, TreeConfig, TreeError, TreeRoot};
use crate::segment::layout::{
    Redundancy, FIRST_LOG_SEGMENT, METAROOT_AREA_COUNT, METAROOT_SEGMENTS, SUPERBLOCK_HOMES, SUPERBLOCK_SEGMENT,
};
use crate::segment::{Device, Layout, PageTag, SegmentError, SegmentLog, SegmentTable};
use crate::txn::metaroot::{ChainLink, Metaroot, MetarootShape, FLAG_CLEAN, FLAG_CLEAN_TWIN, FLAG_ORPHANS};
use crate::txn::nvram_log::{NvramLog, NvramMountReport, NvramRecord};
use crate::txn::store::LogNodeStore;
use crate::txn::superblock::{
    Superblock, DEFAULT_METAROOT_AREAS, FORMAT_VERSION, FORMAT_VERSION_CHAINED_DELTA, FORMAT_VERSION_COMPACT_DELTA,
    FORMAT_VERSION_REDUNDANCY, FORMAT_VERSION_SUPERBLOCK_HOMES,
};
use fsoc_flash::codec::DecodeError;

pub const DIRECTORY_TREE_ID: u8 = 1;
pub const ALLOCATION_TREE_ID: u8 = 2;
/// Metaroot pages examined backwards from the last programmed one (one torn page, one page
/// corrupted by a paired-page program, and one spare).
const METAROOT_STEP_BACK_PAGES: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeConfig {
    /// Bytes of clean nodes cached per tree (`TreeConfig::cache_bytes_max`).
    pub cache_bytes_max: usize,
    /// Dirty nodes (both trees together) before they are written out mid-transaction; each
    /// tree also keeps to it within one operation (`TreeConfig::dirty_nodes_max`).
    pub dirty_nodes_max: usize,
    /// Segments kept free for the cleaner and for commits.
    pub reserve_segments: u32,
    pub read_only: bool,
    /// MLC/TLC paired-page distance to guard against; `None` takes the chip's
    /// (`Flash::paired_page_distance`), `Some(0)` turns the guard off. After each commit the
    /// open segment skips this many pages on every chip, so a program cut later cannot corrupt
    /// a committed page through its paired cells (docs/DESIGN.md).
    pub paired_page_distance: Option<u32>,
    /// What format stores twice or under parity (needs two chips or more); a mount takes the
    /// superblock's and ignores this.
    pub redundancy: Redundancy,
}

impl Default for VolumeConfig {
    fn default() -> Self {
        VolumeConfig {
            cache_bytes_max: crate::btree::CACHE_BYTES_MAX_DEFAULT,
            dirty_nodes_max: 256,
            reserve_segments: 0,
            read_only: false,
            paired_page_distance: None,
            redundancy: Redundancy::None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("segment log: {0}")]
    Segment(#[from] SegmentError),
    /// A tree found a corrupt node or an entry too large. A failure of the store under it
    /// arrives as `Segment` instead (see the `From` conversion), so power loss stays power loss.
    #[error("tree: {0}")]
    Tree(TreeError<SegmentError>),
    #[error("{structure} is corrupt: {source}")]
    Decode { structure: &'static str, source: DecodeError },
    #[error("not an fsoc volume: {reason}")]
    NotAVolume { reason: &'static str },
    #[error("cannot rebuild: {reason}")]
    CannotRebuild { reason: &'static str },
    /// A well-formed volume of a format version this build does not read (docs/FORMAT.md).
    #[error("the volume has format version {found}; this build reads format versions {oldest} to {newest}")]
    UnsupportedVersion { found: u32, oldest: u32, newest: u32 },
    #[error("the flash does not match the volume: {reason}")]
    WrongDevice { reason: &'static str },
    #[error("chip set: {0}")]
    ChipSet(#[from] crate::txn::chip_set::ChipSetError),
    #[error("cannot format: {reason}")]
    CannotFormat { reason: &'static str },
    #[error("no valid metaroot found")]
    NoMetaroot,
    #[error("the volume is read-only")]
    ReadOnly,
    #[error("an earlier failure left the volume unusable until remount")]
    Poisoned,
    /// The flash can no longer guarantee writes (`WornOut`); the volume takes no more changes.
    #[error("the flash is worn out: {0}; the volume is read-only")]
    WornOut(WornOut),
    /// The NVRAM commit tier refused the device given, or a volume that keeps commits in NVRAM
    /// was opened without it.
    #[error("NVRAM: {reason}")]
    Nvram { reason: &'static str },
}

/// Times a metaroot is written again after the flash reported a failed program or erase, each
/// time in a freshly erased area, before the commit fails.
const METAROOT_RETRIES_MAX: u32 = 8;

impl From<NandError> for TxnError {
    fn from(error: NandError) -> Self {
        TxnError::Segment(SegmentError::Media(error))
    }
}

/// Why the flash can no longer guarantee writes: end of life (docs/DESIGN.md, "End of life").
/// The volume then takes no more changes; everything committed stays readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WornOut {
    /// A metaroot area could not be erased. Every commit needs the three areas (a re-anchoring
    /// mount after a power cut must find one that holds neither the record it mounted nor that
    /// record's predecessor), and there is no spare area.
    MetarootArea { segment: u32 },
    /// More than a tenth of the log segments put in service (all but those bad from the
    /// factory) have been retired since (`retired_segments_max`). Wear levelling keeps the
    /// erase counts together, so when blocks start to wear out the others are at the same
    /// count and follow; past this share the failures come faster than the reserve can be
    /// relied on to absorb them in the middle of a change.
    Segments { retired: u32, in_service: u32 },
}

impl core::fmt::Display for WornOut {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WornOut::MetarootArea { segment } => {
                write!(formatter, "the metaroot area in segment {segment} can no longer be erased")
            }
            WornOut::Segments { retired, in_service } => write!(
                formatter,
                "{retired} of the {in_service} log segments put in service have failed (more than {} is too many)",
                retired_segments_max(*in_service)
            ),
        }
    }
}

/// The most log segments retired after use (worn out, or a program or erase failed on them)
/// a volume goes on writing with, of the `in_service` segments it put in service: a tenth.
/// Segments bad from the factory are not in service (a datasheet allows about 2% of them, and
/// a test may retire most of a volume this way to shape it).
pub fn retired_segments_max(in_service: u32) -> u32 {
    in_service / 10
}

/// Format version 9: a metaroot area whose segment has been erased more than the most-erased
/// log segment plus this margin moves to the least-worn free segment at its next switch, and its
/// segment goes back to the log (docs/DESIGN.md, "End of life"), so no area block is erased more
/// than the log's most-erased plus `AREA_WEAR_MARGIN + 1`. A move costs two superblock pages
/// per chip (and a home's erase every `pages_per_block / 2` moves) and no erase the area would
/// not have made anyway: a small margin costs little.
pub const AREA_WEAR_MARGIN: u32 = 1;

/// One of the three metaroot areas (`METAROOT_SEGMENTS`, in order), naming its entry in the
/// per-area arrays: a slot that cannot be out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetarootArea {
    First,
    Second,
    Third,
}

impl MetarootArea {
    const ALL: [MetarootArea; 3] = [MetarootArea::First, MetarootArea::Second, MetarootArea::Third];

    /// This area's segment among `areas` (the superblock's `metaroot_areas`).
    fn segment_in(self, areas: &[u32; 3]) -> u32 {
        *self.of(areas)
    }

    /// This area's entry of a per-area array.
    fn of<T>(self, per_area: &[T; 3]) -> &T {
        let [first, second, third] = per_area;
        match self {
            MetarootArea::First => first,
            MetarootArea::Second => second,
            MetarootArea::Third => third,
        }
    }

    fn of_mut<T>(self, per_area: &mut [T; 3]) -> &mut T {
        let [first, second, third] = per_area;
        match self {
            MetarootArea::First => first,
            MetarootArea::Second => second,
            MetarootArea::Third => third,
        }
    }

    /// The two other areas, in order.
    fn others(self) -> [MetarootArea; 2] {
        match self {
            MetarootArea::First => [MetarootArea::Second, MetarootArea::Third],
            MetarootArea::Second => [MetarootArea::First, MetarootArea::Third],
            MetarootArea::Third => [MetarootArea::First, MetarootArea::Second],
        }
    }
}

/// Where the next metaroot goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MetarootCursor {
    area_slot: MetarootArea,
    next_page: u32,
    /// Newest valid commit counter among pages 0 and 1 of each area (None: neither valid).
    area_counters: [Option<u64>; 3],
    /// The current area may not hold the newest record's predecessor (a mount re-anchoring a
    /// record that is page 0 of its area): only the oldest other area may be erased next.
    oldest_area_only: bool,
}

/// What mount found, for reporting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountReport {
    pub page_reads: u64,
    pub clean: bool,
    pub commit_counter: u64,
    /// Damage a power cut cannot explain, found by mount (the volume still mounted).
    pub damage: Option<MountDamage>,
    /// A chip of a volume with redundancy that mount found dead or blank: the volume mounted
    /// read-only, its pages rebuilt from the other chips, until `fsoc rebuild` restores it.
    pub missing_chip: Option<u32>,
}

/// Metadata damage mount found and worked around. A power cut tears at most the one metaroot
/// page being programmed, so anything more is media damage and is reported, never hidden
/// (docs/DESIGN.md, "Damage that is not a power cut").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountDamage {
    /// One of the two copies of the clean-unmount metaroot is unreadable; the other was used,
    /// so nothing was lost.
    CleanRecordCopyLost { commit_counter: u64 },
    /// `unreadable_pages` (two or more) programmed metaroot pages after the newest readable one:
    /// the volume mounted an older commit, and the newer commits are lost.
    CommitsLost { unreadable_pages: u32, mounted_commit_counter: u64 },
    /// The first superblock copy of chip 0 is unreadable; the second was used.
    SuperblockCopyLost,
}

impl core::fmt::Display for MountDamage {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MountDamage::CleanRecordCopyLost { commit_counter } => write!(
                formatter,
                "one of the two copies of the clean-unmount metaroot (commit {commit_counter}) is unreadable; \
                 the other copy was used and nothing was lost"
            ),
            MountDamage::CommitsLost { unreadable_pages, mounted_commit_counter } => write!(
                formatter,
                "{unreadable_pages} metaroot pages after commit {mounted_commit_counter} are unreadable (a power cut \
                 damages at most one): the volume was rolled back to commit {mounted_commit_counter} and newer \
                 commits are lost"
            ),
            MountDamage::SuperblockCopyLost => {
                write!(formatter, "the first superblock copy is unreadable; the second copy was used")
            }
        }
    }
}

pub struct Volume<F: Flash> {
    pub(crate) log: SegmentLog<F>,
    pub(crate) directory: Tree,
    pub(crate) allocation: Tree,
    pub(crate) superblock: Superblock,
    pub(crate) config: VolumeConfig,
    pub(crate) next_inode: u64,
    committed: Metaroot,
    cursor: MetarootCursor,
    poisoned: bool,
    /// Whether the latest commit's flush was left running (`FlushWait::is_pending`): a caller
    /// outside the volume's lock may still be waiting for it.
    flush_left_running: bool,
    pub(crate) mount_report: MountReport,
    /// `Device::operations_issued` when the latest commit became durable.
    pub(crate) last_commit_operations: u64,
    /// The orphan list may be non-empty (recorded in the metaroot, so a mount of a volume
    /// without orphans need not read the allocation tree).
    pub(crate) may_have_orphans: bool,
    /// The NVRAM commit log, on a volume formatted with one (superblock `nvram_bytes`).
    nvram: Option<NvramLog>,
    /// Records mount found in the NVRAM, for the file-system layer to replay (`take_nvram_records`).
    nvram_records: Vec<NvramRecord>,
    pub(crate) nvram_mount_report: NvramMountReport,
    /// End of life reached: no more changes, and commits write nothing (`set_worn_out`).
    worn_out: Option<WornOut>,
    /// Metaroot areas whose erase failed in this session (their segments are retired in the
    /// segment table at the next commit, so a later session knows them too).
    failed_areas: [bool; 3],
    /// Set while a mount re-anchors a record that carries changes the file-system layer has
    /// not replayed yet (a delta payload, NVRAM records): the segment table loaded then is the
    /// full commit's, which may call free a segment the changes since have written, so no
    /// metaroot area may move (`area_moves_allowed`).
    replay_pending: bool,
    /// A metaroot area's erase was counted in the segment table since the table was last
    /// written (format version 9): the last record of the current area is a full commit, so a
    /// power cut loses at most the count of one erase (`area_erase_must_be_stored`).
    area_erase_unstored: bool,
    /// Metaroot-area erases made before the segment table was loaded (a re-anchoring mount's),
    /// counted in their entries when it is.
    area_erases_before_table: Vec<u32>,
    /// A read-only mount of a volume that was not unmounted cleanly: the re-anchoring a
    /// writable mount does first is still owed (`make_writable`); `Some(oldest_area_only)`.
    reanchor_owed: Option<bool>,
    /// The newest record this session wrote, when it is a delta commit that holds every change
    /// since the full commit (not chained): what the next records may extend (`chain_base`).
    last_delta_record: Option<ChainLink>,
    /// The payload of the mounted record's base, when that record is chained (format version
    /// 12): the file-system layer replays it before the record's own (`take_mounted_base_delta`).
    mounted_base_delta: Vec<u8>,
}

fn decode_error(structure: &'static str) -> impl Fn(DecodeError) -> TxnError {
    move |source| TxnError::Decode { structure, source }
}

impl<F: Flash> Volume<F> {
    fn tree_config(config: &VolumeConfig, tree_id: u8) -> TreeConfig {
        // A read-only volume never writes: the changes a delta replay makes stay in memory.
        let dirty_nodes_max = if config.read_only { usize::MAX } else { config.dirty_nodes_max };
        TreeConfig { tree_id, cache_bytes_max: config.cache_bytes_max, dirty_nodes_max }
    }

    /// Default reserve: enough free segments for the cleaner to relocate one victim and for a
    /// commit to rewrite every dirty node, table page and index page (of a volume formatted
    /// by this build).
    pub fn reserve_segments_for(layout: &Layout, config: &VolumeConfig) -> u32 {
        Self::reserve_segments_for_shape(layout, config, &Self::shape_for(layout, FORMAT_VERSION))
    }

    fn reserve_segments_for_shape(layout: &Layout, config: &VolumeConfig, shape: &MetarootShape) -> u32 {
        if config.reserve_segments > 0 {
            return config.reserve_segments;
        }
        let pages_per_segment = u64::from(layout.pages_per_segment());
        let table_pages = u64::from(shape.table_page_count) + u64::from(shape.index_page_count);
        let commit_pages = (config.dirty_nodes_max as u64).saturating_add(table_pages + 16);
        // A reserve beyond any volume (an absurd `dirty_nodes_max`) saturates, and format
        // refuses it.
        let commit_segments = u32::try_from(commit_pages.div_ceil(pages_per_segment)).unwrap_or(u32::MAX);
        commit_segments.saturating_add(2).max(layout.log_segment_count() / 20)
    }

    /// The metaroot shape of a volume of this layout and format version.
    pub fn shape_for(layout: &Layout, format_version: u32) -> MetarootShape {
        MetarootShape::for_volume(format_version, layout.segment_count(), layout.page_size_bytes())
    }

    /// The erase blocks per chip a volume may have on `chip_count` chips whose geometry at
    /// `blocks` blocks is `geometry_for(blocks)`: (smallest, largest), by `format_refusal`'s own
    /// rule. `mkfs` and the Python package size volumes with it. Above the smallest, only the
    /// segment table's size limits, so refusals are monotone and a binary search finds the
    /// largest.
    pub fn block_count_range(
        geometry_for: impl Fn(u32) -> fsoc_flash::Geometry,
        chip_count: u32,
        config: &VolumeConfig,
    ) -> (u32, u32) {
        let refused = |blocks: u32| {
            let geometry = geometry_for(blocks);
            geometry.validate().is_err() || Self::format_refusal(&Layout::new(geometry, chip_count), config).is_some()
        };
        let smallest = (4..4096).find(|&blocks| !refused(blocks)).unwrap_or(4096);
        let (mut low, mut high) = (smallest, 1u32 << 24);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if refused(middle) {
                high = middle;
            } else {
                low = middle;
            }
        }
        (smallest, low)
    }

    /// Why a volume of this layout cannot be formatted, if it cannot (so tools can find the
    /// smallest and largest sizes before they create anything).
    pub fn format_refusal(layout: &Layout, config: &VolumeConfig) -> Option<&'static str> {
        let shape = Self::shape_for(layout, FORMAT_VERSION);
        if layout.chip_count == 0 || layout.chip_count > crate::txn::superblock::CHIP_COUNT_MAX {
            return Some("chip count outside 1..=64");
        }
        if config.redundancy != Redundancy::None && layout.chip_count < 2 {
            return Some("redundancy across chips needs at least two chips");
        }
        if shape.directory_len() > Metaroot::table_pages_max(layout.page_size_bytes()) {
            return Some("too many blocks: the segment table's index does not fit a metaroot");
        }
        let reserve = Self::reserve_segments_for(layout, config);
        // Version 9 takes the first log segment for the superblock's second home.
        if layout.log_segment_count() < reserve + 5 {
            return Some("too few blocks for the log and its reserve");
        }
        None
    }

    /// Writes an empty volume: superblocks, an empty segment table, two empty trees and the
    /// first metaroot. The caller (fs layer) then inserts the root directory and commits.
    pub fn format(flash: F, config: VolumeConfig, volume_id: u64) -> Result<Volume<F>, TxnError> {
        Self::format_with_nvram(flash, None, config, volume_id)
    }

    /// `format`, keeping transaction points in `nvram` when given (the superblock names it, and
    /// the volume cannot be mounted without it afterwards).
    pub fn format_with_nvram(
        flash: F,
        nvram: Option<Box<dyn NvramDevice>>,
        config: VolumeConfig,
        volume_id: u64,
    ) -> Result<Volume<F>, TxnError> {
        let mut device = Device::new(flash);
        if config.redundancy != Redundancy::None && device.layout().chip_count < 2 {
            return Err(TxnError::CannotFormat { reason: "redundancy across chips needs at least two chips" });
        }
        device.set_redundancy(config.redundancy);
        let (nvram_bytes, nvram_technology) = match &nvram {
            Some(nvram) => (
                u32::try_from(nvram.size_bytes())
                    .ok()
                    .filter(|&bytes| (1024..=16 * 1024 * 1024).contains(&bytes) && bytes % 8 == 0)
                    .ok_or(TxnError::CannotFormat { reason: "the NVRAM must hold 1 KiB to 16 MiB in 8-byte words" })?,
                u32::from(nvram.technology_code()),
            ),
            None => (0, 0),
        };
        let layout = device.layout();
        let geometry = layout.geometry;
        geometry.validate().map_err(|reason| TxnError::CannotFormat { reason })?;
        if let Some(reason) = Self::format_refusal(&layout, &config) {
            return Err(TxnError::CannotFormat { reason });
        }
        // Segments 0 to 4: the superblock's homes and the metaroot areas (version 9).
        for segment_index in [SUPERBLOCK_SEGMENT].into_iter().chain(METAROOT_SEGMENTS).chain([SUPERBLOCK_HOMES[1]]) {
            for block in layout.blocks_of_segment(segment_index) {
                if device.flash().is_bad_block(block)? {
                    return Err(TxnError::CannotFormat {
                        reason: "a block of segments 0-4 (superblock homes, metaroot areas) is bad",
                    });
                }
            }
            device.erase_segment(segment_index)?;
        }
        device.barrier();
        for chip_index in 0..layout.chip_count {
            let superblock = Superblock {
                format_version: FORMAT_VERSION,
                geometry,
                chip_count: layout.chip_count,
                chip_index,
                volume_id,
                metaroot_area_count: METAROOT_AREA_COUNT,
                first_log_segment: FIRST_LOG_SEGMENT,
                nvram_bytes,
                nvram_technology,
                redundancy: config.redundancy,
                generation: 0,
                metaroot_areas: DEFAULT_METAROOT_AREAS,
            };
            let bytes = superblock.encode(layout.page_size_bytes());
            // Pages 0 and 1 of block 0 on this chip: log addresses chip_index and
            // chip_index + p of segment 0.
            for copy in 0..2 {
                let address = layout.address(SUPERBLOCK_SEGMENT, chip_index + copy * layout.chip_count);
                device.program(address, &bytes, PageTag::Superblock)?;
            }
        }
        let shape = Self::shape_for(&layout, FORMAT_VERSION);
        let mut table = SegmentTable::new(layout.segment_count(), layout.pages_per_segment(), layout.page_size_bytes())
            .with_block_pages(layout.geometry.pages_per_block);
        if shape.is_indexed() {
            table = table.with_index_pages(shape.index_page_count);
        }
        // The superblock's second home is never the log's.
        table.reserve_second_home();
        // Blocks bad from the factory: masked out of their segment where it can go on without
        // them, else the segment is retired.
        for segment_index in SUPERBLOCK_HOMES[1] + 1..layout.segment_count() {
            let mut bad = 0;
            for block in layout.blocks_of_segment(segment_index) {
                bad += u32::from(device.flash().is_bad_block(block)?);
            }
            if bad > 0 && layout.can_mask_blocks(bad) {
                table.set_masked_blocks(segment_index, bad);
            } else if bad > 0 {
                table.retire(segment_index);
            }
        }
        let superblock = Superblock::decode(
            &Superblock {
                format_version: FORMAT_VERSION,
                geometry,
                chip_count: layout.chip_count,
                chip_index: 0,
                volume_id,
                metaroot_area_count: 3,
                first_log_segment: FIRST_LOG_SEGMENT,
                nvram_bytes,
                nvram_technology,
                redundancy: config.redundancy,
                generation: 0,
                metaroot_areas: DEFAULT_METAROOT_AREAS,
            }
            .encode(layout.page_size_bytes()),
        )
        .map_err(decode_error("superblock"))?;
        let mut log = SegmentLog::new(device, Some(table));
        let empty_root = TreeRoot { pointer: crate::address::PagePointer::NULL, height: 1 };
        let committed = Metaroot {
            commit_counter: 0,
            volume_id,
            flags: 0,
            next_inode: 2,
            directory_root: empty_root,
            allocation_root: empty_root,
            // Never encoded: the first commit below writes the table and names it.
            segment_table: Vec::new(),
            shape,
            delta: Vec::new(),
            chain: None,
            nvram_lag: 0,
        };
        let nvram = match nvram {
            Some(nvram) => {
                let (nvram, done_ns) = NvramLog::format(nvram, volume_id, log.device().now_ns())?;
                log.device().wait_until(done_ns);
                Some(nvram)
            }
            None => None,
        };
        log.close_open_segments();
        let mut config = config;
        config.reserve_segments = Self::reserve_segments_for(&layout, &config);
        let mut volume = Volume {
            log,
            directory: Tree::new_empty(Self::tree_config(&config, DIRECTORY_TREE_ID)),
            allocation: Tree::new_empty(Self::tree_config(&config, ALLOCATION_TREE_ID)),
            superblock,
            config,
            next_inode: 2,
            committed,
            // The first commit switches into area 0 (every page-0 counter is unknown).
            cursor: MetarootCursor {
                area_slot: MetarootArea::Third,
                next_page: u32::MAX,
                area_counters: [None; 3],
                oldest_area_only: false,
            },
            poisoned: false,
            flush_left_running: false,
            mount_report: MountReport::default(),
            last_commit_operations: 0,
            may_have_orphans: false,
            nvram,
            nvram_records: Vec::new(),
            nvram_mount_report: NvramMountReport::default(),
            worn_out: None,
            failed_areas: [false; 3],
            replay_pending: false,
            area_erase_unstored: false,
            area_erases_before_table: Vec::new(),
            reanchor_owed: None,
            last_delta_record: None,
            mounted_base_delta: Vec::new(),
        };
        volume.commit(false)?;
        Ok(volume)
    }

    /// Mounts a volume: one superblock read per chip (the chip-set check), the bounded
    /// metaroot search, nothing else. The trees and the segment table are read on demand.
    pub fn mount(flash: F, config: VolumeConfig) -> Result<Volume<F>, TxnError> {
        Self::mount_with_nvram(flash, None, config)
    }

    /// `mount` of a volume that may keep transaction points in NVRAM: after the flash's
    /// metaroot, the records of the NVRAM log that extend it are read (bounded by the NVRAM's
    /// size, counted apart from page reads) and kept for the file-system layer to replay. A
    /// volume formatted with NVRAM is refused without it; an NVRAM given to a volume without
    /// one is refused too.
    pub fn mount_with_nvram(
        flash: F,
        nvram: Option<Box<dyn NvramDevice>>,
        config: VolumeConfig,
    ) -> Result<Volume<F>, TxnError> {
        let mut device = Device::new(flash);
        // Counted by the device itself (every read of the volume goes through it), so the
        // bound holds on any flash, not only on one that keeps statistics.
        let reads_before = device.pages_read();
        let layout = device.layout();
        let (superblock, superblock_copy, first_chip) = Self::read_superblock(&mut device)?;
        if superblock.geometry != layout.geometry {
            return Err(TxnError::WrongDevice { reason: "flash geometry differs from the superblock's" });
        }
        if superblock.chip_count == layout.chip_count {
            device.set_redundancy(superblock.redundancy);
        }
        device.set_metaroot_areas(superblock.metaroot_areas);
        // Every chip's superblock, read together: p page reads, one read time. A volume with
        // redundancy mounts without one of its chips (dead or blank): its pages are rebuilt.
        let missing_chip = crate::txn::chip_set::check_chip_set(&mut device, &superblock, first_chip)?;
        device.set_missing_chip(missing_chip);
        let layout = device.layout();
        let mut config = config;
        if missing_chip.is_some() {
            // Degraded: every page is still readable, but nothing new would be protected.
            config.read_only = true;
        }
        // The superblock's version fixes the metaroots' shape: a version-1 volume keeps naming
        // its table pages directly, whichever build writes to it.
        let shape = Self::shape_for(&layout, superblock.format_version);
        let found = Self::find_newest_metaroot(&mut device, &superblock, shape)?;
        let (nvram, nvram_records, nvram_mount_report) = match (nvram, superblock.nvram_bytes) {
            (None, 0) => (None, Vec::new(), NvramMountReport::default()),
            (None, _) => {
                return Err(TxnError::Nvram {
                    reason: "the volume keeps its latest commits in NVRAM, and no NVRAM was given",
                })
            }
            (Some(_), 0) => return Err(TxnError::Nvram { reason: "the volume was formatted without NVRAM" }),
            (Some(nvram), bytes) => {
                if nvram.size_bytes() != u64::from(bytes) {
                    return Err(TxnError::Nvram { reason: "the NVRAM's size differs from the superblock's" });
                }
                let base = found.metaroot.nvram_base();
                let (log, records, report, done_ns) =
                    NvramLog::open(nvram, superblock.volume_id, base, device.now_ns())?;
                device.wait_until(done_ns);
                (Some(log), records, report)
            }
        };
        config.reserve_segments = Self::reserve_segments_for_shape(&layout, &config, &shape);
        let mut committed = found.metaroot;
        if let Some(last) = nvram_records.last() {
            // The NVRAM's newest record is the committed state's counter, next inode and flags;
            // its changes are replayed by the file-system layer.
            let lag = last.commit_counter - committed.nvram_base();
            committed.nvram_lag =
                u32::try_from(lag).map_err(|_| TxnError::Nvram { reason: "the log's counters run too far" })?;
            committed.commit_counter = last.commit_counter;
            committed.next_inode = last.next_inode;
            committed.flags = (committed.flags & !FLAG_ORPHANS) | (last.flags & FLAG_ORPHANS);
        }
        let unreadable_after = found.last_programmed_page - found.page_index;
        // Only a record with nothing programmed after it ended a session; anything else is
        // recovered from (re-anchored) below.
        // Records in the NVRAM after a clean record are a later session's commits.
        let clean = committed.is_clean() && unreadable_after == 0 && nvram_records.is_empty();
        let first_copy_of_clean_record = committed.is_clean() && committed.flags & FLAG_CLEAN_TWIN == 0;
        let damage = if first_copy_of_clean_record && unreadable_after == 1 {
            // A clean unmount writes its record twice and nothing follows until the next
            // mount, which starts from the twin: the unreadable page is the lost twin.
            Some(MountDamage::CleanRecordCopyLost { commit_counter: committed.commit_counter })
        } else if unreadable_after >= 2 {
            Some(MountDamage::CommitsLost {
                unreadable_pages: unreadable_after,
                mounted_commit_counter: committed.commit_counter,
            })
        } else if superblock_copy > 0 {
            Some(MountDamage::SuperblockCopyLost)
        } else {
            None
        };
        let mut volume = Volume {
            log: SegmentLog::new(device, None),
            directory: Tree::open(Self::tree_config(&config, DIRECTORY_TREE_ID), committed.directory_root),
            allocation: Tree::open(Self::tree_config(&config, ALLOCATION_TREE_ID), committed.allocation_root),
            superblock,
            config,
            next_inode: committed.next_inode,
            cursor: MetarootCursor {
                area_slot: found.area_slot,
                next_page: found.last_programmed_page + 1,
                area_counters: found.area_counters,
                oldest_area_only: false,
            },
            committed,
            poisoned: false,
            flush_left_running: false,
            mount_report: MountReport::default(),
            last_commit_operations: 0,
            may_have_orphans: false,
            nvram,
            nvram_records,
            nvram_mount_report,
            worn_out: None,
            failed_areas: [false; 3],
            replay_pending: false,
            area_erase_unstored: false,
            area_erases_before_table: Vec::new(),
            // Page 0's predecessor is in another area, which must not be erased now.
            reanchor_owed: (!clean).then_some(found.page_index == 0),
            last_delta_record: None,
            mounted_base_delta: found.base_delta,
        };
        volume.may_have_orphans = volume.committed.may_have_orphans();
        volume.mount_report = MountReport {
            page_reads: volume.log.device().pages_read() - reads_before,
            clean,
            commit_counter: volume.committed.commit_counter,
            damage,
            missing_chip,
        };
        if !config.read_only {
            volume.reanchor_if_owed()?;
        }
        Ok(volume)
    }

    /// After an unclean unmount (`reanchor_owed`), before the first change: the last metaroot
    /// page may hold unstable bits, and pages after it may be torn, so the committed state is
    /// re-anchored in a freshly erased area before anything else is erased or appended
    /// (docs/DESIGN.md, "Mount after a power cut").
    fn reanchor_if_owed(&mut self) -> Result<(), TxnError> {
        let Some(oldest_area_only) = self.reanchor_owed.take() else {
            return Ok(());
        };
        self.cursor.next_page = u32::MAX;
        self.cursor.oldest_area_only = oldest_area_only;
        let found_record = self.committed.clone();
        self.advance_counter()?;
        // At mount the file-system layer has not replayed the record's changes yet.
        self.replay_pending = !self.committed.delta.is_empty() || !self.nvram_records.is_empty();
        let written = self.write_metaroot(self.committed.flags & FLAG_ORPHANS);
        self.replay_pending = false;
        match written {
            Ok(()) => self.repair_superblock_copies(),
            Err(TxnError::WornOut(worn)) => {
                // No area may take the copy: the volume is at its end of life. Nothing was
                // changed (only an erase failed), so it mounts read-only as it is.
                self.committed = found_record;
                self.worn_out = Some(worn);
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Turns a volume mounted read-only into a writable one (`mount -o remount,rw`), as if it
    /// had been mounted writable: the flash under it must take programs and erases. What a
    /// writable mount does first is done now: the re-anchoring after an unclean unmount, and
    /// the trees' dirty-node bound. A degraded volume (a chip missing), a poisoned one and one
    /// at its end of life stay read-only and say why.
    pub fn make_writable(&mut self) -> Result<(), TxnError> {
        if !self.config.read_only {
            return Ok(());
        }
        if self.poisoned {
            return Err(self.worn_out.map_or(TxnError::Poisoned, TxnError::WornOut));
        }
        if let Some(worn) = self.worn_out {
            return Err(TxnError::WornOut(worn));
        }
        if self.missing_chip().is_some() {
            return Err(TxnError::ReadOnly);
        }
        self.config.read_only = false;
        self.directory.set_dirty_nodes_max(self.config.dirty_nodes_max);
        self.allocation.set_dirty_nodes_max(self.config.dirty_nodes_max);
        self.reanchor_if_owed()
    }

    /// Reads chip 0's superblock: the first copy, or the second if the first is unreadable.
    /// Returns the superblock and which copy it came from.
    /// Returns the superblock (as chip 0's), which copy it came from and from which chip.
    fn read_superblock(device: &mut Device<F>) -> Result<(Superblock, u32, u32), TxnError> {
        let chip_0 = Self::read_superblock_of(device, 0);
        if chip_0.is_ok() || device.layout().chip_count < 2 {
            return chip_0.map(|(superblock, copy)| (superblock, copy, 0));
        }
        // Chip 0 is dead or blank: a volume with redundancy is still named by the others, at
        // the newest generation any of them holds (a power cut while a generation was being
        // written, chip after chip, may have left the later chips one behind).
        let mut newest: Option<(Superblock, u32)> = None;
        for chip in 1..device.layout().chip_count {
            if let Ok((superblock, _)) = Self::read_superblock_of(device, chip) {
                if superblock.redundancy == Redundancy::None || superblock.chip_index != chip {
                    continue;
                }
                match newest {
                    None => newest = Some((superblock, chip)),
                    Some((found, _))
                        if found.volume_id == superblock.volume_id && superblock.generation > found.generation =>
                    {
                        newest = Some((superblock, chip));
                    }
                    Some(_) => {}
                }
            }
        }
        match newest {
            Some((superblock, chip)) => Ok((Superblock { chip_index: 0, ..superblock }, 0, chip)),
            None => chip_0.map(|(superblock, copy)| (superblock, copy, 0)),
        }
    }

    /// The superblock of one chip: copy 0, or copy 1 if copy 0 is unreadable, and which; at its
    /// newest generation. On format version 9 block 0 may be erased (a power cut while it was
    /// being rewritten): then the second home's first generation starts the search.
    pub(crate) fn read_superblock_of(device: &mut Device<F>, chip: u32) -> Result<(Superblock, u32), TxnError> {
        match Self::read_first_superblock(device, chip)? {
            Ok((superblock, copy)) => Ok((Self::newest_generation(device, chip, superblock)?, copy)),
            Err((error, chip_failed)) => {
                if !chip_failed {
                    if let Some(start) = Self::read_home_start(device, chip, SUPERBLOCK_HOMES[1], None)? {
                        return Ok((Self::newest_in_home(device, chip, start)?, 0));
                    }
                }
                Err(error)
            }
        }
    }

    /// Pages 0 and 1 of block 0: the superblock as formatted (before version 9, always there),
    /// and which copy; or why neither decodes, and whether that is because the chip failed.
    #[allow(clippy::type_complexity)]
    fn read_first_superblock(
        device: &mut Device<F>,
        chip: u32,
    ) -> Result<Result<(Superblock, u32), (TxnError, bool)>, TxnError> {
        let layout = device.layout();
        let mut buffer = Vec::new();
        let mut first_error = TxnError::NotAVolume { reason: "no readable superblock" };
        for copy in 0..2 {
            let address = layout.address(SUPERBLOCK_SEGMENT, chip + copy * layout.chip_count);
            let status = match device.read(address, &mut buffer) {
                Ok(status) => status,
                Err(NandError::ChipFailed { .. }) if chip == 0 => {
                    return Ok(Err((TxnError::NotAVolume { reason: "chip 0 failed" }, true)));
                }
                Err(error) => return Err(error.into()),
            };
            match status {
                ReadStatus::Erased => {
                    first_error = TxnError::NotAVolume { reason: "superblock page is erased" };
                    continue;
                }
                ReadStatus::Uncorrectable => continue,
                ReadStatus::Clean | ReadStatus::Corrected { .. } => {}
            }
            match Superblock::decode(&buffer) {
                Ok(superblock) => return Ok(Ok((superblock, copy))),
                Err(DecodeError::UnsupportedVersion { found, oldest, newest, .. }) => {
                    // Not damage: a newer (or unknown) format, refused by name.
                    return Err(TxnError::UnsupportedVersion { found, oldest, newest });
                }
                Err(DecodeError::BadMagic { .. }) => {
                    first_error = TxnError::NotAVolume { reason: "superblock magic missing" }
                }
                Err(source) => first_error = TxnError::Decode { structure: "superblock", source },
            }
        }
        Ok(Err((first_error, false)))
    }

    /// The first generation in superblock home `home` of `chip` (version 9 on): pages 0 and 1
    /// of its block (page 1 only when page 0 is programmed but does not decode: a home is
    /// programmed from page 0 on). It must be a version-9 superblock at its own place, and, given
    /// `like`, of the same volume.
    fn read_home_start(
        device: &mut Device<F>,
        chip: u32,
        home: u32,
        like: Option<&Superblock>,
    ) -> Result<Option<Superblock>, TxnError> {
        let layout = device.layout();
        let (mut data, mut spare) =
            (alloc::vec![0u8; layout.page_size_bytes()], alloc::vec![0u8; layout.spare_size_bytes()]);
        for page in 0..2 {
            let status = match device.read_physical(PageAddress::new(chip, home, page), &mut data, &mut spare) {
                Ok(status) => status,
                Err(NandError::ChipFailed { .. }) => return Ok(None),
                Err(error) => return Err(error.into()),
            };
            match status {
                ReadStatus::Erased => return Ok(None),
                ReadStatus::Uncorrectable => continue,
                ReadStatus::Clean | ReadStatus::Corrected { .. } => {}
            }
            let found = Superblock::decode(&data).ok().filter(|found| {
                found.format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES
                    && found.chip_index == chip
                    && found.generation_place(found.generation) == Some((home, 0))
                    && like.is_none_or(|like| like.generation_on(&data, found.generation).is_some())
            });
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// The newest generation of a chip's superblock (format version 7 on), from `first`, the
    /// one on pages 0 and 1 of block 0. Versions 7 and 8: generation g lies on pages 2g and
    /// 2g + 1 of block 0, programmed in order, so the last programmed page of the block names
    /// the newest; a torn one falls back to the generation before. One page read (page 2,
    /// erased) while the superblock was never rewritten. Version 9: the homes take turns
    /// (`Superblock::generation_place`); the one whose first generation is newer holds the
    /// newest, found in it as in block 0 before (one more read: the second home's page 0).
    fn newest_generation(device: &mut Device<F>, chip: u32, first: Superblock) -> Result<Superblock, TxnError> {
        if first.format_version < FORMAT_VERSION_REDUNDANCY {
            return Ok(first);
        }
        if first.format_version < FORMAT_VERSION_SUPERBLOCK_HOMES {
            return if first.generation == 0 { Self::newest_in_home(device, chip, first) } else { Ok(first) };
        }
        let start = match Self::read_home_start(device, chip, SUPERBLOCK_HOMES[1], Some(&first))? {
            Some(second) if second.generation > first.generation => second,
            _ => first,
        };
        Self::newest_in_home(device, chip, start)
    }

    /// The newest generation in the home whose first generation is `start` (on its pages 0
    /// and 1): the home's programmed pages form a prefix, so a binary search finds the last,
    /// and the generations from there down are tried, copy 0 then copy 1, until one decodes
    /// as the next generations of `start` must; if none does, `start` holds.
    fn newest_in_home(device: &mut Device<F>, chip: u32, start: Superblock) -> Result<Superblock, TxnError> {
        let Some((home, 0)) = start.generation_place(start.generation) else {
            return Ok(start);
        };
        let layout = device.layout();
        let pages_per_block = layout.geometry.pages_per_block;
        let (mut data, mut spare) =
            (alloc::vec![0u8; layout.page_size_bytes()], alloc::vec![0u8; layout.spare_size_bytes()]);
        let mut status_of = |device: &mut Device<F>, page: u32, data: &mut Vec<u8>| {
            device.read_physical(PageAddress::new(chip, home, page), data, &mut spare)
        };
        if pages_per_block < 4 || status_of(device, 2, &mut data)? == ReadStatus::Erased {
            return Ok(start);
        }
        // Pages 2.. of the home are programmed as a prefix: binary search its end.
        let (mut low, mut high) = (2u32, pages_per_block);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if status_of(device, middle, &mut data)? == ReadStatus::Erased {
                high = middle;
            } else {
                low = middle;
            }
        }
        for slot in (1..=low / 2).rev() {
            let Some(generation) = start.generation.checked_add(slot) else {
                continue;
            };
            for page in [2 * slot, 2 * slot + 1] {
                let status = status_of(device, page, &mut data)?;
                if matches!(status, ReadStatus::Clean | ReadStatus::Corrected { .. }) {
                    if let Some(found) = start.generation_on(&data, generation) {
                        return Ok(Superblock { chip_index: start.chip_index, ..found });
                    }
                }
            }
        }
        Ok(start)
    }

    fn read_metaroot_page(
        device: &mut Device<F>,
        address: LogAddress,
        buffer: &mut Vec<u8>,
        superblock: &Superblock,
        shape: MetarootShape,
    ) -> Result<Option<Metaroot>, TxnError> {
        let decode = |buffer: &[u8]| {
            Metaroot::decode(buffer, shape).ok().filter(|metaroot| metaroot.volume_id == superblock.volume_id)
        };
        match device.read(address, buffer)? {
            ReadStatus::Erased => return Ok(None),
            ReadStatus::Uncorrectable => {}
            ReadStatus::Clean | ReadStatus::Corrected { .. } => {
                if let Some(metaroot) = decode(buffer) {
                    return Ok(Some(metaroot));
                }
            }
        }
        // A first copy that does not decode: its twin, if the volume keeps one.
        match device.read_twin(address, buffer)? {
            Some(ReadStatus::Clean | ReadStatus::Corrected { .. }) => Ok(decode(buffer)),
            _ => Ok(None),
        }
    }

    fn find_newest_metaroot(
        device: &mut Device<F>,
        superblock: &Superblock,
        shape: MetarootShape,
    ) -> Result<FoundMetaroot, TxnError> {
        let layout = device.layout();
        let pages_per_segment = layout.metaroot_area_pages();
        let mut buffer = Vec::new();
        // An area is identified by its first two pages: a cut while programming page d of an
        // MLC/TLC block can corrupt page 0 through page pairing, but one cut cannot damage both
        // page 0 and page 1 (docs/DESIGN.md, "Paired pages in metaroot areas").
        let mut head: [[Option<Metaroot>; 2]; 3] = Default::default();
        for area in MetarootArea::ALL {
            for (page_index, slot) in (0u32..).zip(area.of_mut(&mut head)) {
                let address = layout.address(area.segment_in(&superblock.metaroot_areas), page_index);
                *slot = Self::read_metaroot_page(device, address, &mut buffer, superblock, shape)?;
            }
        }
        let counters = |area: MetarootArea| area.of(&head).iter().flatten().map(|metaroot| metaroot.commit_counter);
        let area_counters = MetarootArea::ALL.map(|area| counters(area).max());
        let mut order: Vec<MetarootArea> =
            MetarootArea::ALL.into_iter().filter(|area| area.of(&area_counters).is_some()).collect();
        order.sort_by_key(|area| core::cmp::Reverse(*area.of(&area_counters)));
        let Some(&area_slot) = order.first() else {
            return Err(TxnError::NoMetaroot);
        };
        let segment_index = area_slot.segment_in(&superblock.metaroot_areas);
        // Binary search for the last programmed page: pages of an area are programmed as a
        // prefix, so "erased" is monotone. Page 0 is known programmed.
        // The newest programmed probe that decoded is kept (format version 11 on): it is the
        // last programmed page, the first candidate below, which then costs no second read.
        let keep_probe = superblock.format_version >= FORMAT_VERSION_COMPACT_DELTA;
        let mut probed: Option<(u32, Metaroot)> = None;
        let (mut low, mut high) = (0u32, pages_per_segment);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            let status = device.read(layout.address(segment_index, middle), &mut buffer)?;
            if status == ReadStatus::Erased {
                high = middle;
            } else {
                low = middle;
                // Only the page `low` ends on may be kept: an unreadable probe forgets the last.
                let readable = matches!(status, ReadStatus::Clean | ReadStatus::Corrected { .. });
                probed = if keep_probe && readable {
                    Metaroot::decode(&buffer, shape)
                        .ok()
                        .filter(|metaroot| metaroot.volume_id == superblock.volume_id)
                        .map(|metaroot| (middle, metaroot))
                } else {
                    None
                };
            }
        }
        let last_programmed_page = low;
        // Records of this area's current use are at least as new as the older of its first two.
        let floor_counter = counters(area_slot).min().unwrap_or(0);
        let first_candidate = last_programmed_page.saturating_sub(METAROOT_STEP_BACK_PAGES);
        let [page_0, page_1] = area_slot.of(&head);
        // Newest first. A chained record whose base is gone (media damage, not a power cut)
        // sends the search below the base: the records there hold every change since their
        // full commit.
        let mut candidates: Vec<u32> = (first_candidate..=last_programmed_page).rev().collect();
        let mut next_candidate = 0;
        while let Some(&page_index) = candidates.get(next_candidate) {
            next_candidate += 1;
            let address = layout.address(segment_index, page_index);
            let metaroot = match page_index {
                0 => page_0.clone(),
                1 => page_1.clone(),
                _ => match probed.take() {
                    Some((probed_page, metaroot)) if probed_page == page_index => Some(metaroot),
                    _ => Self::read_metaroot_page(device, address, &mut buffer, superblock, shape)?,
                },
            };
            if let Some(metaroot) = metaroot.filter(|m| m.commit_counter >= floor_counter) {
                let base_delta = match metaroot.chain {
                    None => Vec::new(),
                    Some(link) => {
                        let place = (segment_index, page_index);
                        match Self::read_chain_base(device, superblock, shape, &head, &metaroot, link, place)? {
                            Some(base_delta) => base_delta,
                            // A record whose base cannot be read names no state: step back, as
                            // past a record that does not decode, and below its base.
                            None => {
                                if link.segment == segment_index && link.page < page_index {
                                    candidates.truncate(next_candidate);
                                    let below = link.page.saturating_sub(METAROOT_STEP_BACK_PAGES + 1)..link.page;
                                    candidates.extend(below.rev());
                                }
                                continue;
                            }
                        }
                    }
                };
                return Ok(FoundMetaroot {
                    metaroot,
                    base_delta,
                    area_slot,
                    page_index,
                    last_programmed_page,
                    area_counters,
                });
            }
        }
        Err(TxnError::NoMetaroot)
    }

    /// The payload of a chained record's base (format version 12), or `None` when the link
    /// names no such record: the base is a delta commit (not chained) in one of the areas,
    /// before the record if in its area (`place`: its segment and page), with the counter the
    /// link names and the same full commit (tree roots and segment table). Pages 0 and 1 of the
    /// areas were read already (`head`); any other costs one read.
    fn read_chain_base(
        device: &mut Device<F>,
        superblock: &Superblock,
        shape: MetarootShape,
        head: &[[Option<Metaroot>; 2]; 3],
        record: &Metaroot,
        link: ChainLink,
        place: (u32, u32),
    ) -> Result<Option<Vec<u8>>, TxnError> {
        let layout = device.layout();
        let Some(area) =
            MetarootArea::ALL.into_iter().find(|area| area.segment_in(&superblock.metaroot_areas) == link.segment)
        else {
            return Ok(None);
        };
        if link.page >= layout.metaroot_area_pages() || (link.segment == place.0 && link.page >= place.1) {
            return Ok(None);
        }
        let base = match (link.page, area.of(head)) {
            (0, [page_0, _]) => page_0.clone(),
            (1, [_, page_1]) => page_1.clone(),
            _ => {
                let mut buffer = Vec::new();
                let address = layout.address(link.segment, link.page);
                Self::read_metaroot_page(device, address, &mut buffer, superblock, shape)?
            }
        };
        Ok(base
            .filter(|base| {
                base.commit_counter == link.commit_counter
                    && base.chain.is_none()
                    && !base.delta.is_empty()
                    && base.directory_root == record.directory_root
                    && base.allocation_root == record.allocation_root
                    && base.segment_table == record.segment_table
            })
            .map(|base| base.delta))
    }

    /// The mounted record's base payload when it is chained (empty otherwise), handed over
    /// once: the file-system layer replays it before the record's own payload.
    pub fn take_mounted_base_delta(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.mounted_base_delta)
    }

    /// Whether this volume may write chained delta commits (format version 12 on): not on flash
    /// whose programs may damage an earlier page (paired pages, as the flash reports them or
    /// the configuration declares them; a guard turned off by `Some(0)` does not make a chip
    /// SLC), where a torn later record could take its base with it, and not with an NVRAM
    /// (whose records are increments).
    fn chaining_possible(&self) -> bool {
        self.superblock.format_version >= FORMAT_VERSION_CHAINED_DELTA
            && self.log.flash_paired_page_distance() == 0
            && self.config.paired_page_distance.unwrap_or(0) == 0
            && self.nvram.is_none()
            && !self.config.read_only
    }

    /// Whether the next record may extend `link`: it goes on a later page of the area `link`
    /// is in (no area switch comes first, so the base cannot be erased under it).
    pub fn chain_allowed(&self, link: ChainLink) -> bool {
        self.chaining_possible()
            && !self.cursor.oldest_area_only
            && link.segment == self.area_segment(self.cursor.area_slot)
            && link.page < self.cursor.next_page
            && self.cursor.next_page < self.log.layout().metaroot_area_pages()
    }

    /// The record a chain may start from now: the newest record, when this session wrote it
    /// as a delta commit holding every change since the full commit, and `chain_allowed`.
    pub fn chain_base(&self) -> Option<ChainLink> {
        self.last_delta_record.filter(|link| {
            link.commit_counter == self.committed.commit_counter
                && self.committed.chain.is_none()
                && self.chain_allowed(*link)
        })
    }

    /// The segment metaroot area `area` is in now.
    fn area_segment(&self, area: MetarootArea) -> u32 {
        area.segment_in(&self.superblock.metaroot_areas)
    }

    /// The chip this volume runs without (found missing at mount, or failed since), if any.
    pub fn missing_chip(&self) -> Option<u32> {
        self.log.device().missing_chip()
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    pub fn committed(&self) -> &Metaroot {
        &self.committed
    }

    pub fn commit_counter(&self) -> u64 {
        self.committed.commit_counter
    }

    /// Drops the clean nodes both trees' caches hold, so the next reads come from flash (a
    /// scrub checks what is on flash, not what is in RAM).
    pub fn drop_node_caches(&mut self) {
        self.directory.clear_cache();
        self.allocation.clear_cache();
    }

    /// Marks the volume unusable after a failure mid-update.
    pub fn poison(&mut self) {
        self.poisoned = true;
    }

    /// Loads the segment table if needed and checks the volume accepts changes.
    pub fn prepare_write(&mut self) -> Result<(), TxnError> {
        if self.poisoned {
            return Err(self.worn_out.map_or(TxnError::Poisoned, TxnError::WornOut));
        }
        if self.config.read_only {
            return Err(TxnError::ReadOnly);
        }
        self.ensure_table_loaded()
    }

    pub fn ensure_table_loaded(&mut self) -> Result<(), TxnError> {
        if !self.log.is_table_loaded() {
            let directory = self.committed.segment_table.clone();
            let index_page_count = self.committed.shape.index_page_count;
            self.log.load_table(&directory, index_page_count).inspect_err(|_| self.poisoned = true)?;
            // A metaroot area moved into the log's segments is the superblock's, whatever the
            // committed table says (a power cut may have come before a commit recorded it).
            // Version 9 lends it (the table stores it free); before, it is retired.
            let homes = self.has_superblock_homes();
            if homes {
                self.log.reserve_second_home();
                for segment in core::mem::take(&mut self.area_erases_before_table) {
                    self.log.record_area_erase(segment);
                    self.area_erase_unstored = true;
                }
            }
            for segment in self.superblock.metaroot_areas {
                if segment >= FIRST_LOG_SEGMENT && homes {
                    self.log.set_area_segment_lent(segment, true);
                } else if segment >= FIRST_LOG_SEGMENT && !self.log.table().is_retired_quietly(segment) {
                    self.log.retire_area_segment(segment);
                }
            }
        }
        Ok(())
    }

    /// A tree store over the log; errors from tree operations can be turned back into the
    /// segment error that caused them with `tree_error`.
    pub fn store(&mut self) -> LogNodeStore<'_, F> {
        LogNodeStore::new(&mut self.log)
    }

    pub fn dirty_node_count(&self) -> usize {
        self.directory.dirty_node_count() + self.allocation.dirty_node_count()
    }

    /// Writes dirty tree nodes without committing, to keep within the dirty budget.
    pub fn flush_trees(&mut self) -> Result<(TreeRoot, TreeRoot), TxnError> {
        let mut store = LogNodeStore::new(&mut self.log);
        let directory_root = self.directory.flush(&mut store)?;
        let allocation_root = self.allocation.flush(&mut store)?;
        Ok((directory_root, allocation_root))
    }

    /// A transaction point: after it returns, the working state is the committed state and
    /// survives any power cut. `clean` marks an unmount.
    pub fn commit(&mut self, clean: bool) -> Result<(), TxnError> {
        let flush = self.begin_commit(clean)?;
        self.finish(flush)
    }

    /// Starts a flush of everything issued so far (no commit) if the latest commit's flush was
    /// left running: once it is durable, so is every commit before it, whoever waits for that
    /// commit's own flush. Done at once when the latest commit flushed before returning (a
    /// backend that flushes synchronously: an image file, RAM).
    pub fn begin_flush(&mut self) -> Result<FlushWait, TxnError> {
        if self.poisoned {
            return Err(TxnError::Poisoned);
        }
        if !self.flush_left_running {
            return Ok(FlushWait::done());
        }
        self.log.device_mut().flash_mut().begin_flush().map_err(|error| {
            self.poisoned = true;
            TxnError::from(error)
        })
    }

    /// Waits for a commit's started flush; a failure poisons the volume, as a failed commit does.
    pub fn finish(&mut self, flush: FlushWait) -> Result<(), TxnError> {
        flush.wait().map_err(|error| {
            self.poisoned = true;
            TxnError::from(error)
        })
    }

    /// A transaction point whose last step, the backing store's flush, is left running: the
    /// working state is the committed state at once (later changes build on it, and the
    /// flash orders their writes after it), and it survives any power cut once the returned
    /// wait has returned `Ok`. A caller may release its locks before waiting; a failed wait
    /// must poison the volume (`poison`), as `finish` does.
    pub fn begin_commit(&mut self, clean: bool) -> Result<FlushWait, TxnError> {
        if self.poisoned {
            return Err(self.worn_out.map_or(TxnError::Poisoned, TxnError::WornOut));
        }
        if self.config.read_only {
            return Err(TxnError::ReadOnly);
        }
        if self.worn_out.is_some() {
            // End of life: what is committed stays as it is (`set_worn_out`).
            return Ok(FlushWait::done());
        }
        self.ensure_table_loaded()?;
        let result = self.commit_inner(clean);
        match &result {
            Ok(flush) => self.flush_left_running = flush.is_pending(),
            Err(error) => {
                self.poisoned = true;
                if let TxnError::WornOut(worn) = error {
                    self.worn_out = Some(*worn);
                }
            }
        }
        result
    }

    fn commit_inner(&mut self, clean: bool) -> Result<FlushWait, TxnError> {
        if let Some(address) = self.log.accounting_error() {
            // Committing would make a wrong valid count durable (and let a live page be
            // erased later): stop here; the last commit stays the volume's state.
            return Err(SegmentError::Accounting { address }.into());
        }
        let (directory_root, allocation_root) = self.flush_trees()?;
        self.record_failed_areas();
        self.area_erase_unstored = false;
        self.log.write_table()?;
        assert!(!self.log.table().has_dirty_pages(), "segment table dirty after write_table");
        assert!(!self.directory.is_dirty() && !self.allocation.is_dirty(), "tree dirty after flush");
        let metaroot = Metaroot {
            commit_counter: self.committed.commit_counter + 1,
            volume_id: self.superblock.volume_id,
            flags: if clean { FLAG_CLEAN } else { 0 } | if self.may_have_orphans { FLAG_ORPHANS } else { 0 },
            next_inode: self.next_inode,
            directory_root,
            allocation_root,
            segment_table: self.log.table().metaroot_directory(),
            shape: self.committed.shape,
            delta: Vec::new(),
            chain: None,
            nvram_lag: 0,
        };
        // Every node and table page the metaroot names must be on flash before it is, with
        // the parity of their rows.
        self.log.seal_parity()?;
        self.log.device_mut().write_barrier()?;
        self.committed = metaroot;
        self.last_delta_record = None;
        let pages_per_segment = self.log.layout().metaroot_area_pages();
        if clean && self.cursor.next_page + 2 > pages_per_segment {
            // Both copies of a clean record go in one area: start the next area now.
            self.cursor.next_page = pages_per_segment;
        }
        self.write_metaroot(self.committed.flags)?;
        if clean {
            // The twin: losing the newest metaroot page of a cleanly unmounted volume is then
            // reported damage with nothing lost, not a silent step back to the previous commit.
            self.write_metaroot(self.committed.flags | FLAG_CLEAN_TWIN)?;
        }
        // A backing store (an image file) must hold the commit before it is reported durable:
        // the caller waits for this flush.
        let flush = self.log.device_mut().flash_mut().begin_flush()?;
        self.log.end_transaction();
        self.guard_paired_pages();
        if clean {
            self.log.close_open_segments();
        }
        Ok(flush)
    }

    /// Whether the next transaction point must be a full commit to store a metaroot area's
    /// erase count that is only in RAM (format version 9): when this record is the current
    /// area's last (or the area is full), so the next switch never erases an area while an
    /// earlier erase is still unstored. Until then delta commits may go on: a power cut loses
    /// at most the count of the one erase since the last full commit. (Storing it at once, as
    /// before, made a full commit every area's worth of records: 56 of 2,916 programs in
    /// tests/durable_creates.rs.)
    pub fn area_erase_must_be_stored(&self) -> bool {
        self.area_erase_unstored && self.cursor.next_page + 1 >= self.log.layout().metaroot_area_pages()
    }

    /// The paired-page distance the commit guard skips: configured, or the flash's own.
    pub fn paired_page_distance(&self) -> u32 {
        self.config.paired_page_distance.unwrap_or_else(|| self.log.flash_paired_page_distance())
    }

    /// After a commit: skip the chip's paired-page distance in the open segment, so no later
    /// program there shares cells with a committed page (docs/DESIGN.md).
    fn guard_paired_pages(&mut self) {
        let paired_page_distance = self.paired_page_distance();
        if paired_page_distance > 0 {
            self.log.guard_paired_pages(paired_page_distance);
        }
    }

    /// The most delta bytes a delta commit can carry on this volume.
    pub fn delta_bytes_max(&self) -> usize {
        Metaroot::delta_bytes_max(self.log.layout().page_size_bytes(), self.committed.shape.directory_len())
    }

    /// A delta commit: one metaroot page naming the last full commit's roots plus `delta`, the
    /// logical changes since then (seed 003's Delta-Block). Data pages it refers to were
    /// appended before; nothing dropped since the full commit becomes reusable, because the
    /// full commit's trees are still what the delta is replayed onto.
    pub fn commit_delta(&mut self, delta: Vec<u8>) -> Result<(), TxnError> {
        let flush = self.begin_commit_delta(delta, None)?;
        self.finish(flush)
    }

    /// `commit_delta` with its flush left running, as `begin_commit`. With `chain` (format
    /// version 12, `chain_allowed`), `delta` holds the changes since that record, which mount
    /// replays first.
    pub fn begin_commit_delta(&mut self, delta: Vec<u8>, chain: Option<ChainLink>) -> Result<FlushWait, TxnError> {
        if self.poisoned {
            return Err(self.worn_out.map_or(TxnError::Poisoned, TxnError::WornOut));
        }
        if self.config.read_only {
            return Err(TxnError::ReadOnly);
        }
        if self.worn_out.is_some() {
            return Ok(FlushWait::done());
        }
        let link_bytes = if chain.is_some() { ChainLink::ENCODED_BYTES } else { 0 };
        assert!(
            link_bytes + delta.len() <= self.delta_bytes_max(),
            "delta of {} bytes passed to commit_delta",
            delta.len()
        );
        assert!(chain.is_none_or(|link| self.chain_allowed(link)), "chained to {chain:?}, which may not be extended");
        if let Some(address) = self.log.accounting_error() {
            self.poisoned = true;
            return Err(SegmentError::Accounting { address }.into());
        }
        let result = (|| {
            self.log.seal_parity()?;
            self.log.device_mut().write_barrier()?;
            self.advance_counter()?;
            // The payload holds every change since the full commit, the NVRAM log's records
            // included: records from here on extend this commit.
            self.committed.nvram_lag = 0;
            self.committed.next_inode = self.next_inode;
            self.committed.delta = delta;
            self.committed.chain = chain;
            let flags = if self.may_have_orphans { FLAG_ORPHANS } else { 0 };
            self.write_metaroot(flags)?;
            // The page the record took (after any area switch the write made).
            self.last_delta_record = chain.is_none().then(|| ChainLink {
                segment: self.area_segment(self.cursor.area_slot),
                page: self.cursor.next_page - 1,
                commit_counter: self.committed.commit_counter,
            });
            let flush = self.log.device_mut().flash_mut().begin_flush()?;
            self.guard_paired_pages();
            Ok(flush)
        })();
        match &result {
            Ok(flush) => self.flush_left_running = flush.is_pending(),
            Err(error) => {
                self.poisoned = true;
                if let TxnError::WornOut(worn) = error {
                    self.worn_out = Some(*worn);
                }
            }
        }
        result
    }

    /// Raises the committed counter by one without a full commit (a delta commit, an NVRAM
    /// record, a re-anchoring copy), keeping the base the NVRAM log extends.
    fn advance_counter(&mut self) -> Result<(), TxnError> {
        let lag = self.committed.nvram_lag.checked_add(1).ok_or(TxnError::Nvram {
            reason: "too many commits since the last full commit (a full commit is needed)",
        })?;
        self.committed.commit_counter = self.next_counter()?;
        self.committed.nvram_lag = lag;
        Ok(())
    }

    /// The committed counter plus one. A counter read from flash or NVRAM may be anything:
    /// the end of the range is a refusal, never a wrap.
    fn next_counter(&self) -> Result<u64, TxnError> {
        self.committed.commit_counter.checked_add(1).ok_or(TxnError::Decode {
            structure: "metaroot",
            source: DecodeError::InvalidField { structure: "metaroot", field: "commit_counter", value: u64::MAX },
        })
    }

    /// Whether transaction points go to an NVRAM log.
    pub fn has_nvram(&self) -> bool {
        self.nvram.is_some()
    }

    /// The NVRAM's size and technology code (the superblock's: what the volume was made
    /// with), when the volume has one.
    pub fn nvram_info(&self) -> Option<(u64, u8)> {
        let technology = u8::try_from(self.superblock.nvram_technology).unwrap_or(0);
        self.nvram.as_ref().map(|log| (log.size_bytes(), technology))
    }

    /// What mount read from the NVRAM.
    pub fn nvram_mount_report(&self) -> NvramMountReport {
        self.nvram_mount_report
    }

    /// The records mount found in the NVRAM, oldest first, for the file-system layer to replay
    /// (once: they are handed over).
    pub fn take_nvram_records(&mut self) -> Vec<NvramRecord> {
        core::mem::take(&mut self.nvram_records)
    }

    /// (used, capacity) bytes of the NVRAM log's records; None without NVRAM.
    pub fn nvram_usage(&self) -> Option<(u64, u64)> {
        let base = self.committed.nvram_base();
        self.nvram.as_ref().map(|log| (log.used_bytes(base), log.capacity_bytes()))
    }

    /// The largest payload the next NVRAM record can carry (0 without NVRAM).
    pub fn nvram_payload_room(&self) -> u64 {
        let base = self.committed.nvram_base();
        self.nvram.as_ref().map_or(0, |log| log.payload_room(base))
    }

    /// A transaction point kept in NVRAM: everything issued to the flash (the data pages and
    /// any mid-transaction tree flush the changes refer to) is made durable first, then one
    /// record holding `payload` (the changes since the previous record) is appended to the
    /// log. No flash page is programmed for it. The caller checked `nvram_payload_room`.
    pub fn commit_nvram(&mut self, payload: Vec<u8>) -> Result<(), TxnError> {
        if self.poisoned {
            return Err(self.worn_out.map_or(TxnError::Poisoned, TxnError::WornOut));
        }
        if self.config.read_only {
            return Err(TxnError::ReadOnly);
        }
        if self.worn_out.is_some() {
            return Ok(());
        }
        if let Some(address) = self.log.accounting_error() {
            self.poisoned = true;
            return Err(SegmentError::Accounting { address }.into());
        }
        let result = (|| {
            // The flash first: what the record names must be durable before the record is
            // (and the full commit the log extends, if its flush was left running), with the
            // parity of their rows.
            self.log.seal_parity()?;
            self.log.device_mut().write_barrier()?;
            self.log.device_mut().flash_mut().begin_flush()?.wait()?;
            let base = self.committed.nvram_base();
            let record = NvramRecord {
                commit_counter: self.next_counter()?,
                next_inode: self.next_inode,
                flags: if self.may_have_orphans { FLAG_ORPHANS } else { 0 },
                payload,
            };
            let now_ns = self.log.device().now_ns();
            let log = self.nvram.as_mut().ok_or(TxnError::Nvram { reason: "the volume has no NVRAM" })?;
            let done_ns = log.append(base, &record, now_ns)?;
            self.log.device().wait_until(done_ns);
            self.advance_counter()?;
            self.committed.next_inode = record.next_inode;
            self.committed.flags = record.flags;
            self.last_commit_operations = self.log.device().operations_issued();
            self.flush_left_running = false;
            // As after any commit: no later program may share cells with a page it names.
            self.guard_paired_pages();
            Ok(())
        })();
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Programs `self.committed` (with a fresh counter when re-anchoring) into the metaroot
    /// areas, switching to the oldest area when the current one is full.
    ///
    /// A program or erase the flash reports failed (a grown bad block, or a worn one) does not
    /// fail the commit: the record is written again, with the counter plus one (as a
    /// re-anchoring copy is), on page 0 of a freshly erased area, chosen as for a full area, so
    /// it holds neither the newest record nor its predecessor. The failed page is then the
    /// last programmed page of its area and older than the retry, which mount's search steps
    /// back over as over a torn page (docs/DESIGN.md, "Grown bad blocks").
    fn write_metaroot(&mut self, flags: u32) -> Result<(), TxnError> {
        for _attempt in 0..METAROOT_RETRIES_MAX {
            // A re-anchoring mount may switch only to the oldest other area; the switch clears
            // the mark, so it is read before the attempt.
            let reanchoring = self.cursor.oldest_area_only;
            match self.write_metaroot_once(flags) {
                Err(TxnError::Segment(SegmentError::Media(
                    NandError::OperationFailed { .. } | NandError::WornOut { .. },
                ))) => {
                    self.advance_counter()?;
                    // The page that failed is `next_page` (not advanced).
                    let failed_page = self.cursor.next_page;
                    if reanchoring {
                        // The other areas hold the record being re-anchored and its
                        // predecessor: this area is the only one that may take the copy. Page 1
                        // still names the area at mount when page 0 failed; past that the copy
                        // would be invisible, so the volume ends writing.
                        if failed_page >= 1 {
                            return Err(TxnError::WornOut(WornOut::MetarootArea {
                                segment: self.area_segment(self.cursor.area_slot),
                            }));
                        }
                        self.cursor.next_page = failed_page + 1;
                        self.cursor.oldest_area_only = true;
                    } else {
                        // The current area may hold no record of this session (its first page
                        // failed), so only the oldest other area is sure to hold neither the
                        // newest record nor its predecessor.
                        self.cursor.next_page = self.log.layout().metaroot_area_pages();
                        self.cursor.oldest_area_only = true;
                    }
                }
                other => return other,
            }
        }
        Err(TxnError::Segment(SegmentError::NoFreeSegment))
    }

    fn write_metaroot_once(&mut self, flags: u32) -> Result<(), TxnError> {
        let layout = self.log.layout();
        let pages_per_segment = layout.metaroot_area_pages();
        if self.cursor.next_page >= pages_per_segment {
            self.switch_metaroot_area()?;
        }
        self.committed.flags = flags;
        let bytes = self.committed.encode(layout.page_size_bytes());
        let address = layout.address(self.area_segment(self.cursor.area_slot), self.cursor.next_page);
        self.log.device_mut().program(address, &bytes, PageTag::Metaroot)?;
        // Nothing issued later (an erase of a segment this commit frees) may reach the backing
        // store before the metaroot that makes it free.
        self.log.device_mut().write_barrier()?;
        self.last_commit_operations = self.log.device().operations_issued();
        if self.cursor.next_page <= 1 {
            // Pages 0 and 1 identify the area at mount (the newer of the two counts).
            let counter = self.cursor.area_slot.of_mut(&mut self.cursor.area_counters);
            *counter =
                Some(counter.map_or(self.committed.commit_counter, |old| old.max(self.committed.commit_counter)));
        }
        self.cursor.next_page += 1;
        Ok(())
    }

    /// Starts the next metaroot area, erasing it. The new area must hold neither the newest
    /// metaroot nor its predecessor: the area (other than the current one) whose first two pages
    /// are oldest or invalid always qualifies. When its erase fails (a worn-out block), the other
    /// area is taken instead if it qualifies too, which it does whenever the current area holds
    /// both records (every switch but a re-anchoring mount's, `oldest_area_only`). A failed area
    /// is remembered (`failed_areas`, and retired in the segment table at the next commit), and
    /// answers `TxnError::WornOut` when no area is left to take.
    fn switch_metaroot_area(&mut self) -> Result<(), TxnError> {
        let [first, second] = self.cursor.area_slot.others();
        let age = |area: MetarootArea| area.of(&self.cursor.area_counters).map_or(0, |counter| counter + 1);
        // The first of the oldest, as `min_by_key`.
        let (oldest, newer) = if age(second) < age(first) { (second, first) } else { (first, second) };
        let candidates = if self.cursor.oldest_area_only { [Some(oldest), None] } else { [Some(oldest), Some(newer)] };
        let mut worn = None;
        for area in candidates.into_iter().flatten() {
            // Version 9: an area worn past the log moves to a younger segment instead.
            if !self.area_failed(area) && self.area_due_for_levelling(area) {
                *area.of_mut(&mut self.cursor.area_counters) = None;
                if self.relocate_area(area, false)? {
                    self.cursor =
                        MetarootCursor { area_slot: area, next_page: 0, oldest_area_only: false, ..self.cursor };
                    return Ok(());
                }
            }
            let erased = if self.area_failed(area) {
                false
            } else {
                *area.of_mut(&mut self.cursor.area_counters) = None;
                let segment = self.area_segment(area);
                match self.log.device_mut().erase_segment(segment) {
                    Ok(()) => {
                        self.count_area_erase(segment);
                        true
                    }
                    Err(NandError::WornOut { .. } | NandError::OperationFailed { .. } | NandError::BadBlock { .. }) => {
                        *area.of_mut(&mut self.failed_areas) = true;
                        if self.log.is_table_loaded() {
                            self.log.retire_area_segment(segment);
                        }
                        false
                    }
                    Err(error) => return Err(error.into()),
                }
            };
            // A failed area moves to a fresh segment when it can (format version 7).
            if erased || self.relocate_area(area, true)? {
                *area.of_mut(&mut self.cursor.area_counters) = None;
                self.cursor = MetarootCursor { area_slot: area, next_page: 0, oldest_area_only: false, ..self.cursor };
                return Ok(());
            }
            worn = Some(WornOut::MetarootArea { segment: self.area_segment(area) });
        }
        // Only reachable with a candidate tried or skipped, each of which set `worn`.
        Err(TxnError::WornOut(worn.unwrap_or(WornOut::MetarootArea { segment: self.area_segment(oldest) })))
    }

    /// Whether `area`'s erase failed, in this session or (retired in the table) an earlier one.
    /// Before version 9 an area moved into the log's segments is retired there by design (the
    /// log must not take it), so only this session's failure counts for it; from version 9 on
    /// such a segment is lent (`SegmentTable::set_lent`), and retired only when it fails.
    fn area_failed(&self, area: MetarootArea) -> bool {
        let segment = self.area_segment(area);
        *area.of(&self.failed_areas)
            || ((segment < FIRST_LOG_SEGMENT || self.has_superblock_homes())
                && self.log.is_table_loaded()
                && self.log.table().is_retired_quietly(segment))
    }

    /// Format version 9 on: two superblock homes, and metaroot areas that move for wear.
    fn has_superblock_homes(&self) -> bool {
        self.superblock.format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES
    }

    /// Counts an erase of a metaroot area's segment in its segment-table entry (version 9 on;
    /// one a re-anchoring mount makes before the table is loaded is counted when it is), which
    /// the next full commit stores: what levelling the areas goes by.
    fn count_area_erase(&mut self, segment: u32) {
        if !self.has_superblock_homes() {
            return;
        }
        if self.log.is_table_loaded() {
            self.log.record_area_erase(segment);
            self.area_erase_unstored = true;
        } else {
            self.area_erases_before_table.push(segment);
        }
    }

    /// Whether `area` has been erased more than the log's most-erased segment plus the margin
    /// (`area_wear_margin`), so that its next switch moves it (version 9 on).
    fn area_due_for_levelling(&self, area: MetarootArea) -> bool {
        if !self.has_superblock_homes() || self.config.read_only || !self.log.is_table_loaded() || self.replay_pending {
            return false;
        }
        let table = self.log.table();
        let (_, log_max) = table.erase_count_range();
        table.entry(self.area_segment(area)).erase_count > log_max.saturating_add(AREA_WEAR_MARGIN)
    }

    /// Moves metaroot area `area` to a fresh segment (format version 7 on; docs/DESIGN.md,
    /// "Grown bad blocks" and "End of life"): because its erase failed (`failed`), or, from
    /// version 9 on, because it has worn past the log. The least-worn free log segment (from
    /// version 9 also a reserved segment 1–3 no area holds, if it is less worn) is taken out of
    /// the log, erased, and named in a new generation of the superblock, programmed on every
    /// chip before anything is written in the new area (`Superblock::generation_place`). A
    /// power cut before that generation is whole leaves the older one in force (the old area
    /// holds nothing newer than the current one, and nothing has been written in the new one);
    /// after it, the new area is empty and the current one holds the newest records.
    ///
    /// Before version 9 the new segment is retired in the table (the log must not take it) and
    /// so is the old one. From version 9 on the new segment is lent (`SegmentTable::set_lent`:
    /// out of the log in RAM, stored free, lent again at every mount from the superblock), and an
    /// old area that did not fail goes back: a log segment to the log, a reserved one to the
    /// reserved segments the areas may take. `false` when there is no room: no free segment, or
    /// no generation left in block 0 before version 9 (then the area stays, or a failed one
    /// ends writing as before).
    fn relocate_area(&mut self, area: MetarootArea, failed: bool) -> Result<bool, TxnError> {
        if self.superblock.format_version < FORMAT_VERSION_REDUNDANCY || self.config.read_only || self.replay_pending {
            return Ok(false);
        }
        self.ensure_table_loaded()?;
        let homes = self.has_superblock_homes();
        let old = self.area_segment(area);
        if failed {
            if homes && old >= FIRST_LOG_SEGMENT {
                self.log.set_area_segment_lent(old, false);
            }
            self.log.retire_area_segment(old);
        }
        // Checked first: finding the next generation may erase a superblock home.
        if self.area_candidate(old, failed).is_none() {
            return Ok(false);
        }
        let Some(generation) = self.next_superblock_generation()? else {
            return Ok(false);
        };
        let mut replacement = None;
        for _attempt in 0..METAROOT_RETRIES_MAX {
            let Some(candidate) = self.area_candidate(old, failed) else {
                break;
            };
            if !homes {
                self.log.retire_area_segment(candidate);
            } else if candidate >= FIRST_LOG_SEGMENT {
                self.log.set_area_segment_lent(candidate, true);
            }
            match self.log.device_mut().erase_segment(candidate) {
                Ok(()) => {
                    self.count_area_erase(candidate);
                    replacement = Some(candidate);
                    break;
                }
                Err(NandError::WornOut { .. } | NandError::OperationFailed { .. } | NandError::BadBlock { .. }) => {
                    if homes {
                        self.log.set_area_segment_lent(candidate, false);
                        self.log.record_area_erase(candidate);
                        self.log.retire_area_segment(candidate);
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        let Some(replacement) = replacement else {
            return Ok(false);
        };
        let mut areas = self.superblock.metaroot_areas;
        *area.of_mut(&mut areas) = replacement;
        // The new area must be erased before any generation names it. A generation that no
        // chip 0 copy took is tried again at the next one.
        let mut generation = Some(generation);
        let mut written = false;
        for _attempt in 0..METAROOT_RETRIES_MAX {
            let Some(next) = generation else {
                break;
            };
            if self.write_superblock_generation(Superblock {
                generation: next,
                metaroot_areas: areas,
                ..self.superblock
            })? {
                written = true;
                break;
            }
            generation = self.next_superblock_generation()?;
        }
        if !written {
            if homes && replacement >= FIRST_LOG_SEGMENT {
                self.log.set_area_segment_lent(replacement, false);
            }
            return Ok(false);
        }
        self.log.device_mut().set_metaroot_areas(areas);
        *area.of_mut(&mut self.failed_areas) = false;
        if homes && !failed && old >= FIRST_LOG_SEGMENT {
            // The generation naming the new area is on flash: the old one is the log's again.
            self.log.set_area_segment_lent(old, false);
        }
        Ok(true)
    }

    /// Programs `next`, a new generation of the superblock, copy 0 then copy 1, on every chip
    /// present, between write barriers (what it names must be on flash before it, and it before
    /// anything written in what it names), and makes it the volume's. `false`, changing nothing,
    /// when no copy reached the first chip present (grown bad blocks): mount would not see it.
    fn write_superblock_generation(&mut self, next: Superblock) -> Result<bool, TxnError> {
        let layout = self.log.layout();
        let Some((home, first_page)) = next.generation_place(next.generation) else {
            return Err(TxnError::NotAVolume { reason: "a superblock generation past its home" });
        };
        self.log.device_mut().write_barrier()?;
        let missing = self.log.device().missing_chip();
        let mut first_chip_copies = None;
        for chip in (0..layout.chip_count).filter(|&chip| Some(chip) != missing) {
            let bytes = Superblock { chip_index: chip, ..next }.encode(layout.page_size_bytes());
            let counted = first_chip_copies.is_none();
            let mut copies = 0;
            for page in [first_page, first_page + 1] {
                let address = PageAddress::new(chip, home, page);
                match self.log.device_mut().program_physical_page(address, &bytes, PageTag::Superblock) {
                    Ok(()) => copies += 1,
                    // A copy lost to a grown bad block: the other copy and chips carry it.
                    Err(NandError::WornOut { .. } | NandError::OperationFailed { .. } | NandError::BadBlock { .. }) => {
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            if counted {
                first_chip_copies = Some(copies);
            }
        }
        self.log.device_mut().write_barrier()?;
        if first_chip_copies == Some(0) {
            return Ok(false);
        }
        self.superblock = next;
        Ok(true)
    }

    /// After a power cut (format version 9, a writable mount's re-anchoring): a cut while a
    /// generation was written, copy after copy and chip after chip, may have left some of its
    /// copies torn or unwritten. Every copy of the current generation on every chip present is
    /// read (2p pages); if one does not decode, the same superblock is written again as the
    /// next generation, so every chip holds the newest one whole (fsck checks it).
    fn repair_superblock_copies(&mut self) -> Result<(), TxnError> {
        if !self.has_superblock_homes() || self.config.read_only {
            return Ok(());
        }
        let current = self.superblock;
        let Some((home, first_page)) = current.generation_place(current.generation) else {
            return Ok(());
        };
        let layout = self.log.layout();
        let (mut data, mut spare) =
            (alloc::vec![0u8; layout.page_size_bytes()], alloc::vec![0u8; layout.spare_size_bytes()]);
        let missing = self.log.device().missing_chip();
        let mut whole = true;
        'chips: for chip in (0..layout.chip_count).filter(|&chip| Some(chip) != missing) {
            for page in [first_page, first_page + 1] {
                let status =
                    self.log.device().read_physical(PageAddress::new(chip, home, page), &mut data, &mut spare)?;
                let readable = matches!(status, ReadStatus::Clean | ReadStatus::Corrected { .. });
                if !readable
                    || current.generation_on(&data, current.generation).is_none_or(|found| found.chip_index != chip)
                {
                    whole = false;
                    break 'chips;
                }
            }
        }
        if whole {
            return Ok(());
        }
        if let Some(generation) = self.next_superblock_generation()? {
            // Best effort: a generation no copy took leaves the volume as it was.
            self.write_superblock_generation(Superblock { generation, ..current })?;
        }
        Ok(())
    }

    /// Where a metaroot area moving off `old` goes: the least-worn free log segment with every
    /// chip's block (records sit on stripe pages: no masked segment) that is not open; from
    /// version 9 on, a reserved segment 1–3 that no area holds and that has not failed when it
    /// is less worn than that.
    fn area_candidate(&self, old: u32, failed: bool) -> Option<u32> {
        let table = self.log.table();
        let whole = |segment| !self.log.is_open(segment) && table.entry(segment).masked_blocks == 0;
        let from_log = table.least_worn_free(whole);
        if !self.has_superblock_homes() {
            return from_log;
        }
        // A move for wear takes a log segment only above the reserve (and the failure slack):
        // the log's space checks count on those. A failed area must move whatever it costs.
        let spare_above_reserve = table.free_segment_count() > self.config.reserve_segments.saturating_add(2);
        let from_log = from_log.filter(|_| failed || spare_above_reserve);
        let areas = self.superblock.metaroot_areas;
        // A reserved segment 1-3 no area holds is otherwise idle: it is taken first unless it
        // is itself past the log's most-erased segment.
        let (_, log_max) = table.erase_count_range();
        let reserved = METAROOT_SEGMENTS
            .into_iter()
            .filter(|&segment| segment != old && !areas.contains(&segment) && !table.is_retired_quietly(segment))
            .min_by_key(|&segment| (table.entry(segment).erase_count, segment));
        match (from_log, reserved) {
            (_, Some(reserved)) if table.entry(reserved).erase_count <= log_max => Some(reserved),
            (Some(log), Some(reserved)) if table.entry(reserved).erase_count <= table.entry(log).erase_count => {
                Some(reserved)
            }
            (None, reserved) => reserved,
            (log, _) => log,
        }
    }

    /// The next superblock generation to write, its pages erased on every chip present (a
    /// power cut may have left an attempt's pages programmed), or `None` when there is none:
    /// block 0 is full (before version 9), or the next home cannot be erased. From version 9 on,
    /// the first generation of a home erases that home first, on every chip present: the other
    /// home holds the newest generations until the new one is written.
    fn next_superblock_generation(&mut self) -> Result<Option<u32>, TxnError> {
        let layout = self.log.layout();
        let (mut data, mut spare) =
            (alloc::vec![0u8; layout.page_size_bytes()], alloc::vec![0u8; layout.spare_size_bytes()]);
        let missing = self.log.device().missing_chip();
        let chips: Vec<u32> = (0..layout.chip_count).filter(|&chip| Some(chip) != missing).collect();
        let mut generation = self.superblock.generation;
        // A home's generations, then the next home's first one.
        for _candidate in 0..=self.superblock.generations_per_home() {
            let Some(next) = generation.checked_add(1) else {
                return Ok(None);
            };
            generation = next;
            let Some((home, first_page)) = self.superblock.generation_place(generation) else {
                return Ok(None);
            };
            if first_page == 0 {
                // Version 9: the other home, erased whole before its first generation.
                for &chip in &chips {
                    let now_ns = self.log.device().now_ns();
                    match self
                        .log
                        .device_mut()
                        .flash_mut()
                        .erase_block(now_ns, fsoc_flash::BlockAddress::new(chip, home))
                    {
                        Ok(_) => {}
                        Err(
                            NandError::WornOut { .. } | NandError::OperationFailed { .. } | NandError::BadBlock { .. },
                        ) => {
                            return Ok(None);
                        }
                        Err(error) => return Err(error.into()),
                    }
                }
                self.log.device_mut().write_barrier()?;
                return Ok(Some(generation));
            }
            let mut erased = true;
            'chips: for &chip in &chips {
                for page in [first_page, first_page + 1] {
                    let address = PageAddress::new(chip, home, page);
                    if self.log.device().read_physical(address, &mut data, &mut spare)? != ReadStatus::Erased {
                        erased = false;
                        break 'chips;
                    }
                }
            }
            if erased {
                return Ok(Some(generation));
            }
        }
        Ok(None)
    }

    /// Retires in the segment table the metaroot areas whose erase failed before it was loaded
    /// (at mount), so the next full commit writes them down.
    fn record_failed_areas(&mut self) {
        for area in MetarootArea::ALL {
            if *area.of(&self.failed_areas) && !self.log.table().is_retired_quietly(self.area_segment(area)) {
                self.log.retire_area_segment(self.area_segment(area));
            }
        }
    }

    /// End of life, if reached (docs/DESIGN.md, "End of life"): the reason this volume was
    /// marked worn out, else what the segment table shows (a metaroot area retired, or more than
    /// `retired_segments_max` of the log segments in service retired since) or a metaroot area
    /// that failed in this session. O(1); a remount finds it again from the table.
    pub fn wear_out(&self) -> Option<WornOut> {
        if self.worn_out.is_some() {
            return self.worn_out;
        }
        if let Some(area) = MetarootArea::ALL.into_iter().find(|&area| self.area_failed(area)) {
            return Some(WornOut::MetarootArea { segment: self.area_segment(area) });
        }
        let (retired, in_service) = self.failed_segments()?;
        (retired > retired_segments_max(in_service)).then_some(WornOut::Segments { retired, in_service })
    }

    /// (log segments failed in service, log segments put in service), what end of life counts
    /// (`None` before the segment table is loaded). Blocks masked out of segments that go on
    /// count as a chip's share of a segment each (bad from the factory included: the mask does
    /// not tell them apart). O(1).
    pub fn failed_segments(&self) -> Option<(u32, u32)> {
        if !self.log.is_table_loaded() {
            return None;
        }
        let table = self.log.table();
        let masked = u32::try_from(table.masked_blocks() / u64::from(self.log.layout().chip_count)).unwrap_or(u32::MAX);
        let retired = table.retired_after_use_count().saturating_add(masked);
        // Retired before any erase: bad from the factory, never in service.
        let never_used = table.retired_log_segment_count() - table.retired_after_use_count();
        let second_home = u32::from(table.has_second_home());
        let in_service = self.log.layout().log_segment_count() - never_used - second_home;
        Some((retired, in_service))
    }

    /// Whether the volume was marked worn out (`set_worn_out`, or a mount that found no metaroot
    /// area to re-anchor in).
    pub fn worn_out(&self) -> Option<WornOut> {
        self.worn_out
    }

    /// Ends the volume's writing life: from now on it takes no change, and a commit writes
    /// nothing (everything it would make durable already is: the caller commits first).
    pub fn set_worn_out(&mut self, worn: WornOut) {
        self.worn_out = Some(worn);
    }

    /// Consumes the volume, returning the flash (for remount in tests and tools).
    pub fn into_flash(self) -> F {
        self.log.into_device().into_flash()
    }

    pub fn layout(&self) -> Layout {
        self.log.layout()
    }
}

impl From<TreeError<SegmentError>> for TxnError {
    /// The segment layer's own error when the store under the tree failed; else the tree's.
    fn from(error: TreeError<SegmentError>) -> TxnError {
        match error {
            TreeError::Store { error, .. } => TxnError::Segment(error),
            other => TxnError::Tree(other),
        }
    }
}

struct FoundMetaroot {
    metaroot: Metaroot,
    /// The payload of `metaroot`'s base when it is chained, else empty.
    base_delta: Vec<u8>,
    area_slot: MetarootArea,
    page_index: u32,
    last_programmed_page: u32,
    area_counters: [Option<u64>; 3],
}
