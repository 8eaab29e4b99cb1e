//! Shared helpers for fsoc-core's integration tests.
#![allow(dead_code)]

/// The parallel-readers model check, also used by fsoc-array's threaded variant (by path).
pub mod concurrent_model;

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{Flash, Profile, SimConfig, SimFlash};

pub fn sim(profile: Profile, chips: u32, blocks: u32, seed: u64) -> SimFlash {
    SimFlash::create(SimConfig::new(profile, chips, blocks, seed)).expect("valid simulator config")
}

pub fn fresh(blocks: u32) -> FileSystem<SimFlash> {
    FileSystem::format(sim(Profile::Mlc, 1, blocks, 7), FsConfig::default(), 7).expect("format")
}

pub const CREATE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: false,
    truncate: false,
    append: false,
    directory: false,
};
pub const READ: OpenFlags = OpenFlags {
    read: true,
    write: false,
    create: false,
    exclusive: false,
    truncate: false,
    append: false,
    directory: false,
};

pub fn write_file<F: Flash>(fs: &mut FileSystem<F>, path: &str, data: &[u8]) -> Result<(), fsoc_core::FsError> {
    let fd = fs.open(path.as_bytes(), OpenFlags { truncate: true, ..CREATE }, 0o644)?;
    let result = fs.pwrite(fd, 0, data).map(|_| ());
    fs.close(fd)?;
    result
}

pub fn read_file<F: Flash>(fs: &mut FileSystem<F>, path: &str) -> Result<Vec<u8>, fsoc_core::FsError> {
    let fd = fs.open(path.as_bytes(), READ, 0)?;
    // A read may be short (at most READ_BYTES_MAX): read until end of file.
    let mut contents = Vec::new();
    let result = loop {
        match fs.read_fd(fd, usize::MAX / 2) {
            Ok(bytes) if bytes.is_empty() => break Ok(contents),
            Ok(bytes) => contents.extend_from_slice(&bytes),
            Err(error) => break Err(error),
        }
    };
    fs.close(fd)?;
    result
}

pub fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length).map(|index| seed.wrapping_add((index % 251) as u8)).collect()
}

pub fn assert_clean<F: Flash>(fs: &mut FileSystem<F>, context: &str) {
    let report = fs.fsck(false).expect("fsck runs");
    assert!(report.is_clean(), "{context}: fsck violations: {:?}", report.violations);
}

/// Rebuilds an image file stored sparsely by `examples/golden_image.rs` (`FSOCSPRS`, the file
/// size, then `offset u64, length u32, bytes` records) into `path`, writing only the records
/// (the file stays sparse).
pub fn unpack_sparse(packed: &[u8], path: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    let (magic, rest) = packed.split_at(8);
    assert_eq!(magic, b"FSOCSPRS", "not a sparse golden image");
    let (size, mut rest) = rest.split_at(8);
    let file_size_bytes = u64::from_le_bytes(size.try_into().expect("8 bytes"));
    let file = std::fs::File::create(path).expect("create unpacked image");
    file.set_len(file_size_bytes).expect("size unpacked image");
    while !rest.is_empty() {
        let offset = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let length = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
        file.write_all_at(&rest[12..12 + length], offset).expect("write unpacked image");
        rest = &rest[12 + length..];
    }
}
