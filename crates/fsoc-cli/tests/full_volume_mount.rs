//! A full volume through the FUSE mount (issue 14, S6 and O3): filled with 6,000-byte files
//! until ENOSPC, statfs (as `df` sees it) promised no more than was written, and then every
//! unlink, rename, chmod, utime and truncate of a random quarter of the files succeeds.
//! Unmount, fsck clean, remount, contents intact. Needs root and /dev/fuse, as fuse_mount.rs.

mod support;

use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fsoc_media::rng::SeededRng;
use support::Volume;

/// statvfs's available bytes (what `df` reports as Avail).
fn available_bytes(path: &Path) -> u64 {
    let c_path = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed statvfs the call fills in.
    let result = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) };
    assert_eq!(result, 0, "statvfs {}: {}", path.display(), std::io::Error::last_os_error());
    stats.f_bavail as u64 * stats.f_frsize as u64
}

fn contents(seed: u64) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    (0..6000).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn a_full_volume_empties_through_the_mount() {
    let volume = Volume::new("32M");
    let mounted = volume.mount();
    let directory = mounted.path("s");
    fs::create_dir(&directory).expect("mkdir");
    let mut written = 0u64;
    loop {
        let available = available_bytes(mounted.root());
        let path = directory.join(written.to_string());
        let result =
            File::create(&path).and_then(|mut file| file.write_all(&contents(written)).and_then(|()| file.sync_all()));
        match result {
            Ok(()) => written += 1,
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {
                // O3: no ENOSPC while a segment (64 pages of 2 KiB) or more is reported free
                // beyond what this file needed.
                assert!(
                    available < 6144 + 64 * 2048,
                    "ENOSPC after {written} files while df reported {available} bytes free"
                );
                let _ = fs::remove_file(&path);
                break;
            }
            Err(error) => panic!("file {written}: {error}"),
        }
        assert!(written < 100_000, "never ran out of space");
    }
    assert!(written > 4000, "only {written} files of 6,000 bytes fit in 32 MiB");
    let mut rng = SeededRng::new(7);
    let mut kept = Vec::new();
    for index in 0..written {
        let path = directory.join(index.to_string());
        if rng.below(4) != 0 {
            kept.push(index);
            continue;
        }
        let step = match index % 5 {
            0 => fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .and_then(|()| fs::remove_file(&path)),
            1 => {
                let renamed = directory.join(format!("{index}.renamed"));
                fs::rename(&path, &renamed).and_then(|()| fs::remove_file(&renamed))
            }
            2 => File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_len(0))
                .and_then(|()| fs::remove_file(&path)),
            3 => File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1)))
                .and_then(|()| fs::remove_file(&path)),
            _ => fs::remove_file(&path),
        };
        step.unwrap_or_else(|error| panic!("change/delete of file {index} on the full volume: {error}"));
    }
    mounted.unmount();
    volume.fsck();
    let mounted = volume.mount();
    for &index in kept.iter().step_by(97) {
        let bytes = fs::read(directory.join(index.to_string())).expect("kept file");
        assert_eq!(bytes, contents(index), "file {index} after remount");
    }
    mounted.unmount();
}
