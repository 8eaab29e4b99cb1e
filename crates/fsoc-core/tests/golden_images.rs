//! Every build must read the golden images in tests/fixtures (docs/FORMAT.md; how they were made:
//! tests/fixtures/README.md). Each image holds the same files, written by
//! `examples/golden_image.rs` in the format of its version: a full commit, then changes made
//! durable by a delta commit, and no unmount (mount replays the delta and re-anchors).
mod common;
use common::*;
use fsoc_core::fs::{FileKind, FsError};
use fsoc_core::txn::TxnError;
use fsoc_core::{FileSystem, FsConfig, VolumeConfig};
use fsoc_media::image::ImageStore;
use fsoc_media::SimFlash;

fn pattern() -> Vec<u8> {
    (0..40_000u32).map(|index| (index.wrapping_mul(31) % 251) as u8).collect()
}

fn names(fs: &mut FileSystem<SimFlash<ImageStore>>, path: &str) -> Vec<(String, FileKind)> {
    let entries = fs.readdir_path(path.as_bytes()).unwrap_or_else(|error| panic!("readdir {path}: {error}"));
    entries.into_iter().map(|entry| (String::from_utf8(entry.name).expect("utf-8 name"), entry.kind)).collect()
}

/// The files the generator wrote, as the newest (delta) commit left them.
fn check_contents(fs: &mut FileSystem<SimFlash<ImageStore>>, context: &str) {
    use FileKind::{Directory, File, Symlink};
    let owned =
        |list: &[(&str, FileKind)]| list.iter().map(|&(name, kind)| (name.to_string(), kind)).collect::<Vec<_>>();
    assert_eq!(
        names(fs, "/"),
        owned(&[
            ("data", Directory),
            ("docs", Directory),
            ("hello.txt", File),
            ("late", Directory),
            ("readme-link", Symlink)
        ]),
        "{context}: root listing"
    );
    assert_eq!(names(fs, "/docs"), owned(&[("notes", Directory)]), "{context}: /docs");
    assert_eq!(names(fs, "/docs/notes"), owned(&[("after-full-commit.txt", File)]), "{context}: /docs/notes");
    assert_eq!(names(fs, "/data"), owned(&[("pattern.bin", File)]), "{context}: /data");
    assert_eq!(read_file(fs, "/hello.txt").expect("hello"), b"hello again, changed by a delta commit\n", "{context}");
    assert_eq!(
        read_file(fs, "/docs/notes/after-full-commit.txt").expect("note"),
        b"written after the full commit\n",
        "{context}"
    );
    assert_eq!(read_file(fs, "/data/pattern.bin").expect("pattern"), pattern(), "{context}: /data/pattern.bin");
    assert_eq!(fs.readlink_path(b"/readme-link").expect("readlink"), b"docs/readme.md", "{context}");
}

/// Reads a golden image read-only, then writable (a change, an unmount, a remount), checking
/// the files and fsck each time. Returns the remounted volume.
/// The volume keeps its format version: this build writes an older volume in that version's
/// format, so the build that made it still reads it.
fn check_golden(packed: &[u8], label: &str, format_version: u32) -> FileSystem<SimFlash<ImageStore>> {
    check_golden_with_nvram(packed, None, label, format_version)
}

/// Mounts the image at `path` with its NVRAM file beside it, if there is one (as the CLI does).
fn mount_image(path: &std::path::Path, config: FsConfig) -> Result<FileSystem<SimFlash<ImageStore>>, FsError> {
    let nvram = fsoc_media::nvram::open_sidecar(path)
        .expect("NVRAM file")
        .map(|nvram| Box::new(nvram) as Box<dyn fsoc_media::NvramDevice>);
    FileSystem::mount_with_nvram(SimFlash::open_image(path).expect("open image"), nvram, config)
}

fn read_only() -> FsConfig {
    FsConfig { volume: VolumeConfig { read_only: true, ..VolumeConfig::default() }, ..FsConfig::default() }
}

/// Unpacks a golden image into a temporary directory (kept as long as the returned handle)
/// and mounts it read-only, as it was written.
fn mount_read_only(packed: &[u8], label: &str) -> (tempfile::TempDir, FileSystem<SimFlash<ImageStore>>) {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join(format!("{label}.img"));
    unpack_sparse(packed, &path);
    let fs = mount_image(&path, read_only()).expect("read-only mount");
    (directory, fs)
}

/// `check_golden_with_nvram` of an image whose changes after the full commit are one record
/// in 4 KiB of MRAM (`--nvram`): that record's time on `/late/1969.txt` is what mount finds.
fn check_golden_nvram_record(
    packed: &[u8],
    nvram: &[u8],
    label: &str,
    format_version: u32,
) -> FileSystem<SimFlash<ImageStore>> {
    let fs = check_golden_with_nvram(packed, Some(nvram), label, format_version);
    assert_eq!(fs.nvram_info(), Some((4096, 2)), "{label}: 4 KiB of MRAM");
    let old = fs.stat(b"/late/1969.txt").expect("stat").1;
    assert_eq!(old.mtime_ns, -1_500_000_000, "{label}: from the NVRAM record");
    fs
}

/// `check_golden` of a volume whose NVRAM holds `nvram` (its raw bytes), as `IMAGE.nvram`.
fn check_golden_with_nvram(
    packed: &[u8],
    nvram: Option<&[u8]>,
    label: &str,
    format_version: u32,
) -> FileSystem<SimFlash<ImageStore>> {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join(format!("{label}.img"));
    unpack_sparse(packed, &path);
    if let Some(bytes) = nvram {
        std::fs::write(fsoc_media::nvram::sidecar_path(&path), bytes).expect("write the NVRAM file");
    }
    let mut fs = mount_image(&path, read_only()).expect("read-only mount");
    assert!(!fs.mount_report().clean, "{label}: the generator did not unmount");
    assert_eq!(fs.superblock().format_version, format_version, "{label}");
    check_contents(&mut fs, &format!("{label}, read-only"));
    assert_clean(&mut fs, &format!("{label}, read-only"));
    drop(fs);

    let mut fs = mount_image(&path, FsConfig::default()).expect("mount");
    check_contents(&mut fs, &format!("{label}, writable"));
    write_file(&mut fs, "/late/new.txt", b"written by this build").expect("write");
    // A file in extents too, so their records are written in this volume's version (fsck
    // refuses data checksums on a volume older than version 3, and their absence on one of 3).
    write_file(&mut fs, "/late/pages.bin", &pattern()[..9000]).expect("write pages");
    // A last page of 52 bytes: a short page from version 13 on, a data page before (fsck
    // refuses a short page on an older volume).
    write_file(&mut fs, "/late/tail.bin", &pattern()[..2100]).expect("write a short tail");
    assert_clean(&mut fs, &format!("{label}, after a write"));
    fs.unmount().expect("unmount");
    let mut fs = mount_image(&path, FsConfig::default()).expect("remount");
    assert!(fs.mount_report().clean, "{label}: remount after a clean unmount");
    check_contents(&mut fs, &format!("{label}, remounted"));
    assert_eq!(read_file(&mut fs, "/late/new.txt").expect("new file"), b"written by this build");
    assert_eq!(read_file(&mut fs, "/late/pages.bin").expect("new file in pages"), pattern()[..9000]);
    assert_eq!(read_file(&mut fs, "/late/tail.bin").expect("new file with a tail"), pattern()[..2100]);
    let tail_pages = fs.stat(b"/late/tail.bin").expect("stat").1.pages;
    if format_version >= 5 {
        // Two data pages before version 13; a data page and a short page (counted) from it on.
        assert_eq!(tail_pages, 2, "{label}: pages of /late/tail.bin");
    }
    assert_clean(&mut fs, &format!("{label}, remounted"));
    assert_eq!(fs.superblock().format_version, format_version, "{label}: the version changed");
    assert_eq!(fs.committed().shape.format_version, format_version, "{label}: metaroots of another version");
    fs
}

/// Format version 1, written by the code before the indexed segment table (commit noted in
/// tests/fixtures/README.md).
#[test]
fn golden_image_of_format_version_1_reads_back() {
    check_golden(include_bytes!("fixtures/golden-v1.sparse"), "golden-v1", 1);
}

/// Format version 2, the small volume: its segment table is named directly, as in version 1.
#[test]
fn golden_image_of_format_version_2_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v2.sparse"), "golden-v2", 2);
    assert!(!fs.committed().shape.is_indexed());
}

/// Format version 2, a 2 GiB volume (16,384 segments, 64 table pages): the metaroot names one
/// index page, which names the table pages.
#[test]
fn golden_image_of_format_version_2_with_an_indexed_table_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v2-indexed.sparse"), "golden-v2-indexed", 2);
    let shape = fs.committed().shape;
    assert_eq!((shape.table_page_count, shape.table_index_levels, shape.index_page_count), (64, 1, 1));
}

/// Format version 3: extent records carry a CRC-32C of each data page (tests/data_checksums.rs
/// shows what they catch); inode records carry attribute flags and inode 0 a label record.
#[test]
fn golden_image_of_format_version_3_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v3.sparse"), "golden-v3", 3);
    assert!(!fs.committed().shape.is_indexed());
    assert_eq!(fs.label().expect("label"), b"golden");
    let pattern = fs.stat(b"/data/pattern.bin").expect("stat").0;
    let flags = fsoc_core::fs::attributes::FS_APPEND_FL | fsoc_core::fs::attributes::FS_NODUMP_FL;
    assert_eq!(fs.inode_flags(pattern).expect("flags"), flags);
}

/// Format version 4: extended attributes (allocation record kind 6), one set after the full
/// commit (replayed from the delta).
#[test]
fn golden_image_of_format_version_4_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v4.sparse"), "golden-v4", 4);
    assert_eq!(fs.label().expect("label"), b"golden");
    let inode = |path: &str| fs.stat(path.as_bytes()).expect("stat").0;
    assert_eq!(fs.get_xattr(inode("/hello.txt"), b"user.golden").expect("xattr"), b"yes");
    assert_eq!(fs.get_xattr(inode("/data/pattern.bin"), b"trusted.long").expect("xattr"), vec![0x5a; 5000]);
    assert_eq!(fs.get_xattr(inode("/docs/notes"), b"security.delta").expect("xattr"), b"after the full commit");
}

/// Format version 5: 80-byte inode records with signed times (one before 1970), a birth time
/// and the count of mapped data pages, written after the full commit (replayed from the
/// delta).
#[test]
fn golden_image_of_format_version_5_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v5.sparse"), "golden-v5", 5);
    let old = fs.stat(b"/late/1969.txt").expect("stat").1;
    assert_eq!((old.atime_ns, old.mtime_ns), (-86_400_000_000_000, -1_500_000_000));
    assert_eq!(old.btime_ns, 1_700_000_001_000_000_000, "made at the delta's time");
    let sparse = fs.stat(b"/late/sparse.bin").expect("stat").1;
    assert_eq!((sparse.size, sparse.pages), (200_019, 1));
    let pattern = fs.stat(b"/data/pattern.bin").expect("stat").1;
    assert_eq!(pattern.pages, 20, "40,000 bytes in 2 KiB pages");
    assert_eq!(pattern.btime_ns, 1_700_000_000_000_000_000);
    assert!(pattern.generation > 0 && pattern.generation == old.generation, "one mount made both");
    assert_eq!(fs.stat(b"/").expect("stat").1.generation, 0, "the root");
}

/// Format version 6 without NVRAM: the same as version 5 on flash (both NVRAM fields 0).
#[test]
fn golden_image_of_format_version_6_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v6.sparse"), "golden-v6", 6);
    assert_eq!((fs.superblock().nvram_bytes, fs.committed().nvram_lag), (0, 0));
    assert!(fs.nvram_info().is_none());
}

/// Format version 6 with 4 KiB of NVRAM: the changes after the full commit are one record in
/// the NVRAM log (replayed at mount); without its NVRAM the volume is refused by name.
#[test]
fn golden_image_of_format_version_6_with_nvram_reads_back() {
    let packed = include_bytes!("fixtures/golden-v6-nvram.sparse");
    let nvram = include_bytes!("fixtures/golden-v6-nvram.nvram");
    let fs = check_golden_nvram_record(packed, nvram, "golden-v6-nvram", 6);
    drop(fs);
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("without-nvram.img");
    unpack_sparse(packed, &path);
    match FileSystem::mount(SimFlash::open_image(&path).expect("open image"), FsConfig::default()) {
        Err(FsError::Io(TxnError::Nvram { .. })) => {}
        other => panic!("mounted without its NVRAM: {:?}", other.map(|_| ())),
    }
}

/// The golden image `packed`, unpacked into a temporary directory (returned: the image lives as
/// long as it), mounted with chip `chip` failed: degraded, that chip named missing.
fn mount_without_chip(packed: &[u8], chip: u32) -> (FileSystem<SimFlash<ImageStore>>, tempfile::TempDir) {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("degraded.img");
    unpack_sparse(packed, &path);
    let mut flash = SimFlash::open_image(&path).expect("open image");
    flash.fail_chip(fsoc_media::ChipIndex(chip)).expect("fail chip");
    let fs = FileSystem::mount(flash, FsConfig::default()).expect("degraded mount");
    assert_eq!(fs.missing_chip(), Some(chip));
    (fs, directory)
}

/// Format version 7 without redundancy: version 6 plus the superblock's extension.
#[test]
fn golden_image_of_format_version_7_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v7.sparse"), "golden-v7", 7);
    assert_eq!(fs.superblock().redundancy, fsoc_core::segment::Redundancy::None);
}

/// Format version 7 with parity on three chips: it reads back whole, and also with any one
/// chip failed (degraded, read-only, every page rebuilt from the others).
#[test]
fn golden_image_of_format_version_7_with_parity_reads_back_without_any_one_chip() {
    let packed = include_bytes!("fixtures/golden-v7-parity.sparse");
    let fs = check_golden(packed, "golden-v7-parity", 7);
    assert_eq!(fs.superblock().redundancy, fsoc_core::segment::Redundancy::Parity);
    drop(fs);
    for chip in 0..3 {
        let (mut fs, _directory) = mount_without_chip(packed, chip);
        check_contents(&mut fs, &format!("golden-v7-parity without chip {chip}"));
        assert_clean(&mut fs, &format!("golden-v7-parity without chip {chip}"));
    }
}

/// Format version 8 without redundancy: version 7 but for the version number.
#[test]
fn golden_image_of_format_version_8_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v8.sparse"), "golden-v8", 8);
    assert_eq!(fs.superblock().redundancy, fsoc_core::segment::Redundancy::None);
}

/// Format version 9: the superblock's second home (segment 4) is retired from format on, and a
/// volume never rewritten holds generation 0.
#[test]
fn golden_image_of_format_version_9_reads_back() {
    let mut fs = check_golden(include_bytes!("fixtures/golden-v9.sparse"), "golden-v9", 9);
    assert_eq!(fs.superblock().generation, 0);
    fs.statfs().expect("statfs");
    let table = fs.segment_table().expect("loaded");
    assert!(table.has_second_home() && table.entry(4).retired, "segment 4 is the second home");
}

/// Format version 9 with generations 1 to 31 in block 0 and 32 and 33 in the second home
/// (block 4): mount takes 33, the newest, from the second home; after a write, an unmount and a
/// remount it still does (or a newer one).
#[test]
fn golden_image_of_format_version_9_with_generations_in_the_second_home_reads_back() {
    let fs = check_golden(include_bytes!("fixtures/golden-v9-homes.sparse"), "golden-v9-homes", 9);
    assert!(fs.superblock().generation >= 33, "generation {}", fs.superblock().generation);
    assert_eq!(fs.superblock().generation_place(33), Some((4, 2)), "33 is on pages 2 and 3 of block 4");
}

/// Format version 10: the largest file is ext4's, 16 TiB - 4 KiB, on 2 KiB pages too; the
/// generator's `/late/huge.bin` has a page at 12 TiB (page 6 * 2^30, past 2^32: its spare tag
/// carries bit 32 in byte 3) and ends at the largest file's end. A version-9 volume keeps its
/// own limit, 2^32 - 1 pages (8 TiB - 2 KiB), so a build of version 9 still reads it.
#[test]
fn golden_image_of_format_version_10_reads_back_a_file_as_large_as_ext4s() {
    use fsoc_core::fs::EXT4_FILE_BYTES_MAX;
    let mut fs = check_golden(include_bytes!("fixtures/golden-v10.sparse"), "golden-v10", 10);
    assert_eq!(fs.file_bytes_max(), EXT4_FILE_BYTES_MAX);
    let (inode, huge) = fs.stat(b"/late/huge.bin").expect("stat");
    assert_eq!((huge.size, huge.pages), (EXT4_FILE_BYTES_MAX, 2));
    assert_eq!(fs.read(inode, 12 << 40, 18).expect("read"), b"one page at 12 TiB");
    assert_eq!(fs.read(inode, EXT4_FILE_BYTES_MAX - 24, 100).expect("read"), b"ending at 16 TiB - 4 KiB");
    assert_eq!(fs.read(inode, 1 << 40, 4).expect("read a hole"), [0; 4]);
    assert_eq!(fs.write(inode, EXT4_FILE_BYTES_MAX, b"x"), Err(FsError::FileTooBig));
    assert_eq!(fs.truncate(inode, EXT4_FILE_BYTES_MAX + 1), Err(FsError::FileTooBig));
    fs.truncate(inode, 12 << 40).expect("truncate below the page at 12 TiB");
    assert_eq!(fs.stat(b"/late/huge.bin").expect("stat").1.pages, 0);
    assert_clean(&mut fs, "golden-v10 truncated");

    let mut fs = check_golden(include_bytes!("fixtures/golden-v9.sparse"), "golden-v9-largest-file", 9);
    assert_eq!(fs.file_bytes_max(), u64::from(u32::MAX) * 2048, "version 9 keeps 8 TiB - 2 KiB");
    let (inode, _) = fs.stat(b"/late/sparse.bin").expect("stat");
    assert_eq!(fs.write(inode, 12 << 40, b"x"), Err(FsError::FileTooBig));
}

/// Format version 11: delta payloads in the compact encoding (docs/FORMAT.md, "Compact delta
/// payload"). The generator's newest commit is a delta commit whose payload decodes as compact
/// and not as plain, to changes whose plain encoding takes more than twice its bytes; the image
/// reads back, takes writes and stays clean as every golden image does.
#[test]
fn golden_image_of_format_version_11_with_a_compact_delta_reads_back() {
    use fsoc_core::fs::delta::DeltaLog;
    let packed = include_bytes!("fixtures/golden-v11.sparse");
    check_golden(packed, "golden-v11", 11);
    let (_directory, fs) = mount_read_only(packed, "golden-v11-payload");
    let payload = fs.committed().delta.clone();
    let decoded = fsoc_core::fs::delta_compact::decode(&payload).expect("the payload is compact");
    assert!(DeltaLog::decode(&payload).is_err(), "a compact payload must not pass for a plain one");
    let mut plain = DeltaLog::new(1 << 20);
    plain.record_decoded(&decoded);
    let plain_bytes = plain.encode().len();
    println!(
        "golden-v11 delta: {} entries, compact {} bytes, plain {plain_bytes}",
        decoded.entries.len(),
        payload.len()
    );
    assert!(payload.len() * 2 < plain_bytes, "compact {} bytes against plain {plain_bytes}", payload.len());
}

/// Format version 12 on MLC: as version 11 (paired pages: no chained records).
#[test]
fn golden_image_of_format_version_12_reads_back() {
    let packed = include_bytes!("fixtures/golden-v12.sparse");
    check_golden(packed, "golden-v12", 12);
}

/// Format version 12 on SLC: the newest commit is a chained delta commit (docs/FORMAT.md,
/// "Chained delta commits"), which mount replays after its base; the files the chain holds
/// read back.
#[test]
fn golden_image_of_format_version_12_with_a_chained_delta_reads_back() {
    let packed = include_bytes!("fixtures/golden-v12-chained.sparse");
    let (directory, mut fs) = mount_read_only(packed, "golden-v12-chained-read-only");
    let link = fs.committed().chain.expect("the newest commit is chained");
    assert!(link.commit_counter < fs.committed().commit_counter, "{link:?}");
    let chained = names(&mut fs, "/late/chain");
    assert!(chained.len() >= 2, "{chained:?}");
    for (index, (name, _)) in chained.iter().enumerate() {
        assert_eq!(name, &format!("f{index:03}"));
        // As examples/golden_image.rs `chained_file` writes it.
        let expected: Vec<u8> =
            (0..300u32).map(|offset| (offset.wrapping_mul(7) ^ (index as u32).wrapping_mul(13)) as u8).collect();
        assert_eq!(read_file(&mut fs, &format!("/late/chain/{name}")).expect("read"), expected, "{name}");
    }
    drop((fs, directory));
    check_golden(packed, "golden-v12-chained", 12);
}

/// Format version 13: short pages. `/late/tail.bin` (2,100 bytes) is one data page and 52
/// bytes in the tree, and `/late/huge.bin`'s page at 12 TiB (18 bytes) is all in the tree.
#[test]
fn golden_image_of_format_version_13_reads_back() {
    let packed = include_bytes!("fixtures/golden-v13.sparse");
    let (directory, mut fs) = mount_read_only(packed, "golden-v13-read-only");
    assert_eq!(read_file(&mut fs, "/late/tail.bin").expect("read"), pattern()[..2100]);
    assert_eq!(fs.stat(b"/late/tail.bin").expect("stat").1.pages, 2, "a data page and a short page");
    // Its page at 12 TiB holds 18 bytes from the page's start: a short page. (Its last page
    // ends in 24 bytes at the page's end: a data page.)
    let (huge, record) = fs.stat(b"/late/huge.bin").expect("stat");
    assert_eq!(record.pages, 2, "one data page and one short page");
    assert_eq!(fs.read(huge, 12 << 40, 18).expect("read"), b"one page at 12 TiB");
    drop((fs, directory));
    check_golden(packed, "golden-v13", 13);
}

/// Format version 11 with NVRAM: the records after the full commit keep the plain encoding.
#[test]
fn golden_image_of_format_version_11_with_nvram_reads_back() {
    let packed = include_bytes!("fixtures/golden-v11-nvram.sparse");
    let nvram = include_bytes!("fixtures/golden-v11-nvram.nvram");
    check_golden_nvram_record(packed, nvram, "golden-v11-nvram", 11);
}

/// Format version 8 with mirror-meta on three chips: it reads back whole, and with any one chip
/// failed every name is still listed, the metadata is clean, and each file reads back exactly
/// or answers EIO.
#[test]
fn golden_image_of_format_version_8_with_mirror_meta_lists_every_name_without_any_one_chip() {
    let packed = include_bytes!("fixtures/golden-v8-mirror-meta.sparse");
    let fs = check_golden(packed, "golden-v8-mirror-meta", 8);
    assert_eq!(fs.superblock().redundancy, fsoc_core::segment::Redundancy::MirrorMeta);
    drop(fs);
    for chip in 0..3 {
        let context = format!("golden-v8-mirror-meta without chip {chip}");
        let (mut fs, _directory) = mount_without_chip(packed, chip);
        for (directory, count) in [("/", 5), ("/docs", 1), ("/docs/notes", 1), ("/data", 1)] {
            assert_eq!(names(&mut fs, directory).len(), count, "{context}: {directory}");
        }
        let expected: [(&str, Vec<u8>); 3] = [
            ("/hello.txt", b"hello again, changed by a delta commit\n".to_vec()),
            ("/docs/notes/after-full-commit.txt", b"written after the full commit\n".to_vec()),
            ("/data/pattern.bin", pattern()),
        ];
        for (path, contents) in expected {
            match read_file(&mut fs, path) {
                Ok(read) => assert!(read == contents, "{context}: {path} reads other bytes"),
                Err(error) => assert_eq!(error.errno(), 5, "{context}: {path}: {error}"),
            }
        }
        assert_eq!(fs.readlink_path(b"/readme-link").expect("readlink"), b"docs/readme.md", "{context}");
        assert_clean(&mut fs, &context);
    }
}

/// Volumes older than format version 5 count no pages and keep no birth time: st_blocks is the
/// size in whole pages, the birth time 0 (unknown).
#[test]
fn older_volumes_report_the_size_in_pages_and_no_birth_time() {
    let fs = check_golden(include_bytes!("fixtures/golden-v4.sparse"), "golden-v4-blocks", 4);
    let pattern = fs.stat(b"/data/pattern.bin").expect("stat").1;
    assert_eq!((pattern.pages, pattern.btime_ns), (20, 0));
}

/// A volume of a format version this build does not know (the golden image's superblocks
/// rewritten as the next version, with valid checksums) is refused by name, read-only or not:
/// a typed error stating both versions, not a panic and not "corrupt".
#[test]
fn a_newer_format_version_is_refused_by_name() {
    use fsoc_core::txn::superblock::FORMAT_VERSION;
    use fsoc_core::txn::{Superblock, TxnError};
    use fsoc_core::FsError;
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("future.img");
    unpack_sparse(include_bytes!("fixtures/golden-v1.sparse"), &path);
    let mut image = std::fs::read(&path).expect("read image");
    // Image header (docs/FORMAT.md, "Image file"): data_offset at 72; a page slot holds data
    // then spare. Superblock copies are pages 0 and 1 of block 0 of the one chip.
    let data_offset = u64::from_le_bytes(image[72..80].try_into().expect("8 bytes")) as usize;
    let (page_bytes, spare_bytes) = (2048, 64);
    for page in 0..2 {
        let slot = data_offset + page * (page_bytes + spare_bytes);
        let mut superblock = Superblock::decode(&image[slot..slot + page_bytes]).expect("golden superblock");
        superblock.format_version = FORMAT_VERSION + 1;
        image[slot..slot + page_bytes].copy_from_slice(&superblock.encode(page_bytes));
    }
    std::fs::write(&path, image).expect("write image");
    for read_only in [true, false] {
        let config = FsConfig { volume: VolumeConfig { read_only, ..VolumeConfig::default() }, ..FsConfig::default() };
        let error = FileSystem::mount(SimFlash::open_image(&path).expect("open image"), config).err().expect("refused");
        assert_eq!(
            error,
            FsError::Io(TxnError::UnsupportedVersion { found: FORMAT_VERSION + 1, oldest: 1, newest: FORMAT_VERSION })
        );
        assert_eq!(
            error.to_string(),
            format!(
                "I/O error: the volume has format version {}; this build reads format versions 1 to {FORMAT_VERSION}",
                FORMAT_VERSION + 1
            )
        );
    }
}
