//! The one lock around a mounted volume: every FUSE callback runs inside `VolumeLock::read_on`
//! (read-only requests) or `VolumeLock::run_on` (changes), which catch panics and turn them
//! into EIO.
//!
//! A thin layer over fsoc-engine's `SharedVolume` (readers in parallel through `&FileSystem`,
//! changes exclusively with the clock set, panics caught and the volume poisoned), with what
//! only the mount has: the open-handle table, kept beside the file system in `MountState` so
//! it changes atomically with the volume, and FUSE's errno type.
//! Open handles live in their own small mutex, taken only to look a handle up or change the
//! table, never across a flash operation; an open directory's stream has its own mutex, so
//! listings of different directories overlap. No callback waits for the kernel while holding
//! a lock, and the locks are always taken in the order volume, handles, stream, so there is no
//! deadlock.
//!
//! Invariants: after a panic in a callback every later call gets EIO and the volume is
//! poisoned (at once for a writer; a reader's panic is recorded and the volume is poisoned by
//! the next writer or at unmount), so nothing is built on a half-applied change and the flash
//! keeps the last committed state (fsoc-engine's tests, and the ones below through FUSE's
//! types).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fsoc_core::{FileSystem, FlushWait};
use fsoc_engine::{SharedVolume, VolumeState};
use fsoc_media::Flash;
use fuser::Errno;

use crate::attributes::now_ns;
use fsoc_engine::DirectoryCursor as DirectoryStream;

pub use fsoc_engine::current_request;

/// Open file and directory handles allowed at once (beyond it, open gets EMFILE).
pub const HANDLES_MAX: usize = 1 << 16;

/// An open file (a FUSE `open` or `create` handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFile {
    pub inode: u64,
    /// O_APPEND: every write goes to the end of the file, decided under the lock.
    pub append: bool,
    /// Opened for writing (O_WRONLY or O_RDWR).
    pub writable: bool,
}

/// The open handles of a mount.
#[derive(Default)]
pub struct Handles {
    pub files: BTreeMap<u64, OpenFile>,
    /// Each stream behind its own lock, so a listing does not hold the handle table.
    pub directories: BTreeMap<u64, Arc<Mutex<DirectoryStream>>>,
    next_handle: u64,
}

impl Handles {
    /// A fresh handle number, or EMFILE when `HANDLES_MAX` are open.
    pub fn allocate_handle(&mut self) -> Result<u64, Errno> {
        if self.files.len() + self.directories.len() >= HANDLES_MAX {
            return Err(Errno::EMFILE);
        }
        self.next_handle += 1;
        let handle = self.next_handle;
        assert!(!self.files.contains_key(&handle) && !self.directories.contains_key(&handle), "handle {handle} reused");
        Ok(handle)
    }
}

/// Everything the callbacks share.
pub struct MountState<F: Flash> {
    pub fs: FileSystem<F>,
    handles: Mutex<Handles>,
    /// Why the mount stopped serving (a panic), if it did (filled by `VolumeLock::into_state`).
    failure: Option<String>,
}

impl<F: Flash> MountState<F> {
    pub fn new(fs: FileSystem<F>) -> Self {
        MountState { fs, handles: Mutex::new(Handles::default()), failure: None }
    }

    /// The handle table, for a request holding the volume shared.
    pub fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handle table, for a request holding the volume exclusively.
    pub fn handles_mut(&mut self) -> &mut Handles {
        self.handles.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// The panic that stopped the mount, if any.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

impl<F: Flash> VolumeState for MountState<F> {
    type Flash = F;
    fn file_system(&self) -> &FileSystem<F> {
        &self.fs
    }
    fn file_system_mut(&mut self) -> &mut FileSystem<F> {
        &mut self.fs
    }
}

pub struct VolumeLock<F: Flash> {
    volume: SharedVolume<MountState<F>>,
}

impl<F: Flash> AsRef<SharedVolume<MountState<F>>> for VolumeLock<F> {
    fn as_ref(&self) -> &SharedVolume<MountState<F>> {
        &self.volume
    }
}

impl<F: Flash> VolumeLock<F> {
    pub fn new(fs: FileSystem<F>) -> Self {
        VolumeLock { volume: SharedVolume::with_clock(MountState::new(fs), now_ns) }
    }

    /// Runs one change to the volume, holding it exclusively. A panic inside `body` is caught
    /// and logged; the caller then gets EIO, as does every later call.
    pub fn run<T>(
        &self,
        operation: &'static str,
        body: impl FnOnce(&mut MountState<F>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        self.run_on(operation, None, body)
    }

    /// `run` for a request about `inode`: an error that becomes EIO is logged with the
    /// operation and the inode (see `current_request`).
    pub fn run_on<T>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&mut MountState<F>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        self.volume.change(operation, inode, body).unwrap_or(Err(Errno::EIO))
    }

    /// `run_on` for a change that leaves the flash's flush running (fsync): the flush is
    /// waited for with the volume released, so readers and the next change are not held
    /// behind it; the reply still waits for it (`SharedVolume::change_then_flush`).
    pub fn run_then_flush_on(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&mut MountState<F>) -> Result<FlushWait, Errno>,
    ) -> Result<(), Errno> {
        self.volume
            .change_then_flush(operation, inode, |state| body(state).map(|flush| ((), flush)))
            .unwrap_or(Err(Errno::EIO))
    }

    /// Runs one read-only request, holding the volume shared: several run at once.
    pub fn read_on<T>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&MountState<F>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        self.volume.read(operation, inode, body).unwrap_or(Err(Errno::EIO))
    }

    pub fn into_state(self) -> MountState<F> {
        let (mut state, failure) = self.volume.into_inner();
        state.failure = failure;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::fs::FileKind;
    use fsoc_core::FsConfig;
    use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

    fn lock() -> VolumeLock<SimFlash<RamStore>> {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 256, 1)).expect("flash");
        VolumeLock::new(FileSystem::format(flash, FsConfig::default(), 1).expect("format"))
    }

    #[test]
    fn a_panic_becomes_eio_and_stops_the_volume() {
        let lock = lock();
        lock.run("create", |state| {
            let inode = state.fs.create(1, b"kept", FileKind::File, 0o644, 0, 0, None).map_err(|_| Errno::EIO)?;
            state.fs.write(inode, 0, b"committed").map_err(|_| Errno::EIO)?;
            state.fs.fsync(inode).map_err(|_| Errno::EIO)
        })
        .expect("create and fsync");
        let panicked = lock.run("write", |state| -> Result<(), Errno> {
            state.fs.create(1, b"half", FileKind::File, 0o644, 0, 0, None).expect("create");
            panic!("injected bug");
        });
        assert_eq!(panicked, Err(Errno::EIO));
        assert_eq!(
            lock.run("getattr", |state| Ok(state.fs.getattr(1).is_ok())),
            Err(Errno::EIO),
            "later calls get EIO"
        );
        assert_eq!(
            lock.read_on("getattr", None, |state| Ok(state.fs.getattr(1).is_ok())),
            Err(Errno::EIO),
            "and reads"
        );
        let state = lock.into_state();
        assert_eq!(state.failure(), Some("write: injected bug"));
        // Unmount does not commit a poisoned volume: the flash holds the last fsync'd state.
        let flash = state.fs.unmount().expect("unmount of a poisoned volume returns the flash");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        assert!(fs.lookup(1, b"kept").is_ok(), "fsync'd file survives");
        assert!(fs.lookup(1, b"half").is_err(), "the change of the panicking call is gone");
        assert!(fs.fsck(true).expect("fsck").is_clean());
    }

    #[test]
    fn a_panic_in_a_reader_stops_the_writers_too() {
        let lock = lock();
        let panicked = lock.read_on("lookup", Some(1), |_state| -> Result<(), Errno> { panic!("injected reader bug") });
        assert_eq!(panicked, Err(Errno::EIO));
        let wrote = lock.run("create", |state| {
            state.fs.create(1, b"after", FileKind::File, 0o644, 0, 0, None).map_err(|_| Errno::ENOSPC)
        });
        assert_eq!(wrote, Err(Errno::EIO), "no change is made after a panic");
        let state = lock.into_state();
        assert_eq!(state.failure(), Some("lookup: injected reader bug"));
        assert!(state.fs.is_poisoned());
    }

    #[test]
    fn readers_share_the_volume() {
        let lock = std::sync::Arc::new(lock());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        // Both readers hold the volume at the barrier at the same time: with an exclusive
        // lock the second could not enter and this would never return.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (lock, barrier) = (lock.clone(), barrier.clone());
                std::thread::spawn(move || {
                    lock.read_on("getattr", Some(1), |state| {
                        barrier.wait();
                        state.fs.getattr(1).map(|record| record.kind).map_err(|_| Errno::EIO)
                    })
                })
            })
            .collect();
        for thread in threads {
            assert_eq!(thread.join().expect("reader thread"), Ok(FileKind::Directory));
        }
    }

    #[test]
    fn handles_are_unique_and_bounded() {
        let lock = lock();
        lock.run("open", |state| {
            let handles = state.handles_mut();
            let first = handles.allocate_handle()?;
            let second = handles.allocate_handle()?;
            assert_ne!(first, second);
            for handle in 0..HANDLES_MAX as u64 {
                handles.files.insert(handle + 1000, OpenFile { inode: 1, append: false, writable: false });
            }
            assert_eq!(handles.allocate_handle(), Err(Errno::EMFILE));
            Ok(())
        })
        .expect("handles");
    }
}
