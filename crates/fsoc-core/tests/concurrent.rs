//! Parallel readers against a model on the RAM simulator (the check itself is in
//! `common/concurrent_model.rs`, shared with fsoc-array's threaded variant).
//!
//! The seed is printed on failure (`FSOC_CONCURRENT_SEED=N` replays the writer's operations;
//! the interleaving with the readers is the threads' own).
mod common;

use std::sync::Barrier;

use common::concurrent_model;
use common::*;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::Profile;

const ROOT: u64 = 1;

#[test]
fn readers_agree_with_the_model_while_one_writer_changes_the_volume() {
    let seeds: Vec<u64> = match std::env::var("FSOC_CONCURRENT_SEED") {
        Ok(seed) => vec![seed.parse().expect("FSOC_CONCURRENT_SEED is a number")],
        Err(_) => vec![1, 2, 3],
    };
    for seed in seeds {
        let fs = FileSystem::format(sim(Profile::Mlc, 2, 256, seed), FsConfig::default(), seed).expect("format");
        concurrent_model::run(fs, seed, 1500, 3);
    }
}

/// Two threads read through one `&FileSystem` with no lock of their own (it is `Sync`): they
/// start together (the barrier) and race through lookups and reads that share the node cache
/// and the flash, on a volume whose trees have several levels; every answer is checked.
#[test]
fn two_readers_run_inside_the_file_system_at_once() {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 2, 256, 9), FsConfig::default(), 9).expect("format");
    for index in 0..300 {
        write_file(&mut fs, &format!("/file{index:04}"), &pattern(3000, index as u8)).expect("write");
    }
    fs.commit_for_sync().expect("commit");
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        for reader in 0..2u8 {
            let (fs, barrier) = (&fs, &barrier);
            scope.spawn(move || {
                for index in (usize::from(reader)..300).step_by(2) {
                    let name = format!("file{index:04}");
                    let (inode, _) = fs.lookup(ROOT, name.as_bytes()).expect("lookup");
                    if index < 2 {
                        barrier.wait();
                    }
                    assert_eq!(fs.read(inode, 0, 4096).expect("read"), pattern(3000, index as u8), "{name}");
                }
            });
        }
    });
}
