//! Writes a golden image: a small volume in the current on-disk format holding a few files and
//! directories, whose newest metaroot is a delta commit on top of a full commit (the volume was
//! not unmounted, as after a power cut that followed an fsync). Tests in
//! `tests/golden_images.rs` read every golden image back with the current code.
//!
//! `cargo run --release -p fsoc-core --example golden_image -- OUT.sparse`
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
const NOW_NS: u64 = 1_700_000_000_000_000_000;

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

fn pack_sparse(image: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"FSOCSPRS");
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    let mut offset = 0;
    while offset < image.len() {
        let is_zero = |start: usize| image[start..(start + CHUNK_BYTES).min(image.len())].iter().all(|&byte| byte == 0);
        if is_zero(offset) {
            offset += CHUNK_BYTES;
            continue;
        }
        let mut end = offset;
        while end < image.len() && !is_zero(end) {
            end = (end + CHUNK_BYTES).min(image.len());
        }
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&((end - offset) as u32).to_le_bytes());
        out.extend_from_slice(&image[offset..end]);
        offset = end;
    }
    out
}

fn main() {
    let out = std::env::args().nth(1).expect("usage: golden_image OUT.sparse");
    let directory = tempfile::tempdir().expect("temporary directory");
    let image = directory.path().join("golden.img");
    // One MLC chip of 16 blocks (2 MiB): the smallest volume the format allows, paired pages on.
    let flash = SimFlash::create_image(&image, SimConfig::new(Profile::Mlc, 1, 16, SEED)).expect("create image");
    let mut fs = FileSystem::format_at(flash, FsConfig::default(), VOLUME_ID, NOW_NS).expect("format");
    fs.now_ns = NOW_NS;
    fs.mkdir(b"/docs", 0o755).expect("mkdir");
    fs.mkdir(b"/docs/notes", 0o700).expect("mkdir");
    fs.mkdir(b"/data", 0o755).expect("mkdir");
    write_file(&mut fs, "/hello.txt", b"hello, golden image\n");
    write_file(&mut fs, "/docs/readme.md", &b"# fsoc golden image\n".repeat(200));
    write_file(&mut fs, "/data/pattern.bin", &pattern());
    fs.symlink_path(b"docs/readme.md", b"/readme-link").expect("symlink");
    fs.commit().expect("full commit");
    // After the full commit: changes made durable by a delta commit only.
    fs.now_ns = NOW_NS + 1_000_000_000;
    write_file(&mut fs, "/docs/notes/after-full-commit.txt", b"written after the full commit\n");
    write_file(&mut fs, "/hello.txt", b"hello again, changed by a delta commit\n");
    fs.mkdir(b"/late", 0o755).expect("mkdir");
    fs.unlink(b"/docs/readme.md").expect("unlink");
    fs.transact().expect("delta commit");
    assert!(!fs.volume.committed().delta.is_empty(), "the newest commit must be a delta commit");
    let flash = fs.into_flash_without_commit();
    drop(flash);
    let bytes = std::fs::read(&image).expect("read image");
    let packed = pack_sparse(&bytes);
    std::fs::write(Path::new(&out), &packed).expect("write output");
    println!("{out}: image of {} bytes stored in {} bytes", bytes.len(), packed.len());
}
