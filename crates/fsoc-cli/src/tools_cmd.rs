//! Image tools that work without mounting, like mtools: `fsoc ls|cat|put|get|rm|mkdir|mv
//! IMAGE:/path`. Each command opens the image, does its work through the inode-level API and
//! closes the volume cleanly (one commit), so an interrupted command leaves the last committed
//! state.
//!
//! Invariants: a writer holds an exclusive lock on the image file and a reader a shared one,
//! so a tool never runs against a mounted image (`fsoc mount` holds the exclusive lock);
//! memory stays bounded by the copy buffer, the walk's buffered listings (image_walk.rs: at
//! most 4 MiB) and one inode number per directory walked, whatever the tree's shape. Names and
//! structure read from an image are hostile input: see names.rs and image_walk.rs.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use clap::Subcommand;

use crate::image_walk::{Step, Walk, DEPTH_MAX};
use crate::names::{escaped, invalid_name_reason, shown};
use crate::volume_files::{self, ImageLock, OpenVolume, VolumeFlash};
use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fsoc_core::FileSystem;
use indicatif::{ProgressBar, ProgressStyle};

/// Bytes copied per read or write call.
const COPY_CHUNK_BYTES: usize = 1 << 20;
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
    /// Copies local files into an image: fsoc put [-r] LOCAL... IMAGE:/path
    Put {
        /// Local sources, then the destination IMAGE:/path.
        #[arg(required = true, num_args = 2..)]
        paths: Vec<String>,
        /// Copy directories and everything in them.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Copies a file out of an image: fsoc get [-r] IMAGE:/path LOCAL. Nothing is ever
    /// written outside LOCAL: names from the image are checked, and nothing is followed
    /// through a symbolic link while extracting.
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
        ToolCommand::Ls { target, long, recursive, skip_bad_names } => ls(&target, long, recursive, skip_bad_names),
        ToolCommand::Cat { target } => cat(&target),
        ToolCommand::Put { paths, recursive } => put(&paths, recursive),
        ToolCommand::Get { source, destination, recursive, keep_going, skip_bad_names } => {
            get(&source, &destination, GetOptions { recursive, keep_going, skip_bad_names })
        }
        ToolCommand::Rm { targets, recursive } => rm(&targets, recursive),
        ToolCommand::Mkdir { targets, parents } => mkdir(&targets, parents),
        ToolCommand::Mv { source, destination } => mv(&source, &destination),
    }
}

// ----- opening and closing images -------------------------------------------------------------

/// An open image with its locks; `finish` commits (writers) and closes.
struct Session {
    image: PathBuf,
    fs: FileSystem<VolumeFlash>,
    _locks: Vec<ImageLock>,
}

impl Session {
    fn open(image: &Path, writable: bool) -> Result<Session, String> {
        let OpenVolume { files: _, fs, locks } = volume_files::open_image(image, !writable)?;
        Ok(Session { image: image.to_path_buf(), fs, _locks: locks })
    }

    fn finish(self) -> Result<(), String> {
        volume_files::close(self.fs, &self.image)
    }

    fn error(&self, path: &[u8], error: FsError) -> String {
        format!("{}:{}: {error}", self.image.display(), shown(path))
    }
}

// ----- IMAGE:/path arguments ------------------------------------------------------------------

/// `IMAGE:/path` split into the image file and a normalized absolute path (no trailing or
/// repeated slashes). The image is the shortest prefix before a `:` that names an existing
/// file, so image names may contain colons.
fn parse_target(text: &str) -> Result<(PathBuf, Vec<u8>), String> {
    let mut fallback = None;
    for (index, _) in text.match_indices(':') {
        let (image, path) = (&text[..index], &text[index + 1..]);
        if image.is_empty() {
            continue;
        }
        if Path::new(image).is_file() {
            return Ok((PathBuf::from(image), normalize(path)?));
        }
        fallback.get_or_insert((image, path));
    }
    match fallback {
        Some((image, _)) => {
            volume_files::refuse_array_chip(Path::new(image))?;
            Err(format!("{image}: no such image file"))
        }
        None => Err(format!("{text:?}: expected IMAGE:/path (for example disk.img:/docs/a.txt)")),
    }
}

fn normalize(path: &str) -> Result<Vec<u8>, String> {
    let path = if path.is_empty() { "/" } else { path };
    if !path.starts_with('/') {
        return Err(format!("{path:?}: the path inside the image must be absolute (start with /)"));
    }
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    if parts.contains(&"..") {
        return Err(format!("{path:?}: `..` is not supported in image paths"));
    }
    Ok(format!("/{}", parts.join("/")).into_bytes())
}

/// Splits targets that must all be in one image.
fn parse_targets(texts: &[String]) -> Result<(PathBuf, Vec<Vec<u8>>), String> {
    let mut image: Option<PathBuf> = None;
    let mut paths = Vec::new();
    for text in texts {
        let (this_image, path) = parse_target(text)?;
        match &image {
            Some(first) if first != &this_image => {
                return Err(format!(
                    "all paths must be in one image ({} and {})",
                    first.display(),
                    this_image.display()
                ))
            }
            _ => image = Some(this_image),
        }
        paths.push(path);
    }
    let image = image.ok_or("no IMAGE:/path given")?;
    Ok((image, paths))
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = parent.to_vec();
    if path.last() != Some(&b'/') {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// (parent path, final name) of a normalized path other than the root.
fn split_last(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let slash = path.iter().rposition(|&byte| byte == b'/')?;
    let name = &path[slash + 1..];
    if name.is_empty() {
        return None;
    }
    Some((if slash == 0 { b"/" } else { &path[..slash] }, name))
}

fn resolve(fs: &mut FileSystem<VolumeFlash>, path: &[u8]) -> Result<(u64, FileKind), FsError> {
    fs.resolve(path)
}

/// The parent directory's inode and the final name.
fn resolve_parent<'p>(fs: &mut FileSystem<VolumeFlash>, path: &'p [u8]) -> Result<(u64, &'p [u8]), FsError> {
    let (parent, name) = split_last(path).ok_or(FsError::Exists)?;
    let (inode, kind) = fs.resolve(parent)?;
    if kind != FileKind::Directory {
        return Err(FsError::NotDirectory);
    }
    Ok((inode, name))
}

fn caller_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

fn progress_bar(total_bytes: u64, message: &str) -> ProgressBar {
    // Hidden automatically when stderr is not a terminal.
    let bar = ProgressBar::new(total_bytes);
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(message.to_string());
    bar
}

// ----- ls -------------------------------------------------------------------------------------

/// Standard output for listings: a closed pipe (`fsoc ls … | head`) ends the listing quietly,
/// as it ends `ls`.
struct Listing<W: Write> {
    out: W,
    closed: bool,
}

impl<W: Write> Listing<W> {
    fn write_line(&mut self, line: &[u8]) -> Result<(), String> {
        if self.closed {
            return Ok(());
        }
        match self.out.write_all(line) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(error) => Err(format!("stdout: {error}")),
        }
    }

    fn finish(mut self) -> Result<(), String> {
        match self.out.flush() {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {error}")),
            _ => Ok(()),
        }
    }
}

/// A directory entry whose name cannot be used: an error, or a warning and a skip.
fn bad_name(
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

fn ls(target: &str, long: bool, recursive: bool, skip_bad_names: bool) -> Result<(), String> {
    let (image, path) = parse_target(target)?;
    let mut session = Session::open(&image, false)?;
    let (inode, kind) = resolve(&mut session.fs, &path).map_err(|error| session.error(&path, error))?;
    let stdout = std::io::stdout();
    let mut out = Listing { out: std::io::BufWriter::new(stdout.lock()), closed: false };
    if kind != FileKind::Directory {
        let record = session.fs.getattr(inode).map_err(|error| session.error(&path, error))?;
        let name = split_last(&path).map_or(&path[..], |(_, name)| name).to_vec();
        print_entry(&mut session.fs, &mut out, &name, inode, &record, long)?;
    } else {
        list_tree(&mut session, &mut out, &path, inode, long, recursive, skip_bad_names)?;
    }
    out.finish()?;
    session.finish()
}

/// Lists a directory, and with `recursive` every directory under it, each entry before what
/// is under it (as `find` does). The walk is iterative, bounded in depth and memory, and never
/// enters a directory twice (see image_walk.rs), so a crafted cycle is reported, not followed.
fn list_tree(
    session: &mut Session,
    out: &mut Listing<impl Write>,
    path: &[u8],
    directory: u64,
    long: bool,
    recursive: bool,
    skip_bad_names: bool,
) -> Result<(), String> {
    let image = session.image.clone();
    let mut walk = Walk::new(directory, path, DEPTH_MAX);
    while !out.closed {
        let entry = match walk.next(&mut session.fs) {
            Step::Done => break,
            Step::Leave => continue,
            Step::Unreadable(error) => return Err(session.error(walk.directory_path(), error)),
            Step::Entry(entry) => entry,
        };
        if let Some(reason) = invalid_name_reason(&entry.name) {
            bad_name(&image, walk.directory_path(), &entry.name, reason, skip_bad_names, "ls")?;
            continue;
        }
        let entry_path = walk.entry_path(&entry.name);
        let record = session.fs.getattr(entry.inode).map_err(|error| session.error(&entry_path, error))?;
        let shown_name = if recursive { &entry_path } else { &entry.name };
        print_entry(&mut session.fs, out, shown_name, entry.inode, &record, long)?;
        if recursive && entry.kind == FileKind::Directory {
            walk.enter(&mut session.fs, &entry)
                .map_err(|error| format!("{}:{}: {}", image.display(), shown(&entry_path), error.describe()))?;
        }
    }
    Ok(())
}

fn print_entry(
    fs: &mut FileSystem<VolumeFlash>,
    out: &mut Listing<impl Write>,
    name: &[u8],
    inode: u64,
    record: &InodeRecord,
    long: bool,
) -> Result<(), String> {
    let mut line = Vec::new();
    if long {
        let type_char = match record.kind {
            FileKind::File => '-',
            FileKind::Directory => 'd',
            FileKind::Symlink => 'l',
        };
        line.extend_from_slice(
            format!(
                "{type_char}{} {:>3} {:>5} {:>5} {:>10} {} ",
                mode_string(record.mode),
                record.nlink,
                record.uid,
                record.gid,
                record.size,
                format_time(record.mtime_ns)
            )
            .as_bytes(),
        );
    }
    // Names and link targets come from the image: unprintable bytes are escaped (ls -b).
    line.extend_from_slice(escaped(name).as_bytes());
    match record.kind {
        FileKind::Directory if !long => line.push(b'/'),
        FileKind::Symlink if long => {
            let target = fs.readlink(inode).map_err(|error| format!("readlink: {error}"))?;
            line.extend_from_slice(b" -> ");
            line.extend_from_slice(escaped(&target).as_bytes());
        }
        _ => {}
    }
    line.push(b'\n');
    out.write_line(&line)
}

fn mode_string(mode: u32) -> String {
    let mut text = String::with_capacity(9);
    for (shift, special, special_char) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => special_char,
            (false, true) => special_char.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    text
}

/// `YYYY-MM-DD HH:MM` in UTC (days-to-civil after Howard Hinnant's algorithm).
fn format_time(time_ns: u64) -> String {
    let seconds = time_ns / 1_000_000_000;
    let (days, day_seconds) = ((seconds / 86_400) as i64, seconds % 86_400);
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", day_seconds / 3600, day_seconds % 3600 / 60)
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

// ----- put ------------------------------------------------------------------------------------

fn put(paths: &[String], recursive: bool) -> Result<(), String> {
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
        eprintln!("fsoc put: skipping {}: fsoc stores only files, directories and symbolic links", source.display());
        return Ok(None);
    }
    let inode = match existing {
        Some((inode, FileKind::File)) => {
            session.fs.truncate(inode, 0).map_err(|error| session.error(target, error))?;
            inode
        }
        Some((_, FileKind::Directory)) => return Err(session.error(target, FsError::IsDirectory)),
        Some((_, FileKind::Symlink)) => {
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

// ----- get ------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct GetOptions {
    recursive: bool,
    keep_going: bool,
    skip_bad_names: bool,
}

/// Why one entry could not be extracted: the image's fault (skippable with --keep-going) or
/// the local side's (always fatal).
enum ExtractError {
    Image(String),
    Local(String),
}

fn get(source_text: &str, destination: &Path, options: GetOptions) -> Result<(), String> {
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
    let mut extraction = Extraction { session: &mut session, bar: &bar, options, failures: 0, depth_max };
    let result = extraction.extract(&parent_fd, &name, &source, inode, kind);
    let failures = extraction.failures;
    bar.finish_and_clear();
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
        FileKind::Symlink => return 0,
        FileKind::Directory => {}
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
                FileKind::Symlink => {}
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
}

impl Extraction<'_> {
    fn image_error(&self, path: &[u8], error: FsError) -> ExtractError {
        ExtractError::Image(self.session.error(path, error))
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
        }
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
        // The open local directories, one per level of the walk, with the image's record of
        // each (applied when it is left).
        let mut directories = vec![(self.open_new_directory(parent, name, source)?, record)];
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
                    let (fd, record) = directories.pop().expect("one open directory per level of the walk");
                    // Permissions last, so a read-only directory could still be filled.
                    set_fd_mode_and_times(&fd, &record)
                        .map_err(|error| format!("{}: {error}", shown(walk.directory_path())))?;
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
            let (directory_fd, _) = directories.last().expect("one open directory per level of the walk");
            if entry.kind != FileKind::Directory {
                self.extract(directory_fd, &entry.name, &child_source, entry.inode, entry.kind)?;
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
            directories.push((fd, record));
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
        set_fd_mode_and_times(&fd, &record).map_err(local)
    }

    fn extract_symlink(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        source: &[u8],
        inode: u64,
    ) -> Result<(), ExtractError> {
        let target = self.session.fs.readlink(inode).map_err(|error| self.image_error(source, error))?;
        let local = |error: std::io::Error| ExtractError::Local(format!("{}: {error}", shown(source)));
        let c_name = c_name(name).map_err(ExtractError::Local)?;
        let c_target = std::ffi::CString::new(target)
            .map_err(|_| ExtractError::Image(format!("{}: link target contains NUL", shown(source))))?;
        // The link is created, never followed: its target may point anywhere, harmlessly.
        // SAFETY: a valid directory descriptor and NUL-terminated strings.
        let mut made = unsafe { libc::symlinkat(c_target.as_ptr(), parent.as_raw_fd(), c_name.as_ptr()) };
        if made != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            // SAFETY: as above (removes a file or link; a directory in the way stays an error).
            unsafe { libc::unlinkat(parent.as_raw_fd(), c_name.as_ptr(), 0) };
            // SAFETY: as above.
            made = unsafe { libc::symlinkat(c_target.as_ptr(), parent.as_raw_fd(), c_name.as_ptr()) };
        }
        if made != 0 {
            return Err(local(std::io::Error::last_os_error()));
        }
        Ok(())
    }
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

/// Sets mode and times from an image record on an open file or directory.
fn set_fd_mode_and_times(fd: &OwnedFd, record: &InodeRecord) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    if unsafe { libc::fchmod(fd.as_fd().as_raw_fd(), (record.mode & 0o7777) as libc::mode_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let timespec = |nanoseconds: u64| libc::timespec {
        tv_sec: (nanoseconds / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanoseconds % 1_000_000_000) as libc::c_long,
    };
    let times = [timespec(record.atime_ns), timespec(record.mtime_ns)];
    // SAFETY: a valid descriptor and a two-element times array.
    if unsafe { libc::futimens(fd.as_fd().as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_at_the_image_file() {
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("a:b.img");
        std::fs::write(&image, b"").expect("write");
        let text = format!("{}:/x//y/", image.display());
        assert_eq!(parse_target(&text).expect("parse"), (image.clone(), b"/x/y".to_vec()));
        assert_eq!(parse_target(&format!("{}:", image.display())).expect("parse").1, b"/".to_vec());
        assert!(parse_target("missing.img:/x").unwrap_err().contains("no such image"));
        assert!(parse_target("plain").unwrap_err().contains("IMAGE:/path"));
        assert!(parse_target(&format!("{}:relative", image.display())).unwrap_err().contains("absolute"));
    }

    #[test]
    fn modes_and_times_print_like_ls() {
        assert_eq!(mode_string(0o755), "rwxr-xr-x");
        assert_eq!(mode_string(0o4754), "rwsr-xr--");
        assert_eq!(mode_string(0o1777), "rwxrwxrwt");
        assert_eq!(mode_string(0o2644), "rw-r-Sr--");
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(951_782_400 * 1_000_000_000 + 3_660_000_000_000), "2000-02-29 01:01");
    }

    #[test]
    fn paths_split_into_parent_and_name() {
        assert_eq!(split_last(b"/a"), Some((&b"/"[..], &b"a"[..])));
        assert_eq!(split_last(b"/a/b"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split_last(b"/"), None);
        assert_eq!(join(b"/", b"x"), b"/x".to_vec());
        assert_eq!(join(b"/a", b"x"), b"/a/x".to_vec());
    }
}
