//! fsoc under mount(8): `mount -t fuse.fsoc`, fstab lines with `mount DIR` and `mount -a`,
//! `mount -o remount,ro|rw`, plain `umount`, the mount options as the kernel and the server
//! see them (setuid programs, noexec, nodev, access-time modes, read-only), the exit codes
//! mount(8) helpers use, and 20 cycles of umount then an immediate mount of the same image.
//!
//! Needs root and /dev/fuse, and fails without them. libmount runs helpers only from /sbin
//! (where /sbin/mount.fuse would otherwise take every `fuse.*` type), so each test that runs
//! mount(8) links /sbin/mount.fuse.fsoc to this build's `fsoc` while it runs (`HelperLink`)
//! and removes the link afterwards; an installed helper that is not such a link fails the
//! tests with a message rather than being replaced.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use support::{fsoc, require, run, Output, Volume, FSOC, MOUNT_TIMEOUT};

const HELPER_PATH: &str = "/sbin/mount.fuse.fsoc";
/// mount(8)'s exit codes: incorrect invocation, and mount failure.
const EXIT_USAGE: i32 = 1;
const EXIT_FAILURE: i32 = 32;
/// The uid and gid of `nobody`, who runs the setuid checks.
const NOBODY: u32 = 65534;

/// How many running tests use the helper link; the last one removes it.
static HELPER_USERS: Mutex<usize> = Mutex::new(0);

/// /sbin/mount.fuse.fsoc linked to this build's `fsoc` while the guard lives.
struct HelperLink;

impl HelperLink {
    fn install() -> HelperLink {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the mount(8) tests need root (CI runs them as root)");
        assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing: the FUSE tests need it");
        let mut users = HELPER_USERS.lock().unwrap_or_else(PoisonError::into_inner);
        if *users == 0 {
            match fs::read_link(HELPER_PATH) {
                Ok(target) if target == Path::new(FSOC) => {}
                // Left by an interrupted run of these tests (from this or another checkout).
                Ok(target) if target.ends_with("fsoc") && target.to_string_lossy().contains("/target/") => {
                    fs::remove_file(HELPER_PATH).expect("remove a stale test link");
                    std::os::unix::fs::symlink(FSOC, HELPER_PATH).expect("link the helper");
                }
                _ if Path::new(HELPER_PATH).symlink_metadata().is_ok() => panic!(
                    "{HELPER_PATH} is installed and is not a test link: these tests link their own build there \
                     while they run; remove it (`scripts/install.sh --uninstall`) and rerun"
                ),
                _ => std::os::unix::fs::symlink(FSOC, HELPER_PATH).expect("link the helper into /sbin"),
            }
        }
        *users += 1;
        HelperLink
    }
}

impl Drop for HelperLink {
    fn drop(&mut self) {
        let mut users = HELPER_USERS.lock().unwrap_or_else(PoisonError::into_inner);
        *users -= 1;
        if *users == 0 && fs::read_link(HELPER_PATH).is_ok_and(|target| target == Path::new(FSOC)) {
            let _ = fs::remove_file(HELPER_PATH);
        }
    }
}

/// Runs mount(8) (or umount(8)) within the mount time limit.
fn program(name: &str, arguments: &[&str]) -> Output {
    run(Command::new(name).args(arguments), MOUNT_TIMEOUT)
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `mount -t fuse.fsoc IMAGE DIR [-o OPTIONS]`.
fn mount_fsoc(volume: &Volume, options: &str) -> Output {
    let mut arguments = vec!["-t", "fuse.fsoc", volume.image_arg(), text(&volume.mount_point)];
    if !options.is_empty() {
        arguments.extend(["-o", options]);
    }
    program("mount", &arguments)
}

/// Mounts through the helper and fails the test unless it worked and the mount is live when
/// mount(8) returns.
fn mount_ok<'v>(volume: &'v Volume, options: &str) -> Mounted<'v> {
    let output = mount_fsoc(volume, options);
    assert!(output.status.success(), "mount -t fuse.fsoc -o {options}:\n{}", output.text());
    let mounted = Mounted { volume };
    assert!(mounted.entry().is_some(), "mounted when mount(8) returns (-o {options})");
    mounted
}

/// A mount made by mount(8) or `fsoc mount --daemon` (its server is not our child): dropped
/// without `unmount`, it is detached and its image waited for.
struct Mounted<'v> {
    volume: &'v Volume,
}

/// A line of /proc/self/mountinfo.
#[derive(Debug)]
struct Entry {
    file_system_type: String,
    source: String,
    mount_options: Vec<String>,
    super_options: Vec<String>,
}

impl Entry {
    fn has(&self, option: &str) -> bool {
        self.mount_options.iter().any(|present| present == option)
    }
}

impl Mounted<'_> {
    fn path(&self, relative: &str) -> PathBuf {
        self.volume.mount_point.join(relative)
    }

    fn entry(&self) -> Option<Entry> {
        mount_entry(&self.volume.mount_point)
    }

    /// Plain `umount DIR`, then waits until the server has released the image.
    fn unmount(self) {
        let output = program("umount", &[text(&self.volume.mount_point)]);
        assert!(output.status.success(), "umount:\n{}", output.text());
        assert!(self.entry().is_none(), "unmounted when umount returns");
        wait_until_free(&self.volume.image);
        std::mem::forget(self);
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if self.entry().is_some() {
            let _ = program("umount", &["-l", text(&self.volume.mount_point)]);
        }
        wait_until_free(&self.volume.image);
    }
}

fn mount_entry(mount_point: &Path) -> Option<Entry> {
    let wanted = mount_point.canonicalize().ok()?;
    let table = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = table.lines().rfind(|line| line.split(' ').nth(4) == Some(text(&wanted)))?;
    let mount_options = line.split(' ').nth(5)?.split(',').map(str::to_owned).collect();
    let mut after = line.split(" - ").nth(1)?.split(' ');
    Some(Entry {
        file_system_type: after.next()?.to_string(),
        source: after.next()?.to_string(),
        mount_options,
        super_options: after.next()?.split(',').map(str::to_owned).collect(),
    })
}

/// Waits (at most the mount time limit) until no process holds the image's lock, as a server
/// does until its final commit is done.
fn wait_until_free(image: &Path) {
    use std::os::fd::AsRawFd;
    let Ok(file) = fs::File::open(image) else { return };
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    // SAFETY: flock on a descriptor owned here.
    while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        assert!(Instant::now() < deadline, "{} still locked after {MOUNT_TIMEOUT:?}", image.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid of the server of `image`: the `fsoc mount` process whose arguments name it.
fn server_pid(image: &Path) -> u32 {
    let wanted = image.as_os_str().as_encoded_bytes();
    for entry in fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(command_line) = fs::read(entry.path().join("cmdline")) else { continue };
        let arguments: Vec<&[u8]> = command_line.split(|&byte| byte == 0).collect();
        if arguments.contains(&b"mount".as_slice()) && arguments.contains(&wanted) && pid != std::process::id() {
            return pid;
        }
    }
    panic!("no fsoc mount server for {}", image.display());
}

/// SIGKILLs the server of `volume` (a crash), clears the dead mount and waits for its lock.
fn kill_server(volume: &Volume) {
    let pid = server_pid(&volume.image);
    // SAFETY: kill with a pid found above; SIGKILL has no handler to run.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0, "kill {pid}");
    let output = program("umount", &["-l", text(&volume.mount_point)]);
    assert!(output.status.success(), "umount -l of the dead mount:\n{}", output.text());
    wait_until_free(&volume.image);
}

/// A volume whose directory others may enter (tempdirs are 0700), for programs run as nobody.
fn open_volume(size: &str) -> Volume {
    let volume = Volume::new(size);
    fs::set_permissions(volume.directory.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    volume
}

/// `program -u` run as nobody: the effective uid it runs with.
fn effective_uid_as_nobody(program: &Path) -> String {
    let output = run(
        Command::new("setpriv")
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .arg("--clear-groups")
            .arg(program)
            .arg("-u"),
        MOUNT_TIMEOUT,
    );
    assert!(output.status.success(), "{} -u as nobody:\n{}", program.display(), output.text());
    output.stdout.trim().to_string()
}

#[test]
fn mount_t_fuse_fsoc_names_the_image_and_passes_every_option_through() {
    let _helper = HelperLink::install();
    let volume = Volume::new("64M");
    let image = volume.image.canonicalize().expect("image");
    // (options, per-mount options present, absent, allow_other in the super options)
    let cases: [(&str, &[&str], &[&str], bool); 6] = [
        ("", &["rw", "relatime"], &["nosuid", "nodev", "noexec", "noatime"], true),
        ("nosuid,nodev,noexec,noatime", &["nosuid", "nodev", "noexec", "noatime"], &["relatime"], true),
        ("strictatime,ro", &["ro"], &["relatime", "noatime", "rw"], true),
        (
            "suid,dev,exec,atime,rw,allow_other,default_permissions,commit=2,threads=2,no_writeback_cache",
            &["rw", "relatime"],
            &["nosuid", "nodev", "noexec"],
            true,
        ),
        ("no_allow_other,writeback_cache,relatime,commit=0,threads=64", &["relatime"], &["nosuid"], false),
        // mount(8)'s own options reach the helper and change nothing.
        ("nofail,_netdev,x-systemd.device-timeout=5,noatime", &["noatime"], &["relatime"], true),
    ];
    for (options, present, absent, allow_other) in cases {
        let mounted = mount_ok(&volume, options);
        let entry = mounted.entry().expect("entry");
        assert_eq!(entry.file_system_type, "fuse.fsoc", "-o {options}: {entry:?}");
        assert_eq!(entry.source, text(&image), "fsname is the image path: {entry:?}");
        for option in present {
            assert!(entry.has(option), "-o {options}: {option} missing in {entry:?}");
        }
        for option in absent {
            assert!(!entry.has(option), "-o {options}: unexpected {option} in {entry:?}");
        }
        assert!(entry.super_options.iter().any(|option| option == "default_permissions"), "{entry:?}");
        assert_eq!(entry.super_options.iter().any(|option| option == "allow_other"), allow_other, "{entry:?}");
        let written = fs::write(mounted.path(&format!("file{}", options.len())), options);
        if entry.has("ro") {
            assert_eq!(written.expect_err("read-only").raw_os_error(), Some(libc::EROFS), "-o {options}");
        } else {
            written.unwrap_or_else(|error| panic!("-o {options}: write: {error}"));
        }
        mounted.unmount();
    }
    // log=PATH: the server's log lines go there (-v asks for the informational ones).
    let log = volume.directory.path().join("server.log");
    let output = program(
        "mount",
        &["-v", "-t", "fuse.fsoc", volume.image_arg(), text(&volume.mount_point), "-o", &format!("log={}", text(&log))],
    );
    assert!(output.status.success(), "{}", output.text());
    Mounted { volume: &volume }.unmount();
    let logged = fs::read_to_string(&log).expect("log written");
    assert!(logged.contains("unmounted cleanly"), "server log:\n{logged}");
    volume.fsck();
}

#[test]
fn setuid_programs_run_as_their_owner_unless_nosuid_and_noexec_refuses() {
    require("setpriv");
    let _helper = HelperLink::install();
    let volume = open_volume("64M");
    let mounted = mount_ok(&volume, "");
    let program = mounted.path("id");
    fs::copy("/usr/bin/id", &program).expect("copy id");
    fs::set_permissions(&program, fs::Permissions::from_mode(0o4755)).expect("chmod 4755");
    assert_eq!(effective_uid_as_nobody(&program), "0", "a root mount honours the setuid bit by default");
    // Remount nosuid: the same program runs as its caller.
    let output = program_remount(&volume, "nosuid");
    assert!(output.status.success(), "{}", output.text());
    assert!(mounted.entry().expect("entry").has("nosuid"));
    assert_eq!(effective_uid_as_nobody(&program), NOBODY.to_string(), "nosuid after remount");
    mounted.unmount();
    let mounted = mount_ok(&volume, "nosuid");
    assert_eq!(effective_uid_as_nobody(&program), NOBODY.to_string(), "mounted nosuid");
    mounted.unmount();
    // noexec: execve fails with EACCES, for root too.
    let mounted = mount_ok(&volume, "noexec");
    let error = Command::new(&program).arg("-u").output().expect_err("noexec refuses execution");
    assert_eq!(error.raw_os_error(), Some(libc::EACCES), "{error}");
    mounted.unmount();
    // nodev: passed to the kernel (fsoc has no device nodes yet); dev is the root default.
    let mounted = mount_ok(&volume, "nodev");
    assert!(mounted.entry().expect("entry").has("nodev"));
    mounted.unmount();
    // `fsoc mount` has the same defaults and the same -o list.
    let mount_point = text(&volume.mount_point);
    for (options, uid) in [(None, "0".to_string()), (Some("nosuid,nodev"), NOBODY.to_string())] {
        let mut arguments = vec!["mount", "--daemon", volume.image_arg(), mount_point];
        arguments.extend(options.iter().flat_map(|options| ["-o", options]));
        let output = fsoc(&arguments);
        assert!(output.status.success(), "fsoc {arguments:?}:\n{}", output.text());
        let entry = mount_entry(&volume.mount_point).expect("mounted");
        assert_eq!(entry.has("nosuid"), options.is_some(), "{entry:?}");
        assert_eq!(entry.has("nodev"), options.is_some(), "{entry:?}");
        assert_eq!(effective_uid_as_nobody(&program), uid, "fsoc mount {options:?}");
        let output = fsoc(&["umount", mount_point]);
        assert!(output.status.success(), "{}", output.text());
    }
    volume.fsck();
}

/// `mount -o remount,OPTIONS DIR`.
fn program_remount(volume: &Volume, options: &str) -> Output {
    program("mount", &["-o", &format!("remount,{options}"), text(&volume.mount_point)])
}

/// Remounting read-only commits before it returns: the server is then killed, and what was
/// written before the remount (never fsync'd, no periodic commit) is there after a remount.
/// Back to read-write, writes work again; a mount that began read-only goes read-write too
/// (also after a crash), and a file open for writing keeps the mount read-write.
#[test]
fn remount_read_only_commits_and_read_write_resumes() {
    let _helper = HelperLink::install();
    let volume = Volume::new("64M");
    let mounted = mount_ok(&volume, "commit=0");
    let content = b"written before remount,ro; never fsync'd".repeat(1000);
    fs::write(mounted.path("before"), &content).expect("write");
    let output = program_remount(&volume, "ro");
    assert!(output.status.success(), "remount,ro:\n{}", output.text());
    let entry = mounted.entry().expect("entry");
    assert!(entry.has("ro") && entry.super_options.iter().any(|option| option == "ro"), "{entry:?}");
    let refused = fs::write(mounted.path("after"), b"x").expect_err("read-only");
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    std::mem::forget(mounted);
    kill_server(&volume);
    let mounted = mount_ok(&volume, "");
    assert_eq!(fs::read(mounted.path("before")).expect("committed by the remount"), content);
    // ro, then rw again: writes work, and they are there after an unmount.
    assert!(program_remount(&volume, "ro").status.success());
    let output = program_remount(&volume, "rw");
    assert!(output.status.success(), "remount,rw:\n{}", output.text());
    assert!(mounted.entry().expect("entry").has("rw"));
    fs::write(mounted.path("after"), b"written after remount,rw").expect("write after rw");
    // A file open for writing: the kernel refuses to go read-only (EBUSY), as for ext4.
    let open = fs::File::create(mounted.path("open")).expect("create");
    let output = program_remount(&volume, "ro");
    assert_eq!(output.status.code(), Some(EXIT_FAILURE), "{}", output.text());
    assert!(output.stderr.contains("open for writing"), "{}", output.text());
    drop(open);
    mounted.unmount();
    // Mounted read-only (as a root file system at boot), then read-write: the server makes
    // the volume writable in place.
    let mounted = mount_ok(&volume, "ro");
    assert_eq!(fs::read(mounted.path("after")).expect("read"), b"written after remount,rw");
    let refused = fs::write(mounted.path("in-ro"), b"x").expect_err("read-only");
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    let output = program_remount(&volume, "rw");
    assert!(output.status.success(), "remount,rw of a read-only mount:\n{}", output.text());
    assert!(mounted.entry().expect("entry").has("rw"), "read-write after the remount");
    fs::write(mounted.path("after-ro"), b"written after ro, remount,rw").expect("write after ro -> rw");
    mounted.unmount();
    // The same after a crash: the read-only mount writes nothing, the remount re-anchors the
    // committed state first (fsck below is clean) and then takes writes.
    let mounted = mount_ok(&volume, "commit=0");
    fs::write(mounted.path("lost"), b"never committed").expect("write");
    std::mem::forget(mounted);
    kill_server(&volume);
    let mounted = mount_ok(&volume, "ro");
    assert_eq!(fs::read(mounted.path("after-ro")).expect("read"), b"written after ro, remount,rw");
    let output = program_remount(&volume, "rw");
    assert!(output.status.success(), "remount,rw after a crash:\n{}", output.text());
    fs::write(mounted.path("after-crash"), b"written after the crash").expect("write after the crash");
    mounted.unmount();
    let mounted = mount_ok(&volume, "ro");
    assert_eq!(fs::read(mounted.path("after-crash")).expect("read"), b"written after the crash");
    mounted.unmount();
    volume.fsck();
    // `fsoc mount -o remount,ro` changes only what it names (nosuid stays).
    let mounted = mount_ok(&volume, "nosuid");
    let output = fsoc(&["mount", "-o", "remount,ro", volume.image_arg(), text(&volume.mount_point)]);
    assert!(output.status.success(), "{}", output.text());
    let entry = mounted.entry().expect("entry");
    assert!(entry.has("ro") && entry.has("nosuid"), "{entry:?}");
    mounted.unmount();
    volume.fsck();
}

/// The commit interval reaches the server: with commit=1 a file written (never fsync'd)
/// survives a SIGKILL of the server two seconds later.
#[test]
fn the_commit_interval_option_reaches_the_server() {
    let _helper = HelperLink::install();
    let volume = Volume::new("64M");
    let mounted = mount_ok(&volume, "commit=1");
    fs::write(mounted.path("periodic"), b"committed by the timer").expect("write");
    std::thread::sleep(Duration::from_secs(3));
    std::mem::forget(mounted);
    kill_server(&volume);
    let mounted = mount_ok(&volume, "");
    assert_eq!(fs::read(mounted.path("periodic")).expect("committed"), b"committed by the timer");
    mounted.unmount();
    volume.fsck();
}

#[test]
fn fstab_lines_mount_with_mount_dir_and_mount_a() {
    let _helper = HelperLink::install();
    let volume = Volume::new("64M");
    let image = volume.image.canonicalize().expect("image");
    let mount_point = volume.mount_point.canonicalize().expect("mount point");
    let fstab = volume.directory.path().join("fstab");
    fs::write(&fstab, format!("{} {} fuse.fsoc defaults,nofail 0 0\n", text(&image), text(&mount_point)))
        .expect("fstab");
    let output = program("mount", &["--fstab", text(&fstab), text(&mount_point)]);
    assert!(output.status.success(), "mount DIR:\n{}", output.text());
    let mounted = Mounted { volume: &volume };
    assert_eq!(mounted.entry().expect("mounted").source, text(&image));
    // mount -a knows it is mounted already: nothing to do, still one mount.
    let output = program("mount", &["-a", "--fstab", text(&fstab)]);
    assert!(output.status.success(), "mount -a:\n{}", output.text());
    let table = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mounts = table.lines().filter(|line| line.split(' ').nth(4) == Some(text(&mount_point))).count();
    assert_eq!(mounts, 1, "mount -a mounted nothing twice");
    fs::write(mounted.path("from_fstab"), b"fstab").expect("write");
    // Remount through the fstab line, then unmount.
    let output = program("mount", &["--fstab", text(&fstab), "-o", "remount,ro", text(&mount_point)]);
    assert!(output.status.success(), "remount,ro:\n{}", output.text());
    assert!(mounted.entry().expect("entry").has("ro"));
    mounted.unmount();
    let output = program("mount", &["-a", "--fstab", text(&fstab)]);
    assert!(output.status.success(), "mount -a:\n{}", output.text());
    let mounted = Mounted { volume: &volume };
    assert_eq!(fs::read(mounted.path("from_fstab")).expect("read"), b"fstab");
    mounted.unmount();
    // Options in the line reach the mount.
    fs::write(&fstab, format!("{} {} fuse.fsoc noexec,nosuid,commit=2,nofail 0 0\n", text(&image), text(&mount_point)))
        .expect("fstab");
    let output = program("mount", &["--fstab", text(&fstab), text(&mount_point)]);
    assert!(output.status.success(), "mount DIR:\n{}", output.text());
    let mounted = Mounted { volume: &volume };
    let entry = mounted.entry().expect("mounted");
    assert!(entry.has("noexec") && entry.has("nosuid"), "{entry:?}");
    mounted.unmount();
    volume.fsck();
}

#[test]
fn bad_options_and_failures_use_the_exit_codes_of_mount() {
    let _helper = HelperLink::install();
    let volume = Volume::new("16M");
    for (options, expected) in [
        ("nosuid,bogus", "unknown mount option \"bogus\""),
        ("sync", "unknown mount option \"sync\""),
        ("threads=0", "threads must be 1 to 64"),
        ("commit=soon", "not a whole number"),
        ("user_id=0", "set by the kernel"),
    ] {
        let output = mount_fsoc(&volume, options);
        assert_eq!(output.status.code(), Some(EXIT_USAGE), "-o {options}:\n{}", output.text());
        assert!(output.stderr.contains(expected), "-o {options}: expected {expected:?}:\n{}", output.text());
        assert!(mount_entry(&volume.mount_point).is_none(), "-o {options} mounted nothing");
        let output = fsoc(&["mount", "-o", options, volume.image_arg(), text(&volume.mount_point)]);
        assert!(!output.status.success(), "fsoc mount -o {options}:\n{}", output.text());
        assert!(output.stderr.contains(expected), "fsoc mount -o {options}:\n{}", output.text());
    }
    // mount -s (sloppy): an unknown option is reported and ignored.
    let output =
        program("mount", &["-s", "-t", "fuse.fsoc", volume.image_arg(), text(&volume.mount_point), "-o", "bogus"]);
    assert!(output.status.success(), "mount -s:\n{}", output.text());
    assert!(output.stderr.contains("ignoring unknown mount option \"bogus\""), "{}", output.text());
    Mounted { volume: &volume }.unmount();
    // mount -f (fake) mounts nothing and succeeds.
    let output = program("mount", &["-f", "-t", "fuse.fsoc", volume.image_arg(), text(&volume.mount_point)]);
    assert!(output.status.success(), "mount -f:\n{}", output.text());
    assert!(mount_entry(&volume.mount_point).is_none(), "mount -f mounted nothing");
    // A mount that fails: 32, with the server's own reason.
    let garbage = volume.directory.path().join("garbage.img");
    fs::write(&garbage, vec![0x5au8; 1 << 20]).expect("write");
    let output = program("mount", &["-t", "fuse.fsoc", text(&garbage), text(&volume.mount_point)]);
    assert_eq!(output.status.code(), Some(EXIT_FAILURE), "{}", output.text());
    assert!(output.stderr.contains("not an fsoc image"), "{}", output.text());
    // An image that is mounted is refused at once, not after a wait.
    let mounted = mount_ok(&volume, "");
    let other = volume.directory.path().join("other");
    fs::create_dir(&other).expect("mkdir");
    let started = Instant::now();
    let output = program("mount", &["-t", "fuse.fsoc", volume.image_arg(), text(&other)]);
    assert_eq!(output.status.code(), Some(EXIT_FAILURE), "{}", output.text());
    assert!(output.stderr.contains("is mounted on"), "{}", output.text());
    assert!(!output.stderr.contains("waiting"), "a mounted image is not waited for:\n{}", output.text());
    eprintln!("refused a mounted image in {:?}", started.elapsed());
    mounted.unmount();
    // The helper run by hand: usage errors are 1.
    let helper = run(Command::new(HELPER_PATH).arg("only-one-argument"), MOUNT_TIMEOUT);
    assert_eq!(helper.status.code(), Some(EXIT_USAGE), "{}", helper.text());
    assert!(helper.stderr.contains("usage: mount.fuse.fsoc"), "{}", helper.text());
    volume.fsck();
}

/// 20 cycles of: mount, check the file written in the previous cycle, write a new one, plain `umount` (or
/// `fusermount3 -u`), and at once the next mount of the same image, alternately through
/// mount(8) and `fsoc mount --daemon`. Neither unmount waits for the server's final commit, so
/// each mount may find the previous server still holding the image: it must wait, not fail.
#[test]
fn umount_then_mount_at_once_succeeds_twenty_times() {
    let _helper = HelperLink::install();
    let volume = Volume::new("256M");
    let mount_point = text(&volume.mount_point);
    let started = Instant::now();
    let mut failures = Vec::new();
    // Mounts that found the previous server still committing (they say so): how often the
    // wait was needed, printed so a run shows the cycles exercise it.
    let mut waits = 0;
    let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for cycle in 0..20u32 {
        let output = if cycle % 2 == 0 {
            mount_fsoc(&volume, "")
        } else {
            fsoc(&["mount", "--daemon", volume.image_arg(), mount_point])
        };
        waits += usize::from(output.stderr.contains("finishing its final commit"));
        if !output.status.success() {
            failures.push(format!("cycle {cycle}: mount failed:\n{}", output.text()));
            wait_until_free(&volume.image);
            continue;
        }
        let mounted = Mounted { volume: &volume };
        // The previous cycle's file is the one its server may still have been committing.
        if let Some((name, content)) = expected.last_key_value() {
            match fs::read(mounted.path(name)) {
                Ok(found) if &found == content => {}
                Ok(found) => failures.push(format!("cycle {cycle}: {name} has {} bytes", found.len())),
                Err(error) => failures.push(format!("cycle {cycle}: {name}: {error}")),
            }
        }
        // Big enough that the final commit takes a moment after the unmount returns.
        let name = format!("cycle{cycle:02}");
        let content: Vec<u8> =
            (0..(4u32 << 20) + cycle).map(|index| (index.wrapping_mul(cycle + 7) >> 3) as u8).collect();
        fs::write(mounted.path(&name), &content).expect("write");
        expected.insert(name, content);
        let unmounter = if cycle % 4 < 2 { "umount" } else { "fusermount3" };
        // Waited for directly (not by `run`, which polls every 20 ms), so the next mount starts
        // the instant the unmount returns, as in a shell script.
        let arguments: &[&str] = if unmounter == "umount" { &[mount_point] } else { &["-u", mount_point] };
        let output = Command::new(unmounter).args(arguments).output().expect("run the unmount");
        assert!(output.status.success(), "cycle {cycle}: {unmounter}: {}", String::from_utf8_lossy(&output.stderr));
        std::mem::forget(mounted);
    }
    let elapsed = started.elapsed();
    let mounted = mount_ok(&volume, "ro");
    let names: Vec<String> = fs::read_dir(&volume.mount_point)
        .expect("readdir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), expected.len(), "{names:?}");
    for (name, content) in &expected {
        assert!(fs::read(mounted.path(name)).is_ok_and(|found| &found == content), "{name} after 20 cycles");
    }
    mounted.unmount();
    volume.fsck();
    eprintln!(
        "20 umount/mount cycles in {elapsed:?}: {waits} mounts waited for the previous server, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{} of 20 cycles failed:\n{}", failures.len(), failures.join("\n"));
}
