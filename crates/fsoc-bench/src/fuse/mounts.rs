//! The volumes the FUSE benchmark measures: a fresh fsoc image mounted with `fsoc mount
//! --daemon`, or a fresh ext4 image on a loop device, each in a scratch directory in /dev/shm;
//! and the child programs run on them, each under a time limit.
//!
//! Invariants: every guard undoes what it set up, in reverse order, also on error and on
//! Ctrl-C (`Drop`): unmount, detach the loop device, delete the image, remove the empty mount
//! point. Nothing is ever removed recursively, so a mount that refuses to go never has its
//! contents deleted through it. The only process signalled is the mount server this guard
//! started, identified by its pid and start time.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a mount may take to appear and an unmount to finish.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an unmount refused as busy is retried (a program that just exited may still be
/// dropping its last references to the mount).
const BUSY_RETRY: Duration = Duration::from_secs(10);

/// The caller's stop flag (the command's Ctrl-C flag), set once by `stop_when`.
static STOP: OnceLock<&'static AtomicBool> = OnceLock::new();

/// Makes `flag` the request to stop: once it is set, the run stops at its next check and a
/// child program running is killed, so the guards clean up. The caller owns the signal
/// handling (the `fsoc` command sets its flag on Ctrl-C, SIGTERM and SIGHUP). A second call
/// keeps the first flag.
pub fn stop_when(flag: &'static AtomicBool) {
    let _ = STOP.set(flag);
}

/// Whether the caller asked the run to stop.
pub fn interrupted() -> bool {
    STOP.get().is_some_and(|flag| flag.load(Ordering::SeqCst))
}

/// Fails with "interrupted" once the caller asked the run to stop.
pub fn check_interrupted() -> Result<(), String> {
    if interrupted() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// What a finished program printed, and how long it ran.
pub struct ProgramOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub wall: Duration,
}

impl ProgramOutput {
    /// The output, for an error message (the end of each stream, where programs say why).
    pub fn describe(&self) -> String {
        format!("{}; stdout: {}; stderr: {}", self.status, tail(&self.stdout), tail(&self.stderr))
    }
}

fn tail(text: &str) -> String {
    let text = text.trim();
    let start = text.char_indices().rev().nth(600).map_or(0, |(index, _)| index);
    if start > 0 {
        format!("…{}", &text[start..])
    } else {
        text.to_string()
    }
}

/// Runs `command` to completion within `timeout`, its output collected in files under
/// `scratch` (never on the volume measured). Its stdout is discarded if `keep_stdout` is false.
/// A program that overruns, or the user's Ctrl-C, kills it (it is our own child).
pub fn run_program(
    command: &mut Command,
    scratch: &Path,
    timeout: Duration,
    keep_stdout: bool,
) -> Result<ProgramOutput, String> {
    let description = describe_command(command);
    let (stdout_path, stderr_path) = (scratch.join("program.stdout"), scratch.join("program.stderr"));
    let stdout = if keep_stdout {
        Stdio::from(fs::File::create(&stdout_path).map_err(|error| format!("{}: {error}", stdout_path.display()))?)
    } else {
        Stdio::null()
    };
    let stderr = fs::File::create(&stderr_path).map_err(|error| format!("{}: {error}", stderr_path.display()))?;
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|error| format!("cannot start {description}: {error}"))?;
    let status = wait_with_timeout(&mut child, timeout);
    let wall = started.elapsed();
    let read =
        |path: &Path| fs::read(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default();
    let output = ProgramOutput {
        status: status?,
        stdout: if keep_stdout { read(&stdout_path) } else { String::new() },
        stderr: read(&stderr_path),
        wall,
    };
    let _ = fs::remove_file(&stdout_path);
    let _ = fs::remove_file(&stderr_path);
    Ok(output)
}

/// Like `run_program`, and fails unless the program exits successfully.
pub fn run_program_ok(command: &mut Command, scratch: &Path, timeout: Duration) -> Result<ProgramOutput, String> {
    let description = describe_command(command);
    let output = run_program(command, scratch, timeout, true)?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!("{description} failed: {}", output.describe()))
    }
}

fn describe_command(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|argument| argument.to_string_lossy().into_owned()));
    words.join(" ")
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(error) => return Err(format!("waiting for a child program: {error}")),
        }
        let overran = Instant::now() >= deadline;
        if overran || interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(if overran {
                format!("did not finish within {} s", timeout.as_secs())
            } else {
                "interrupted".into()
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs a set-up or tear-down step (mkfs, losetup, mount, umount) that must succeed.
fn step(command: &mut Command, scratch: &Path) -> Result<String, String> {
    run_program_ok(command, scratch, MOUNT_TIMEOUT).map(|output| output.stdout)
}

/// Runs an unmount, retrying while the mount is busy.
fn unmount_step(mut make: impl FnMut() -> Command, scratch: &Path) -> Result<(), String> {
    let deadline = Instant::now() + BUSY_RETRY;
    loop {
        let mut command = make();
        let description = describe_command(&command);
        let output = run_program(&mut command, scratch, MOUNT_TIMEOUT, true)?;
        if output.status.success() {
            return Ok(());
        }
        if !output.stderr.contains("busy") || Instant::now() >= deadline {
            return Err(format!("{description} failed: {}", output.describe()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The scratch directory in /dev/shm holding the images, mount points and program output of
/// one run. Dropped, it removes the files directly in it and its empty subdirectories, never
/// recursively.
pub struct ScratchDirectory {
    path: PathBuf,
}

impl ScratchDirectory {
    pub fn create(parent: &Path) -> Result<ScratchDirectory, String> {
        let path = parent.join(format!("fsoc-bench-fuse-{}", std::process::id()));
        fs::create_dir(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        Ok(ScratchDirectory { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDirectory {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(&self.path) {
            for entry in entries.flatten() {
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => {
                        let _ = fs::remove_dir(entry.path());
                    }
                    Ok(_) => {
                        let _ = fs::remove_file(entry.path());
                    }
                    Err(_) => {}
                }
            }
        }
        if let Err(error) = fs::remove_dir(&self.path) {
            eprintln!("fsoc: could not remove {}: {error}", self.path.display());
        }
    }
}

/// CPU time and peak memory of the fsoc mount server, read from /proc just before unmount.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ServerUsage {
    pub pid: u32,
    /// User plus system CPU time of all its threads.
    pub cpu_seconds: f64,
    /// Peak resident set size (VmHWM).
    pub peak_rss_kib: u64,
}

/// A process we started, known by pid and start time (so a reused pid is never mistaken for it).
struct ServerProcess {
    pid: u32,
    start_ticks: u64,
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses),
/// so `fields[0]` is the state (field 3 of proc(5)).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    Some(after_name.split_whitespace().map(str::to_string).collect())
}

/// Field `number` (1-based, as in proc(5)) of /proc/PID/stat, as an integer.
fn stat_field(fields: &[String], number: usize) -> Option<u64> {
    fields.get(number.checked_sub(3)?)?.parse().ok()
}

impl ServerProcess {
    fn find(pid: u32) -> Result<ServerProcess, String> {
        let fields = stat_fields(pid).ok_or_else(|| format!("the mount server (pid {pid}) is not running"))?;
        let start_ticks = stat_field(&fields, 22).ok_or_else(|| format!("/proc/{pid}/stat: no start time"))?;
        Ok(ServerProcess { pid, start_ticks })
    }

    /// Whether it still runs (a zombie no one reaps counts as gone).
    fn is_running(&self) -> bool {
        match stat_fields(self.pid) {
            Some(fields) => {
                stat_field(&fields, 22) == Some(self.start_ticks) && fields.first().map(String::as_str) != Some("Z")
            }
            None => false,
        }
    }

    fn usage(&self) -> Result<ServerUsage, String> {
        let fields = stat_fields(self.pid).filter(|fields| stat_field(fields, 22) == Some(self.start_ticks));
        let fields = fields.ok_or_else(|| format!("the mount server (pid {}) has exited", self.pid))?;
        let (user, system) = (stat_field(&fields, 14), stat_field(&fields, 15));
        let (Some(user), Some(system)) = (user, system) else {
            return Err(format!("/proc/{}/stat: no utime/stime", self.pid));
        };
        // SAFETY: sysconf has no preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks_per_second <= 0 {
            return Err("sysconf(_SC_CLK_TCK) failed".into());
        }
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|error| format!("/proc/{}/status: {error}", self.pid))?;
        let peak_rss_kib = parse_vm_hwm_kib(&status).ok_or_else(|| format!("/proc/{}/status: no VmHWM", self.pid))?;
        Ok(ServerUsage { pid: self.pid, cpu_seconds: (user + system) as f64 / ticks_per_second as f64, peak_rss_kib })
    }

    fn wait_for_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.is_running() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Sends `signal` if it is still the process we started.
    fn signal(&self, signal: libc::c_int) {
        if self.is_running() {
            // SAFETY: kill(2) on the pid of the server this guard started, checked just above.
            unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        }
    }
}

/// `VmHWM:   7644 kB` → 7644.
pub fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()
}

/// `fsoc: mounted in the background (pid 11090); …` → 11090.
pub fn parse_daemon_pid(stderr: &str) -> Option<u32> {
    let after = &stderr[stderr.find("(pid ")? + "(pid ".len()..];
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A fresh fsoc volume image, mounted through FUSE by a daemon `fsoc mount`.
pub struct FsocMount {
    fsoc: PathBuf,
    scratch: PathBuf,
    image: PathBuf,
    mount_point: PathBuf,
    server: Option<ServerProcess>,
}

impl FsocMount {
    /// `fsoc mkfs IMAGE --size SIZE --profile PROFILE`, the image preallocated, then `fsoc mount
    /// IMAGE DIR --daemon` (with `-o io_uring` when asked).
    pub fn create(fsoc: &Path, scratch: &Path, size: &str, profile: &str, io_uring: bool) -> Result<FsocMount, String> {
        let image = scratch.join("fsoc.img");
        let mount_point = scratch.join("fsoc-mnt");
        fs::create_dir(&mount_point).map_err(|error| format!("{}: {error}", mount_point.display()))?;
        let mut mount = FsocMount { fsoc: fsoc.into(), scratch: scratch.into(), image, mount_point, server: None };
        step(Command::new(fsoc).arg("mkfs").arg(&mount.image).args(["--size", size, "--profile", profile]), scratch)?;
        preallocate(&mount.image)?;
        let log = scratch.join("fsoc-mount.log");
        let output = run_program_ok(
            Command::new(fsoc)
                .arg("mount")
                .arg(&mount.image)
                .arg(&mount.mount_point)
                .arg("--daemon")
                // --verbose logs the line that says whether the kernel granted io_uring.
                .args(if io_uring { &["-o", "io_uring", "--verbose"][..] } else { &[][..] })
                .arg("--log")
                .arg(&log),
            scratch,
            MOUNT_TIMEOUT,
        )?;
        let pid = parse_daemon_pid(&output.stderr)
            .ok_or_else(|| format!("fsoc mount --daemon did not report its pid: {}", output.describe()))?;
        mount.server = Some(ServerProcess::find(pid)?);
        if !fsoc_fuse::is_mount_point(&mount.mount_point) {
            return Err(format!("fsoc mount reported success but {} is not mounted", mount.mount_point.display()));
        }
        Ok(mount)
    }

    pub fn root(&self) -> &Path {
        &self.mount_point
    }

    /// Whether the server says requests travel over io_uring (its log's line at mount).
    pub fn uses_io_uring(&self) -> bool {
        fs::read_to_string(self.scratch.join("fsoc-mount.log"))
            .is_ok_and(|log| log.contains(fsoc_fuse::IO_URING_GRANTED))
    }

    /// The server's CPU time and peak memory so far.
    pub fn server_usage(&self) -> Result<ServerUsage, String> {
        self.server.as_ref().ok_or("the mount server is not running")?.usage()
    }

    /// `fsoc umount DIR` (it returns once the server has committed and closed the image),
    /// then waits for the server to exit and deletes the image.
    pub fn unmount(mut self) -> Result<(), String> {
        let (fsoc, mount_point) = (self.fsoc.clone(), self.mount_point.clone());
        unmount_step(
            || {
                let mut command = Command::new(&fsoc);
                command.arg("umount").arg(&mount_point);
                command
            },
            &self.scratch,
        )?;
        if let Some(server) = self.server.take() {
            if !server.wait_for_exit(MOUNT_TIMEOUT) {
                self.server = Some(server);
                return Err(format!(
                    "the mount server did not exit within {} s of its unmount",
                    MOUNT_TIMEOUT.as_secs()
                ));
            }
        }
        Ok(())
    }
}

impl Drop for FsocMount {
    fn drop(&mut self) {
        if fsoc_fuse::is_mount_point(&self.mount_point) {
            // Detach now; the server commits and exits once nothing uses the mount.
            let _ = run_program(
                Command::new("fusermount3").arg("-u").arg("-z").arg(&self.mount_point),
                &self.scratch,
                MOUNT_TIMEOUT,
                false,
            );
        }
        if let Some(server) = self.server.take() {
            if !server.wait_for_exit(Duration::from_secs(10)) {
                server.signal(libc::SIGTERM);
                if !server.wait_for_exit(Duration::from_secs(10)) {
                    server.signal(libc::SIGKILL);
                    let _ = server.wait_for_exit(Duration::from_secs(5));
                }
            }
        }
        let _ = fs::remove_file(&self.image);
        let _ = fs::remove_dir(&self.mount_point);
    }
}

/// Allocates every byte of the image file `path` (contents unchanged: a hole reads as zeros
/// before and after), for fsoc and ext4 alike. A sparse file in /dev/shm makes the first write
/// to each of its pages allocate memory, a cost no flash chip or disk has, and it falls on
/// whoever writes the page first: fsoc's server itself, but ext4's loop-device worker thread,
/// beside the benchmark. Measured on one 2-CPU machine, fio's 1 MiB sequential write + fsync
/// of 256 MiB: fsoc 941 MiB/s sparse, 1,153 preallocated; ext4 2,032 and 2,016.
fn preallocate(path: &Path) -> Result<(), String> {
    use std::os::unix::io::AsRawFd;
    let file = fs::OpenOptions::new().write(true).open(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let length = file.metadata().map_err(|error| format!("{}: {error}", path.display()))?.len();
    let length = libc::off_t::try_from(length).map_err(|_| format!("{}: too large to preallocate", path.display()))?;
    // SAFETY: fallocate on a descriptor this function owns; mode 0 allocates without changing
    // the file's size or contents.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) } != 0 {
        return Err(format!("{}: preallocating: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A fresh ext4 volume in an image file of the same size, on a loop device.
pub struct Ext4Mount {
    scratch: PathBuf,
    image: PathBuf,
    mount_point: PathBuf,
    loop_device: Option<String>,
    mounted: bool,
}

/// Options given to mkfs.ext4 beyond `-q -F`: initialize inode tables and journal now, so no
/// background zeroing (ext4lazyinit) runs during the measurements.
pub const MKFS_EXT4_EXTENDED: &str = "lazy_itable_init=0,lazy_journal_init=0";

impl Ext4Mount {
    /// An image of `size_bytes` (preallocated), `mkfs.ext4 -q -F`, `losetup --find --show`, `mount`.
    pub fn create(scratch: &Path, size_bytes: u64) -> Result<Ext4Mount, String> {
        let image = scratch.join("ext4.img");
        let mount_point = scratch.join("ext4-mnt");
        fs::create_dir(&mount_point).map_err(|error| format!("{}: {error}", mount_point.display()))?;
        let mut mount = Ext4Mount { scratch: scratch.into(), image, mount_point, loop_device: None, mounted: false };
        let file = fs::File::create(&mount.image).map_err(|error| format!("{}: {error}", mount.image.display()))?;
        file.set_len(size_bytes).map_err(|error| format!("{}: {error}", mount.image.display()))?;
        drop(file);
        preallocate(&mount.image)?;
        step(Command::new("mkfs.ext4").args(["-q", "-F", "-E", MKFS_EXT4_EXTENDED]).arg(&mount.image), scratch)?;
        let device =
            step(Command::new("losetup").args(["--find", "--show"]).arg(&mount.image), scratch)?.trim().to_string();
        if !device.starts_with("/dev/") {
            return Err(format!("losetup --find --show printed {device:?}, not a device"));
        }
        mount.loop_device = Some(device.clone());
        step(Command::new("mount").args(["-t", "ext4"]).arg(&device).arg(&mount.mount_point), scratch)?;
        mount.mounted = true;
        Ok(mount)
    }

    pub fn root(&self) -> &Path {
        &self.mount_point
    }

    /// `umount`, `losetup -d`, and the image deleted.
    pub fn unmount(mut self) -> Result<(), String> {
        let mount_point = self.mount_point.clone();
        unmount_step(
            || {
                let mut command = Command::new("umount");
                command.arg(&mount_point);
                command
            },
            &self.scratch,
        )?;
        self.mounted = false;
        if let Some(device) = self.loop_device.take() {
            step(Command::new("losetup").arg("-d").arg(&device), &self.scratch)?;
        }
        Ok(())
    }
}

impl Drop for Ext4Mount {
    fn drop(&mut self) {
        if self.mounted {
            let done = run_program(Command::new("umount").arg(&self.mount_point), &self.scratch, MOUNT_TIMEOUT, false);
            if !done.is_ok_and(|output| output.status.success()) {
                let _ = run_program(
                    Command::new("umount").arg("-l").arg(&self.mount_point),
                    &self.scratch,
                    MOUNT_TIMEOUT,
                    false,
                );
            }
        }
        if let Some(device) = self.loop_device.take() {
            let _ = run_program(Command::new("losetup").arg("-d").arg(&device), &self.scratch, MOUNT_TIMEOUT, false);
        }
        let _ = fs::remove_file(&self.image);
        let _ = fs::remove_dir(&self.mount_point);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_daemon_pid_and_peak_memory() {
        let stderr = "fsoc: mounted in the background (pid 11090); unmount with `fsoc umount /x`\n";
        assert_eq!(parse_daemon_pid(stderr), Some(11090));
        assert_eq!(parse_daemon_pid("fsoc: mounted"), None);
        assert_eq!(parse_vm_hwm_kib("VmPeak:\t  300 kB\nVmHWM:\t    7644 kB\nVmRSS:\t 10 kB\n"), Some(7644));
        assert_eq!(parse_vm_hwm_kib("VmRSS: 1 kB\n"), None);
    }

    // This process's own /proc entry reads as running, with some CPU time and memory.
    #[test]
    fn reads_usage_of_a_running_process() {
        let me = ServerProcess::find(std::process::id()).expect("own stat");
        assert!(me.is_running());
        let usage = me.usage().expect("own usage");
        assert!(usage.peak_rss_kib > 0 && usage.cpu_seconds >= 0.0, "{usage:?}");
    }
}
