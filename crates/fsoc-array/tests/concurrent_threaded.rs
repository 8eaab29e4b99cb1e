//! Parallel readers against a model on a threaded chip array: fsoc-core's concurrent model
//! check (one writer, reader threads checking every answer) over chip files, where reads are
//! served by the reading threads (from the chip files or the in-flight bytes), write barriers
//! are fences the workers keep, and each commit's flush finishes after the writer has released
//! the volume. `FSOC_CONCURRENT_SEED=N` replays one seed's writer.

#[path = "../../fsoc-core/tests/common/concurrent_model.rs"]
mod concurrent_model;

use fsoc_array::ThreadedFlash;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{Profile, SimConfig};

#[test]
fn readers_agree_with_the_model_on_chip_files_while_one_writer_changes_the_volume() {
    let seeds: Vec<u64> = match std::env::var("FSOC_CONCURRENT_SEED") {
        Ok(seed) => vec![seed.parse().expect("FSOC_CONCURRENT_SEED is a number")],
        Err(_) => vec![11, 12],
    };
    for seed in seeds {
        let directory = tempfile::tempdir().expect("tempdir");
        let base = directory.path().join("array");
        let flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Mlc, 4, 64, seed)).expect("create");
        let fs = FileSystem::format(flash, FsConfig::default(), seed).expect("format");
        let (fs, _compared) = concurrent_model::run(fs, seed, 1500, 3);
        // What the chip files hold after a clean unmount is the same volume, fsck-clean.
        fs.unmount().expect("unmount").close().expect("close the chip files");
        let mut fs =
            FileSystem::mount(ThreadedFlash::open(&base).expect("reopen"), FsConfig::default()).expect("mount");
        let report = fs.fsck(false).expect("fsck runs");
        assert!(report.is_clean(), "seed {seed}: after reopening: {:?}", report.violations);
    }
}
