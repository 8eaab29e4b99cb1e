//! The dirty-node budget holds inside one operation, not only between operations. Cleaning a
//! segment is one operation that updates the extent records of every file with a live page in
//! the victim; when those files are spread over the allocation tree, it dirties many leaves at
//! once. The tree keeps itself within `dirty_nodes_max` plus one update's worth by writing its
//! dirty nodes out as it goes (a flush, not a commit), and the volume stays intact.
mod common;

use common::*;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::Profile;

const BUDGET: usize = 4;
const FILE_COUNT: usize = 1000;

fn name(index: usize) -> String {
    format!("/f{index:04}")
}

#[test]
fn cleaning_that_touches_many_leaves_stays_within_the_dirty_budget() {
    let mut config = FsConfig::default();
    config.volume.dirty_nodes_max = BUDGET;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 48, 3), config, 3).expect("format");
    // Inodes in name order, data in a scattered order: each segment holds pages of files far
    // apart in the allocation tree (keyed by inode).
    for index in 0..FILE_COUNT {
        write_file(&mut fs, &name(index), b"").expect("create");
    }
    for step in 0..FILE_COUNT {
        let index = step * 7 % FILE_COUNT;
        write_file(&mut fs, &name(index), &pattern(3000, index as u8)).expect("write");
    }
    fs.transact().expect("commit");
    // Half of every segment dies, so cleaning has victims with live pages of many files.
    for index in (0..FILE_COUNT).step_by(2) {
        fs.unlink(name(index).as_bytes()).expect("unlink");
    }
    fs.transact().expect("commit");
    // Counters start at mount.
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, config).expect("mount");
    let mut written = 0;
    while fs.stats.cleaner_runs < 3 {
        assert!(written < 2000, "no cleaning after {written} files");
        write_file(&mut fs, &format!("/new{written}"), &pattern(3000, 1)).expect("write");
        written += 1;
    }
    let trees = fs.craft();
    let (counters, height) = (trees.allocation.counters(), usize::from(trees.allocation.height()));
    println!("{} cleaner runs with a budget of {BUDGET} dirty nodes: {counters:?}", fs.stats.cleaner_runs);
    assert!(counters.budget_flushes > 0, "the budget was never reached: {counters:?}");
    assert!(
        counters.dirty_nodes_peak as usize <= BUDGET + 2 * height + 1,
        "the allocation tree held {} dirty nodes (budget {BUDGET}, height {height})",
        counters.dirty_nodes_peak
    );
    assert_clean(&mut fs, "after cleaning");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, config).expect("remount");
    for index in (1..FILE_COUNT).step_by(2) {
        assert_eq!(read_file(&mut fs, &name(index)).expect("read"), pattern(3000, index as u8), "{}", name(index));
    }
    assert_clean(&mut fs, "after remount");
}
