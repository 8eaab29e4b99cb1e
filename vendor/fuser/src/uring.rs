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
//! blocks (an fsync) holds up only its own thread. A request is copied out of the entry before
//! it is dispatched, which leaves the entry free for the reply whenever it comes (from the
//! dispatching thread or, later, from another one).
//!
//! FORGET, INTERRUPT and notifications still use /dev/fuse, as do all requests until every
//! queue has an entry; the session keeps its /dev/fuse threads for them. If the kernel refuses
//! a registration, it keeps using /dev/fuse for everything and the ring threads end.

use std::io;
use std::os::fd::AsRawFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

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

/// How many ring threads serve the queues, counted across all of them.
pub(crate) static RING_THREADS_SERVING: AtomicUsize = AtomicUsize::new(0);
/// Requests answered through a ring since the process started (all sessions).
pub(crate) static RING_REQUESTS: AtomicUsize = AtomicUsize::new(0);

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

/// One ring thread's io_uring and its one entry.
struct RingThread {
    ring: IoUring<squeue::Entry128>,
    /// Serializes pushes to the submission queue (a reply may come from any thread).
    submit_lock: Mutex<()>,
    fd: RawFd,
    qid: u16,
    /// `header` then `payload`, as registered (their addresses never change).
    header: Box<[u64; HEADER_BYTES / 8]>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
    /// The ring thread. A reply it sends is submitted by its next wait (one system call per
    /// request); a reply from any other thread is submitted at once.
    owner: std::sync::OnceLock<std::thread::ThreadId>,
}

// SAFETY: the buffers are written by the kernel only while the entry is in the kernel, and by
// this process only by the one holder of the entry (the ring thread while it copies a request
// out, the one `RingReply` while it writes the answer); the io_uring submission queue is
// guarded by `submit_lock`, its completion queue read by the ring thread alone.
unsafe impl Send for RingThread {}
unsafe impl Sync for RingThread {}

impl RingThread {
    fn new(fd: RawFd, qid: u16, payload_bytes: usize) -> io::Result<Arc<RingThread>> {
        let ring = IoUring::<squeue::Entry128>::builder().build(4)?;
        let mut header = Box::new([0u64; HEADER_BYTES / 8]);
        let mut payload = vec![0u8; payload_bytes].into_boxed_slice();
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: HEADER_BYTES },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload_bytes },
        ]);
        Ok(Arc::new(RingThread {
            ring,
            submit_lock: Mutex::new(()),
            fd,
            qid,
            header,
            payload,
            iov,
            owner: std::sync::OnceLock::new(),
        }))
    }

    fn header_bytes(&self) -> &[u8] {
        // SAFETY: the array is HEADER_BYTES long and u8 has no alignment requirement.
        unsafe { std::slice::from_raw_parts(self.header.as_ptr().cast::<u8>(), HEADER_BYTES) }
    }

    fn header_ptr(&self) -> *mut u8 {
        self.header.as_ptr().cast::<u8>().cast_mut()
    }

    fn payload_ptr(&self) -> *mut u8 {
        self.payload.as_ptr().cast_mut()
    }

    /// Pushes one command for the entry and submits it (without waiting).
    fn submit(&self, command: u32, commit_id: u64) -> io::Result<()> {
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
        if command == CMD_COMMIT_AND_FETCH && self.owner.get() == Some(&std::thread::current().id()) {
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
    /// Writes a reply (`fuse_out_header` then its data, as for /dev/fuse) into the entry and
    /// commits it.
    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let total: usize = data.iter().map(|slice| slice.len()).sum();
        let payload_bytes = total.checked_sub(OUT_HEADER_BYTES).ok_or_else(|| io::Error::other("reply without a header"))?;
        if payload_bytes > self.thread.payload.len() {
            return Err(io::Error::other(format!("reply of {payload_bytes} bytes exceeds the ring's payload buffer")));
        }
        let mut header = [0u8; OUT_HEADER_BYTES];
        let mut written = 0usize;
        let header_ptr = self.thread.header_ptr();
        let payload_ptr = self.thread.payload_ptr();
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
                // SAFETY: at + len ≤ payload_bytes ≤ the payload's length (checked above); the
                // entry is this reply's alone until the commit below.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), payload_ptr.add(at), bytes.len()) };
                written += bytes.len();
            }
        }
        // SAFETY: both ranges lie inside the 288-byte header area, owned by this reply.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), header_ptr, OUT_HEADER_BYTES);
            let size = (payload_bytes as u32).to_ne_bytes();
            std::ptr::copy_nonoverlapping(size.as_ptr(), header_ptr.add(PAYLOAD_SZ_OFFSET), 4);
        }
        RING_REQUESTS.fetch_add(1, Ordering::Relaxed);
        self.thread.submit(CMD_COMMIT_AND_FETCH, self.commit_id)
    }
}

/// Starts the ring threads of one queue (`threads` of them, pinned to CPU `qid`). Returns
/// their handles; each ends when the connection ends or the kernel refuses the ring.
pub(crate) fn spawn_queue<FS: Filesystem + 'static>(
    qid: u16,
    threads: usize,
    channel: &Channel,
    event_loop: Arc<SessionEventLoop<FS>>,
    payload_bytes: usize,
) -> io::Result<Vec<std::thread::JoinHandle<io::Result<()>>>> {
    let mut handles = Vec::with_capacity(threads);
    for index in 0..threads {
        let fd = channel.as_fd_raw();
        let thread = RingThread::new(fd, qid, payload_bytes)?;
        let event_loop = event_loop.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fuser-ring-{qid}-{index}"))
                .spawn(move || serve(thread, event_loop))?,
        );
    }
    Ok(handles)
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
    let _ = thread.owner.set(std::thread::current().id());
    // The request, copied out of the entry with the in-header 8-byte aligned as fuser's parser
    // expects (a u64 buffer).
    let mut request = vec![0u64; (IN_HEADER_BYTES + MAX_OP_IN_BYTES + thread.payload.len()).div_ceil(8)];
    thread.submit(CMD_REGISTER, 0)?;
    let mut counted = false;
    loop {
        match thread.ring.submitter().submit_and_wait(1) {
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
            Err(error) => return Err(error),
        }
        // SAFETY: only this thread reads the completion queue.
        let completions: Vec<(u64, i32)> =
            unsafe { thread.ring.completion_shared() }.map(|entry| (entry.user_data(), entry.result())).collect();
        for (_, result) in completions {
            if result < 0 {
                if counted {
                    RING_THREADS_SERVING.fetch_sub(1, Ordering::Relaxed);
                }
                let error = io::Error::from_raw_os_error(-result);
                return match -result {
                    // The connection ended (unmount or abort) or the ring was torn down.
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV => Ok(()),
                    _ => {
                        warn!("FUSE ring queue {}: {error}; requests stay on /dev/fuse", thread.qid);
                        Ok(())
                    }
                };
            }
            if !counted {
                counted = true;
                RING_THREADS_SERVING.fetch_add(1, Ordering::Relaxed);
            }
            let header = thread.header_bytes();
            let length = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
            let commit_id = u64::from_ne_bytes(header[COMMIT_ID_OFFSET..COMMIT_ID_OFFSET + 8].try_into().expect("8"));
            let payload_bytes =
                u32::from_ne_bytes(header[PAYLOAD_SZ_OFFSET..PAYLOAD_SZ_OFFSET + 4].try_into().expect("4")) as usize;
            let reply = RingReply { thread: thread.clone(), commit_id };
            let op_in_bytes = length.checked_sub(IN_HEADER_BYTES + payload_bytes);
            let Some(op_in_bytes) = op_in_bytes.filter(|&bytes| bytes <= MAX_OP_IN_BYTES && payload_bytes <= thread.payload.len())
            else {
                error!("FUSE ring: malformed request (length {length}, payload {payload_bytes})");
                let unique = u64::from_ne_bytes(header[8..16].try_into().expect("8"));
                send_error(&reply, unique, ll::Errno::EIO);
                continue;
            };
            // SAFETY: `request` is a u64 buffer of at least IN_HEADER + MAX_OP_IN + payload
            // bytes; the sources are the entry's buffers, which the kernel filled and leaves
            // alone until this entry is committed.
            let bytes = unsafe {
                let out = request.as_mut_ptr().cast::<u8>();
                std::ptr::copy_nonoverlapping(header.as_ptr(), out, IN_HEADER_BYTES);
                std::ptr::copy_nonoverlapping(header.as_ptr().add(OP_IN_OFFSET), out.add(IN_HEADER_BYTES), op_in_bytes);
                std::ptr::copy_nonoverlapping(thread.payload.as_ptr(), out.add(IN_HEADER_BYTES + op_in_bytes), payload_bytes);
                std::slice::from_raw_parts(out.cast_const(), length)
            };
            let Some(request) = RequestWithSender::with_ring(event_loop.ch.sender(), reply.clone(), bytes) else {
                let unique = u64::from_ne_bytes(header[8..16].try_into().expect("8"));
                send_error(&reply, unique, ll::Errno::EIO);
                continue;
            };
            if let Ok(Operation::Destroy(_)) = request.request.operation() {
                request.reply::<ReplyEmpty>().ok();
                continue;
            }
            request.dispatch(&event_loop);
        }
    }
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

/// The fd of a channel, for io_uring commands on it.
pub(crate) trait RawChannelFd {
    fn as_fd_raw(&self) -> RawFd;
}

impl RawChannelFd for Channel {
    fn as_fd_raw(&self) -> RawFd {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}
