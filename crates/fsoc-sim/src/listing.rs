//! The visible state of a volume as one comparable value: every path with its kind,
//! attributes that matter, a content digest and symlink target.

use std::collections::BTreeMap;

use fsoc_core::fs::{FileKind, FsError};
use fsoc_core::FileSystem;
use fsoc_media::Flash;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ListingEntry {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// FNV-1a of the content (files) or of the target (symlinks).
    pub digest: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Listing(pub BTreeMap<String, ListingEntry>);

fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(state, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const READ_CHUNK_BYTES: usize = 64 * 1024;
const READDIR_BATCH: usize = 256;

/// Content digests by (inode, mtime, size): valid while callers advance `FileSystem::now_ns`
/// between modifications, so each change gets a new mtime.
pub type DigestCache = std::collections::HashMap<(u64, u64, u64), u64>;

/// Walks the whole volume from the root.
pub fn listing<F: Flash>(fs: &mut FileSystem<F>) -> Result<Listing, FsError> {
    listing_cached(fs, &mut DigestCache::new())
}

/// `listing`, reusing content digests of files that did not change.
pub fn listing_cached<F: Flash>(fs: &mut FileSystem<F>, cache: &mut DigestCache) -> Result<Listing, FsError> {
    let mut result = Listing::default();
    let mut pending: Vec<(String, u64)> = vec![(String::new(), 1)];
    while let Some((path, directory)) = pending.pop() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let entries = fs.readdir(directory, after.as_deref(), READDIR_BATCH)?;
            let Some(last) = entries.last() else { break };
            after = Some(last.name.clone());
            for entry in entries {
                let child = format!("{path}/{}", String::from_utf8_lossy(&entry.name));
                let record = fs.getattr(entry.inode)?;
                let digest = match entry.kind {
                    FileKind::File if cache.contains_key(&(entry.inode, record.mtime_ns, record.size)) => {
                        cache[&(entry.inode, record.mtime_ns, record.size)]
                    }
                    FileKind::File => {
                        let mut hash = FNV_OFFSET;
                        let mut offset = 0u64;
                        while offset < record.size {
                            let bytes = fs.read(entry.inode, offset, READ_CHUNK_BYTES)?;
                            if bytes.is_empty() {
                                break;
                            }
                            hash = fnv1a(hash, &bytes);
                            offset += bytes.len() as u64;
                        }
                        cache.insert((entry.inode, record.mtime_ns, record.size), hash);
                        hash
                    }
                    FileKind::Symlink => fnv1a(FNV_OFFSET, &fs.readlink(entry.inode)?),
                    FileKind::Directory => {
                        pending.push((child.clone(), entry.inode));
                        0
                    }
                };
                let kind = match entry.kind {
                    FileKind::File => "file",
                    FileKind::Directory => "dir",
                    FileKind::Symlink => "symlink",
                };
                result.0.insert(
                    child,
                    ListingEntry {
                        kind,
                        mode: record.mode,
                        uid: record.uid,
                        gid: record.gid,
                        nlink: record.nlink,
                        size: record.size,
                        digest,
                    },
                );
            }
        }
    }
    Ok(result)
}

impl Listing {
    /// A short description of how two listings differ, for failure messages.
    pub fn difference(&self, other: &Listing) -> String {
        let mut lines = Vec::new();
        for (path, entry) in &self.0 {
            match other.0.get(path) {
                None => lines.push(format!("only in left: {path}")),
                Some(theirs) if theirs != entry => lines.push(format!("differs: {path}: {entry:?} vs {theirs:?}")),
                _ => {}
            }
        }
        for path in other.0.keys() {
            if !self.0.contains_key(path) {
                lines.push(format!("only in right: {path}"));
            }
        }
        lines.truncate(8);
        lines.join("; ")
    }
}
