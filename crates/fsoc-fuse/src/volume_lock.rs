//! The one lock around a mounted volume: every FUSE callback runs inside `VolumeLock::read_on`
//! (read-only requests) or `VolumeLock::run_on` (changes), which catch panics and turn them
//! into EIO.
//!
//! The lock is a readers-writer lock: fsoc-core answers lookups, attributes, reads, directory
//! listings, links and statfs through `&FileSystem`, so those requests run on several FUSE
//! threads at once; a change takes the lock exclusively (and sets the file system's clock).
//! Open handles live in their own small mutex, taken only to look a handle up or change the
//! table, never across a flash operation; an open directory's stream has its own mutex, so
//! listings of different directories overlap. No callback waits for the kernel while holding
//! a lock, and the locks are always taken in the order volume, handles, stream, so there is no
//! deadlock.
//!
//! Invariants: after a panic in a callback every later call gets EIO and the volume is
//! poisoned (at once for a writer; a reader's panic is recorded and the volume is poisoned by
//! the next writer or at unmount), so nothing is built on a half-applied change and the flash
//! keeps the last committed state.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use fsoc_core::FileSystem;
use fsoc_media::Flash;
use fuser::Errno;

use crate::attributes::now_ns;
use crate::directory_stream::DirectoryStream;

/// Open file and directory handles allowed at once (beyond it, open gets EMFILE).
pub const HANDLES_MAX: usize = 1 << 16;

/// An open file (a FUSE `open` or `create` handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFile {
    pub inode: u64,
    /// O_APPEND: every write goes to the end of the file, decided under the lock.
    pub append: bool,
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

pub struct VolumeLock<F: Flash> {
    state: RwLock<MountState<F>>,
    /// The first panic's description; once set, every call answers EIO.
    failure: Mutex<Option<String>>,
}

thread_local! {
    /// The request this thread is serving inside `VolumeLock::run_on`.
    static CURRENT_REQUEST: std::cell::Cell<Option<(&'static str, Option<u64>)>> = const { std::cell::Cell::new(None) };
}

/// The operation and inode of the request this thread is serving, if any: lets the error
/// mapping name them in the log without threading them through every call.
pub fn current_request() -> Option<(&'static str, Option<u64>)> {
    CURRENT_REQUEST.with(std::cell::Cell::get)
}

/// Sets `CURRENT_REQUEST` for one call and restores the previous value after it, even on a
/// panic.
struct RequestScope {
    previous: Option<(&'static str, Option<u64>)>,
}

impl RequestScope {
    fn enter(operation: &'static str, inode: Option<u64>) -> RequestScope {
        RequestScope { previous: CURRENT_REQUEST.with(|current| current.replace(Some((operation, inode)))) }
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        CURRENT_REQUEST.with(|current| current.set(self.previous));
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl<F: Flash> VolumeLock<F> {
    pub fn new(fs: FileSystem<F>) -> Self {
        VolumeLock { state: RwLock::new(MountState::new(fs)), failure: Mutex::new(None) }
    }

    fn failed(&self) -> bool {
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// Records a panic (the first one wins) and logs it.
    fn record_failure(&self, operation: &'static str, message: &str) {
        log::error!(
            "internal error in {operation}: {message}; the volume now answers EIO and keeps its last \
             committed state: unmount it and run `fsoc fsck`"
        );
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| format!("{operation}: {message}"));
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
        let _request = RequestScope::enter(operation, inode);
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if self.failed() {
            // Also poisons the volume after a reader's panic: nothing more is written.
            state.fs.poison();
            return Err(Errno::EIO);
        }
        state.fs.now_ns = now_ns();
        match panic::catch_unwind(AssertUnwindSafe(|| body(&mut state))) {
            Ok(result) => result,
            Err(payload) => {
                self.record_failure(operation, &panic_message(payload.as_ref()));
                state.fs.poison();
                Err(Errno::EIO)
            }
        }
    }

    /// Runs one read-only request, holding the volume shared: several run at once.
    pub fn read_on<T>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&MountState<F>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let _request = RequestScope::enter(operation, inode);
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if self.failed() {
            return Err(Errno::EIO);
        }
        match panic::catch_unwind(AssertUnwindSafe(|| body(&state))) {
            Ok(result) => result,
            Err(payload) => {
                self.record_failure(operation, &panic_message(payload.as_ref()));
                Err(Errno::EIO)
            }
        }
    }

    pub fn into_state(self) -> MountState<F> {
        let mut state = self.state.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(failure) = self.failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
            state.fs.poison();
            state.failure = Some(failure);
        }
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
                handles.files.insert(handle + 1000, OpenFile { inode: 1, append: false });
            }
            assert_eq!(handles.allocate_handle(), Err(Errno::EMFILE));
            Ok(())
        })
        .expect("handles");
    }
}
