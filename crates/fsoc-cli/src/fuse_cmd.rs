//! `fsoc mount IMAGE MOUNTPOINT`: serves a volume image through FUSE until it is unmounted
//! (Ctrl-C, SIGTERM, `fusermount3 -u`), then commits and closes the image cleanly.
//!
//! Invariants: the image is locked exclusively for the whole mount, so no tool or second mount
//! writes it meanwhile; the volume is committed only after the kernel has dropped the mount,
//! so the commit is the last write; `--daemon` reports success only once the mount is live
//! and reports the daemon's own error message otherwise.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::{Args, Subcommand};
use fsoc_fuse::{Mount, MountConfig, Unmounted};

use crate::volume_files::wait_for_image;

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
    /// or any of its chip files BASE.chipN. Locked while mounted.
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
    /// Make a transaction point this often (seconds) while anything changed, so files left on
    /// the mount survive a crash within about this time (as ext4's commit=5); 0 commits only
    /// on fsync and unmount.
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    commit_interval: u64,
}

pub fn run(command: MountCommand) -> Result<(), String> {
    let arguments = match command {
        MountCommand::Mount(arguments) => arguments,
        MountCommand::Umount { mount_point, lazy, timeout_seconds } => {
            return unmount(&mount_point, lazy, std::time::Duration::from_secs(timeout_seconds))
        }
    };
    match std::env::var(READY_FD_VARIABLE).ok().and_then(|fd| fd.parse::<i32>().ok()) {
        Some(fd) => {
            // SAFETY: the parent passed this descriptor to us open and names it in the
            // environment; nothing else in this process owns it.
            let mut reporter = Reporter { pipe: Some(unsafe { File::from_raw_fd(fd) }) };
            std::env::remove_var(READY_FD_VARIABLE);
            let result = serve(&arguments, &mut reporter);
            if let Err(message) = &result {
                reporter.failed(message);
            }
            result
        }
        None if arguments.daemon => spawn_daemon(arguments.log.as_deref(), &arguments.mount_point),
        None => serve(&arguments, &mut Reporter { pipe: None }),
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

/// Starts this same command again without `--daemon`, in a new session with no terminal, and
/// waits until it reports that the volume is mounted (or why it is not).
fn spawn_daemon(log: Option<&Path>, mount_point: &Path) -> Result<(), String> {
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
    let arguments: Vec<std::ffi::OsString> =
        std::env::args_os().skip(1).filter(|argument| argument != "--daemon").collect();
    let log_file = log
        .map(|path| {
            File::options().create(true).append(true).open(path).map_err(|error| format!("{}: {error}", path.display()))
        })
        .transpose()?;
    let stderr = log_file.map_or_else(Stdio::null, Stdio::from);
    let executable = std::env::current_exe().map_err(|error| format!("cannot find the fsoc executable: {error}"))?;
    let mut command = Command::new(executable);
    command
        .args(arguments)
        .env(READY_FD_VARIABLE, write_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    };
    let child = command.spawn().map_err(|error| format!("cannot start the mount daemon: {error}"))?;
    drop(writer);
    let mut report = String::new();
    reader.read_to_string(&mut report).map_err(|error| format!("reading the daemon's report: {error}"))?;
    match report.trim_end() {
        line if line == READY_LINE => {
            eprintln!(
                "fsoc: mounted in the background (pid {}); unmount with `fsoc umount {}`",
                child.id(),
                mount_point.display()
            );
            Ok(())
        }
        "" => Err("the mount daemon exited before mounting (run without --daemon to see why)".into()),
        message => Err(message.to_string()),
    }
}

/// Signals that unmount the volume; blocked in every thread and taken by `sigwait`.
fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize and fill the set this function owns.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

fn serve(arguments: &MountArgs, reporter: &mut Reporter) -> Result<(), String> {
    fsoc_fuse::logger::install("fsoc mount", arguments.verbose);
    let image = &arguments.image;
    // Mount point first: it is cheap to check and mounting the volume may already write
    // (orphan clean-up).
    let mount_point = fsoc_fuse::check_mount_point(&arguments.mount_point).map_err(|error| error.to_string())?;
    if let Ok(canonical_image) = image.canonicalize() {
        if canonical_image.starts_with(&mount_point) {
            return Err(format!(
                "{}: the image lies inside the mount point {}",
                image.display(),
                mount_point.display()
            ));
        }
    }
    // Every file of the volume locked exclusively (even read-only: a tool must not change
    // what the mount serves), then opened.
    let crate::volume_files::OpenVolume { files, fs, locks } =
        crate::volume_files::open(image, arguments.read_only, true)?;
    if let Some(damage) = fs.mount_report().damage {
        log::warn!("{}: {damage}; run `fsoc fsck {}` after unmounting", image.display(), image.display());
    }
    let config = MountConfig {
        commit_interval: (arguments.commit_interval > 0)
            .then(|| std::time::Duration::from_secs(arguments.commit_interval)),
        allow_other: MountConfig::default().allow_other && !arguments.private,
        read_only: arguments.read_only,
        thread_count: usize::from(arguments.threads),
        writeback_cache: !arguments.no_writeback_cache,
        // An array is named by its chip 0, which `fsoc umount` waits for like an image.
        source: files
            .primary_file()
            .canonicalize()
            .map_or_else(|_| fsoc_fuse::FS_NAME.into(), |file| fsoc_fuse::source_for(&file)),
    };
    // Block the termination signals before any thread starts, so they reach only `sigwait`.
    let signals = termination_signals();
    // SAFETY: changes this thread's mask (inherited by threads spawned later); the set is valid.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
    let mut mount = Mount::new(fs, &mount_point, &config).map_err(|error| format!("{}: {error}", image.display()))?;
    let mut unmounter = mount.unmounter();
    let shown_mount_point = mount_point.display().to_string();
    std::thread::Builder::new()
        .name("fsoc-signals".into())
        .spawn(move || loop {
            let mut signal = 0;
            // SAFETY: `signals` is a valid set and `signal` a valid out-pointer.
            if unsafe { libc::sigwait(&signals, &mut signal) } != 0 {
                return;
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
    if let Some(failure) = &served.failure {
        // Poisoned: unmount returns the flash without committing, keeping the last commit.
        let flash = served.fs.unmount().map_err(|error| format!("{}: {error}", image.display()))?;
        let _ = flash.close();
        drop(locks);
        return Err(format!(
            "{}: stopped serving after an internal error ({failure}); the image keeps its last committed state: run `fsoc fsck {}`",
            image.display(),
            image.display()
        ));
    }
    crate::volume_files::close(served.fs, files.name())?;
    drop(locks);
    log::info!("{} unmounted cleanly", image.display());
    Ok(())
}

/// `fsoc umount`: `fusermount3 -u` (or `-u -z`), then waits for the server to release the
/// image, which it does only after its final commit.
fn unmount(mount_point: &Path, lazy: bool, timeout: std::time::Duration) -> Result<(), String> {
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
            let shown = crate::volume_files::VolumeFiles::locate(&image).name().display().to_string();
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
