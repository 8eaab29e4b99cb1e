//! `fsoc mount` under real programs: each test mounts an image with the `fsoc` binary, runs
//! ordinary tools on the mount (cp, diff, tar, mv, rm, ln, find, git, sqlite3, fio, postmark,
//! dbench), then unmounts, requires `fsoc fsck` to be clean, remounts and requires the
//! contents to be unchanged. Also: SIGKILL of the server mid-copy, clean unmount on signals,
//! `--daemon`, and refusal of bad input with a clear message.
//!
//! Needs root, /dev/fuse and the programs scripts/setup.sh installs; a missing program fails
//! its test with a message naming it.

mod support;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::{check_round_trip, fsoc, require, run, run_ok, shell, snapshot, source_tree, Volume, MOUNT_TIMEOUT};

#[test]
fn cp_diff_and_tar_round_trip_a_source_tree() {
    require("diff");
    require("tar");
    let volume = Volume::new("256M");
    let source = source_tree(volume.directory.path());
    let mounted = volume.mount();
    // cp -a keeps modes, times and links; diff -r compares every byte.
    run_ok(Command::new("cp").arg("-a").arg(&source).arg(mounted.path("copy")));
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(mounted.path("copy")));
    assert_eq!(snapshot(&source), snapshot(&mounted.path("copy")), "cp -a preserved modes, owners and times");
    // tar: create an archive on the mount, extract it there, re-create it from the extraction.
    run_ok(Command::new("tar").arg("-cf").arg(mounted.path("tree.tar")).arg("-C").arg(&source).arg("."));
    fs::create_dir(mounted.path("extracted")).expect("mkdir");
    run_ok(Command::new("tar").arg("-xpf").arg(mounted.path("tree.tar")).arg("-C").arg(mounted.path("extracted")));
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(mounted.path("extracted")));
    run_ok(
        Command::new("tar").arg("-cf").arg(mounted.path("again.tar")).arg("-C").arg(mounted.path("extracted")).arg("."),
    );
    let list = |archive: &Path| {
        let output = run_ok(Command::new("tar").arg("-tvf").arg(archive));
        let mut lines: Vec<String> = output.stdout.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(list(&mounted.path("tree.tar")), list(&mounted.path("again.tar")), "re-created archive lists the same");
    let remounted = check_round_trip(mounted);
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(remounted.path("copy")));
    remounted.unmount();
    volume.fsck();
}

#[test]
fn mv_rm_ln_and_find_work_on_the_mount() {
    require("find");
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    shell(
        mounted.root(),
        "mkdir -p a/b/c d && echo one > a/one && echo two > a/b/two && echo three > a/b/c/three \
         && ln a/one hard && ln -s a/b/two soft && ln -s ../a d/up \
         && mv a/b d/b && mv hard d/hard && mv d/b/two d/b/renamed \
         && echo replaced > new && mv new d/hard",
    );
    let found = shell(mounted.root(), "find . | sort").stdout;
    assert_eq!(found, ".\n./a\n./a/one\n./d\n./d/b\n./d/b/c\n./d/b/c/three\n./d/b/renamed\n./d/hard\n./d/up\n./soft\n");
    assert_eq!(shell(mounted.root(), "find . -type l | sort").stdout, "./d/up\n./soft\n");
    assert_eq!(shell(mounted.root(), "find . -type f -name 'r*' | sort").stdout, "./d/b/renamed\n");
    assert_eq!(fs::read_to_string(mounted.path("d/up/one")).expect("through a symlink"), "one\n");
    assert!(fs::read(mounted.path("soft")).is_err(), "soft now dangles: its target moved");
    assert_eq!(fs::read_to_string(mounted.path("d/hard")).expect("read"), "replaced\n", "mv replaced the file");
    assert_eq!(shell(mounted.root(), "stat -c %h a/one").stdout, "1\n", "the hard link was replaced, one name left");
    let mounted = check_round_trip(mounted);
    shell(mounted.root(), "rm -r d && rm soft a/one && rmdir a");
    assert_eq!(shell(mounted.root(), "find . | sort").stdout, ".\n");
    let mounted = check_round_trip(mounted);
    mounted.unmount();
    volume.fsck();
}

#[test]
fn git_commits_and_checks_a_repository_on_the_mount() {
    require("git");
    let volume = Volume::new("128M");
    let source = source_tree(volume.directory.path());
    let mounted = volume.mount();
    let repository = mounted.path("repository");
    run_ok(Command::new("cp").arg("-a").arg(&source).arg(&repository));
    let git = |arguments: &[&str]| {
        run_ok(
            Command::new("git")
                .args([
                    "-c",
                    "user.name=fsoc test",
                    "-c",
                    "user.email=test@fsoc.invalid",
                    "-c",
                    "init.defaultBranch=main",
                ])
                // No detached background maintenance: it would keep the mount busy.
                .args(["-c", "gc.autoDetach=false", "-c", "maintenance.autoDetach=false", "-c", "gc.auto=0"])
                .args(arguments)
                .current_dir(&repository),
        )
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "first"]);
    fs::write(repository.join("NEW.md"), "a second commit\n").expect("write");
    git(&["add", "NEW.md"]);
    git(&["commit", "-q", "-m", "second"]);
    git(&["gc", "-q"]);
    git(&["fsck", "--strict", "--no-progress"]);
    assert_eq!(git(&["rev-list", "--count", "HEAD"]).stdout.trim(), "2");
    let mounted = check_round_trip(mounted);
    let repository = mounted.path("repository");
    let output = run_ok(Command::new("git").args(["fsck", "--strict", "--no-progress"]).current_dir(&repository));
    assert!(output.stderr.is_empty() || !output.stderr.contains("error"), "git fsck after remount: {}", output.text());
    let status = run_ok(Command::new("git").args(["status", "--porcelain"]).current_dir(&repository));
    assert_eq!(status.stdout, "", "work tree unchanged after remount");
    mounted.unmount();
    volume.fsck();
}

#[test]
fn sqlite3_creates_and_queries_a_database() {
    require("sqlite3");
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    let database = mounted.path("test.db");
    let sql = |statement: &str| run_ok(Command::new("sqlite3").arg(&database).arg(statement)).stdout;
    sql("create table item(id integer primary key, name text, value real);\
         with recursive n(x) as (select 1 union all select x + 1 from n where x < 5000)\
         insert into item(name, value) select 'item-' || x, x * 0.5 from n;\
         create index item_name on item(name);");
    sql("begin; update item set value = value * 2 where id % 3 = 0; delete from item where id % 7 = 0; commit;");
    let query = "select count(*), sum(id), printf('%.1f', sum(value)) from item; pragma integrity_check;";
    let answer = sql(query);
    assert_eq!(answer.lines().next(), Some("4286|10715715|7142143.5"));
    assert!(answer.contains("ok"), "integrity_check: {answer}");
    let mounted = check_round_trip(mounted);
    assert_eq!(
        run_ok(Command::new("sqlite3").arg(mounted.path("test.db")).arg(query)).stdout,
        answer,
        "same answers after remount"
    );
    mounted.unmount();
    volume.fsck();
}

/// Holes through the mount, checked with Python's os.lseek and util-linux's fallocate: SEEK_DATA
/// and SEEK_HOLE follow the extents, a punched hole reads as zeros with the size kept, and
/// fallocate's mode 0 extends the file with a hole after checking the free space (it reserves
/// nothing: a copy-on-write log cannot promise space), refusing a size the volume cannot hold.
#[test]
fn seek_data_seek_hole_and_punching_holes_through_the_mount() {
    require("python3");
    require("fallocate");
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    let script = r#"
import errno, os
page = 4096  # at least the volume's page: the offsets below are in whole pages of it
with open("sparse", "wb") as f:
    f.write(b"a" * page)
    f.seek(8 * page)
    f.write(b"b" * page)
fd = os.open("sparse", os.O_RDONLY)
hole = os.lseek(fd, 0, os.SEEK_HOLE)
data = os.lseek(fd, hole, os.SEEK_DATA)
end_hole = os.lseek(fd, data, os.SEEK_HOLE)
try:
    os.lseek(fd, 9 * page, os.SEEK_DATA)
    past_end = "no error"
except OSError as error:
    past_end = errno.errorcode[error.errno]
os.close(fd)
print(hole, data, end_hole, past_end)
"#;
    let output = run_ok(Command::new("python3").arg("-c").arg(script).current_dir(mounted.root()));
    let fields: Vec<&str> = output.stdout.split_whitespace().collect();
    let numbers: Vec<u64> = fields[..3].iter().map(|field| field.parse().expect("an offset")).collect();
    assert!(numbers[0] >= 4096 && numbers[0] < 8 * 4096, "the hole after the first page: {}", output.stdout);
    assert!(numbers[1] > numbers[0] && numbers[1] <= 8 * 4096, "data again at page 8: {}", output.stdout);
    assert_eq!(numbers[2], 9 * 4096, "the end of the file is a hole: {}", output.stdout);
    assert_eq!(fields[3], "ENXIO", "SEEK_DATA at the end: {}", output.stdout);

    shell(mounted.root(), "head -c 16384 /dev/zero | tr '\\0' 'x' > punched && fallocate -p -o 2048 -l 8192 punched");
    let punched = std::fs::read(mounted.path("punched")).expect("read");
    assert_eq!(punched.len(), 16384, "the size is kept");
    assert!(punched[..2048].iter().all(|&byte| byte == b'x') && punched[10240..].iter().all(|&byte| byte == b'x'));
    assert!(punched[2048..10240].iter().all(|&byte| byte == 0), "the punched range reads as zeros");
    shell(mounted.root(), "fallocate -l 1M reserved");
    let reserved = std::fs::metadata(mounted.path("reserved")).expect("stat");
    assert_eq!((reserved.len(), std::os::unix::fs::MetadataExt::blocks(&reserved)), (1 << 20, 0), "a hole");
    let refused =
        run(Command::new("fallocate").args(["-l", "1G", "too-big"]).current_dir(mounted.root()), MOUNT_TIMEOUT);
    assert!(!refused.status.success() && refused.stderr.contains("No space left"), "{}", refused.text());
    mounted.unmount();
    volume.fsck();
}

#[test]
fn fio_sequential_and_random_writes_with_fsync_verify() {
    require("fio");
    let volume = Volume::new("128M");
    let mounted = volume.mount();
    fs::create_dir(mounted.path("fio")).expect("mkdir");
    let directory = mounted.path("fio");
    for (name, pattern, block, size, fsync) in
        [("sequential", "write", "64k", "8M", "4"), ("random", "randwrite", "4k", "4M", "16")]
    {
        let output = run_ok(Command::new("fio").args([
            &format!("--name={name}"),
            &format!("--directory={}", directory.display()),
            &format!("--rw={pattern}"),
            &format!("--bs={block}"),
            &format!("--size={size}"),
            &format!("--fsync={fsync}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--ioengine=psync",
            "--randrepeat=1",
            "--output-format=terse",
            "--terse-version=3",
        ]));
        // Terse v3: field 5 is the error count.
        assert_eq!(output.stdout.split(';').nth(4), Some("0"), "fio {name} reported errors:\n{}", output.text());
    }
    let mounted = check_round_trip(mounted);
    mounted.unmount();
    volume.fsck();
}

#[test]
fn postmark_and_dbench_run_their_workloads() {
    require("postmark");
    require("dbench");
    let volume = Volume::new("256M");
    let mounted = volume.mount();
    fs::create_dir(mounted.path("postmark")).expect("mkdir");
    let configuration = volume.directory.path().join("postmark.cfg");
    fs::write(
        &configuration,
        format!(
            "set location {}\nset number 500\nset transactions 2000\nset size 500 30000\nset seed 7\nrun\nquit\n",
            mounted.path("postmark").display()
        ),
    )
    .expect("postmark config");
    let output = run_ok(Command::new("postmark").arg(&configuration));
    assert!(output.stdout.contains("seconds of transactions"), "postmark ran its transactions:\n{}", output.text());
    assert!(output.stdout.contains("deleted"), "postmark ran to its clean-up:\n{}", output.text());
    assert_eq!(fs::read_dir(mounted.path("postmark")).expect("readdir").count(), 0, "postmark removed its files");
    fs::create_dir(mounted.path("dbench")).expect("mkdir");
    let output = run_ok(
        Command::new("dbench")
            .args(["-t", "4", "-c", "/usr/share/dbench/client.txt", "-D"])
            .arg(mounted.path("dbench"))
            .arg("2"),
    );
    assert!(output.stdout.contains("Throughput"), "dbench finished its run:\n{}", output.text());
    let mounted = check_round_trip(mounted);
    mounted.unmount();
    volume.fsck();
}

/// Kills the server with SIGKILL while `cp -a` copies a tree and another writer fsyncs files
/// one by one; after clearing the dead mount, fsck must be clean and every file whose fsync
/// returned must be intact after a remount.
#[test]
fn sigkill_mid_copy_keeps_every_fsynced_file() {
    let volume = Volume::new("256M");
    // A source big enough that the copy is still running when the server dies.
    let source = volume.directory.path().join("bulk");
    fs::create_dir(&source).expect("mkdir");
    for index in 0..48u32 {
        let content: Vec<u8> =
            (0..(2u32 << 20)).map(|byte| (byte.wrapping_mul(2_654_435_761) >> 13) as u8 ^ index as u8).collect();
        fs::write(source.join(format!("part{index:02}")), content).expect("write source");
    }
    let mounted = volume.mount();
    let durable: Mutex<BTreeMap<String, Vec<u8>>> = Mutex::new(BTreeMap::new());
    let write_synced = |name: String, content: Vec<u8>, path: &Path| -> std::io::Result<()> {
        let mut file = File::create(path)?;
        file.write_all(&content)?;
        file.sync_all()?;
        durable.lock().expect("lock").insert(name, content);
        Ok(())
    };
    fs::create_dir(mounted.path("synced")).expect("mkdir");
    for index in 0..20 {
        let name = format!("synced/before{index:02}");
        write_synced(
            name.clone(),
            format!("before {index}\n").repeat(1000 + index * 97).into_bytes(),
            &mounted.path(&name),
        )
        .expect("fsync'd write");
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let copier = scope.spawn(|| {
            run(Command::new("cp").arg("-a").arg(&source).arg(mounted.path("copy")), Duration::from_secs(60))
        });
        let writer = scope.spawn(|| {
            let mut index = 0;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("synced/during{index:04}");
                if write_synced(
                    name.clone(),
                    format!("during {index}\n").repeat(200 + index % 50).into_bytes(),
                    &mounted.path(&name),
                )
                .is_err()
                {
                    break; // the server is gone
                }
                index += 1;
            }
        });
        // Kill once the copy is under way (some of it is on the volume).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !mounted.path("copy/part02").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: SIGKILL to our own child, the fsoc mount server.
        assert_eq!(unsafe { libc::kill(mounted.pid() as i32, libc::SIGKILL) }, 0);
        stop.store(true, Ordering::SeqCst);
        let copy = copier.join().expect("copier");
        assert!(!copy.status.success(), "cp cannot have finished the copy: the server died under it");
        writer.join().expect("writer");
    });
    mounted.kill();
    volume.fsck();
    let remounted = volume.mount();
    let durable = durable.into_inner().expect("lock");
    assert!(durable.len() > 20, "files were fsync'd during the copy too");
    for (name, content) in &durable {
        let found = fs::read(remounted.path(name)).unwrap_or_else(|error| panic!("fsync'd {name} lost: {error}"));
        assert!(&found == content, "fsync'd {name} changed: {} bytes, expected {}", found.len(), content.len());
    }
    remounted.unmount();
    volume.fsck();
}

#[test]
fn signals_and_daemon_mode_unmount_cleanly() {
    let volume = Volume::new("64M");
    // Foreground: SIGINT and SIGTERM both unmount, commit and exit 0.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let mounted = volume.mount();
        fs::write(mounted.path(&format!("signal{signal}")), b"written before the signal").expect("write");
        mounted.stop_with_signal(signal);
        volume.fsck();
    }
    // SIGTERM while a file is open: the busy mount is detached, the open file keeps working,
    // and the server commits and exits when it is closed.
    let mut mounted = volume.mount();
    let mut open = File::create(mounted.path("held_open")).expect("create");
    mounted.send_signal(libc::SIGTERM);
    let canonical = volume.mount_point.canonicalize().expect("path");
    let deadline = Instant::now() + Duration::from_secs(30);
    while fsoc_fuse::is_mount_point(&canonical) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!fsoc_fuse::is_mount_point(&canonical), "busy mount detached on SIGTERM");
    std::thread::sleep(Duration::from_millis(200));
    assert!(mounted.is_running(), "server keeps serving the open file");
    open.write_all(b"written after the detach").expect("write through the detached mount");
    drop(open);
    mounted.wait_for_exit(libc::SIGTERM);
    volume.fsck();
    assert_eq!(fsoc(&["cat", &format!("{}:/held_open", volume.image_arg())]).stdout, "written after the detach");
    // --daemon returns once mounted; the daemon commits on fusermount3 -u.
    let output = fsoc(&["mount", "--daemon", volume.image_arg(), volume.mount_point.to_str().expect("utf-8")]);
    assert!(output.status.success(), "fsoc mount --daemon:\n{}", output.text());
    let canonical = volume.mount_point.canonicalize().expect("path");
    assert!(fsoc_fuse::is_mount_point(&canonical), "mounted when --daemon returns");
    let pid: u32 = output
        .stderr
        .split("pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("daemon pid in {:?}", output.stderr));
    fs::write(volume.mount_point.join("daemon"), b"written through the daemon").expect("write");
    // `fsoc umount` returns only after the daemon has committed and released the image.
    let unmounted = fsoc(&["umount", volume.mount_point.to_str().expect("utf-8")]);
    assert!(unmounted.status.success(), "fsoc umount:\n{}", unmounted.text());
    assert!(unmounted.stderr.contains("committed"), "{}", unmounted.text());
    assert!(!fsoc_fuse::is_mount_point(&canonical), "unmounted");
    let deadline = Instant::now() + Duration::from_secs(30);
    let exited = || !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid);
    while !exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(exited(), "the daemon exits after the unmount");
    volume.fsck();
    let listing = fsoc(&["ls", &format!("{}:/", volume.image_arg())]);
    assert_eq!(listing.stdout, "daemon\nheld_open\nsignal15\nsignal2\n", "{}", listing.text());
    assert_eq!(fsoc(&["cat", &format!("{}:/daemon", volume.image_arg())]).stdout, "written through the daemon");
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let volume = Volume::new("16M");
    let directory = volume.directory.path();
    let mount_point = volume.mount_point.to_str().expect("utf-8");
    let refuse = |arguments: &[&str], expected: &str| {
        let output = fsoc(arguments);
        assert!(!output.status.success(), "{arguments:?} must fail:\n{}", output.text());
        assert!(output.stderr.contains(expected), "{arguments:?}: expected {expected:?} in:\n{}", output.text());
        assert!(!output.stderr.contains("panicked"), "{}", output.text());
    };
    // Garbage, truncated, raw flash without a volume, a damaged volume.
    let garbage = directory.join("garbage.img");
    fs::write(
        &garbage,
        (0..1_000_000u32).map(|index| (index.wrapping_mul(2_654_435_761) >> 24) as u8).collect::<Vec<_>>(),
    )
    .expect("write");
    refuse(&["mount", garbage.to_str().expect("utf-8"), mount_point], "not an fsoc image");
    let truncated = directory.join("truncated.img");
    fs::copy(&volume.image, &truncated).expect("copy");
    File::options().write(true).open(&truncated).expect("open").set_len(100_000).expect("truncate");
    refuse(&["mount", truncated.to_str().expect("utf-8"), mount_point], "truncated");
    let raw = directory.join("raw.img");
    let output = fsoc(&["flash", "create", raw.to_str().expect("utf-8"), "--blocks", "64"]);
    assert!(output.status.success(), "{}", output.text());
    refuse(&["mount", raw.to_str().expect("utf-8"), mount_point], "fsoc mkfs");
    let damaged = directory.join("damaged.img");
    fs::copy(&volume.image, &damaged).expect("copy");
    damage_metaroots(&damaged);
    // fsck cannot check what does not mount, so the message says what can be done instead.
    refuse(&["mount", damaged.to_str().expect("utf-8"), mount_point], "restore it from a copy");
    refuse(&["mount", "/nonexistent/volume.img", mount_point], "volume.img");
    // Mount point missing, not a directory, busy.
    refuse(&["mount", volume.image_arg(), directory.join("missing").to_str().expect("utf-8")], "does not exist");
    refuse(&["mount", volume.image_arg(), volume.image_arg()], "not a directory");
    let mounted = volume.mount();
    refuse(&["mount", damaged.to_str().expect("utf-8"), mount_point], "busy");
    // A mounted image is locked against tools and a second mount.
    let other = directory.join("other");
    fs::create_dir(&other).expect("mkdir");
    refuse(&["mount", volume.image_arg(), other.to_str().expect("utf-8")], "in use");
    refuse(&["ls", &format!("{}:/", volume.image_arg())], "in use");
    refuse(&["umount", other.to_str().expect("utf-8")], "not a mount point");
    refuse(&["umount", "/proc"], "not an fsoc mount");
    mounted.unmount();
    // A daemon that cannot mount reports its error through the parent.
    refuse(&["mount", "--daemon", garbage.to_str().expect("utf-8"), mount_point], "not an fsoc image");
    volume.fsck();
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.split(") ").nth(1).is_some_and(|rest| rest.starts_with('Z')))
}

/// Overwrites the three metaroot areas (segments 1-3 of a one-chip image) with noise, leaving
/// the image header and the superblock intact: the image opens, the volume does not mount.
fn damage_metaroots(image: &Path) {
    use std::os::unix::fs::FileExt;
    let file = File::options().read(true).write(true).open(image).expect("open image");
    let length = file.metadata().expect("stat").len();
    let mut header = vec![0u8; fsoc_media::image::HEADER_BYTES];
    file.read_exact_at(&mut header, 0).expect("read header");
    let (header, layout) = fsoc_media::image::ImageHeader::decode(&header, length).expect("valid header");
    assert_eq!(header.chip_count, 1, "one chip: segment k is erase block k");
    let pages_per_block = u64::from(header.geometry.pages_per_block);
    let noise: Vec<u8> =
        (0..header.geometry.page_data_bytes).map(|index| (index.wrapping_mul(2_246_822_519) >> 11) as u8).collect();
    for page in pages_per_block..4 * pages_per_block {
        file.write_all_at(&noise, layout.data_offset + page * layout.page_slot_bytes).expect("write noise");
    }
}

#[test]
fn image_tools_copy_trees_in_and_out_without_mounting() {
    require("diff");
    let volume = Volume::new("64M");
    let source = source_tree(volume.directory.path());
    let image = |path: &str| format!("{}:{path}", volume.image_arg());
    let ok = |arguments: &[&str]| {
        let output = fsoc(arguments);
        assert!(output.status.success(), "fsoc {arguments:?}:\n{}", output.text());
        output
    };
    ok(&["mkdir", "-p", &image("/imported/deep/er")]);
    ok(&["put", "-r", source.to_str().expect("utf-8"), &image("/imported")]);
    ok(&["put", source.join("fsoc-cli/Cargo.toml").to_str().expect("utf-8"), &image("/single.toml")]);
    assert_eq!(
        ok(&["cat", &image("/single.toml")]).stdout,
        fs::read_to_string(source.join("fsoc-cli/Cargo.toml")).expect("read")
    );
    assert_eq!(ok(&["ls", &image("/")]).stdout, "imported/\nsingle.toml\n");
    let recursive = ok(&["ls", "-r", &image("/imported/source")]).stdout;
    assert!(recursive.lines().any(|line| line == "/imported/source/fsoc-cli/src/tools_cmd.rs"), "{recursive}");
    let long = ok(&["ls", "-l", &image("/single.toml")]).stdout;
    assert!(long.starts_with("-rw-r--r--") && long.trim_end().ends_with("single.toml"), "{long}");
    ok(&["mv", &image("/imported/source"), &image("/tree")]);
    let out = volume.directory.path().join("out");
    ok(&["get", "-r", &image("/tree"), out.to_str().expect("utf-8")]);
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(&out));
    assert_eq!(snapshot(&source).len(), snapshot(&out).len());
    ok(&["rm", &image("/single.toml")]);
    let refused = fsoc(&["rm", &image("/tree")]);
    assert!(!refused.status.success() && refused.stderr.contains("use -r"), "{}", refused.text());
    ok(&["rm", "-r", &image("/tree"), &image("/imported")]);
    assert_eq!(ok(&["ls", &image("/")]).stdout, "");
    volume.fsck();
}

/// With `mkfs --nvram`, an fsync programs no flash page: the changes go to a record in the
/// NVRAM file. SIGKILL the server after many fsync'd small files: a remount replays the records
/// (`fsoc info` says how many), fsck is clean and every fsync'd file is intact.
#[test]
fn sigkill_keeps_every_fsynced_file_on_a_volume_with_nvram() {
    let volume = Volume::with_mkfs_arguments("64M", &["--nvram", "64K"]);
    let mounted = volume.mount();
    let mut durable = BTreeMap::new();
    fs::create_dir(mounted.path("d")).expect("mkdir");
    for index in 0..300usize {
        let name = format!("d/f{index:03}");
        let content = format!("file {index}\n").repeat(if index % 50 == 7 { 900 } else { 1 + index % 20 }).into_bytes();
        let mut file = File::create(mounted.path(&name)).expect("create");
        file.write_all(&content).expect("write");
        file.sync_all().expect("fsync");
        durable.insert(name, content);
    }
    mounted.kill();
    let info = fsoc(&["info", volume.image_arg()]);
    assert!(info.status.success(), "info:\n{}", info.text());
    let replayed: u64 = info
        .stdout
        .split("mount replayed ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no NVRAM line in fsoc info:\n{}", info.text()));
    assert!(replayed > 0, "no NVRAM record replayed after SIGKILL:\n{}", info.text());
    volume.fsck();
    let mounted = volume.mount();
    for (name, content) in &durable {
        assert_eq!(&fs::read(mounted.path(name)).expect("read"), content, "{name} after SIGKILL");
    }
    mounted.unmount();
    volume.fsck();
    // The NVRAM file is part of the volume: without it, mount refuses and says where it was.
    let nvram = volume.directory.path().join("volume.img.nvram");
    let aside = volume.directory.path().join("aside.nvram");
    fs::rename(&nvram, &aside).expect("move the NVRAM away");
    let refused = fsoc(&["info", volume.image_arg()]);
    assert!(!refused.status.success() && refused.stderr.contains("volume.img.nvram"), "{}", refused.text());
}
