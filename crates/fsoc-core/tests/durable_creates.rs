//! The cost of a durable small-file create (issue 17: programs per fsync'd create, against
//! UBIFS's 2.62 on the kernel's nandsim): 1,000 files of 100 B–4 KiB of random bytes, each
//! created, written and fsync'd, on one SLC chip of 2 KiB pages (the K9F2G08 geometry of
//! `fsoc bench mtd`, 256 MiB). Deterministic counts: with format version 11's compact delta
//! payloads a metaroot page holds the changes of about 22 such creates (9 with the plain
//! payload), so full commits come 2.4 times less often; appends that split full B+tree nodes
//! and an area erase count that waits for the area's last record make them fewer and smaller,
//! and chained delta commits (format version 12, SLC) let twice the changes wait between them
//! (docs/DESIGN.md, "Delta commits"). Short pages (format version 13) keep a file's last page
//! in the tree when its bytes fit an entry, so one file in eight programs a page fewer.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{FlashStats, Profile};

#[test]
fn a_thousand_fsynced_small_creates_program_under_three_pages_each() {
    let mut fs = FileSystem::format(sim(Profile::Slc, 1, 2048, 3), FsConfig::default(), 3).expect("format");
    fs.mkdir(b"/small", 0o755).expect("mkdir");
    fs.transact().expect("commit");
    let mut state = 0x5a11u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let before = fs.flash().counters().totals();
    let (commits, delta_commits) = (fs.stats.commits, fs.stats.delta_commits);
    let mut data_pages = 0u64;
    for index in 0..1000i64 {
        let size = 100 + (next() % 3997) as usize;
        // Times as a mount gives them: a create, then its write a few milliseconds later.
        fs.now_ns = 1_764_000_000_000_000_000 + index * 21_000_000 + (next() % 1_000_000) as i64;
        let data: Vec<u8> = (0..size).map(|_| next() as u8).collect();
        let fd = fs.open(format!("/small/f{index:04}").as_bytes(), CREATE, 0o644).expect("create");
        fs.now_ns += 3_000_000 + (next() % 1_000_000) as i64;
        fs.write_fd(fd, &data).expect("write");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
        if size > fs.inline_bytes_max() {
            // Whole pages, and the last, partial page unless it is short enough to stay in
            // the tree (a short page, format version 13).
            let tail = size % 2048;
            data_pages += (size / 2048) as u64 + u64::from(tail > fs.inline_bytes_max());
        }
    }
    let programs = fs.flash().counters().totals().programs - before.programs;
    let full_commits = fs.stats.commits - commits;
    let delta_commits = fs.stats.delta_commits - delta_commits;
    println!(
        "1,000 durable creates: {programs} page programs ({data_pages} data), {full_commits} full commits, \
         {delta_commits} delta commits"
    );
    assert_eq!(full_commits + delta_commits, 1000, "one transaction point per fsync");
    // Plain payloads (format version 10): 110 full commits and 3,333 programs on this run;
    // compact ones: 45 and 2,916; with appends splitting full nodes and the area erase count
    // stored at the area's last record: 36 and 2,758 (2,860 with even splits); with chained
    // delta commits: 20 and 2,660; with short pages (format version 13: 139 files' last pages
    // kept in the tree, whose bytes fill the delta payloads faster): 32 and 2,615.
    assert!(full_commits <= 34, "{full_commits} full commits");
    assert!(programs <= 2625, "{programs} programs");
    let fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("mount after a cut");
    assert_eq!(fs.readdir_path(b"/small").map(|names| names.len()).ok(), Some(1000), "every create durable");
}
