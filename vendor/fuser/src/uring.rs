//! FUSE over io_uring (Linux 6.14 and later; added by fsoc, see PATCHES.md).
//!
//! After FUSE_INIT (which still goes over /dev/fuse) a server that asked for
//! `FUSE_OVER_IO_URING` registers ring entries with the kernel, one queue per possible CPU.
//! An entry is a pair of buffers: a 288-byte header area (`fuse_in_header` or
//! `fuse_out_header`, the opcode's own header, and the ring's `payload_sz`/`commit_id`) and a
//! payload buffer for the rest of the request or reply. The kernel fills an entry with a
//! request and completes its io_uring command; the server answers by writing the reply into the
//! same buffers and submitting `COMMIT_AND_FETCH`, which hands the reply to the kernel and
//! waits for the next request in one system call. Requests are queued by the CPU the calling
//! task runs on, so each queue's threads are pinned to that CPU.
//!
//! Layout here: every ring thread owns one io_uring instance with one entry, so a request that
//! blocks (an fsync) holds up only its own thread. A request is parsed where the kernel put
//! it (its two headers copied just before the payload, so a write's data is never copied), and
//! its reply goes into the same entry: straight away when that cannot overwrite request bytes
//! still borrowed, otherwise once dispatch returns (`EntryState`). The commit is always made
//! by the ring thread's next wait while it dispatches, at once for a reply sent later from
//! another thread.
//!
//! FORGET, INTERRUPT and notifications still use /dev/fuse, as do all requests until every
//! queue has an entry; the session keeps its /dev/fuse threads for them. If the kernel refuses
//! a registration, it keeps using /dev/fuse for everything and the ring threads end.

use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::Mutex;

use io_uring::IoUring;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;

use crate::Filesystem;
use crate::channel::Channel;
use crate::ll;
use crate::ll::Operation;
use crate::reply::ReplyEmpty;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// `FUSE_IO_URING_CMD_REGISTER`: register an entry and wait for a request.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: send the reply in the entry, wait for the next request.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: `in_out[128]`, `op_in[128]`, `fuse_uring_ent_in_out` (32).
const HEADER_BYTES: usize = 128 + 128 + 32;
const OP_IN_OFFSET: usize = 128;
const MAX_OP_IN_BYTES: usize = 128;
/// `fuse_uring_ent_in_out`: flags u64, commit_id u64, payload_sz u32, padding u32, reserved u64.
const ENT_IN_OUT_OFFSET: usize = 256;
const COMMIT_ID_OFFSET: usize = ENT_IN_OUT_OFFSET + 8;
const PAYLOAD_SZ_OFFSET: usize = ENT_IN_OUT_OFFSET + 16;
const IN_HEADER_BYTES: usize = 40;
const OUT_HEADER_BYTES: usize = 16;

/// The queues a ring needs: one per possible CPU (the kernel's `num_possible_cpus()`).
pub(crate) fn queue_count() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|text| parse_cpu_list_count(text.trim()))
        .unwrap_or_else(|| {
            // SAFETY: sysconf has no preconditions.
            let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            usize::try_from(configured).unwrap_or(1).max(1)
        })
}

/// `0-3,5,7-8` → the highest CPU number plus one (the kernel numbers queues by CPU id).
fn parse_cpu_list_count(list: &str) -> Option<usize> {
    let mut highest = None;
    for part in list.split(',') {
        let last = part.rsplit('-').next()?;
        let value: usize = last.trim().parse().ok()?;
        highest = Some(highest.map_or(value, |h: usize| h.max(value)));
    }
    highest.map(|h| h + 1)
}

/// Room before the payload buffer for a request's in-header and opcode header, so that a
/// request can be parsed where the kernel put it: `[in-header][op header][payload]`, contiguous.
const HEADROOM: usize = IN_HEADER_BYTES + MAX_OP_IN_BYTES;

/// Who may touch the entry while a request is being answered.
#[derive(Default)]
struct EntryState {
    /// The ring thread is dispatching a request parsed in place: its payload bytes are
    /// borrowed until dispatch returns, and only the ring thread submits.
    dispatching: bool,
    /// Bytes of the request still in the payload buffer (0 when it was copied out).
    request_payload: usize,
    /// A reply that arrived while the request's payload was still borrowed: written into the
    /// entry and committed once dispatch returns (`fuse_out_header` then data).
    pending: Option<Vec<u8>>,
}

/// One ring thread's io_uring and its one entry.
struct RingThread {
    ring: IoUring<squeue::Entry128>,
    /// Serializes pushes to the submission queue (a reply may come from any thread).
    submit_lock: Mutex<()>,
    fd: RawFd,
    qid: u16,
    /// The header area, as registered (its address never changes).
    header: Box<[u64; HEADER_BYTES / 8]>,
    /// `HEADROOM` bytes, then the payload buffer as registered (8-byte aligned storage).
    payload: Box<[u64]>,
    payload_bytes: usize,
    iov: Box<[libc::iovec; 2]>,
    state: Mutex<EntryState>,
}

// SAFETY: the buffers are written by the kernel only while the entry is in the kernel, and by
// this process only by the one holder of the entry (the ring thread while a request arrives,
// the one `RingReply` while it writes the answer, never into bytes a dispatched request still
// borrows: `EntryState`); the io_uring submission queue is guarded by `submit_lock`, its
// completion queue read by the ring thread alone.
unsafe impl Send for RingThread {}
unsafe impl Sync for RingThread {}

impl RingThread {
    fn new(fd: RawFd, qid: u16, payload_bytes: usize) -> io::Result<Arc<RingThread>> {
        let ring = IoUring::<squeue::Entry128>::builder().build(4)?;
        let mut header = Box::new([0u64; HEADER_BYTES / 8]);
        let mut payload = vec![0u64; (HEADROOM + payload_bytes).div_ceil(8)].into_boxed_slice();
        // SAFETY: HEADROOM is within the allocation (it holds HEADROOM + payload_bytes).
        let payload_base = unsafe { payload.as_mut_ptr().cast::<u8>().add(HEADROOM) };
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: HEADER_BYTES },
            libc::iovec { iov_base: payload_base.cast(), iov_len: payload_bytes },
        ]);
        Ok(Arc::new(RingThread {
            ring,
            submit_lock: Mutex::new(()),
            fd,
            qid,
            header,
            payload,
            payload_bytes,
            iov,
            state: Mutex::new(EntryState::default()),
        }))
    }

    fn header_bytes(&self) -> &[u8] {
        // SAFETY: the array is HEADER_BYTES long and u8 has no alignment requirement.
        unsafe { std::slice::from_raw_parts(self.header.as_ptr().cast::<u8>(), HEADER_BYTES) }
    }

    fn header_ptr(&self) -> *mut u8 {
        self.header.as_ptr().cast::<u8>().cast_mut()
    }

    /// The start of the storage: `HEADROOM` bytes before the registered payload buffer.
    fn storage_ptr(&self) -> *mut u8 {
        self.payload.as_ptr().cast::<u8>().cast_mut()
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, EntryState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes a reply (`fuse_out_header` then data, as for /dev/fuse) into the entry.
    fn write_reply<S: std::ops::Deref<Target = [u8]>>(&self, data: &[S]) -> io::Result<()> {
        let total: usize = data.iter().map(|slice| slice.len()).sum();
        let payload_bytes =
            total.checked_sub(OUT_HEADER_BYTES).ok_or_else(|| io::Error::other("reply without a header"))?;
        if payload_bytes > self.payload_bytes {
            return Err(io::Error::other(format!("reply of {payload_bytes} bytes exceeds the ring's payload buffer")));
        }
        let mut header = [0u8; OUT_HEADER_BYTES];
        let mut written = 0usize;
        // SAFETY: HEADROOM is within the storage.
        let payload_ptr = unsafe { self.storage_ptr().add(HEADROOM) };
        for slice in data {
            let mut bytes: &[u8] = slice;
            if written < OUT_HEADER_BYTES {
                let take = bytes.len().min(OUT_HEADER_BYTES - written);
                header[written..written + take].copy_from_slice(&bytes[..take]);
                written += take;
                bytes = &bytes[take..];
            }
            if !bytes.is_empty() {
                let at = written - OUT_HEADER_BYTES;
                // SAFETY: at + len ≤ payload_bytes ≤ the payload buffer's length (checked
                // above); the caller owns the entry and no request bytes there are borrowed.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), payload_ptr.add(at), bytes.len()) };
                written += bytes.len();
            }
        }
        // SAFETY: both ranges lie inside the 288-byte header area, owned by the caller.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), self.header_ptr(), OUT_HEADER_BYTES);
            let size = (payload_bytes as u32).to_ne_bytes();
            std::ptr::copy_nonoverlapping(size.as_ptr(), self.header_ptr().add(PAYLOAD_SZ_OFFSET), 4);
        }
        Ok(())
    }

    /// Pushes one command for the entry; submits it at once when `submit_now`, otherwise the
    /// ring thread's next wait submits it.
    fn push(&self, command: u32, commit_id: u64, submit_now: bool) -> io::Result<()> {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req: flags u64, commit_id u64, qid u16, padding.
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let entry = opcode::UringCmd80::new(types::Fd(self.fd), command)
            .cmd(cmd)
            .addr(Some(self.iov.as_ptr() as u64))
            .build();
        // The command's `len` is the number of iovecs (the builder has no setter for it).
        // SAFETY: Entry128 is repr(C): a 64-byte io_uring_sqe followed by 64 bytes; `len` is
        // the u32 at offset 24 of the sqe.
        let mut raw: [u8; 128] = unsafe { std::mem::transmute(entry) };
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        // SAFETY: the bytes came from an Entry128 and only `len` changed.
        let entry: squeue::Entry128 = unsafe { std::mem::transmute(raw) };
        let _guard = self.submit_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: the iovecs and buffers live as long as this RingThread, which outlives the
        // command (the ring is dropped with it); pushes are serialized by `submit_lock`.
        unsafe {
            let mut queue = self.ring.submission_shared();
            queue.push(&entry).map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        if !submit_now {
            return Ok(());
        }
        loop {
            match self.ring.submitter().submit() {
                Ok(_) => return Ok(()),
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(error) => return Err(error),
            }
        }
    }
}

/// The right to answer one request that came through a ring entry.
#[derive(Clone)]
pub(crate) struct RingReply {
    thread: Arc<RingThread>,
    commit_id: u64,
}

impl std::fmt::Debug for RingReply {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "RingReply(queue {}, commit {})", self.thread.qid, self.commit_id)
    }
}

impl RingReply {
    /// Answers the request: the reply goes into the entry, and `COMMIT_AND_FETCH` hands it to
    /// the kernel. While the ring thread is still dispatching, the commit waits for it (the
    /// kernel would put the next request where the current one may still be read); a reply
    /// with data for a request whose payload is still borrowed waits in `pending`.
    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let total: usize = data.iter().map(|slice| slice.len()).sum();
        let mut state = self.thread.lock_state();
        if state.dispatching && state.request_payload > 0 && total > OUT_HEADER_BYTES {
            let mut pending = Vec::with_capacity(total);
            for slice in data {
                pending.extend_from_slice(slice);
            }
            state.pending = Some(pending);
            return Ok(());
        }
        self.thread.write_reply(data)?;
        self.thread.push(CMD_COMMIT_AND_FETCH, self.commit_id, !state.dispatching)
    }
}

/// Starts the ring threads of one queue (`threads` of them, pinned to CPU `qid`), adding
/// their handles to `handles` (also those started before a failure, so they are joined);
/// each ends when the connection ends or the kernel refuses the ring.
pub(crate) fn spawn_queue<FS: Filesystem + 'static>(
    qid: u16,
    threads: usize,
    channel: &Channel,
    event_loop: &Arc<SessionEventLoop<FS>>,
    payload_bytes: usize,
    handles: &mut Vec<std::thread::JoinHandle<io::Result<()>>>,
) -> io::Result<()> {
    for index in 0..threads {
        let fd = channel.as_fd().as_raw_fd();
        let thread = RingThread::new(fd, qid, payload_bytes)?;
        let event_loop = event_loop.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fuser-ring-{qid}-{index}"))
                .spawn(move || serve(thread, event_loop))?,
        );
    }
    Ok(())
}

fn pin_to_cpu(cpu: u16) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it for cpu < 1024,
    // which the check ensures; sched_setaffinity only reads the set.
    unsafe {
        if usize::from(cpu) >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(cpu), &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!("ring queue {cpu}: not pinned: {}", io::Error::last_os_error());
        }
    }
}

/// A ring thread: registers its entry, then answers requests until the connection ends.
fn serve<FS: Filesystem>(thread: Arc<RingThread>, event_loop: Arc<SessionEventLoop<FS>>) -> io::Result<()> {
    pin_to_cpu(thread.qid);
    thread.push(CMD_REGISTER, 0, true)?;
    loop {
        match thread.ring.submitter().submit_and_wait(1) {
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
            Err(error) => return Err(error),
        }
        // SAFETY: only this thread reads the completion queue.
        while let Some(completion) = unsafe { thread.ring.completion_shared() }.next() {
            let result = completion.result();
            if result < 0 {
                return match -result {
                    // The connection ended (unmount or abort) or the ring was torn down.
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV => Ok(()),
                    errno => {
                        let error = io::Error::from_raw_os_error(errno);
                        warn!("FUSE ring queue {}: {error}; requests stay on /dev/fuse", thread.qid);
                        Ok(())
                    }
                };
            }
            answer(&thread, &event_loop)?;
        }
    }
}

/// Parses the request in the entry where it lies and dispatches it; commits a reply that had
/// to wait for the dispatch to end.
fn answer<FS: Filesystem>(thread: &Arc<RingThread>, event_loop: &SessionEventLoop<FS>) -> io::Result<()> {
    let header = thread.header_bytes();
    let number = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4 bytes")) as usize;
    let length = number(0);
    let unique = u64::from_ne_bytes(header[8..16].try_into().expect("8 bytes"));
    let commit_id = u64::from_ne_bytes(header[COMMIT_ID_OFFSET..COMMIT_ID_OFFSET + 8].try_into().expect("8 bytes"));
    let payload_bytes = number(PAYLOAD_SZ_OFFSET);
    let reply = RingReply { thread: thread.clone(), commit_id };
    let op_in_bytes = length
        .checked_sub(IN_HEADER_BYTES + payload_bytes)
        .filter(|&bytes| bytes <= MAX_OP_IN_BYTES && payload_bytes <= thread.payload_bytes);
    // fuser's parser wants the in-header 8-byte aligned; every opcode header is a multiple of
    // 8 bytes long, so this holds for every request the kernel sends.
    let Some(op_in_bytes) = op_in_bytes.filter(|bytes| bytes % 8 == 0) else {
        error!("FUSE ring: malformed request (length {length}, payload {payload_bytes})");
        send_error(&reply, unique, ll::Errno::EIO);
        return Ok(());
    };
    let start = HEADROOM - IN_HEADER_BYTES - op_in_bytes;
    // SAFETY: start + IN_HEADER + op_in = HEADROOM, inside the storage's headroom, which the
    // kernel never writes; the sources are the header area the kernel filled.
    let bytes = unsafe {
        let storage = thread.storage_ptr();
        std::ptr::copy_nonoverlapping(header.as_ptr(), storage.add(start), IN_HEADER_BYTES);
        std::ptr::copy_nonoverlapping(
            header.as_ptr().add(OP_IN_OFFSET),
            storage.add(start + IN_HEADER_BYTES),
            op_in_bytes,
        );
        std::slice::from_raw_parts(storage.add(start).cast_const(), length)
    };
    {
        let mut state = thread.lock_state();
        state.dispatching = true;
        state.request_payload = payload_bytes;
    }
    match RequestWithSender::with_ring(event_loop.ch.sender(), reply.clone(), bytes) {
        Some(request) => {
            if let Ok(Operation::Destroy(_)) = request.request.operation() {
                request.reply::<ReplyEmpty>().ok();
            } else {
                request.dispatch(event_loop);
            }
        }
        None => send_error(&reply, unique, ll::Errno::EIO),
    }
    let pending = {
        let mut state = thread.lock_state();
        state.dispatching = false;
        state.request_payload = 0;
        state.pending.take()
    };
    if let Some(pending) = pending {
        thread.write_reply(&[pending.as_slice()])?;
        thread.push(CMD_COMMIT_AND_FETCH, commit_id, false)?;
    }
    Ok(())
}

fn send_error(reply: &RingReply, unique: u64, errno: ll::Errno) {
    let mut header = [0u8; OUT_HEADER_BYTES];
    header[0..4].copy_from_slice(&(OUT_HEADER_BYTES as u32).to_ne_bytes());
    header[4..8].copy_from_slice(&(-errno.code()).to_ne_bytes());
    header[8..16].copy_from_slice(&unique.to_ne_bytes());
    if let Err(error) = reply.send(&[io::IoSlice::new(&header)]) {
        error!("FUSE ring: cannot answer a malformed request: {error}");
    }
}
