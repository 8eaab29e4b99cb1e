//! CLI contracts for the papercuts new users found (issue 14, point 9): each finding, the
//! command that showed it, and what the command must do now. Mount tests need root and
//! /dev/fuse, as fuse_mount.rs.

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fsoc_core::fs::records::{allocation_key, RecordKind};
use fsoc_core::txn::store::LogNodeStore;
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::SimFlash;
use support::{fsoc, run, Volume, FSOC};

fn text(output: &support::Output) -> String {
    output.text()
}

/// `demo --chips 65` and `crashtest --chips 65` are refused at parsing with the range, not
/// run into a corrupt superblock.
#[test]
fn chip_counts_out_of_range_are_refused_with_the_range() {
    for command in [
        &["demo", "--chips", "65"][..],
        &["crashtest", "--chips", "65", "--workload", "small-files"],
        &["mkfs", "x.img", "--chips", "0"],
    ] {
        let output = fsoc(command);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {}", text(&output));
        assert!(output.stderr.contains("1 to 64"), "{command:?}: {}", text(&output));
        assert!(!output.stderr.contains("corrupt"), "{command:?}: {}", text(&output));
    }
}

/// The first minutes of a new user (issue 13, point 5): `fsoc demo` prints what a person reads,
/// not Rust's debug formatting of addresses (`PageAddress { chip: ChipIndex(0), … }`), and ends
/// by naming the commands to try next.
#[test]
fn the_demo_prints_readable_figures_and_the_next_commands() {
    let output = fsoc(&["demo"]);
    assert!(output.status.success(), "{}", text(&output));
    for debug in ["PageAddress", "BlockAddress", "ChipIndex", "EraseBlockIndex", "LogAddress", " { "] {
        assert!(!output.stdout.contains(debug), "debug formatting {debug:?} in:\n{}", output.stdout);
    }
    assert!(output.stdout.contains("program of chip 0 block 5 page 3, which is not erased"), "{}", output.stdout);
    for next in ["fsoc mkfs disk.img", "fsoc put -r", "fsoc mount disk.img", "fsoc serve disk.img"] {
        assert!(output.stdout.contains(next), "{next:?} missing from:\n{}", output.stdout);
    }
}

/// Other numeric options and the profile are refused with their range or values too, before
/// any work and in user terms (not the simulator's `block_count must be within 4..=16777216`).
#[test]
fn other_options_are_refused_with_their_range() {
    let refusals: [(&[&str], &str); 6] = [
        (&["crashtest", "--workload", "small-files", "--blocks", "0"], "give 4 to 16777216 erase blocks per chip"),
        (
            &["crashtest", "--workload", "small-files", "--blocks", "10"],
            "must be 2.0M to 1.9T (16 to 16121856 erase blocks",
        ),
        (&["flash", "create", "never.img", "--blocks", "3"], "give 4 to 16777216 erase blocks per chip"),
        (&["array", "mkfs", "never", "--chips", "65"], "give 1 to 64"),
        (&["mkfs", "never.img", "--profile", "qlc"], "give one of slc, mlc, tlc, mlc8k, mlc16k"),
        (&["mount", "--threads", "0", "never.img", "never"], "1..=64"),
    ];
    for (command, expected) in refusals {
        let output = fsoc(command);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {}", text(&output));
        assert!(output.stderr.contains(expected), "{command:?} lacks {expected:?}: {}", text(&output));
        assert!(!output.stderr.contains("block_count"), "{command:?}: internal terms: {}", text(&output));
    }
    assert!(!Path::new("never.img").exists() && !Path::new("never.chip0").exists());
}

/// A failed mkfs leaves nothing behind and states the limits in user terms; T works.
#[test]
fn mkfs_failures_leave_nothing_and_state_the_limits() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("small.img");
    let image_arg = image.to_str().expect("utf-8");
    for size in ["512K", "4T"] {
        let output = fsoc(&["mkfs", image_arg, "--size", size]);
        assert_eq!(output.status.code(), Some(2), "{}", text(&output));
        assert!(output.stderr.contains("must be 2.0M to 1.9T"), "{size}: {}", text(&output));
        assert!(!output.stderr.contains("block_count"), "internal terms: {}", text(&output));
        assert!(fs::read_dir(directory.path()).expect("read_dir").next().is_none(), "{size}: mkfs left a file behind");
    }
    let output = fsoc(&["mkfs", image_arg, "--size", "2M"]);
    assert!(output.status.success(), "a retry needs no --force: {}", text(&output));
    assert!(fsoc(&["fsck", image_arg]).status.success());
}

/// Volume ids are random, so two volumes made with the same seed differ; with
/// SOURCE_DATE_EPOCH (or --volume-id) they are reproducible.
#[test]
fn volume_ids_are_unique_unless_reproducibility_is_asked_for() {
    let directory = tempfile::tempdir().expect("tempdir");
    let volume_id = |name: &str, epoch: Option<&str>, extra: &[&str]| {
        let image = directory.path().join(name);
        let mut command = Command::new(FSOC);
        command.args(["mkfs", image.to_str().expect("utf-8"), "--size", "4M", "--seed", "7"]).args(extra);
        match epoch {
            Some(epoch) => command.env("SOURCE_DATE_EPOCH", epoch),
            None => command.env_remove("SOURCE_DATE_EPOCH"),
        };
        let output = run(&mut command, Duration::from_secs(60));
        assert!(output.status.success(), "{}", text(&output));
        let info = fsoc(&["info", image.to_str().expect("utf-8")]);
        info.stdout.lines().find(|line| line.starts_with("volume id")).expect("volume id line").to_string()
    };
    assert_ne!(volume_id("a.img", None, &[]), volume_id("b.img", None, &[]), "same seed, same id");
    assert_eq!(volume_id("c.img", Some("1700000000"), &[]), volume_id("d.img", Some("1700000000"), &[]));
    assert!(volume_id("e.img", None, &["--volume-id", "0x1234"]).contains("0x0000000000001234"));
}

/// An array volume (`fsoc array mkfs`, one file per chip) is one volume for mount, fsck and
/// info, named by BASE or by any of its chip files; a mounted array is refused by fsck and by
/// `array mkfs --force`; the image tools, which read single-file images, refuse it and say to
/// mount it. A failed `array mkfs` leaves no chip files.
#[test]
fn array_volumes_are_mounted_and_checked() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let base_arg = base.to_str().expect("utf-8");
    let output = fsoc(&["array", "mkfs", base_arg, "--chips", "3", "--blocks", "10"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(output.stderr.contains("must be 4.9M to"), "{}", text(&output));
    assert!(fs::read_dir(directory.path()).expect("read_dir").next().is_none(), "a failed array mkfs left files");
    assert!(fsoc(&["array", "mkfs", base_arg, "--chips", "3", "--blocks", "32"]).status.success());
    let chip = |index: u32| format!("{base_arg}.chip{index}");

    let mount_point = directory.path().join("mnt");
    fs::create_dir(&mount_point).expect("mount point");
    let mount_arg = mount_point.to_str().expect("utf-8");
    let _detach = Detach(&mount_point);
    let output = fsoc(&["mount", "--daemon", &chip(1), mount_arg]);
    assert!(output.status.success(), "mount of a chip file: {}", text(&output));
    fs::write(mount_point.join("striped"), vec![7u8; 100_000]).expect("write through the mount");
    for command in [
        vec!["fsck", base_arg],
        vec!["info", &chip(0)],
        vec!["array", "info", base_arg],
        vec!["flash", "info", &chip(1)],
        vec!["array", "mkfs", base_arg, "--chips", "2", "--blocks", "32", "--force"],
    ] {
        let output = fsoc(&command);
        assert_eq!(output.status.code(), Some(2), "{command:?} of a mounted array: {}", text(&output));
        assert!(output.stderr.contains("in use"), "{command:?}: {}", text(&output));
    }
    let output = fsoc(&["umount", mount_arg]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(output.stderr.contains(&format!("{base_arg} is committed and closed")), "{}", text(&output));

    let output = fsoc(&["fsck", &chip(2)]);
    assert!(
        output.status.success() && output.stdout.contains("1 files") && output.stdout.contains("clean"),
        "{}",
        text(&output)
    );
    let output = fsoc(&["info", base_arg]);
    assert!(
        output.status.success() && output.stdout.contains("chip 2") && output.stdout.contains("3 chips"),
        "{}",
        text(&output)
    );
    for command in
        [vec!["ls".to_string(), format!("{base_arg}:/")], vec!["cat".to_string(), format!("{}:/striped", chip(0))]]
    {
        let output = fsoc(&command.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(output.status.code(), Some(2), "{command:?}: {}", text(&output));
        assert!(output.stderr.contains(&format!("fsoc mount {base_arg} MOUNTPOINT")), "{command:?}: {}", text(&output));
        assert!(!output.stderr.contains("damaged"), "{command:?}: {}", text(&output));
    }
    assert!(fsoc(&["mount", "--daemon", base_arg, mount_arg]).status.success());
    assert_eq!(fs::read(mount_point.join("striped")).expect("read back"), vec![7u8; 100_000]);
    assert!(fsoc(&["umount", mount_arg]).status.success());

    // A chip of another array made with the same seed has another volume id, so the mixed
    // set is refused rather than mounted as one volume.
    let other = directory.path().join("other");
    assert!(fsoc(&["array", "mkfs", other.to_str().expect("utf-8"), "--chips", "3", "--blocks", "32"])
        .status
        .success());
    fs::copy(format!("{}.chip1", other.display()), chip(1)).expect("swap a chip");
    let output = fsoc(&["fsck", base_arg]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(output.stderr.contains("chips from different volumes"), "{}", text(&output));
}

/// Lazily unmounts a daemon's mount point when a test ends, passed or failed.
struct Detach<'p>(&'p Path);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        if fsoc_fuse::is_mount_point(self.0) {
            support::detach(self.0);
        }
    }
}

/// Help texts describe options: profile values, chip ranges, defaults, every workload.
#[test]
fn options_are_described() {
    let mkfs = fsoc(&["mkfs", "--help"]).stdout;
    for expected in ["slc, mlc, tlc", "1 to 64", "64M", "SOURCE_DATE_EPOCH"] {
        assert!(mkfs.contains(expected), "mkfs --help lacks {expected:?}:\n{mkfs}");
    }
    let crashtest = fsoc(&["crashtest", "--help"]).stdout;
    assert!(crashtest.contains("churn"), "crashtest --help omits churn:\n{crashtest}");
    let mount = fsoc(&["mount", "--help"]).stdout;
    assert!(mount.contains("--commit-interval"), "{mount}");
}

/// `bench mount` runs without --json, prints fsoc and littlefs with their ratio, and writes a
/// chart beside the JSON when asked.
#[test]
fn bench_mount_prints_both_file_systems_and_charts() {
    let output = fsoc(&["bench", "mount", "--files", "10,100"]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(output.stdout.contains("littlefs reads") && output.stdout.contains("reads ratio"), "{}", output.stdout);
    let directory = tempfile::tempdir().expect("tempdir");
    let json = directory.path().join("mount.json");
    assert!(fsoc(&["bench", "mount", "--files", "10", "--json", json.to_str().expect("utf-8")]).status.success());
    let chart = fs::read_to_string(json.with_extension("svg")).expect("chart beside the JSON");
    assert!(chart.starts_with("<svg") && chart.contains("littlefs"));
}

/// fsck's own failure does not send the user to fsck.
#[test]
fn fsck_does_not_refer_to_itself() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("flash-only.img");
    let image_arg = image.to_str().expect("utf-8");
    assert!(fsoc(&["flash", "create", image_arg, "--blocks", "64"]).status.success());
    let output = fsoc(&["fsck", image_arg]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(!output.stderr.contains("run `fsoc fsck"), "{}", text(&output));
    assert!(output.stderr.contains("fsoc mkfs"), "{}", text(&output));
}

/// One rule for a mounted image: fsck, info, flash info, ls and mkfs --force all refuse it,
/// and the mount keeps working.
#[test]
fn a_mounted_image_is_refused_by_every_command() {
    let volume = Volume::new("16M");
    let mounted = volume.mount();
    fs::write(mounted.path("kept"), b"kept").expect("write");
    for command in [
        vec!["fsck", volume.image_arg()],
        vec!["scrub", volume.image_arg()],
        vec!["scrub", "--check-only", volume.image_arg()],
        vec!["info", volume.image_arg()],
        vec!["flash", "info", volume.image_arg()],
        vec!["ls", &format!("{}:/", volume.image_arg())],
        vec!["mkfs", volume.image_arg(), "--size", "16M", "--force"],
    ] {
        let output = fsoc(&command);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {}", text(&output));
        assert!(output.stderr.contains("in use"), "{command:?}: {}", text(&output));
    }
    assert_eq!(fs::read(mounted.path("kept")).expect("the mount still works"), b"kept");
    mounted.unmount();
    volume.fsck();
}

/// The daemon says how to unmount with fsoc; a clean unmount logs nothing alarming; files left
/// on the mount survive a kill -9 after the commit interval; and `fsoc umount` of a dead
/// server says so and fails.
#[test]
fn daemon_periodic_commit_and_a_dead_server() {
    let volume = Volume::new("16M");
    let log = volume.directory.path().join("mount.log");
    let mount_point = volume.mount_point.to_str().expect("utf-8");
    let daemon = |extra: &[&str]| {
        let output = fsoc(
            &[
                &["mount", "--daemon", "--log", log.to_str().expect("utf-8"), volume.image_arg(), mount_point][..],
                extra,
            ]
            .concat(),
        );
        assert!(output.status.success(), "{}", text(&output));
        output
    };
    let output = daemon(&[]);
    assert!(output.stderr.contains("fsoc umount"), "{}", text(&output));
    assert!(!output.stderr.contains("fusermount3 -u"), "{}", text(&output));
    let output = fsoc(&["umount", mount_point]);
    assert!(output.status.success() && output.stderr.contains("committed and closed"), "{}", text(&output));
    let logged = fs::read_to_string(&log).unwrap_or_default();
    assert!(!logged.contains("Failed to umount"), "a clean unmount logged:\n{logged}");

    let output = daemon(&["--commit-interval", "1"]);
    let pid: i32 = output
        .stderr
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", text(&output)));
    fs::write(volume.mount_point.join("left-alone"), b"written, never fsynced").expect("write");
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill with the pid the daemon reported; SIGKILL is the crash being tested.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "the mount server {pid} was not found");
    std::thread::sleep(Duration::from_millis(300));
    let output = fsoc(&["umount", mount_point]);
    assert_eq!(output.status.code(), Some(2), "umount of a dead server: {}", text(&output));
    assert!(output.stderr.contains("died"), "{}", text(&output));
    assert!(!output.stderr.contains("committed and closed"), "{}", text(&output));
    let output = fsoc(&["cat", &format!("{}:/left-alone", volume.image_arg())]);
    assert_eq!(
        output.stdout,
        "written, never fsynced",
        "the periodic commit did not make it durable: {}",
        text(&output)
    );
    assert!(Path::new(&volume.image).exists());
}

/// An error the mount answers with EIO is logged with the operation, the inode and the
/// engine's own text (here a file whose extent points outside the volume, crafted with valid
/// checksums), so the log says what is damaged.
#[test]
fn eio_is_logged_with_its_cause() {
    let volume = Volume::new("8M");
    let flash = SimFlash::open_image(&volume.image).expect("open image");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let fd = fs.open(b"/broken", OpenFlags { write: true, create: true, ..Default::default() }, 0o644).expect("create");
    fs.pwrite(fd, 0, &[7u8; 20_000]).expect("write");
    fs.close(fd).expect("close");
    let inode = fs.stat(b"/broken").expect("stat").0;
    let volume_state = &mut fs.craft();
    let mut store = LogNodeStore::new(volume_state.log);
    let mut extent = 0xFFFF_FF00u32.to_le_bytes().to_vec();
    extent.extend_from_slice(&4u32.to_le_bytes());
    volume_state
        .allocation
        .insert(&mut store, &allocation_key(inode, RecordKind::Extent, 0), &extent)
        .expect("raw extent");
    fs.commit().expect("commit");
    let mut flash = fs.unmount().expect("unmount");
    fsoc_media::Flash::flush(&mut flash).expect("flush");

    let mounted = volume.mount();
    let error = fs::read(mounted.path("broken")).expect_err("a read of a damaged file");
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    mounted.unmount();
    let logged = fs::read_to_string(volume.directory.path().join("mount.log")).expect("mount log");
    let expected = format!("read on inode {inode}: answering EIO: ");
    assert!(logged.contains(&expected), "the log lacks {expected:?}:\n{logged}");
    assert!(!logged.contains("Failed to umount"), "a clean unmount logged:\n{logged}");
}

/// Output piped into a reader that stops early (`fsoc info IMAGE | head -1`) ends fsoc quietly
/// with status 0, as `fsoc ls` did already, not with a panic about a broken pipe.
#[test]
fn a_pipe_closed_early_ends_the_command_quietly() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("pipe.img");
    let made = fsoc(&["mkfs", image.to_str().expect("utf-8"), "--size", "8M"]);
    assert!(made.status.success(), "{}", text(&made));
    // `ls -r` of a tree long enough to outlast the pipe's buffer once head has gone.
    let source = directory.path().join("tree");
    fs::create_dir(&source).expect("mkdir");
    for index in 0..3000 {
        fs::write(source.join(format!("a-rather-long-file-name-to-fill-the-pipe-{index:05}")), b"x").expect("write");
    }
    let put = fsoc(&["put", "-r", source.to_str().expect("utf-8"), &format!("{}:/tree", image.display())]);
    assert!(put.status.success(), "{}", text(&put));
    let script = format!(
        "'{FSOC}' ls -r '{0}:/tree' | head -1; echo \"status ${{PIPESTATUS[0]}}\"; '{FSOC}' info '{0}' | head -1; \
         echo \"status ${{PIPESTATUS[0]}}\"",
        image.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().expect("run bash");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(stdout.lines().filter(|line| *line == "status 0").count(), 2, "{stdout}");
    assert_eq!(stdout.lines().count(), 4, "{stdout}");
}
