//! docs/FORMAT.md's example hex dumps decode to the values the document states, so the
//! document cannot drift from the code.
use fsoc_core::address::{LogAddress, PagePointer};
use fsoc_core::btree::TreeRoot;
use fsoc_core::txn::{Metaroot, Superblock};
use fsoc_media::Geometry;

fn example(marker: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md")).expect("FORMAT.md");
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
        geometry: Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 1024 },
        chip_count: 2,
        chip_index: 1,
        volume_id: 0x0123_4567_89AB_CDEF,
        metaroot_area_count: 3,
        first_log_segment: 4,
    }
}

fn metaroot() -> Metaroot {
    Metaroot {
        commit_counter: 42,
        volume_id: 0x0123_4567_89AB_CDEF,
        flags: 1,
        next_inode: 100,
        directory_root: TreeRoot { pointer: PagePointer { address: LogAddress(0x0300), checksum: 0xAABB_CCDD }, height: 2 },
        allocation_root: TreeRoot { pointer: PagePointer { address: LogAddress(0x0301), checksum: 0x1122_3344 }, height: 3 },
        segment_table: vec![PagePointer { address: LogAddress(0x02FF), checksum: 0xCAFE_F00D }],
        delta: Vec::new(),
    }
}

fn dump(bytes: &[u8]) -> String {
    bytes.chunks(16).enumerate().map(|(row, chunk)| {
        let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{:04x}  {}\n", row * 16, hex.join(" "))
    }).collect()
}

#[test]
fn superblock_example_decodes() {
    let bytes = example("<!-- example: superblock -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    assert_eq!(Superblock::decode(&page), Ok(superblock()), "expected dump:\n{}", dump(&superblock().encode(2048)[..64]));
}

#[test]
fn metaroot_example_decodes() {
    let bytes = example("<!-- example: metaroot -->");
    let mut page = bytes.clone();
    page.resize(2048, 0xFF);
    assert_eq!(Metaroot::decode(&page, 1), Ok(metaroot()), "expected dump:\n{}", dump(&metaroot().encode(2048)[..88]));
}
