//! Every file data page a volume uses, read from the extent records through the tree (not
//! through the read path under test). Shared by fsoc-core's tests/data_checksums.rs and
//! fsoc-cli's tests/data_integrity.rs (included with `#[path]`; needs the `craft` feature).

use fsoc_core::fs::records::{allocation_key, parse_allocation_key, Extent, RecordKind};
use fsoc_core::txn::store::LogNodeStore;
use fsoc_core::FileSystem;
use fsoc_media::{Flash, PageAddress};

/// (inode, file page, where the page is on the chips) of every data page in use. On a
/// volume of format version 3 every extent must carry one checksum a page.
pub fn data_pages<F: Flash>(fs: &mut FileSystem<F>) -> Vec<(u64, u64, PageAddress)> {
    let layout = fs.layout();
    let checksummed = fs.superblock().format_version >= 3;
    let volume = &mut fs.craft();
    let store = LogNodeStore::new(volume.log);
    let mut pages = Vec::new();
    let mut key = allocation_key(0, RecordKind::Inode, 0);
    while let Some((found, value)) = volume.allocation.first_after(&store, &key).expect("tree walk") {
        if let Some((inode, kind, first_page)) = parse_allocation_key(&found) {
            if kind == RecordKind::Extent as u8 {
                let extent = Extent::decode(first_page, &value).expect("extent");
                if checksummed {
                    assert_eq!(extent.checksums.len(), extent.page_count as usize, "every extent has checksums");
                }
                for page in extent.first_page..extent.end_page() {
                    pages.push((inode, page, layout.physical(extent.address_of(page))));
                }
            }
        }
        key = found;
    }
    pages
}
