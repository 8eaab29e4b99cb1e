//! `fsoc put [-r] LOCAL... IMAGE:/path`: copies local files, links and directory trees into
//! an image, iteratively (a deep local tree cannot overflow the stack), with owners, modes and
//! times.

use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fsoc_core::fs::{FileKind, FsError};
use indicatif::ProgressBar;

use crate::image_target::{join, parse_target};
use crate::names::shown;
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
    for source in sources {
        let source = Path::new(source);
        let target = if into_directory {
            let name = source.file_name().ok_or_else(|| format!("{}: has no file name", source.display()))?;
            join(&destination, name.as_bytes())
        } else {
            destination.clone()
        };
        put_tree(&mut session, source, &target, &bar)?;
    }
    bar.finish_and_clear();
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
    /// Set a copied directory's times, once everything in it is copied.
    Finish { inode: u64, metadata: std::fs::Metadata, target: Vec<u8> },
}

/// Copies a local file, link or directory tree to `target`, iteratively (a stack of work, not
/// recursion), so a deeply nested local tree cannot overflow the stack. Each directory's
/// entries are copied in name order.
fn put_tree(session: &mut Session, source: &Path, target: &[u8], bar: &ProgressBar) -> Result<(), String> {
    let mut pending = vec![PutWork::Copy { source: source.to_path_buf(), target: target.to_vec() }];
    while let Some(work) = pending.pop() {
        match work {
            PutWork::Finish { inode, metadata, target } => set_times(session, inode, &metadata, &target)?,
            PutWork::Copy { source, target } => {
                let Some((inode, metadata)) = put_one(session, &source, &target, bar)? else { continue };
                let mut entries: Vec<PathBuf> = std::fs::read_dir(&source)
                    .map_err(|error| format!("{}: {error}", source.display()))?
                    .map(|entry| entry.map(|entry| entry.path()))
                    .collect::<Result<_, _>>()
                    .map_err(|error| format!("{}: {error}", source.display()))?;
                entries.sort();
                pending.push(PutWork::Finish { inode, metadata, target: target.clone() });
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

/// Copies one local file or link, or creates (or reuses) one directory: then returns its
/// inode and local metadata, for its entries to be copied into it.
fn put_one(
    session: &mut Session,
    source: &Path,
    target: &[u8],
    bar: &ProgressBar,
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
        session
            .fs
            .create(parent, name, FileKind::Symlink, 0o777, uid, gid, Some(link))
            .map_err(|error| session.error(target, error))?;
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
        session
            .fs
            .create_special(parent, name, kind, mode, uid, gid, metadata.rdev())
            .map_err(|error| session.error(target, error))?;
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
    set_times(session, inode, &metadata, target)?;
    Ok(None)
}

fn set_times(session: &mut Session, inode: u64, metadata: &std::fs::Metadata, target: &[u8]) -> Result<(), String> {
    let nanos = |seconds: i64, nanoseconds: i64| {
        (seconds.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(nanoseconds.max(0) as u64)
    };
    let atime_ns = nanos(metadata.atime(), metadata.atime_nsec());
    let mtime_ns = nanos(metadata.mtime(), metadata.mtime_nsec());
    session
        .fs
        .setattr(inode, None, None, None, Some(atime_ns), Some(mtime_ns))
        .map_err(|error| session.error(target, error))?;
    Ok(())
}
