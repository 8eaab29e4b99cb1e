//! `Listing`: a canonical snapshot of a whole visible tree, equal for two file systems
//! exactly when they hold the same paths, attributes (inode numbers aside), contents and
//! hard-link structure.

use std::collections::BTreeMap;
use std::fmt;

use crate::operation::{display_outcome, Operation, Outcome, Output};
use crate::path::{self, display_bytes};
use crate::types::{Attributes, FileKind, OpenFlags};

/// What a listing records about an object besides its attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListingContent {
    /// FNV-1a (64-bit) of all `size` bytes, holes read as zeros.
    File {
        fnv1a_64: u64,
    },
    Directory,
    Symlink {
        target: Vec<u8>,
    },
    /// Reading the object through the API failed; `outcome` is what the call returned.
    Failed {
        call: &'static str,
        outcome: String,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ListingEntry {
    pub path: Vec<u8>,
    /// With `ino` always 0: inode numbers are not comparable between file systems.
    pub attributes: Attributes,
    pub content: ListingContent,
    /// For an inode with several names, every name but the bytewise-first path carries
    /// that first path; `None` otherwise. This compares hard-link structure without inode
    /// numbers.
    pub hard_link_of: Option<Vec<u8>>,
}

/// Every visible path sorted bytewise, the root (`/`) included.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Listing {
    pub entries: Vec<ListingEntry>,
}

impl Listing {
    /// Builds the canonical form from `(path, attributes with real ino, content)` in any
    /// order: sorts by path, derives `hard_link_of` from the inode numbers (0 means
    /// unknown and never groups), then drops the inode numbers.
    pub fn from_files(mut files: Vec<(Vec<u8>, Attributes, ListingContent)>) -> Listing {
        files.sort_by(|left, right| left.0.cmp(&right.0));
        let mut first_path_of_ino: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let entries = files
            .into_iter()
            .map(|(path, attributes, content)| {
                let hard_link_of = match attributes.ino {
                    0 => None,
                    ino => match first_path_of_ino.get(&ino) {
                        Some(first) => Some(first.clone()),
                        None => {
                            first_path_of_ino.insert(ino, path.clone());
                            None
                        }
                    },
                };
                let attributes = Attributes { ino: 0, ..attributes };
                ListingEntry { path, attributes, content, hard_link_of }
            })
            .collect();
        Listing { entries }
    }

    /// This listing with every timestamp zeroed, for runs that don't compare them.
    pub fn without_timestamps(&self) -> Listing {
        let entries = self
            .entries
            .iter()
            .map(|entry| ListingEntry { attributes: entry.attributes.comparable(false), ..entry.clone() })
            .collect();
        Listing { entries }
    }

    pub fn get(&self, path: &[u8]) -> Option<&ListingEntry> {
        self.entries.binary_search_by(|entry| entry.path.as_slice().cmp(path)).ok().map(|index| &self.entries[index])
    }

    /// What differs between the file system's listing and the model's.
    pub fn difference(fs: &Listing, model: &Listing) -> ListingDifference {
        let mut difference = ListingDifference::default();
        let (mut fs_entries, mut model_entries) = (fs.entries.iter().peekable(), model.entries.iter().peekable());
        loop {
            match (fs_entries.peek(), model_entries.peek()) {
                (None, None) => break,
                (Some(fs_entry), None) => {
                    difference.only_in_fs.push((*fs_entry).clone());
                    fs_entries.next();
                }
                (None, Some(model_entry)) => {
                    difference.only_in_model.push((*model_entry).clone());
                    model_entries.next();
                }
                (Some(fs_entry), Some(model_entry)) => match fs_entry.path.cmp(&model_entry.path) {
                    std::cmp::Ordering::Less => {
                        difference.only_in_fs.push((*fs_entry).clone());
                        fs_entries.next();
                    }
                    std::cmp::Ordering::Greater => {
                        difference.only_in_model.push((*model_entry).clone());
                        model_entries.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if fs_entry != model_entry {
                            difference.differing.push(((*fs_entry).clone(), (*model_entry).clone()));
                        }
                        fs_entries.next();
                        model_entries.next();
                    }
                },
            }
        }
        difference
    }
}

/// The paths on which two listings disagree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingDifference {
    pub only_in_fs: Vec<ListingEntry>,
    pub only_in_model: Vec<ListingEntry>,
    /// `(fs, model)` pairs with the same path.
    pub differing: Vec<(ListingEntry, ListingEntry)>,
}

impl ListingDifference {
    pub fn is_empty(&self) -> bool {
        self.only_in_fs.is_empty() && self.only_in_model.is_empty() && self.differing.is_empty()
    }
}

impl fmt::Display for ListingDifference {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for entry in &self.only_in_fs {
            writeln!(formatter, "  only in fs:    {entry:?}")?;
        }
        for entry in &self.only_in_model {
            writeln!(formatter, "  only in model: {entry:?}")?;
        }
        for (fs_entry, model_entry) in &self.differing {
            writeln!(formatter, "  fs:    {fs_entry:?}")?;
            writeln!(formatter, "  model: {model_entry:?}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ListingEntry {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attributes = &self.attributes;
        write!(
            formatter,
            "{} {:?} mode {:#o} uid {} gid {} nlink {} size {} atime {} mtime {} ctime {}",
            display_bytes(&self.path),
            attributes.kind,
            attributes.mode,
            attributes.uid,
            attributes.gid,
            attributes.nlink,
            attributes.size,
            attributes.atime_ns,
            attributes.mtime_ns,
            attributes.ctime_ns
        )?;
        match &self.content {
            ListingContent::File { fnv1a_64 } => write!(formatter, " fnv1a64 {fnv1a_64:016x}")?,
            ListingContent::Directory => {}
            ListingContent::Symlink { target } => write!(formatter, " -> \"{}\"", display_bytes(target))?,
            ListingContent::Failed { call, outcome } => write!(formatter, " {call} failed: {outcome}")?,
        }
        if let Some(first) = &self.hard_link_of {
            write!(formatter, " (hard link of {})", display_bytes(first))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Listing {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(formatter, "Listing [")?;
        for entry in &self.entries {
            writeln!(formatter, "  {entry:?}")?;
        }
        write!(formatter, "]")
    }
}

/// Bytes read per `pread` while hashing a file through the API.
const LISTING_READ_SIZE_BYTES: u64 = 1 << 20;

/// Builds a listing of any file system through its API alone: `stat` and `readdir` from
/// `/` down, `readlink` for symlinks, and `open` read-only + `pread` + `close` for files.
/// An adapter can implement `FsUnderTest::listing` as
/// `listing_through_calls(|operation| self.apply(operation, now_ns))`. None of these calls
/// changes visible state (reads do not touch atime). A failing call becomes a
/// `ListingContent::Failed` entry rather than a panic, so a broken tree still compares.
pub fn listing_through_calls(mut apply: impl FnMut(&Operation) -> Outcome) -> Listing {
    let mut files = Vec::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(path) = stack.pop() {
        let failed = |call, outcome: &Outcome| ListingContent::Failed { call, outcome: display_outcome(outcome) };
        let stat = apply(&Operation::Stat { path: path.clone() });
        let attributes = match stat {
            Ok(Output::Attributes(attributes)) => attributes,
            other => {
                let unknown = Attributes {
                    ino: 0,
                    kind: FileKind::File,
                    mode: 0,
                    uid: 0,
                    gid: 0,
                    nlink: 0,
                    size: 0,
                    atime_ns: 0,
                    mtime_ns: 0,
                    ctime_ns: 0,
                };
                files.push((path, unknown, failed("stat", &other)));
                continue;
            }
        };
        let content = match attributes.kind {
            FileKind::Directory => match apply(&Operation::Readdir { path: path.clone() }) {
                Ok(Output::Entries(entries)) => {
                    for (name, _kind) in entries.iter().rev() {
                        stack.push(path::join(&path, name));
                    }
                    ListingContent::Directory
                }
                other => failed("readdir", &other),
            },
            FileKind::Symlink => match apply(&Operation::Readlink { path: path.clone() }) {
                Ok(Output::Bytes(target)) => ListingContent::Symlink { target },
                other => failed("readlink", &other),
            },
            FileKind::File => hash_through_calls(&mut apply, &path, attributes.size),
        };
        files.push((path, attributes, content));
    }
    Listing::from_files(files)
}

fn hash_through_calls(apply: &mut impl FnMut(&Operation) -> Outcome, path: &[u8], size_bytes: u64) -> ListingContent {
    let failed = |call, outcome: &Outcome| ListingContent::Failed { call, outcome: display_outcome(outcome) };
    let open = Operation::Open { path: path.to_vec(), flags: OpenFlags::READ_ONLY, mode: 0 };
    let fd = match apply(&open) {
        Ok(Output::Fd(fd)) => fd,
        other => return failed("open", &other),
    };
    let mut hasher = Fnv1a64::new();
    let mut offset = 0;
    // Read until EOF, but no further than one chunk past the reported size, so a file
    // system that never reports EOF cannot hang the listing.
    let content = loop {
        let pread = Operation::Pread { fd, offset, size_bytes: LISTING_READ_SIZE_BYTES };
        match apply(&pread) {
            Ok(Output::Bytes(bytes)) if bytes.is_empty() => {
                break ListingContent::File { fnv1a_64: hasher.finish() };
            }
            Ok(Output::Bytes(bytes)) => {
                hasher.update(&bytes);
                offset += bytes.len() as u64;
                if offset > size_bytes.saturating_add(LISTING_READ_SIZE_BYTES) {
                    break ListingContent::Failed {
                        call: "pread",
                        outcome: format!("still returning data at offset {offset}"),
                    };
                }
            }
            other => break failed("pread", &other),
        }
    };
    match apply(&Operation::Close { fd }) {
        Ok(Output::Unit) => content,
        other => failed("close", &other),
    }
}

/// Streaming FNV-1a, 64-bit: simple, stable across platforms and versions.
#[derive(Clone, Debug)]
pub struct Fnv1a64 {
    state: u64,
}

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Self {
        Fnv1a64 { state: Self::OFFSET_BASIS }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.state = (self.state ^ u64::from(byte)).wrapping_mul(Self::PRIME);
        }
    }

    /// Same as `update` with `count` zero bytes, without allocating them.
    pub fn update_zeros(&mut self, count: u64) {
        for _ in 0..count {
            self.state = self.state.wrapping_mul(Self::PRIME);
        }
    }

    pub fn finish(&self) -> u64 {
        self.state
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a (64-bit) of `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hasher = Fnv1a64::new();
    hasher.update(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_64_matches_reference_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
        let mut hasher = Fnv1a64::new();
        hasher.update(b"x");
        hasher.update_zeros(3);
        assert_eq!(hasher.finish(), fnv1a_64(b"x\0\0\0"));
    }

    #[test]
    fn from_files_groups_hard_links_by_first_path() {
        let attributes = |ino| Attributes {
            ino,
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let content = || ListingContent::File { fnv1a_64: fnv1a_64(b"") };
        let listing = Listing::from_files(vec![
            (b"/b".to_vec(), attributes(7), content()),
            (b"/a".to_vec(), attributes(7), content()),
            (b"/c".to_vec(), attributes(9), content()),
        ]);
        let paths: Vec<&[u8]> = listing.entries.iter().map(|e| e.path.as_slice()).collect();
        assert_eq!(paths, [&b"/a"[..], b"/b", b"/c"]);
        assert_eq!(listing.entries[0].hard_link_of, None);
        assert_eq!(listing.entries[1].hard_link_of, Some(b"/a".to_vec()));
        assert_eq!(listing.entries[2].hard_link_of, None);
        assert!(listing.entries.iter().all(|entry| entry.attributes.ino == 0));
    }

    #[test]
    fn difference_reports_each_side() {
        let entry = |path: &[u8], mode| ListingEntry {
            path: path.to_vec(),
            attributes: Attributes {
                ino: 0,
                kind: FileKind::Directory,
                mode,
                uid: 0,
                gid: 0,
                nlink: 2,
                size: 0,
                atime_ns: 0,
                mtime_ns: 0,
                ctime_ns: 0,
            },
            content: ListingContent::Directory,
            hard_link_of: None,
        };
        let fs = Listing { entries: vec![entry(b"/", 0o755), entry(b"/a", 0o700)] };
        let model = Listing { entries: vec![entry(b"/", 0o755), entry(b"/b", 0o700)] };
        let difference = Listing::difference(&fs, &model);
        assert_eq!(difference.only_in_fs, vec![entry(b"/a", 0o700)]);
        assert_eq!(difference.only_in_model, vec![entry(b"/b", 0o700)]);
        assert!(difference.differing.is_empty());
        assert!(Listing::difference(&fs, &fs).is_empty());
    }
}
