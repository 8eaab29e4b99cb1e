//! `DirectoryCursor`: fsoc's name-ordered directory listing ("entries after this name") as the
//! numeric offsets (cookies) that FUSE's readdir and 9P's Treaddir hand back.
//!
//! Cookies: 1 follows `.`, 2 follows `..`, and 2 + k follows the k-th entry (1-based) in name
//! order. The cursor remembers the names of the entries it returned last, so the usual
//! "continue from the last cookie" costs one tree descent and stays right when other entries
//! are added or removed in between (the listing continues after that name); any other cookie
//! (a seek to an older position) is found by counting from the start. A name that exists
//! throughout a listing is never skipped or repeated by a continuing reader.
//!
//! Used by both doors: fsoc-fuse's readdir/readdirplus and fsoc-serve's Treaddir.

use fsoc_core::fs::{FileKind, FsError};
use fsoc_core::FileSystem;
use fsoc_flash::Flash;

/// Entries fetched from the tree per call; a reply buffer holds about 100 to 40,000 of them.
const BATCH_ENTRIES: usize = 128;
pub const COOKIE_AFTER_DOT: u64 = 1;
pub const COOKIE_AFTER_DOT_DOT: u64 = 2;

/// One entry offered to the caller of `DirectoryCursor::read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorEntry<'a> {
    pub inode: u64,
    /// The cookie that continues the listing after this entry.
    pub next_cookie: u64,
    pub kind: FileKind,
    pub name: &'a [u8],
}

/// One open directory's listing position.
#[derive(Debug)]
pub struct DirectoryCursor {
    inode: u64,
    parent_inode: u64,
    /// (cookie, name) of the entries returned by the last call, oldest first. Bounded by what
    /// one reply holds.
    recent: Vec<(u64, Vec<u8>)>,
}

impl DirectoryCursor {
    pub fn new(inode: u64, parent_inode: u64) -> Self {
        DirectoryCursor { inode, parent_inode, recent: Vec::new() }
    }

    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Lists entries after `cookie`, offering each to `add` until it returns `true` ("full,
    /// this entry was not taken") or the directory ends.
    pub fn read<F: Flash>(
        &mut self,
        fs: &FileSystem<F>,
        cookie: u64,
        mut add: impl FnMut(CursorEntry<'_>) -> bool,
    ) -> Result<(), FsError> {
        let mut cookie = cookie;
        if cookie == 0 {
            let dot =
                CursorEntry { inode: self.inode, next_cookie: COOKIE_AFTER_DOT, kind: FileKind::Directory, name: b"." };
            if add(dot) {
                return Ok(());
            }
            cookie = COOKIE_AFTER_DOT;
        }
        if cookie == COOKIE_AFTER_DOT {
            let dot_dot = CursorEntry {
                inode: self.parent_inode,
                next_cookie: COOKIE_AFTER_DOT_DOT,
                kind: FileKind::Directory,
                name: b"..",
            };
            if add(dot_dot) {
                return Ok(());
            }
            cookie = COOKIE_AFTER_DOT_DOT;
        }
        let mut after = if cookie == COOKIE_AFTER_DOT_DOT {
            None
        } else if let Some((_, name)) = self.recent.iter().find(|(recent, _)| *recent == cookie) {
            Some(name.clone())
        } else {
            match self.name_at(fs, cookie - COOKIE_AFTER_DOT_DOT)? {
                Some(name) => Some(name),
                None => return Ok(()), // past the end (the directory shrank)
            }
        };
        let mut returned = Vec::new();
        'batches: loop {
            let batch = fs.readdir(self.inode, after.as_deref(), BATCH_ENTRIES)?;
            let batch_len = batch.len();
            for entry in batch {
                let next_cookie = cookie.saturating_add(1);
                // A name no entry may hold ("", ".", "..", "a/b", NUL; only a crafted image has
                // one) is never handed on; it keeps its position, so cookies are the same
                // whether it is listed or not. fsck reports it.
                let usable = FileSystem::<F>::validate_name(&entry.name).is_ok();
                let offered = CursorEntry { inode: entry.inode, next_cookie, kind: entry.kind, name: &entry.name };
                if usable && add(offered) {
                    break 'batches;
                }
                if !usable {
                    log::warn!("directory {}: entry with an unusable name skipped (run fsoc fsck)", self.inode);
                }
                cookie = next_cookie;
                returned.push((cookie, entry.name.clone()));
                after = Some(entry.name);
            }
            if batch_len < BATCH_ENTRIES {
                break;
            }
        }
        if !returned.is_empty() {
            self.recent = returned;
        }
        Ok(())
    }

    /// The name of the `position`-th entry (1-based) in name order, counted from the start.
    fn name_at<F: Flash>(&self, fs: &FileSystem<F>, position: u64) -> Result<Option<Vec<u8>>, FsError> {
        assert!(position > 0, "position is 1-based");
        let mut remaining = position;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let batch = fs.readdir(self.inode, after.as_deref(), BATCH_ENTRIES)?;
            let batch_len = batch.len() as u64;
            if remaining <= batch_len {
                let index = usize::try_from(remaining - 1).unwrap_or(usize::MAX);
                return Ok(batch.into_iter().nth(index).map(|entry| entry.name));
            }
            remaining -= batch_len;
            if batch_len < BATCH_ENTRIES as u64 {
                return Ok(None);
            }
            after = batch.into_iter().last().map(|entry| entry.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::FsConfig;
    use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

    fn volume() -> FileSystem<SimFlash<RamStore>> {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 256, 1)).expect("flash");
        FileSystem::format(flash, FsConfig::default(), 1).expect("format")
    }

    fn names(count: usize) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = (0..count).map(|index| format!("entry-{index:05}").into_bytes()).collect();
        names.sort();
        names
    }

    /// Reads the whole listing with replies of at most `per_reply` entries, each call
    /// continuing from the last cookie received, removing what it saw if `remove` says so.
    fn list(
        fs: &mut FileSystem<SimFlash<RamStore>>,
        cursor: &mut DirectoryCursor,
        per_reply: usize,
        remove: bool,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut listed = Vec::new();
        let mut cookie = 0;
        loop {
            let mut reply = Vec::new();
            cursor
                .read(fs, cookie, |entry| {
                    if reply.len() == per_reply {
                        return true;
                    }
                    reply.push((entry.next_cookie, entry.name.to_vec()));
                    false
                })
                .expect("readdir");
            let Some(&(last, _)) = reply.last() else { break };
            cookie = last;
            if remove {
                for (_, name) in &reply {
                    if name != b"." && name != b".." {
                        fs.remove(cursor.inode(), name, false).expect("unlink while listing");
                    }
                }
            }
            listed.extend(reply);
        }
        listed
    }

    /// Entries a crafted image holds under names no entry may have are never listed, and the
    /// listing around them stays complete (cookies count them, so resuming never repeats).
    #[test]
    fn entries_with_unusable_names_are_skipped() {
        use fsoc_core::fs::records::{directory_key, DirectoryValue};
        use fsoc_core::txn::store::LogNodeStore;
        let mut fs = volume();
        let directory = fs.create(1, b"d", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
        for name in names(300) {
            fs.create(directory, &name, FileKind::File, 0o644, 0, 0, None).expect("create");
        }
        let value = DirectoryValue { inode: 1, kind: FileKind::Directory }.encode();
        for bad in [&b""[..], b".", b"..", b"entry-00100/x", b"entry-\0"] {
            let key = directory_key(directory, bad);
            let volume = &mut fs.craft();
            let mut store = LogNodeStore::new(volume.log);
            volume.directory.insert(&mut store, &key, &value).expect("crafted entry");
        }
        let mut cursor = DirectoryCursor::new(directory, 1);
        for per_reply in [1, 7, 1000] {
            let listed: Vec<Vec<u8>> =
                list(&mut fs, &mut cursor, per_reply, false).into_iter().map(|(_, name)| name).collect();
            let mut expected = vec![b".".to_vec(), b"..".to_vec()];
            expected.extend(names(300));
            assert_eq!(listed, expected, "{per_reply} entries per reply");
        }
    }

    #[test]
    fn lists_every_entry_once_with_increasing_cookies() {
        let mut fs = volume();
        let directory = fs.create(1, b"d", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
        for name in names(1000) {
            fs.create(directory, &name, FileKind::File, 0o644, 0, 0, None).expect("create");
        }
        let mut cursor = DirectoryCursor::new(directory, 1);
        let listed = list(&mut fs, &mut cursor, 37, false);
        let mut expected = vec![b".".to_vec(), b"..".to_vec()];
        expected.extend(names(1000));
        assert_eq!(listed.iter().map(|(_, name)| name.clone()).collect::<Vec<_>>(), expected);
        let cookies: Vec<u64> = listed.iter().map(|(cookie, _)| *cookie).collect();
        assert_eq!(cookies, (1..=1002).collect::<Vec<u64>>(), "cookie k+2 follows entry k");
    }

    #[test]
    fn seeking_to_an_old_cookie_counts_from_the_start() {
        let mut fs = volume();
        for name in names(300) {
            fs.create(1, &name, FileKind::File, 0o644, 0, 0, None).expect("create");
        }
        let mut cursor = DirectoryCursor::new(1, 1);
        let _ = list(&mut fs, &mut cursor, 50, false);
        let mut first = None;
        cursor
            .read(&fs, 2 + 10, |entry| {
                first = Some((entry.next_cookie, entry.name.to_vec()));
                true
            })
            .expect("readdir");
        assert_eq!(first, Some((13, names(300)[10].clone())));
        let mut past_end = 0;
        cursor
            .read(&fs, 2 + 300, |_| {
                past_end += 1;
                false
            })
            .expect("readdir at the end");
        assert_eq!(past_end, 0, "the cookie after the last entry lists nothing");
    }

    #[test]
    fn removing_entries_while_listing_does_not_skip_survivors() {
        let mut fs = volume();
        for name in &names(400) {
            fs.create(1, name, FileKind::File, 0o644, 0, 0, None).expect("create");
        }
        let mut cursor = DirectoryCursor::new(1, 1);
        let seen = list(&mut fs, &mut cursor, 40, true);
        assert_eq!(seen.len(), 402);
        assert!(fs.readdir(1, None, 10).expect("readdir").is_empty());
    }
}
