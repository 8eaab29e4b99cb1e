//! Depth-first walks over a directory tree inside an image, for `ls -r`, `get -r`, `rm -r` and
//! the progress total. The tree is hostile input: a crafted image may hold a directory entry
//! that leads back to an ancestor (a cycle), a directory reachable by two paths, a chain of
//! directories deeper than any real tree, or millions of entries in one directory. So a walk
//! never recurses (an explicit stack of frames), refuses to enter a directory twice or beyond
//! `DEPTH_MAX` levels, and keeps memory bounded: each frame holds its directory's inode and a
//! resume point, and listed entries are held only while `BUFFER_BYTES_MAX` allows (a dropped
//! batch is read again from the resume point when the walk returns to that directory).
//!
//! Names are not checked here: each tool decides what a bad name means for it (refuse, skip).

use std::collections::{HashSet, VecDeque};

use fsoc_core::fs::{DirectoryEntry, FileKind, FsError};
use fsoc_core::FileSystem;
use fsoc_media::Flash;

/// Deepest nesting a walk enters: far beyond real trees (Linux's PATH_MAX of 4096 bytes allows
/// 2048 one-letter levels), small enough that the frames of a crafted chain stay in memory.
pub const DEPTH_MAX: usize = 4096;
/// Directory entries read per call.
const BATCH_ENTRIES: usize = 256;
/// Listed entries kept across descents, in bytes: beyond it a frame drops its batch on descent.
const BUFFER_BYTES_MAX: usize = 4 << 20;
/// Bytes of a buffered entry besides its name (the struct and allocator overhead).
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// One step of a walk.
pub enum Step {
    /// An entry of the current directory (`Walk::directory_path`), in name order. Call
    /// `Walk::enter` to descend into it before the next step.
    Entry(DirectoryEntry),
    /// The current directory's listing failed; the next step leaves it.
    Unreadable(FsError),
    /// Every entry of the current directory has been stepped over (and every directory entered
    /// beneath it). Until the next step, `directory_path` is still the directory being left.
    Leave,
    /// The walk is over: the start directory was left.
    Done,
}

/// Why a walk refused to enter a directory.
#[derive(Debug, PartialEq, Eq)]
pub enum EnterError {
    /// The directory is one of the directories being walked: the entry leads back up.
    Cycle { inode: u64, ancestor_path: Vec<u8> },
    /// The directory's record names another parent: this entry is a second name (or the
    /// record is damaged); either way the tree is not what its entries say.
    OtherParent { inode: u64, parent_field: u64 },
    /// The directory was already walked under another path (a directory has one name).
    SecondName { inode: u64 },
    /// The directory's record cannot be read.
    Unreadable(FsError),
    /// Entering would exceed the depth limit.
    TooDeep { depth_max: usize },
}

impl EnterError {
    /// What went wrong, for a message that starts with the entry's path.
    pub fn describe(&self) -> String {
        match self {
            EnterError::Cycle { inode, ancestor_path } => format!(
                "directory cycle: this entry leads back to {} (inode {inode}), which contains it; not followed",
                crate::names::shown(ancestor_path)
            ),
            EnterError::OtherParent { inode, parent_field } => format!(
                "directory cycle or second name: directory inode {inode} belongs in directory inode {parent_field}, not here (a directory has one name); not followed"
            ),
            EnterError::Unreadable(error) => format!("{error}; not followed"),
            EnterError::SecondName { inode } => format!(
                "directory cycle or second name: directory inode {inode} was already reached by another path (a directory has one name); not followed"
            ),
            EnterError::TooDeep { depth_max } => format!("more than {depth_max} nested directories; not followed"),
        }
    }
}

struct Frame {
    inode: u64,
    /// Length of `Walk::path` for this directory.
    path_len: usize,
    /// Name of the last entry handed out: the listing resumes after it.
    after: Option<Vec<u8>>,
    /// Entries read but not yet handed out.
    batch: VecDeque<DirectoryEntry>,
    /// Bytes `batch` was charged against `BUFFER_BYTES_MAX` when it was read.
    batch_bytes: usize,
    /// The listing has no entries after `batch`.
    listed: bool,
}

pub struct Walk {
    frames: Vec<Frame>,
    /// Path of the current directory (the last frame's), for messages and output.
    path: Vec<u8>,
    /// Every directory entered so far (including the start): a directory met twice is a cycle
    /// or a second name, and entering it again could make the walk endless or exponential.
    entered: HashSet<u64>,
    depth_max: usize,
    buffered_bytes: usize,
    /// `BUFFER_BYTES_MAX`, smaller in tests to exercise re-reading.
    buffer_bytes_max: usize,
    /// The last step was `Leave`: the next one pops that frame first.
    leaving: bool,
}

impl Walk {
    /// A walk of the directory `inode`, called `path` in messages; at most `depth_max` levels
    /// (the start directory is level 1).
    pub fn new(inode: u64, path: &[u8], depth_max: usize) -> Walk {
        let frame =
            Frame { inode, path_len: path.len(), after: None, batch: VecDeque::new(), batch_bytes: 0, listed: false };
        Walk {
            frames: vec![frame],
            path: path.to_vec(),
            entered: HashSet::from([inode]),
            depth_max: depth_max.max(1),
            buffered_bytes: 0,
            buffer_bytes_max: BUFFER_BYTES_MAX,
            leaving: false,
        }
    }

    /// Path of the current directory.
    pub fn directory_path(&self) -> &[u8] {
        &self.path
    }

    /// Inode of the current directory.
    pub fn directory(&self) -> u64 {
        self.frames.last().map_or(0, |frame| frame.inode)
    }

    /// Path of `name` in the current directory.
    pub fn entry_path(&self, name: &[u8]) -> Vec<u8> {
        let mut path = self.path.clone();
        if path.last() != Some(&b'/') {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        path
    }

    /// After `Step::Leave` of a directory other than the start: its parent and its name there.
    pub fn left_parent_and_name(&self) -> Option<(u64, &[u8])> {
        let parent = self.frames.len().checked_sub(2).and_then(|index| self.frames.get(index))?;
        Some((parent.inode, parent.after.as_deref()?))
    }

    pub fn next<F: Flash>(&mut self, fs: &mut FileSystem<F>) -> Step {
        if self.leaving {
            self.leaving = false;
            if let Some(frame) = self.frames.pop() {
                self.buffered_bytes -= frame.batch_bytes;
            }
            let Some(parent) = self.frames.last() else { return Step::Done };
            self.path.truncate(parent.path_len);
        }
        let Some(frame) = self.frames.last_mut() else { return Step::Done };
        if frame.batch.is_empty() && !frame.listed {
            self.buffered_bytes -= frame.batch_bytes;
            frame.batch_bytes = 0;
            match fs.readdir(frame.inode, frame.after.as_deref(), BATCH_ENTRIES) {
                Ok(batch) => {
                    frame.listed = batch.len() < BATCH_ENTRIES;
                    frame.batch_bytes = batch.iter().map(|entry| entry.name.len() + ENTRY_OVERHEAD_BYTES).sum();
                    self.buffered_bytes += frame.batch_bytes;
                    frame.batch = batch.into();
                }
                Err(error) => {
                    frame.listed = true;
                    return Step::Unreadable(error);
                }
            }
        }
        match frame.batch.pop_front() {
            Some(entry) => {
                frame.after = Some(entry.name.clone());
                Step::Entry(entry)
            }
            None => {
                self.leaving = true;
                Step::Leave
            }
        }
    }

    /// Descends into `entry` (a directory entry of the current directory just stepped over):
    /// the next steps list it. Refused for a directory that contains the current one, one
    /// whose record names another parent, one already entered, and beyond the depth limit;
    /// the walk then goes on with the current directory.
    pub fn enter<F: Flash>(&mut self, fs: &mut FileSystem<F>, entry: &DirectoryEntry) -> Result<(), EnterError> {
        debug_assert_eq!(entry.kind, FileKind::Directory, "only directories are entered");
        if let Some(ancestor) = self.frames.iter().find(|frame| frame.inode == entry.inode) {
            return Err(EnterError::Cycle {
                inode: entry.inode,
                ancestor_path: self.path[..ancestor.path_len].to_vec(),
            });
        }
        if self.frames.len() >= self.depth_max {
            return Err(EnterError::TooDeep { depth_max: self.depth_max });
        }
        // Every directory records its parent (fsck checks it agrees with its entry): an entry
        // elsewhere naming it is a second name, which could lead anywhere, even outside the
        // tree being walked (where `rm -r` must not reach).
        let parent_field = fs.getattr(entry.inode).map_err(EnterError::Unreadable)?.parent;
        if parent_field != self.directory() {
            return Err(EnterError::OtherParent { inode: entry.inode, parent_field });
        }
        if !self.entered.insert(entry.inode) {
            return Err(EnterError::SecondName { inode: entry.inode });
        }
        if self.buffered_bytes > self.buffer_bytes_max {
            // Read the rest again on return rather than hold every level's batch.
            if let Some(frame) = self.frames.last_mut() {
                self.buffered_bytes -= frame.batch_bytes;
                frame.batch_bytes = 0;
                frame.batch.clear();
                frame.listed = false;
            }
        }
        self.path = self.entry_path(&entry.name);
        self.frames.push(Frame {
            inode: entry.inode,
            path_len: self.path.len(),
            after: None,
            batch: VecDeque::new(),
            batch_bytes: 0,
            listed: false,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::FsConfig;
    use fsoc_media::{Profile, SimConfig, SimFlash};

    /// Every path a walk steps over, entering every directory, in order; or the first refusal.
    fn walk_paths<F: Flash>(
        fs: &mut FileSystem<F>,
        buffer_bytes_max: usize,
        depth_max: usize,
    ) -> Result<Vec<String>, String> {
        let mut walk = Walk::new(1, b"/", depth_max);
        walk.buffer_bytes_max = buffer_bytes_max;
        let mut paths = Vec::new();
        loop {
            match walk.next(fs) {
                Step::Done => return Ok(paths),
                Step::Leave => {}
                Step::Unreadable(error) => return Err(error.to_string()),
                Step::Entry(entry) => {
                    let path = walk.entry_path(&entry.name);
                    paths.push(String::from_utf8(path.clone()).expect("utf-8"));
                    if entry.kind == FileKind::Directory {
                        walk.enter(fs, &entry)
                            .map_err(|error| format!("{}: {}", String::from_utf8_lossy(&path), error.describe()))?;
                    }
                }
            }
        }
    }

    fn small_fs() -> FileSystem<SimFlash<fsoc_media::RamStore>> {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 256, 1)).expect("flash");
        FileSystem::format(flash, FsConfig::default(), 1).expect("format")
    }

    #[test]
    fn dropped_batches_are_read_again_without_loss_or_repeats() {
        let mut fs = small_fs();
        // More entries than a batch, with subdirectories among them, so walks descend from
        // the middle of a batch and must resume after the entry they descended into.
        for index in 0..600u32 {
            let name = format!("e{index:03}");
            if index % 7 == 0 {
                let inode = fs.create(1, name.as_bytes(), FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
                for inner in 0..3u32 {
                    fs.create(inode, format!("f{inner}").as_bytes(), FileKind::File, 0o644, 0, 0, None)
                        .expect("create");
                }
            } else {
                fs.create(1, name.as_bytes(), FileKind::File, 0o644, 0, 0, None).expect("create");
            }
        }
        let buffered = walk_paths(&mut fs, BUFFER_BYTES_MAX, DEPTH_MAX).expect("walk");
        let re_read = walk_paths(&mut fs, 0, DEPTH_MAX).expect("walk");
        assert_eq!(buffered.len(), 600 + 86 * 3);
        assert_eq!(buffered, re_read, "a walk that drops its batches steps over the same entries");
        assert_eq!(
            buffered[..5],
            ["/e000", "/e000/f0", "/e000/f1", "/e000/f2", "/e001"],
            "each directory's entries follow it"
        );
    }

    #[test]
    fn depth_is_bounded() {
        let mut fs = small_fs();
        let mut parent = 1;
        for _ in 0..10 {
            parent = fs.create(parent, b"d", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
        }
        assert_eq!(walk_paths(&mut fs, BUFFER_BYTES_MAX, 11).expect("walk").len(), 10);
        let refused = walk_paths(&mut fs, BUFFER_BYTES_MAX, 10).expect_err("one level too deep");
        assert!(refused.starts_with("/d/d/d/d/d/d/d/d/d/d: more than 10 nested directories"), "{refused}");
    }
}
