//! The fid table of one connection: what each fid the client chose names, and whether it is
//! open. Bounded by `ServeConfig::fids_per_connection_max`.
//!
//! Invariants: a fid is open (holds an fsoc open count) only between a successful Tlopen or
//! Tlcreate and its removal from this table, and whoever removes an open fid gives the count
//! back (`Connection::release`); a fid's `location` is where it was reached, which a later
//! rename elsewhere can make stale, so every use checks it with a lookup first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fsoc_9p::{Errno, Fid};
use fsoc_core::fs::FileKind;
use fsoc_engine::DirectoryCursor;

/// How an open fid may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenMode {
    pub read: bool,
    pub write: bool,
    /// O_APPEND: every write goes to the end of the file, decided under the volume lock.
    pub append: bool,
    /// O_SYNC or O_DSYNC: every write (and the create or truncation of the open) is made
    /// durable, by a transaction point, before its reply.
    pub sync: bool,
}

/// An extended-attribute fid: what Txattrwalk or Txattrcreate made of it.
#[derive(Debug)]
pub(crate) enum XattrFid {
    /// Txattrwalk: what Tread returns, one attribute's value or (for the empty name) the
    /// NUL-terminated names of them all.
    Reading(Vec<u8>),
    /// Txattrcreate: the value as Twrite delivers it (in order), set at Tclunk; a declared
    /// size of 0 removes the attribute (as QEMU's server and the Linux client take it).
    Writing { name: Vec<u8>, size: usize, flags: u32, value: Vec<u8> },
}

/// What a fid names.
#[derive(Clone, Debug)]
pub(crate) struct FidEntry {
    pub inode: u64,
    pub kind: FileKind,
    /// The directory and name it was reached through (for Tremove and Trename); `None` for
    /// the root and after a walk through `..`.
    pub location: Option<(u64, Arc<[u8]>)>,
    /// The user named at attach: owner of what this fid creates.
    pub uid: u32,
    pub open: Option<OpenMode>,
    /// An open directory's listing position (its own lock: listings of different fids overlap).
    pub cursor: Option<Arc<Mutex<DirectoryCursor>>>,
    /// An extended-attribute fid's contents (such a fid is never open).
    pub xattr: Option<Arc<Mutex<XattrFid>>>,
}

impl FidEntry {
    pub fn root(uid: u32) -> FidEntry {
        FidEntry {
            inode: fsoc_core::fs::records::ROOT_INODE,
            kind: FileKind::Directory,
            location: None,
            uid,
            open: None,
            cursor: None,
            xattr: None,
        }
    }

    /// A new, unopened fid naming the same file (a walk of no names).
    pub fn clone_unopened(&self) -> FidEntry {
        FidEntry { open: None, cursor: None, xattr: None, ..self.clone() }
    }
}

/// The fids of one connection.
pub(crate) struct FidTable {
    entries: HashMap<u32, FidEntry>,
    limit: usize,
}

impl FidTable {
    pub fn new(limit: usize) -> FidTable {
        FidTable { entries: HashMap::new(), limit }
    }

    pub fn get(&self, fid: Fid) -> Result<&FidEntry, Errno> {
        self.entries.get(&fid.0).ok_or(Errno::EBADF)
    }

    pub fn get_mut(&mut self, fid: Fid) -> Result<&mut FidEntry, Errno> {
        self.entries.get_mut(&fid.0).ok_or(Errno::EBADF)
    }

    pub fn contains(&self, fid: Fid) -> bool {
        self.entries.contains_key(&fid.0)
    }

    /// Adds a fid not in use (EBADF if it is; NOFID is never a fid), or EMFILE at the limit.
    pub fn insert_new(&mut self, fid: Fid, entry: FidEntry) -> Result<(), Errno> {
        if fid == Fid::NONE || self.entries.contains_key(&fid.0) {
            return Err(Errno::EBADF);
        }
        if self.entries.len() >= self.limit {
            return Err(Errno::EMFILE);
        }
        self.entries.insert(fid.0, entry);
        assert!(self.entries.len() <= self.limit, "fid table over its limit");
        Ok(())
    }

    /// Replaces an existing, unopened fid's entry (EBADF if it is open: a concurrent Tlopen
    /// won), or adds it as `insert_new` does.
    pub fn replace_or_insert(&mut self, fid: Fid, entry: FidEntry) -> Result<(), Errno> {
        match self.entries.get_mut(&fid.0) {
            Some(existing) if existing.open.is_some() => Err(Errno::EBADF),
            Some(existing) => {
                *existing = entry;
                Ok(())
            }
            None => self.insert_new(fid, entry),
        }
    }

    pub fn remove(&mut self, fid: Fid) -> Option<FidEntry> {
        self.entries.remove(&fid.0)
    }

    /// Every fid, for the end of a session (Tversion or disconnect).
    pub fn drain(&mut self) -> Vec<FidEntry> {
        self.entries.drain().map(|(_, entry)| entry).collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fid_entry_is_small() {
        // ServeConfig::fids_per_connection_max's memory figure counts on this (plus the name).
        assert!(std::mem::size_of::<FidEntry>() <= 64, "{} bytes", std::mem::size_of::<FidEntry>());
    }

    #[test]
    fn fids_are_unique_and_bounded() {
        let mut table = FidTable::new(2);
        table.insert_new(Fid(1), FidEntry::root(0)).expect("first");
        assert_eq!(table.insert_new(Fid(1), FidEntry::root(0)), Err(Errno::EBADF), "in use");
        assert_eq!(table.insert_new(Fid::NONE, FidEntry::root(0)), Err(Errno::EBADF), "NOFID");
        table.insert_new(Fid(2), FidEntry::root(0)).expect("second");
        assert_eq!(table.insert_new(Fid(3), FidEntry::root(0)), Err(Errno::EMFILE), "limit");
        table.replace_or_insert(Fid(2), FidEntry::root(5)).expect("replace");
        assert_eq!(table.get(Fid(2)).map(|entry| entry.uid), Ok(5));
        assert!(table.remove(Fid(1)).is_some());
        assert_eq!(table.get(Fid(1)).map(|entry| entry.uid), Err(Errno::EBADF));
        assert_eq!(table.drain().len(), 1);
        assert_eq!(table.len(), 0);
    }
}
