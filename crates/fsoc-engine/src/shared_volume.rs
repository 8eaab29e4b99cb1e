//! `SharedVolume`: the one lock around a served volume. Every request runs inside `read`
//! (looks only: several at once, through `&`) or `change` (alone, through `&mut`, with the
//! file system's clock set), and a panic inside either is caught.
//!
//! The state behind the lock is a `VolumeState`: the `FileSystem` itself (fsoc-serve), or the
//! file system with a front end's own tables beside it (fsoc-fuse's handle table), so those
//! change atomically with the volume.
//!
//! Invariants: after a panic in a request every later call gets `EngineError::Failed` and the
//! volume is poisoned (at once for a change; a reader's panic is recorded, and the volume is
//! poisoned by the next change or by `into_inner`), so nothing is built on a half-applied
//! change and the flash keeps the last committed state. No lock of this type is held while a
//! caller talks to its client: `read` and `change` return before the reply is sent.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, PoisonError, RwLock};

use fsoc_core::{FileSystem, FlushWait};
use fsoc_flash::Flash;

use crate::clock::wall_clock_ns;

/// What a `SharedVolume` guards: a file system, possibly with a front end's tables beside it.
pub trait VolumeState {
    type Flash: Flash;
    fn file_system(&self) -> &FileSystem<Self::Flash>;
    fn file_system_mut(&mut self) -> &mut FileSystem<Self::Flash>;
}

impl<F: Flash> VolumeState for FileSystem<F> {
    type Flash = F;
    fn file_system(&self) -> &FileSystem<F> {
        self
    }
    fn file_system_mut(&mut self) -> &mut FileSystem<F> {
        self
    }
}

/// Why a request was not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// A request panicked (this one or an earlier one): the volume is poisoned and keeps its
    /// last committed state. `failure` names the first panic's operation and message.
    #[error("the volume stopped serving after an internal error ({failure}); it keeps its last committed state")]
    Failed { failure: String },
    /// The backing store could not make a commit durable (`change_then_flush`): the volume is
    /// poisoned and keeps its last durable state.
    #[error("the flash did not make a commit durable ({reason}); the volume stopped changing")]
    Flush { reason: String },
}

impl EngineError {
    /// The errno a client gets (Linux numbering): EIO.
    pub fn errno(&self) -> i32 {
        match self {
            EngineError::Failed { .. } | EngineError::Flush { .. } => fsoc_core::fs::errno::EIO,
        }
    }
}

thread_local! {
    /// The request this thread is serving inside `SharedVolume::read` or `change`.
    static CURRENT_REQUEST: Cell<Option<(&'static str, Option<u64>)>> = const { Cell::new(None) };
}

/// The operation and inode of the request this thread is serving, if any: lets an error
/// mapping name them in the log without threading them through every call.
pub fn current_request() -> Option<(&'static str, Option<u64>)> {
    CURRENT_REQUEST.with(Cell::get)
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

impl<S> AsRef<SharedVolume<S>> for SharedVolume<S> {
    fn as_ref(&self) -> &SharedVolume<S> {
        self
    }
}

/// A volume served to many threads: readers in parallel, changes alone, panics contained.
pub struct SharedVolume<S> {
    state: RwLock<S>,
    /// The first panic's description; once set, every call is refused.
    failure: Mutex<Option<String>>,
    /// Nanoseconds since the epoch, read at the start of every change.
    clock: fn() -> i64,
}

impl<S: VolumeState> SharedVolume<S> {
    /// A volume whose changes are stamped with the wall clock.
    pub fn new(state: S) -> Self {
        Self::with_clock(state, wall_clock_ns)
    }

    /// A volume whose changes are stamped with `clock` (a test's fixed time, or a front end's
    /// own reading of the wall clock).
    pub fn with_clock(state: S, clock: fn() -> i64) -> Self {
        SharedVolume { state: RwLock::new(state), failure: Mutex::new(None), clock }
    }

    /// The first panic's description (`operation: message`), if a request panicked.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn refused(&self) -> Option<EngineError> {
        self.failure().map(|failure| EngineError::Failed { failure })
    }

    /// Records a panic (the first one wins) and logs it.
    fn record_failure(&self, operation: &'static str, message: &str) -> EngineError {
        log::error!(
            "internal error in {operation}: {message}; the volume now answers EIO and keeps its last \
             committed state: stop serving it and run `fsoc fsck`"
        );
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        let first = failure.get_or_insert_with(|| format!("{operation}: {message}"));
        EngineError::Failed { failure: first.clone() }
    }

    /// Runs one read-only request, holding the volume shared: several run at once. `inode`
    /// (the file the request is about, if one) is for log messages (`current_request`).
    pub fn read<T>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&S) -> T,
    ) -> Result<T, EngineError> {
        let _request = RequestScope::enter(operation, inode);
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(refusal) = self.refused() {
            return Err(refusal);
        }
        panic::catch_unwind(AssertUnwindSafe(|| body(&state)))
            .map_err(|payload| self.record_failure(operation, &panic_message(payload.as_ref())))
    }

    /// Runs one change, holding the volume exclusively, with the file system's clock set
    /// from the volume's clock. A panic inside `body` poisons the volume at once.
    pub fn change<T>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&mut S) -> T,
    ) -> Result<T, EngineError> {
        let _request = RequestScope::enter(operation, inode);
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(refusal) = self.refused() {
            // Also poisons the volume after a reader's panic: nothing more is written.
            state.file_system_mut().poison();
            return Err(refusal);
        }
        state.file_system_mut().now_ns = (self.clock)();
        match panic::catch_unwind(AssertUnwindSafe(|| body(&mut state))) {
            Ok(result) => Ok(result),
            Err(payload) => {
                let error = self.record_failure(operation, &panic_message(payload.as_ref()));
                state.file_system_mut().poison();
                Err(error)
            }
        }
    }

    /// Runs a change that leaves a flush running (`FileSystem::begin_fsync`, `begin_commit`),
    /// holding the volume exclusively, then waits for the flush with the volume released:
    /// readers, and the next change, run while the flash makes this one durable. The result
    /// comes back only once it is durable; a failed flush poisons the volume and is
    /// `EngineError::Flush`. Changes are ordered on the flash as they were made (the flash
    /// queues each after the previous one's barrier), so a later change's durability implies
    /// this one's.
    pub fn change_then_flush<T, E>(
        &self,
        operation: &'static str,
        inode: Option<u64>,
        body: impl FnOnce(&mut S) -> Result<(T, FlushWait), E>,
    ) -> Result<Result<T, E>, EngineError> {
        let (value, flush) = match self.change(operation, inode, body)? {
            Ok(started) => started,
            Err(error) => return Ok(Err(error)),
        };
        let _request = RequestScope::enter(operation, inode);
        match flush.wait() {
            Ok(()) => Ok(Ok(value)),
            Err(error) => {
                log::error!(
                    "{operation}: the flash did not make the commit durable: {error}; the volume stops changing"
                );
                let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
                state.file_system_mut().poison();
                Err(EngineError::Flush { reason: error.to_string() })
            }
        }
    }

    /// The state back, once no thread shares the volume any more, with the first panic's
    /// description if there was one (the file system is then poisoned: unmounting it leaves
    /// the last committed state on flash).
    pub fn into_inner(self) -> (S, Option<String>) {
        let mut state = self.state.into_inner().unwrap_or_else(PoisonError::into_inner);
        let failure = self.failure.into_inner().unwrap_or_else(PoisonError::into_inner);
        if failure.is_some() {
            state.file_system_mut().poison();
        }
        (state, failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::fs::FileKind;
    use fsoc_core::FsConfig;
    use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

    fn volume() -> SharedVolume<FileSystem<SimFlash<RamStore>>> {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 256, 1)).expect("flash");
        SharedVolume::new(FileSystem::format(flash, FsConfig::default(), 1).expect("format"))
    }

    /// A change that panics half-way is refused afterwards, and what the volume keeps is the
    /// last commit: the half-made file is gone after a remount.
    #[test]
    fn a_panic_in_a_change_stops_the_volume_at_its_last_commit() {
        let volume = volume();
        volume
            .change("create", None, |fs| {
                let inode = fs.create(1, b"kept", FileKind::File, 0o644, 0, 0, None)?;
                fs.write(inode, 0, b"committed")?;
                fs.fsync(inode)
            })
            .expect("not refused")
            .expect("create and fsync");
        let panicked = volume.change("write", Some(1), |fs| -> () {
            fs.create(1, b"half", FileKind::File, 0o644, 0, 0, None).expect("create");
            panic!("injected bug");
        });
        assert_eq!(panicked, Err(EngineError::Failed { failure: "write: injected bug".into() }));
        assert!(volume.read("getattr", Some(1), |fs| fs.getattr(1).is_ok()).is_err(), "later reads refused");
        assert!(volume.change("getattr", Some(1), |fs| fs.getattr(1).is_ok()).is_err(), "later changes refused");
        let (fs, failure) = volume.into_inner();
        assert_eq!(failure.as_deref(), Some("write: injected bug"));
        assert!(fs.is_poisoned());
        let flash = fs.unmount().expect("unmount of a poisoned volume returns the flash");
        let remounted = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        assert!(remounted.lookup(1, b"kept").is_ok(), "fsync'd file survives");
        assert!(remounted.lookup(1, b"half").is_err(), "the panicking change is gone");
    }

    #[test]
    fn a_panic_in_a_reader_stops_the_writers_too() {
        let volume = volume();
        let panicked = volume.read("lookup", Some(1), |_fs| -> () { panic!("injected reader bug") });
        assert!(panicked.is_err());
        let wrote = volume.change("create", None, |fs| fs.create(1, b"after", FileKind::File, 0o644, 0, 0, None));
        assert_eq!(
            wrote.map(|result| result.is_ok()),
            Err(EngineError::Failed { failure: "lookup: injected reader bug".into() })
        );
        let (fs, failure) = volume.into_inner();
        assert_eq!(failure.as_deref(), Some("lookup: injected reader bug"));
        assert!(fs.is_poisoned());
        assert_eq!(EngineError::Failed { failure: String::new() }.errno(), 5, "EIO");
    }

    #[test]
    fn readers_share_the_volume_and_changes_set_the_clock() {
        let volume = std::sync::Arc::new(volume());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        // Both readers hold the volume at the barrier at once: with an exclusive lock the
        // second could not enter and this would never return.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (volume, barrier) = (volume.clone(), barrier.clone());
                std::thread::spawn(move || {
                    volume.read("getattr", Some(1), |fs| {
                        barrier.wait();
                        fs.getattr(1).map(|record| record.kind)
                    })
                })
            })
            .collect();
        for thread in threads {
            assert_eq!(thread.join().expect("reader thread"), Ok(Ok(FileKind::Directory)));
        }
        let before = wall_clock_ns();
        let now = volume.change("touch", None, |fs| fs.now_ns).expect("change");
        assert!(now >= before, "a change runs at the wall clock: {now} < {before}");
    }

    #[test]
    fn the_current_request_is_named_inside_and_cleared_after() {
        let volume = volume();
        assert_eq!(current_request(), None);
        let inside = volume.read("readdir", Some(7), |_| current_request()).expect("read");
        assert_eq!(inside, Some(("readdir", Some(7))));
        assert_eq!(current_request(), None);
    }
}
