//! `Server`: accepts connections until stopped, each served on its own threads
//! (`connection::serve`), with a periodic transaction point; then finishes what is in flight
//! and hands the file system back (`Served`) for the caller's clean unmount.
//!
//! Invariants: at most `connections_max` connections are served at once (one more is accepted
//! and closed); `run` returns only after every connection thread has ended, so the caller's
//! unmount is the last write to the volume; the periodic committer holds only a weak
//! reference and is stopped before the volume is taken back.

use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use fsoc_core::FileSystem;
use fsoc_engine::{PeriodicCommitter, SharedVolume};
use fsoc_flash::Flash;

use crate::config::ServeConfig;
use crate::listen::{Listener, Stream};
use crate::wire_counters::WireCounters;

/// What every connection of a server shares.
pub(crate) struct Shared<F: Flash> {
    pub volume: Arc<SharedVolume<FileSystem<F>>>,
    pub config: ServeConfig,
    pub page_size_bytes: u32,
    pub volume_id: u64,
    pub read_only: bool,
    /// Messages and bytes in both directions, per 9P message type.
    pub counters: Arc<WireCounters>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("server configuration: {0}")]
    Config(String),
    #[error("accepting connections: {0}")]
    Accept(std::io::Error),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    #[error("the server ended but the volume is still referenced (a bug)")]
    StillReferenced,
}

/// Stops a running server from another thread (a signal handler thread, a test).
#[derive(Clone, Debug, Default)]
pub struct Stopper {
    stopping: Arc<AtomicBool>,
}

impl Stopper {
    /// Stop accepting; finish the requests in flight; `run` then returns.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// What `Server::run` hands back.
pub struct Served<F: Flash> {
    /// The file system, still to be unmounted (committed) by the caller.
    pub fs: FileSystem<F>,
    /// The panic that stopped serving, if any: the volume is poisoned, and unmounting it
    /// leaves the last committed state on flash.
    pub failure: Option<String>,
    pub connections_served: u64,
}

pub struct Server<F: Flash + Send + Sync + 'static> {
    shared: Arc<Shared<F>>,
    stopper: Stopper,
}

struct Running {
    control: Stream,
    thread: std::thread::JoinHandle<()>,
}

impl<F: Flash + Send + Sync + 'static> Server<F> {
    pub fn new(fs: FileSystem<F>, config: ServeConfig) -> Result<Server<F>, ServeError> {
        config.check().map_err(ServeError::Config)?;
        let page_size_bytes = fs.layout().geometry.page_data_bytes;
        let volume_id = fs.superblock().volume_id;
        let read_only = fs.config.volume.read_only;
        let shared = Shared {
            volume: Arc::new(SharedVolume::new(fs)),
            config,
            page_size_bytes,
            volume_id,
            read_only,
            counters: Arc::new(WireCounters::default()),
        };
        Ok(Server { shared: Arc::new(shared), stopper: Stopper::default() })
    }

    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// The server's wire counters (9P messages and bytes per type, both directions), readable
    /// while it runs.
    pub fn counters(&self) -> Arc<WireCounters> {
        Arc::clone(&self.shared.counters)
    }

    /// Serves connections from `listener` until the stopper is used; then shuts every
    /// connection's read side, lets each finish the requests it had read, and returns the
    /// file system.
    pub fn run(self, listener: &Listener) -> Result<Served<F>, ServeError> {
        let Server { shared, stopper } = self;
        let committer = match shared.config.commit_interval.filter(|_| !shared.read_only) {
            Some(interval) => {
                Some(PeriodicCommitter::start(Arc::downgrade(&shared.volume), interval).map_err(ServeError::Thread)?)
            }
            None => None,
        };
        // Scrubbing is upkeep, not service: a server without its thread still serves.
        let scrubber = (shared.config.scrub_pages_per_second > 0)
            .then(|| {
                fsoc_engine::BackgroundScrubber::start(
                    Arc::downgrade(&shared.volume),
                    shared.config.scrub_pages_per_second,
                    !shared.read_only,
                )
            })
            .and_then(|started| {
                started.inspect_err(|error| log::warn!("no background scrub: its thread did not start: {error}")).ok()
            });
        let served = AtomicU64::new(0);
        let mut running: Vec<Running> = Vec::new();
        let accepted = loop {
            let stream = match listener.accept(|| stopper.is_stopped()) {
                Ok(Some(stream)) => stream,
                Ok(None) => break Ok(()),
                Err(error) => break Err(ServeError::Accept(error)),
            };
            // Finished connections leave the list here, so it never outgrows the limit.
            running.retain(|connection| !connection.thread.is_finished());
            if running.len() >= shared.config.connections_max {
                log::warn!("refusing a connection: {} are served already", running.len());
                stream.shutdown(Shutdown::Both);
                continue;
            }
            let Ok(control) = stream.try_clone() else { continue };
            let number = served.fetch_add(1, Ordering::Relaxed) + 1;
            let connection_shared = Arc::clone(&shared);
            let name = format!("connection {number}");
            let spawned = std::thread::Builder::new()
                .name(format!("fsoc-9p-{number}"))
                .spawn(move || crate::connection::serve(connection_shared, stream, name));
            match spawned {
                Ok(thread) => running.push(Running { control, thread }),
                Err(error) => log::warn!("cannot start a connection thread: {error}"),
            }
        };
        // Stop reading requests; each connection answers what it has read, then ends.
        for connection in &running {
            connection.control.shutdown(Shutdown::Read);
        }
        for connection in running {
            let _ = connection.thread.join();
        }
        if let Some(scrubber) = scrubber {
            scrubber.stop();
        }
        if let Some(committer) = committer {
            committer.stop();
        }
        accepted?;
        let shared = Arc::try_unwrap(shared).map_err(|_| ServeError::StillReferenced)?;
        let volume = Arc::try_unwrap(shared.volume).map_err(|_| ServeError::StillReferenced)?;
        let (fs, failure) = volume.into_inner();
        Ok(Served { fs, failure, connections_served: served.into_inner() })
    }
}
