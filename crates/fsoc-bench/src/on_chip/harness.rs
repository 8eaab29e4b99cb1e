//! The two devices of seed 000's comparison, on the same simulated chips in RAM, each with its
//! flash behind a `MeteredFlash` so both count the same things: the file system on the chip
//! (`OnChip`: fsoc serve over 9P2000.L, reached with fsoc-client) and the conventional device
//! (`Conventional`: fsoc serve --raw, the host running fsoc over `RemoteFlash`).
//!
//! Invariant: the meter sits between the device's file system (or raw server) and its chips
//! in both modes, so page and time counts of the two modes are counted at the same place.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fsoc_client::{Client, ConnectOptions};
use fsoc_core::segment::PageTag;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, FlushWait, Geometry, NandError, Nanos, PageAddress, ReadStatus, Timing,
};
use fsoc_media::{RamStore, SimConfig, SimFlash};
use fsoc_serve::{ListenAddress, RawServer, RemoteFlash, ServeConfig, Server, Stopper, WireCounters};

use crate::target::BenchError;

/// The server's settings for a measured device: no periodic transaction point and no
/// background scrub, whose page reads would land at wall-clock moments and make the counted
/// pages and chip time differ from run to run (the scrub arrived with issue 12).
pub(crate) fn quiet_serve_config() -> ServeConfig {
    ServeConfig { commit_interval: None, scrub_pages_per_second: 0, ..ServeConfig::default() }
}

pub(crate) fn setup(context: &str) -> impl Fn(String) -> BenchError + '_ {
    move |message| BenchError::Setup(format!("{context}: {message}"))
}

pub(crate) fn io_setup(context: &str) -> impl Fn(io::Error) -> BenchError + '_ {
    move |error| BenchError::Setup(format!("{context}: {error}"))
}

/// One page read seen by the meter while tracing: where, and what the page's spare tag says
/// it holds (file data pages name their inode and page index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracedRead {
    pub page: PageAddress,
    pub tag: Option<PageTag>,
}

/// What a `MeteredFlash` counted; shared with the benchmark while the flash is owned by a
/// server.
#[derive(Debug, Default)]
pub struct Meter {
    pages_read: AtomicU64,
    pages_programmed: AtomicU64,
    blocks_erased: AtomicU64,
    /// The latest completion time of any operation: the device's clock, as far as its chips
    /// are concerned.
    done_max_ns: AtomicU64,
    tracing: AtomicBool,
    trace: Mutex<Vec<TracedRead>>,
}

/// A snapshot of a meter, for differences over a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeterReading {
    pub pages_read: u64,
    pub pages_programmed: u64,
    pub blocks_erased: u64,
    pub done_max_ns: u64,
}

impl MeterReading {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &MeterReading) -> MeterReading {
        MeterReading {
            pages_read: self.pages_read - earlier.pages_read,
            pages_programmed: self.pages_programmed - earlier.pages_programmed,
            blocks_erased: self.blocks_erased - earlier.blocks_erased,
            done_max_ns: self.done_max_ns.saturating_sub(earlier.done_max_ns),
        }
    }

    /// Pages the file system's code handled (each checksummed and copied once).
    pub fn pages(&self) -> u64 {
        self.pages_read + self.pages_programmed
    }
}

impl Meter {
    pub fn reading(&self) -> MeterReading {
        MeterReading {
            pages_read: self.pages_read.load(Ordering::Acquire),
            pages_programmed: self.pages_programmed.load(Ordering::Acquire),
            blocks_erased: self.blocks_erased.load(Ordering::Acquire),
            done_max_ns: self.done_max_ns.load(Ordering::Acquire),
        }
    }

    /// Starts recording every page read (clearing what was recorded).
    pub fn start_trace(&self) {
        self.trace.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.tracing.store(true, Ordering::Release);
    }

    /// Stops recording and returns the reads since `start_trace`, in the order the meter saw
    /// them.
    pub fn take_trace(&self) -> Vec<TracedRead> {
        self.tracing.store(false, Ordering::Release);
        std::mem::take(&mut *self.trace.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn completed(&self, done_ns: Nanos) {
        self.done_max_ns.fetch_max(done_ns, Ordering::AcqRel);
    }
}

/// A `Flash` that counts what passes through it into a shared `Meter`; otherwise the flash
/// under it, unchanged.
#[derive(Debug)]
pub struct MeteredFlash<F> {
    inner: F,
    meter: Arc<Meter>,
}

impl<F: Flash> MeteredFlash<F> {
    pub fn new(inner: F) -> (MeteredFlash<F>, Arc<Meter>) {
        let meter = Arc::new(Meter::default());
        (MeteredFlash { inner, meter: Arc::clone(&meter) }, meter)
    }

    pub fn into_inner(self) -> F {
        self.inner
    }
}

impl<F: Flash> Flash for MeteredFlash<F> {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn chip_count(&self) -> u32 {
        self.inner.chip_count()
    }
    fn timing(&self) -> Timing {
        self.inner.timing()
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        let completed = self.inner.read_page(issue_ns, page, data, spare)?;
        self.meter.pages_read.fetch_add(1, Ordering::AcqRel);
        self.meter.completed(completed.done_ns);
        if self.meter.tracing.load(Ordering::Acquire) {
            let read = TracedRead { page, tag: PageTag::decode(spare) };
            self.meter.trace.lock().unwrap_or_else(PoisonError::into_inner).push(read);
        }
        Ok(completed)
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        let completed = self.inner.program_page(issue_ns, page, data, spare)?;
        self.meter.pages_programmed.fetch_add(1, Ordering::AcqRel);
        self.meter.completed(completed.done_ns);
        Ok(completed)
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        let completed = self.inner.erase_block(issue_ns, block)?;
        self.meter.blocks_erased.fetch_add(1, Ordering::AcqRel);
        self.meter.completed(completed.done_ns);
        Ok(completed)
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.inner.is_bad_block(block)
    }
    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.inner.mark_bad_block(block)
    }
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.inner.busy_until_ns(chip)
    }
    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.inner.erase_count(block)
    }
    fn paired_page_distance(&self) -> u32 {
        self.inner.paired_page_distance()
    }
    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        self.inner.ecc_correctable_bits_per_512()
    }
    fn flush(&mut self) -> Result<(), NandError> {
        self.inner.flush()
    }
    fn begin_flush(&mut self) -> Result<FlushWait, NandError> {
        self.inner.begin_flush()
    }
    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.inner.write_barrier()
    }
    // `prefetch` and `read_pages` keep the trait's defaults: every page goes through
    // `read_page` above and is counted (the chips are in RAM, so nothing is lost by it).
}

pub type DeviceFlash = MeteredFlash<SimFlash<RamStore>>;

fn device(sim: &SimConfig) -> Result<(DeviceFlash, Arc<Meter>), BenchError> {
    let flash = SimFlash::create(sim.clone()).map_err(|error| setup("device")(error.to_string()))?;
    Ok(MeteredFlash::new(flash))
}

/// Waits until every request the 9P server has read has its reply counted (clunks are sent
/// without waiting for their replies), at most a second.
pub fn settle(counters: &WireCounters) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let snapshot = counters.snapshot();
        let requests: u64 =
            snapshot.iter().filter(|count| count.message_type % 2 == 0).map(|count| count.messages).sum();
        let replies: u64 =
            snapshot.iter().filter(|count| count.message_type % 2 == 1).map(|count| count.messages).sum();
        if requests == replies || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Frames and bytes on the wire, both directions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub bytes: u64,
    pub messages: u64,
}

impl Traffic {
    pub fn of(counters: &WireCounters) -> Traffic {
        Traffic { bytes: counters.total_bytes(), messages: counters.total_messages() }
    }

    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic { bytes: self.bytes - earlier.bytes, messages: self.messages - earlier.messages }
    }

    /// Requests among the frames (each request has one reply).
    pub fn requests(&self) -> u64 {
        self.messages / 2
    }
}

/// Bytes per Twrite of `OnChip::write_in_order`.
const WRITE_CHUNK_BYTES: usize = 256 << 10;

/// The file system on the chip: a 9P server over the device's volume, and a client.
pub struct OnChip {
    client: Option<Client>,
    pub counters: Arc<WireCounters>,
    pub meter: Arc<Meter>,
    stopper: Stopper,
    thread: Option<std::thread::JoinHandle<Option<DeviceFlash>>>,
}

impl OnChip {
    pub fn start(sim: &SimConfig, serve: ServeConfig, socket: &Path) -> Result<OnChip, BenchError> {
        let (flash, meter) = device(sim)?;
        let fs = FileSystem::format(flash, FsConfig::default(), sim.seed)
            .map_err(|error| setup("format")(error.to_string()))?;
        let address = ListenAddress::Unix(socket.to_path_buf());
        let listener = address.bind().map_err(|error| setup("listen")(error.to_string()))?;
        let server = Server::new(fs, serve).map_err(|error| setup("server")(error.to_string()))?;
        let (counters, stopper) = (server.counters(), server.stopper());
        let thread = std::thread::spawn(move || {
            let served = server.run(&listener).ok()?;
            served.fs.unmount().ok()
        });
        let options = ConnectOptions { requests_in_flight_max: 64, ..ConnectOptions::default() };
        let client = Client::connect(&format!("unix:{}", socket.display()), &options).map_err(io_setup("connect"))?;
        Ok(OnChip { client: Some(client), counters, meter, stopper, thread: Some(thread) })
    }

    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("connected until dropped")
    }

    /// Writes `data` to a new file at `path` one Twrite at a time, each waited for, then makes
    /// it durable. (`Client::write` keeps several Twrites in flight, which the server may run
    /// in any order: the file's pages would land on chips in the order threads ran.)
    pub fn write_in_order(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let file = self.client().create(path)?;
        let mut offset = 0;
        while offset < data.len() {
            let end = (offset + WRITE_CHUNK_BYTES).min(data.len());
            let written = file.write_at(&data[offset..end], offset as u64)?;
            if written == 0 {
                return Err(io::Error::other(format!("{path}: nothing written at {offset}")));
            }
            offset += written;
        }
        drop(file);
        self.client().sync()
    }

    /// What the wire and the chips have counted so far (replies all counted).
    pub fn reading(&self) -> (Traffic, MeterReading) {
        // Clunks go out without waiting: their replies (hence their requests) are counted
        // only once they have come back.
        if let Some(client) = &self.client {
            let _ = client.wait_idle();
        }
        settle(&self.counters);
        (Traffic::of(&self.counters), self.meter.reading())
    }

    /// Stops the server, unmounts the volume and hands back the device's chips.
    pub fn stop(mut self) -> Option<DeviceFlash> {
        self.client = None;
        self.stopper.stop();
        self.thread.take().and_then(|thread| thread.join().ok().flatten())
    }
}

impl Drop for OnChip {
    fn drop(&mut self) {
        self.client = None;
        self.stopper.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The conventional device: raw pages on the device, the file system on the host.
pub struct Conventional {
    fs: Option<FileSystem<RemoteFlash>>,
    pub counters: Arc<WireCounters>,
    pub meter: Arc<Meter>,
    stopper: Stopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Conventional {
    pub fn start(sim: &SimConfig, socket: &Path) -> Result<Conventional, BenchError> {
        let (flash, meter) = device(sim)?;
        let address = ListenAddress::Unix(socket.to_path_buf());
        let listener = address.bind().map_err(|error| setup("listen")(error.to_string()))?;
        let server = RawServer::new(flash, None);
        let (counters, stopper) = (server.counters(), server.stopper());
        let thread = std::thread::spawn(move || {
            let _ = server.run(&listener);
        });
        let remote = RemoteFlash::connect(&address, None).map_err(|error| setup("connect")(error.to_string()))?;
        let fs = FileSystem::format(remote, FsConfig::default(), sim.seed)
            .map_err(|error| setup("format over the wire")(error.to_string()))?;
        Ok(Conventional { fs: Some(fs), counters, meter, stopper, thread: Some(thread) })
    }

    pub fn fs(&mut self) -> &mut FileSystem<RemoteFlash> {
        self.fs.as_mut().expect("mounted until dropped")
    }

    /// What the wire and the chips have counted so far.
    pub fn reading(&self) -> (Traffic, MeterReading) {
        (Traffic::of(&self.counters), self.meter.reading())
    }

    /// Unmounts and mounts again over the same connection: the host's caches start cold.
    pub fn remount(&mut self) -> Result<(), BenchError> {
        let fs = self.fs.take().expect("mounted");
        let remote = fs.unmount().map_err(|error| setup("unmount")(error.to_string()))?;
        self.fs =
            Some(FileSystem::mount(remote, FsConfig::default()).map_err(|error| setup("mount")(error.to_string()))?);
        Ok(())
    }
}

impl Drop for Conventional {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            let _ = fs.unmount();
        }
        self.stopper.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
