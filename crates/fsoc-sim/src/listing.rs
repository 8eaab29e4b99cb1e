//! The visible state of a volume as one comparable value: fsoc-model's `Listing` (every path
//! with its attributes, content hash or symlink target, and hard-link structure), read through
//! fsoc's inode-level API.
//!
//! Timestamps are left out: the crash test compares a remounted volume with the state a
//! commit made durable, and what it checks is which commit survived, not the clock.

use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fsoc_core::FileSystem;
use fsoc_media::Flash;
use fsoc_model::listing::Fnv1a64;
use fsoc_model::{Attributes, ListingContent};

pub use fsoc_model::Listing;

const READ_CHUNK_BYTES: usize = 64 * 1024;
const READDIR_BATCH: usize = 256;
const ROOT_INODE: u64 = 1;
const EIO: i32 = 5;

/// Content hashes by (inode, mtime, size): valid while callers advance `FileSystem::now_ns`
/// between modifications, so each change gets a new mtime.
pub type DigestCache = std::collections::HashMap<(u64, i64, u64), u64>;

/// Walks the whole volume from the root.
pub fn listing<F: Flash>(fs: &FileSystem<F>) -> Result<Listing, FsError> {
    listing_cached(fs, &mut DigestCache::new())
}

/// `listing`, reusing content hashes of files that did not change.
pub fn listing_cached<F: Flash>(fs: &FileSystem<F>, cache: &mut DigestCache) -> Result<Listing, FsError> {
    walk(fs, cache, false)
}

/// `listing` of a volume that may have lost file data (mirror-meta without one chip): a file
/// whose read answers an I/O error is listed with `ListingContent::Failed` (call "read",
/// outcome "EIO") instead of failing the walk; any other error still fails it
/// (`Listing`s compare with `matches_but_lost`).
pub fn listing_with_lost_files<F: Flash>(fs: &FileSystem<F>) -> Result<Listing, FsError> {
    walk(fs, &mut DigestCache::new(), true)
}

/// Whether `visible` is `expected` except for the content of files it lists as lost (an I/O
/// error when read): same paths, attributes and hard links.
pub fn matches_but_lost(visible: &Listing, expected: &Listing) -> bool {
    visible.entries.len() == expected.entries.len()
        && visible.entries.iter().zip(&expected.entries).all(|(seen, wanted)| {
            seen.path == wanted.path
                && seen.attributes == wanted.attributes
                && seen.hard_link_of == wanted.hard_link_of
                && (seen.content == wanted.content || is_lost(&seen.content))
        })
}

/// Files `visible` lists as lost.
pub fn lost_files(visible: &Listing) -> usize {
    visible.entries.iter().filter(|entry| is_lost(&entry.content)).count()
}

fn is_lost(content: &ListingContent) -> bool {
    matches!(content, ListingContent::Failed { call: "read", outcome } if outcome == "EIO")
}

fn walk<F: Flash>(fs: &FileSystem<F>, cache: &mut DigestCache, tolerate_lost: bool) -> Result<Listing, FsError> {
    let root = fs.getattr(ROOT_INODE)?;
    let mut files = vec![(b"/".to_vec(), attributes(ROOT_INODE, &root), ListingContent::Directory)];
    let mut pending: Vec<(Vec<u8>, u64)> = vec![(Vec::new(), ROOT_INODE)];
    while let Some((path, directory)) = pending.pop() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let entries = fs.readdir(directory, after.as_deref(), READDIR_BATCH)?;
            let Some(last) = entries.last() else { break };
            after = Some(last.name.clone());
            for entry in entries {
                let child = [path.as_slice(), b"/", &entry.name].concat();
                let record = fs.getattr(entry.inode)?;
                // The crash workloads make no device nodes, FIFOs or sockets, and the model has
                // none: a volume holding one is not theirs.
                if entry.kind.is_special() {
                    return Err(FsError::NotSupported);
                }
                let content = match entry.kind {
                    FileKind::File => match file_hash(fs, entry.inode, &record, cache) {
                        Ok(fnv1a_64) => ListingContent::File { fnv1a_64 },
                        Err(error) if tolerate_lost && error.errno() == EIO => {
                            ListingContent::Failed { call: "read", outcome: String::from("EIO") }
                        }
                        Err(error) => return Err(error),
                    },
                    FileKind::Symlink => ListingContent::Symlink { target: fs.readlink(entry.inode)? },
                    FileKind::Directory => {
                        pending.push((child.clone(), entry.inode));
                        ListingContent::Directory
                    }
                    _ => return Err(FsError::NotSupported),
                };
                files.push((child, attributes(entry.inode, &record), content));
            }
        }
    }
    Ok(Listing::from_files(files).without_timestamps())
}

/// FNV-1a of a file's bytes, from the cache when its (inode, mtime, size) was hashed before.
fn file_hash<F: Flash>(
    fs: &FileSystem<F>,
    inode: u64,
    record: &InodeRecord,
    cache: &mut DigestCache,
) -> Result<u64, FsError> {
    let key = (inode, record.mtime_ns, record.size);
    if let Some(&hash) = cache.get(&key) {
        return Ok(hash);
    }
    let mut hasher = Fnv1a64::new();
    let mut offset = 0u64;
    while offset < record.size {
        let bytes = fs.read(inode, offset, READ_CHUNK_BYTES)?;
        if bytes.is_empty() {
            break;
        }
        hasher.update(&bytes);
        offset += bytes.len() as u64;
    }
    cache.insert(key, hasher.finish());
    Ok(hasher.finish())
}

/// fsoc's inode record in the model's terms; the inode number only groups hard links.
fn attributes(inode: u64, record: &InodeRecord) -> Attributes {
    let kind = match record.kind {
        FileKind::File => fsoc_model::FileKind::File,
        FileKind::Directory => fsoc_model::FileKind::Directory,
        FileKind::Symlink => fsoc_model::FileKind::Symlink,
        // Refused by `listing` before it gets here (the model has no special files).
        _ => fsoc_model::FileKind::File,
    };
    Attributes {
        ino: inode,
        kind,
        mode: record.mode,
        uid: record.uid,
        gid: record.gid,
        nlink: record.nlink,
        size: record.size,
        atime_ns: record.atime_ns,
        mtime_ns: record.mtime_ns,
        ctime_ns: record.ctime_ns,
    }
}
