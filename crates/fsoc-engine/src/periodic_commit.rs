//! `PeriodicCommitter`: a transaction point every `interval` while the volume has uncommitted
//! changes (ext4's `commit=5`, Reliance Edge's timer trigger), so work left on a served volume
//! survives a crash of the server within about that time.
//!
//! Invariants: the thread holds only a weak reference, so it never keeps the volume alive; each
//! commit runs as a `change` like any request (alone, panics contained); after a failed commit
//! it stops, since the volume then answers EIO.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::shared_volume::{SharedVolume, VolumeState};

/// The default interval of the FUSE mount and the 9P server.
pub const COMMIT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

pub struct PeriodicCommitter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeriodicCommitter {
    /// Starts the thread; `stop` ends it.
    pub fn start<S>(volume: Weak<SharedVolume<S>>, interval: Duration) -> std::io::Result<PeriodicCommitter>
    where
        S: VolumeState + Send + Sync + 'static,
    {
        assert!(!interval.is_zero(), "a zero commit interval would commit in a busy loop");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("fsoc-commit".into()).spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                std::thread::park_timeout(interval);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Some(volume) = volume.upgrade() else { return };
                let result = volume.change("periodic commit", None, |state| {
                    let fs = state.file_system_mut();
                    if fs.has_uncommitted_changes() {
                        fs.commit_for_sync().inspect_err(|error| log::error!("periodic commit failed: {error}"))
                    } else {
                        Ok(())
                    }
                });
                drop(volume);
                if !matches!(result, Ok(Ok(()))) {
                    return; // the volume answers EIO from now on; nothing more to commit
                }
            }
        })?;
        Ok(PeriodicCommitter { stop, thread })
    }

    /// Stops the thread and waits for it (a commit under way finishes first).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::fs::FileKind;
    use fsoc_core::{FileSystem, FsConfig};
    use fsoc_media::{Profile, SimConfig, SimFlash};

    /// A change left uncommitted is committed by the thread within a few intervals.
    #[test]
    fn uncommitted_changes_are_committed_within_the_interval() {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 256, 1)).expect("flash");
        let volume = Arc::new(SharedVolume::new(FileSystem::format(flash, FsConfig::default(), 1).expect("format")));
        let committer =
            PeriodicCommitter::start(Arc::downgrade(&volume), Duration::from_millis(20)).expect("committer");
        volume
            .change("create", None, |fs| fs.create(1, b"late", FileKind::File, 0o644, 0, 0, None))
            .expect("change")
            .expect("create");
        let mut committed = false;
        for _ in 0..500 {
            std::thread::sleep(Duration::from_millis(10));
            if !volume.read("check", None, |fs| fs.has_uncommitted_changes()).expect("read") {
                committed = true;
                break;
            }
        }
        committer.stop();
        assert!(committed, "the change was not committed within 5 s");
    }
}
