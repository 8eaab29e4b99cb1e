//! The one lock around a mounted volume: every FUSE callback runs inside `VolumeLock::run`,
//! which sets the file system's clock, catches panics and turns them into EIO.
//!
//! fsoc-core needs `&mut FileSystem` even to read (its node cache changes), so all calls are
//! serialized, readers included: several FUSE threads receive requests at once, but only one
//! touches the volume at a time. No callback takes any other lock or waits for the kernel
//! while holding this one, so there is no lock order to get wrong and no deadlock.
//!
//! Invariants: after a panic in a callback the volume is poisoned and every later call gets
//! EIO, so nothing is built on a half-applied change and the flash keeps the last committed
//! state; a poisoned `Mutex` (which the catch makes unreachable) is treated the same way.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

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

/// Everything the callbacks share.
pub struct MountState<F: Flash> {
    pub fs: FileSystem<F>,
    pub files: BTreeMap<u64, OpenFile>,
    pub directories: BTreeMap<u64, DirectoryStream>,
    next_handle: u64,
    /// Why the mount stopped serving (a panic), if it did.
    failure: Option<String>,
}

impl<F: Flash> MountState<F> {
    pub fn new(fs: FileSystem<F>) -> Self {
        MountState { fs, files: BTreeMap::new(), directories: BTreeMap::new(), next_handle: 1, failure: None }
    }

    /// A fresh handle number, or EMFILE when `HANDLES_MAX` are open.
    pub fn allocate_handle(&mut self) -> Result<u64, Errno> {
        if self.files.len() + self.directories.len() >= HANDLES_MAX {
            return Err(Errno::EMFILE);
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        assert!(!self.files.contains_key(&handle) && !self.directories.contains_key(&handle), "handle {handle} reused");
        Ok(handle)
    }

    /// The panic that stopped the mount, if any.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn fail(&mut self, reason: String) {
        self.fs.volume.poison();
        if self.failure.is_none() {
            self.failure = Some(reason);
        }
    }
}

pub struct VolumeLock<F: Flash> {
    state: Mutex<MountState<F>>,
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

impl<F: Flash> VolumeLock<F> {
    pub fn new(fs: FileSystem<F>) -> Self {
        VolumeLock { state: Mutex::new(MountState::new(fs)) }
    }

    /// Runs one callback's work on the volume. A panic inside `body` is caught and logged;
    /// the caller then gets EIO, as does every later call.
    pub fn run<T>(&self, operation: &'static str, body: impl FnOnce(&mut MountState<F>) -> Result<T, Errno>) -> Result<T, Errno> {
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
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => {
                let mut state = poisoned.into_inner();
                state.fail("a callback panicked while holding the volume lock".into());
                self.state.clear_poison();
                state
            }
        };
        if state.failure.is_some() {
            return Err(Errno::EIO);
        }
        state.fs.now_ns = now_ns();
        match panic::catch_unwind(AssertUnwindSafe(|| body(&mut state))) {
            Ok(result) => result,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|text| text.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                log::error!(
                    "internal error in {operation}: {message}; the volume now answers EIO and keeps its last \
                     committed state: unmount it and run `fsoc fsck`"
                );
                state.fail(format!("{operation}: {message}"));
                Err(Errno::EIO)
            }
        }
    }

    pub fn into_state(self) -> MountState<F> {
        self.state.into_inner().unwrap_or_else(|poisoned| {
            let mut state = poisoned.into_inner();
            state.fail("a callback panicked while holding the volume lock".into());
            state
        })
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
        assert_eq!(lock.run("getattr", |state| Ok(state.fs.getattr(1).is_ok())), Err(Errno::EIO), "later calls get EIO");
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
    fn handles_are_unique_and_bounded() {
        let lock = lock();
        lock.run("open", |state| {
            let first = state.allocate_handle()?;
            let second = state.allocate_handle()?;
            assert_ne!(first, second);
            for handle in 0..HANDLES_MAX as u64 {
                state.files.insert(handle + 1000, OpenFile { inode: 1, append: false });
            }
            assert_eq!(state.allocate_handle(), Err(Errno::EMFILE));
            Ok(())
        })
        .expect("handles");
    }
}
