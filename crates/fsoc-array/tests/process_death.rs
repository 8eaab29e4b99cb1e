//! What a dead process (`kill -9`) leaves in the chip files of a threaded array: requests still
//! queued on a chip's worker never reach its file, and the chips' queues drain in any order.
//! A commit's metaroot must therefore never reach its file before the pages it names reach
//! theirs, on whatever chips those went to (`Flash::write_barrier`, which the commit protocol
//! calls around each metaroot). Each case holds every chip's worker but one, commits, kills
//! the "process" and mounts what the files hold: it must be the old commit or the new one,
//! complete and checked clean, never a metaroot naming pages that were never written.

use std::sync::mpsc;
use std::time::Duration;

use fsoc_array::{chip_file_path, ThreadedFlash};
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{Profile, SimConfig};

const CHIPS: u32 = 4;

fn pattern(tag: u8, length: usize) -> Vec<u8> {
    (0..length).map(|index| (index as u8).wrapping_mul(31) ^ tag).collect()
}

fn write_file(fs: &mut FileSystem<ThreadedFlash>, path: &[u8], bytes: &[u8]) -> Result<(), String> {
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    let fd = fs.open(path, flags, 0o644).map_err(|error| error.to_string())?;
    fs.pwrite(fd, 0, bytes).map_err(|error| error.to_string())?;
    fs.close(fd).map_err(|error| error.to_string())?;
    fs.commit().map_err(|error| error.to_string())
}

fn read_file(fs: &FileSystem<ThreadedFlash>, path: &[u8]) -> Option<Vec<u8>> {
    let (inode, _) = fs.stat(path).ok()?;
    let mut bytes = vec![0u8; 1 << 20];
    let read = fs.read_into(inode, 0, &mut bytes).expect("read of a file the volume names");
    bytes.truncate(read);
    Some(bytes)
}

/// Holds every chip but `running`, writes and commits a second file on another thread, kills
/// the process while the held chips' queues still hold that commit's pages, and mounts.
fn kill_mid_commit(running: u32) {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let first = pattern(1, 300_000);
    // Small: the held chips' queues (64 requests) must not fill, or the writer would block on a
    // full queue before it reaches the commit and the case would test nothing. With the write
    // barrier turned into a no-op this test fails (checked): the case with chip 3 running finds
    // a metaroot naming a segment-table page that never reached chip 1's file.
    let second = pattern(2, 9_000);
    {
        let flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Mlc, CHIPS, 32, 7)).expect("create");
        let control = flash.chip_control();
        let mut fs = FileSystem::format(flash, FsConfig::default(), 0xDEAD).expect("format");
        write_file(&mut fs, b"/first", &first).expect("first file, committed");
        for chip in (0..CHIPS).filter(|&chip| chip != running) {
            control.hold(chip);
        }
        let (done, finished) = mpsc::channel();
        let writer = std::thread::spawn(move || {
            let result = write_file(&mut fs, b"/second", &second);
            let _ = done.send(());
            // The array is dropped with the file system, after the kill below.
            (result, fs)
        });
        // With the write barrier (a fence on every chip) the running chip holds the metaroot back
        // until the held chips have written what comes before it, and the commit's flush waits
        // for them; without it, the metaroot may be in its file by now while the pages it names
        // are not.
        let _ = finished.recv_timeout(Duration::from_millis(500));
        control.kill();
        let (_result, fs) = writer.join().expect("writer thread");
        drop(fs);
    }
    let flash = ThreadedFlash::open(&base).expect("reopen the chip files");
    let mut fs = FileSystem::mount(flash, FsConfig::default())
        .unwrap_or_else(|error| panic!("chip {running} running: mount after the kill: {error}"));
    let report = fs.fsck(false).expect("fsck runs");
    assert!(report.violations.is_empty(), "chip {running} running: fsck after the kill: {:?}", report.violations);
    assert_eq!(read_file(&fs, b"/first").as_deref(), Some(&first[..]), "chip {running} running: the first file");
    match read_file(&fs, b"/second") {
        None => {} // the old commit
        Some(bytes) => assert!(bytes == pattern(2, 9_000), "chip {running} running: a second file that is wrong"),
    }
    assert!(chip_file_path(&base, 0).exists());
}

#[test]
fn a_killed_process_leaves_the_old_commit_or_the_new_one_whichever_chip_ran() {
    for running in 0..CHIPS {
        kill_mid_commit(running);
    }
}
