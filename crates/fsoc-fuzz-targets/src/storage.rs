//! Targets for the on-flash structures of fsoc-core (docs/FORMAT.md): superblock, metaroot,
//! delta payload, B+tree node (owned and in place), segment table and index pages, spare tag,
//! and the tree records. Each decodes, and whatever decodes must encode back to its canonical
//! form (the input itself, or the input with ignored bytes as the encoder writes them) and
//! decode again to the same value.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;

use fsoc_core::btree::{Child, Node, NodeEntries, NodePage, NODE_SIZE_BYTES_MAX};
use fsoc_core::fs::delta::{DecodedDelta, DeltaLog};
use fsoc_core::fs::records::{self, DirectoryValue, Extent, InodeRecord, RecordKind};
use fsoc_core::segment::device::SPARE_TAG_BYTES;
use fsoc_core::segment::{PageTag, SegmentTable};
use fsoc_core::txn::metaroot::METAROOT_HEADER_BYTES;
use fsoc_core::txn::superblock::SUPERBLOCK_BYTES;
use fsoc_core::txn::{Metaroot, MetarootShape, Superblock};

use crate::input::{fix_checksum_after, fix_checksum_excluding, u32_at, with_and_without_checksum, zeroed, Parameters};

/// Superblock (docs/FORMAT.md, "Superblock"): the CRC-32C of bytes 0..64 sits at 60; from
/// version 7 the redundancy code, generation and metaroot areas at 64..84 and the CRC-32C of
/// bytes 0..84 at 84.
const SUPERBLOCK_CHECKSUM_OFFSET: usize = 60;
const SUPERBLOCK_EXTENSION_BYTES: usize = fsoc_core::txn::superblock::EXTENSION_BYTES;
const SUPERBLOCK_EXTENSION_CHECKSUM_OFFSET: usize = SUPERBLOCK_EXTENSION_BYTES - 4;

/// Metaroot (docs/FORMAT.md, "Metaroot"): the CRC-32C of the record sits at 12, its length at
/// 16; byte 67 is reserved, bytes 76..80 before version 6 (the NVRAM lag of later versions),
/// and in version 1 byte 66 (the index levels of later versions).
const METAROOT_CHECKSUM_OFFSET: usize = 12;
const METAROOT_RECORD_BYTES_OFFSET: usize = 16;
const METAROOT_INDEX_LEVELS: Range<usize> = 66..67;
const METAROOT_RESERVED: Range<usize> = 67..68;
const METAROOT_NVRAM_LAG: Range<usize> = 76..80;

/// A B+tree node's checksum field (the CRC-32C of the whole page with it taken as zero).
const NODE_CHECKSUM_OFFSET: usize = 8;

/// Inode record: bytes 1..4 are reserved.
const INODE_RESERVED: Range<usize> = 1..4;
const DIRECTORY_VALUE_BYTES: usize = 9;

/// The table page target's tables: up to 256 segments of up to 4,096 pages (real tables are
/// larger, but a page decoder sees one page at a time, and these still span several table
/// pages of the smaller page sizes, and pages the last segment leaves partly unused).
const TABLE_SEGMENT_COUNT_MAX: u32 = 256;
const TABLE_PAGES_PER_SEGMENT_MAX: u32 = 4096;
/// Tables kept between inputs (`with_table`); past this many all are dropped.
const TABLES_KEPT_MAX: usize = 64;

/// The superblock: the first 64 bytes of page 0 of block 0 on every chip.
pub fn decode_superblock(data: &[u8]) {
    with_and_without_checksum(
        data,
        |bytes| {
            let fixed = fix_checksum_excluding(bytes, SUPERBLOCK_BYTES, SUPERBLOCK_CHECKSUM_OFFSET);
            // The extension's checksum follows what it covers (it includes the first one).
            fix_checksum_after(bytes, SUPERBLOCK_EXTENSION_CHECKSUM_OFFSET, SUPERBLOCK_EXTENSION_CHECKSUM_OFFSET);
            fixed
        },
        check_superblock,
    );
}

fn check_superblock(bytes: &[u8]) {
    let Ok(superblock) = Superblock::decode(bytes) else {
        return;
    };
    // Every byte the decoder reads round-trips (it refuses a non-zero reserved field): the
    // first 64, or 88 from version 7. Mirror-meta only from version 8.
    assert!(
        superblock.redundancy != fsoc_core::segment::Redundancy::MirrorMeta || superblock.format_version >= 8,
        "a version-{} superblock naming mirror-meta decoded",
        superblock.format_version
    );
    // Every generation a decoded superblock carries has its place (block 0 before version 9, a
    // home from 9 on), and a version-9 area is never the second home (segment 4).
    if superblock.format_version >= 7 {
        assert!(superblock.generation_place(superblock.generation).is_some(), "{superblock:?} has no place");
    }
    assert!(
        superblock.format_version < 9 || !superblock.metaroot_areas.contains(&4),
        "a version-9 superblock naming segment 4 as an area decoded"
    );
    let covered = if superblock.format_version >= 7 { SUPERBLOCK_EXTENSION_BYTES } else { SUPERBLOCK_BYTES };
    let canonical = bytes.get(..covered).unwrap_or_default();
    let encoded = superblock.encode(covered);
    assert_eq!(encoded, canonical, "superblock {superblock:?} re-encodes differently");
    assert_eq!(Superblock::decode(&encoded), Ok(superblock), "re-encoded superblock decodes differently");
}

/// Input: format version (u8: 1 + it modulo 3), segment count (u32 below 2^24, at least 4) and
/// page size (u8: a multiple of 512 up to 64 KiB), which give the shape every metaroot of such
/// a volume has (`MetarootShape::for_volume`); then the page.
pub fn decode_metaroot(data: &[u8]) {
    let mut parameters = Parameters::new(data);
    // Every version this build reads (12: chained delta commits, their link in the delta).
    let format_version = 1 + u32::from(parameters.u8()) % fsoc_core::txn::superblock::FORMAT_VERSION;
    let segment_count = (parameters.u32() % (1 << 24)).max(4);
    let page_size_bytes = parameters.page_size_bytes(128);
    let shape = MetarootShape::for_volume(format_version, segment_count, page_size_bytes);
    with_and_without_checksum(
        parameters.rest(),
        |bytes| {
            let record_bytes = u32_at(bytes, METAROOT_RECORD_BYTES_OFFSET).unwrap_or(0) as usize;
            fix_checksum_excluding(bytes, record_bytes, METAROOT_CHECKSUM_OFFSET)
        },
        |bytes| check_metaroot(bytes, shape),
    );
}

fn check_metaroot(bytes: &[u8], shape: MetarootShape) {
    let Ok(metaroot) = Metaroot::decode(bytes, shape) else {
        return;
    };
    let record_bytes = u32_at(bytes, METAROOT_RECORD_BYTES_OFFSET).unwrap_or(0) as usize;
    assert!(record_bytes >= METAROOT_HEADER_BYTES && record_bytes <= bytes.len(), "record of {record_bytes} bytes");
    let mut ignored = vec![METAROOT_RESERVED];
    if shape.format_version < 6 {
        ignored.push(METAROOT_NVRAM_LAG);
    }
    if shape.format_version == 1 {
        ignored.push(METAROOT_INDEX_LEVELS);
    }
    let mut canonical = zeroed(bytes.get(..record_bytes).unwrap_or_default(), &ignored);
    assert!(fix_checksum_excluding(&mut canonical, record_bytes, METAROOT_CHECKSUM_OFFSET));
    // The page the record came in is at least as long as the record, so it fits.
    let encoded = metaroot.encode(bytes.len());
    assert_eq!(encoded.get(..record_bytes), Some(canonical.as_slice()), "metaroot {metaroot:?} re-encodes differently");
    assert_eq!(Metaroot::decode(&encoded, shape), Ok(metaroot), "re-encoded metaroot decodes differently");
}

/// The delta payload (docs/FORMAT.md, "Delta payload"). The encoder (`DeltaLog`) keeps one
/// entry per key and one per segment, in order; the decoder takes any order and repeats, which
/// replay applies in turn. So a payload in the encoder's order re-encodes to itself, and any
/// payload, folded as replay folds it (the last operation on a key wins, a segment's counts
/// add up), re-encodes to a payload that decodes to that fold.
pub fn decode_delta(data: &[u8]) {
    let Ok(decoded) = DeltaLog::decode(data) else {
        return;
    };
    assert!(decoded.entries.len() <= data.len() / 6, "{} entries from {} bytes", decoded.entries.len(), data.len());
    let mut entries = BTreeMap::new();
    for (tree_id, key, value) in &decoded.entries {
        entries.insert((*tree_id, key.clone()), value.clone());
    }
    let mut segments: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for &(segment_index, allocated, released) in &decoded.segments {
        let (allocated_sum, released_sum) = segments.entry(segment_index).or_default();
        match (allocated_sum.checked_add(allocated), released_sum.checked_add(released)) {
            (Some(allocated), Some(released)) => (*allocated_sum, *released_sum) = (allocated, released),
            // Replay never sums that far: the segment table refuses a count above a segment's
            // pages first (`SegmentTable::apply_delta`).
            _ => return,
        }
    }
    let ordered = entries.len() == decoded.entries.len() && segments.len() == decoded.segments.len() && {
        let keys = decoded.entries.iter().map(|(tree_id, key, _)| (*tree_id, key.as_slice()));
        keys.clone().zip(keys.skip(1)).all(|(before, after)| before < after)
            && decoded.segments.windows(2).all(|pair| matches!(pair, [before, after] if before.0 < after.0))
    };
    // Folding only shrinks the payload, so it fits a capacity of the input's length.
    let mut log = DeltaLog::new(data.len());
    for ((tree_id, key), value) in &entries {
        match value {
            Some(value) => log.record_put(*tree_id, key, value),
            None => log.record_remove(*tree_id, key),
        }
    }
    for (&segment_index, &(allocated, released)) in &segments {
        log.record_segment(segment_index, allocated, released);
    }
    assert!(log.fits(), "the folded delta outgrew its input of {} bytes", data.len());
    let encoded = log.encode();
    if ordered {
        assert_eq!(encoded, data, "delta in the encoder's order re-encodes differently: {decoded:?}");
    }
    let folded = DecodedDelta {
        entries: entries.into_iter().map(|((tree_id, key), value)| (tree_id, key, value)).collect(),
        segments: segments.into_iter().map(|(segment, (allocated, released))| (segment, allocated, released)).collect(),
    };
    assert_eq!(DeltaLog::decode(&encoded), Ok(folded), "re-encoded delta decodes differently");
}

/// The compact delta payload (format version 11 on; docs/FORMAT.md, "Compact delta payload").
/// The decoder admits only strictly ordered entries and segments, and bounds what it produces
/// by the input's length; what it decodes re-encodes (with `DeltaLog`'s compact encoding) to a
/// payload that decodes to the same changes. (Not byte-identical, nor always shorter: the
/// decoder also takes, say, a length written out where the flag would do, and the encoder's
/// greedy runs are not the shortest possible.)
pub fn decode_compact_delta(data: &[u8]) {
    use fsoc_core::fs::delta_compact;
    let Ok(decoded) = delta_compact::decode(data) else {
        return;
    };
    let decoded_bytes: usize =
        decoded.entries.iter().map(|(_, key, value)| key.len() + value.as_ref().map_or(0, Vec::len)).sum();
    assert!(
        decoded_bytes <= data.len() * delta_compact::DECODED_BYTES_PER_BYTE + delta_compact::DECODED_BYTES_SLACK,
        "{decoded_bytes} bytes decoded from {}",
        data.len()
    );
    let keys = decoded.entries.iter().map(|(tree_id, key, _)| (*tree_id, key.as_slice()));
    assert!(keys.clone().zip(keys.skip(1)).all(|(before, after)| before < after), "entries out of order");
    assert!(
        decoded.segments.windows(2).all(|pair| matches!(pair, [before, after] if before.0 < after.0)),
        "segments out of order"
    );
    let mut log = DeltaLog::with_encoding(decoded_bytes.saturating_mul(2).max(1 << 16), true);
    log.record_decoded(&decoded);
    // The writer's own check (`encode_within`): a payload that decodes to more than the bound
    // allows is never written (the greedy runs may take more bytes than the input did).
    let Some(encoded) = log.encode_within(usize::MAX) else {
        return;
    };
    assert_eq!(delta_compact::decode(&encoded), Ok(decoded), "re-encoded compact delta decodes differently");
}

/// A B+tree node page, decoded into the owned form (the input's length is the node size).
/// The format admits one encoding per node, so a page that decodes re-encodes to itself.
pub fn decode_node(data: &[u8]) {
    with_and_without_checksum(data, fix_node_checksum, check_node);
}

fn fix_node_checksum(bytes: &mut [u8]) -> bool {
    let length = bytes.len();
    fix_checksum_excluding(bytes, length, NODE_CHECKSUM_OFFSET)
}

fn check_node(bytes: &[u8]) {
    let Ok((node, checksum)) = Node::decode(bytes) else {
        return;
    };
    let encoded = node.encode(bytes.len());
    assert_eq!(encoded.bytes, bytes, "node {node:?} re-encodes differently");
    assert_eq!(encoded.checksum, checksum, "checksum of a decoded node");
    assert_eq!(NodePage::encode(&node, bytes.len()).page_bytes(), bytes, "in-place encoding differs");
    assert_eq!(Node::decode(&encoded.bytes), Ok((node, checksum)), "re-encoded node decodes differently");
}

/// A B+tree node page parsed in place (`NodePage`, what the tree reads clean nodes as): every
/// accessor on every entry, then the owned form, which must re-encode to the page.
pub fn parse_node_page(data: &[u8]) {
    with_and_without_checksum(data, fix_node_checksum, check_node_page);
}

fn check_node_page(bytes: &[u8]) {
    let Ok(page) = NodePage::parse(bytes.to_vec()) else {
        return;
    };
    assert!(bytes.len() <= NODE_SIZE_BYTES_MAX, "a node of {} bytes parsed", bytes.len());
    assert_eq!(page.page_bytes(), bytes, "parsed page bytes differ from the input");
    assert_eq!(page.memory_bytes(), bytes.len() + 2 * page.entry_count(), "offset table size");
    assert_eq!(page.is_leaf(), page.level() == 0);
    let node = page.to_node();
    assert_eq!((node.tree_id, node.level), (page.tree_id(), page.level()));
    match &node.entries {
        NodeEntries::Leaf(entries) => {
            assert_eq!(entries.len(), page.entry_count());
            for (index, entry) in entries.iter().enumerate() {
                assert_eq!((page.key(index), page.value(index)), (entry.key.as_slice(), entry.value.as_slice()));
            }
        }
        NodeEntries::Internal(branches) => {
            assert_eq!(branches.len(), page.entry_count());
            for (index, branch) in branches.iter().enumerate() {
                assert_eq!(page.key(index), branch.key.as_slice());
                assert_eq!(Child::OnFlash(page.child(index)), branch.child);
                assert!(!page.child(index).address.is_null(), "null child {index} parsed");
            }
        }
    }
    let encoded = node.encode(bytes.len());
    assert_eq!(encoded.bytes, bytes, "parsed node {node:?} re-encodes differently");
    assert_eq!(encoded.checksum, page.checksum());
}

/// What a segment-table target's table is built from: segment count, pages per segment, page
/// size, and the index pages (0: not indexed).
type TableShape = (u32, u32, usize, u32);

thread_local! {
    /// Tables the segment-table targets built, by shape. Building one costs time in proportion
    /// to its segments (its free, wear and victim sets), far more than decoding a page, and
    /// inputs share a few shapes. A page decoder writes only the entries (or pointers) of its
    /// own page, and the checks read only those, so what earlier inputs left in the rest of a
    /// table cannot change an outcome.
    static TABLES: RefCell<BTreeMap<TableShape, SegmentTable>> = const { RefCell::new(BTreeMap::new()) };
}

/// Runs `work` on a table of `shape`, reusing one built before when there is one.
fn with_table(shape: TableShape, work: impl FnOnce(&mut SegmentTable)) {
    TABLES.with_borrow_mut(|tables| {
        if tables.len() >= TABLES_KEPT_MAX && !tables.contains_key(&shape) {
            tables.clear();
        }
        let table = tables.entry(shape).or_insert_with(|| {
            let (segment_count, pages_per_segment, page_size_bytes, index_page_count) = shape;
            let table = SegmentTable::new(segment_count, pages_per_segment, page_size_bytes);
            if index_page_count > 0 {
                table.with_index_pages(index_page_count)
            } else {
                table
            }
        });
        work(table);
    });
}

/// Input: segment count (u8 + 1), pages per segment (u16: 1 + it modulo 4,096), page size (u8:
/// a multiple of 512 up to 64 KiB), the page's index in the table (u8, modulo the table's
/// pages); then the page. Decoding reads one 8-byte entry per segment the page covers and
/// ignores the rest (written as 0xFF), so those entries must re-encode to themselves.
pub fn decode_segment_table_page(data: &[u8]) {
    let mut parameters = Parameters::new(data);
    let segment_count = 1 + u32::from(parameters.u8()) % TABLE_SEGMENT_COUNT_MAX;
    let pages_per_segment = 1 + u32::from(parameters.u16()) % TABLE_PAGES_PER_SEGMENT_MAX;
    let page_size_bytes = parameters.page_size_bytes(128);
    let page_index = u32::from(parameters.u8()) % SegmentTable::page_count_for(segment_count, page_size_bytes);
    let bytes = parameters.rest();
    with_table((segment_count, pages_per_segment, page_size_bytes, 0), |table| {
        if table.decode_page(page_index, bytes).is_err() {
            return;
        }
        let entries_per_page = SegmentTable::entries_per_page(page_size_bytes);
        let entry_count = (segment_count - page_index * entries_per_page).min(entries_per_page) as usize;
        let entry_bytes = 8 * entry_count;
        let encoded = table.encode_page(page_index, page_size_bytes);
        assert_eq!(
            encoded.get(..entry_bytes),
            bytes.get(..entry_bytes),
            "table page {page_index} re-encodes differently"
        );
        let tail = encoded.get(entry_bytes..).unwrap_or_default();
        assert!(tail.iter().all(|byte| *byte == 0xFF), "unused tail not erased");
        assert!(table.decode_page(page_index, &encoded).is_ok(), "re-encoded table page does not decode");
        assert_eq!(
            table.encode_page(page_index, page_size_bytes),
            encoded,
            "re-encoded table page decodes differently"
        );
    });
}

/// Input: page size (u8: 512 or 1024), table size (u8: one of 16 table-page counts around
/// multiples of the pointers an index page holds, so the last index page is full, nearly full
/// or nearly empty), the index page's number (u8, modulo the index pages); then the page. An
/// index page holds one pointer per table page it covers and 0xFF in every other slot, all
/// checked, so it must re-encode to exactly its first `page_size / 8 × 8` bytes.
pub fn decode_segment_table_index_page(data: &[u8]) {
    let mut parameters = Parameters::new(data);
    let page_size_bytes = parameters.page_size_bytes(2);
    let pointers_per_page = SegmentTable::entries_per_page(page_size_bytes);
    let table_page_count = match parameters.u8() % 16 {
        choice @ 0..=3 => 1 + u32::from(choice),
        choice => {
            let multiple = 1 + u32::from(choice - 4) / 4;
            let offset = [0, 1, 2, pointers_per_page / 2].get(usize::from(choice % 4)).copied().unwrap_or(0);
            (multiple * pointers_per_page + offset).saturating_sub(1)
        }
    };
    // Pages per segment do not matter to index pages; the segment count fills the table pages.
    let segment_count = table_page_count * pointers_per_page;
    let index_page_count = table_page_count.div_ceil(pointers_per_page);
    let index_page = u32::from(parameters.u8()) % index_page_count;
    let bytes = parameters.rest();
    with_table((segment_count, 64, page_size_bytes, index_page_count), |table| {
        if table.decode_index_page(index_page, bytes).is_err() {
            return;
        }
        let encoded = table.encode_index_page(index_page, page_size_bytes);
        let slot_bytes = 8 * pointers_per_page as usize;
        assert_eq!(
            encoded.get(..slot_bytes),
            bytes.get(..slot_bytes),
            "index page {index_page} re-encodes differently"
        );
        assert!(table.decode_index_page(index_page, &encoded).is_ok(), "re-encoded index page does not decode");
        assert_eq!(table.encode_index_page(index_page, page_size_bytes), encoded, "re-encoded index page differs");
    });
}

/// A page's spare-area tag (docs/FORMAT.md, "Spare tag"): 16 bytes, of which each kind uses
/// some; the rest are written as zero and ignored on reading.
pub fn decode_page_tag(data: &[u8]) {
    let Some(tag) = PageTag::decode(data) else {
        return;
    };
    // Bit i set: byte i of the tag carries a field of this kind.
    let used_bytes: u16 = match tag {
        PageTag::Node { .. } | PageTag::NodeCopy { .. } => 0b0000_0000_0000_0111,
        PageTag::Data { .. } => 0b1111_1111_1111_0001,
        PageTag::SegmentTable { .. } | PageTag::SegmentTableCopy { .. } => 0b1111_0000_0000_0001,
        PageTag::Metaroot | PageTag::Superblock | PageTag::Parity => 0b0000_0000_0000_0001,
    };
    // A spare area longer than the tag: the encoder fills the rest with 0xFF.
    let mut encoded = [0xA5u8; SPARE_TAG_BYTES + 4];
    tag.encode(&mut encoded);
    for offset in 0..SPARE_TAG_BYTES {
        let expected = if used_bytes >> offset & 1 == 1 { data.get(offset) } else { Some(&0) };
        assert_eq!(encoded.get(offset), expected, "byte {offset} of tag {tag:?} re-encodes differently");
    }
    assert!(encoded.get(SPARE_TAG_BYTES..).unwrap_or_default().iter().all(|byte| *byte == 0xFF), "spare past the tag");
    assert_eq!(PageTag::decode(&encoded), Some(tag), "re-encoded tag decodes differently");
}

/// An inode record (a value of the allocation tree): its 80 bytes (format version 5 on) or 64
/// (versions 1 to 4), reserved bytes 1..4 written as zero.
pub fn decode_inode_record(data: &[u8]) {
    let Ok(record) = InodeRecord::decode(data) else {
        return;
    };
    let wide = data.len() >= records::INODE_RECORD_BYTES;
    let (width, encoded) = if wide {
        (records::INODE_RECORD_BYTES, record.encode())
    } else {
        (records::INODE_RECORD_BYTES_NARROW, record.encode_narrow())
    };
    let canonical = zeroed(data.get(..width).unwrap_or_default(), &[INODE_RESERVED]);
    // Versions 1 to 4 keep unsigned times: one past 2262 reads as the largest signed time.
    let times = canonical.get(32..56).unwrap_or_default();
    let clamped = !wide && times.chunks(8).any(|time| time.last().is_some_and(|top| top & 0x80 != 0));
    if !clamped {
        assert_eq!(encoded, canonical, "inode record {record:?} re-encodes differently");
    }
    assert_eq!(InodeRecord::decode_for(&encoded, wide), Ok(record), "re-encoded inode record decodes differently");
}

/// A directory entry's value (inode and kind): its 9 bytes.
pub fn decode_directory_value(data: &[u8]) {
    let Ok(value) = DirectoryValue::decode(data) else {
        return;
    };
    let encoded = value.encode();
    assert_eq!(Some(encoded.as_slice()), data.get(..DIRECTORY_VALUE_BYTES), "{value:?} re-encodes differently");
    assert_eq!(DirectoryValue::decode(&encoded), Ok(value), "re-encoded directory value decodes differently");
}

/// Input: the first page (u64, which comes from the record's key); then an extent value. Every
/// byte of a value counts (format version 3 added a CRC-32C per page), so it re-encodes to
/// exactly itself.
pub fn decode_extent(data: &[u8]) {
    let mut parameters = Parameters::new(data);
    let first_page = parameters.u64();
    let value = parameters.rest();
    let Ok(extent) = Extent::decode(first_page, value) else {
        return;
    };
    let encoded = extent.encode_value();
    assert_eq!(encoded, value, "extent {extent:?} re-encodes differently");
    assert_eq!(Extent::decode(first_page, &encoded).as_ref(), Ok(&extent), "re-encoded extent decodes differently");
    assert!(extent.checksums.is_empty() || extent.checksums.len() == extent.page_count as usize);
    // What the read path asks of a decoded extent, at both of its ends (an extent at the end
    // of the u64 page space saturates and may hold fewer pages than it says).
    for page in [extent.first_page, extent.end_page().saturating_sub(1)] {
        if page >= extent.first_page && page < extent.end_page() {
            assert!(extent.address_of(page).0 >= extent.address.0, "address of page {page} before the extent");
            assert_eq!(extent.checksum_of(page).is_some(), extent.has_checksums());
        }
    }
    if extent.first_page < extent.end_page() && extent.end_page() - extent.first_page == u64::from(extent.page_count) {
        assert_eq!(extent.slice(extent.first_page, extent.end_page()), extent, "the whole slice of an extent");
    }
}

/// An allocation-tree key: inode (u64 BE), record kind, offset (u64 BE), nothing else.
pub fn parse_allocation_key(data: &[u8]) {
    let Some((inode, kind, offset)) = records::parse_allocation_key(data) else {
        return;
    };
    assert_eq!(data.len(), records::ALLOCATION_KEY_BYTES, "allocation key of another length");
    let kinds = [RecordKind::Inode, RecordKind::Inline, RecordKind::Extent, RecordKind::Symlink, RecordKind::Orphan];
    match kinds.into_iter().find(|record_kind| *record_kind as u8 == kind) {
        Some(kind) => assert_eq!(records::allocation_key(inode, kind, offset), data, "key re-encodes differently"),
        // A kind no record has parses too (the tree's walkers skip it); its byte says it.
        None => assert_eq!(data.get(8), Some(&kind), "kind byte"),
    }
}

/// A directory-tree key: parent inode (u64 BE), then the name.
pub fn parse_directory_key(data: &[u8]) {
    let Some((parent, name)) = records::parse_directory_key(data) else {
        return;
    };
    assert_eq!(records::directory_key(parent, name), data, "directory key re-encodes differently");
}

/// A parity row (format version 7, docs/FORMAT.md "Parity page"): the input is cut into rows
/// of 64-byte pages with 16-byte tags (tag byte 3 forced to 0, as every tag has it). The row's
/// parity page is built as the device builds it; then every page is rebuilt from the others and
/// must come back exactly. The input's own bytes are also read as a parity page's spare and as
/// other pages of a row, which must never panic (the device reads them from flash).
pub fn rebuild_parity_row(data: &[u8]) {
    use fsoc_core::segment::parity::{rebuild, unfold_tag, OpenRow};
    const PAGE: usize = 64;
    let _ = unfold_tag(data);
    let raw: Vec<(bool, &[u8], &[u8])> = data
        .chunks(PAGE + SPARE_TAG_BYTES)
        .enumerate()
        .map(|(index, chunk)| {
            let (page, spare) = chunk.split_at(chunk.len().min(PAGE));
            (index == 0, page, spare)
        })
        .collect();
    let _ = rebuild(PAGE, &raw);
    let pages: Vec<(Vec<u8>, [u8; SPARE_TAG_BYTES])> = data
        .chunks_exact(PAGE + SPARE_TAG_BYTES)
        .take(7)
        .map(|chunk| {
            let (page, spare) = chunk.split_at(PAGE);
            let mut tag = [0u8; SPARE_TAG_BYTES];
            tag.copy_from_slice(spare.get(..SPARE_TAG_BYTES).unwrap_or(&[0; SPARE_TAG_BYTES]));
            tag[3] = 0;
            (page.to_vec(), tag)
        })
        .collect();
    if pages.is_empty() {
        return;
    }
    let mut row = OpenRow::new(4, 0, PAGE);
    for (page, tag) in &pages {
        row.add(page, tag);
    }
    let parity_spare = row.parity_spare(SPARE_TAG_BYTES + 8);
    for lost in 0..pages.len() {
        let others: Vec<(bool, &[u8], &[u8])> = pages
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != lost)
            .map(|(_, (page, tag))| (false, page.as_slice(), tag.as_slice()))
            .chain([(true, row.data.as_slice(), parity_spare.as_slice())])
            .collect();
        let rebuilt = rebuild(PAGE, &others);
        let (page, tag) = pages.get(lost).map(|(page, tag)| (page.clone(), *tag)).unwrap_or_default();
        assert_eq!(rebuilt, Some((page, tag)), "page {lost} of the row does not come back");
    }
}
