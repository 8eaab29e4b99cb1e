//! `SharedVolume::change_then_flush`: the flash's flush of an fsync runs with the volume
//! released, so readers are not held behind it, and the fsync still returns only once durable.
//! The flash is a threaded chip array whose chip 0 worker the test holds, so the flush cannot
//! finish until the test lets it.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use fsoc_array::ThreadedFlash;
use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_engine::SharedVolume;
use fsoc_media::{Profile, SimConfig};

#[test]
fn readers_run_while_an_fsync_waits_for_the_flash_and_the_fsync_is_durable_after() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Slc, 2, 64, 3)).expect("create");
    let control = flash.chip_control();
    let volume = Arc::new(SharedVolume::new(FileSystem::format(flash, FsConfig::default(), 9).expect("format")));
    let inode = volume
        .change("create", None, |fs| fs.create(1, b"file", FileKind::File, 0o644, 0, 0, None))
        .expect("not refused")
        .expect("create");

    control.hold(0);
    let (done, finished) = mpsc::channel();
    let writer = {
        let volume = Arc::clone(&volume);
        std::thread::spawn(move || {
            let result = volume.change_then_flush("fsync", Some(inode), |fs| {
                fs.write(inode, 0, b"durable bytes")?;
                fs.begin_fsync(inode).map(|flush| ((), flush))
            });
            let _ = done.send(());
            result
        })
    };
    // The fsync's flush waits for chip 0; meanwhile a reader gets the volume (the change is
    // already published: it sees the new bytes).
    std::thread::sleep(Duration::from_millis(100));
    let (reader_done, reader_finished) = mpsc::channel();
    {
        let volume = Arc::clone(&volume);
        std::thread::spawn(move || {
            let bytes = volume.read("read", Some(inode), |fs| fs.read(inode, 0, 64)).expect("not refused");
            let _ = reader_done.send(bytes);
        });
    }
    let read = reader_finished.recv_timeout(Duration::from_secs(10)).expect("a reader is not held behind the flush");
    assert_eq!(read.expect("read").as_slice(), b"durable bytes");
    assert!(finished.try_recv().is_err(), "the fsync returned before its flush could finish");
    control.release(0);
    finished.recv_timeout(Duration::from_secs(10)).expect("the fsync returns once chip 0 runs");
    writer.join().expect("writer thread").expect("not refused").expect("fsync");

    // Durable: a power cut now (no unmount commit) keeps the fsync'd bytes.
    let volume = Arc::into_inner(volume).expect("one owner");
    let (fs, failure) = volume.into_inner();
    assert_eq!(failure, None);
    let flash = fs.into_flash_without_commit();
    flash.close().expect("close the chip files");
    let fs = FileSystem::mount(ThreadedFlash::open(&base).expect("reopen"), FsConfig::default()).expect("mount");
    let (found, _) = fs.lookup(1, b"file").expect("the fsync'd file");
    assert_eq!(fs.read(found, 0, 64).expect("read back"), b"durable bytes");
}

/// A second fsync with nothing new to commit does not return before the first fsync's flush:
/// the bytes it promises durable are that commit's.
#[test]
fn an_fsync_with_nothing_new_waits_for_the_flush_before_it() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Slc, 2, 64, 4)).expect("create");
    let control = flash.chip_control();
    let volume = Arc::new(SharedVolume::new(FileSystem::format(flash, FsConfig::default(), 10).expect("format")));
    let inode = volume
        .change("create", None, |fs| fs.create(1, b"file", FileKind::File, 0o644, 0, 0, None))
        .expect("not refused")
        .expect("create");
    control.hold(0);
    let fsync = |write: bool| {
        let volume = Arc::clone(&volume);
        let (done, finished) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let result = volume.change_then_flush("fsync", Some(inode), |fs| {
                if write {
                    fs.write(inode, 0, b"bytes")?;
                }
                fs.begin_fsync(inode).map(|flush| ((), flush))
            });
            let _ = done.send(());
            result
        });
        (thread, finished)
    };
    let (first, first_finished) = fsync(true);
    std::thread::sleep(Duration::from_millis(100));
    let (second, second_finished) = fsync(false);
    std::thread::sleep(Duration::from_millis(200));
    assert!(first_finished.try_recv().is_err(), "the first fsync returned before its flush");
    assert!(second_finished.try_recv().is_err(), "an fsync with nothing new returned before the flush before it");
    control.release(0);
    first.join().expect("first").expect("not refused").expect("fsync");
    second.join().expect("second").expect("not refused").expect("fsync");
}
