//! `fsoc put [-r] LOCAL... IMAGE:/path`: copies local files, links, special files and
//! directory trees into an image, iteratively (a deep local tree cannot overflow the stack),
//! with owners, modes, times and extended attributes (POSIX ACLs and file capabilities
//! included: `copy_attributes`).

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fsoc_core::fs::acl::{ACL_ACCESS_NAME, ACL_DEFAULT_NAME};
use fsoc_core::fs::xattrs::{check_xattr_name, XattrMode};
use fsoc_core::fs::{FileKind, FsError};
use indicatif::ProgressBar;

use crate::image_target::{join, parse_target};
use crate::names::{escaped, shown};
use crate::tools_cmd::{caller_ids, progress_bar, resolve, resolve_parent, Session, COPY_CHUNK_BYTES};

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
    let mut attributes = AttributeCopy::default();
    for source in sources {
        let source = Path::new(source);
        let target = if into_directory {
            let name = source.file_name().ok_or_else(|| format!("{}: has no file name", source.display()))?;
            join(&destination, name.as_bytes())
        } else {
            destination.clone()
        };
        put_tree(&mut session, source, &target, &bar, &mut attributes)?;
    }
    bar.finish_and_clear();
    attributes.report_unreadable();
    session.finish()
}

/// Bytes in the regular files under `path` (for the progress bar; unreadable parts count 0).
/// Iterative, so a deeply nested local tree cannot overflow the stack; links are not followed.
fn local_tree_bytes(path: &Path) -> u64 {
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

/// Owner of a copied entry: the local file's when run as root (like `cp -a`), else the caller.
fn copied_owner(metadata: &std::fs::Metadata) -> (u32, u32) {
    let (uid, gid) = caller_ids();
    if uid == 0 {
        (metadata.uid(), metadata.gid())
    } else {
        (uid, gid)
    }
}

/// What is left to do for `put_tree`.
enum PutWork {
    /// Copy the local `source` to `target` in the image.
    Copy { source: PathBuf, target: Vec<u8> },
    /// Set a copied directory's attributes and times, once everything in it is copied (so
    /// its default ACL is not inherited by what is copied into it, which has its own).
    Finish { source: PathBuf, inode: u64, metadata: std::fs::Metadata, target: Vec<u8> },
}

/// Copies a local file, link or directory tree to `target`, iteratively (a stack of work, not
/// recursion), so a deeply nested local tree cannot overflow the stack. Each directory's
/// entries are copied in name order.
fn put_tree(
    session: &mut Session,
    source: &Path,
    target: &[u8],
    bar: &ProgressBar,
    attributes: &mut AttributeCopy,
) -> Result<(), String> {
    let mut pending = vec![PutWork::Copy { source: source.to_path_buf(), target: target.to_vec() }];
    while let Some(work) = pending.pop() {
        match work {
            PutWork::Finish { source, inode, metadata, target } => {
                attributes.copy_attributes(session, &source, &metadata, inode, &target, bar)?;
                set_times(session, inode, &metadata, &target)?;
            }
            PutWork::Copy { source, target } => {
                let Some((inode, metadata)) = put_one(session, &source, &target, bar, attributes)? else { continue };
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
/// attributes and times set after them).
fn put_one(
    session: &mut Session,
    source: &Path,
    target: &[u8],
    bar: &ProgressBar,
    attributes: &mut AttributeCopy,
) -> Result<Option<(u64, std::fs::Metadata)>, String> {
    let metadata = std::fs::symlink_metadata(source).map_err(|error| format!("{}: {error}", source.display()))?;
    let (uid, gid) = copied_owner(&metadata);
    let mode = metadata.mode() & 0o7777;
    let (parent, name) = resolve_parent(&mut session.fs, target).map_err(|error| session.error(target, error))?;
    let existing = match session.fs.lookup(parent, name) {
        Ok(found) => Some(found),
        Err(FsError::NotFound) => None,
        Err(error) => return Err(session.error(target, error)),
    };
    let file_type = metadata.file_type();
    if file_type.is_symlink() {
        let link = std::fs::read_link(source).map_err(|error| format!("{}: {error}", source.display()))?;
        if let Some((_, kind)) = existing {
            if kind == FileKind::Directory {
                return Err(session.error(target, FsError::IsDirectory));
            }
            session.fs.remove(parent, name, false).map_err(|error| session.error(target, error))?;
        }
        let link = link.as_os_str().as_bytes();
        let inode = session
            .fs
            .create(parent, name, FileKind::Symlink, 0o777, uid, gid, Some(link))
            .map_err(|error| session.error(target, error))?;
        attributes.copy_attributes(session, source, &metadata, inode, target, bar)?;
        return Ok(None);
    }
    if file_type.is_dir() {
        let inode = match existing {
            Some((inode, FileKind::Directory)) => inode,
            Some(_) => return Err(session.error(target, FsError::Exists)),
            None => session
                .fs
                .create(parent, name, FileKind::Directory, mode, uid, gid, None)
                .map_err(|error| session.error(target, error))?,
        };
        return Ok(Some((inode, metadata)));
    }
    if !file_type.is_file() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let kind = if file_type.is_char_device() {
            FileKind::CharDevice
        } else if file_type.is_block_device() {
            FileKind::BlockDevice
        } else if file_type.is_fifo() {
            FileKind::Fifo
        } else if file_type.is_socket() {
            FileKind::Socket
        } else {
            eprintln!("fsoc put: skipping {}: not a file type fsoc stores", source.display());
            return Ok(None);
        };
        if let Some((_, existing_kind)) = existing {
            if existing_kind == FileKind::Directory {
                return Err(session.error(target, FsError::IsDirectory));
            }
            session.fs.remove(parent, name, false).map_err(|error| session.error(target, error))?;
        }
        let inode = session
            .fs
            .create_special(parent, name, kind, mode, uid, gid, metadata.rdev())
            .map_err(|error| session.error(target, error))?;
        attributes.copy_attributes(session, source, &metadata, inode, target, bar)?;
        return Ok(None);
    }
    let inode = match existing {
        Some((inode, FileKind::File)) => {
            session.fs.truncate(inode, 0).map_err(|error| session.error(target, error))?;
            inode
        }
        Some((_, FileKind::Directory)) => return Err(session.error(target, FsError::IsDirectory)),
        Some((_, _symlink_or_special)) => {
            session.fs.remove(parent, name, false).map_err(|error| session.error(target, error))?;
            session
                .fs
                .create(parent, name, FileKind::File, mode, uid, gid, None)
                .map_err(|error| session.error(target, error))?
        }
        None => session
            .fs
            .create(parent, name, FileKind::File, mode, uid, gid, None)
            .map_err(|error| session.error(target, error))?,
    };
    let mut file = File::open(source).map_err(|error| format!("{}: {error}", source.display()))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let mut offset = 0u64;
    loop {
        let count = file.read(&mut buffer).map_err(|error| format!("{}: {error}", source.display()))?;
        if count == 0 {
            break;
        }
        session.fs.write(inode, offset, &buffer[..count]).map_err(|error| session.error(target, error))?;
        offset += count as u64;
        bar.inc(count as u64);
    }
    // After the content: a write is what takes a file capability away.
    attributes.copy_attributes(session, source, &metadata, inode, target, bar)?;
    set_times(session, inode, &metadata, target)?;
    Ok(None)
}

fn set_times(session: &mut Session, inode: u64, metadata: &std::fs::Metadata, target: &[u8]) -> Result<(), String> {
    // Signed: a time before 1970 is kept (format version 5 on; older volumes store the epoch).
    let nanos = |seconds: i64, nanoseconds: i64| seconds.saturating_mul(1_000_000_000).saturating_add(nanoseconds);
    let atime_ns = nanos(metadata.atime(), metadata.atime_nsec());
    let mtime_ns = nanos(metadata.mtime(), metadata.mtime_nsec());
    session
        .fs
        .setattr(inode, None, None, None, Some(atime_ns), Some(mtime_ns))
        .map_err(|error| session.error(target, error))?;
    Ok(())
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
}

impl AttributeCopy {
    /// Makes the extended attributes of the image's `inode`, just copied from the local
    /// `source`, the local entry's, and its mode the local one (also where the image's
    /// directory gave it a default ACL to inherit). In this order, as Linux ties ACLs to the
    /// mode: attributes the local entry lacks are removed (an inherited ACL, or what a
    /// replaced file had); the mode is set; the other attributes are set; then the default ACL
    /// and last the access ACL, which sets the mode's permission bits from its list, so the
    /// mode is checked against the local one after it.
    fn copy_attributes(
        &mut self,
        session: &mut Session,
        source: &Path,
        metadata: &std::fs::Metadata,
        inode: u64,
        target: &[u8],
        bar: &ProgressBar,
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
        // Stable: the host's order, but the default ACL after the rest and the access ACL last.
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
                    bar.suspend(|| {
                        eprintln!(
                            "fsoc put: the volume (format version {version}) keeps no extended attributes; they were not copied"
                        )
                    });
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
                    bar.suspend(|| eprintln!("fsoc put: extended attribute {} not copied: {message}", escaped(name)));
                }
                Err(error) => return Err(session.error(target, error)),
            }
        }
        if access_acl_set {
            let record = session.fs.getattr(inode).map_err(|error| session.error(target, error))?;
            if record.mode & 0o7777 != mode {
                let image_path = format!("{}:{}", session.image.display(), shown(target));
                bar.suspend(|| {
                    eprintln!(
                        "fsoc put: {image_path}: its access ACL left mode {:o}, not {mode:o} as {} has",
                        record.mode & 0o7777,
                        source.display()
                    )
                });
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
                    bar.suspend(|| {
                        eprintln!(
                            "fsoc put: extended attribute {} (first on {}) is not copied: fsoc keeps user., trusted. and security. attributes and POSIX ACLs",
                            escaped(name),
                            source.display()
                        )
                    });
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
    fn report_unreadable(&self) {
        if let Some(first) = &self.first_unreadable {
            let count = self.unreadable;
            let what = if count == 1 { "attribute" } else { "attributes" };
            eprintln!(
                "fsoc put: {count} extended {what} could not be read here and were not copied (trusted.* needs root); the first: {first}"
            );
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
