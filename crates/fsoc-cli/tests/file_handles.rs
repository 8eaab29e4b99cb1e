//! File handles on `fsoc mount` (issue 18 point 1): a handle from `name_to_handle_at` opens
//! its file with `open_by_handle_at` after the kernel has evicted the inode (drop_caches) and
//! after an unmount and a new mount; a handle of a deleted file is stale (ESTALE), also when a
//! new file takes its name. The handle names the node id, which is fsoc's inode number: never
//! reused (a 64-bit counter in the metaroot).
//!
//! Needs root (open_by_handle_at needs CAP_DAC_READ_SEARCH; drop_caches needs root) and
//! /dev/fuse, like the other mount tests.

mod support;

use std::ffi::CString;
use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use support::Volume;

/// Room for any handle the kernel makes (MAX_HANDLE_SZ).
const HANDLE_BYTES_MAX: usize = 128;

/// A file handle: the kernel's opaque bytes with their type.
struct Handle {
    /// `struct file_handle` followed by its bytes, as u32 words so the header is aligned.
    words: Vec<u32>,
}

impl Handle {
    fn of(path: &Path) -> Handle {
        let header_words = std::mem::size_of::<libc::file_handle>().div_ceil(4);
        let mut words = vec![0u32; header_words + HANDLE_BYTES_MAX / 4];
        let handle = words.as_mut_ptr().cast::<libc::file_handle>();
        // SAFETY: `words` holds a file_handle header and HANDLE_BYTES_MAX bytes after it.
        unsafe { (*handle).handle_bytes = HANDLE_BYTES_MAX as u32 };
        let name = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
        let mut mount_id: libc::c_int = 0;
        // SAFETY: a valid path, a handle buffer of the size it declares, and an out integer.
        let result = unsafe { libc::name_to_handle_at(libc::AT_FDCWD, name.as_ptr(), handle, &mut mount_id, 0) };
        assert_eq!(result, 0, "name_to_handle_at {}: {}", path.display(), std::io::Error::last_os_error());
        Handle { words }
    }

    /// Opens the handle read-only through the mount point `mount`.
    fn open(&mut self, mount: &Path) -> std::io::Result<File> {
        let mount_fd = File::open(mount).expect("open the mount point");
        let handle = self.words.as_mut_ptr().cast::<libc::file_handle>();
        // SAFETY: a handle filled by name_to_handle_at and an open descriptor of its mount.
        let fd = unsafe { libc::open_by_handle_at(mount_fd.as_raw_fd(), handle, libc::O_RDONLY) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor open_by_handle_at just returned, owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

/// Makes the kernel forget every unused inode and dentry (FUSE sends FORGET for them).
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", b"3").expect("drop_caches (needs root)");
}

fn read_all(mut file: File) -> Vec<u8> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read through the handle");
    bytes
}

#[test]
fn handles_open_their_files_after_eviction_and_remount_and_go_stale_when_deleted() {
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    fs::create_dir_all(mounted.path("a/b")).expect("mkdir");
    fs::write(mounted.path("a/b/kept"), b"kept through eviction and remount").expect("write");
    fs::write(mounted.path("a/gone"), b"deleted later").expect("write");
    let mut kept = Handle::of(&mounted.path("a/b/kept"));
    let mut directory = Handle::of(&mounted.path("a/b"));
    let mut gone = Handle::of(&mounted.path("a/gone"));

    drop_caches();
    assert_eq!(
        read_all(kept.open(mounted.root()).expect("open by handle after drop_caches")),
        b"kept through eviction and remount"
    );
    let listed = directory.open(mounted.root()).expect("a directory by handle after drop_caches");
    assert!(listed.metadata().expect("fstat").is_dir());
    drop(listed);

    fs::remove_file(mounted.path("a/gone")).expect("unlink");
    fs::write(mounted.path("a/gone"), b"a new file under the old name").expect("write");
    drop_caches();
    let error = gone.open(mounted.root()).expect_err("a deleted file's handle");
    assert_eq!(error.raw_os_error(), Some(libc::ESTALE), "stale, not the new file: {error}");

    let remounted = support::check_round_trip(mounted);
    assert_eq!(
        read_all(kept.open(remounted.root()).expect("open by handle after a remount")),
        b"kept through eviction and remount"
    );
    let error = gone.open(remounted.root()).expect_err("still stale after a remount");
    assert_eq!(error.raw_os_error(), Some(libc::ESTALE));
    remounted.unmount();
    volume.fsck();
}
