//! docs/FORMAT.md's example hex dumps decode to the values the document states, so the
//! document cannot drift from the code.
use fsoc_core::address::{LogAddress, PagePointer};
use fsoc_core::btree::TreeRoot;
use fsoc_core::segment::Redundancy;
use fsoc_core::txn::metaroot::MetarootShape;
use fsoc_core::txn::{Metaroot, Superblock};
use fsoc_media::Geometry;

fn example(marker: &str) -> Vec<u8> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md")).expect("FORMAT.md");
    let start = text.find(marker).unwrap_or_else(|| panic!("marker {marker} missing from FORMAT.md"));
    let block = &text[start..];
    let body = &block[block.find("```").expect("fence") + 3..];
    let body = &body[body.find('\n').expect("newline") + 1..];
    let body = &body[..body.find("```").expect("closing fence")];
    body.lines()
        .flat_map(|line| line.split_whitespace().skip(1)) // first column is the offset
        .map(|pair| u8::from_str_radix(pair, 16).expect("hex byte"))
        .collect()
}

fn superblock() -> Superblock {
    Superblock {
        format_version: 2,
        geometry: Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 1024 },
        chip_count: 2,
        chip_index: 1,
        volume_id: 0x0123_4567_89AB_CDEF,
        metaroot_area_count: 3,
        first_log_segment: 4,
        nvram_bytes: 0,
        nvram_technology: 0,
        redundancy: Redundancy::None,
        generation: 0,
        metaroot_areas: [1, 2, 3],
    }
}

fn metaroot() -> Metaroot {
    Metaroot {
        commit_counter: 42,
        volume_id: 0x0123_4567_89AB_CDEF,
        flags: 1,
        next_inode: 100,
        directory_root: TreeRoot {
            pointer: PagePointer { address: LogAddress(0x0300), checksum: 0xAABB_CCDD },
            height: 2,
        },
        allocation_root: TreeRoot {
            pointer: PagePointer { address: LogAddress(0x0301), checksum: 0x1122_3344 },
            height: 3,
        },
        segment_table: vec![PagePointer { address: LogAddress(0x02FF), checksum: 0xCAFE_F00D }],
        shape: SHAPE,
        delta: Vec::new(),
        chain: None,
        nvram_lag: 0,
    }
}

/// One table page named directly (1,024 segments of 2 KiB pages: 4 table pages would be the
/// real count; the example keeps one pointer).
const SHAPE: MetarootShape =
    MetarootShape { format_version: 2, table_page_count: 1, table_index_levels: 0, index_page_count: 0 };

/// 65,536 segments of 2 KiB pages: 256 table pages, named through one index page.
const INDEXED_SHAPE: MetarootShape =
    MetarootShape { format_version: 2, table_page_count: 256, table_index_levels: 1, index_page_count: 1 };

fn indexed_metaroot() -> Metaroot {
    Metaroot {
        commit_counter: 7,
        flags: 0,
        segment_table: vec![PagePointer { address: LogAddress(0x1234), checksum: 0x0BAD_F00D }],
        shape: INDEXED_SHAPE,
        ..metaroot()
    }
}

fn dump(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .enumerate()
        .map(|(row, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("{:04x}  {}\n", row * 16, hex.join(" "))
        })
        .collect()
}

#[test]
fn superblock_example_decodes() {
    let bytes = example("<!-- example: superblock -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    assert_eq!(
        Superblock::decode(&page),
        Ok(superblock()),
        "expected dump:\n{}",
        dump(&superblock().encode(2048)[..64])
    );
}

/// Format version 7: chip 2 of 3 of a volume with parity; bytes 64..72 carry the mode and the
/// second checksum.
#[test]
fn superblock_version_7_example_decodes() {
    let bytes = example("<!-- example: superblock version 7 -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    let expected =
        Superblock { format_version: 7, chip_count: 3, chip_index: 2, redundancy: Redundancy::Parity, ..superblock() };
    assert_eq!(Superblock::decode(&page), Ok(expected), "expected dump:\n{}", dump(&expected.encode(2048)[..88]));
}

#[test]
fn metaroot_example_decodes() {
    let bytes = example("<!-- example: metaroot -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    assert_eq!(
        Metaroot::decode(&page, SHAPE),
        Ok(metaroot()),
        "expected dump:\n{}",
        dump(&metaroot().encode(2048)[..88])
    );
}

#[test]
fn indexed_metaroot_example_decodes() {
    let bytes = example("<!-- example: indexed metaroot -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    let expected = indexed_metaroot();
    assert_eq!(
        Metaroot::decode(&page, INDEXED_SHAPE),
        Ok(expected.clone()),
        "expected dump:\n{}",
        dump(&expected.encode(2048)[..88])
    );
    assert_eq!(MetarootShape::for_volume(2, 65_536, 2048), INDEXED_SHAPE, "the example's shape is the rule's");
    assert_eq!(MetarootShape::for_volume(1, 62_976, 2048).table_index_levels, 0, "version 1 never indexes");
}

/// The extended-attribute example: its key is inode 5's kind-6 key at the name's hash, slot 0,
/// chunk 0, and its value is the whole stream of `user.a` = `x`; a volume stores exactly it.
#[test]
fn extended_attribute_example_matches_the_code() {
    use fsoc_core::fs::records::{allocation_key, parse_allocation_key, split_xattr_offset, xattr_offset, RecordKind};
    let bytes = example("Example (extended attribute record");
    let (key, value) = bytes.split_at(17);
    let hash = fsoc_flash::codec::crc32c(b"user.a");
    assert_eq!(hash, 0x710E_B6E6);
    assert_eq!(key, allocation_key(5, RecordKind::Xattr, xattr_offset(hash, 0, 0)));
    let (inode, kind, offset) = parse_allocation_key(key).expect("key");
    assert_eq!((inode, kind, split_xattr_offset(offset)), (5, 6, (hash, 0, 0)));
    assert_eq!(value, [&[6u8, 1, 0, 0, 0][..], b"user.a", b"x"].concat());
}

/// The inode record example (format version 5): a time before the epoch, the birth time and
/// the page count decode as the document says, and the record re-encodes to the same bytes.
#[test]
fn inode_record_example_decodes() {
    use fsoc_core::fs::{FileKind, InodeRecord};
    let bytes = example("Example (inode record, version 5");
    let record = InodeRecord::decode_for(&bytes, true).expect("decodes");
    let made = 1_700_000_000_000_000_000;
    assert_eq!((record.kind, record.mode, record.uid, record.gid, record.nlink), (FileKind::File, 0o644, 1000, 100, 1));
    assert_eq!((record.size, record.pages, record.generation, record.parent), (5000, 3, 7, 0));
    assert_eq!(
        (record.atime_ns, record.mtime_ns, record.ctime_ns, record.btime_ns),
        (-1_500_000_000, made, made, made)
    );
    assert_eq!(record.encode(), bytes);
}
