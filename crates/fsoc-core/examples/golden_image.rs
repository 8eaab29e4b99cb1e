//! Writes a golden image: a small volume in the current on-disk format holding a few files and
//! directories, whose newest metaroot is a delta commit on top of a full commit (the volume was
//! not unmounted, as after a power cut that followed an fsync). Tests in
//! `tests/golden_images.rs` read every golden image back with the current code.
//!
//! `cargo run --release -p fsoc-core --example golden_image -- OUT.sparse [BLOCKS] [--nvram] [--parity | --mirror-meta]`
//!
//! BLOCKS (default 16, a 2 MiB volume) sets the erase blocks of the one MLC chip; 16384 makes
//! a 2 GiB volume whose segment table is indexed (format version 2). `--nvram` (format version
//! 6 on) formats with 4 KiB of NVRAM, so the changes after the full commit are records in the
//! NVRAM log instead of a delta commit; its bytes are written raw to OUT with the extension
//! `.nvram`. `--parity` (format version 7 on) formats three MLC chips with parity across them,
//! `--mirror-meta` (format version 8 on) three with tree nodes and segment table on two chips.
//! `--homes` (format version 9 on) then writes superblock generations 1 to 33 as a volume whose
//! metaroot areas moved 33 times would have them: 1-31 in block 0 (its pages 2-63), and 32 and
//! 33 in the second home (block 4, erased first), the newest on its pages 2 and 3. Every
//! generation names the areas the volume has (1, 2, 3), so the image stays small (moving the
//! areas for real fills a small volume's every page: 2 MB stored); `tests/superblock_homes.rs`
//! moves them for real. `--chained` (format version 12 on) uses one SLC chip (no paired
//! pages) and, after the delta commit, makes small files `/late/chain/fNNN` durable one
//! transaction each (`chained_file`) until the newest commit is a chained delta commit.
//!
//! The output is the image file (`fsoc_media::image`, docs/FORMAT.md "Image file") stored
//! sparsely: the 512-byte chunks that are not all zero, as `FSOCSPRS` (8 bytes), the file size
//! (u64 LE), then records of `offset u64 LE, length u32 LE, bytes`, to the end of the file.
//! `tests/common/mod.rs` (`unpack_sparse`) rebuilds the image.

use std::path::Path;

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{Profile, SimConfig, SimFlash};

const CHUNK_BYTES: usize = 512;
/// Fixed so every run writes the same bytes.
const VOLUME_ID: u64 = 0x0123_4567_89AB_CDEF;
const SEED: u64 = 11;
const NOW_NS: i64 = 1_700_000_000_000_000_000;

fn write_file(fs: &mut FileSystem<SimFlash<fsoc_media::image::ImageStore>>, path: &str, data: &[u8]) {
    let flags = OpenFlags { write: true, create: true, truncate: true, ..OpenFlags::default() };
    let fd = fs.open(path.as_bytes(), flags, 0o644).unwrap_or_else(|error| panic!("open {path}: {error}"));
    fs.pwrite(fd, 0, data).unwrap_or_else(|error| panic!("write {path}: {error}"));
    fs.close(fd).unwrap_or_else(|error| panic!("close {path}: {error}"));
}

/// Contents of `/data/pattern.bin`: 40,000 bytes, several data pages in extents.
pub fn pattern() -> Vec<u8> {
    (0..40_000u32).map(|index| (index.wrapping_mul(31) % 251) as u8).collect()
}

/// Contents of `/late/chain/fNNN` (`--chained`): 300 bytes that differ from file to file.
pub fn chained_file(index: u32) -> Vec<u8> {
    (0..300u32).map(|offset| (offset.wrapping_mul(7) ^ index.wrapping_mul(13)) as u8).collect()
}

/// Packs the image file at `path` chunk by chunk (a large sparse image is never read whole).
fn pack_sparse(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).expect("open image");
    let file_size_bytes = file.metadata().expect("metadata").len();
    let mut out = Vec::new();
    out.extend_from_slice(b"FSOCSPRS");
    out.extend_from_slice(&file_size_bytes.to_le_bytes());
    // The record being built: its offset and bytes.
    let mut run: Option<(u64, Vec<u8>)> = None;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut offset = 0u64;
    while offset < file_size_bytes {
        let length = (file_size_bytes - offset).min(CHUNK_BYTES as u64) as usize;
        file.read_exact(&mut chunk[..length]).expect("read image");
        let bytes = &chunk[..length];
        if bytes.iter().all(|&byte| byte == 0) {
            flush_run(&mut out, run.take());
        } else {
            run.get_or_insert_with(|| (offset, Vec::new())).1.extend_from_slice(bytes);
        }
        offset += length as u64;
    }
    flush_run(&mut out, run.take());
    out
}

fn flush_run(out: &mut Vec<u8>, run: Option<(u64, Vec<u8>)>) {
    if let Some((offset, bytes)) = run {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&bytes);
    }
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let with_nvram = arguments.iter().any(|argument| argument == "--nvram");
    let with_parity = arguments.iter().any(|argument| argument == "--parity");
    let with_mirror = arguments.iter().any(|argument| argument == "--mirror-meta");
    let with_homes = arguments.iter().any(|argument| argument == "--homes");
    let with_chain = arguments.iter().any(|argument| argument == "--chained");
    let mut positional = arguments.iter().filter(|argument| !argument.starts_with("--"));
    let out = positional.next().expect("usage: golden_image OUT.sparse [BLOCKS] [--nvram]").clone();
    let blocks: u32 = positional.next().map_or(16, |text| text.parse().expect("BLOCKS is a number"));
    let nvram = with_nvram.then(|| {
        let config = fsoc_media::NvramConfig::new(4096, fsoc_media::NvramTechnology::Mram, SEED);
        fsoc_media::SharedNvram::new(fsoc_media::Nvram::in_ram(config).expect("nvram"))
    });
    let directory = tempfile::tempdir().expect("temporary directory");
    let image = directory.path().join("golden.img");
    // One MLC chip (16 blocks, 2 MiB: about the smallest volume the format allows), paired
    // pages on.
    let chips = if with_parity || with_mirror { 3 } else { 1 };
    let profile = if with_chain { Profile::Slc } else { Profile::Mlc };
    let flash = SimFlash::create_image(&image, SimConfig::new(profile, chips, blocks, SEED)).expect("create image");
    let mut config = FsConfig::default();
    if with_parity {
        config.volume.redundancy = fsoc_core::segment::Redundancy::Parity;
    }
    if with_mirror {
        config.volume.redundancy = fsoc_core::segment::Redundancy::MirrorMeta;
    }
    let device = nvram.as_ref().map(|nvram| Box::new(nvram.clone()) as Box<dyn fsoc_media::NvramDevice>);
    let mut fs = FileSystem::format_with_nvram(flash, device, config, VOLUME_ID, NOW_NS).expect("format");
    fs.now_ns = NOW_NS;
    fs.mkdir(b"/docs", 0o755).expect("mkdir");
    fs.mkdir(b"/docs/notes", 0o700).expect("mkdir");
    fs.mkdir(b"/data", 0o755).expect("mkdir");
    write_file(&mut fs, "/hello.txt", b"hello, golden image\n");
    write_file(&mut fs, "/docs/readme.md", &b"# fsoc golden image\n".repeat(200));
    write_file(&mut fs, "/data/pattern.bin", &pattern());
    fs.symlink_path(b"docs/readme.md", b"/readme-link").expect("symlink");
    // Format version 4 on: extended attributes, one of them a 5,000-byte value in chunks.
    let hello = fs.stat(b"/hello.txt").expect("stat").0;
    let pattern_inode = fs.stat(b"/data/pattern.bin").expect("stat").0;
    let any = fsoc_core::fs::xattrs::XattrMode::Any;
    fs.set_xattr(hello, b"user.golden", b"yes", any).expect("xattr");
    fs.set_xattr(pattern_inode, b"trusted.long", &[0x5a; 5000], any).expect("xattr");
    // Format version 3 on: a label and attribute flags (append-only and nodump on the pattern).
    fs.set_label(b"golden").expect("label");
    let flags = fsoc_core::fs::attributes::FS_APPEND_FL | fsoc_core::fs::attributes::FS_NODUMP_FL;
    fs.set_inode_flags(pattern_inode, flags, true).expect("flags");
    fs.commit().expect("full commit");
    // After the full commit: changes made durable by a delta commit only.
    fs.now_ns = NOW_NS + 1_000_000_000;
    write_file(&mut fs, "/docs/notes/after-full-commit.txt", b"written after the full commit\n");
    write_file(&mut fs, "/hello.txt", b"hello again, changed by a delta commit\n");
    fs.mkdir(b"/late", 0o755).expect("mkdir");
    fs.unlink(b"/docs/readme.md").expect("unlink");
    let notes = fs.stat(b"/docs/notes").expect("stat").0;
    fs.set_xattr(notes, b"security.delta", b"after the full commit", any).expect("xattr");
    // Format version 5 on: times before 1970, and a sparse file whose one mapped page (not
    // its size) is what st_blocks counts.
    write_file(&mut fs, "/late/1969.txt", b"before the epoch\n");
    // Format version 13 on: one data page and a short page of 52 bytes (in the tree).
    write_file(&mut fs, "/late/tail.bin", &pattern()[..2100]);
    fs.utimens(b"/late/1969.txt", -86_400_000_000_000, -1_500_000_000).expect("utimens");
    let flags = OpenFlags { write: true, create: true, ..OpenFlags::default() };
    let fd = fs.open(b"/late/sparse.bin", flags, 0o644).expect("open");
    fs.pwrite(fd, 200_000, b"one page at 200,000").expect("write");
    fs.close(fd).expect("close");
    // Format version 10 on: a file as large as ext4's largest (16 TiB - 4 KiB) on 2 KiB pages,
    // with a page at 12 TiB, past 2^32 pages (its spare tag's byte 3 holds the index's bit 32).
    let fd = fs.open(b"/late/huge.bin", flags, 0o644).expect("open");
    fs.pwrite(fd, 12 << 40, b"one page at 12 TiB").expect("write");
    let tail = b"ending at 16 TiB - 4 KiB";
    fs.pwrite(fd, fsoc_core::fs::EXT4_FILE_BYTES_MAX - tail.len() as u64, tail).expect("write");
    fs.close(fd).expect("close");
    fs.transact().expect("delta commit");
    if with_chain {
        fs.mkdir(b"/late/chain", 0o755).expect("mkdir");
        for index in 0.. {
            assert!(index < 200, "no chained record after 200 files");
            write_file(&mut fs, &format!("/late/chain/f{index:03}"), &chained_file(index));
            fs.transact().expect("delta commit");
            if fs.committed().chain.is_some() {
                println!("chained after {} files", index + 1);
                break;
            }
        }
    }
    match &nvram {
        None => assert!(!fs.committed().delta.is_empty(), "the newest commit must be a delta commit"),
        Some(nvram) => {
            assert!(fs.nvram_usage().is_some_and(|(used, _)| used > 0), "the newest commit must be an NVRAM record");
            let bytes = nvram.with(|device| device.backing().bytes().to_vec());
            let nvram_out = Path::new(&out).with_extension("nvram");
            std::fs::write(&nvram_out, bytes).expect("write NVRAM bytes");
            println!("{}: NVRAM of 4096 bytes", nvram_out.display());
        }
    }
    let mut flash = fs.into_flash_without_commit();
    if with_homes {
        use fsoc_media::{BlockAddress, Flash, PageAddress};
        let superblock = fsoc_core::txn::Superblock::decode(&{
            let mut data = vec![0u8; 2048];
            let mut spare = vec![0u8; 64];
            flash.read_page(0, PageAddress::new(0, 0, 0), &mut data, &mut spare).expect("read the superblock");
            data
        })
        .expect("the superblock decodes");
        let mut spare = vec![0xFFu8; 64];
        // The superblock's spare tag, as the volume writes it (`PageTag::Superblock`).
        let mut tag_source = vec![0u8; 2048];
        flash.read_page(0, PageAddress::new(0, 0, 0), &mut tag_source, &mut spare).expect("read the tag");
        flash.erase_block(0, BlockAddress::new(0, 4)).expect("erase the second home");
        for generation in 1..=33u32 {
            let (home, first_page) = superblock.generation_place(generation).expect("a place");
            let bytes = fsoc_core::txn::Superblock { generation, ..superblock }.encode(2048);
            for page in [first_page, first_page + 1] {
                flash.program_page(0, PageAddress::new(0, home, page), &bytes, &spare).expect("program a generation");
            }
        }
    }
    drop(flash);
    let packed = pack_sparse(&image);
    std::fs::write(Path::new(&out), &packed).expect("write output");
    let size = std::fs::metadata(&image).expect("metadata").len();
    println!("{out}: image of {size} bytes stored in {} bytes", packed.len());
}
