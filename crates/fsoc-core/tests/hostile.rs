//! Hostile images (issue 14, S3–S5 and point 2–4): records whose values are corrupt but whose
//! checksums are right, as a miscorrection, a firmware bug or an attacker handing someone an
//! image would leave them. Each case builds its own image: a small volume with a few files,
//! one record rewritten through the public trees, then a full commit, so the CRC chain up to
//! the metaroot is valid and only the value is hostile. After remount every read and write is
//! tried under `catch_unwind`: no panic, no abort, no hang, a typed error for the damaged file
//! only, healthy files still readable, and fsck reporting a violation in bounded memory.
mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::*;
use fsoc_core::address::PagePointer;
use fsoc_core::btree::{Branch, Child, Node, NodeEntries, NodeReader, NodeStore, NodeTag, TreeRoot};
use fsoc_core::fs::records::{
    allocation_key, directory_key, parse_allocation_key, parse_directory_key, DirectoryValue, Extent, FileKind,
    RecordKind, ROOT_INODE,
};
use fsoc_core::txn::store::LogNodeStore;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::rng::SeededRng;
use fsoc_media::{Profile, SimFlash};

// ----- peak heap, to show fsck's memory does not follow corrupt values ------------------------

// Counted per thread: these tests run concurrently, and with one process-wide counter a test's
// peak included the others' allocations (`bad_names_are_reported` once failed its fsck bound
// while `a_read_of_a_huge_sparse_size_is_short_not_huge` held a 64 MiB read buffer).
#[path = "common/counting_allocator.rs"]
mod counting_allocator;
use counting_allocator::peak_during;

/// Heap fsck may use on these small volumes, whatever the records say (issue target: 64 MiB
/// plus the node cache; these volumes need far less).
const FSCK_HEAP_MAX_BYTES: usize = 64 << 20;

// ----- the crafting helper --------------------------------------------------------------------

/// Inodes of the files every crafted volume starts with.
struct Files {
    inline_file: u64,
    extent_file: u64,
    healthy_file: u64,
    directory: u64,
    subdirectory: u64,
    symlink: u64,
}

const HEALTHY: &[u8] = b"this file is never touched by the crafting";

/// A small volume: /inline (inline data), /big (extents), /healthy, /d/sub, /link.
fn volume() -> (FileSystem<SimFlash>, Files) {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 48, 21), FsConfig::default(), 21).expect("format");
    write_file(&mut fs, "/inline", b"small enough to live in the tree").expect("inline");
    write_file(&mut fs, "/big", &pattern(40_000, 3)).expect("big");
    write_file(&mut fs, "/healthy", HEALTHY).expect("healthy");
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    fs.mkdir(b"/d/sub", 0o755).expect("mkdir");
    fs.symlink_path(b"/healthy", b"/link").expect("symlink");
    fs.transact().expect("commit");
    let inode = |fs: &mut FileSystem<SimFlash>, path: &str| fs.stat(path.as_bytes()).expect("stat").0;
    let files = Files {
        inline_file: inode(&mut fs, "/inline"),
        extent_file: inode(&mut fs, "/big"),
        healthy_file: inode(&mut fs, "/healthy"),
        directory: inode(&mut fs, "/d"),
        subdirectory: inode(&mut fs, "/d/sub"),
        symlink: inode(&mut fs, "/link"),
    };
    (fs, files)
}

#[derive(Clone, Copy, Debug)]
enum Tree {
    Directory,
    Allocation,
}

/// Rewrites one record as it is on flash (no validation): `None` removes it.
fn put_raw(fs: &mut FileSystem<SimFlash>, tree: Tree, key: &[u8], value: Option<&[u8]>) {
    let volume = &mut fs.craft();
    let mut store = LogNodeStore::new(volume.log);
    let tree = match tree {
        Tree::Directory => &mut volume.directory,
        Tree::Allocation => &mut volume.allocation,
    };
    match value {
        Some(value) => tree.insert(&mut store, key, value).map(|_| ()),
        None => tree.remove(&mut store, key).map(|_| ()),
    }
    .expect("raw tree edit");
}

fn get_raw(fs: &mut FileSystem<SimFlash>, tree: Tree, key: &[u8]) -> Option<Vec<u8>> {
    let volume = &mut fs.craft();
    let store = LogNodeStore::new(volume.log);
    let tree = match tree {
        Tree::Directory => &mut volume.directory,
        Tree::Allocation => &mut volume.allocation,
    };
    tree.get(&store, key).expect("raw tree read")
}

/// Every record of a tree, in key order (a crafted volume has a few dozen).
fn all_records(fs: &mut FileSystem<SimFlash>, tree: Tree) -> Vec<(Vec<u8>, Vec<u8>)> {
    let volume = &mut fs.craft();
    let mut store = LogNodeStore::new(volume.log);
    let tree = match tree {
        Tree::Directory => &mut volume.directory,
        Tree::Allocation => &mut volume.allocation,
    };
    let mut records = Vec::new();
    tree.check(&mut store, &mut |_| {}, &mut |key, value| {
        records.push((key.to_vec(), value.to_vec()));
        Ok(())
    })
    .expect("walk");
    records
}

/// Commits the crafted state (a full commit: the CRC chain up to the metaroot is valid) and
/// remounts it, as a user handed the image would.
fn seal(fs: FileSystem<SimFlash>) -> FileSystem<SimFlash> {
    let mut fs = fs;
    fs.commit().expect("commit the crafted record");
    let flash = fs.into_flash_without_commit();
    FileSystem::mount(flash, FsConfig::default()).expect("a crafted volume still mounts")
}

/// Inode record bytes with `size` (offset 24) replaced.
fn with_size(record: &[u8], size: u64) -> Vec<u8> {
    let mut bytes = record.to_vec();
    bytes[24..32].copy_from_slice(&size.to_le_bytes());
    bytes
}

/// An extent record's value (docs/FORMAT.md, "Tree records"): with `page_count` zero
/// checksums, as format version 3 requires, when the count is one a record can hold; without
/// any (the older form, which such a volume refuses) for the huge counts no record can hold.
fn extent_value(address: u32, page_count: u32) -> Vec<u8> {
    let checksums = if page_count <= fsoc_core::fs::records::EXTENT_CHECKSUMS_MAX { page_count } else { 0 };
    extent_value_with(address, page_count, &vec![0u8; 4 * checksums as usize])
}

/// An extent record's value with the given checksum bytes (4 a page, or none).
fn extent_value_with(address: u32, page_count: u32, checksums: &[u8]) -> Vec<u8> {
    let mut bytes = address.to_le_bytes().to_vec();
    bytes.extend_from_slice(&page_count.to_le_bytes());
    bytes.extend_from_slice(checksums);
    bytes
}

// ----- what every case runs -------------------------------------------------------------------

/// What the exercise saw.
#[derive(Debug, Default)]
struct Seen {
    errors: u32,
    fsck_violations: u64,
    fsck_heap_bytes: usize,
    /// The volume refused writes at the end (a write path met damage it could not contain).
    poisoned: bool,
}

/// Every read and write on the volume; panics (caught by the caller) are the failure. When
/// `healthy_intact`, the crafted record is not one of /healthy's or the root's, so /healthy must
/// still read back after every read of the damaged files.
fn exercise(fs: &mut FileSystem<SimFlash>, healthy_intact: bool, context: &str) -> Seen {
    let mut seen = Seen::default();
    let errors = std::cell::Cell::new(0u32);
    // Counts the errors that report damage; ordinary ones (ENOENT, EISDIR, ...) are expected.
    let note = |result: Result<(), FsError>| {
        if let Err(FsError::Corrupt(_) | FsError::CorruptFile { .. } | FsError::Io(_)) = result {
            errors.set(errors.get() + 1);
        }
    };
    // Walk the namespace breadth-first, bounded: a cycle of entries must not make this loop.
    let mut queue = vec![(b"/".to_vec(), 0u32)];
    let mut visited = 0;
    while let Some((path, depth)) = queue.pop() {
        visited += 1;
        if visited > 200 || depth > 8 {
            break;
        }
        note(fs.stat(&path).map(|_| ()));
        match fs.readdir_path(&path) {
            Ok(entries) => {
                for entry in entries.into_iter().take(50) {
                    let mut child = path.clone();
                    if child.last() != Some(&b'/') {
                        child.push(b'/');
                    }
                    child.extend_from_slice(&entry.name);
                    queue.push((child, depth + 1));
                }
            }
            Err(FsError::NotDirectory) => {}
            Err(error) => note(Err(error)),
        }
        note(read_file(fs, &String::from_utf8_lossy(&path)).map(|_| ()));
        note(fs.readlink_path(&path).map(|_| ()));
    }
    for inode in 0..12 {
        note(fs.getattr(inode).map(|_| ()));
        note(fs.read(inode, 0, 1 << 20).map(|_| ()));
        note(fs.readdir(inode, None, 100).map(|_| ()));
        note(fs.readlink(inode).map(|_| ()));
    }
    if healthy_intact {
        let healthy = read_file(fs, "/healthy")
            .unwrap_or_else(|error| panic!("{context}: healthy file after the reads: {error:?}"));
        assert_eq!(healthy, HEALTHY, "{context}: healthy file changed");
    }
    let (report, heap) = peak_during(|| fs.fsck(false));
    seen.fsck_heap_bytes = heap;
    match report {
        Ok(report) => seen.fsck_violations = report.violation_count,
        Err(_) => note(Err(FsError::Corrupt("fsck failed"))),
    }
    // Writes: to the damaged files and to fresh ones; each may fail, none may panic.
    note(write_file(fs, "/inline", b"rewritten"));
    note(write_file(fs, "/big", b"rewritten"));
    note(write_file(fs, "/fresh", b"new file after the damage"));
    note(fs.rename_path(b"/d/sub", b"/moved"));
    note(fs.truncate_path(b"/big", 3));
    note(fs.unlink(b"/inline"));
    note(fs.unlink(b"/big"));
    note(fs.transact());
    seen.errors = errors.get();
    seen.poisoned = fs.is_poisoned();
    seen
}

/// Runs `exercise` under catch_unwind; a panic fails the test with `context` (the replay line).
fn survive(fs: &mut FileSystem<SimFlash>, context: &str) -> Seen {
    survive_checking(fs, false, context)
}

fn survive_checking(fs: &mut FileSystem<SimFlash>, healthy_intact: bool, context: &str) -> Seen {
    let seen = catch_unwind(AssertUnwindSafe(|| exercise(fs, healthy_intact, context)))
        .unwrap_or_else(|_| panic!("panic on a crafted image: {context}"));
    assert!(seen.fsck_heap_bytes < FSCK_HEAP_MAX_BYTES, "{context}: fsck used {} bytes of heap", seen.fsck_heap_bytes);
    seen
}

/// The healthy file reads back and a new file can be written: the damage stayed contained.
fn assert_contained(fs: &mut FileSystem<SimFlash>, context: &str) {
    assert_eq!(read_file(fs, "/healthy").unwrap_or_else(|error| panic!("{context}: healthy file: {error:?}")), HEALTHY);
    write_file(fs, "/after", b"still writable")
        .unwrap_or_else(|error| panic!("{context}: the volume stopped accepting writes: {error:?}"));
}

// ----- named findings -------------------------------------------------------------------------

/// S3: an extent address outside the volume made the read path panic in `Layout`; on a mount
/// that poisoned the whole volume. Now the file answers EIO and the rest stays usable.
#[test]
fn s3_extent_address_outside_the_volume_is_an_error_for_that_file_only() {
    let (mut fs, files) = volume();
    let key = allocation_key(files.extent_file, RecordKind::Extent, 0);
    assert!(get_raw(&mut fs, Tree::Allocation, &key).is_some(), "/big starts with an extent at page 0");
    put_raw(&mut fs, Tree::Allocation, &key, Some(&extent_value(0xFFFF_FF00, 4)));
    let mut fs = seal(fs);
    let error = read_file(&mut fs, "/big").expect_err("a read through a wild extent");
    assert!(matches!(error, FsError::CorruptFile { inode, .. } if inode == files.extent_file), "{error:?}");
    assert_eq!(error.errno(), 5, "EIO");
    assert_contained(&mut fs, "S3");
    // Deleting the damaged file fails cleanly (its extents cannot be released), nothing else.
    assert!(fs.unlink(b"/big").is_err());
    assert_contained(&mut fs, "S3 after the refused unlink");
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("outside the log")), "{:?}", report.violations);
}

/// A short page (format version 13) of a wrong length (empty: a longer one than a tree entry
/// holds cannot be in a node that decodes) past the file's end: fsck names it, and an unlink of the file is refused with EIO before it
/// changes anything (the removal checks the file's records first), so the volume stays
/// writable instead of being poisoned halfway through the removal.
#[test]
fn a_short_page_of_a_wrong_length_fails_the_unlink_before_it_changes_anything() {
    let (mut fs, files) = volume();
    let key = allocation_key(files.extent_file, RecordKind::Inline, 30);
    put_raw(&mut fs, Tree::Allocation, &key, Some(&[]));
    let mut fs = seal(fs);
    let error = fs.unlink(b"/big").expect_err("the unlink meets the corrupt short page");
    assert_eq!(error.errno(), 5, "EIO: {error:?}");
    assert!(fs.stat(b"/big").is_ok(), "the refused unlink left /big in place");
    assert_contained(&mut fs, "empty short page");
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("short page 30")), "{:?}", report.violations);
    survive_checking(&mut fs, true, "empty short page");
}

/// An extent inside the log that points at a segment counting no valid page (a free one): the
/// page cannot be released. The unlink that would release it fails at once with EIO, the error
/// coming back through the call (not through a field read at the next commit); nothing is
/// committed after it, and the volume mounts again as it was last committed.
#[test]
fn releasing_a_page_its_segment_does_not_count_fails_the_operation() {
    let (mut fs, files) = volume();
    let layout = fs.craft().layout();
    let free_segment = layout.segment_count() - 1;
    assert_eq!(fs.craft().log.table().entry(free_segment).valid_pages, 0, "the last segment is free");
    let wild = layout.address(free_segment, 0);
    let key = allocation_key(files.extent_file, RecordKind::Extent, 0);
    put_raw(&mut fs, Tree::Allocation, &key, Some(&extent_value(wild.0, 1)));
    let mut fs = seal(fs);
    let error = fs.unlink(b"/big").expect_err("the unlink releases a page no segment counts");
    assert_eq!(error.errno(), 5, "EIO: {error:?}");
    assert!(format!("{error}").contains("not counted valid"), "{error}");
    assert!(fs.commit().is_err(), "a commit after an unaccountable release");
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("the volume mounts as last committed");
    assert!(fs.stat(b"/big").is_ok(), "the refused unlink left /big in place");
    assert_eq!(read_file(&mut fs, "/healthy").expect("healthy file"), HEALTHY);
}

/// S4: an inline file whose size says 8,320,145,642,257,040,101 bytes aborted the process on
/// the allocation. Now: EIO for that file, no allocation.
#[test]
fn s4_huge_inline_size_is_refused_without_allocating() {
    let (mut fs, files) = volume();
    let key = allocation_key(files.inline_file, RecordKind::Inode, 0);
    let record = get_raw(&mut fs, Tree::Allocation, &key).expect("inode record");
    put_raw(&mut fs, Tree::Allocation, &key, Some(&with_size(&record, 8_320_145_642_257_040_101)));
    let mut fs = seal(fs);
    let (result, heap) = peak_during(|| read_file(&mut fs, "/inline"));
    assert!(matches!(result, Err(FsError::CorruptFile { .. })), "{result:?}");
    assert!(heap < 1 << 20, "reading the damaged file allocated {heap} bytes");
    assert!(matches!(fs.stat(b"/inline"), Err(FsError::CorruptFile { .. })));
    assert_contained(&mut fs, "S4");
    assert!(!fs.fsck(false).expect("fsck").is_clean());
}

/// A sparse extent file whose size is huge but legal: reads are short (READ_BYTES_MAX) rather
/// than one allocation of the whole size.
#[test]
fn a_read_of_a_huge_sparse_size_is_short_not_huge() {
    let (mut fs, files) = volume();
    let key = allocation_key(files.extent_file, RecordKind::Inode, 0);
    let record = get_raw(&mut fs, Tree::Allocation, &key).expect("inode record");
    put_raw(&mut fs, Tree::Allocation, &key, Some(&with_size(&record, 1 << 40)));
    let fs = seal(fs);
    let (bytes, heap) = peak_during(|| fs.read(files.extent_file, 0, usize::MAX / 2).expect("read"));
    assert_eq!(bytes.len(), fsoc_core::fs::READ_BYTES_MAX);
    assert!(heap <= 2 * fsoc_core::fs::READ_BYTES_MAX, "one read allocated {heap} bytes");
}

/// S5: an extent whose page count is huge (239,841,572; 2^31; u32::MAX) made fsck fill a map
/// page by page: 20.6 GB in 61 s. Now fsck reports it and stays within its memory bound.
#[test]
fn s5_huge_extent_page_counts_do_not_drive_fsck() {
    for page_count in [239_841_572u32, 1 << 31, u32::MAX] {
        let (mut fs, files) = volume();
        let key = allocation_key(files.extent_file, RecordKind::Extent, 0);
        let value = get_raw(&mut fs, Tree::Allocation, &key).expect("extent");
        let address = u32::from_le_bytes(value[..4].try_into().expect("4 bytes"));
        put_raw(&mut fs, Tree::Allocation, &key, Some(&extent_value(address.min(u32::MAX - page_count), page_count)));
        let mut fs = seal(fs);
        let (report, heap) = peak_during(|| fs.fsck(false).expect("fsck runs"));
        assert!(report.violation_count > 0, "page count {page_count}: fsck found nothing");
        assert!(heap < FSCK_HEAP_MAX_BYTES, "page count {page_count}: fsck used {heap} bytes");
        let context = format!("S5 page count {page_count}");
        survive_checking(&mut fs, true, &context);
    }
}

/// Directory entries pointing back up: at the root, at an ancestor, at the directory itself.
/// Walks are bounded and fsck names the cycle; nothing recurses or hangs.
#[test]
fn directory_cycles_are_reported_not_followed() {
    for (name, target) in [("root", ROOT_INODE), ("ancestor", 0), ("self", 1)] {
        let (mut fs, files) = volume();
        let target = match target {
            0 => files.directory,
            1 => files.subdirectory,
            inode => inode,
        };
        let entry = DirectoryValue { inode: target, kind: FileKind::Directory };
        put_raw(&mut fs, Tree::Directory, &directory_key(files.subdirectory, b"loop"), Some(&entry.encode()));
        let mut fs = seal(fs);
        let context = format!("cycle to {name}");
        let seen = survive_checking(&mut fs, true, &context);
        assert!(seen.fsck_violations > 0, "{context}: fsck calls a cycle clean");
        // Moving a directory under the looped subtree is answered, not looped over.
        let _ = fs.rename_path(b"/d", b"/d/sub/loop/x");
        assert_contained(&mut fs, &context);
    }
}

/// Names no directory may hold (empty, ".", "..", with '/', with NUL, 256 bytes): fsck
/// reports each; lookups and listings do not panic.
#[test]
fn bad_names_are_reported() {
    let long = vec![b'n'; 256];
    for name in [&b""[..], b".", b"..", b"a/b", b"/etc/x", b"nul\0byte", &long] {
        let (mut fs, files) = volume();
        let entry = DirectoryValue { inode: files.healthy_file, kind: FileKind::File };
        put_raw(&mut fs, Tree::Directory, &directory_key(ROOT_INODE, name), Some(&entry.encode()));
        // The inode gains a name: its link count stays as it was, which fsck reports too.
        let mut fs = seal(fs);
        let context = format!("name {:?}", String::from_utf8_lossy(name));
        // A bad name is never found by a lookup: the entry is not followed.
        if name.len() <= 255 {
            assert!(matches!(fs.lookup(ROOT_INODE, name), Err(FsError::NotFound)), "{context}: lookup followed it");
        }
        let seen = survive_checking(&mut fs, true, &context);
        assert!(seen.fsck_violations > 0, "{context}: fsck calls it clean");
    }
}

/// A symlink whose size is out of range, and one whose target chunk is missing.
#[test]
fn broken_symlinks_are_errors() {
    let (mut fs, files) = volume();
    let key = allocation_key(files.symlink, RecordKind::Inode, 0);
    let record = get_raw(&mut fs, Tree::Allocation, &key).expect("inode record");
    put_raw(&mut fs, Tree::Allocation, &key, Some(&with_size(&record, u64::MAX)));
    let mut fs = seal(fs);
    assert!(matches!(fs.readlink_path(b"/link"), Err(FsError::CorruptFile { .. })));
    survive(&mut fs, "symlink size");

    let (mut fs, files) = volume();
    put_raw(&mut fs, Tree::Allocation, &allocation_key(files.symlink, RecordKind::Symlink, 0), None);
    let mut fs = seal(fs);
    assert!(matches!(fs.readlink_path(b"/link"), Err(FsError::CorruptFile { .. })));
    survive(&mut fs, "symlink chunk");
}

// ----- seeded crafted edits -------------------------------------------------------------------

/// A value with one field set to an edge value, or bytes flipped, or shortened, or lengthened.
fn mutate_value(rng: &mut SeededRng, value: &[u8]) -> Vec<u8> {
    let mut bytes = value.to_vec();
    match rng.below(6) {
        0 if !bytes.is_empty() => {
            let index = rng.below(bytes.len() as u64) as usize;
            bytes[index] ^= 1 << rng.below(8);
        }
        1 if bytes.len() >= 8 => {
            // An edge value in an aligned 4- or 8-byte field.
            let width = if rng.below(2) == 0 { 4 } else { 8 };
            let offset = (rng.below((bytes.len() / width) as u64) as usize) * width;
            let edge: u64 = match rng.below(5) {
                0 => 0,
                1 => u64::MAX,
                2 => 1 << 31,
                3 => 239_841_572,
                _ => rng.next_u64(),
            };
            bytes[offset..offset + width].copy_from_slice(&edge.to_le_bytes()[..width]);
        }
        2 => bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize),
        3 => bytes.extend((0..1 + rng.below(16)).map(|_| rng.next_u64() as u8)),
        4 => bytes = (0..bytes.len()).map(|_| rng.next_u64() as u8).collect(),
        _ => {
            if let Some(byte) = bytes.first_mut() {
                *byte = rng.next_u64() as u8;
            }
        }
    }
    bytes
}

/// Whether a key (of `tree`) is one of /healthy's records or the root's.
fn touches_healthy(tree: Tree, key: &[u8], files: &Files) -> bool {
    match tree {
        Tree::Allocation => {
            parse_allocation_key(key).is_none_or(|(inode, _, _)| inode == files.healthy_file || inode == ROOT_INODE)
        }
        Tree::Directory => {
            parse_directory_key(key).is_none_or(|(parent, name)| parent == ROOT_INODE && name == b"healthy")
        }
    }
}

/// One seeded edit: a record of either tree changed in value or key, removed, or duplicated
/// under another key (names, sizes, extent fields, counts, directory links, kinds), or a child
/// pointer of a tree's root node redirected (tree shape). Returns the sealed volume, the replay
/// line, and whether /healthy must still read back.
fn crafted_edit(seed: u64) -> (FileSystem<SimFlash>, String, bool) {
    let mut rng = SeededRng::new(seed);
    if rng.below(8) == 0 {
        let (fs, files) = tall_volume();
        let tree = if rng.below(2) == 0 { Tree::Directory } else { Tree::Allocation };
        let shape = match rng.below(4) {
            0 => Shape::SiblingTwice,
            1 => Shape::RootItself,
            2 => Shape::OtherTree,
            _ => Shape::Swapped,
        };
        let fs = reshape(fs, tree, shape);
        let _ = files;
        let context =
            format!("{tree:?} root {shape:?}; replay: FSOC_SEED={seed:#x} cargo test -p fsoc-core --test hostile");
        return (seal(fs), context, false);
    }
    let (mut fs, files) = volume();
    let tree = if rng.below(2) == 0 { Tree::Directory } else { Tree::Allocation };
    let records = all_records(&mut fs, tree);
    let (key, value) = records[rng.below(records.len() as u64) as usize].clone();
    let mut healthy_intact = !touches_healthy(tree, &key, &files);
    let description = match rng.below(4) {
        0 | 1 => {
            put_raw(&mut fs, tree, &key, Some(&mutate_value(&mut rng, &value)));
            "value changed"
        }
        2 => {
            put_raw(&mut fs, tree, &key, None);
            "record removed"
        }
        _ => {
            let new_key = mutate_value(&mut rng, &key);
            if !new_key.is_empty() {
                put_raw(&mut fs, tree, &new_key, Some(&value));
                healthy_intact &= !touches_healthy(tree, &new_key, &files);
            }
            if rng.below(2) == 0 {
                put_raw(&mut fs, tree, &key, None);
            }
            "key changed"
        }
    };
    let context =
        format!("{tree:?} record {description}; replay: FSOC_SEED={seed:#x} cargo test -p fsoc-core --test hostile");
    (seal(fs), context, healthy_intact)
}

/// At least 200 seeded crafted edits: no panic, no abort, no hang, fsck within its memory
/// bound, /healthy readable whenever the edit was not to its records; counts how many were
/// noticed (an error or an fsck violation) and how many left the volume refusing writes.
#[test]
fn seeded_crafted_edits_never_panic() {
    let seeds: Vec<u64> = match std::env::var("FSOC_SEED") {
        Ok(text) => vec![u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("FSOC_SEED in hex")],
        Err(_) => (0..240).map(|index| 0x4057_11e0 + index).collect(),
    };
    let (mut noticed, mut poisoned) = (0, 0);
    for &seed in &seeds {
        let (mut fs, context, healthy_intact) = crafted_edit(seed);
        let seen = survive_checking(&mut fs, healthy_intact, &context);
        if seen.errors > 0 || seen.fsck_violations > 0 {
            noticed += 1;
        }
        poisoned += u32::from(seen.poisoned);
    }
    println!(
        "crafted edits: {} run, {noticed} noticed (error or fsck violation), {} harmless, {poisoned} left the volume refusing writes",
        seeds.len(),
        seeds.len() - noticed
    );
    assert!(noticed * 2 > seeds.len(), "only {noticed} of {} crafted edits were noticed", seeds.len());
}

// ----- tree shapes ----------------------------------------------------------------------------

/// `volume()` plus enough files that both trees have an internal root (height >= 2).
fn tall_volume() -> (FileSystem<SimFlash>, Files) {
    let (mut fs, files) = volume();
    fs.mkdir(b"/many", 0o755).expect("mkdir");
    for index in 0..150 {
        write_file(&mut fs, &format!("/many/file-with-a-longish-name-{index:04}"), &[index as u8; 300]).expect("file");
    }
    fs.transact().expect("commit");
    fs.commit().expect("full commit");
    (fs, files)
}

/// How a root node's child pointers are redirected: each target is a valid node with the right
/// checksum, so only the shape is wrong.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Child 1 points at child 0 (one node reached twice, keys out of order).
    SiblingTwice,
    /// Child 0 points at the root itself (a cycle; the level is wrong).
    RootItself,
    /// Child 0 points at the other tree's root.
    OtherTree,
    /// Children 0 and 1 swapped.
    Swapped,
}

/// Rewrites the root node of `tree` with redirected child pointers, as a valid node page, and
/// makes it the tree's root (the next commit records it).
fn reshape(mut fs: FileSystem<SimFlash>, tree: Tree, shape: Shape) -> FileSystem<SimFlash> {
    let volume = &mut fs.craft();
    let other_root = match tree {
        Tree::Directory => volume.allocation.root(),
        Tree::Allocation => volume.directory.root(),
    }
    .expect("committed");
    let target = match tree {
        Tree::Directory => &mut volume.directory,
        Tree::Allocation => &mut volume.allocation,
    };
    let root: TreeRoot = target.root().expect("committed tree");
    assert!(root.height >= 2, "{tree:?} has no internal root (height {})", root.height);
    let mut store = LogNodeStore::new(volume.log);
    let node_size = store.node_size_bytes();
    let mut page = Vec::new();
    store.read_page(root.pointer.address, &mut page).expect("root page");
    let (mut node, _) = Node::decode(&page).expect("root decodes");
    let NodeEntries::Internal(branches) = &mut node.entries else { panic!("internal root") };
    let pointer = |branch: &Branch| match branch.child {
        Child::OnFlash(pointer) => pointer,
        Child::Dirty(_) => panic!("clean tree"),
    };
    let (first, second) = (pointer(&branches[0]), pointer(&branches[1]));
    match shape {
        Shape::SiblingTwice => branches[1].child = Child::OnFlash(first),
        Shape::RootItself => branches[0].child = Child::OnFlash(root.pointer),
        Shape::OtherTree => branches[0].child = Child::OnFlash(other_root.pointer),
        Shape::Swapped => {
            branches[0].child = Child::OnFlash(second);
            branches[1].child = Child::OnFlash(first);
        }
    }
    let encoded = node.encode(node_size);
    let address =
        store.append_node(&encoded.bytes, NodeTag { tree_id: node.tree_id, level: node.level }).expect("append");
    store.release(root.pointer.address).expect("the old root is live");
    target.reset_to(TreeRoot { pointer: PagePointer { address, checksum: encoded.checksum }, height: root.height });
    fs
}

/// Tree shapes a checksum cannot catch: a child pointer to a sibling, to the root itself, to
/// the other tree, two children swapped. Reads answer errors or miss records, nothing panics
/// or loops, and fsck reports each.
#[test]
fn redirected_child_pointers_are_reported() {
    for tree in [Tree::Directory, Tree::Allocation] {
        for shape in [Shape::SiblingTwice, Shape::RootItself, Shape::OtherTree, Shape::Swapped] {
            let (fs, _) = tall_volume();
            let mut fs = seal(reshape(fs, tree, shape));
            let context = format!("{tree:?} {shape:?}");
            let (report, heap) = peak_during(|| fs.fsck(false).expect("fsck runs"));
            assert!(report.violation_count > 0, "{context}: fsck calls it clean");
            assert!(heap < FSCK_HEAP_MAX_BYTES, "{context}: fsck used {heap} bytes");
            survive(&mut fs, &context);
        }
    }
}

/// Extent records keep working after a crafted edit of another file: the extent decoder
/// still round-trips ordinary values (guards the test's own encodings against FORMAT.md).
#[test]
fn crafting_encodings_match_the_format() {
    let value = extent_value(0x1234, 7);
    assert_eq!(
        Extent::decode(5, &value).expect("decode"),
        Extent { first_page: 5, address: fsoc_core::address::LogAddress(0x1234), page_count: 7, checksums: vec![0; 7] }
    );
    let legacy = extent_value(0x1234, 1 << 20);
    assert_eq!(legacy.len(), 8, "no checksums for a count no record can hold");
    assert!(Extent::decode(5, &legacy).expect("decode").checksums.is_empty());
}

/// A segment-table page that does not read back makes fsck report a violation and go on
/// checking the trees, instead of failing with an I/O error (second-user finding).
#[test]
fn an_unreadable_segment_table_page_is_a_violation() {
    let (fs, _) = volume();
    let fs = seal(fs);
    let pointer = fs.committed().segment_table[0];
    let page = fs.layout().physical(pointer.address);
    let mut flash = fs.into_flash_without_commit();
    flash.inject_bit_flips(page, 400).expect("inject");
    let read_only =
        FsConfig { volume: fsoc_core::VolumeConfig { read_only: true, ..Default::default() }, ..Default::default() };
    let mut fs = FileSystem::mount(flash, read_only).expect("mount reads no table page");
    let report = fs.fsck(false).expect("fsck reports instead of failing");
    assert!(
        report.violations.iter().any(|violation| violation.starts_with("segment table")),
        "{:?}",
        report.violations
    );
    assert!(report.files >= 3, "the trees were still checked: {report:?}");
}

/// fsck counts every violation and lists at most `VIOLATIONS_LISTED_MAX`: 300 entries with bad
/// names give at least 300 counted (the CLI prints "... and N more not listed", N = count −
/// listed, then the count), whatever the listing holds.
#[test]
fn fsck_counts_every_violation_past_the_listing() {
    let (mut fs, files) = volume();
    let entry = DirectoryValue { inode: files.healthy_file, kind: FileKind::File };
    for index in 0..300u32 {
        let name = format!("bad/{index}");
        put_raw(&mut fs, Tree::Directory, &directory_key(ROOT_INODE, name.as_bytes()), Some(&entry.encode()));
    }
    let mut fs = seal(fs);
    let report = fs.fsck(false).expect("fsck");
    assert_eq!(report.violations.len(), fsoc_core::fs::fsck::VIOLATIONS_LISTED_MAX);
    assert!(report.violation_count >= 300, "counted {}", report.violation_count);
    assert_contained(&mut fs, "300 bad names");
}

// ----- valid checksums, wrong meaning: entries, link counts, shared pages ----------------------

/// Inode record bytes with `nlink` (offset 16) replaced.
fn with_nlink(record: &[u8], nlink: u32) -> Vec<u8> {
    let mut bytes = record.to_vec();
    bytes[16..20].copy_from_slice(&nlink.to_le_bytes());
    bytes
}

/// Sets the link count in `inode`'s record through the public tree.
fn set_nlink(fs: &mut FileSystem<SimFlash>, inode: u64, nlink: u32) {
    let key = allocation_key(inode, RecordKind::Inode, 0);
    let record = get_raw(fs, Tree::Allocation, &key).expect("inode record");
    put_raw(fs, Tree::Allocation, &key, Some(&with_nlink(&record, nlink)));
}

/// A directory entry whose kind is not its inode's: a directory named as a file or a symlink,
/// a file named as a directory or a symlink. fsck names the mismatch; unlink, rmdir and
/// rename of that entry, and a rename onto it, answer EIO for that inode and change nothing
/// (before the check, unlinking a directory named as a file deleted the non-empty directory
/// /d: its real name dangled and /d/sub became unreachable); the real names keep working.
#[test]
fn an_entry_naming_an_inode_of_another_kind_is_refused_and_reported() {
    let cases = [
        ("directory named as a file", true, FileKind::File),
        ("directory named as a symlink", true, FileKind::Symlink),
        ("file named as a directory", false, FileKind::Directory),
        ("file named as a symlink", false, FileKind::Symlink),
    ];
    for (context, names_directory, entry_kind) in cases {
        let (mut fs, files) = volume();
        let target = if names_directory { files.directory } else { files.extent_file };
        let entry = DirectoryValue { inode: target, kind: entry_kind };
        put_raw(&mut fs, Tree::Directory, &directory_key(ROOT_INODE, b"alias"), Some(&entry.encode()));
        let mut fs = seal(fs);
        let before = fs.fsck(false).expect("fsck");
        assert!(
            before.violations.iter().any(|violation| violation.contains("entry \"alias\": kind")),
            "{context}: {:?}",
            before.violations
        );
        let refused = |result: Result<(), FsError>, call: &str| {
            assert!(
                matches!(result, Err(FsError::CorruptFile { inode, .. }) if inode == target),
                "{context}: {call} answered {result:?}"
            );
        };
        refused(fs.unlink(b"/alias"), "unlink");
        refused(fs.rmdir(b"/alias"), "rmdir");
        refused(fs.rename_path(b"/alias", b"/d/sub/moved"), "rename into /d/sub");
        refused(fs.rename_path(b"/inline", b"/alias"), "rename onto it");
        assert_eq!(fs.stat(b"/d").expect("stat /d").1.kind, FileKind::Directory, "{context}");
        assert_eq!(fs.stat(b"/d/sub").expect("stat /d/sub").1.kind, FileKind::Directory, "{context}");
        assert_eq!(read_file(&mut fs, "/big").expect("read /big"), pattern(40_000, 3), "{context}");
        assert!(fs.stat(b"/inline").is_ok(), "{context}: the rename's source moved");
        let after = fs.fsck(false).expect("fsck");
        assert_eq!(after.violations, before.violations, "{context}: the refused calls changed the volume");
        let seen = survive_checking(&mut fs, true, context);
        assert!(seen.fsck_violations > 0, "{context}: fsck calls it clean");
    }
}

/// Link counts that disagree with the names: fsck reports each, and what follows stays
/// contained. A count above the names leaves the file behind when its name goes (reported as
/// leaked); a directory count too low for its subdirectories makes removing one fail.
#[test]
fn wrong_link_counts_are_reported_and_stay_contained() {
    // A file with one name and nlink 5: the unlink drops the name and keeps the inode.
    let (mut fs, files) = volume();
    set_nlink(&mut fs, files.extent_file, 5);
    let mut fs = seal(fs);
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("nlink 5 but 1 names")), "{report:?}");
    fs.unlink(b"/big").expect("unlink of a name that exists");
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("leaked")), "{report:?}");
    assert_contained(&mut fs, "nlink above the names");

    // A file with two names and nlink 1: unlinking one name deletes the inode, and the other
    // name dangles. fsoc trusts the count (knowing the names would take a scan); fsck names
    // the dangling entry.
    let (mut fs, files) = volume();
    let entry = DirectoryValue { inode: files.extent_file, kind: FileKind::File };
    put_raw(&mut fs, Tree::Directory, &directory_key(files.directory, b"second"), Some(&entry.encode()));
    let mut fs = seal(fs);
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("nlink 1 but 2 names")), "{report:?}");
    fs.unlink(b"/d/second").expect("unlink");
    assert!(matches!(fs.stat(b"/big"), Err(FsError::NotFound)), "the other name still finds the deleted inode");
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("names missing inode")), "{report:?}");
    assert_contained(&mut fs, "nlink below the names");

    // A directory with a subdirectory and nlink 0: fsck reports it, and rmdir of the
    // subdirectory, or moving it out, fails when it would lower the count, before anything
    // changes: that call alone fails, /d/sub stays, and the volume still takes writes.
    let (mut fs, files) = volume();
    set_nlink(&mut fs, files.directory, 0);
    let mut fs = seal(fs);
    let report = fs.fsck(false).expect("fsck");
    assert!(report.violations.iter().any(|violation| violation.contains("nlink 0 but 3 expected")), "{report:?}");
    assert!(matches!(fs.rmdir(b"/d/sub"), Err(FsError::Corrupt(_))));
    assert!(matches!(fs.rename_path(b"/d/sub", b"/moved"), Err(FsError::Corrupt(_))));
    assert!(fs.stat(b"/d/sub").is_ok(), "the failed rmdir removed /d/sub");
    write_file(&mut fs, "/after", b"x").expect("the volume still takes writes");
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert!(fs.stat(b"/d/sub").is_ok(), "the committed state lost /d/sub");
    survive_checking(&mut fs, true, "directory nlink 0");
}

/// Two files whose extents share flash pages (a cross-link): the second file's first extent
/// rewritten to /big's first four pages, with their data checksums. Reads return what the
/// records say (every checksum is right, so nothing else can know); fsck names every shared
/// page and the segment's valid
/// count; deleting the cross-linked file leaves /big whole and the volume consistent.
#[test]
fn extents_sharing_another_files_pages_are_reported() {
    let (mut fs, files) = volume();
    write_file(&mut fs, "/victim", &pattern(8192, 5)).expect("write");
    fs.transact().expect("commit");
    let victim = fs.stat(b"/victim").expect("stat").0;
    let big_extent = get_raw(&mut fs, Tree::Allocation, &allocation_key(files.extent_file, RecordKind::Extent, 0))
        .expect("/big's first extent");
    let address = u32::from_le_bytes(big_extent[..4].try_into().expect("4 bytes"));
    let checksums = big_extent.get(8..24).expect("/big's first extent has checksums of 4 pages or more").to_vec();
    put_raw(
        &mut fs,
        Tree::Allocation,
        &allocation_key(victim, RecordKind::Extent, 0),
        Some(&extent_value_with(address, 4, &checksums)),
    );
    let mut fs = seal(fs);
    let report = fs.fsck(false).expect("fsck");
    let shared = report.violations.iter().filter(|violation| violation.contains("referenced 2 times")).count();
    assert_eq!(shared, 4, "{:?}", report.violations);
    assert!(report.violations.iter().any(|violation| violation.contains("valid pages")), "{:?}", report.violations);
    assert_eq!(read_file(&mut fs, "/victim").expect("read"), pattern(40_000, 3)[..8192], "what the records say");
    fs.unlink(b"/victim").expect("unlink");
    fs.transact().expect("commit");
    assert_eq!(read_file(&mut fs, "/big").expect("read /big"), pattern(40_000, 3));
    assert_clean(&mut fs, "after deleting the cross-linked file");
    survive_checking(&mut fs, true, "cross-linked extents");
}
