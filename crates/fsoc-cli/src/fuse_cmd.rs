//! `fsoc mount IMAGE MOUNTPOINT`: serves a volume image through FUSE until it is unmounted
//! (Ctrl-C, SIGTERM, `fsoc umount`, umount(8), `fusermount3 -u`), then commits and closes the
//! image cleanly. The same program started as `mount.fuse.fsoc` or `umount.fuse.fsoc` (links
//! to it, scripts/install.sh) is the helper mount(8) and umount(8) run for type `fuse.fsoc`
//! (docs/MOUNT.md).
//!
//! Invariants: the image is locked exclusively for the whole mount, so no tool or second mount
//! writes it meanwhile; the volume is committed only after the kernel has dropped the mount,
//! so the commit is the last write; `--daemon` and the mount helper report success only once
//! the mount is live and report the server's own error message otherwise; a new mount of an
//! image whose previous server is still finishing its final commit waits for it (bounded by
//! `PREVIOUS_SERVER_WAIT`) instead of failing; a remount to read-only returns only after the
//! server has committed.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use fsoc_fuse::{Mount, MountConfig, Unmounted};

use crate::mount_options::{self, MountOptions};
use crate::volume_files::{lock_image, wait_for_image, VolumeFiles};

/// Names the descriptor on which a daemon child reports "ready" or its error.
const READY_FD_VARIABLE: &str = "FSOC_MOUNT_READY_FD";
const READY_LINE: &str = "ready";

#[derive(Subcommand)]
pub enum MountCommand {
    /// Mounts a volume image on a directory through FUSE. Stays in the foreground until
    /// unmounted (Ctrl-C, SIGTERM or `fsoc umount MOUNTPOINT`), then commits cleanly.
    Mount(MountArgs),
    /// Unmounts an fsoc mount and waits until its server has committed and closed the image
    /// (after `fusermount3 -u` alone, the commit may still be running).
    Umount {
        /// Where the volume is mounted.
        mount_point: PathBuf,
        /// Detach a busy mount now; the server commits when its last open file is closed.
        #[arg(long, short = 'l')]
        lazy: bool,
        /// Give up waiting for the commit after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout_seconds: u64,
    },
}

#[derive(Args, Clone)]
pub struct MountArgs {
    /// The volume: an image file from `fsoc mkfs`, or an array from `fsoc array mkfs` as BASE
    /// or any of its chip files BASE.chipN. Locked while mounted. With --remote: the address
    /// of an `fsoc serve`, tcp:HOST:PORT or unix:PATH.
    image: PathBuf,
    /// An empty directory to mount it on.
    mount_point: PathBuf,
    /// Detach into the background once the volume is mounted.
    #[arg(long)]
    daemon: bool,
    /// With --daemon: append log lines here (default: discarded).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Mount read-only: nothing on the image changes.
    #[arg(long)]
    read_only: bool,
    /// Only the mounting user may use the mount (by default, when root mounts, every user may,
    /// with permissions checked as on any volume).
    #[arg(long)]
    private: bool,
    /// Threads receiving kernel requests, 1 to 64 (read-only requests run on them at once;
    /// changes one at a time).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Send every write to the volume as it is made, instead of letting the kernel's page
    /// cache gather small writes into large ones (FUSE writeback_cache, on by default; fsync
    /// and close mean the same either way).
    #[arg(long)]
    no_writeback_cache: bool,
    /// Print mount and unmount steps.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Mount the volume an `fsoc serve` serves: IMAGE is its address (tcp:HOST:PORT or
    /// unix:PATH), and every request is forwarded over 9P2000.L (docs/PROTOCOL.md 8). The
    /// kernel caches attributes and names for 1 s, as other hosts may change the volume.
    #[arg(long)]
    remote: bool,
    /// With --remote: the server's pre-shared key (`fsoc serve --secret-file`).
    #[arg(long, value_name = "PATH", requires = "remote")]
    secret_file: Option<PathBuf>,
    /// Make a transaction point this often (seconds) while anything changed, so files left on
    /// the mount survive a crash within about this time (as ext4's commit=5); 0 commits only
    /// on fsync and unmount.
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    commit_interval: u64,
    /// Mount options as mount(8) takes them, comma-separated (may be repeated; applied after
    /// the flags above, later ones win): ro, rw, suid, nosuid, dev, nodev, exec, noexec, atime,
    /// noatime, relatime, strictatime, allow_other, no_allow_other, default_permissions,
    /// commit=SECONDS, threads=N, writeback_cache, no_writeback_cache, io_uring (FUSE over
    /// io_uring when the kernel offers it), no_io_uring (the default), xattr, noxattr (no
    /// extended attributes), acl, noacl (no POSIX ACLs), scrub=PAGES_PER_SECOND (the
    /// background scrub's rate, default 128; 0 turns it off), log=PATH, and remount
    /// (change ro/rw and the flags of the live mount on MOUNTPOINT). Defaults as for a kernel
    /// file system: rw, exec, relatime, and suid and dev when root mounts (docs/MOUNT.md).
    #[arg(long = "options", short = 'o', value_name = "LIST", value_parser = mount_options::parse_strict)]
    options: Vec<MountOptions>,
}

impl MountArgs {
    /// The flags as options, then every `-o` list on top.
    fn mount_options(&self) -> MountOptions {
        let flags = MountOptions {
            read_only: self.read_only.then_some(true),
            allow_other: self.private.then_some(false),
            thread_count: Some(self.threads),
            writeback_cache: self.no_writeback_cache.then_some(false),
            commit_interval_seconds: Some(self.commit_interval),
            log: self.log.clone(),
            ..MountOptions::default()
        };
        self.options.iter().fold(flags, |options, list| options.then(list))
    }
}

pub fn run(command: MountCommand) -> Result<(), String> {
    let arguments = match command {
        MountCommand::Mount(arguments) => arguments,
        MountCommand::Umount { mount_point, lazy, timeout_seconds } => {
            return unmount(&mount_point, lazy, Duration::from_secs(timeout_seconds));
        }
    };
    // A remount changes only what its -o lists name, not what the flags' defaults say.
    let listed = arguments.options.iter().fold(MountOptions::default(), |options, list| options.then(list));
    if listed.remount {
        return remount(&arguments.mount_point, &listed, RemountList::Changes);
    }
    let options = arguments.mount_options();
    match std::env::var(READY_FD_VARIABLE).ok().and_then(|fd| fd.parse::<i32>().ok()) {
        Some(fd) => {
            // SAFETY: the parent passed this descriptor to us open and names it in the
            // environment; nothing else in this process owns it.
            let mut reporter = Reporter { pipe: Some(unsafe { File::from_raw_fd(fd) }) };
            std::env::remove_var(READY_FD_VARIABLE);
            let result = serve(&arguments, &options, &mut reporter);
            if let Err(message) = &result {
                reporter.failed(message);
            }
            result
        }
        None if arguments.daemon => {
            // Waited for here, where the user sees the message, rather than in the daemon.
            wait_for_previous_server(&arguments.image)?;
            let pid = match fork_daemon(&arguments, &options)? {
                Some(pid) => pid,
                None => {
                    let child_arguments =
                        std::env::args_os().skip(1).filter(|argument| argument != "--daemon").collect();
                    spawn_daemon(child_arguments, options.log.as_deref())?
                }
            };
            eprintln!(
                "fsoc: mounted in the background (pid {pid}); unmount with `fsoc umount {}`",
                arguments.mount_point.display()
            );
            Ok(())
        }
        None => serve(&arguments, &options, &mut Reporter { pipe: None }),
    }
}

/// Tells a waiting parent (with --daemon) how mounting went.
struct Reporter {
    pipe: Option<File>,
}

impl Reporter {
    fn ready(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = writeln!(pipe, "{READY_LINE}");
        }
    }

    fn failed(&mut self, message: &str) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = write!(pipe, "{message}");
        }
    }
}

/// Starts `fsoc` with `arguments` (a foreground `fsoc mount`) in a process group of its own
/// with no terminal input or output, its log lines appended to `log` (or discarded), and waits
/// until it reports that the volume is mounted (or why it is not). Returns the server's pid.
fn spawn_daemon(arguments: Vec<OsString>, log: Option<&Path>) -> Result<u32, String> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let [read_fd, write_fd] = fds;
    // SAFETY: both descriptors were just created and are owned here.
    let (mut reader, writer) = unsafe { (File::from_raw_fd(read_fd), File::from_raw_fd(write_fd)) };
    // SAFETY: fcntl on a descriptor we own; the child must not inherit the read end.
    unsafe { libc::fcntl(read_fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let log_file = log
        .map(|path| {
            File::options().create(true).append(true).open(path).map_err(|error| format!("{}: {error}", path.display()))
        })
        .transpose()?;
    let stderr = log_file.map_or_else(Stdio::null, Stdio::from);
    let executable = std::env::current_exe().map_err(|error| format!("cannot find the fsoc executable: {error}"))?;
    let mut command = Command::new(executable);
    // Named `fsoc`, so a copy installed as mount.fuse.fsoc runs the command, not the helper.
    command
        .arg0("fsoc")
        .args(arguments)
        .env(READY_FD_VARIABLE, write_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // Its own process group, so the terminal's job control (Ctrl-C, the hangup of a
    // foreground job) never reaches it, but the caller's session: the kernel's scheduler
    // groups tasks by session (autogroup), and a server in another group than the programs
    // using the mount made their FUSE-over-io_uring round trips 3× slower on the build machine
    // (36 µs instead of 11: every reply woke the caller on the other CPU; docs/MOUNT.md).
    command.process_group(0);
    let child = command.spawn().map_err(|error| format!("cannot start the mount daemon: {error}"))?;
    drop(writer);
    daemon_report(&mut reader, child.id())
}

/// Waits for a daemon's report on `reader` (its end of the pipe, the writer's copies closed
/// here): `pid` once it says the volume is mounted, else its error message.
fn daemon_report(reader: &mut File, pid: u32) -> Result<u32, String> {
    let mut report = String::new();
    reader.read_to_string(&mut report).map_err(|error| format!("reading the daemon's report: {error}"))?;
    match report.trim_end() {
        line if line == READY_LINE => Ok(pid),
        "" => Err("the mount daemon exited before mounting (run `fsoc mount` without --daemon to see why)".into()),
        message => Err(message.to_string()),
    }
}

/// Whether this process runs one thread (from /proc/self/status; `false` when it cannot tell).
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| line.strip_prefix("Threads:").map(|count| count.trim() == "1"))
        })
        .unwrap_or(false)
}

/// `fsoc mount --daemon`: forks the server instead of starting `fsoc` again, which halves the
/// mount's time where starting a process is slow (0.13 s of the 0.25 s a 2 GiB MTD mount took
/// under QEMU's emulation, where UBI's attach and mount take 5.7 s). The child, in a process
/// group of its own with no terminal input or output and its log lines appended to the log
/// (or discarded), serves the mount and exits when it is unmounted; the parent waits until it
/// reports that the volume is mounted (or why it is not) and returns its pid. `None` when the
/// process already runs other threads (then only a fresh process is safe: `spawn_daemon`).
fn fork_daemon(arguments: &MountArgs, options: &MountOptions) -> Result<Option<u32>, String> {
    if !single_threaded() {
        return Ok(None);
    }
    let log_file = options
        .log
        .as_deref()
        .map(|path| {
            File::options().create(true).append(true).open(path).map_err(|error| format!("{}: {error}", path.display()))
        })
        .transpose()?;
    let null =
        File::options().read(true).write(true).open("/dev/null").map_err(|error| format!("/dev/null: {error}"))?;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are owned here.
    let (mut reader, writer) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: the process has one thread (checked above), so the child is a whole copy of it
    // and may go on running this program; nothing is locked across the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("cannot start the mount daemon: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(reader);
        let stderr = log_file.as_ref().unwrap_or(&null);
        // SAFETY: setpgid on this process and dup2 onto the standard descriptors, with
        // descriptors this process owns. Its own process group keeps the terminal's job
        // control away (see `spawn_daemon` on why the session stays the caller's).
        unsafe {
            libc::setpgid(0, 0);
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(stderr.as_raw_fd(), 2);
        }
        drop(log_file);
        drop(null);
        let mut reporter = Reporter { pipe: Some(writer) };
        let result = serve(arguments, options, &mut reporter);
        if let Err(message) = &result {
            eprintln!("fsoc: {message}");
            reporter.failed(message);
        }
        std::process::exit(i32::from(result.is_err()));
    }
    drop(writer);
    daemon_report(&mut reader, pid.unsigned_abs()).map(Some)
}

/// The signals a server takes with `sigwaitinfo` (blocked in every thread): the ones that
/// unmount the volume, and `REQUEST_SIGNAL`.
fn server_signals() -> libc::sigset_t {
    signal_set(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, REQUEST_SIGNAL])
}

fn signal_set(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize and fill the set this function owns.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

fn serve(arguments: &MountArgs, options: &MountOptions, reporter: &mut Reporter) -> Result<(), String> {
    if arguments.remote {
        let address = arguments.image.to_str().ok_or("the --remote address is not UTF-8")?;
        let mount_point = &arguments.mount_point;
        let secret_file = arguments.secret_file.as_deref();
        return crate::remote_mount::serve(address, mount_point, secret_file, options, arguments.verbose, &mut || {
            reporter.ready()
        });
    }
    fsoc_fuse::logger::install("fsoc mount", arguments.verbose);
    let image = &arguments.image;
    // Mount point first: it is cheap to check and mounting the volume may already write
    // (orphan clean-up).
    let mount_point = fsoc_fuse::check_mount_point(&arguments.mount_point).map_err(|error| error.to_string())?;
    wait_for_previous_server(image)?;
    let mut config = MountConfig::default();
    options.configure(&mut config);
    if let Ok(canonical_image) = image.canonicalize() {
        if canonical_image.starts_with(&mount_point) {
            return Err(format!(
                "{}: the image lies inside the mount point {}",
                image.display(),
                mount_point.display()
            ));
        }
    }
    // Block the server's signals before any thread starts, so they reach only `sigwaitinfo`:
    // opening an array of chip files starts its chip workers, which inherit this mask (a
    // worker left without it took a SIGUSR1 or SIGTERM and the process died without its final
    // commit; tests/redundancy.rs `a_degraded_array_refuses_remount_read_write`).
    let signals = server_signals();
    // SAFETY: changes this thread's mask (inherited by threads spawned later); the set is valid.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
    // Every file of the volume locked exclusively (even read-only: a tool must not change
    // what the mount serves), then opened.
    let (crate::volume_files::OpenVolume { files, fs, locks }, flash_writable) =
        crate::volume_files::open_for_mount(image, config.read_only)?;
    if let Some(damage) = fs.mount_report().damage {
        log::warn!("{}: {damage}; run `fsoc fsck {}` after unmounting", image.display(), image.display());
    }
    // Served all the same (every page is rebuilt from the other chips), but read-only.
    if let Some(degraded) = crate::volume_cmd::degraded_text(&fs, files.name()) {
        log::warn!("{}: {degraded} after unmounting", image.display());
    }
    // An array of files is named by its chip 0, which `fsoc umount` waits for like an image;
    // an MTD array by all its devices (chip 0 alone does not say which others belong to it).
    let source = files.mount_source();
    config.source = if source.exists() || crate::volume_files::mtd_devices(&source).is_some() {
        fsoc_fuse::source_for(&source)
    } else {
        fsoc_fuse::FS_NAME.into()
    };
    let mut mount = Mount::new(fs, &mount_point, &config).map_err(|error| format!("{}: {error}", image.display()))?;
    if mount.uses_io_uring() {
        log::info!("{}", fsoc_fuse::IO_URING_GRANTED);
    } else if config.io_uring {
        log::warn!(
            "io_uring asked for, but the kernel does not offer FUSE over io_uring (it needs Linux 6.14 or later \
             with /sys/module/fuse/parameters/enable_uring set to Y): requests go through /dev/fuse"
        );
    }
    let mut unmounter = mount.unmounter();
    let committer = mount.commit_handle();
    let writable = mount.writable_handle();
    let shown_mount_point = mount_point.display().to_string();
    std::thread::Builder::new()
        .name("fsoc-signals".into())
        .spawn(move || loop {
            // SAFETY: an all-zero siginfo_t is a valid value for sigwaitinfo to fill.
            let mut information: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `signals` is a valid set and `information` a valid out-pointer.
            let signal = unsafe { libc::sigwaitinfo(&signals, &mut information) };
            if signal < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
            if signal == REQUEST_SIGNAL {
                answer_request(
                    &information,
                    |timeout| committer.commit(timeout),
                    || {
                        if !flash_writable {
                            log::error!("remount read-write: the volume's files or devices were opened read-only");
                            return ANSWER_READ_ONLY;
                        }
                        match writable.make_writable() {
                            Ok(()) => ANSWER_DONE,
                            Err(error) => {
                                log::error!("remount read-write: {error}");
                                match error {
                                    // A writable flash under a volume that stays read-only: a chip is missing.
                                    fsoc_core::FsError::ReadOnly => ANSWER_DEGRADED,
                                    fsoc_core::FsError::WornOut(_) => ANSWER_WORN_OUT,
                                    _ => ANSWER_FAILED,
                                }
                            }
                        }
                    },
                );
                continue;
            }
            log::info!("signal {signal}: unmounting {shown_mount_point}");
            match unmounter.unmount() {
                Ok(Unmounted::Now) => {}
                Ok(Unmounted::Detached) => log::warn!(
                    "{shown_mount_point} is busy: detached it; fsoc commits and exits when the last open file on it is closed"
                ),
                Err(error) => log::error!("cannot unmount {shown_mount_point}: {error}"),
            }
        })
        .map_err(|error| format!("cannot start the signal thread: {error}"))?;
    if !arguments.daemon && reporter.pipe.is_none() {
        eprintln!(
            "fsoc: {} mounted on {}; unmount with Ctrl-C or `fsoc umount {}`",
            image.display(),
            mount_point.display(),
            mount_point.display()
        );
    }
    reporter.ready();
    let served = mount.run().map_err(|error| format!("{}: {error}", image.display()))?;
    let closed = crate::volume_files::close_served(served.fs, served.failure.as_deref(), files.name(), image);
    drop(locks);
    closed?;
    log::info!("{} unmounted cleanly", image.display());
    Ok(())
}

/// `fsoc umount`: `fusermount3 -u` (or `-u -z`), then waits for the server to release the
/// image, which it does only after its final commit.
fn unmount(mount_point: &Path, lazy: bool, timeout: Duration) -> Result<(), String> {
    // A mount whose server died answers ENOTCONN: canonicalize would fail on it, so look the
    // path up as given first.
    let server_dead =
        std::fs::metadata(mount_point).err().and_then(|error| error.raw_os_error()) == Some(libc::ENOTCONN);
    let canonical = if server_dead {
        std::path::absolute(mount_point).map_err(|error| format!("{}: {error}", mount_point.display()))?
    } else {
        mount_point.canonicalize().map_err(|error| format!("{}: {error}", mount_point.display()))?
    };
    let image = fsoc_fuse::mounted_image(&canonical)?;
    let mut command = Command::new("fusermount3");
    command.arg("-u");
    if lazy {
        command.arg("-z");
    }
    let output =
        command.arg("--").arg(&canonical).output().map_err(|error| format!("cannot run fusermount3: {error}"))?;
    if !output.status.success() {
        let detail = String::from_utf8_lossy(&output.stderr).trim().to_string();
        let hint = if detail.contains("busy") { " (close the files open on it, or use --lazy)" } else { "" };
        return Err(format!("cannot unmount {}: {detail}{hint}", canonical.display()));
    }
    match image {
        Some(image) => {
            if lazy && fsoc_fuse::is_mount_point(&canonical) {
                eprintln!("fsoc: {} detached; waiting for its last open file to close", canonical.display());
            }
            wait_for_image(&image, timeout)?;
            // The mount table names an array by its chip 0: speak of the whole array.
            let shown = VolumeFiles::locate(&image).name().display().to_string();
            // "Committed" only if the server's last act was a clean-unmount commit: a server
            // that died (or was killed) leaves the image at its last transaction point.
            let clean = image_was_unmounted_cleanly(&image);
            if server_dead || !clean {
                return Err(format!(
                    "unmounted {}, but its server {} before its final commit: {} keeps its last committed state \
                     (changes after it are lost); check it with `fsoc fsck {}`",
                    canonical.display(),
                    if server_dead { "had died" } else { "stopped" },
                    shown,
                    shown
                ));
            }
            eprintln!("fsoc: unmounted {}; {shown} is committed and closed", canonical.display());
        }
        None if server_dead => {
            return Err(format!("unmounted {}, but its server had died before its final commit", canonical.display()));
        }
        None => eprintln!(
            "fsoc: unmounted {} (its image name is unknown, so the final commit may still be running)",
            canonical.display()
        ),
    }
    Ok(())
}

/// Whether the newest metaroot of `image` is a clean-unmount record (read-only mount: a few
/// page reads, nothing written).
fn image_was_unmounted_cleanly(image: &Path) -> bool {
    crate::volume_files::open(image, true, false).is_ok_and(|volume| volume.fs.mount_report().clean)
}

/// How long a new mount waits for the previous server of its image: a plain umount(8) without
/// fsoc's umount helper, or `fusermount3 -u`, returns while the server is still making its
/// final commit with the image locked.
const PREVIOUS_SERVER_WAIT: Duration = Duration::from_secs(30);

/// Waits, at most `PREVIOUS_SERVER_WAIT`, until no fsoc process holds a file of the volume at
/// `image`. A volume that is visibly mounted is refused at once: its holder serves a mount and
/// will not let go. Any other holder is a server finishing its final commit after an unmount
/// (or a tool), which lets go soon.
fn wait_for_previous_server(image: &Path) -> Result<(), String> {
    let deadline = Instant::now() + PREVIOUS_SERVER_WAIT;
    let mut announced = false;
    let files = VolumeFiles::locate(image);
    files.check()?;
    for file in files.files() {
        // A missing file is for the open that follows to explain.
        if !file.exists() || lock_image(&file, true).is_ok() {
            continue;
        }
        let canonical = file.canonicalize().unwrap_or_else(|_| file.clone());
        if let Some(mount_point) = fsoc_mount_of(&canonical) {
            return Err(format!(
                "{}: the image is in use: it is mounted on {}; unmount it first",
                image.display(),
                mount_point.display()
            ));
        }
        let holder = lock_holder(&file).map_or_else(String::new, |pid| format!(" (pid {pid})"));
        if !announced {
            eprintln!(
                "fsoc: {} is held by another fsoc process{holder}, most likely the server of an unmount \
                 finishing its final commit; waiting up to {} s",
                image.display(),
                PREVIOUS_SERVER_WAIT.as_secs()
            );
            announced = true;
        }
        wait_for_image(&file, deadline.saturating_duration_since(Instant::now())).map_err(|_| {
            format!(
                "{}: the image is in use by another fsoc process{holder} (mounted in another namespace, a server \
                 still committing after {} s, or a tool); unmount it or stop that process first",
                image.display(),
                PREVIOUS_SERVER_WAIT.as_secs()
            )
        })?;
    }
    Ok(())
}

/// One line of /proc/self/mounts, unescaped.
#[derive(Debug, PartialEq, Eq)]
struct MountTableEntry {
    source: String,
    mount_point: PathBuf,
    file_system_type: String,
    /// The per-mount and the file system's options together (`ro` if either is read-only).
    options: Vec<String>,
}

fn mount_table() -> Result<Vec<MountTableEntry>, String> {
    let table = std::fs::read_to_string("/proc/self/mounts").map_err(|error| format!("/proc/self/mounts: {error}"))?;
    Ok(table.lines().filter_map(parse_mount_line).collect())
}

fn parse_mount_line(line: &str) -> Option<MountTableEntry> {
    let mut fields = line.split(' ');
    let source = fsoc_fuse::unescape_mount_path(fields.next()?);
    let mount_point = PathBuf::from(fsoc_fuse::unescape_mount_path(fields.next()?));
    let file_system_type = fields.next()?.to_string();
    let options = fields.next()?.split(',').map(str::to_owned).collect();
    Some(MountTableEntry { source, mount_point, file_system_type, options })
}

/// An fsoc mount: type `fuse.fsoc`, or (made by an older fsoc) type `fuse` from `fsoc[:IMAGE]`.
fn is_fsoc_mount(entry: &MountTableEntry) -> bool {
    entry.file_system_type == format!("fuse.{}", fsoc_fuse::FS_NAME)
        || (entry.file_system_type == "fuse"
            && (entry.source == fsoc_fuse::FS_NAME || entry.source.starts_with("fsoc:")))
}

/// The image an fsoc mount's source names, if it names one.
fn entry_image(entry: &MountTableEntry) -> Option<&Path> {
    let path = Path::new(entry.source.strip_prefix("fsoc:").unwrap_or(&entry.source));
    path.is_absolute().then_some(path)
}

/// Where the volume whose (canonical) primary file is `image` is mounted, if it is.
fn fsoc_mount_of(image: &Path) -> Option<PathBuf> {
    let table = mount_table().ok()?;
    table
        .into_iter()
        .rev()
        .find(|entry| {
            is_fsoc_mount(entry)
                && entry_image(entry).is_some_and(|source| {
                    source == image
                        || crate::volume_files::mtd_devices(source)
                            .is_some_and(|devices| devices.iter().any(|device| device == image))
                })
        })
        .map(|entry| entry.mount_point)
}

/// The pid of the process holding an exclusive flock on `file` (a server holds its image so).
fn lock_holder(file: &Path) -> Option<u32> {
    let metadata = std::fs::metadata(file).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    find_lock_holder(&locks, device_major(metadata.dev()), device_minor(metadata.dev()), metadata.ino())
}

/// Finds, in /proc/locks text, the holder of a granted exclusive flock on an inode. A line reads
/// `1: FLOCK  ADVISORY  WRITE 5779 00:2d:1234 0 EOF` (device numbers in hex); a request still
/// waiting has `->` after its number.
fn find_lock_holder(locks: &str, major: u64, minor: u64, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, "FLOCK", _, "WRITE", pid, device, ..] = fields.as_slice() else { return None };
        let mut parts = device.split(':');
        let device_major = u64::from_str_radix(parts.next()?, 16).ok()?;
        let device_minor = u64::from_str_radix(parts.next()?, 16).ok()?;
        let device_inode = parts.next()?.parse::<u64>().ok()?;
        if (device_major, device_minor, device_inode) == (major, minor, inode) {
            pid.parse().ok()
        } else {
            None
        }
    })
}

/// The major number of a Linux `dev_t` (glibc's encoding).
fn device_major(device: u64) -> u64 {
    ((device >> 8) & 0xfff) | ((device >> 32) & 0xffff_f000)
}

/// The minor number of a Linux `dev_t` (glibc's encoding).
fn device_minor(device: u64) -> u64 {
    (device & 0xff) | ((device >> 12) & 0xffff_ff00)
}

/// A request to a running server, sent with sigqueue as this signal's value; the server answers
/// its sender with the same signal carrying an `ANSWER_*` value. A plain `kill -USR1` (no
/// value) makes the server commit and answers nobody.
const REQUEST_SIGNAL: i32 = libc::SIGUSR1;
const REQUEST_COMMIT: i32 = 1;
const REQUEST_WRITABLE: i32 = 2;
const ANSWER_DONE: i32 = 0;
/// The volume's files or devices take no writes (opened read-only: write-protected, or this
/// user may only read them).
const ANSWER_READ_ONLY: i32 = 1;
const ANSWER_FAILED: i32 = 2;
/// A chip of the array is missing: the volume stays read-only until `fsoc rebuild`.
const ANSWER_DEGRADED: i32 = 3;
/// The volume is at its end of life: what is on it stays readable, nothing more is written.
const ANSWER_WORN_OUT: i32 = 4;
/// How long a remount waits for the server's answer (its commit included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's side: answers one `REQUEST_SIGNAL`. `make_writable` makes a read-only mount's
/// volume writable (and does nothing on a writable one), answering with an `ANSWER_*` code.
fn answer_request(
    information: &libc::siginfo_t,
    commit: impl FnOnce(Duration) -> Result<(), String>,
    make_writable: impl FnOnce() -> i32,
) {
    // SAFETY: for REQUEST_SIGNAL, sent by kill or sigqueue, si_pid and si_value are filled.
    let (code, sender, value) = unsafe { (information.si_code, information.si_pid(), information.si_value()) };
    let request = value.sival_ptr as usize;
    if code != libc::SI_QUEUE {
        match commit(REQUEST_TIMEOUT) {
            Ok(()) => log::info!("committed on signal {REQUEST_SIGNAL} from pid {sender}"),
            Err(message) => log::error!("commit on signal {REQUEST_SIGNAL} failed: {message}"),
        }
        return;
    }
    let answer = match i32::try_from(request) {
        Ok(REQUEST_COMMIT) => match commit(REQUEST_TIMEOUT) {
            Ok(()) => ANSWER_DONE,
            Err(message) => {
                log::error!("commit requested by pid {sender} failed: {message}");
                ANSWER_FAILED
            }
        },
        Ok(REQUEST_WRITABLE) => make_writable(),
        _ => {
            log::warn!("ignoring unknown request {request} from pid {sender}");
            return;
        }
    };
    if let Err(error) = send_value(sender, answer) {
        log::warn!("cannot answer pid {sender}: {error}");
    }
}

fn send_value(pid: libc::pid_t, value: i32) -> std::io::Result<()> {
    // The value travels in the pointer-sized union; both sides read it back as an integer.
    let value = libc::sigval { sival_ptr: usize::try_from(value).unwrap_or(0) as *mut libc::c_void };
    // SAFETY: sigqueue takes its arguments by value.
    if unsafe { libc::sigqueue(pid, REQUEST_SIGNAL, value) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The asking side: sends `request` to the server `pid` and waits for its answer.
fn ask_server(pid: u32, request: i32) -> Result<i32, String> {
    let server = libc::pid_t::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
    let set = signal_set(&[REQUEST_SIGNAL]);
    // SAFETY: blocks the answer's signal in this thread, so it waits in sigtimedwait instead
    // of killing the process.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    send_value(server, request).map_err(|error| format!("cannot reach the server (pid {pid}): {error}"))?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(format!("the server (pid {pid}) did not answer within {} s", REQUEST_TIMEOUT.as_secs()));
        }
        let timeout = libc::timespec {
            tv_sec: libc::time_t::try_from(remaining.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(remaining.subsec_nanos()),
        };
        // SAFETY: an all-zero siginfo_t is a valid value for sigtimedwait to fill.
        let mut information: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set, out-pointer and timeout.
        if unsafe { libc::sigtimedwait(&set, &mut information, &timeout) } < 0 {
            continue; // EAGAIN (time is up: checked above) or EINTR
        }
        // SAFETY: a signal sent by sigqueue fills si_pid and si_value.
        let (code, sender, value) = unsafe { (information.si_code, information.si_pid(), information.si_value()) };
        if code == libc::SI_QUEUE && sender == server {
            return i32::try_from(value.sival_ptr as usize).map_err(|_| format!("unknown answer from pid {pid}"));
        }
    }
}

/// Where a remount's unnamed settings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RemountList {
    /// mount(8)'s list (the current options merged with the new ones, `exec` given by dropping
    /// `noexec`): what it does not name is the kernel's default, as for mount(2).
    Complete,
    /// `fsoc mount -o remount,ro`: what it does not name stays as the mount has it.
    Changes,
}

/// `mount -o remount,...` of an fsoc mount: changes ro/rw and the per-mount flags (nosuid,
/// nodev, noexec, access time) of the live mount, which the kernel does without the server.
/// Going read-only, the kernel writes back cached writes and refuses while a file is open for
/// writing; then the server commits, so all that was written is on flash when this returns.
/// Going read-write asks the server first: a mount that began read-only makes its volume
/// writable in place (`FileSystem::make_writable`), unless its files take no writes or the
/// volume is degraded or worn out, which the refusal names. The server's other options stay as
/// they were started.
fn remount(mount_point: &Path, options: &MountOptions, list: RemountList) -> Result<(), String> {
    let canonical = mount_point.canonicalize().map_err(|error| format!("{}: {error}", mount_point.display()))?;
    let table = mount_table()?;
    let entry = table
        .iter()
        .rev()
        .find(|entry| entry.mount_point == canonical)
        .ok_or_else(|| format!("{} is not a mount point", canonical.display()))?;
    if !is_fsoc_mount(entry) {
        return Err(format!(
            "{} is not an fsoc mount ({} from {})",
            canonical.display(),
            entry.file_system_type,
            entry.source
        ));
    }
    let has = |name: &str| entry.options.iter().any(|option| option == name);
    let was_read_only = has("ro");
    let keep = list == RemountList::Changes;
    // The settings before the options apply. mount(2) keeps the access-time mode when a
    // remount names none.
    let mut config = MountConfig {
        read_only: keep && was_read_only,
        set_user_id: !(keep && has("nosuid")),
        devices: !(keep && has("nodev")),
        execute: !(keep && has("noexec")),
        access_time: if has("noatime") {
            mount_options::ACCESS_TIME_NEVER
        } else if has("relatime") {
            mount_options::ACCESS_TIME_RELATIVE
        } else {
            mount_options::ACCESS_TIME_STRICT
        },
        ..MountConfig::default()
    };
    options.configure(&mut config);
    // allow_other is left out: mount(8) repeats it from the mount table on every remount.
    let fixed = [
        options.commit_interval_seconds.map(|_| "commit"),
        options.thread_count.map(|_| "threads"),
        options.scrub_pages_per_second.map(|_| "scrub"),
        options.writeback_cache.map(|_| "writeback_cache"),
        options.io_uring.map(|_| "io_uring"),
        options.xattrs.map(|_| "xattr"),
        options.posix_acl.map(|_| "acl"),
        options.log.as_ref().map(|_| "log"),
    ];
    let fixed: Vec<&str> = fixed.into_iter().flatten().collect();
    if !fixed.is_empty() {
        eprintln!(
            "fsoc: {} keep the values the mount was started with (a remount changes only ro/rw and the mount flags)",
            fixed.join(", ")
        );
    }
    let server = entry_image(entry).map(crate::volume_files::first_source_file).and_then(|file| lock_holder(&file));
    if was_read_only && !config.read_only {
        let pid = server.ok_or_else(|| {
            format!(
                "cannot remount {} read-write: its server is not found (its source names no image that a \
                 process holds), so whether it can write is unknown; unmount it and mount it again",
                canonical.display()
            )
        })?;
        // The server first: should the kernel's remount then fail, the volume takes writes
        // the kernel still refuses, which is harmless; the other order could leave the kernel
        // sending writes to a read-only volume.
        let why = match ask_server(pid, REQUEST_WRITABLE)? {
            ANSWER_DONE => None,
            ANSWER_READ_ONLY => Some("the volume's files or devices take no writes (write-protected, or opened by a user who may only read them)"),
            ANSWER_DEGRADED => Some("a chip of the volume is missing, and a degraded volume stays read-only until `fsoc rebuild` replaces it"),
            ANSWER_WORN_OUT => Some("the volume is at its end of life: what is on it stays readable, nothing more is written"),
            _ => Some("the server could not make the volume writable (see its log)"),
        };
        if let Some(why) = why {
            return Err(format!("cannot remount {} read-write (server pid {pid}): {why}", canonical.display()));
        }
    }
    remount_kernel(&canonical, config.per_mount_flags()).map_err(|error| {
        let hint = if error.raw_os_error() == Some(libc::EBUSY) { " (a file on it is open for writing)" } else { "" };
        format!("cannot remount {}: {error}{hint}", canonical.display())
    })?;
    if config.read_only && !was_read_only {
        let Some(pid) = server else {
            return Err(format!(
                "remounted {} read-only, but its server is not found to commit: what was written becomes durable at \
                 its next periodic commit",
                canonical.display()
            ));
        };
        if ask_server(pid, REQUEST_COMMIT)? != ANSWER_DONE {
            return Err(format!(
                "remounted {} read-only, but its server's commit failed (see its log): the volume keeps its last \
                 committed state",
                canonical.display()
            ));
        }
    }
    Ok(())
}

/// Remounts the file system at `mount_point` with `flags` (its per-mount flags and read-only
/// state). The kernel passes a FUSE remount to no server; going read-only, it syncs first.
fn remount_kernel(mount_point: &Path, flags: libc::c_ulong) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "mount point contains NUL"))?;
    // SAFETY: `path` is a valid C string; source, type and data may be null for a remount.
    let result = unsafe {
        libc::mount(std::ptr::null(), path.as_ptr(), std::ptr::null(), libc::MS_REMOUNT | flags, std::ptr::null())
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The name under which this program is mount(8)'s helper for type `fuse.fsoc` (libmount runs
/// /sbin/mount.TYPE; scripts/install.sh links it to `fsoc`).
const MOUNT_HELPER: &str = "mount.fuse.fsoc";
/// mount(8)'s exit codes, which helpers share: incorrect invocation, and mount failure.
const EXIT_USAGE: u8 = 1;
const EXIT_FAILURE: u8 = 32;
const MOUNT_USAGE: &str = "usage: mount.fuse.fsoc IMAGE MOUNTPOINT [-sfnv] [-o OPTIONS]   (see docs/MOUNT.md)";

/// Runs as mount(8)'s helper when this program was started under the helper's name; `None`
/// under any other name (the `fsoc` command).
pub fn run_as_helper() -> Option<ExitCode> {
    let mut arguments = std::env::args_os();
    let program = PathBuf::from(arguments.next()?);
    let rest: Vec<OsString> = arguments.collect();
    let code = match program.file_name()?.to_str()? {
        MOUNT_HELPER => mount_helper(&rest),
        _ => return None,
    };
    Some(ExitCode::from(code))
}

/// What mount(8) passed its helper: `SOURCE TARGET [-sfnv] [-o OPTIONS] [-t TYPE] [-N NS]`
/// (util-linux's libmount, `exec_helper`).
#[derive(Debug, Default, PartialEq, Eq)]
struct HelperInvocation {
    positional: Vec<OsString>,
    /// Every `-o` list, joined with commas.
    options: String,
    letters: String,
    help: bool,
}

impl HelperInvocation {
    fn has(&self, letter: char) -> bool {
        self.letters.contains(letter)
    }
}

fn parse_helper_arguments(arguments: &[OsString], flag_letters: &str) -> Result<HelperInvocation, String> {
    let mut invocation = HelperInvocation::default();
    let mut remaining = arguments.iter();
    let mut only_positional = false;
    while let Some(argument) = remaining.next() {
        let text = argument.to_str().unwrap_or("");
        if only_positional || !text.starts_with('-') || text == "-" {
            invocation.positional.push(argument.clone());
            continue;
        }
        match text {
            "--" => only_positional = true,
            "-h" | "--help" => invocation.help = true,
            _ if text.starts_with("--") => return Err(format!("unknown option {text}")),
            _ => {
                let mut letters = text.chars().skip(1);
                while let Some(letter) = letters.next() {
                    if !matches!(letter, 'o' | 't' | 'N') {
                        if !flag_letters.contains(letter) {
                            return Err(format!("unknown flag -{letter}"));
                        }
                        invocation.letters.push(letter);
                        continue;
                    }
                    let attached: String = letters.by_ref().collect();
                    let value = if attached.is_empty() {
                        remaining.next().and_then(|value| value.to_str()).map(str::to_owned)
                    } else {
                        Some(attached)
                    }
                    .ok_or_else(|| format!("-{letter} needs a value"))?;
                    match letter {
                        'o' if invocation.options.is_empty() => invocation.options = value,
                        'o' => invocation.options = format!("{},{value}", invocation.options),
                        't' if value == format!("fuse.{}", fsoc_fuse::FS_NAME) => {}
                        't' => return Err(format!("type {value} is not fuse.fsoc")),
                        _ => return Err("-N (a mount in another namespace) is not supported".into()),
                    }
                }
            }
        }
    }
    Ok(invocation)
}

/// `mount.fuse.fsoc IMAGE MOUNTPOINT -o OPTIONS`, as mount(8) runs it: mounts in the background
/// like `fsoc mount --daemon` and returns once the mount is live (or remounts, for `remount`).
fn mount_helper(arguments: &[OsString]) -> u8 {
    let usage = |message: &str| {
        eprintln!("{MOUNT_HELPER}: {message}\n{MOUNT_USAGE}");
        EXIT_USAGE
    };
    let invocation = match parse_helper_arguments(arguments, "sfnv") {
        Ok(invocation) => invocation,
        Err(message) => return usage(&message),
    };
    if invocation.help {
        println!("{MOUNT_USAGE}\noptions: {}", mount_options::KNOWN_OPTIONS);
        return 0;
    }
    let [source, target] = invocation.positional.as_slice() else {
        return usage("needs an IMAGE and a MOUNTPOINT");
    };
    let (options, warnings) = match mount_options::parse(&invocation.options, invocation.has('s')) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{MOUNT_HELPER}: {message}");
            return EXIT_USAGE;
        }
    };
    for warning in warnings {
        eprintln!("{MOUNT_HELPER}: {warning}");
    }
    // mount -f: do everything but the mount itself.
    if invocation.has('f') {
        return 0;
    }
    let (image, mount_point) = (Path::new(source), Path::new(target));
    let result = if options.remount {
        remount(mount_point, &options, RemountList::Complete)
    } else {
        mount_in_background(image, mount_point, &options, invocation.has('v'))
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("{MOUNT_HELPER}: {message}");
            EXIT_FAILURE
        }
    }
}

/// Starts `fsoc mount -o LIST IMAGE MOUNTPOINT` in the background and waits until it is mounted.
fn mount_in_background(image: &Path, mount_point: &Path, options: &MountOptions, verbose: bool) -> Result<(), String> {
    wait_for_previous_server(image)?;
    let list = options.to_list().ok_or("log=PATH: the path must be UTF-8 without commas")?;
    let mut arguments: Vec<OsString> = vec!["mount".into()];
    if !list.is_empty() {
        arguments.extend(["-o".into(), list.into()]);
    }
    if verbose {
        arguments.push("--verbose".into());
    }
    arguments.extend(["--".into(), image.into(), mount_point.into()]);
    let pid = spawn_daemon(arguments, options.log.as_deref())?;
    if verbose {
        eprintln!("{MOUNT_HELPER}: {} mounted on {} (server pid {pid})", image.display(), mount_point.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(arguments: &[&str], flag_letters: &str) -> Result<HelperInvocation, String> {
        let arguments: Vec<OsString> = arguments.iter().map(OsString::from).collect();
        parse_helper_arguments(&arguments, flag_letters)
    }

    #[test]
    fn helper_arguments_are_read_as_libmount_passes_them() {
        // `mount -s -v -t fuse.fsoc -o ro,nofail IMG DIR` runs the helper so.
        let parsed = invocation(&["/i.img", "/mnt", "-s", "-n", "-v", "-o", "ro,nofail"], "sfnv").expect("valid");
        assert_eq!(parsed.positional, vec![OsString::from("/i.img"), OsString::from("/mnt")]);
        assert_eq!(parsed.options, "ro,nofail");
        assert!(parsed.has('s') && parsed.has('n') && parsed.has('v') && !parsed.has('f'));
        // Joined letters, an attached value, repeated -o, a type, and "--".
        let parsed = invocation(&["-sv", "-oro", "-o", "nosuid", "-t", "fuse.fsoc", "--", "-odd.img", "/mnt"], "sfnv")
            .expect("valid");
        assert_eq!(parsed.options, "ro,nosuid");
        assert_eq!(parsed.letters, "sv");
        assert_eq!(parsed.positional, vec![OsString::from("-odd.img"), OsString::from("/mnt")]);
        assert!(invocation(&["--help"], "sfnv").expect("help").help);
    }

    #[test]
    fn bad_helper_arguments_are_refused_by_name() {
        let refused = |arguments: &[&str]| invocation(arguments, "sfnv").expect_err("refused");
        assert_eq!(refused(&["a", "b", "-x"]), "unknown flag -x");
        assert_eq!(refused(&["a", "b", "-o"]), "-o needs a value");
        assert_eq!(refused(&["a", "b", "-t", "ext4"]), "type ext4 is not fuse.fsoc");
        assert!(refused(&["a", "b", "-N", "/proc/1/ns/mnt"]).contains("not supported"));
        assert_eq!(refused(&["--bogus"]), "unknown option --bogus");
    }

    #[test]
    fn lock_holders_are_found_in_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 17875 fe:00:10010773 0 EOF\n\
                     2: FLOCK  ADVISORY  READ 300 fe:00:42 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 301 fe:00:42 0 EOF\n\
                     3: POSIX  ADVISORY  WRITE 302 fe:00:43 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 21826 103:0a:10035327 0 EOF\n";
        assert_eq!(find_lock_holder(locks, 0xfe, 0, 10_010_773), Some(17875));
        assert_eq!(find_lock_holder(locks, 0x103, 0x0a, 10_035_327), Some(21826), "device numbers are hex");
        assert_eq!(find_lock_holder(locks, 0xfe, 0, 42), None, "shared locks and waiting requests hold nothing");
        assert_eq!(find_lock_holder(locks, 0xfe, 0, 43), None, "not an flock");
        assert_eq!(find_lock_holder("garbage\n1: FLOCK\n", 0xfe, 0, 1), None);
    }

    #[test]
    fn device_numbers_follow_the_linux_encoding() {
        // glibc's makedev, written out independently of the decoders.
        let make = |major: u64, minor: u64| {
            ((major & 0xfff) << 8) | ((major & 0xffff_f000) << 32) | (minor & 0xff) | ((minor & 0xffff_ff00) << 12)
        };
        assert_eq!(make(0xfe, 0), 0xfe00, "the encoding of a small device");
        for (major, minor) in [(0xfe, 0), (259, 10), (0x123_4567, 0xabc_de89), (0xffff_ffff, 0xffff_ffff)] {
            let device = make(major, minor);
            assert_eq!((device_major(device), device_minor(device)), (major, minor), "{device:#x}");
        }
    }

    #[test]
    fn mount_table_lines_are_unescaped() {
        let entry = parse_mount_line("/img/a\\040b.img /mnt/x\\134y fuse.fsoc ro,nosuid,relatime,user_id=0 0 0")
            .expect("entry");
        assert_eq!(entry.source, "/img/a b.img");
        assert_eq!(entry.mount_point, PathBuf::from("/mnt/x\\y"));
        assert!(is_fsoc_mount(&entry));
        assert_eq!(entry_image(&entry), Some(Path::new("/img/a b.img")));
        assert_eq!(entry.options, ["ro", "nosuid", "relatime", "user_id=0"]);
        let older = parse_mount_line("fsoc:/v.img /m fuse rw 0 0").expect("entry");
        assert!(is_fsoc_mount(&older));
        assert_eq!(entry_image(&older), Some(Path::new("/v.img")));
        let unnamed = parse_mount_line("fsoc /m fuse.fsoc rw 0 0").expect("entry");
        assert!(is_fsoc_mount(&unnamed));
        assert_eq!(entry_image(&unnamed), None, "no image name: no server to ask");
        let other = parse_mount_line("sshfs#host: /m fuse.sshfs rw 0 0").expect("entry");
        assert!(!is_fsoc_mount(&other));
        assert_eq!(parse_mount_line("short line"), None);
    }
}
