//! One chip's worker thread: it owns the chip's image file and executes that chip's storage
//! requests strictly in the order they were queued.
//!
//! Invariants: the queue is a bounded FIFO, so the file sees the chip's operations in issue
//! order and a full queue blocks the submitter; a failed asynchronous request (a program's
//! page write, a metadata update) is latched and reported by every later request and by the
//! submitter's next call, so no failure is silently lost, and no write queued after it
//! reaches the file. Write barriers are fences: a `Fence` puts everything queued before it in
//! the file and records that on the array's `FenceBoard`; an `AwaitFence` that follows it on
//! every chip holds that chip's later requests until every chip has passed the fence (or
//! latches a failure if one of them failed before it). The submitter never waits for either.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use fsoc_media::image::ImageStore;
use fsoc_media::store::{BlockMeta, PageMeta, PageStore};
use fsoc_media::{BlockAddress, NandError, PageAddress};

use crate::chip_files::ArrayError;

/// Page data followed by spare, as read from or written to a chip.
pub(crate) type PageBytes = Vec<u8>;
pub(crate) type ReadReply = Receiver<Result<PageBytes, String>>;

/// Fault injection shared with a worker thread: hold it (it executes nothing queued until
/// released) and emulate the death of the process (what is still queued never reaches the
/// file). A real `kill -9` loses exactly the queued requests; this makes that loss
/// deterministic for tests of the write order.
#[derive(Debug, Default)]
pub struct WorkerControl {
    held: Mutex<bool>,
    changed: Condvar,
    dead: AtomicBool,
}

impl WorkerControl {
    pub fn set_held(&self, held: bool) {
        if let Ok(mut guard) = self.held.lock() {
            *guard = held;
        }
        self.changed.notify_all();
    }

    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Waits while held; false once the process is "dead" (the worker then stops).
    fn may_run(&self) -> bool {
        let Ok(mut held) = self.held.lock() else { return false };
        while *held && !self.dead.load(Ordering::SeqCst) {
            held = match self.changed.wait(held) {
                Ok(guard) => guard,
                Err(_) => return false,
            };
        }
        !self.dead.load(Ordering::SeqCst)
    }
}

/// The array's write barriers as seen by its workers: the newest fence each chip has passed.
#[derive(Debug)]
pub(crate) struct FenceBoard {
    state: Mutex<FenceState>,
    changed: Condvar,
    /// Per chip: the number of the last write request (counted by the submitter) known to be
    /// in the chip file, set after a fence's or a flush's write-back succeeded.
    written_back: Vec<AtomicU64>,
}

#[derive(Debug)]
struct FenceState {
    /// Per chip: the newest fence whose earlier requests are all in the chip's file
    /// (`u64::MAX` once the worker has stopped normally: it holds nobody back any more).
    passed: Vec<u64>,
    /// A chip had a latched failure when it passed a fence: later writes must not follow.
    failed_chip: Option<usize>,
}

/// How long a worker waiting at a fence sleeps between checks of its own death (an emulated
/// `kill -9` stops the other workers without telling the board).
const FENCE_POLL: Duration = Duration::from_millis(5);

impl FenceBoard {
    pub fn new(chip_count: usize) -> Arc<FenceBoard> {
        Arc::new(FenceBoard {
            state: Mutex::new(FenceState { passed: vec![0; chip_count], failed_chip: None }),
            changed: Condvar::new(),
            written_back: (0..chip_count).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// The number of chip `chip`'s last write request known to be in its file.
    pub fn written_back(&self, chip: u32) -> u64 {
        self.written_back.get(chip as usize).map_or(0, |count| count.load(Ordering::Acquire))
    }

    fn set_written_back(&self, chip: u32, through: u64) {
        if let Some(count) = self.written_back.get(chip as usize) {
            count.fetch_max(through, Ordering::AcqRel);
        }
    }

    fn pass(&self, chip: u32, epoch: u64, failed: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(passed) = state.passed.get_mut(chip as usize) {
            *passed = (*passed).max(epoch);
        }
        if failed {
            state.failed_chip.get_or_insert(chip as usize);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Waits until every chip has passed fence `epoch`: `Ok(None)` then, `Ok(Some(chip))` if a
    /// chip had failed by then, `Err(())` if this worker died while waiting.
    fn wait(&self, epoch: u64, control: &WorkerControl) -> Result<Option<usize>, ()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if control.is_dead() {
                return Err(());
            }
            if let Some(chip) = state.failed_chip {
                return Ok(Some(chip));
            }
            if state.passed.iter().all(|&passed| passed >= epoch) {
                return Ok(None);
            }
            state = self.changed.wait_timeout(state, FENCE_POLL).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

/// Marks the worker's chip as holding nobody back when its thread ends, unless the emulated
/// process died (then what the others still hold must stay out of their files).
struct PassOnExit<'a> {
    chip: u32,
    board: &'a FenceBoard,
    control: &'a WorkerControl,
}

impl Drop for PassOnExit<'_> {
    fn drop(&mut self) {
        if !self.control.is_dead() {
            self.board.pass(self.chip, u64::MAX, std::thread::panicking());
        }
    }
}

/// Everything the caller needs to rebuild its metadata mirror of one chip.
#[derive(Debug, Default)]
pub(crate) struct ChipMetadata {
    /// One entry per block, in block order.
    pub blocks: Vec<BlockMeta>,
    /// (block, page_index, meta) of every page that is not pristine.
    pub pages: Vec<(u32, u32, PageMeta)>,
}

/// A change to one chip's file. Addresses are the chip file's own (chip 0).
pub(crate) enum Write {
    Contents {
        page: PageAddress,
        /// Shared with the store's in-flight table, which serves reads until it is written back.
        bytes: Arc<PageBytes>,
        data_bytes: usize,
    },
    PageMeta {
        page: PageAddress,
        meta: PageMeta,
    },
    BlockMeta {
        block: BlockAddress,
        meta: BlockMeta,
    },
    ResetBlockPages {
        block: BlockAddress,
    },
}

/// A storage request for one chip. Addresses are the chip file's own (chip 0).
pub(crate) enum Request {
    Write(Write),
    ReadContents {
        page: PageAddress,
        data_bytes: usize,
        spare_bytes: usize,
        reply: SyncSender<Result<PageBytes, String>>,
    },
    LoadMetadata {
        reply: SyncSender<Result<ChipMetadata, String>>,
    },
    /// Writes back and syncs the file; `through` is the number of the chip's last write
    /// request queued before it.
    Flush {
        reply: SyncSender<Result<(), String>>,
        through: u64,
    },
    /// A write barrier, first half: puts everything queued before it in the file (the chip's
    /// write requests up to number `through`) and records fence `epoch` as passed on the
    /// array's board.
    Fence {
        epoch: u64,
        through: u64,
    },
    /// A write barrier, second half: executes nothing more until every chip has passed fence
    /// `epoch` (queued on every chip after its `Fence`).
    AwaitFence {
        epoch: u64,
    },
}

/// Requests travel to the worker in batches (one queue slot, one wake-up): changes are
/// gathered until a batch holds this many requests or `BATCH_CONTENTS_BYTES_MAX` of page
/// contents, or until any other request (a read, fence or flush) joins it and sends it. Order
/// within and across batches is the submitter's. A queue thus holds at most `queue_depth_max`
/// batches: about 2 MiB of contents per chip at the default depth of 64.
const BATCH_REQUESTS_MAX: usize = 64;
const BATCH_CONTENTS_BYTES_MAX: usize = 32 << 10;

/// Requests not yet handed to the worker.
#[derive(Default)]
struct Batch {
    requests: Vec<Request>,
    contents_bytes: usize,
}

pub(crate) struct ChipWorker {
    chip: u32,
    sender: Option<SyncSender<Vec<Request>>>,
    /// Requests gathered for the next batch.
    batch: Mutex<Batch>,
    handle: Option<JoinHandle<()>>,
    /// The first failure of an asynchronous request, shared with the thread.
    failure: Arc<Mutex<Option<String>>>,
    control: Arc<WorkerControl>,
}

impl ChipWorker {
    /// Starts the worker of chip `chip` over `store` (a one-chip image).
    pub fn spawn(
        chip: u32,
        store: ImageStore,
        queue_depth_max: usize,
        board: Arc<FenceBoard>,
    ) -> Result<ChipWorker, ArrayError> {
        assert_eq!(store.chip_count(), 1, "chip {chip}: a chip file holds one chip");
        let (sender, receiver) = sync_channel(queue_depth_max.max(1));
        let failure = Arc::new(Mutex::new(None));
        let thread_failure = Arc::clone(&failure);
        let control = Arc::new(WorkerControl::default());
        let thread_control = Arc::clone(&control);
        let handle = std::thread::Builder::new()
            .name(format!("fsoc-chip{chip}"))
            .spawn(move || {
                let _pass = PassOnExit { chip, board: &board, control: &thread_control };
                run(chip, store, receiver, thread_failure, &thread_control, &board);
            })
            .map_err(|error| ArrayError::Worker { chip, reason: error.to_string() })?;
        Ok(ChipWorker {
            chip,
            sender: Some(sender),
            batch: Mutex::new(Batch::default()),
            handle: Some(handle),
            failure,
            control,
        })
    }

    pub fn control(&self) -> Arc<WorkerControl> {
        Arc::clone(&self.control)
    }

    fn stopped(&self, reason: &str) -> NandError {
        NandError::Image(format!("chip {} worker: {reason}", self.chip))
    }

    /// The latched failure, if an earlier asynchronous request failed.
    pub fn check(&self) -> Result<(), NandError> {
        let failure = self.failure.lock().map_err(|_| self.stopped("panicked"))?;
        match failure.as_ref() {
            Some(message) => Err(self.stopped(message)),
            None => Ok(()),
        }
    }

    /// Queues a request, with the requests gathered before it (blocking while the queue is
    /// full).
    pub fn submit(&self, request: Request) -> Result<(), NandError> {
        self.gather(request)?;
        self.hand_over()
    }

    /// Gathers a request for the worker without waking it; it is queued with the next batch,
    /// which this call hands over once full. Changes need not reach the worker promptly: the
    /// caller serves reads of pages in flight from its own table.
    pub fn gather(&self, request: Request) -> Result<(), NandError> {
        self.check()?;
        let full = {
            let mut batch = self.batch.lock().map_err(|_| self.stopped("batch lock poisoned"))?;
            if let Request::Write(Write::Contents { bytes, .. }) = &request {
                batch.contents_bytes += bytes.len();
            }
            batch.requests.push(request);
            batch.requests.len() >= BATCH_REQUESTS_MAX || batch.contents_bytes >= BATCH_CONTENTS_BYTES_MAX
        };
        if full {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Queues the gathered requests, if any, as one batch.
    pub fn hand_over(&self) -> Result<(), NandError> {
        let requests = {
            let mut batch = self.batch.lock().map_err(|_| self.stopped("batch lock poisoned"))?;
            batch.contents_bytes = 0;
            std::mem::take(&mut batch.requests)
        };
        if requests.is_empty() {
            return Ok(());
        }
        self.check()?;
        let sender = self.sender.as_ref().ok_or_else(|| self.stopped("closed"))?;
        sender.send(requests).map_err(|_| self.stopped("stopped"))
    }

    /// Queues a read of `page`; the contents arrive on the returned channel once every earlier
    /// request of this chip has been executed.
    pub fn read(&self, page: PageAddress, data_bytes: usize, spare_bytes: usize) -> Result<ReadReply, NandError> {
        let (reply, receiver) = sync_channel(1);
        self.submit(Request::ReadContents { page, data_bytes, spare_bytes, reply })?;
        Ok(receiver)
    }

    /// Waits for a reply from this worker.
    pub fn wait<T>(&self, receiver: &Receiver<Result<T, String>>) -> Result<T, NandError> {
        wait_reply(self.chip, receiver)
    }

    pub fn load_metadata(&self) -> Result<ChipMetadata, NandError> {
        let (reply, receiver) = sync_channel(1);
        self.submit(Request::LoadMetadata { reply })?;
        self.wait(&receiver)
    }

    /// Queues a flush after the chip's write request number `through`; wait for it with
    /// `wait` (so several chips flush in parallel).
    pub fn flush(&self, through: u64) -> Result<Receiver<Result<(), String>>, NandError> {
        let (reply, receiver) = sync_channel(1);
        self.submit(Request::Flush { reply, through })?;
        Ok(receiver)
    }

    /// Lets the worker finish every queued request and stops it (a held worker is released
    /// first, so a test that fails while holding a chip does not hang in the drop).
    pub fn close(&mut self) -> Result<(), NandError> {
        // Gathered changes reach the file like queued ones (unless the process "died").
        let handed_over = if self.control.is_dead() { Ok(()) } else { self.hand_over() };
        self.sender = None;
        self.control.set_held(false);
        if let Some(handle) = self.handle.take() {
            handle.join().map_err(|_| self.stopped("panicked"))?;
        }
        handed_over.and(self.check())
    }
}

/// Waits for a reply from chip `chip`'s worker (usable without the worker, e.g. by a read
/// collected after the simulator's lock is released).
pub(crate) fn wait_reply<T>(chip: u32, receiver: &Receiver<Result<T, String>>) -> Result<T, NandError> {
    let stopped = |reason: &str| NandError::Image(format!("chip {chip} worker: {reason}"));
    match receiver.recv() {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(message)) => Err(stopped(&message)),
        Err(_) => Err(stopped("stopped before replying")),
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        // Queued writes still reach the file; a failure here has nowhere to go but `close`.
        let _ = self.close();
    }
}

/// The first latched failure of a worker, if any.
fn latched(failure: &Mutex<Option<String>>) -> Option<String> {
    failure.lock().ok().and_then(|guard| guard.clone())
}

/// Latches `error` unless an earlier failure is latched already.
fn latch(failure: &Mutex<Option<String>>, error: NandError) {
    if let Ok(mut guard) = failure.lock() {
        guard.get_or_insert_with(|| error.to_string());
    }
}

/// The worker loop: executes batches of requests until every sender is gone.
fn run(
    chip: u32,
    mut store: ImageStore,
    receiver: Receiver<Vec<Request>>,
    failure: Arc<Mutex<Option<String>>>,
    control: &WorkerControl,
    board: &FenceBoard,
) {
    while let Ok(batch) = receiver.recv() {
        for request in batch {
            // Once the emulated process died, this request, every queued one and every change
            // the store had not yet written back are lost.
            if !control.may_run() || !execute(chip, &mut store, request, &failure, control, board) {
                store.abandon();
                return;
            }
        }
    }
}

/// Executes one request of chip `chip`'s worker; false when the emulated process died while
/// the request waited (the worker then stops).
fn execute(
    chip: u32,
    store: &mut ImageStore,
    request: Request,
    failure: &Mutex<Option<String>>,
    control: &WorkerControl,
    board: &FenceBoard,
) -> bool {
    match request {
        Request::Write(write) => {
            // Nothing queued after a failure may reach the file (a commit's metaroot must not
            // follow pages that were never written).
            if latched(failure).is_none() {
                if let Err(error) = execute_write(store, write) {
                    latch(failure, error);
                }
            }
        }
        Request::ReadContents { page, data_bytes, spare_bytes, reply } => {
            let result = match latched(failure) {
                Some(message) => Err(message),
                None => {
                    let mut bytes = vec![0u8; data_bytes + spare_bytes];
                    let (data, spare) = bytes.split_at_mut(data_bytes);
                    store.read_contents(page, data, spare).map(|()| bytes).map_err(|error| error.to_string())
                }
            };
            // The reader may have given up (a discarded prefetch): nothing to do then.
            let _ = reply.send(result);
        }
        Request::LoadMetadata { reply } => {
            let result = store.write_back().map_err(|error| error.to_string());
            let _ = reply.send(result.and_then(|()| load_metadata(store)));
        }
        Request::Flush { reply, through } => {
            let result = match latched(failure) {
                Some(message) => Err(message),
                None => store.flush().map_err(|error| error.to_string()),
            };
            if result.is_ok() {
                board.set_written_back(chip, through);
            }
            let _ = reply.send(result);
        }
        Request::Fence { epoch, through } => {
            // Everything queued before the barrier reaches the file before anything after.
            if let Err(error) = store.write_barrier() {
                latch(failure, error);
            }
            let failed = latched(failure).is_some();
            if !failed {
                board.set_written_back(chip, through);
            }
            board.pass(chip, epoch, failed);
        }
        Request::AwaitFence { epoch } => match board.wait(epoch, control) {
            Ok(None) => {}
            Ok(Some(failed)) => latch(
                failure,
                NandError::Image(format!("chip {failed} failed before a write barrier; later writes are held back")),
            ),
            Err(()) => return false,
        },
    }
    true
}

/// Applies one change to the chip file.
fn execute_write(store: &mut ImageStore, write: Write) -> Result<(), NandError> {
    match write {
        Write::Contents { page, bytes, data_bytes } => {
            let (data, spare) = bytes.split_at(data_bytes.min(bytes.len()));
            store.write_contents(page, data, spare)
        }
        Write::PageMeta { page, meta } => store.set_page_meta(page, &meta),
        Write::BlockMeta { block, meta } => store.set_block_meta(block, &meta),
        Write::ResetBlockPages { block } => store.reset_block_pages(block),
    }
}

/// Reads the chip's whole metadata: the block table (cached by `ImageStore`) and every page
/// entry that differs from pristine.
fn load_metadata(store: &ImageStore) -> Result<ChipMetadata, String> {
    let geometry = store.geometry();
    let mut metadata = ChipMetadata::default();
    for block_index in 0..geometry.block_count {
        let block = BlockAddress::new(0, block_index);
        metadata.blocks.push(store.block_meta(block).map_err(|error| error.to_string())?);
        for page_index in 0..geometry.pages_per_block {
            let meta =
                store.page_meta(PageAddress::new(0, block_index, page_index)).map_err(|error| error.to_string())?;
            if !meta.is_pristine() {
                metadata.pages.push((block_index, page_index, meta));
            }
        }
    }
    Ok(metadata)
}
