//! One client connection: a reader thread that frames messages, and up to
//! `workers_per_connection_max` worker threads that execute them, replying out of order.
//!
//! The reader reads the 4-byte size, checks it against msize (`frame_size`: a size outside
//! [7, msize] closes the connection, since the stream cannot be resynchronised), then reads the
//! message into a request buffer. Tversion and Tflush are handled by the reader itself (they
//! change which requests are in flight); every other request is queued for the workers. A
//! worker decodes and executes it (`operations::execute`) and writes the reply under the write
//! lock.
//!
//! Ordered sessions (Tversion "9P2000.L.fsoc", docs/PROTOCOL.md 6.3.1): requests are held in
//! arrival order (`State::held`) and start as `Order` says: a sequential request once every
//! earlier one has ended, a concurrent one (Tread, Twrite, Treaddir, Tfsync) once every
//! earlier sequential one has; so a client may send a walk and a request on its new fid, or a
//! create and a Tgetattr of the directory, without waiting between them.
//!
//! Bounds: at most `ServeConfig::requests_in_flight(msize)` requests are in flight (queued or
//! running until their reply is written), each holding one request buffer of at most msize
//! bytes; while that many are in flight the reader waits and reads nothing more, so a client
//! that sends faster than it is served is held back by TCP, not by memory. Small messages
//! (every Tflush) are read into the reader's own buffer first, so a flush passes even when
//! every buffer is busy with a large request.
//!
//! Invariants: every request in flight gets exactly one reply, or none if it was flushed before
//! it started or a Tversion reset the session; an Rflush is written only after the reply to the
//! request it flushed (the worker writes both under one hold of the write lock); a tag is in
//! flight at most once (a client reusing a live tag is disconnected); locks are taken in the
//! order write lock, then state, and the reader never holds the state while writing, so the
//! two threads cannot deadlock; no lock of the connection is held across a volume call except
//! the fid table inside a change (volume, then fids).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use fsoc_9p::constants::{message_type, HEADER_SIZE_BYTES, VERSION_9P2000_L, VERSION_9P2000_L_FSOC, VERSION_UNKNOWN};
use fsoc_9p::{decode_header, decode_request, encode, frame_size, Errno, Reply, Request, Tag};
use fsoc_flash::Flash;

use crate::config::MSIZE_FLOOR_BYTES;
use crate::fids::FidTable;
use crate::listen::Stream;
use crate::operations::{self, Outcome};
use crate::server::Shared;
use crate::trace;

/// Messages up to this size are read into the reader's own buffer (every Tflush is 9 bytes).
const SMALL_FRAME_BYTES: usize = 256;
/// A worker's buffer for every reply except Rread and Rreaddir (which are built in the request
/// buffer): the largest is an Rgetlock echoing a 65,535-byte client id.
pub(crate) const SMALL_REPLY_BYTES: usize = 65_536 + 64;

/// Where a request stands.
enum TagState {
    Queued,
    /// Executing; the tags of the Tflushes waiting for its reply.
    Running {
        flushes: Vec<Tag>,
    },
    /// A Tflush waiting for the reply of the request it flushes.
    Flush,
}

/// How a request of an ordered session (Tversion 9P2000.L.fsoc) is ordered against the others.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    /// Not ordered: a 9P2000.L session, or a request the reader runs itself.
    Free,
    /// Tread, Twrite, Treaddir, Tfsync: starts once every earlier sequential request has
    /// ended; runs alongside other concurrent ones (reads on different chips overlap).
    Concurrent,
    /// Every other request: starts once every earlier request has ended, and no later one
    /// starts before it ends.
    Sequential,
}

impl Order {
    fn of(message: Option<u8>) -> Order {
        use message_type::*;
        match message {
            Some(TREAD | TWRITE | TREADDIR | TFSYNC) => Order::Concurrent,
            _ => Order::Sequential,
        }
    }
}

/// A request waiting for a worker.
struct Work {
    tag: Tag,
    buffer: Vec<u8>,
    length: usize,
    generation: u64,
    order: Order,
}

struct State {
    /// Negotiated by Tversion; before it, the server's maximum (for framing Tversion only).
    msize: u32,
    negotiated: bool,
    /// The session is ordered (Tversion 9P2000.L.fsoc): requests start in arrival order as
    /// `Order` says.
    ordered: bool,
    /// Ordered sessions: requests that may not start yet, in arrival order.
    held: VecDeque<Work>,
    /// Ordered sessions: requests started (queued for a worker or running) and not ended, and
    /// whether one of them is sequential (then it is the only one).
    started: usize,
    started_sequential: bool,
    /// Raised by every Tversion: replies of requests from an older session are not sent.
    generation: u64,
    queue: VecDeque<Work>,
    in_flight: HashMap<u16, TagState>,
    /// Request buffers handed out (queued, running, or being read by the reader).
    buffers_in_use: usize,
    buffers_max: usize,
    free_buffers: Vec<Vec<u8>>,
    workers: usize,
    /// Workers waiting on `work_queued`.
    idle_workers: usize,
    /// Idle workers already woken for queued work and not yet back at the queue (never more
    /// than `idle_workers`): a request is queued with a wake-up only for a worker nobody has
    /// woken yet, so one request wakes one thread.
    wakeups_pending: usize,
    /// The reader waits on `reader_wake` (for a buffer, or for the requests in flight to end).
    reader_waiting: bool,
    closing: bool,
}

/// What the reader does after a message.
enum Flow {
    Continue,
    Disconnect(&'static str),
}

pub(crate) struct Connection<F: Flash> {
    pub(crate) shared: Arc<Shared<F>>,
    writer: Mutex<Stream>,
    state: Mutex<State>,
    /// Idle workers wait here: signalled once per queued request that has no worker awake for
    /// it, and for all at closing.
    work_queued: Condvar,
    /// The reader waits here (when `State::reader_waiting`): signalled when a buffer is given
    /// back, a request ends, or the connection breaks. Two condition variables, so neither the
    /// reader nor a finishing worker wakes idle workers for nothing (with one, every request
    /// woke every idle worker three times: most of the server's CPU under a remote mount).
    reader_wake: Condvar,
    pub(crate) fids: Mutex<FidTable>,
    pub(crate) attach_failures: AtomicU32,
    /// Set when the connection must end (a write failed, too many failed attaches).
    broken: AtomicBool,
    /// Set by a request whose reply must be the connection's last (too many failed attaches).
    close_after_reply: AtomicBool,
    /// For `close`: shuts the socket so the reader's blocking read returns.
    control: Stream,
    /// The connection's name when `ServeConfig::trace` is on: every request and reply is
    /// written to stderr (`trace`).
    trace: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves one connection until the client closes it, a framing error, or the server stops (it
/// shuts the read side); then finishes the requests in flight and gives back every open fid.
pub(crate) fn serve<F: Flash + Send + Sync + 'static>(shared: Arc<Shared<F>>, stream: Stream, name: String) {
    let (writer, control) = match (stream.try_clone(), stream.try_clone()) {
        (Ok(writer), Ok(control)) => (writer, control),
        (Err(error), _) | (_, Err(error)) => {
            log::warn!("{name}: cannot set up the connection: {error}");
            return;
        }
    };
    if let Err(error) = writer.set_write_timeout(shared.config.reply_timeout) {
        log::warn!("{name}: cannot set the write timeout: {error}");
    }
    let msize_max = shared.config.msize_max_bytes;
    let trace = shared.config.trace.then(|| name.clone());
    let connection = Arc::new(Connection {
        fids: Mutex::new(FidTable::new(shared.config.fids_per_connection_max)),
        shared,
        writer: Mutex::new(writer),
        state: Mutex::new(State {
            msize: msize_max,
            negotiated: false,
            ordered: false,
            held: VecDeque::new(),
            started: 0,
            started_sequential: false,
            generation: 0,
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            buffers_in_use: 0,
            buffers_max: 2,
            free_buffers: Vec::new(),
            workers: 0,
            idle_workers: 0,
            wakeups_pending: 0,
            reader_waiting: false,
            closing: false,
        }),
        work_queued: Condvar::new(),
        reader_wake: Condvar::new(),
        attach_failures: AtomicU32::new(0),
        broken: AtomicBool::new(false),
        close_after_reply: AtomicBool::new(false),
        control,
        trace,
    });
    let mut workers = Vec::new();
    let ended = connection.read_loop(stream, &mut workers);
    log::debug!("{name}: {ended}");
    {
        let mut state = lock(&connection.state);
        state.closing = true;
        connection.work_queued.notify_all();
    }
    // Workers finish what is queued (the replies of a server that stops still go out).
    for worker in workers {
        let _ = worker.join();
    }
    connection.release_all_fids();
    connection.control.shutdown(Shutdown::Both);
}

impl<F: Flash + Send + Sync + 'static> Connection<F> {
    fn read_loop(self: &Arc<Self>, mut stream: Stream, workers: &mut Vec<std::thread::JoinHandle<()>>) -> String {
        let mut small = [0u8; SMALL_FRAME_BYTES];
        // The reply buffer of the requests the reader runs itself (`runs_in_reader`).
        let mut reader_reply = None;
        loop {
            if self.broken.load(Ordering::Acquire) {
                return "closed by the server".into();
            }
            let mut size_field = [0u8; 4];
            stream.poll_readable(self.shared.config.poll_before_sleep);
            if let Err(error) = stream.read_exact(&mut size_field) {
                return format!("read ended: {error}");
            }
            let msize = lock(&self.state).msize;
            let size = match frame_size(&size_field, msize) {
                Ok(Some(size)) => size,
                Ok(None) => return "read ended: no size".into(),
                Err(error) => return format!("framing error, disconnecting: {error}"),
            };
            let flow = if size <= SMALL_FRAME_BYTES {
                let Some(frame) = small.get_mut(..size) else { return "frame bound".into() };
                let (head, body) = frame.split_at_mut(4);
                head.copy_from_slice(&size_field);
                if let Err(error) = stream.read_exact(body) {
                    return format!("read ended inside a message: {error}");
                }
                self.trace_request(frame);
                match frame.get(4).copied() {
                    Some(message_type::TVERSION) => self.version(frame),
                    Some(message_type::TFLUSH) => self.flush(frame),
                    _ => match self.take_buffer() {
                        Some(mut buffer) => {
                            copy_into(&mut buffer, frame);
                            self.enqueue(buffer, size, workers, &mut reader_reply)
                        }
                        None => Flow::Disconnect("closing"),
                    },
                }
            } else {
                let Some(mut buffer) = self.take_buffer() else { return "closing".into() };
                if buffer.len() < size {
                    buffer.resize(size, 0);
                }
                let read = match buffer.get_mut(..size).map(|frame| frame.split_at_mut(4)) {
                    Some((head, body)) => {
                        head.copy_from_slice(&size_field);
                        stream.read_exact(body)
                    }
                    None => Ok(()),
                };
                if let Err(error) = read {
                    self.return_buffer(buffer);
                    return format!("read ended inside a message: {error}");
                }
                if let Some(frame) = buffer.get(..size) {
                    self.trace_request(frame);
                }
                match buffer.get(4).copied() {
                    Some(message_type::TVERSION | message_type::TFLUSH) => {
                        let flow = match buffer.get(..size) {
                            Some(frame) if frame.get(4) == Some(&message_type::TVERSION) => self.version(frame),
                            Some(frame) => self.flush(frame),
                            None => Flow::Disconnect("frame bound"),
                        };
                        self.return_buffer(buffer);
                        flow
                    }
                    _ => self.enqueue(buffer, size, workers, &mut reader_reply),
                }
            };
            if let Flow::Disconnect(reason) = flow {
                return reason.into();
            }
        }
    }

    /// A request buffer, waiting while the connection has its maximum in flight; None once the
    /// connection is closing.
    fn take_buffer(&self) -> Option<Vec<u8>> {
        let mut state = lock(&self.state);
        while state.buffers_in_use >= state.buffers_max && !state.closing && !self.broken.load(Ordering::Acquire) {
            state = self.reader_wait(state);
        }
        if state.closing || self.broken.load(Ordering::Acquire) {
            return None;
        }
        state.buffers_in_use += 1;
        assert!(state.buffers_in_use <= state.buffers_max, "{} buffers in use", state.buffers_in_use);
        Some(state.free_buffers.pop().unwrap_or_default())
    }

    fn return_buffer(&self, buffer: Vec<u8>) {
        let mut state = lock(&self.state);
        self.give_back(&mut state, buffer);
    }

    /// Puts a request buffer back into the pool (waking the reader if it waits for one).
    fn give_back(&self, state: &mut State, buffer: Vec<u8>) {
        assert!(state.buffers_in_use > 0, "a buffer returned that was not taken");
        state.buffers_in_use -= 1;
        state.free_buffers.push(buffer);
        self.wake_reader(state);
    }

    /// Wakes the reader if it waits on `reader_wake` (called after every change it may wait
    /// for, with the state locked).
    fn wake_reader(&self, state: &State) {
        if state.reader_waiting {
            self.reader_wake.notify_one();
        }
    }

    /// The reader waits for a change of the state.
    fn reader_wait<'s>(&self, mut state: MutexGuard<'s, State>) -> MutexGuard<'s, State> {
        state.reader_waiting = true;
        let mut state = self.reader_wake.wait(state).unwrap_or_else(PoisonError::into_inner);
        state.reader_waiting = false;
        state
    }

    /// Queues a request for the workers (starting one if none is idle).
    fn enqueue(
        self: &Arc<Self>,
        buffer: Vec<u8>,
        length: usize,
        workers: &mut Vec<std::thread::JoinHandle<()>>,
        reader_reply: &mut Option<Vec<u8>>,
    ) -> Flow {
        let tag = match buffer.get(..length).map(decode_header) {
            Some(Ok(header)) => header.tag,
            _ => {
                self.return_buffer(buffer);
                return Flow::Disconnect("unreadable header");
            }
        };
        let mut state = lock(&self.state);
        if !state.negotiated {
            self.give_back(&mut state, buffer);
            drop(state);
            // Before Tversion nothing but Tversion is understood.
            return self.send_small(tag, &Reply::Lerror { errno: Errno::EPROTO });
        }
        if state.in_flight.contains_key(&tag.0) {
            self.give_back(&mut state, buffer);
            return Flow::Disconnect("a tag already in flight was reused");
        }
        let generation = state.generation;
        let message = buffer.get(4).copied();
        if state.in_flight.is_empty() && runs_in_reader(message) {
            // Nothing else in flight and a short request: the reader runs it itself, a thread
            // switch less per round trip (what the client pipelines behind it waits in the
            // socket until it is done, as it would behind it in an ordered session).
            state.in_flight.insert(tag.0, TagState::Running { flushes: Vec::new() });
            let msize = state.msize;
            drop(state);
            let small_reply = reader_reply.get_or_insert_with(|| vec![0u8; SMALL_REPLY_BYTES]);
            self.run(Work { tag, buffer, length, generation, order: Order::Free }, msize, small_reply);
            return Flow::Continue;
        }
        state.in_flight.insert(tag.0, TagState::Queued);
        let unserved = if state.ordered {
            state.held.push_back(Work { tag, buffer, length, generation, order: Order::of(message) });
            self.release_held(&mut state, false)
        } else {
            state.queue.push_back(Work { tag, buffer, length, generation, order: Order::Free });
            usize::from(!self.wake_worker(&mut state))
        };
        // Work no idle worker was woken for: a new worker, else none (every worker is busy or
        // already woken, and each looks at the queue before it waits again, so it is taken).
        let mut start_worker = false;
        if unserved > 0 && state.workers < self.shared.config.workers_per_connection_max {
            state.workers += 1;
            start_worker = true;
        }
        drop(state);
        if start_worker {
            let connection = Arc::clone(self);
            match std::thread::Builder::new().name("fsoc-9p-worker".into()).spawn(move || connection.work()) {
                Ok(handle) => workers.push(handle),
                Err(error) => {
                    log::warn!("cannot start a worker thread: {error}");
                    lock(&self.state).workers -= 1;
                    if workers.is_empty() {
                        return Flow::Disconnect("no worker thread");
                    }
                }
            }
        }
        Flow::Continue
    }

    /// Wakes an idle worker nobody has woken yet for one queued request (one wake-up per
    /// request); false if there is none.
    fn wake_worker(&self, state: &mut State) -> bool {
        if state.idle_workers > state.wakeups_pending {
            state.wakeups_pending += 1;
            self.work_queued.notify_one();
            return true;
        }
        false
    }

    /// Ordered sessions: moves the held requests that may start now to the workers' queue, in
    /// arrival order, and returns how many of them no idle worker was woken for. A worker that
    /// has just ended a request (`by_worker`) takes the first itself, without a wake-up.
    fn release_held(&self, state: &mut State, by_worker: bool) -> usize {
        let mut unserved = 0;
        let mut first = true;
        while let Some(front) = state.held.front() {
            let may_start = match front.order {
                Order::Sequential => state.started == 0,
                Order::Concurrent | Order::Free => !state.started_sequential,
            };
            if !may_start {
                break;
            }
            let Some(work) = state.held.pop_front() else { break };
            state.started += 1;
            state.started_sequential |= work.order == Order::Sequential;
            assert!(!state.started_sequential || state.started == 1, "a sequential request started beside others");
            state.queue.push_back(work);
            let taken_by_this_worker = by_worker && first;
            if !taken_by_this_worker {
                unserved += usize::from(!self.wake_worker(state));
            }
            first = false;
        }
        unserved
    }

    /// A worker: executes queued requests until the connection closes and the queue is empty.
    fn work(self: Arc<Self>) {
        let mut small_reply = vec![0u8; SMALL_REPLY_BYTES];
        loop {
            let work = {
                let mut state = lock(&self.state);
                loop {
                    if let Some(work) = state.queue.pop_front() {
                        state.in_flight.insert(work.tag.0, TagState::Running { flushes: Vec::new() });
                        break (work, state.msize);
                    }
                    if state.closing {
                        state.workers -= 1;
                        return;
                    }
                    state.idle_workers += 1;
                    state = self.work_queued.wait(state).unwrap_or_else(PoisonError::into_inner);
                    state.idle_workers -= 1;
                    // Woken for work or spuriously: either way one fewer idle worker is owed
                    // a wake-up (keeps wakeups_pending <= idle_workers).
                    state.wakeups_pending = state.wakeups_pending.saturating_sub(1).min(state.idle_workers);
                }
            };
            let (work, msize) = work;
            self.run(work, msize, &mut small_reply);
        }
    }

    /// Executes one request, sends its reply and gives its buffer back.
    fn run(&self, work: Work, msize: u32, small_reply: &mut [u8]) {
        let Work { tag, mut buffer, length, generation, order } = work;
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            operations::execute(self, tag, &mut buffer, length, small_reply, msize)
        }))
        .unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error!("internal error executing a request: {message}; answering EIO");
            Outcome::Small(encode(tag, &Reply::Lerror { errno: Errno::EIO }, small_reply).unwrap_or(0))
        });
        let reply = match outcome {
            Outcome::Small(length) => small_reply.get(..length),
            Outcome::InBuffer(length) => buffer.get(..length),
        };
        self.finish(tag, generation, order, reply.unwrap_or(&[]));
        self.return_buffer(buffer);
    }

    /// Sends the reply of request `tag`, then the Rflush of every Tflush waiting for it; in an
    /// ordered session, lets the held requests start that waited for this one.
    fn finish(&self, tag: Tag, generation: u64, order: Order, reply: &[u8]) {
        let mut writer = lock(&self.writer);
        let (current, flushes) = {
            let mut state = lock(&self.state);
            let flushes = match state.in_flight.remove(&tag.0) {
                Some(TagState::Running { flushes }) => flushes,
                _ => Vec::new(),
            };
            for flush in &flushes {
                state.in_flight.remove(&flush.0);
            }
            if order != Order::Free {
                self.end_started(&mut state, order);
                self.release_held(&mut state, true);
            }
            self.wake_reader(&state);
            (state.generation == generation, flushes)
        };
        if !current {
            return; // a Tversion reset the session: its requests are not answered
        }
        let mut small = [0u8; HEADER_SIZE_BYTES];
        self.trace_reply(reply);
        let mut sent = !reply.is_empty() && writer.write_all(reply).is_ok();
        for flush in flushes {
            let length = encode(flush, &Reply::Flush, &mut small).unwrap_or(0);
            let bytes = small.get(..length).unwrap_or(&[]);
            self.trace_reply(bytes);
            sent = sent && !bytes.is_empty() && writer.write_all(bytes).is_ok();
        }
        if !sent {
            self.close("a reply could not be sent");
        } else if self.close_after_reply.load(Ordering::Acquire) {
            self.close("too many failed attaches");
        }
    }

    /// Ordered sessions: a started request has ended (or was dropped from the queue).
    fn end_started(&self, state: &mut State, order: Order) {
        assert!(state.started > 0, "an ordered request ended that had not started");
        state.started -= 1;
        if order == Order::Sequential {
            state.started_sequential = false;
        }
    }

    /// Counts the request in `frame`, as read, and traces it (`--trace`).
    fn trace_request(&self, frame: &[u8]) {
        self.shared.counters.count_frame(frame);
        if let Some(name) = &self.trace {
            let line = match decode_request(frame) {
                Ok((tag, request)) => trace::request_line(tag, &request),
                Err(_) => trace::undecodable_line(frame),
            };
            trace::emit(name, '<', &line);
        }
    }

    /// Counts a reply about to be sent, and traces it (`--trace`).
    fn trace_reply(&self, reply: &[u8]) {
        self.shared.counters.count_frame(reply);
        if let Some(name) = &self.trace {
            trace::emit(name, '>', &trace::reply_line(reply));
        }
    }

    /// Ends the connection once the reply being prepared has been sent.
    pub(crate) fn close_after_reply(&self) {
        self.close_after_reply.store(true, Ordering::Release);
    }

    /// Writes a small reply from the reader.
    fn send_small(&self, tag: Tag, reply: &Reply<'_>) -> Flow {
        let mut bytes = [0u8; SMALL_FRAME_BYTES];
        let Ok(length) = encode(tag, reply, &mut bytes) else { return Flow::Disconnect("reply did not encode") };
        self.trace_reply(bytes.get(..length).unwrap_or(&[]));
        let mut writer = lock(&self.writer);
        match bytes.get(..length).map(|bytes| writer.write_all(bytes)) {
            Some(Ok(())) => Flow::Continue,
            _ => Flow::Disconnect("a reply could not be sent"),
        }
    }

    /// Ends the connection after the current reply: the reader's read fails and it tears down.
    pub(crate) fn close(&self, reason: &str) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            log::debug!("closing a connection: {reason}");
        }
        self.control.shutdown(Shutdown::Both);
        // Under the state lock, so a thread between testing `broken` and waiting cannot miss it.
        let _state = lock(&self.state);
        self.reader_wake.notify_all();
        self.work_queued.notify_all();
    }

    /// Tversion: ends the session (requests in flight are abandoned, fids clunked) and
    /// negotiates msize and the protocol for the next.
    fn version(&self, frame: &[u8]) -> Flow {
        let (tag, client_msize, version) = match decode_request(frame) {
            Ok((tag, Request::Version { msize, version })) => (tag, msize, version),
            Ok((tag, _)) => return self.send_small(tag, &Reply::Lerror { errno: Errno::EPROTO }),
            Err(error) => return self.refuse_undecodable(frame, error),
        };
        if tag != Tag::NONE {
            return self.send_small(tag, &Reply::Lerror { errno: Errno::EINVAL });
        }
        {
            let mut state = lock(&self.state);
            state.generation += 1;
            while let Some(work) = state.queue.pop_front() {
                state.in_flight.remove(&work.tag.0);
                if work.order != Order::Free {
                    self.end_started(&mut state, work.order);
                }
                self.give_back(&mut state, work.buffer);
            }
            while let Some(work) = state.held.pop_front() {
                state.in_flight.remove(&work.tag.0);
                self.give_back(&mut state, work.buffer);
            }
            while !state.in_flight.is_empty() && !self.broken.load(Ordering::Acquire) {
                state = self.reader_wait(state);
            }
        }
        self.release_all_fids();
        let agreed = client_msize.min(self.shared.config.msize_max_bytes);
        let ordered = version == VERSION_9P2000_L_FSOC;
        let understood = (version == VERSION_9P2000_L || ordered) && agreed >= MSIZE_FLOOR_BYTES;
        {
            let mut state = lock(&self.state);
            state.negotiated = understood;
            state.ordered = understood && ordered;
            if understood {
                state.msize = agreed;
                state.buffers_max = self.shared.config.requests_in_flight(agreed);
                // Buffers sized for an earlier msize are dropped; new ones grow to this one.
                state.free_buffers.clear();
            }
        }
        let answer = match (understood, ordered) {
            (true, true) => VERSION_9P2000_L_FSOC,
            (true, false) => VERSION_9P2000_L,
            (false, _) => VERSION_UNKNOWN,
        };
        self.send_small(tag, &Reply::Version { msize: agreed, version: answer })
    }

    /// Tflush: drops the flushed request if it has not started, else lets its worker send the
    /// Rflush after its reply.
    fn flush(&self, frame: &[u8]) -> Flow {
        let (tag, old_tag) = match decode_request(frame) {
            Ok((tag, Request::Flush { old_tag })) => (tag, old_tag),
            Ok((tag, _)) => return self.send_small(tag, &Reply::Lerror { errno: Errno::EPROTO }),
            Err(error) => return self.refuse_undecodable(frame, error),
        };
        let mut state = lock(&self.state);
        if !state.negotiated {
            drop(state);
            return self.send_small(tag, &Reply::Lerror { errno: Errno::EPROTO });
        }
        if state.in_flight.contains_key(&tag.0) {
            return Flow::Disconnect("a tag already in flight was reused");
        }
        let answer_now = match state.in_flight.get_mut(&old_tag.0) {
            Some(TagState::Queued) => {
                let queued = state.queue.iter().position(|work| work.tag == old_tag);
                if let Some(work) = queued.and_then(|position| state.queue.remove(position)) {
                    if work.order != Order::Free {
                        self.end_started(&mut state, work.order);
                    }
                    self.give_back(&mut state, work.buffer);
                } else {
                    let held = state.held.iter().position(|work| work.tag == old_tag);
                    if let Some(work) = held.and_then(|position| state.held.remove(position)) {
                        self.give_back(&mut state, work.buffer);
                    }
                }
                if state.ordered {
                    // What waited for the dropped request may start (a worker is running or
                    // idle: the requests it waited for were given to one).
                    self.release_held(&mut state, false);
                }
                state.in_flight.remove(&old_tag.0);
                true
            }
            Some(TagState::Running { flushes }) => {
                flushes.push(tag);
                state.in_flight.insert(tag.0, TagState::Flush);
                false
            }
            Some(TagState::Flush) | None => true,
        };
        drop(state);
        if answer_now {
            self.send_small(tag, &Reply::Flush)
        } else {
            Flow::Continue
        }
    }

    /// Rlerror for a message whose header is readable but whose body is not (docs/PROTOCOL.md).
    fn refuse_undecodable(&self, frame: &[u8], error: fsoc_9p::DecodeError) -> Flow {
        match decode_header(frame) {
            Ok(header) => self.send_small(header.tag, &Reply::Lerror { errno: operations::decode_errno(&error) }),
            Err(_) => Flow::Disconnect("unreadable header"),
        }
    }

    /// Clunks every fid (at Tversion and at the end), giving back the open counts.
    fn release_all_fids(&self) {
        let entries = lock(&self.fids).drain();
        let open: Vec<u64> =
            entries.iter().filter(|entry| operations::holds_open_count(entry)).map(|e| e.inode).collect();
        if open.is_empty() {
            return;
        }
        let released = self.shared.volume.change("clunk", None, |fs| {
            for inode in &open {
                if let Err(error) = fs.release_inode(*inode) {
                    log::warn!("releasing inode {inode} at the end of a session: {error}");
                }
            }
        });
        if let Err(error) = released {
            log::warn!("releasing {} open files at the end of a session: {error}", open.len());
        }
    }
}

/// Whether a request of this type may be run by the reader when nothing else is in flight: the
/// metadata requests, a tree lookup or a change of the working state each (a create or
/// truncating open asked to be synchronous also commits, as its client waits for). Reads,
/// writes, directory reads, fsync and locks move data or wait long: they go to a worker, so
/// that the requests a client pipelines behind them are read and run meanwhile (reads on
/// different chips overlap).
fn runs_in_reader(message: Option<u8>) -> bool {
    use message_type::*;
    matches!(
        message,
        Some(
            TWALK
                | TGETATTR
                | TCLUNK
                | TLOPEN
                | TLCREATE
                | TUNLINKAT
                | TMKDIR
                | TSETATTR
                | TSTATFS
                | TSYMLINK
                | TMKNOD
                | TLINK
                | TRENAME
                | TRENAMEAT
                | TREADLINK
                | TREMOVE
                | TATTACH
                | TXATTRWALK
                | TGETLOCK
        )
    )
}

fn copy_into(buffer: &mut Vec<u8>, frame: &[u8]) {
    if buffer.len() < frame.len() {
        buffer.resize(frame.len(), 0);
    }
    if let Some(target) = buffer.get_mut(..frame.len()) {
        target.copy_from_slice(frame);
    }
}
