//! `fsoc get [-r] IMAGE:/path LOCAL`: copies out of an image. Nothing is ever written outside
//! LOCAL: names from the image are checked (names.rs), the walk follows no cycle (image_walk.rs),
//! and everything is created relative to an open directory with O_NOFOLLOW. With --keep-going
//! a damaged image gives up what cannot be read and everything else. Owners (as root), modes,
//! times and extended attributes (POSIX ACLs and file capabilities included) are restored as
//! far as the host lets us (`Extraction::restore_metadata`), and the names of one inode in
//! the extracted tree become hard links of one local file.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use fsoc_core::fs::acl::{ACL_ACCESS_NAME, ACL_DEFAULT_NAME};
use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fsoc_core::FileSystem;
use indicatif::ProgressBar;

use crate::image_target::{parse_target, split_last};
use crate::image_walk::{Step, Walk, DEPTH_MAX};
use crate::names::{escaped, invalid_name_reason, shown};
use crate::tools_cmd::{bad_name, progress_bar, resolve, Session, COPY_CHUNK_BYTES};
use crate::volume_files::VolumeFlash;

#[derive(Clone, Copy)]
pub struct GetOptions {
    pub recursive: bool,
    pub keep_going: bool,
    pub skip_bad_names: bool,
}

/// Why one entry could not be extracted: the image's fault (skippable with --keep-going) or
/// the local side's (always fatal).
enum ExtractError {
    Image(String),
    Local(String),
}

pub fn get(source_text: &str, destination: &Path, options: GetOptions) -> Result<(), String> {
    let (image, source) = parse_target(source_text)?;
    let mut session = Session::open(&image, false)?;
    let (inode, kind) = resolve(&mut session.fs, &source).map_err(|error| session.error(&source, error))?;
    if kind == FileKind::Directory && !options.recursive {
        return Err(session.error(&source, FsError::IsDirectory).replace("is a directory", "is a directory (use -r)"));
    }
    // The destination is the user's: it may be followed. Below it nothing from the image is.
    let (parent, name) = if destination.is_dir() {
        let name = split_last(&source).map_or(&b"root"[..], |(_, name)| name).to_vec();
        (destination.to_path_buf(), name)
    } else {
        let name = destination.file_name().ok_or_else(|| format!("{}: not a file name", destination.display()))?;
        let parent = destination.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        (parent.to_path_buf(), name.as_bytes().to_vec())
    };
    let parent_fd = open_directory(None, parent.as_os_str().as_bytes(), true)
        .map_err(|error| format!("{}: {error}", parent.display()))?;
    let bar = progress_bar(0, "get");
    if !bar.is_hidden() {
        // A second walk of the tree only to size the bar: skipped when nobody sees the bar.
        bar.set_length(image_tree_bytes(&mut session.fs, inode, kind));
    }
    let depth_max = extract_depth_max();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let restore_owners = unsafe { libc::geteuid() } == 0;
    let mut extraction = Extraction {
        session: &mut session,
        bar: &bar,
        options,
        failures: 0,
        depth_max,
        refused: RefusedAttributes::default(),
        restore_owners,
        linked: BTreeMap::new(),
        linked_bytes: 0,
    };
    let result = extraction.extract(&parent_fd, &name, &source, inode, kind);
    let failures = extraction.failures;
    let refused = extraction.refused;
    bar.finish_and_clear();
    // A warning, not a failure: the files are all there (trusted.* and security.* need root).
    refused.report();
    result?;
    session.finish()?;
    match failures {
        0 => Ok(()),
        1 => Err(format!(
            "1 entry of {} could not be extracted and was skipped (named above); everything else was",
            image.display()
        )),
        _ => Err(format!(
            "{failures} entries of {} could not be extracted and were skipped (named above); everything else was",
            image.display()
        )),
    }
}

/// Bytes in the files under `inode`, for the progress bar (unreadable parts count 0). The
/// walk skips what the extraction refuses; the extraction reports it.
fn image_tree_bytes(fs: &mut FileSystem<VolumeFlash>, inode: u64, kind: FileKind) -> u64 {
    match kind {
        FileKind::File => return fs.getattr(inode).map_or(0, |record| record.size),
        FileKind::Directory => {}
        _ => return 0,
    }
    let mut total = 0;
    let mut walk = Walk::new(inode, b"", DEPTH_MAX);
    loop {
        match walk.next(fs) {
            Step::Done => return total,
            Step::Entry(entry) if invalid_name_reason(&entry.name).is_none() => match entry.kind {
                FileKind::File => total += fs.getattr(entry.inode).map_or(0, |record| record.size),
                FileKind::Directory => {
                    let _ = walk.enter(fs, &entry);
                }
                _ => {}
            },
            Step::Entry(_) | Step::Leave | Step::Unreadable(_) => {}
        }
    }
}

/// Deepest tree `get -r` extracts. It holds one open local directory per level (so nothing
/// is ever reached through a path that could have been swapped for a link), hence the limit
/// is what the open-file limit allows, raised to its hard maximum first, and at most DEPTH_MAX.
fn extract_depth_max() -> usize {
    /// Descriptors kept for everything else (the image, standard streams, the allocator).
    const SPARE_DESCRIPTORS: u64 = 64;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 256;
    }
    let wanted = limit.rlim_max.min(DEPTH_MAX as u64 + SPARE_DESCRIPTORS);
    if wanted > limit.rlim_cur {
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the
        // hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = wanted;
        }
    }
    (limit.rlim_cur.saturating_sub(SPARE_DESCRIPTORS) as usize).clamp(16, DEPTH_MAX)
}

struct Extraction<'a> {
    session: &'a mut Session,
    bar: &'a ProgressBar,
    options: GetOptions,
    failures: u64,
    depth_max: usize,
    refused: RefusedAttributes,
    /// Whether owners are restored: as root only (like tar), since nobody else may give a
    /// file away.
    restore_owners: bool,
    /// Inodes of the image with more than one name, already extracted: where (the names
    /// below the extracted tree's top), so their other names become hard links of it. One
    /// entry per such inode met.
    linked: BTreeMap<u64, Vec<Vec<u8>>>,
    /// What `linked` holds, about (names, their vectors and the map's entries).
    linked_bytes: usize,
}

/// Extended attributes the host would not take (trusted.* and security.* need root; the
/// destination's file system may keep fewer or smaller ones): counted, and said on one line
/// at the end with the first, not once per file.
#[derive(Default)]
struct RefusedAttributes {
    count: u64,
    first: Option<String>,
    /// Owners the host would not set (EINVAL: an id the user namespace does not map; EPERM).
    owners: u64,
    first_owner: Option<String>,
    /// Inodes met past LINKED_BYTES_MAX, not tracked for hard links.
    links_beyond: u64,
}

impl RefusedAttributes {
    /// Counts a refusal the host may make of one attribute; any other error is the caller's.
    fn note(&mut self, source: &[u8], name: &[u8], error: std::io::Error) -> Result<(), ExtractError> {
        let refusal = [
            libc::EPERM,      // trusted.* and security.* as non-root
            libc::EACCES,     // not our file
            libc::EOPNOTSUPP, // a namespace or ACLs the destination's file system does not keep
            libc::E2BIG,      // larger than it keeps
            libc::ENOSPC,     // ext4 without ea_inode: a value that fits no block
            libc::ERANGE,
            libc::EINVAL, // a value the host will not parse (an ACL or capability)
            libc::ENOENT, // a link or node reached through /proc/self/fd without /proc
        ];
        if !error.raw_os_error().is_some_and(|errno| refusal.contains(&errno)) {
            return Err(ExtractError::Local(format!(
                "{}: extended attribute {}: {error}",
                shown(source),
                escaped(name)
            )));
        }
        self.count += 1;
        self.first.get_or_insert_with(|| format!("{} of {}: {error}", escaped(name), shown(source)));
        Ok(())
    }

    fn report(&self) {
        if let Some(first) = &self.first {
            let what = if self.count == 1 { "attribute" } else { "attributes" };
            eprintln!(
                "fsoc get: {} extended {what} could not be restored here and were skipped (trusted.* and security.* need root); the first: {first}",
                self.count
            );
        }
        if let Some(first) = &self.first_owner {
            eprintln!(
                "fsoc get: {} owners could not be restored here and were left as they are (ids this user namespace does not map); the first: {first}",
                self.owners
            );
        }
        if self.links_beyond > 0 {
            eprintln!(
                "fsoc get: the other names of {} hard-linked files were extracted as copies: the tree has more such files than get keeps track of ({LINKED_BYTES_MAX} bytes of names)",
                self.links_beyond
            );
        }
    }
}

/// Bytes of names `get -r` keeps to make hard links (the path of each inode of the image with
/// more than one name, below the extracted tree's top): memory stays bounded whatever an image
/// claims; past it, further names are extracted as copies (said once).
const LINKED_BYTES_MAX: usize = 16 << 20;

/// A local file, directory, link or node whose extended attributes are being restored.
enum LocalNode<'a> {
    /// A file or directory open for writing or reading: fsetxattr, fchmod, futimens.
    Open(&'a OwnedFd),
    /// A link or a special node, opened with O_PATH|O_NOFOLLOW (fsetxattr refuses such a
    /// descriptor, and opening a device or FIFO for reading would do more than name it): its
    /// /proc/self/fd path, which setxattr and chmod follow to the node itself and never beyond
    /// it.
    Path { fd: OwnedFd, path: CString, symlink: bool },
}

impl LocalNode<'_> {
    /// `name` in `parent`, opened with O_PATH|O_NOFOLLOW (`symlink`: it is a symbolic link).
    fn path_of(parent: &OwnedFd, name: &CStr, symlink: bool) -> std::io::Result<LocalNode<'static>> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let raw = unsafe { libc::openat(parent.as_raw_fd(), name.as_ptr(), flags) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = CString::new(format!("/proc/self/fd/{raw}"))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(LocalNode::Path { fd, path, symlink })
    }

    /// Gives the node to `uid`:`gid` (the node itself, never what a link names).
    fn chown(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        let done = match self {
            // SAFETY: a valid descriptor.
            LocalNode::Open(fd) => unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) },
            // SAFETY: a valid O_PATH descriptor and an empty NUL-terminated name.
            LocalNode::Path { fd, .. } => unsafe {
                libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
            },
        };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets the mode (a symbolic link has none of its own to set).
    fn chmod(&self, mode: u32) -> std::io::Result<()> {
        let done = match self {
            // SAFETY: a valid descriptor.
            LocalNode::Open(fd) => unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) },
            LocalNode::Path { symlink: true, .. } => 0,
            // SAFETY: a NUL-terminated /proc/self/fd path of a node we hold open.
            LocalNode::Path { path, .. } => unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) },
        };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn set(&self, name: &CStr, value: &[u8]) -> std::io::Result<()> {
        let done = match self {
            // SAFETY: a valid descriptor, a NUL-terminated name and `value.len()` bytes.
            LocalNode::Open(fd) => unsafe {
                libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0)
            },
            // SAFETY: NUL-terminated path and name, and `value.len()` bytes.
            LocalNode::Path { path, .. } => unsafe {
                libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0)
            },
        };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn remove(&self, name: &CStr) -> std::io::Result<()> {
        let done = match self {
            // SAFETY: a valid descriptor and a NUL-terminated name.
            LocalNode::Open(fd) => unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) },
            // SAFETY: NUL-terminated path and name.
            LocalNode::Path { path, .. } => unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) },
        };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Extraction<'_> {
    fn image_error(&self, path: &[u8], error: FsError) -> ExtractError {
        ExtractError::Image(self.session.error(path, error))
    }

    /// The names of `inode`'s extended attributes in the image, each followed by a NUL (none
    /// on a volume older than format version 4).
    fn attribute_names(&self, source: &[u8], inode: u64) -> Result<Vec<u8>, ExtractError> {
        self.session.fs.list_xattrs(inode).map_err(|error| self.image_error(source, error))
    }

    /// Restores the metadata of an open local file or directory from the image's `inode`
    /// (`restore_metadata`). When the image's list of attributes cannot be read, the mode and
    /// times are still set and the error returned after them.
    fn restore_open(
        &mut self,
        fd: &OwnedFd,
        source: &[u8],
        inode: u64,
        record: &InodeRecord,
    ) -> Result<(), ExtractError> {
        let names = self.attribute_names(source, inode);
        let listed = names.as_deref().unwrap_or_default();
        let restored = self.restore_metadata(&LocalNode::Open(fd), source, inode, listed, Some(record));
        match (names, restored) {
            // A local failure is fatal: it goes first.
            (_, Err(error @ ExtractError::Local(_))) | (Err(error), _) => Err(error),
            (Ok(_), restored) => restored,
        }
    }

    /// Restores `inode`'s extended attributes (`names`, from `attribute_names`) on the local
    /// `node` and, given its `record`, its owner (as root), mode and (for an open file or
    /// directory; `restore_node` sets a link's or node's) times. In
    /// this order, as Linux ties ACLs to the mode: an ACL the local node inherited from its
    /// directory and the image lacks is removed; the other attributes are set (while the
    /// local permissions still let us write them); the mode; then the default ACL and the
    /// access ACL, whose mask is the mode's group bits already; the times last (setting an
    /// attribute changes only the ctime). One value is held at a time, so memory stays
    /// bounded whatever the image holds. An error reading the image is returned after the
    /// mode and times are set.
    fn restore_metadata(
        &mut self,
        node: &LocalNode<'_>,
        source: &[u8],
        inode: u64,
        names: &[u8],
        record: Option<&InodeRecord>,
    ) -> Result<(), ExtractError> {
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let is_acl = |name: &[u8]| name == ACL_ACCESS_NAME || name == ACL_DEFAULT_NAME;
        if let (true, Some(record)) = (self.restore_owners, record) {
            // First: a change of owner takes set-id bits and file capabilities away.
            match node.chown(record.uid, record.gid) {
                Ok(()) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EPERM)) => {
                    self.refused.owners += 1;
                    self.refused
                        .first_owner
                        .get_or_insert_with(|| format!("{}:{} of {}: {error}", record.uid, record.gid, shown(source)));
                }
                Err(error) => return Err(local(error)),
            }
        }
        let listed: Vec<&[u8]> = names.split(|&byte| byte == 0).filter(|name| !name.is_empty()).collect();
        for acl in [ACL_ACCESS_NAME, ACL_DEFAULT_NAME] {
            if !listed.contains(&acl) {
                match node.remove(&c_attribute(acl)?) {
                    Ok(()) => {}
                    Err(error) if matches!(error.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => {}
                    Err(error) => self.refused.note(source, acl, error)?,
                }
            }
        }
        let mut plain = listed.iter().filter(|name| !is_acl(name));
        let mut restored = plain.try_for_each(|name| self.restore_attribute(node, source, inode, name));
        if let Some(record) = record {
            node.chmod(record.mode & 0o7777).map_err(local)?;
        }
        if restored.is_ok() {
            // The default list, then the access list: the order setfacl uses.
            let mut acls = [ACL_DEFAULT_NAME, ACL_ACCESS_NAME].into_iter().filter(|acl| listed.contains(acl));
            restored = acls.try_for_each(|acl| self.restore_attribute(node, source, inode, acl));
        }
        if let (LocalNode::Open(fd), Some(record)) = (node, record) {
            set_fd_times(fd, record).map_err(local)?;
        }
        restored
    }

    /// Reads one attribute from the image and sets it on the local `node`.
    fn restore_attribute(
        &mut self,
        node: &LocalNode<'_>,
        source: &[u8],
        inode: u64,
        name: &[u8],
    ) -> Result<(), ExtractError> {
        let value = match self.session.fs.get_xattr(inode, name) {
            Ok(value) => value,
            // Listed a moment ago; nothing to restore if it is gone.
            Err(FsError::NoAttribute) => return Ok(()),
            Err(error) => return Err(self.image_error(source, error)),
        };
        match node.set(&c_attribute(name)?, &value) {
            Ok(()) => Ok(()),
            Err(error) => self.refused.note(source, name, error),
        }
    }

    /// Restores the owner (as root), mode (mknod's was cut by the umask), attributes and
    /// times of a link or special node just made as `name` in `parent` from its image
    /// `record` (a link with no attributes, extracted by an ordinary user, is not opened).
    /// When the image's list of attributes cannot be read, the rest is still restored and the
    /// error returned after it.
    fn restore_node(
        &mut self,
        parent: &OwnedFd,
        name: &CStr,
        source: &[u8],
        inode: u64,
        record: &InodeRecord,
    ) -> Result<(), ExtractError> {
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let symlink = record.kind == FileKind::Symlink;
        let names = self.attribute_names(source, inode);
        let listed = names.as_deref().unwrap_or_default();
        let mut restored = Ok(());
        if !symlink || self.restore_owners || !listed.is_empty() {
            let node = LocalNode::path_of(parent, name, symlink).map_err(local)?;
            restored = self.restore_metadata(&node, source, inode, listed, Some(record));
        }
        let times = [timespec(record.atime_ns), timespec(record.mtime_ns)];
        // SAFETY: a valid directory descriptor, a NUL-terminated name (the node itself: no
        // link is followed) and a two-element times array.
        if unsafe { libc::utimensat(parent.as_raw_fd(), name.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0
        {
            return Err(local(std::io::Error::last_os_error()));
        }
        match (names, restored) {
            (_, Err(error @ ExtractError::Local(_))) | (Err(error), _) => Err(error),
            (Ok(_), restored) => restored,
        }
    }

    /// A skippable failure: reported and counted with --keep-going, fatal otherwise.
    fn failed(&mut self, error: ExtractError) -> Result<(), String> {
        match error {
            ExtractError::Image(message) if self.options.keep_going => {
                self.bar.suspend(|| eprintln!("fsoc get: skipped {message}"));
                self.failures += 1;
                Ok(())
            }
            ExtractError::Image(message) | ExtractError::Local(message) => Err(message),
        }
    }

    /// Extracts `source` (inode `inode`) as `name` inside the local directory `parent`.
    fn extract(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        source: &[u8],
        inode: u64,
        kind: FileKind,
    ) -> Result<(), String> {
        match kind {
            FileKind::File => self.extract_file(parent, name, source, inode).or_else(|error| self.failed(error)),
            FileKind::Symlink => self.extract_symlink(parent, name, source, inode).or_else(|error| self.failed(error)),
            FileKind::Directory => self.extract_tree(parent, name, source, inode),
            special => self.extract_special(parent, name, source, inode, special).or_else(|error| self.failed(error)),
        }
    }

    /// A device node, FIFO or socket, made with mknodat relative to its directory (a device
    /// node needs root, as mknod(1) does; otherwise the failure is reported like any other).
    fn extract_special(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        source: &[u8],
        inode: u64,
        kind: FileKind,
    ) -> Result<(), ExtractError> {
        let record = self.session.fs.getattr(inode).map_err(|error| self.image_error(source, error))?;
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let c_name = c_name(name).map_err(ExtractError::Local)?;
        let mode = (kind.mode_bits() | (record.mode & 0o7777)) as libc::mode_t;
        replacing(parent, &c_name, || {
            // SAFETY: a valid directory descriptor and a NUL-terminated name; nothing is followed.
            unsafe { libc::mknodat(parent.as_raw_fd(), c_name.as_ptr(), mode, record.rdev() as libc::dev_t) }
        })
        .map_err(local)?;
        self.restore_node(parent, &c_name, source, inode, &record)
    }

    /// A directory and everything under it, walked iteratively (image_walk.rs: no directory
    /// twice, bounded depth) with one open local directory per level. Every name is checked
    /// before it is created, and everything is created relative to its directory's descriptor
    /// with O_NOFOLLOW: so nothing is ever written outside the destination.
    fn extract_tree(&mut self, parent: &OwnedFd, name: &[u8], source: &[u8], inode: u64) -> Result<(), String> {
        // The start directory is fatal either way: without it there is nothing to extract.
        let record = self
            .directory_record(source, inode)
            .map_err(|(ExtractError::Image(message) | ExtractError::Local(message))| message)?;
        // The open local directories, one per level of the walk, with the image's inode and
        // record of each (applied when it is left), and the names below the top that lead to
        // each (for hard links).
        let mut directories = vec![(self.open_new_directory(parent, name, source)?, inode, record)];
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut walk = Walk::new(inode, source, self.depth_max);
        loop {
            let entry = match walk.next(&mut self.session.fs) {
                Step::Done => return Ok(()),
                Step::Unreadable(error) => {
                    let error = self.image_error(walk.directory_path(), error);
                    self.failed(error)?;
                    continue;
                }
                Step::Leave => {
                    let (fd, inode, record) = directories.pop().expect("one open directory per level of the walk");
                    names.pop();
                    // Attributes, permissions and times last, so a read-only directory could
                    // still be filled and what is extracted into it inherits no default ACL
                    // (it has its own).
                    let path = walk.directory_path().to_vec();
                    if let Err(error) = self.restore_open(&fd, &path, inode, &record) {
                        self.failed(error)?;
                    }
                    continue;
                }
                Step::Entry(entry) => entry,
            };
            if let Some(reason) = invalid_name_reason(&entry.name) {
                bad_name(
                    &self.session.image,
                    walk.directory_path(),
                    &entry.name,
                    reason,
                    self.options.skip_bad_names,
                    "get",
                )?;
                continue;
            }
            let child_source = walk.entry_path(&entry.name);
            let (directory_fd, _, _) = directories.last().expect("one open directory per level of the walk");
            if entry.kind != FileKind::Directory {
                let (top, _, _) = directories.first().expect("the top directory stays open");
                if let Some(first) = self.linked.get(&entry.inode) {
                    // A second name of an inode extracted already: a hard link to it, or (if
                    // the host will not link it there) a copy, as for any other file.
                    if link_to(top, first, directory_fd, &entry.name).is_ok() {
                        continue;
                    }
                }
                self.extract(directory_fd, &entry.name, &child_source, entry.inode, entry.kind)?;
                let multiply_linked = self.session.fs.getattr(entry.inode).is_ok_and(|record| record.nlink > 1);
                if multiply_linked && !self.linked.contains_key(&entry.inode) {
                    let mut path = names.clone();
                    path.push(entry.name.clone());
                    let bytes: usize = path.iter().map(|name| name.len() + 24).sum::<usize>() + 64;
                    if self.linked_bytes + bytes <= LINKED_BYTES_MAX {
                        self.linked_bytes += bytes;
                        self.linked.insert(entry.inode, path);
                    } else {
                        self.refused.links_beyond += 1;
                    }
                }
                continue;
            }
            let record = match self.directory_record(&child_source, entry.inode) {
                Ok(record) => record,
                Err(error) => {
                    self.failed(error)?;
                    continue;
                }
            };
            if let Err(error) = walk.enter(&mut self.session.fs, &entry) {
                // Not followed either way; --keep-going extracts the rest of the tree.
                let message =
                    format!("{}:{}: {}", self.session.image.display(), shown(&child_source), error.describe());
                self.failed(ExtractError::Image(message))?;
                continue;
            }
            let fd = self.open_new_directory(directory_fd, &entry.name, &child_source)?;
            directories.push((fd, entry.inode, record));
            names.push(entry.name.clone());
        }
    }

    /// The record of a directory about to be extracted, which must be one.
    fn directory_record(&mut self, source: &[u8], inode: u64) -> Result<InodeRecord, ExtractError> {
        let record = self.session.fs.getattr(inode).map_err(|error| self.image_error(source, error))?;
        if record.kind != FileKind::Directory {
            return Err(ExtractError::Image(format!(
                "{}:{}: the entry names a directory but inode {inode} is not one; the image is damaged (see `fsoc fsck`)",
                self.session.image.display(),
                shown(source)
            )));
        }
        Ok(record)
    }

    /// Creates (or reuses) directory `name` in `parent` and opens it without following links.
    fn open_new_directory(&mut self, parent: &OwnedFd, name: &[u8], source: &[u8]) -> Result<OwnedFd, String> {
        let c_name = c_name(name)?;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let made = unsafe { libc::mkdirat(parent.as_raw_fd(), c_name.as_ptr(), 0o700) };
        if made != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(format!("{}: {}", shown(source), std::io::Error::last_os_error()));
        }
        open_directory(Some(parent), name, false).map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
                "{}: a symbolic link or a file is in the way at the destination; it is not followed (remove it and retry)",
                shown(source)
            ),
            _ => format!("{}: {error}", shown(source)),
        })
    }

    fn extract_file(&mut self, parent: &OwnedFd, name: &[u8], source: &[u8], inode: u64) -> Result<(), ExtractError> {
        let record = self.session.fs.getattr(inode).map_err(|error| self.image_error(source, error))?;
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let c_name = c_name(name).map_err(ExtractError::Local)?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let mut raw = unsafe { libc::openat(parent.as_raw_fd(), c_name.as_ptr(), flags, 0o600) };
        if raw < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ELOOP) {
            // A symbolic link is in the way: replace it, never write through it.
            // SAFETY: as above.
            unsafe { libc::unlinkat(parent.as_raw_fd(), c_name.as_ptr(), 0) };
            // SAFETY: as above.
            raw = unsafe { libc::openat(parent.as_raw_fd(), c_name.as_ptr(), flags, 0o600) };
        }
        if raw < 0 {
            return Err(local(std::io::Error::last_os_error()));
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = File::from(fd);
        let mut offset = 0u64;
        while offset < record.size {
            let bytes = match self.session.fs.read(inode, offset, COPY_CHUNK_BYTES) {
                Ok(bytes) => bytes,
                Err(error) => {
                    // Leave no half-copied file behind a skipped one.
                    drop(file);
                    // SAFETY: as above.
                    unsafe { libc::unlinkat(parent.as_raw_fd(), c_name.as_ptr(), 0) };
                    return Err(self.image_error(source, error));
                }
            };
            if bytes.is_empty() {
                break;
            }
            file.write_all(&bytes).map_err(local)?;
            offset += bytes.len() as u64;
            self.bar.inc(bytes.len() as u64);
        }
        let fd = OwnedFd::from(file);
        // After the content: a write takes a file capability away.
        self.restore_open(&fd, source, inode, &record)
    }

    fn extract_symlink(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        source: &[u8],
        inode: u64,
    ) -> Result<(), ExtractError> {
        let record = self.session.fs.getattr(inode).map_err(|error| self.image_error(source, error))?;
        let target = self.session.fs.readlink(inode).map_err(|error| self.image_error(source, error))?;
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let c_name = c_name(name).map_err(ExtractError::Local)?;
        let c_target = std::ffi::CString::new(target)
            .map_err(|_| ExtractError::Image(format!("{}: link target contains NUL", shown(source))))?;
        // The link is created, never followed: its target may point anywhere, harmlessly.
        replacing(parent, &c_name, || {
            // SAFETY: a valid directory descriptor and NUL-terminated strings.
            unsafe { libc::symlinkat(c_target.as_ptr(), parent.as_raw_fd(), c_name.as_ptr()) }
        })
        .map_err(local)?;
        self.restore_node(parent, &c_name, source, inode, &record)
    }
}

/// Links the local file at `path` (names below `top`, each directory opened without following
/// a link) as `name` in `parent`, replacing what is there.
fn link_to(top: &OwnedFd, path: &[Vec<u8>], parent: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let (file, directories) = path.split_last().ok_or_else(invalid)?;
    let mut opened: Option<OwnedFd> = None;
    for directory in directories {
        let next = open_directory(Some(opened.as_ref().unwrap_or(top)), directory, false)?;
        opened = Some(next);
    }
    let from = opened.as_ref().unwrap_or(top);
    let c_file = CString::new(file.as_slice()).map_err(|_| invalid())?;
    let c_name = CString::new(name).map_err(|_| invalid())?;
    replacing(parent, &c_name, || {
        // SAFETY: valid directory descriptors and NUL-terminated names; flags 0: a link in the
        // way is linked itself, never followed.
        unsafe { libc::linkat(from.as_raw_fd(), c_file.as_ptr(), parent.as_raw_fd(), c_name.as_ptr(), 0) }
    })
}

/// Runs `make` (a *at call creating `name` in `parent`, returning 0 or -1); when something is
/// already there, removes it (a file, link or node; a directory in the way stays an error)
/// and runs `make` again.
fn replacing(parent: &OwnedFd, name: &std::ffi::CStr, make: impl Fn() -> libc::c_int) -> std::io::Result<()> {
    let mut made = make();
    if made != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) };
        made = make();
    }
    if made != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn c_name(name: &[u8]) -> Result<std::ffi::CString, String> {
    std::ffi::CString::new(name).map_err(|_| format!("{}: name contains NUL", escaped(name)))
}

/// Opens a directory: `name` relative to `parent` (or a path of the user's when `parent` is
/// None). `follow` is false for anything named by the image: a symbolic link is refused.
fn open_directory(parent: Option<&OwnedFd>, name: &[u8], follow: bool) -> std::io::Result<OwnedFd> {
    let c_name = std::ffi::CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let directory = parent.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
    // SAFETY: a valid directory descriptor (or AT_FDCWD) and a NUL-terminated name.
    let raw = unsafe { libc::openat(directory, c_name.as_ptr(), flags) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// An attribute name for the libc calls (one from the image's list holds no NUL).
fn c_attribute(name: &[u8]) -> Result<CString, ExtractError> {
    CString::new(name).map_err(|_| ExtractError::Image(format!("attribute name \"{}\" contains NUL", escaped(name))))
}

/// Sets the access and modification times from an image record on an open file or directory.
fn set_fd_times(fd: &OwnedFd, record: &InodeRecord) -> std::io::Result<()> {
    let times = [timespec(record.atime_ns), timespec(record.mtime_ns)];
    // SAFETY: a valid descriptor and a two-element times array.
    if unsafe { libc::futimens(fd.as_fd().as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A time of the image (signed nanoseconds since the epoch) as the host's calls take it:
/// floor division, so a time before 1970 has a negative tv_sec and a tv_nsec in range.
fn timespec(nanoseconds: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: nanoseconds.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: nanoseconds.rem_euclid(1_000_000_000) as libc::c_long,
    }
}
