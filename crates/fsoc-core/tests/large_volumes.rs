//! Volumes beyond format version 1's limit (a metaroot naming every segment-table page held
//! at most 62,976 segments of 2 KiB pages): an 8 GiB one-chip MLC volume (65,536 segments, its
//! table named through an index page) and a 64 GiB one-chip volume of the 16 KiB-page
//! `mlc16k` profile format, mount with the page reads docs/DESIGN.md states, take files and
//! pass fsck. The RAM store is sparse, so only written pages cost memory.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::FlashStats;
use fsoc_media::Profile;

struct Expected {
    profile: Profile,
    blocks: u32,
    /// Mount after a clean unmount (DESIGN.md): 1 superblock + pages 0 and 1 of the 3 metaroot
    /// areas + log2(pages per segment) for the binary search + 1 for the newest record.
    mount_page_reads: u64,
    table_pages: u32,
    index_pages: u32,
}

fn format_fill_mount(expected: &Expected) {
    let label = format!("{} × {} blocks", expected.profile.name(), expected.blocks);
    let mut fs =
        FileSystem::format(sim(expected.profile, 1, expected.blocks, 8), FsConfig::default(), 8).expect("format");
    let shape = fs.committed().shape;
    assert_eq!(
        (shape.table_page_count, shape.index_page_count),
        (expected.table_pages, expected.index_pages),
        "{label}"
    );
    fs.mkdir(b"/a", 0o755).expect("mkdir");
    fs.mkdir(b"/a/b", 0o755).expect("mkdir");
    let files: Vec<(String, Vec<u8>)> = (0..24)
        .map(|index| {
            (
                format!("/a/{}f{index}", if index % 2 == 0 { "b/" } else { "" }),
                pattern(index * 9_000 + 100, index as u8),
            )
        })
        .collect();
    for (path, data) in &files {
        write_file(&mut fs, path, data).unwrap_or_else(|error| panic!("{label}: {path}: {error}"));
    }
    fs.transact().expect("delta commit");
    fs.unlink(b"/a/f1").expect("unlink");
    fs.commit().expect("full commit");
    assert_clean(&mut fs, &label);
    let space = fs.statfs().expect("statfs");
    assert!(space.free_blocks > space.total_blocks / 2, "{label}: {space:?}");

    let mut flash = fs.unmount().expect("unmount");
    flash.reset_counters();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert!(fs.mount_report().clean, "{label}");
    assert_eq!(fs.mount_report().page_reads, expected.mount_page_reads, "{label}: mount page reads");
    assert_eq!(
        fs.flash().counters().totals().reads,
        expected.mount_page_reads,
        "{label}: reads beyond the metaroot search"
    );
    // The table is read on first use: its index pages, then its table pages.
    fs.statfs().expect("statfs");
    let table_reads = fs.flash().counters().totals().reads - expected.mount_page_reads;
    assert_eq!(table_reads, u64::from(expected.table_pages + expected.index_pages), "{label}: table load");
    for (path, data) in files.iter().filter(|(path, _)| path != "/a/f1") {
        assert_eq!(&read_file(&mut fs, path).expect("read"), data, "{label}: {path}");
    }
    // An fsync'd small change is still one page program (a delta commit: the directory
    // leaves the metaroot page room for the payload).
    let fd = fs.open(b"/a/b/f0", fsoc_core::OpenFlags { write: true, ..Default::default() }, 0).expect("open");
    fs.transact().expect("settle");
    let programs_before = fs.flash().counters().totals().programs;
    fs.pwrite(fd, 3, b"small").expect("write");
    fs.fsync_fd(fd).expect("fsync");
    let fsync_programs = fs.flash().counters().totals().programs - programs_before;
    assert_eq!(fsync_programs, 1, "{label}: programs per small fsync");
    fs.close(fd).expect("close");
    write_file(&mut fs, "/after-mount", b"written after the remount").expect("write");
    fs.commit().expect("commit");
    assert_clean(&mut fs, &format!("{label}, remounted"));
    println!("{label}: mount {} page reads, table load {table_reads} page reads", expected.mount_page_reads);
}

/// 8 GiB on one MLC chip: 65,536 segments of 128 KiB, 256 table pages behind one index page.
#[test]
fn an_8_gib_one_chip_mlc_volume_formats_mounts_and_checks() {
    format_fill_mount(&Expected {
        profile: Profile::Mlc,
        blocks: 65_536,
        // The search's last programmed probe is the newest record (format version 11 on).
        mount_page_reads: 1 + 2 + 6 + 6,
        table_pages: 256,
        index_pages: 1,
    });
}

/// 64 GiB on one `mlc16k` chip: 16,384 segments of 4 MiB, 8 table pages named directly.
#[test]
fn a_64_gib_one_chip_mlc16k_volume_formats_mounts_and_checks() {
    format_fill_mount(&Expected {
        profile: Profile::Mlc16k,
        blocks: 16_384,
        mount_page_reads: 1 + 2 + 6 + 8,
        table_pages: 8,
        index_pages: 0,
    });
}
