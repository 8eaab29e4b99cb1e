//! `fsoc put [-r] LOCAL... IMAGE:/path`: copies local files, links, special files and
//! directory trees into an image, iteratively (a deep local tree cannot overflow the stack),
//! with owners, modes, times, hard links (one inode, as many names as the local tree gives it
//! within the copy), holes of sparse files and extended attributes (POSIX ACLs and file
//! capabilities included: `copy_attributes`). `fsoc mkfs --from` builds a volume with the same
//! copy (`TreeCopy`), under its own `CopyRules`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use fsoc_core::fs::acl::{ACL_ACCESS_NAME, ACL_DEFAULT_NAME, ACL_GROUP, ACL_USER};
use fsoc_core::fs::xattrs::{check_xattr_name, XattrMode};
use fsoc_core::fs::{FileKind, FsError};
use indicatif::ProgressBar;

use crate::arguments::IdMap;
use crate::image_target::{join, parse_target};
use crate::names::{escaped, shown};
use crate::tools_cmd::{caller_ids, progress_bar, resolve, resolve_parent, Session, COPY_CHUNK_BYTES};

const ROOT_INODE: u64 = 1;

pub fn put(paths: &[String], recursive: bool) -> Result<(), String> {
    let (destination_text, sources) = paths.split_last().ok_or("put: give LOCAL... IMAGE:/path")?;
    let (image, destination) = parse_target(destination_text)?;
    for source in sources {
        let metadata = std::fs::symlink_metadata(source).map_err(|error| format!("{source}: {error}"))?;
        if metadata.is_dir() && !recursive {
            return Err(format!("{source}: is a directory (use -r)"));
        }
    }
    let mut session = Session::open(&image, true)?;
    let destination_kind = resolve(&mut session.fs, &destination);
    let into_directory = matches!(destination_kind, Ok((_, FileKind::Directory)));
    // A trailing slash names a directory, as for cp: `put notes.txt IMG:/Documents/` must not
    // create a file called Documents when the directory is missing.
    let names_directory = destination_text.ends_with('/') && destination != b"/";
    if names_directory && !into_directory {
        let error = match destination_kind {
            Err(FsError::NotFound) => "no such directory".to_string(),
            Ok(_) => "not a directory".to_string(),
            Err(error) => error.to_string(),
        };
        return Err(format!("{}:{}/: {error}", image.display(), shown(&destination)));
    }
    if sources.len() > 1 && !into_directory {
        return Err(session.error(&destination, FsError::NotDirectory));
    }
    let bar = progress_bar(0, "put");
    if !bar.is_hidden() {
        // A walk of the local trees only to size the bar: skipped when nobody sees the bar.
        bar.set_length(sources.iter().map(|source| local_tree_bytes(Path::new(source))).sum());
    }
    let mut copy = TreeCopy::new(CopyRules::for_put(), &bar);
    for source in sources {
        let source = Path::new(source);
        let target = if into_directory {
            let name = source.file_name().ok_or_else(|| format!("{}: has no file name", source.display()))?;
            join(&destination, name.as_bytes())
        } else {
            destination.clone()
        };
        copy.copy_tree(&mut session, source, &target)?;
    }
    bar.finish_and_clear();
    copy.report_unreadable();
    session.finish()
}

/// Whose owner copied entries get, and which times: what `put` and `mkfs --from` differ in.
pub struct CopyRules {
    pub owners: Owners,
    /// Times later than this (nanoseconds since the epoch) are stored as this
    /// (SOURCE_DATE_EPOCH, for reproducible images).
    pub time_max_ns: Option<i64>,
    /// Stop at the next entry once the user interrupts (Ctrl-C), for a caller that cleans up.
    pub interruptible: bool,
    /// The command warnings are signed with ("fsoc put: …").
    pub command: &'static str,
    /// Hold warnings for the caller (`TreeCopy::take_warnings`) instead of printing them:
    /// `mkfs --from` may copy a tree more than once and says only its last copy's.
    pub hold_warnings: bool,
}

/// Owners of copied entries.
pub enum Owners {
    /// The caller's (`put` as an ordinary user, like cp without -p).
    Caller { uid: u32, gid: u32 },
    /// The local entry's (`put` as root, like `cp -a`; `mkfs --from` always, as mke2fs -d),
    /// through the maps; with `squash` every owner is root:root. The maps apply to the users
    /// and groups that ACL entries name too (squash leaves those as they are).
    Local { squash: bool, uids: IdMap, gids: IdMap },
}

impl CopyRules {
    /// `put`'s rules: the local owners when run as root, else the caller's; times as they are.
    pub fn for_put() -> CopyRules {
        let (uid, gid) = caller_ids();
        let owners = if uid == 0 {
            Owners::Local { squash: false, uids: IdMap::default(), gids: IdMap::default() }
        } else {
            Owners::Caller { uid, gid }
        };
        CopyRules { owners, time_max_ns: None, interruptible: false, command: "put", hold_warnings: false }
    }

    /// Owner of a copied entry.
    fn owner(&self, metadata: &std::fs::Metadata) -> (u32, u32) {
        match &self.owners {
            Owners::Caller { uid, gid } => (*uid, *gid),
            Owners::Local { squash: true, .. } => (0, 0),
            Owners::Local { squash: false, uids, gids } => (uids.map(metadata.uid()), gids.map(metadata.gid())),
        }
    }

    /// Whether an entry keeps its local owner (so a directory that already exists in the image
    /// takes it too).
    fn keeps_owners(&self) -> bool {
        matches!(self.owners, Owners::Local { .. })
    }

    /// An ACL's value with the users and groups its entries name mapped (`--uid-map`,
    /// `--gid-map`), or as it is.
    fn mapped_acl(&self, value: Vec<u8>) -> Vec<u8> {
        match &self.owners {
            Owners::Local { squash: false, uids, gids } if !uids.is_empty() || !gids.is_empty() => {
                map_acl_ids(&value, uids, gids).unwrap_or(value)
            }
            _ => value,
        }
    }

    /// Access and modification times to store, in signed nanoseconds since the epoch (a time
    /// before 1970 is kept on format version 5 on; older volumes store the epoch).
    fn times(&self, metadata: &std::fs::Metadata) -> (i64, i64) {
        let nanos = |seconds: i64, nanoseconds: i64| {
            let time = seconds.saturating_mul(1_000_000_000).saturating_add(nanoseconds);
            self.time_max_ns.map_or(time, |max| time.min(max))
        };
        (nanos(metadata.atime(), metadata.atime_nsec()), nanos(metadata.mtime(), metadata.mtime_nsec()))
    }
}

/// The POSIX ACL xattr value `value` (version 2: a 4-byte header, then 8-byte entries of tag,
/// permissions and id) with the ids of its named-user and named-group entries mapped and the
/// entries put back in the order Linux requires (by tag, then id). `None` if it is not one.
fn map_acl_ids(value: &[u8], uids: &IdMap, gids: &IdMap) -> Option<Vec<u8>> {
    let (header, body) = value.split_at_checked(4)?;
    if body.len() % 8 != 0 {
        return None;
    }
    let mut entries: Vec<(u16, u16, u32)> = body
        .chunks_exact(8)
        .map(|entry| {
            let tag = u16::from_le_bytes([entry[0], entry[1]]);
            let permissions = u16::from_le_bytes([entry[2], entry[3]]);
            let id = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]);
            let id = match tag {
                ACL_USER => uids.map(id),
                ACL_GROUP => gids.map(id),
                _ => id,
            };
            (tag, permissions, id)
        })
        .collect();
    entries.sort_by_key(|&(tag, _, id)| (tag, id));
    let mut mapped = header.to_vec();
    for (tag, permissions, id) in entries {
        mapped.extend_from_slice(&tag.to_le_bytes());
        mapped.extend_from_slice(&permissions.to_le_bytes());
        mapped.extend_from_slice(&id.to_le_bytes());
    }
    Some(mapped)
}

/// What one copy made, for the report of `mkfs --from`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyTally {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Device nodes, FIFOs and sockets.
    pub special_files: u64,
    /// Names given to an inode already copied (a hard link).
    pub hard_links: u64,
    /// Bytes of file content (each inode once), holes included.
    pub bytes: u64,
}

/// One copy of local trees into an image: the rules, what it made and the state it keeps
/// across entries (the hard links met, the attribute troubles said once).
pub struct TreeCopy<'b> {
    rules: CopyRules,
    bar: &'b ProgressBar,
    attributes: AttributeCopy,
    /// Local non-directories with more than one link, already copied: (device, inode) to the
    /// image's inode. One entry per such inode of the copied trees.
    links: BTreeMap<(u64, u64), u64>,
    pub tally: CopyTally,
}

impl<'b> TreeCopy<'b> {
    pub fn new(rules: CopyRules, bar: &'b ProgressBar) -> TreeCopy<'b> {
        let attributes = AttributeCopy {
            command: rules.command,
            held: rules.hold_warnings.then(Vec::new),
            ..AttributeCopy::default()
        };
        TreeCopy { rules, bar, attributes, links: BTreeMap::new(), tally: CopyTally::default() }
    }

    /// Says, on one line, what attributes could not be read (if any).
    pub fn report_unreadable(&mut self) {
        self.attributes.report_unreadable(self.bar);
    }

    /// The warnings held (`CopyRules::hold_warnings`), the line of `report_unreadable` last.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.report_unreadable();
        self.attributes.held.take().unwrap_or_default()
    }

    /// Copies a local file, link or directory tree to `target` (`/` for the volume's root
    /// directory, which takes the local directory's owner, mode, times and attributes),
    /// iteratively (a stack of work, not recursion), so a deeply nested local tree cannot
    /// overflow the stack. Each directory's entries are copied in name order, so the same tree
    /// is always copied in the same order, whatever order the host lists it in.
    pub fn copy_tree(&mut self, session: &mut Session, source: &Path, target: &[u8]) -> Result<(), String> {
        let mut pending = vec![PutWork::Copy { source: source.to_path_buf(), target: target.to_vec() }];
        while let Some(work) = pending.pop() {
            if self.rules.interruptible && crate::interrupts::interrupted() {
                return Err("interrupted".into());
            }
            match work {
                PutWork::Finish { source, inode, metadata, target } => {
                    self.attributes.copy_attributes(
                        session,
                        &source,
                        &metadata,
                        inode,
                        &target,
                        self.bar,
                        &self.rules,
                    )?;
                    self.set_times(session, &source, inode, &metadata, &target)?;
                }
                PutWork::Copy { source, target } => {
                    let Some((inode, metadata)) = self.put_one(session, &source, &target)? else { continue };
                    let mut entries: Vec<PathBuf> = std::fs::read_dir(&source)
                        .map_err(|error| format!("{}: {error}", source.display()))?
                        .map(|entry| entry.map(|entry| entry.path()))
                        .collect::<Result<_, _>>()
                        .map_err(|error| format!("{}: {error}", source.display()))?;
                    entries.sort();
                    pending.push(PutWork::Finish { source: source.clone(), inode, metadata, target: target.clone() });
                    // Reversed, so the stack hands them out in name order.
                    for entry in entries.into_iter().rev() {
                        let name = entry.file_name().ok_or_else(|| format!("{}: has no file name", entry.display()))?;
                        let entry_target = join(&target, name.as_bytes());
                        pending.push(PutWork::Copy { source: entry, target: entry_target });
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies one local file, link or special file, or creates (or reuses) one directory: then
    /// returns its inode and local metadata, for its entries to be copied into it (and its
    /// attributes and times set after them). A second name of a local inode already copied
    /// becomes a hard link to the image's inode.
    fn put_one(
        &mut self,
        session: &mut Session,
        source: &Path,
        target: &[u8],
    ) -> Result<Option<(u64, std::fs::Metadata)>, String> {
        let metadata = std::fs::symlink_metadata(source).map_err(|error| format!("{}: {error}", source.display()))?;
        let (uid, gid) = self.rules.owner(&metadata);
        let mode = metadata.mode() & 0o7777;
        let file_type = metadata.file_type();
        if target.iter().all(|&byte| byte == b'/') {
            if !file_type.is_dir() {
                return Err(format!("{}: is not a directory; the root of a volume is one", source.display()));
            }
            self.keep_owner(session, ROOT_INODE, (uid, gid), target)?;
            self.tally.directories += 1;
            return Ok(Some((ROOT_INODE, metadata)));
        }
        let (parent, name) = resolve_parent(&mut session.fs, target).map_err(|error| session.error(target, error))?;
        let existing = match session.fs.lookup(parent, name) {
            Ok(found) => Some(found),
            Err(FsError::NotFound) => None,
            Err(error) => return Err(session.error(target, error)),
        };
        // Whatever is in the way of a non-directory goes, unless it is a directory.
        let clear_the_way = |session: &mut Session| -> Result<(), String> {
            match existing {
                Some((_, FileKind::Directory)) => Err(session.error(target, FsError::IsDirectory)),
                Some(_) => session.fs.remove(parent, name, false).map_err(|error| session.error(target, error)),
                None => Ok(()),
            }
        };
        let link_key = (!file_type.is_dir() && metadata.nlink() > 1).then(|| (metadata.dev(), metadata.ino()));
        if let Some(&inode) = link_key.as_ref().and_then(|key| self.links.get(key)) {
            if existing.is_some_and(|(existing, _)| existing == inode) {
                return Ok(None);
            }
            clear_the_way(session)?;
            session.fs.link(inode, parent, name).map_err(|error| session.error(target, error))?;
            self.tally.hard_links += 1;
            return Ok(None);
        }
        if file_type.is_symlink() {
            let link = std::fs::read_link(source).map_err(|error| format!("{}: {error}", source.display()))?;
            clear_the_way(session)?;
            let link = link.as_os_str().as_bytes();
            let inode = session
                .fs
                .create(parent, name, FileKind::Symlink, 0o777, uid, gid, Some(link))
                .map_err(|error| session.error(target, error))?;
            self.finish_entry(session, source, &metadata, inode, target, link_key)?;
            self.tally.symlinks += 1;
            return Ok(None);
        }
        if file_type.is_dir() {
            let inode = match existing {
                Some((inode, FileKind::Directory)) => {
                    self.keep_owner(session, inode, (uid, gid), target)?;
                    inode
                }
                Some(_) => return Err(session.error(target, FsError::Exists)),
                None => session
                    .fs
                    .create(parent, name, FileKind::Directory, mode, uid, gid, None)
                    .map_err(|error| session.error(target, error))?,
            };
            self.tally.directories += 1;
            return Ok(Some((inode, metadata)));
        }
        if !file_type.is_file() {
            use std::os::unix::fs::FileTypeExt;
            let kind = if file_type.is_char_device() {
                FileKind::CharDevice
            } else if file_type.is_block_device() {
                FileKind::BlockDevice
            } else if file_type.is_fifo() {
                FileKind::Fifo
            } else if file_type.is_socket() {
                FileKind::Socket
            } else {
                let message = format!("skipping {}: not a file type fsoc stores", source.display());
                self.attributes.say(self.bar, message);
                return Ok(None);
            };
            clear_the_way(session)?;
            let inode = session
                .fs
                .create_special(parent, name, kind, mode, uid, gid, metadata.rdev())
                .map_err(|error| session.error(target, error))?;
            self.finish_entry(session, source, &metadata, inode, target, link_key)?;
            self.tally.special_files += 1;
            return Ok(None);
        }
        let inode = match existing {
            Some((inode, FileKind::File)) => {
                session.fs.truncate(inode, 0).map_err(|error| session.error(target, error))?;
                self.keep_owner(session, inode, (uid, gid), target)?;
                inode
            }
            _ => {
                clear_the_way(session)?;
                session
                    .fs
                    .create(parent, name, FileKind::File, mode, uid, gid, None)
                    .map_err(|error| session.error(target, error))?
            }
        };
        self.copy_contents(session, source, &metadata, inode, target)?;
        // After the content: a write is what takes a file capability away.
        self.finish_entry(session, source, &metadata, inode, target, link_key)?;
        self.tally.files += 1;
        self.tally.bytes += metadata.len();
        Ok(None)
    }

    /// Sets the attributes and times of a non-directory just made, and remembers it when the
    /// local tree has more names for it.
    /// An entry that already exists in the image takes the local owner, when the rules keep
    /// owners (a new one is made with it).
    fn keep_owner(
        &self,
        session: &mut Session,
        inode: u64,
        (uid, gid): (u32, u32),
        target: &[u8],
    ) -> Result<(), String> {
        if self.rules.keeps_owners() {
            session
                .fs
                .setattr(inode, None, Some(uid), Some(gid), None, None)
                .map_err(|error| session.error(target, error))?;
        }
        Ok(())
    }

    fn finish_entry(
        &mut self,
        session: &mut Session,
        source: &Path,
        metadata: &std::fs::Metadata,
        inode: u64,
        target: &[u8],
        link_key: Option<(u64, u64)>,
    ) -> Result<(), String> {
        self.attributes.copy_attributes(session, source, metadata, inode, target, self.bar, &self.rules)?;
        self.set_times(session, source, inode, metadata, target)?;
        if let Some(key) = link_key {
            self.links.insert(key, inode);
        }
        Ok(())
    }

    /// Copies a local file's content into the image's (empty) `inode`: only its data, so a
    /// hole stays a hole (SEEK_DATA and SEEK_HOLE; a file system without them is all data),
    /// read without changing the local access time where the host lets us (O_NOATIME).
    fn copy_contents(
        &mut self,
        session: &mut Session,
        source: &Path,
        metadata: &std::fs::Metadata,
        inode: u64,
        target: &[u8],
    ) -> Result<(), String> {
        let local = |error: std::io::Error| format!("{}: {error}", source.display());
        let open = |flags: i32| std::fs::OpenOptions::new().read(true).custom_flags(flags).open(source);
        let file = match open(libc::O_NOATIME) {
            Err(error) if error.raw_os_error() == Some(libc::EPERM) => open(0),
            opened => opened,
        }
        .map_err(local)?;
        let size = metadata.len();
        let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
        let mut offset = 0u64;
        let mut end = 0u64;
        while offset < size {
            let (data, hole) = match data_run(&file, offset, size) {
                Ok(Some(run)) => run,
                Ok(None) => break,
                Err(error) => return Err(local(error)),
            };
            self.bar.inc(data - offset);
            let mut position = data;
            while position < hole {
                let wanted = usize::try_from(hole - position).unwrap_or(usize::MAX).min(buffer.len());
                let count = file.read_at(&mut buffer[..wanted], position).map_err(local)?;
                if count == 0 {
                    break; // shrunk since it was listed: copy what there is
                }
                let written = session
                    .fs
                    .write(inode, position, &buffer[..count])
                    .map_err(|error| session.error(target, error))?;
                if written != count {
                    return Err(session.error(target, FsError::NoSpace));
                }
                position += count as u64;
                end = position;
                self.bar.inc(count as u64);
            }
            if position < hole {
                break;
            }
            offset = hole;
        }
        self.bar.inc(size.saturating_sub(offset));
        if end < size {
            // A hole at the end: the size, without data pages.
            session.fs.truncate(inode, size).map_err(|error| session.error(target, error))?;
        }
        Ok(())
    }

    /// Sets the times of the image's `inode` from the local `source`'s, as they are now that
    /// the copy has read it (listing a directory or reading a link may change its access time:
    /// taken after that, the time stored is the same whenever the tree is copied again, and
    /// SOURCE_DATE_EPOCH clamps it), or from `metadata` if it is gone.
    fn set_times(
        &self,
        session: &mut Session,
        source: &Path,
        inode: u64,
        metadata: &std::fs::Metadata,
        target: &[u8],
    ) -> Result<(), String> {
        let now = std::fs::symlink_metadata(source);
        let (atime_ns, mtime_ns) = self.rules.times(now.as_ref().unwrap_or(metadata));
        session
            .fs
            .setattr(inode, None, None, None, Some(atime_ns), Some(mtime_ns))
            .map_err(|error| session.error(target, error))?;
        Ok(())
    }
}

/// The next run of data at or after `offset` in a local file of `size` bytes, as (start, end):
/// `None` when only a hole follows. A file system that cannot tell holes is all data.
fn data_run(file: &File, offset: u64, size: u64) -> std::io::Result<Option<(u64, u64)>> {
    let seek = |from: u64, whence: i32| -> std::io::Result<Option<u64>> {
        let from = libc::off_t::try_from(from).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: lseek on a descriptor `file` owns; no memory is passed.
        let found = unsafe { libc::lseek(file.as_raw_fd(), from, whence) };
        if found < 0 {
            let error = std::io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENXIO) => Ok(None),
                _ => Err(error),
            };
        }
        Ok(Some(found as u64))
    };
    let data = match seek(offset, libc::SEEK_DATA) {
        Ok(Some(data)) => data.min(size),
        Ok(None) => return Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => return Ok(Some((offset, size))),
        Err(error) => return Err(error),
    };
    if data >= size {
        return Ok(None);
    }
    let hole = seek(data, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
    Ok(Some((data, hole.max(data))))
}

/// Bytes in the regular files under `path` (for the progress bar; unreadable parts count 0).
/// Iterative, so a deeply nested local tree cannot overflow the stack; links are not followed.
pub fn local_tree_bytes(path: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![path.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
        if metadata.is_file() {
            total += metadata.len();
        } else if metadata.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.filter_map(Result::ok).map(|entry| entry.path()));
            }
        }
    }
    total
}

/// What is left to do for `copy_tree`.
enum PutWork {
    /// Copy the local `source` to `target` in the image.
    Copy { source: PathBuf, target: Vec<u8> },
    /// Set a copied directory's attributes and times, once everything in it is copied (so
    /// its default ACL is not inherited by what is copied into it, which has its own).
    Finish { source: PathBuf, inode: u64, metadata: std::fs::Metadata, target: Vec<u8> },
}

// ----- extended attributes ----------------------------------------------------------------------

/// One extended attribute: its name (namespace prefix included) and value.
type Xattr = (Vec<u8>, Vec<u8>);

/// The extended attributes of a local entry, read without following a link.
struct LocalAttributes {
    /// The ones fsoc keeps (user., trusted., security. and the two POSIX ACLs), in the host's
    /// list order.
    kept: Vec<Xattr>,
    /// Names the host would not let us read: an image attribute of that name is left alone.
    unreadable: Vec<Vec<u8>>,
}

/// What `put` does with extended attributes over one run, and what it could not copy: each
/// kind of trouble is said on one line, not once per file.
#[derive(Default)]
struct AttributeCopy {
    /// The volume answered that it keeps no attributes (a format older than version 4): said
    /// once, and no more are read or tried.
    volume_keeps_none: bool,
    /// Attributes the host would not let us read (trusted.* needs root): how many, and the
    /// first, for the line `report_unreadable` prints at the end.
    unreadable: u64,
    first_unreadable: Option<String>,
    /// Names outside the namespaces fsoc keeps (another system.* attribute), each said once.
    foreign_names: BTreeSet<Vec<u8>>,
    /// The command warnings are signed with (`put` when empty).
    command: &'static str,
    /// Warnings held for the caller (`CopyRules::hold_warnings`).
    held: Option<Vec<String>>,
}

impl AttributeCopy {
    /// Makes the extended attributes of the image's `inode`, just copied from the local
    /// `source`, the local entry's, and its mode the local one (also where the image's
    /// directory gave it a default ACL to inherit). In this order, as Linux ties ACLs to the
    /// mode: attributes the local entry lacks are removed (an inherited ACL, or what a
    /// replaced file had); the mode is set; the other attributes are set; then the default ACL
    /// and last the access ACL, which sets the mode's permission bits from its list, so the
    /// mode is checked against the local one after it. Attributes are set in name order
    /// (whatever order the host lists them in), ACLs with the ids `rules` map.
    #[allow(clippy::too_many_arguments)]
    fn copy_attributes(
        &mut self,
        session: &mut Session,
        source: &Path,
        metadata: &std::fs::Metadata,
        inode: u64,
        target: &[u8],
        bar: &ProgressBar,
        rules: &CopyRules,
    ) -> Result<(), String> {
        let local = if self.volume_keeps_none {
            LocalAttributes { kept: Vec::new(), unreadable: Vec::new() }
        } else {
            self.local_attributes(source, bar)?
        };
        if !self.volume_keeps_none {
            let listed = session.fs.list_xattrs(inode).map_err(|error| session.error(target, error))?;
            for name in listed.split(|&byte| byte == 0).filter(|name| !name.is_empty()) {
                let wanted = local.kept.iter().any(|(kept, _)| kept == name);
                if wanted || local.unreadable.iter().any(|unreadable| unreadable == name) {
                    continue;
                }
                match session.fs.remove_xattr(inode, name) {
                    Ok(()) | Err(FsError::NoAttribute) => {}
                    Err(error) => return Err(session.error(target, error)),
                }
            }
        }
        let mode = metadata.mode() & 0o7777;
        let is_symlink = metadata.file_type().is_symlink();
        if !is_symlink {
            let record = session.fs.getattr(inode).map_err(|error| session.error(target, error))?;
            if record.mode & 0o7777 != mode {
                session
                    .fs
                    .setattr(inode, Some(mode), None, None, None, None)
                    .map_err(|error| session.error(target, error))?;
            }
        }
        let mut kept = local.kept;
        for (name, value) in &mut kept {
            if name == ACL_ACCESS_NAME || name == ACL_DEFAULT_NAME {
                *value = rules.mapped_acl(std::mem::take(value));
            }
        }
        kept.sort();
        // Stable: name order, but the default ACL after the rest and the access ACL last.
        kept.sort_by_key(|(name, _)| match &name[..] {
            ACL_ACCESS_NAME => 2,
            ACL_DEFAULT_NAME => 1,
            _ => 0,
        });
        let mut access_acl_set = false;
        for (name, value) in &kept {
            match session.fs.set_xattr(inode, name, value, XattrMode::Any) {
                Ok(()) => access_acl_set |= name == ACL_ACCESS_NAME,
                Err(FsError::NotSupported) => {
                    self.volume_keeps_none = true;
                    let version = session.fs.superblock().format_version;
                    self.say(
                        bar,
                        format!(
                            "the volume (format version {version}) keeps no extended attributes; they were not copied"
                        ),
                    );
                    return Ok(());
                }
                // What fsoc refuses of one attribute (as Linux would): that one is not copied.
                Err(
                    error @ (FsError::NotPermitted
                    | FsError::AccessDenied
                    | FsError::InvalidArgument(_)
                    | FsError::OutOfRange
                    | FsError::TooBig),
                ) => {
                    let message = session.error(target, error);
                    self.say(bar, format!("extended attribute {} not copied: {message}", escaped(name)));
                }
                Err(error) => return Err(session.error(target, error)),
            }
        }
        if access_acl_set {
            let record = session.fs.getattr(inode).map_err(|error| session.error(target, error))?;
            if record.mode & 0o7777 != mode {
                let image_path = format!("{}:{}", session.image.display(), shown(target));
                let message = format!(
                    "{image_path}: its access ACL left mode {:o}, not {mode:o} as {} has",
                    record.mode & 0o7777,
                    source.display()
                );
                self.say(bar, message);
            }
        }
        Ok(())
    }

    /// Reads the extended attributes of the local `source`, not following a link. A local
    /// file system without attributes has none; a name the host will not let us read is
    /// counted (for `report_unreadable`) and skipped; a name fsoc keeps no attribute under is
    /// said once per run and skipped.
    fn local_attributes(&mut self, source: &Path, bar: &ProgressBar) -> Result<LocalAttributes, String> {
        let path =
            CString::new(source.as_os_str().as_bytes()).map_err(|_| format!("{}: contains NUL", source.display()))?;
        let listed = sized_read(|buffer, size| {
            // SAFETY: a NUL-terminated path, and a buffer of `size` bytes (or null with 0).
            unsafe { libc::llistxattr(path.as_ptr(), buffer.cast(), size) }
        });
        let names = match listed {
            Ok(names) => names,
            Err(error) if error.raw_os_error() == Some(libc::EOPNOTSUPP) => Vec::new(),
            Err(error) => return Err(format!("{}: listing extended attributes: {error}", source.display())),
        };
        let mut local = LocalAttributes { kept: Vec::new(), unreadable: Vec::new() };
        for name in names.split(|&byte| byte == 0).filter(|name| !name.is_empty()) {
            if check_xattr_name(name).is_err() {
                if self.foreign_names.insert(name.to_vec()) {
                    let message = format!(
                        "extended attribute {} (first on {}) is not copied: fsoc keeps user., trusted. and security. attributes and POSIX ACLs",
                        escaped(name),
                        source.display()
                    );
                    self.say(bar, message);
                }
                continue;
            }
            let c_name =
                CString::new(name).map_err(|_| format!("{}: attribute name contains NUL", source.display()))?;
            let value = sized_read(|buffer, size| {
                // SAFETY: NUL-terminated path and name, and a buffer of `size` bytes (or null with 0).
                unsafe { libc::lgetxattr(path.as_ptr(), c_name.as_ptr(), buffer.cast(), size) }
            });
            match value {
                Ok(value) => local.kept.push((name.to_vec(), value)),
                // Removed since it was listed: nothing to copy.
                Err(error) if error.raw_os_error() == Some(libc::ENODATA) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EACCES | libc::EOPNOTSUPP)) => {
                    self.unreadable += 1;
                    self.first_unreadable
                        .get_or_insert_with(|| format!("{} of {}: {error}", escaped(name), source.display()));
                    local.unreadable.push(name.to_vec());
                }
                Err(error) => {
                    return Err(format!("{}: extended attribute {}: {error}", source.display(), escaped(name)))
                }
            }
        }
        Ok(local)
    }

    /// One line for the attributes the host would not let us read, if any.
    fn report_unreadable(&mut self, bar: &ProgressBar) {
        if let Some(first) = self.first_unreadable.take() {
            let count = self.unreadable;
            let what = if count == 1 { "attribute" } else { "attributes" };
            self.say(
                bar,
                format!(
                    "{count} extended {what} could not be read here and were not copied (trusted.* needs root); the first: {first}"
                ),
            );
        }
    }

    /// A warning: printed now (above the progress bar), or held for the caller.
    fn say(&mut self, bar: &ProgressBar, message: String) {
        let line = format!("fsoc {}: {message}", if self.command.is_empty() { "put" } else { self.command });
        match &mut self.held {
            Some(held) => held.push(line),
            None => bar.suspend(|| eprintln!("{line}")),
        }
    }
}

/// Reads a list or a value of unknown size with a call made as llistxattr and lgetxattr are:
/// once with no buffer for the size, then with a buffer of that size (again if it grew in
/// between, ERANGE). The call returns the bytes it gave or -1 with errno set.
fn sized_read(mut call: impl FnMut(*mut u8, usize) -> isize) -> std::io::Result<Vec<u8>> {
    loop {
        let size = call(std::ptr::null_mut(), 0);
        if size < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buffer = vec![0u8; size as usize];
        let read = call(buffer.as_mut_ptr(), buffer.len());
        if read >= 0 {
            buffer.truncate(read as usize);
            return Ok(buffer);
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ERANGE) {
            return Err(error);
        }
    }
}
