//! The model against a reference the team did not write: generated operation sequences run on
//! `ModelFs` and on the host's own file system (Linux system calls in a temporary directory,
//! tmpfs under /dev/shm and the default temporary directory's file system, ext4 here), and
//! every outcome (errno included) and the listing every 100 operations must agree. A failure
//! prints the mismatch and the line that replays its seed.
//!
//! Most operations map one-to-one onto a POSIX call. Where fsoc's semantics differ from POSIX
//! on purpose, or POSIX leaves a case open, the difference is written down below: either the
//! operation is not run on either side (`not_comparable`, counted and printed per reason), or
//! the adapter maps one call or errno explicitly (each marked "Mapping:" in `HostFs`). Nothing
//! else is skipped or translated.
//!
//! The host side runs as root (as CI and the developers' machines do): the model has no
//! permission checks, which root's override of file permissions matches, and `chown` needs it.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use fsoc_model::errno::*;
use fsoc_model::replay::{replay_line, test_seeds};
use fsoc_model::types::FD_FIRST;
use fsoc_model::{
    listing_through_calls, operation_sequence_strategy, operation_strategy, run_and_compare, Attributes, Errno, Fd,
    FileKind, FsUnderTest, GeneratorConfig, Listing, ModelConfig, ModelFs, OpenFlags, Operation, OperationGenerator,
    Outcome, Output, RunOptions, Whence,
};
use proptest::prelude::*;

// ---- what is compared ------------------------------------------------------------------------

/// The generator's settings for a POSIX run. Each change from the default is a documented
/// difference between fsoc and POSIX.
fn posix_generator_config() -> GeneratorConfig {
    GeneratorConfig {
        // A power cut reverts fsoc to its last commit; a host file system cannot be cut.
        include_power_cut: false,
        // fsoc's path syntax is stricter than POSIX (no `.`, `..`, `//`, trailing `/` or
        // relative path: all EINVAL), so invalid paths test fsoc's rule, not POSIX's.
        invalid_path_percent: 0,
        // The maximum file size is fsoc's configuration (EFBIG past it, EINVAL for a seek
        // there); the host's is the file system's own (16 TiB on ext4, 2^63 - 1 on tmpfs).
        file_size_limit_probe_percent: 0,
        ..GeneratorConfig::default()
    }
}

/// Why `operation`, about to run on a file system in the state of `model`, has no POSIX
/// counterpart, or `None` when it is compared.
fn not_comparable(model: &ModelFs, operation: &Operation) -> Option<&'static str> {
    let paths: Vec<&[u8]> = match operation {
        Operation::Open { path, .. }
        | Operation::Stat { path }
        | Operation::Truncate { path, .. }
        | Operation::Mkdir { path, .. }
        | Operation::Rmdir { path }
        | Operation::Unlink { path }
        | Operation::Readdir { path }
        | Operation::Readlink { path }
        | Operation::Chmod { path, .. }
        | Operation::Chown { path, .. }
        | Operation::Utimens { path, .. } => vec![path],
        Operation::Rename { source_path, target_path } => vec![source_path, target_path],
        Operation::Link { existing_path, new_path } => vec![existing_path, new_path],
        Operation::Symlink { link_path, .. } => vec![link_path],
        _ => Vec::new(),
    };
    if paths.iter().any(|path| fsoc_model::path::components(path).is_err()) {
        return Some("path syntax is fsoc's own (stricter than POSIX)");
    }
    let descriptor_kind = |fd: &Fd| model.open_files().into_iter().find(|file| file.fd == *fd).map(|file| file.kind);
    match operation {
        Operation::PowerCut => Some("a host file system cannot be power-cut"),
        Operation::Open { flags, .. } if !flags.read && !flags.write => {
            // fsoc refuses it (EINVAL); POSIX has no such access mode (Linux's nonstandard
            // mode 3 opens for ioctl only).
            Some("open for neither reading nor writing")
        }
        Operation::Symlink { target, .. } if target.contains(&0) => Some("a symlink target with NUL"),
        Operation::Open { path, flags, .. } if flags.create && in_protected_sticky_directory(model, path) => {
            // Linux refuses O_CREAT of an existing entry in a sticky, world-writable
            // directory when neither the caller nor the directory's owner owns it (EACCES,
            // even for root: fs.protected_regular and its rule for other kinds); fsoc has no
            // permission checks.
            Some("O_CREAT of another owner's entry in a sticky world-writable directory")
        }
        Operation::Chmod { path, .. }
            if model.stat(path).is_ok_and(|attributes| attributes.kind == FileKind::Symlink) =>
        {
            // fsoc keeps a symlink's own mode; Linux has none to change (EOPNOTSUPP).
            Some("chmod of a symlink")
        }
        Operation::Chown { uid, gid, .. } if *uid == u32::MAX || *gid == u32::MAX => {
            // fsoc stores the id; POSIX reads -1 as "leave unchanged".
            Some("chown to id 2^32 - 1")
        }
        Operation::Seek { fd, .. } if descriptor_kind(fd) == Some(FileKind::Directory) => {
            // fsoc's directory offset is a plain number over size 0; a POSIX directory offset
            // is the file system's cookie (ext4: a hash, SEEK_END far out; tmpfs: EINVAL).
            Some("seek on a directory")
        }
        _ => None,
    }
}

/// Whether `path` exists in a sticky, world-writable directory and is owned by neither the
/// directory's owner nor root (the caller).
fn in_protected_sticky_directory(model: &ModelFs, path: &[u8]) -> bool {
    let Some(slash) = path.iter().rposition(|&byte| byte == b'/') else { return false };
    let parent = if slash == 0 { &b"/"[..] } else { &path[..slash] };
    match (model.stat(parent), model.stat(path)) {
        (Ok(directory), Ok(entry)) => directory.mode & 0o1002 == 0o1002 && entry.uid != directory.uid && entry.uid != 0,
        _ => false,
    }
}

/// `operations` without the ones `not_comparable` rejects (judged against a model that
/// applies only the kept ones, so each is judged in the state it will run in), and how many
/// were dropped for each reason.
fn posix_subset(operations: &[Operation]) -> (Vec<Operation>, BTreeMap<&'static str, usize>) {
    let mut shadow = ModelFs::new(ModelConfig::default());
    let mut skipped = BTreeMap::new();
    let mut kept = Vec::new();
    for operation in operations {
        if let Some(reason) = not_comparable(&shadow, operation) {
            *skipped.entry(reason).or_default() += 1;
            continue;
        }
        let _outcome = shadow.apply(operation, kept.len() as i64 + 1);
        kept.push(operation.clone());
    }
    (kept, skipped)
}

/// Runs `operations` (after `posix_subset`) on a fresh `HostFs` in `directory` and a fresh
/// model; the mismatch as text on failure.
fn run_on_host(directory: &Path, operations: &[Operation]) -> Result<BTreeMap<&'static str, usize>, String> {
    let (operations, skipped) = posix_subset(operations);
    let scratch = tempfile::tempdir_in(directory).map_err(|error| format!("{}: {error}", directory.display()))?;
    let mut host = HostFs::new(scratch.path(), ModelConfig::default());
    let options = RunOptions {
        listing_interval_steps: 100,
        // The host stamps times from its own clock, not from the runner's logical one.
        compare_timestamps: false,
        ..RunOptions::default()
    };
    run_and_compare(&mut host, &mut ModelFs::default(), &operations, &options)
        .map_err(|mismatch| mismatch.to_string())?;
    Ok(skipped)
}

/// The directories to run in: tmpfs (when the host has /dev/shm) and the default temporary
/// directory's file system, so two POSIX implementations judge the model.
fn host_directories() -> Vec<std::path::PathBuf> {
    let mut directories = vec![std::env::temp_dir()];
    if Path::new("/dev/shm").is_dir() {
        directories.push("/dev/shm".into());
    }
    directories
}

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the POSIX differential test runs as root (chown; no permission checks, as in the model)");
}

#[test]
fn model_agrees_with_the_host_file_system_over_generated_operations() {
    require_root();
    for directory in host_directories() {
        for seed in test_seeds(6) {
            let operations =
                OperationGenerator::generate(seed, posix_generator_config(), ModelConfig::default(), 2_000);
            match run_on_host(&directory, &operations) {
                Ok(skipped) => eprintln!("{}: seed {seed:#x}: not compared: {skipped:?}", directory.display()),
                Err(mismatch) => panic!(
                    "{} ({}):\n{mismatch}\n{}",
                    directory.display(),
                    "the model and the host's file system disagree",
                    replay_line(seed, "fsoc-model", "--test posix_differential")
                ),
            }
        }
    }
}

/// The filter leaves most of a run to compare, and names its reasons: a guard against a
/// differential test that quietly compares nothing.
#[test]
fn most_generated_operations_are_compared() {
    let operations = OperationGenerator::generate(1, posix_generator_config(), ModelConfig::default(), 5_000);
    let (kept, skipped) = posix_subset(&operations);
    assert!(kept.len() * 100 >= operations.len() * 97, "only {} of {} compared: {skipped:?}", kept.len(), 5_000);
    let kinds: std::collections::BTreeSet<_> = kept.iter().map(Operation::kind).collect();
    assert_eq!(kinds.len(), fsoc_model::OperationKind::COUNT - 1, "every kind but PowerCut is compared: {kinds:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Stateless single operations (mostly errors on a nearly empty tree).
    #[test]
    fn model_agrees_with_the_host_on_proptest_operations(
        operations in prop::collection::vec(operation_strategy(&posix_generator_config()), 1..200)
    ) {
        require_root();
        let result = run_on_host(&std::env::temp_dir(), &operations);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    /// Model-aware sequences drawn through proptest.
    #[test]
    fn model_agrees_with_the_host_on_generated_sequences(
        operations in operation_sequence_strategy(posix_generator_config(), ModelConfig::default(), 1..300)
    ) {
        require_root();
        let result = run_on_host(&std::env::temp_dir(), &operations);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

// ---- the host side ---------------------------------------------------------------------------

/// One open descriptor of the adapter's table.
struct Descriptor {
    fd: OwnedFd,
}

/// The host's file system under a scratch directory, driven through the model's vocabulary.
///
/// Paths are resolved beneath the scratch directory's descriptor, never through a symlink
/// (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`), and the final component is never
/// followed either (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`): fsoc never follows symlinks, and a
/// stored target such as `/a` must not reach outside the scratch directory.
struct HostFs {
    root: OwnedFd,
    descriptors: BTreeMap<Fd, Descriptor>,
    config: ModelConfig,
}

fn last_errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(EIO)
}

/// `result` of a libc call returning -1 on failure, as `Err(errno)`.
fn check(result: libc::c_int) -> Result<libc::c_int, Errno> {
    if result < 0 {
        Err(last_errno())
    } else {
        Ok(result)
    }
}

fn c_string(bytes: &[u8]) -> CString {
    CString::new(bytes).expect("not_comparable keeps NUL out of names and targets")
}

fn kind_of(mode: libc::mode_t) -> FileKind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileKind::Directory,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFREG => FileKind::File,
        other => panic!("the scratch directory holds a file of type {other:#o}"),
    }
}

fn attributes(stat: &libc::stat) -> Attributes {
    let kind = kind_of(stat.st_mode);
    let nanoseconds = |seconds: i64, nanoseconds: i64| seconds.wrapping_mul(1_000_000_000).wrapping_add(nanoseconds);
    Attributes {
        ino: stat.st_ino,
        kind,
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
        nlink: stat.st_nlink as u32,
        // Mapping: fsoc reports size 0 for directories (the model's rule); a POSIX
        // directory's size is the file system's own (ext4: blocks, tmpfs: entries).
        size: if kind == FileKind::Directory { 0 } else { stat.st_size as u64 },
        atime_ns: nanoseconds(stat.st_atime, stat.st_atime_nsec),
        mtime_ns: nanoseconds(stat.st_mtime, stat.st_mtime_nsec),
        ctime_ns: nanoseconds(stat.st_ctime, stat.st_ctime_nsec),
    }
}

/// A directory as a place to look names up in, not to read.
const DIRECTORY_PATH_FLAGS: u64 = (libc::O_PATH | libc::O_DIRECTORY) as u64;

/// The path below the scratch directory (`.` for the root).
fn relative(path: &[u8]) -> &[u8] {
    match path.strip_prefix(b"/") {
        Some(rest) if !rest.is_empty() => rest,
        _ => b".",
    }
}

/// Where a path leads: a directory descriptor and the final name (`.` for the root).
struct Place {
    parent: OwnedFd,
    name: CString,
    is_root: bool,
}

impl HostFs {
    fn new(directory: &Path, config: ModelConfig) -> HostFs {
        let path = c_string(directory.as_os_str().as_encoded_bytes());
        // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        assert!(raw >= 0, "{}: {}", directory.display(), std::io::Error::last_os_error());
        // SAFETY: open returned a new descriptor nothing else owns.
        let root = unsafe { OwnedFd::from_raw_fd(raw) };
        // The model's root after format: mode `root_mode`, owned by 0:0.
        // SAFETY: a valid descriptor.
        let changed = unsafe {
            libc::fchmod(root.as_raw_fd(), config.root_mode & 0o7777) == 0 && libc::fchown(root.as_raw_fd(), 0, 0) == 0
        };
        assert!(changed, "{}: {}", directory.display(), std::io::Error::last_os_error());
        HostFs { root, descriptors: BTreeMap::new(), config }
    }

    /// Opens `path` (relative to the root, `.` for the root itself) as a directory without
    /// following any symlink on the way.
    fn open_beneath(&self, path: &[u8], flags: u64, mode: u64) -> Result<OwnedFd, Errno> {
        let path = c_string(path);
        // SAFETY: open_how is plain integers, for which zero is valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags | libc::O_CLOEXEC as u64;
        how.mode = mode;
        how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
        // SAFETY: openat2 with a valid directory descriptor, a NUL-terminated path and a
        // correctly sized `open_how`.
        let raw = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.root.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if raw < 0 {
            return Err(last_errno());
        }
        // SAFETY: openat2 returned a new descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
    }

    fn place(&self, path: &[u8]) -> Result<Place, Errno> {
        let components = fsoc_model::path::components(path).expect("not_comparable keeps bad syntax out");
        let Some((name, directories)) = components.split_last() else {
            let parent = self.open_beneath(b".", DIRECTORY_PATH_FLAGS, 0)?;
            return Ok(Place { parent, name: c_string(b"."), is_root: true });
        };
        let parent_path = if directories.is_empty() { b".".to_vec() } else { directories.join(&b'/') };
        let parent = self.open_beneath(&parent_path, DIRECTORY_PATH_FLAGS, 0).map_err(|errno| {
            // Mapping: a symlink where a directory should be is ENOTDIR for fsoc, which
            // never follows one; RESOLVE_NO_SYMLINKS reports it as ELOOP.
            if errno == ELOOP {
                ENOTDIR
            } else {
                errno
            }
        })?;
        Ok(Place { parent, name: c_string(name), is_root: false })
    }

    fn lstat(&self, place: &Place) -> Result<libc::stat, Errno> {
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid directory descriptor, a NUL-terminated name and an out-parameter.
        check(unsafe {
            libc::fstatat(place.parent.as_raw_fd(), place.name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW)
        })?;
        Ok(stat)
    }

    /// Mapping: a new inode gets uid 0, gid 0 and exactly the permission bits asked for in
    /// fsoc; POSIX applies the umask, drops set-id bits in `mkdir`, and lets a set-group-ID
    /// directory pass on its group (and, to subdirectories, the bit). The adapter sets the
    /// owner and mode fsoc gives.
    fn stamp_new_inode(&self, place: &Place, mode: Option<u32>) -> Result<(), Errno> {
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        check(unsafe {
            libc::fchownat(place.parent.as_raw_fd(), place.name.as_ptr(), 0, 0, libc::AT_SYMLINK_NOFOLLOW)
        })?;
        if let Some(mode) = mode {
            // SAFETY: as above.
            check(unsafe { libc::fchmodat(place.parent.as_raw_fd(), place.name.as_ptr(), mode & 0o7777, 0) })?;
        }
        Ok(())
    }

    fn descriptor(&self, fd: Fd) -> Result<RawFd, Errno> {
        // Mapping: descriptor numbers are the adapter's table, lowest free from 3 as POSIX
        // allocates them; the real ones differ because the test process holds others.
        self.descriptors.get(&fd).map(|descriptor| descriptor.fd.as_raw_fd()).ok_or(EBADF)
    }

    fn open(&mut self, path: &[u8], flags: OpenFlags, mode: u32) -> Result<Fd, Errno> {
        if self.descriptors.len() >= self.config.open_fd_count_max as usize {
            // Mapping: the model's descriptor limit, checked where Linux allocates a
            // descriptor (after the flags, before the path); POSIX's limit is the process's.
            return Err(if flags.create && flags.directory { EINVAL } else { EMFILE });
        }
        let mut bits = libc::O_NOFOLLOW;
        bits |= match (flags.read, flags.write) {
            (true, true) => libc::O_RDWR,
            (false, true) => libc::O_WRONLY,
            _ => libc::O_RDONLY,
        };
        for (on, bit) in [
            (flags.create, libc::O_CREAT),
            (flags.exclusive, libc::O_EXCL),
            // Mapping: POSIX leaves O_TRUNC without write access undefined (Linux
            // truncates); fsoc truncates only with write.
            (flags.truncate && flags.write, libc::O_TRUNC),
            (flags.append, libc::O_APPEND),
            (flags.directory, libc::O_DIRECTORY),
        ] {
            if on {
                bits |= bit;
            }
        }
        let existed = self.place(path).and_then(|place| self.lstat(&place)).is_ok();
        // The whole path in one call, so the kernel checks the flags before any lookup (as
        // fsoc does); openat2 wants a mode only with O_CREAT.
        let mode_bits = if flags.create { u64::from(mode & 0o7777) } else { 0 };
        let fd = self.open_beneath(relative(path), bits as u64, mode_bits).map_err(|errno| {
            // ELOOP is a symlink on the way (ENOTDIR for fsoc: `place` maps it) or the
            // final component's (ELOOP in fsoc too).
            match (errno, self.place(path)) {
                (ELOOP, Err(parent_errno)) => parent_errno,
                _ => errno,
            }
        })?;
        if !existed {
            let place = self.place(path)?;
            self.stamp_new_inode(&place, Some(mode))?;
        }
        let number = (FD_FIRST..).find(|number| !self.descriptors.contains_key(number)).expect("descriptor space");
        self.descriptors.insert(number, Descriptor { fd });
        Ok(number)
    }

    fn read(&mut self, fd: Fd, offset: Option<u64>, size_bytes: u64) -> Result<Vec<u8>, Errno> {
        let raw = self.descriptor(fd)?;
        let mut buffer = vec![0u8; size_bytes as usize];
        // One call, as the model's read is one call: Linux returns all that is there for a
        // regular file this size.
        // SAFETY: a valid descriptor and a buffer of the length passed.
        let count = unsafe {
            match offset {
                Some(offset) => libc::pread(raw, buffer.as_mut_ptr().cast(), buffer.len(), offset as libc::off_t),
                None => libc::read(raw, buffer.as_mut_ptr().cast(), buffer.len()),
            }
        };
        if count < 0 {
            return Err(last_errno());
        }
        buffer.truncate(count as usize);
        Ok(buffer)
    }

    fn write(&mut self, fd: Fd, offset: Option<u64>, data: &[u8]) -> Result<u64, Errno> {
        let raw = self.descriptor(fd)?;
        // SAFETY: a valid descriptor and a buffer of the length passed.
        let count = unsafe {
            match offset {
                Some(offset) => libc::pwrite(raw, data.as_ptr().cast(), data.len(), offset as libc::off_t),
                None => libc::write(raw, data.as_ptr().cast(), data.len()),
            }
        };
        if count < 0 {
            return Err(last_errno());
        }
        Ok(count as u64)
    }

    fn seek(&mut self, fd: Fd, offset: i64, whence: Whence) -> Result<u64, Errno> {
        let raw = self.descriptor(fd)?;
        let whence = match whence {
            Whence::Set => libc::SEEK_SET,
            Whence::Current => libc::SEEK_CUR,
            Whence::End => libc::SEEK_END,
        };
        // SAFETY: a valid descriptor.
        let position = unsafe { libc::lseek(raw, offset, whence) };
        if position < 0 {
            return Err(last_errno());
        }
        Ok(position as u64)
    }

    fn fstat(&self, fd: Fd) -> Result<Attributes, Errno> {
        let raw = self.descriptor(fd)?;
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and an out-parameter.
        check(unsafe { libc::fstat(raw, &mut stat) })?;
        Ok(attributes(&stat))
    }

    fn truncate(&self, path: &[u8], size_bytes: u64) -> Result<(), Errno> {
        let place = self.place(path)?;
        // No truncateat: open for writing without following, then ftruncate.
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let raw = unsafe {
            libc::openat(
                place.parent.as_raw_fd(),
                place.name.as_ptr(),
                libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let raw = check(raw).map_err(|errno| {
            // Mapping: fsoc refuses to truncate a symlink (EINVAL: not a regular file, and
            // never followed); POSIX truncate follows it, and O_NOFOLLOW reports ELOOP.
            if errno == ELOOP {
                EINVAL
            } else {
                errno
            }
        })?;
        // SAFETY: openat returned a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a valid descriptor.
        check(unsafe { libc::ftruncate(fd.as_raw_fd(), size_bytes as libc::off_t) })?;
        Ok(())
    }

    fn readdir(&self, path: &[u8]) -> Result<Vec<(Vec<u8>, FileKind)>, Errno> {
        let place = self.place(path)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let raw = check(unsafe { libc::openat(place.parent.as_raw_fd(), place.name.as_ptr(), flags) })?;
        // SAFETY: fdopendir takes over the new descriptor; closedir below releases both.
        let stream = unsafe { libc::fdopendir(raw) };
        assert!(!stream.is_null(), "fdopendir: {}", std::io::Error::last_os_error());
        let mut entries = Vec::new();
        loop {
            // SAFETY: a valid directory stream; the entry is read before the next call.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes().to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            // SAFETY: a valid directory descriptor, a NUL-terminated name and an
            // out-parameter.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            let name_c = c_string(&name);
            // SAFETY: as above.
            let stated =
                unsafe { libc::fstatat(libc::dirfd(stream), name_c.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) };
            assert_eq!(stated, 0, "fstatat of a listed entry: {}", std::io::Error::last_os_error());
            entries.push((name, kind_of(stat.st_mode)));
        }
        // SAFETY: the stream from fdopendir, closed once.
        unsafe { libc::closedir(stream) };
        entries.sort();
        Ok(entries)
    }

    fn at(&self, path: &[u8], call: impl FnOnce(&Place) -> libc::c_int) -> Result<Place, Errno> {
        let place = self.place(path)?;
        check(call(&place))?;
        Ok(place)
    }

    fn apply_call(&mut self, operation: &Operation) -> Outcome {
        use Operation as O;
        let unit = |result: Result<(), Errno>| result.map(|()| Output::Unit);
        match operation {
            O::Open { path, flags, mode } => self.open(path, *flags, *mode).map(Output::Fd),
            O::Read { fd, size_bytes } => self.read(*fd, None, *size_bytes).map(Output::Bytes),
            O::Write { fd, data } => self.write(*fd, None, data).map(Output::Count),
            O::Pread { fd, offset, size_bytes } => self.read(*fd, Some(*offset), *size_bytes).map(Output::Bytes),
            O::Pwrite { fd, offset, data } => self.write(*fd, Some(*offset), data).map(Output::Count),
            O::Seek { fd, offset, whence } => self.seek(*fd, *offset, *whence).map(Output::Count),
            O::Ftruncate { fd, size_bytes } => {
                let raw = self.descriptor(*fd)?;
                // SAFETY: a valid descriptor.
                unit(check(unsafe { libc::ftruncate(raw, *size_bytes as libc::off_t) }).map(drop))
            }
            O::Fsync { fd } => {
                let raw = self.descriptor(*fd)?;
                // SAFETY: a valid descriptor.
                unit(check(unsafe { libc::fsync(raw) }).map(drop))
            }
            O::Close { fd } => {
                // Closing the adapter's entry closes the host descriptor (OwnedFd).
                self.descriptors.remove(fd).ok_or(EBADF)?;
                Ok(Output::Unit)
            }
            O::Fstat { fd } => self.fstat(*fd).map(Output::Attributes),
            O::Stat { path } => {
                let place = self.place(path)?;
                self.lstat(&place).map(|stat| Output::Attributes(attributes(&stat)))
            }
            O::Truncate { path, size_bytes } => unit(self.truncate(path, *size_bytes)),
            O::Mkdir { path, mode } => {
                // SAFETY (closure): a valid directory descriptor and a NUL-terminated name.
                let place = self.at(path, |place| unsafe {
                    libc::mkdirat(place.parent.as_raw_fd(), place.name.as_ptr(), mode & 0o7777)
                })?;
                unit(self.stamp_new_inode(&place, Some(*mode)))
            }
            O::Rmdir { path } => {
                let place = self.place(path)?;
                if place.is_root {
                    // Mapping: the root is the scratch directory, named here by `.`, whose
                    // removal Linux refuses with EINVAL; rmdir("/") is EBUSY, as in fsoc.
                    return Err(EBUSY);
                }
                // SAFETY: a valid directory descriptor and a NUL-terminated name.
                unit(
                    check(unsafe { libc::unlinkat(place.parent.as_raw_fd(), place.name.as_ptr(), libc::AT_REMOVEDIR) })
                        .map(drop),
                )
            }
            O::Unlink { path } => {
                // SAFETY (closure): as above.
                unit(
                    self.at(path, |place| unsafe { libc::unlinkat(place.parent.as_raw_fd(), place.name.as_ptr(), 0) })
                        .map(drop),
                )
            }
            O::Rename { source_path, target_path } => {
                let source = self.place(source_path)?;
                let target = self.place(target_path)?;
                // SAFETY: valid directory descriptors and NUL-terminated names.
                let renamed = unsafe {
                    libc::renameat(
                        source.parent.as_raw_fd(),
                        source.name.as_ptr(),
                        target.parent.as_raw_fd(),
                        target.name.as_ptr(),
                    )
                };
                unit(check(renamed).map(drop))
            }
            O::Readdir { path } => self.readdir(path).map(Output::Entries),
            O::Link { existing_path, new_path } => {
                let existing = self.place(existing_path)?;
                // The kernel resolves the existing path completely before it looks at the
                // new one.
                self.lstat(&existing)?;
                let new = self.place(new_path)?;
                // Flags 0: a symlink is linked itself, not followed (as in fsoc).
                // SAFETY: valid directory descriptors and NUL-terminated names.
                let linked = unsafe {
                    libc::linkat(
                        existing.parent.as_raw_fd(),
                        existing.name.as_ptr(),
                        new.parent.as_raw_fd(),
                        new.name.as_ptr(),
                        0,
                    )
                };
                unit(check(linked).map(drop))
            }
            O::Symlink { target, link_path } => {
                let target = c_string(target);
                if target.is_empty() {
                    // The kernel reads the target before it looks up the link path, and
                    // refuses an empty one (ENOENT): ask it with a name that needs no lookup.
                    // SAFETY: NUL-terminated strings and a valid directory descriptor.
                    return unit(
                        check(unsafe { libc::symlinkat(target.as_ptr(), self.root.as_raw_fd(), c".".as_ptr()) })
                            .map(drop),
                    );
                }
                // SAFETY (closure): a NUL-terminated target, a valid directory descriptor and
                // a NUL-terminated name.
                let place = self.at(link_path, |place| unsafe {
                    libc::symlinkat(target.as_ptr(), place.parent.as_raw_fd(), place.name.as_ptr())
                })?;
                unit(self.stamp_new_inode(&place, None))
            }
            O::Readlink { path } => {
                let place = self.place(path)?;
                let mut buffer = vec![0u8; 4096];
                // SAFETY: a valid directory descriptor, a NUL-terminated name and a buffer
                // of the length passed.
                let count = unsafe {
                    libc::readlinkat(
                        place.parent.as_raw_fd(),
                        place.name.as_ptr(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                    )
                };
                if count < 0 {
                    return Err(last_errno());
                }
                buffer.truncate(count as usize);
                Ok(Output::Bytes(buffer))
            }
            O::Chmod { path, mode } => {
                // SAFETY (closure): a valid directory descriptor and a NUL-terminated name.
                unit(
                    self.at(path, |place| unsafe {
                        libc::fchmodat(place.parent.as_raw_fd(), place.name.as_ptr(), mode & 0o7777, 0)
                    })
                    .map(drop),
                )
            }
            O::Chown { path, uid, gid } => {
                let place = self.place(path)?;
                let before = self.lstat(&place)?;
                // SAFETY: a valid directory descriptor and a NUL-terminated name.
                check(unsafe {
                    libc::fchownat(place.parent.as_raw_fd(), place.name.as_ptr(), *uid, *gid, libc::AT_SYMLINK_NOFOLLOW)
                })?;
                let after = self.lstat(&place)?;
                if kind_of(before.st_mode) != FileKind::Symlink && after.st_mode != before.st_mode {
                    // Mapping: fsoc sets the ids and nothing else; Linux clears the set-id
                    // bits of a file whose owner changes. The adapter puts them back.
                    // SAFETY: as above.
                    check(unsafe {
                        libc::fchmodat(place.parent.as_raw_fd(), place.name.as_ptr(), before.st_mode & 0o7777, 0)
                    })?;
                }
                Ok(Output::Unit)
            }
            O::Utimens { path, atime_ns, mtime_ns } => {
                let timespec = |nanoseconds: i64| libc::timespec {
                    tv_sec: nanoseconds.div_euclid(1_000_000_000) as libc::time_t,
                    tv_nsec: nanoseconds.rem_euclid(1_000_000_000) as libc::c_long,
                };
                let times = [timespec(*atime_ns), timespec(*mtime_ns)];
                // SAFETY (closure): a valid directory descriptor, a NUL-terminated name and a
                // two-element times array.
                unit(
                    self.at(path, |place| unsafe {
                        libc::utimensat(
                            place.parent.as_raw_fd(),
                            place.name.as_ptr(),
                            times.as_ptr(),
                            libc::AT_SYMLINK_NOFOLLOW,
                        )
                    })
                    .map(drop),
                )
            }
            O::Statfs => {
                // SAFETY: a zeroed statvfs is a valid out-parameter.
                let mut statvfs: libc::statvfs = unsafe { std::mem::zeroed() };
                // SAFETY: a valid descriptor and an out-parameter.
                check(unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut statvfs) })?;
                Ok(Output::Statfs)
            }
            // Mapping: fsoc's commit of everything; the nearest POSIX call is syncfs.
            // SAFETY: a valid descriptor.
            O::Transact => unit(check(unsafe { libc::syncfs(self.root.as_raw_fd()) }).map(drop)),
            O::Remount => {
                // Mapping: a clean unmount and mount closes every descriptor; the host's
                // state is already what a remount would find.
                self.descriptors.clear();
                Ok(Output::Unit)
            }
            O::PowerCut => unreachable!("not_comparable keeps power cuts out"),
        }
    }
}

impl FsUnderTest for HostFs {
    fn apply(&mut self, operation: &Operation, _now_ns: i64) -> Outcome {
        self.apply_call(operation)
    }

    fn listing(&mut self) -> Listing {
        listing_through_calls(|operation| self.apply_call(operation))
    }
}
