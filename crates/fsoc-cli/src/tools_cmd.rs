//! Image tools that work without mounting, like mtools: `fsoc ls|cat|put|get|rm|mkdir|mv
//! IMAGE:/path`. Each command opens the image, does its work through the inode-level API and
//! closes the volume cleanly (one commit), so an interrupted command leaves the last committed
//! state. This module holds the commands, the session they share, cat, rm, mkdir and mv;
//! ls, put and get have modules of their own (tools_ls.rs, tools_put.rs, tools_get.rs) and
//! `IMAGE:/path` arguments are image_target.rs's.
//!
//! Invariants: a writer holds an exclusive lock on the image file and a reader a shared one,
//! so a tool never runs against a mounted image (`fsoc mount` holds the exclusive lock);
//! memory stays bounded by the copy buffer, the walk's buffered listings (image_walk.rs: at
//! most 4 MiB) and one inode number per directory walked, whatever the tree's shape. Names and
//! structure read from an image are hostile input: see names.rs and image_walk.rs.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use fsoc_core::fs::{FileKind, FsError};
use fsoc_core::FileSystem;
use indicatif::{ProgressBar, ProgressStyle};

use crate::image_target::{join, parse_target, parse_targets, split_last};
use crate::image_walk::{Step, Walk, DEPTH_MAX};
use crate::names::{escaped, invalid_name_reason, shown};
use crate::tools_get::GetOptions;
use crate::volume_files::{self, ImageLock, OpenVolume, VolumeFlash};

/// Bytes copied per read or write call.
pub const COPY_CHUNK_BYTES: usize = 1 << 20;
const ROOT_INODE: u64 = 1;

#[derive(Subcommand)]
pub enum ToolCommand {
    /// Lists a directory (or describes a file) in an image: fsoc ls [-l] [-r] IMAGE:/path
    Ls {
        /// IMAGE:/path of a directory or file.
        target: String,
        /// Long format: mode, links, owner, group, size, modification time.
        #[arg(short = 'l', long)]
        long: bool,
        /// List subdirectories too, as full paths.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// Skip (with a warning) directory entries whose names no file system may hold (empty,
        /// `.`, `..`, containing `/` or NUL, over 255 bytes) instead of stopping at the first.
        #[arg(long)]
        skip_bad_names: bool,
    },
    /// Writes a file in an image to standard output: fsoc cat IMAGE:/path
    Cat {
        /// IMAGE:/path of a file.
        target: String,
    },
    /// Copies local files into an image, extended attributes included: fsoc put [-r]
    /// LOCAL... IMAGE:/path
    ///
    /// Each copy keeps its mode, times, owner (when run as root), hard links (names of one
    /// local file within the copy stay one inode), holes and extended attributes: user.,
    /// trusted. and security. ones, POSIX ACLs and file capabilities. A volume older than
    /// format version 4 keeps no extended attributes: put says so once and copies the rest.
    /// (`fsoc mkfs IMAGE --from DIR` builds a whole volume with the same copy.)
    Put {
        /// Local sources, then the destination IMAGE:/path.
        #[arg(required = true, num_args = 2..)]
        paths: Vec<String>,
        /// Copy directories and everything in them.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Copies a file out of an image, extended attributes included: fsoc get [-r] IMAGE:/path
    /// LOCAL. Nothing is ever written outside LOCAL: names from the image are checked, and
    /// nothing is followed through a symbolic link while extracting.
    ///
    /// Each copy keeps its mode, times, owner (when run as root), hard links (names of one
    /// inode within the copy become links of one local file) and extended attributes (POSIX
    /// ACLs and file capabilities too). Attributes the host refuses (trusted.* and security.*
    /// need root) are skipped with one warning, and do not change the exit status.
    Get {
        /// IMAGE:/path to copy.
        source: String,
        /// Local file or directory to copy to (into it, if it is a directory).
        destination: PathBuf,
        /// Copy a directory and everything in it.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// Recovery mode for a damaged image: skip what cannot be read (a file, a directory, a
        /// link) or must not be followed (a directory cycle, a tree deeper than the limit),
        /// naming each on stderr, and extract everything else; the exit status is then 2 with
        /// the count of skipped entries. Without it, get stops at the first.
        #[arg(long)]
        keep_going: bool,
        /// Skip (with a warning) entries whose names no file system may hold (empty, `.`, `..`,
        /// containing `/` or NUL, over 255 bytes) instead of refusing the copy.
        #[arg(long)]
        skip_bad_names: bool,
    },
    /// Removes files from an image: fsoc rm [-r] IMAGE:/path...
    Rm {
        /// IMAGE:/path... to remove (all in one image).
        #[arg(required = true)]
        targets: Vec<String>,
        /// Remove directories and everything in them.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Creates directories in an image: fsoc mkdir [-p] IMAGE:/path...
    Mkdir {
        /// IMAGE:/path... to create (all in one image).
        #[arg(required = true)]
        targets: Vec<String>,
        /// Create missing parents; an existing directory is not an error.
        #[arg(short = 'p', long)]
        parents: bool,
    },
    /// Renames or moves within an image: fsoc mv IMAGE:/old IMAGE:/new
    Mv {
        /// IMAGE:/old
        source: String,
        /// IMAGE:/new (or an existing directory to move into)
        destination: String,
    },
}

pub fn run(command: ToolCommand) -> Result<(), String> {
    match command {
        ToolCommand::Ls { target, long, recursive, skip_bad_names } => {
            crate::tools_ls::ls(&target, long, recursive, skip_bad_names)
        }
        ToolCommand::Cat { target } => cat(&target),
        ToolCommand::Put { paths, recursive } => crate::tools_put::put(&paths, recursive),
        ToolCommand::Get { source, destination, recursive, keep_going, skip_bad_names } => {
            crate::tools_get::get(&source, &destination, GetOptions { recursive, keep_going, skip_bad_names })
        }
        ToolCommand::Rm { targets, recursive } => rm(&targets, recursive),
        ToolCommand::Mkdir { targets, parents } => mkdir(&targets, parents),
        ToolCommand::Mv { source, destination } => mv(&source, &destination),
    }
}

// ----- opening and closing images -------------------------------------------------------------

/// An open image with its locks; `finish` commits (writers) and closes.
pub struct Session {
    pub image: PathBuf,
    pub fs: FileSystem<VolumeFlash>,
    _locks: Vec<ImageLock>,
    /// Set when an error worded by `error` was ENOSPC: `mkfs --from` then grows the volume.
    ran_out_of_space: std::cell::Cell<bool>,
}

impl Session {
    pub fn open(image: &Path, writable: bool) -> Result<Session, String> {
        let OpenVolume { files: _, fs, locks } = volume_files::open_image(image, !writable)?;
        // A volume running without a chip takes no change: say why and what to do, rather
        // than a bare "read-only" at the first write.
        if writable {
            if let Some(degraded) = crate::volume_cmd::degraded_text(&fs, image) {
                let _ = fs.unmount();
                return Err(format!("{}: {degraded}", image.display()));
            }
        }
        Ok(Session::new(image, fs, locks))
    }

    /// A session on a volume the caller opened (and locked, or made: `mkfs --from`).
    pub fn new(image: &Path, fs: FileSystem<VolumeFlash>, locks: Vec<ImageLock>) -> Session {
        Session { image: image.to_path_buf(), fs, _locks: locks, ran_out_of_space: std::cell::Cell::new(false) }
    }

    /// Whether an error of this session was the volume running out of space.
    pub fn ran_out_of_space(&self) -> bool {
        self.ran_out_of_space.get()
    }

    /// The volume, for a caller that closes it itself (the locks go with the session).
    pub fn into_fs(self) -> FileSystem<VolumeFlash> {
        self.fs
    }

    pub fn finish(self) -> Result<(), String> {
        volume_files::close(self.fs, &self.image)
    }

    pub fn error(&self, path: &[u8], error: FsError) -> String {
        if matches!(error, FsError::NoSpace) {
            self.ran_out_of_space.set(true);
        }
        format!("{}:{}: {error}", self.image.display(), shown(path))
    }
}

// ----- shared by the tools --------------------------------------------------------------------

pub fn resolve(fs: &mut FileSystem<VolumeFlash>, path: &[u8]) -> Result<(u64, FileKind), FsError> {
    fs.resolve(path)
}

/// The parent directory's inode and the final name.
pub fn resolve_parent<'p>(fs: &mut FileSystem<VolumeFlash>, path: &'p [u8]) -> Result<(u64, &'p [u8]), FsError> {
    let (parent, name) = split_last(path).ok_or(FsError::Exists)?;
    let (inode, kind) = fs.resolve(parent)?;
    if kind != FileKind::Directory {
        return Err(FsError::NotDirectory);
    }
    Ok((inode, name))
}

pub fn caller_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

pub fn progress_bar(total_bytes: u64, message: &str) -> ProgressBar {
    // Hidden automatically when stderr is not a terminal.
    let bar = ProgressBar::new(total_bytes);
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(message.to_string());
    bar
}

/// A directory entry whose name cannot be used: an error, or a warning and a skip.
pub fn bad_name(
    image: &Path,
    directory: &[u8],
    name: &[u8],
    reason: &str,
    skip: bool,
    command: &str,
) -> Result<(), String> {
    let message = format!("{}:{}: entry \"{}\": {reason}", image.display(), shown(directory), escaped(name));
    if skip {
        eprintln!("fsoc {command}: skipping {message}");
        Ok(())
    } else {
        Err(format!("{message}; the image is damaged or hostile (`fsoc fsck` lists every problem; --skip-bad-names skips such entries)"))
    }
}

// ----- cat ------------------------------------------------------------------------------------

fn cat(target: &str) -> Result<(), String> {
    let (image, path) = parse_target(target)?;
    let mut session = Session::open(&image, false)?;
    let (inode, kind) = resolve(&mut session.fs, &path).map_err(|error| session.error(&path, error))?;
    if kind == FileKind::Directory {
        return Err(session.error(&path, FsError::IsDirectory));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut offset = 0u64;
    loop {
        let bytes = session.fs.read(inode, offset, COPY_CHUNK_BYTES).map_err(|error| session.error(&path, error))?;
        if bytes.is_empty() {
            break;
        }
        match out.write_all(&bytes) {
            Ok(()) => {}
            // `fsoc cat … | head` closes the pipe early: that is not an error.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(error) => return Err(format!("stdout: {error}")),
        }
        offset += bytes.len() as u64;
    }
    let _ = out.flush();
    session.finish()
}

// ----- rm, mkdir, mv --------------------------------------------------------------------------

fn rm(targets: &[String], recursive: bool) -> Result<(), String> {
    let (image, paths) = parse_targets(targets)?;
    let mut session = Session::open(&image, true)?;
    for path in &paths {
        let (parent, name) = resolve_parent(&mut session.fs, path).map_err(|error| match error {
            FsError::Exists => format!("{}:/: the root directory cannot be removed", image.display()),
            other => session.error(path, other),
        })?;
        let (inode, kind) = session.fs.lookup(parent, name).map_err(|error| session.error(path, error))?;
        if kind == FileKind::Directory {
            if !recursive {
                return Err(format!("{}:{}: is a directory (use -r)", image.display(), shown(path)));
            }
            remove_contents(&mut session, path, inode)?;
        }
        session.fs.remove(parent, name, kind == FileKind::Directory).map_err(|error| session.error(path, error))?;
    }
    session.finish()
}

/// Refuses a tree `rm -r` must not touch: a hostile name, a cycle, a directory reached twice
/// or a tree deeper than DEPTH_MAX. Checked before anything is removed, so such an image is
/// left as it was (removing an entry named `..` or a second name of a directory would drop a
/// link to a directory that is still in use elsewhere).
fn check_removable(session: &mut Session, path: &[u8], directory: u64) -> Result<(), String> {
    let mut walk = Walk::new(directory, path, DEPTH_MAX);
    loop {
        match walk.next(&mut session.fs) {
            Step::Done => return Ok(()),
            Step::Leave => {}
            Step::Unreadable(error) => return Err(session.error(walk.directory_path(), error)),
            Step::Entry(entry) => {
                if let Some(reason) = invalid_name_reason(&entry.name) {
                    return Err(format!(
                        "{}:{}: entry \"{}\": {reason}; the image is damaged or hostile, nothing was removed (`fsoc fsck` lists every problem)",
                        session.image.display(),
                        shown(walk.directory_path()),
                        escaped(&entry.name)
                    ));
                }
                if entry.kind == FileKind::Directory {
                    walk.enter(&mut session.fs, &entry).map_err(|error| {
                        format!(
                            "{}:{}: {}; nothing was removed",
                            session.image.display(),
                            shown(&walk.entry_path(&entry.name)),
                            error.describe()
                        )
                    })?;
                }
            }
        }
    }
}

/// Empties a directory checked by `check_removable`, depth first, iteratively
/// (image_walk.rs): files as they are met, directories once they are empty.
fn remove_contents(session: &mut Session, path: &[u8], directory: u64) -> Result<(), String> {
    check_removable(session, path, directory)?;
    let mut walk = Walk::new(directory, path, DEPTH_MAX);
    loop {
        match walk.next(&mut session.fs) {
            Step::Done => return Ok(()),
            Step::Unreadable(error) => return Err(session.error(walk.directory_path(), error)),
            Step::Leave => {
                let Some((parent, name)) = walk.left_parent_and_name() else { continue };
                let name = name.to_vec();
                session.fs.remove(parent, &name, true).map_err(|error| session.error(walk.directory_path(), error))?;
            }
            Step::Entry(entry) => {
                let entry_path = walk.entry_path(&entry.name);
                if entry.kind == FileKind::Directory {
                    walk.enter(&mut session.fs, &entry).map_err(|error| {
                        format!("{}:{}: {}", session.image.display(), shown(&entry_path), error.describe())
                    })?;
                } else {
                    session
                        .fs
                        .remove(walk.directory(), &entry.name, false)
                        .map_err(|error| session.error(&entry_path, error))?;
                }
            }
        }
    }
}

fn mkdir(targets: &[String], parents: bool) -> Result<(), String> {
    let (image, paths) = parse_targets(targets)?;
    let mut session = Session::open(&image, true)?;
    let (uid, gid) = caller_ids();
    for path in &paths {
        if parents {
            let mut current = ROOT_INODE;
            let mut prefix = Vec::new();
            for name in path.split(|&byte| byte == b'/').filter(|name| !name.is_empty()) {
                prefix = join(&prefix, name);
                current = match session.fs.lookup(current, name) {
                    Ok((inode, FileKind::Directory)) => inode,
                    Ok(_) => return Err(session.error(&prefix, FsError::Exists)),
                    Err(FsError::NotFound) => session
                        .fs
                        .create(current, name, FileKind::Directory, 0o755, uid, gid, None)
                        .map_err(|error| session.error(&prefix, error))?,
                    Err(error) => return Err(session.error(&prefix, error)),
                };
            }
        } else {
            let (parent, name) = resolve_parent(&mut session.fs, path).map_err(|error| session.error(path, error))?;
            session
                .fs
                .create(parent, name, FileKind::Directory, 0o755, uid, gid, None)
                .map_err(|error| session.error(path, error))?;
        }
    }
    session.finish()
}

fn mv(source_text: &str, destination_text: &str) -> Result<(), String> {
    let (image, paths) = parse_targets(&[source_text.to_string(), destination_text.to_string()])?;
    let [source, destination] = &paths[..] else { unreachable!("two targets parsed into two paths") };
    let mut session = Session::open(&image, true)?;
    let (source_parent, source_name) =
        resolve_parent(&mut session.fs, source).map_err(|error| session.error(source, error))?;
    let destination = match resolve(&mut session.fs, destination) {
        // Like mv(1): moving onto a directory moves into it.
        Ok((_, FileKind::Directory)) => join(destination, source_name),
        _ => destination.clone(),
    };
    let (target_parent, target_name) =
        resolve_parent(&mut session.fs, &destination).map_err(|error| session.error(&destination, error))?;
    session
        .fs
        .rename(source_parent, source_name, target_parent, target_name)
        .map_err(|error| session.error(source, error))?;
    session.finish()
}
