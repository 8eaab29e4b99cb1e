//! `BackgroundScrubber`: reads the whole log a few pages at a time while a volume is served,
//! so data that retention or read disturb is wearing away is found, and refreshed, before a
//! read of it fails (fsoc-core's fs/scrub.rs explains refresh).
//!
//! Each step reads up to `SCRUB_STEP_PAGES` pages through `FileSystem::scrub_step` inside a
//! `read` (shared with requests, like any reader); when reads have marked a segment weak, one
//! segment is refreshed inside a `change` (alone, like any request that writes; the next
//! transaction point makes it durable). The rate is in pages per second, so the work it adds is
//! bounded and known: at the default 128 pages a second a 1 GiB volume of 2 KiB pages is read
//! in about 70 minutes.
//!
//! Invariants: the thread holds only a weak reference (it never keeps the volume alive); it
//! stops when the volume is poisoned or gone; a read-only volume is read but never refreshed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use fsoc_core::fs::ScrubCursor;

use crate::shared_volume::{SharedVolume, VolumeState};

/// Pages a second the FUSE mount and the 9P server scrub unless told otherwise.
pub const SCRUB_PAGES_PER_SECOND_DEFAULT: u32 = 128;
/// Pages one step reads at most (one `read` of the volume).
pub const SCRUB_STEP_PAGES: u32 = 64;

/// What the background scrub has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubStatus {
    /// Times it went round the whole log.
    pub passes: u64,
    pub pages_read: u64,
    /// Pages the ECC could not correct (not all need be live: a step cannot tell).
    pub unreadable_pages: u64,
    /// Live file data pages whose content failed its recorded checksum.
    pub checksum_failed_pages: u64,
    /// Weak segments whose data it moved.
    pub segments_refreshed: u64,
}

pub struct BackgroundScrubber {
    stop: Arc<AtomicBool>,
    status: Arc<Mutex<ScrubStatus>>,
    thread: std::thread::JoinHandle<()>,
}

impl BackgroundScrubber {
    /// Starts the thread at `pages_per_second` (at least 1) on the volume `volume` holds (a
    /// `SharedVolume`, or a front end's wrapper of one); `refresh` says whether it may move
    /// weak data (not on a read-only volume). `stop` ends it.
    pub fn start<V, S>(volume: Weak<V>, pages_per_second: u32, refresh: bool) -> std::io::Result<BackgroundScrubber>
    where
        V: AsRef<SharedVolume<S>> + Send + Sync + 'static,
        S: VolumeState + 'static,
    {
        let pages_per_second = pages_per_second.max(1);
        let step_pages = pages_per_second.min(SCRUB_STEP_PAGES);
        let interval = Duration::from_secs_f64(f64::from(step_pages) / f64::from(pages_per_second));
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(Mutex::new(ScrubStatus::default()));
        let (stopped, shared_status) = (stop.clone(), status.clone());
        let thread = std::thread::Builder::new().name("fsoc-scrub".into()).spawn(move || {
            let mut cursor = ScrubCursor::default();
            while !stopped.load(Ordering::Acquire) {
                std::thread::park_timeout(interval);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Some(volume) = volume.upgrade() else { return };
                let keep_going = scrub_once((*volume).as_ref(), &mut cursor, step_pages, refresh, &shared_status);
                drop(volume);
                if !keep_going {
                    return;
                }
            }
        })?;
        Ok(BackgroundScrubber { stop, status, thread })
    }

    /// What it has done so far.
    pub fn status(&self) -> ScrubStatus {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops the thread and waits for it (a step under way finishes first); logs and answers
    /// what it did.
    pub fn stop(self) -> ScrubStatus {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        let status = *self.status.lock().unwrap_or_else(PoisonError::into_inner);
        log::info!(
            "background scrub: {} pages read, {} segments refreshed, {} pages unreadable, {} failing their checksum",
            status.pages_read,
            status.segments_refreshed,
            status.unreadable_pages,
            status.checksum_failed_pages
        );
        status
    }
}

/// One step: read, then refresh one weak segment if reads found any. Answers whether to go on
/// (not once the volume refuses requests).
fn scrub_once<S: VolumeState>(
    volume: &SharedVolume<S>,
    cursor: &mut ScrubCursor,
    step_pages: u32,
    refresh: bool,
    status: &Mutex<ScrubStatus>,
) -> bool {
    let loaded = volume.read("background scrub", None, |state| state.file_system().segment_table_loaded());
    match loaded {
        Err(_) => return false,
        Ok(true) => {}
        Ok(false) => {
            // Mount reads the segment table on demand; the scrub needs it now.
            match volume.change("background scrub", None, |state| state.file_system_mut().load_segment_table()) {
                Err(_) => return false,
                Ok(Err(error)) => {
                    log::warn!("background scrub: the segment table does not load: {error}; stopping");
                    return false;
                }
                Ok(Ok(())) => {}
            }
        }
    }
    let passes_before = cursor.passes;
    let step = match volume.read("background scrub", None, |state| state.file_system().scrub_step(cursor, step_pages)) {
        Err(_) => return false, // the volume is poisoned: it answers EIO from now on
        Ok(Err(error)) => {
            // A read the flash refused outright: skip past it; the next pass comes back.
            log::warn!("background scrub: {error}; going on with the next segment");
            cursor.segment = cursor.segment.saturating_add(1);
            cursor.page = 0;
            return true;
        }
        Ok(Ok(step)) => step,
    };
    // A read-only mount reads but moves nothing, until it is remounted writable.
    let weak = volume.read("background scrub", None, |state| {
        state.file_system().weak_segment_count() > 0 && !state.file_system().is_read_only()
    });
    let mut refreshed = 0;
    if refresh && matches!(weak, Ok(true)) {
        match volume.change("refresh", None, |state| state.file_system_mut().refresh_weak_segments(1)) {
            Err(_) => return false,
            Ok(Err(error)) => log::warn!("background scrub: refreshing a weak segment failed: {error}"),
            Ok(Ok(report)) => refreshed = report.segments_refreshed,
        }
    }
    let mut status = status.lock().unwrap_or_else(PoisonError::into_inner);
    status.passes = cursor.passes;
    status.pages_read += step.pages_read;
    status.unreadable_pages += step.unreadable_pages;
    status.checksum_failed_pages += step.checksum_failed_pages;
    status.segments_refreshed += u64::from(refreshed);
    if step.checksum_failed_pages > 0 {
        log::error!(
            "background scrub: {} live data page(s) fail their checksum (reads of them answer EIO); run `fsoc fsck`",
            step.checksum_failed_pages
        );
    }
    if cursor.passes > passes_before {
        log::info!(
            "background scrub: pass {} done ({} pages read, {} refreshed segments so far)",
            cursor.passes,
            status.pages_read,
            status.segments_refreshed
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::{FileSystem, FsConfig};
    use fsoc_media::{Profile, SimConfig, SimFlash};

    /// The thread goes round the log and refreshes a segment a read found weak.
    #[test]
    fn the_scrubber_goes_round_the_log_and_refreshes_what_is_weak() {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 1, 64, 1)).expect("flash");
        let mut fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
        let data: Vec<u8> = (0..200_000u32).map(|index| (index % 251) as u8).collect();
        let flags = fsoc_core::OpenFlags { read: true, write: true, create: true, ..Default::default() };
        let fd = fs.open(b"/big", flags, 0o644).expect("open");
        fs.pwrite(fd, 0, &data).expect("write");
        fs.close(fd).expect("close");
        fs.transact().expect("commit");
        // Three bits in one sector of the file's first page: weak (the code corrects four).
        let layout = fs.layout();
        let (inode, _) = fs.resolve(b"/big").expect("resolve");
        let first = (0..layout.segment_count())
            .flat_map(|segment| (0..layout.pages_per_segment()).map(move |page| layout.address(segment, page)))
            .map(|address| layout.physical(address))
            .find(|&page| {
                let geometry = fsoc_flash::Flash::geometry(fs.flash());
                let mut bytes = vec![0u8; geometry.page_data_bytes as usize];
                let mut spare = vec![0u8; geometry.spare_bytes as usize];
                fsoc_flash::Flash::read_page(fs.flash(), 0, page, &mut bytes, &mut spare).is_ok()
                    && fsoc_core::segment::PageTag::decode(&spare)
                        == Some(fsoc_core::segment::PageTag::Data { inode, page_index: 0 })
            })
            .expect("the file's first page");
        fs.flash_mut().inject_bit_flips_at(first, &[1, 100, 2000]).expect("inject");
        let volume = Arc::new(SharedVolume::new(fs));
        let scrubber = BackgroundScrubber::start(Arc::downgrade(&volume), 100_000, true).expect("scrubber");
        for _ in 0..500 {
            let status = scrubber.status();
            if status.passes >= 1 && status.segments_refreshed >= 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = scrubber.stop();
        assert!(status.passes >= 1, "{status:?}");
        assert_eq!(status.segments_refreshed, 1, "{status:?}");
        assert_eq!((status.unreadable_pages, status.checksum_failed_pages), (0, 0));
        let back = volume
            .read("check", None, |fs| {
                let mut buffer = vec![0u8; data.len()];
                fs.read_into(inode, 0, &mut buffer).map(|read| buffer[..read].to_vec())
            })
            .expect("read")
            .expect("read back");
        assert_eq!(back, data);
    }
}
