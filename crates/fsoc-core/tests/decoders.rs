//! Every decoder of on-flash bytes, fed seeded random bytes and single-byte mutations of valid
//! encodings: never a panic, and whatever decodes re-encodes to the same bytes. (The same entry
//! points a fuzzer would drive; B+tree nodes have their own such test in btree/tests.rs.)
//! Reserved bytes are ignored on reading (FORMAT.md conventions), so for records with reserved
//! fields the check is decode(encode(decoded)) == decoded.
use fsoc_core::address::{LogAddress, PagePointer};
use fsoc_core::btree::TreeRoot;
use fsoc_core::fs::records::{DirectoryValue, Extent, FileKind, InodeRecord};
use fsoc_core::segment::{PageTag, Redundancy, SegmentTable};
use fsoc_core::txn::{Metaroot, MetarootShape, Superblock};
use fsoc_flash::codec::DecodeError;
use fsoc_media::Geometry;

/// Random inputs of random length plus mutations of `valid`.
fn inputs(seed: u64, valid: &[u8], count: usize) -> Vec<Vec<u8>> {
    let mut rng = fsoc_media::rng::SeededRng::new(seed);
    let mut all = Vec::new();
    for _ in 0..count {
        let length = (rng.next_u64() % (valid.len() as u64 + 16)) as usize;
        all.push(rng.bytes(length));
        let mut mutated = valid.to_vec();
        let index = (rng.next_u64() as usize) % mutated.len();
        mutated[index] = rng.next_u64() as u8;
        all.push(mutated);
        all.push(valid[..(rng.next_u64() as usize) % valid.len()].to_vec());
    }
    all
}

#[test]
fn superblock_decoder() {
    let version_2 = Superblock {
        format_version: 2,
        geometry: Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 64 },
        chip_count: 1,
        chip_index: 0,
        volume_id: 7,
        metaroot_area_count: 3,
        first_log_segment: 4,
        nvram_bytes: 0,
        nvram_technology: 0,
        redundancy: Redundancy::None,
        generation: 0,
        metaroot_areas: [1, 2, 3],
    };
    // Version 7 adds the redundancy mode and a second checksum (bytes 64..72).
    let version_7 = Superblock { format_version: 7, chip_count: 3, redundancy: Redundancy::Parity, ..version_2 };
    // Version 8 adds mirror-meta, which a version-7 superblock may not name.
    let version_8 = Superblock { format_version: 8, redundancy: Redundancy::MirrorMeta, ..version_7 };
    for (seed, valid, covered) in [(1, version_2, 64), (11, version_7, 88), (12, version_8, 88)] {
        let valid = valid.encode(2048);
        for input in inputs(seed, &valid, 3000) {
            if let Ok(decoded) = Superblock::decode(&input) {
                assert_eq!(&decoded.encode(2048)[..covered], &input[..covered]);
                assert!(decoded.redundancy != Redundancy::MirrorMeta || decoded.format_version >= 8);
            }
        }
    }
    assert_eq!(Superblock::decode(&version_8.encode(2048)).expect("version 8"), version_8);
    let mirror_on_7 = Superblock { format_version: 7, ..version_8 }.encode(2048);
    assert!(
        matches!(Superblock::decode(&mirror_on_7), Err(DecodeError::InvalidField { field: "redundancy", .. })),
        "a version-7 superblock naming mirror-meta is refused"
    );
}

#[test]
fn metaroot_decoder() {
    let root = TreeRoot { pointer: PagePointer { address: LogAddress(9), checksum: 1 }, height: 2 };
    let valid = Metaroot {
        commit_counter: 3,
        volume_id: 7,
        flags: 0,
        next_inode: 9,
        directory_root: root,
        allocation_root: root,
        segment_table: vec![PagePointer { address: LogAddress(5), checksum: 2 }; 2],
        shape: MetarootShape { format_version: 2, table_page_count: 2, table_index_levels: 0, index_page_count: 0 },
        delta: Vec::new(),
        chain: None,
        nvram_lag: 0,
    }
    .encode(2048);
    for input in inputs(2, &valid, 3000) {
        for format_version in [1, 2] {
            let shape =
                MetarootShape { format_version, table_page_count: 2, table_index_levels: 0, index_page_count: 0 };
            if let Ok(decoded) = Metaroot::decode(&input, shape) {
                assert_eq!(&decoded.encode(2048)[..96], &input[..96]);
            }
        }
    }
    // An indexed directory: two index pages naming 300 table pages.
    let shape = MetarootShape { format_version: 2, table_page_count: 300, table_index_levels: 1, index_page_count: 2 };
    let valid = Metaroot {
        commit_counter: 3,
        volume_id: 7,
        flags: 0,
        next_inode: 9,
        directory_root: root,
        allocation_root: root,
        segment_table: vec![PagePointer { address: LogAddress(5), checksum: 2 }; 2],
        shape,
        delta: vec![1, 2, 3],
        chain: None,
        nvram_lag: 0,
    }
    .encode(2048);
    for input in inputs(8, &valid, 3000) {
        if let Ok(decoded) = Metaroot::decode(&input, shape) {
            assert_eq!(&decoded.encode(2048)[..99], &input[..99]);
        }
    }
}

#[test]
fn record_decoders() {
    let inode = InodeRecord {
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 2,
        nlink: 1,
        flags: 1,
        size: 10,
        atime_ns: 1,
        mtime_ns: 2,
        ctime_ns: -3,
        btime_ns: -4,
        pages: 0,
        generation: 0,
        parent: 0,
    }
    .encode();
    for input in inputs(3, &inode, 3000) {
        if let Ok(decoded) = InodeRecord::decode(&input) {
            assert_eq!(InodeRecord::decode(&decoded.encode()), Ok(decoded));
        }
    }
    let entry = DirectoryValue { inode: 5, kind: FileKind::Directory }.encode();
    for input in inputs(4, &entry, 2000) {
        if let Ok(decoded) = DirectoryValue::decode(&input) {
            assert_eq!(decoded.encode(), input[..9].to_vec());
        }
    }
    // Both forms: without checksums (format versions 1 and 2) and with one per page (3 on).
    // Whatever decodes re-encodes to exactly the input: no byte of a value is ignored.
    let legacy = Extent { first_page: 3, address: LogAddress(100), page_count: 4, checksums: Vec::new() };
    let checked = Extent { checksums: vec![0xDEAD_BEEF, 1, 2, 3], ..legacy.clone() };
    for (seed, extent) in [(5, legacy), (15, checked)] {
        for input in inputs(seed, &extent.encode_value(), 2000) {
            if let Ok(decoded) = Extent::decode(3, &input) {
                assert_eq!(decoded.encode_value(), input);
            }
        }
    }
}

#[test]
fn segment_table_and_tag_decoders() {
    let mut table = SegmentTable::new(200, 64, 2048);
    table.add_valid(7);
    let valid = table.encode_page(0, 2048);
    for input in inputs(6, &valid, 1500) {
        let mut loaded = SegmentTable::new(200, 64, 2048);
        if loaded.decode_page(0, &input).is_ok() && input.len() >= 2048 {
            assert_eq!(loaded.encode_page(0, 2048)[..200 * 8], input[..200 * 8]);
        }
    }
    // Index pages: 300 table pages of 2 KiB pages need two; the second holds 44 pointers.
    let mut table = SegmentTable::new(300 * 256, 64, 2048).with_index_pages(2);
    table.directory[260] = PagePointer { address: LogAddress(77), checksum: 5 };
    let valid = table.encode_index_page(1, 2048);
    for input in inputs(9, &valid, 1500) {
        let mut loaded = SegmentTable::new(300 * 256, 64, 2048).with_index_pages(2);
        if loaded.decode_index_page(1, &input).is_ok() {
            assert_eq!(loaded.encode_index_page(1, 2048)[..], input[..2048], "an accepted index page re-encodes");
        }
    }
    // Format version 10: a data page's index past 2^32 keeps bits 32-39 in byte 3.
    let mut spare = vec![0xFF; 64];
    PageTag::Data { inode: 3, page_index: (0xAB << 32) + 9 }.encode(&mut spare);
    assert_eq!(spare[..16], [2, 0, 0, 0xAB, 3, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0]);
    assert_eq!(PageTag::decode(&spare), Some(PageTag::Data { inode: 3, page_index: (0xAB << 32) + 9 }));
    let mut spare = vec![0xFF; 64];
    PageTag::Data { inode: 3, page_index: 9 }.encode(&mut spare);
    for input in inputs(7, &spare, 3000) {
        if let Some(tag) = PageTag::decode(&input) {
            let mut again = vec![0xFF; 64];
            tag.encode(&mut again);
            assert_eq!(PageTag::decode(&again), Some(tag));
        }
    }
}
