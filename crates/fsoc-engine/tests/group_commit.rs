//! Group commit: fsyncs that arrive together share one flash program. The first to get the
//! volume commits every change made so far (one delta page); the others find nothing new and
//! only wait for that commit's flush. Issue 18, point 5.

use std::sync::{Arc, Barrier};

use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_engine::SharedVolume;
use fsoc_media::{FlashStats, Profile, RamStore, SimConfig, SimFlash};

type Volume = SharedVolume<FileSystem<SimFlash<RamStore>>>;

const WRITERS: usize = 6;

fn volume_with_files() -> (Arc<Volume>, Vec<u64>) {
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 128, 5)).expect("flash");
    let fs = FileSystem::format(flash, FsConfig::default(), 5).expect("format");
    let volume = Arc::new(SharedVolume::new(fs));
    let inodes = (0..WRITERS)
        .map(|index| {
            let name = format!("file{index}");
            volume
                .change("create", None, |fs| fs.create(1, name.as_bytes(), FileKind::File, 0o644, 0, 0, None))
                .expect("not refused")
                .expect("create")
        })
        .collect();
    volume.change("commit", None, |fs| fs.commit()).expect("not refused").expect("commit");
    (volume, inodes)
}

fn programs(volume: &Volume) -> u64 {
    volume
        .read("count", None, |fs| Ok::<u64, ()>(fs.flash().counters().totals().programs))
        .expect("read")
        .expect("count")
}

fn write_and_fsync(volume: &Volume, inode: u64, barrier: Option<&Barrier>) {
    volume
        .change("write", Some(inode), |fs| fs.write(inode, 0, b"512 bytes or so"))
        .expect("not refused")
        .expect("write");
    if let Some(barrier) = barrier {
        // Every writer's change is made before any fsync starts.
        barrier.wait();
    }
    volume
        .change_then_flush("fsync", Some(inode), |fs| fs.begin_fsync(inode).map(|flush| ((), flush)))
        .expect("not refused")
        .expect("fsync");
}

#[test]
fn concurrent_fsyncs_share_one_program_and_sequential_ones_do_not() {
    let (volume, inodes) = volume_with_files();
    let before = programs(&volume);
    for &inode in &inodes {
        write_and_fsync(&volume, inode, None);
    }
    let sequential = programs(&volume) - before;
    assert_eq!(sequential, WRITERS as u64, "one delta page per fsync when each has a change of its own");

    let (volume, inodes) = volume_with_files();
    let before = programs(&volume);
    let barrier = Arc::new(Barrier::new(WRITERS));
    let threads: Vec<_> = inodes
        .into_iter()
        .map(|inode| {
            let (volume, barrier) = (Arc::clone(&volume), Arc::clone(&barrier));
            std::thread::spawn(move || write_and_fsync(&volume, inode, Some(&barrier)))
        })
        .collect();
    for thread in threads {
        thread.join().expect("writer");
    }
    let grouped = programs(&volume) - before;
    assert_eq!(grouped, 1, "{WRITERS} fsyncs arriving together: one commit covers them all");

    // And every write is durable: a power cut now (no unmount commit) keeps them.
    let volume = Arc::into_inner(volume).expect("one owner");
    let (fs, failure) = volume.into_inner();
    assert_eq!(failure, None);
    let fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("mount");
    for index in 0..WRITERS {
        let (inode, _) = fs.lookup(1, format!("file{index}").as_bytes()).expect("the file");
        assert_eq!(fs.read(inode, 0, 64).expect("read"), b"512 bytes or so");
    }
}
