//! Write-behind for `fsoc mount --remote` without the kernel's write-back cache: small writes
//! to a file are answered at once and gathered into one run per inode, sent as one Twrite
//! when the run must reach the server. Without it every write(2) of a program is a round trip
//! to the server (PostMark's 512-byte writes: 134,322 Twrites in a run).
//!
//! Consistency is NFS's close-to-open, as the mount already promises for reads: another host
//! sees a file's new contents once it has been closed or fsync'd here. This mount itself sees
//! its writes at once: every operation that could observe an inode's contents or size sends
//! the inode's run first (`settle` or `flush`): getattr, setattr, lookup, read, open with
//! O_TRUNC, fsync, flush (every close) and release.
//!
//! A run grows while writes come from the same open file, each starting where the run ends
//! (or, for a file whose appends the server places, any append), up to `RUN_BYTES_MAX`; any
//! other write sends it first. A write of `RUN_BYTES_MAX` or more goes out directly, as does
//! every write once `BUFFERED_BYTES_MAX` bytes wait over all inodes (memory stays bounded by
//! that, whatever the number of open files).
//!
//! Errors: a run that fails to reach the server (ENOSPC, EIO, a lost connection) is reported
//! by the operation that sent it when that is a write, fsync, close or release, and otherwise
//! kept and reported by the inode's next fsync or close (as NFS reports a failed write-behind),
//! never dropped silently.
//!
//! Invariants: an inode has at most one run; a run is sent under its inode's lock, so writes to
//! one inode reach the server in the order the kernel sent them; after `flush(inode)` returns,
//! nothing of the inode waits here; `BUFFERED_BYTES_MAX` bounds the bytes held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fsoc_client::Node;
use fuser::Errno;

/// The largest run gathered for one inode (a write this large or larger is sent directly).
pub const RUN_BYTES_MAX: usize = 128 * 1024;
/// Bytes held over all inodes at most; beyond it writes go straight to the server.
pub const BUFFERED_BYTES_MAX: usize = 32 * 1024 * 1024;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes gathered for one open file of an inode, not yet sent.
struct Run {
    /// The kernel's file handle the writes came through.
    handle: u64,
    /// Its open fid.
    node: Arc<Node>,
    /// Where the run starts (ignored by the server for a server-placed append).
    offset: u64,
    data: Vec<u8>,
    /// The handle's writes are appends the server places (opened O_APPEND).
    append: bool,
}

#[derive(Default)]
struct InodeWrites {
    run: Option<Run>,
    /// A run that failed when nobody could be told; reported by the next fsync or close.
    error: Option<Errno>,
}

/// The write-behind runs of a mount, one per inode at most.
#[derive(Default)]
pub struct WriteBehind {
    inodes: Mutex<HashMap<u64, Arc<Mutex<InodeWrites>>>>,
    buffered_bytes: AtomicUsize,
}

/// The open file a write comes through.
pub struct OpenFile<'n> {
    /// The kernel's file handle.
    pub handle: u64,
    /// Its open fid.
    pub node: &'n Arc<Node>,
    /// Opened O_APPEND with the server placing each write at the end.
    pub server_append: bool,
}

/// How an operation stands to a failed run of its inode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Report {
    /// The operation returns the error (write, fsync, close, release): it is then forgotten.
    Now,
    /// The operation cannot carry it (getattr, read, …): kept for the next fsync or close.
    Later,
}

impl WriteBehind {
    fn slot(&self, inode: u64) -> Arc<Mutex<InodeWrites>> {
        lock(&self.inodes).entry(inode).or_default().clone()
    }

    fn existing(&self, inode: u64) -> Option<Arc<Mutex<InodeWrites>>> {
        lock(&self.inodes).get(&inode).cloned()
    }

    /// A write of `data` at `offset` through `file` of `inode`: gathered, or sent directly by
    /// `send_directly` (a large write, or too much already held). Returns the bytes accepted.
    pub fn write(
        &self,
        inode: u64,
        file: OpenFile<'_>,
        offset: u64,
        data: &[u8],
        send_directly: impl FnOnce(&Node, u64, &[u8]) -> Result<usize, Errno>,
    ) -> Result<usize, Errno> {
        let slot = self.slot(inode);
        let mut writes = lock(&slot);
        if let Some(run) = &writes.run {
            let continues = run.handle == file.handle
                && (run.append || run.offset + run.data.len() as u64 == offset)
                && run.data.len() + data.len() <= RUN_BYTES_MAX;
            if !continues {
                self.send(&mut writes, Report::Now)?;
            }
        }
        let held = self.buffered_bytes.load(Ordering::Relaxed);
        if data.len() >= RUN_BYTES_MAX || held + data.len() > BUFFERED_BYTES_MAX {
            self.send(&mut writes, Report::Now)?;
            return send_directly(file.node, offset, data);
        }
        let run = writes.run.get_or_insert_with(|| Run {
            handle: file.handle,
            node: file.node.clone(),
            offset,
            data: Vec::with_capacity(RUN_BYTES_MAX.min(data.len().max(4096) * 8)),
            append: file.server_append,
        });
        run.data.extend_from_slice(data);
        self.buffered_bytes.fetch_add(data.len(), Ordering::Relaxed);
        Ok(data.len())
    }

    /// Whether `inode` has a run waiting (a lookup then sends it and describes the inode again).
    pub fn holds(&self, inode: u64) -> bool {
        self.existing(inode).is_some_and(|slot| lock(&slot).run.is_some())
    }

    /// Sends `inode`'s run, if any, for an operation that observes the inode but cannot report a
    /// write error (the error is kept for the next fsync or close).
    pub fn settle(&self, inode: u64) {
        if let Some(slot) = self.existing(inode) {
            let _ = self.send(&mut lock(&slot), Report::Later);
        }
    }

    /// Sends `inode`'s run, if any, and reports any failure of it or of an earlier run
    /// (fsync, close, release, a truncating open).
    pub fn flush(&self, inode: u64) -> Result<(), Errno> {
        match self.existing(inode) {
            Some(slot) => self.send(&mut lock(&slot), Report::Now),
            None => Ok(()),
        }
    }

    /// The kernel forgot `inode`: nothing of it can be pending any more (its files were
    /// released, and release flushes), so its slot goes.
    pub fn forget(&self, inode: u64) {
        lock(&self.inodes).remove(&inode);
    }

    fn send(&self, writes: &mut InodeWrites, report: Report) -> Result<(), Errno> {
        if let Some(run) = writes.run.take() {
            self.buffered_bytes.fetch_sub(run.data.len(), Ordering::Relaxed);
            if let Err(error) = send_all(&run) {
                log::warn!("a write-behind of {} bytes at {} failed: {error:?}", run.data.len(), run.offset);
                writes.error.get_or_insert(error);
            }
        }
        match report {
            Report::Now => writes.error.take().map_or(Ok(()), Err),
            Report::Later => Ok(()),
        }
    }
}

/// Writes the whole run (a short Twrite is followed by one for the rest; a write that makes no
/// progress is ENOSPC, as a short write at the end of space).
fn send_all(run: &Run) -> Result<(), Errno> {
    let mut done = 0usize;
    while let Some(rest) = run.data.get(done..).filter(|rest| !rest.is_empty()) {
        let written = run.node.write_at(run.offset + done as u64, rest).map_err(super::errno)?;
        if written == 0 {
            return Err(Errno::ENOSPC);
        }
        done += written;
    }
    Ok(())
}
