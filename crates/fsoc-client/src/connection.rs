//! One 9P2000.L connection: version negotiation, tags, fids, and replies matched to requests
//! out of order. Any thread sends a request (`Connection::send`) and waits for its own reply
//! (`Pending::wait`). There is no reader thread: a waiting thread that finds nobody reading
//! the socket reads replies itself (leader and followers) and hands each to the request with
//! its tag, waking its waiter, until its own has come; a reply thus costs one thread switch
//! less than through a reader thread (PostMark through `fsoc mount --remote`: docs/PROTOCOL.md
//! section 8).
//!
//! Invariants: at most `tags_max` requests are in flight (a sender waits for a free tag); a
//! tag and a fid are reused only after the server's reply to the request that held it has been
//! received, so the server never sees a tag still in flight or a fid still being clunked; no
//! reply is read beyond msize (a longer size field ends the connection as a protocol error);
//! after the connection fails, every waiting and later request gets that failure.

use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use fsoc_9p::constants::{
    HEADER_SIZE_BYTES, VERSION_9P2000_L, VERSION_9P2000_L_FSOC, VERSION_UNKNOWN, WRITE_HEADER_SIZE_BYTES,
};
use fsoc_9p::{decode_header, decode_reply, encode, encode_write_header, frame_size, Fid, Reply, Request, Tag};

use crate::address::Stream;
use crate::error::{protocol_error, reply_error};

/// The largest request other than Twrite: Tsymlink with a 255-byte name and a 4,095-byte
/// target (4,369 bytes), rounded up.
const REQUEST_BUFFER_BYTES: usize = 8192;
/// Where the tag sits in a message: after size[4] and type[1].
const TAG_OFFSET: usize = 5;

/// What became of one tag.
enum Slot {
    Free,
    /// Sent; the sender will wait for the reply.
    Waiting,
    Ready(Vec<u8>),
    /// Sent by a sender that will not wait: the reply is discarded, and then `fid` (a clunked
    /// fid) may be reused.
    Abandoned {
        release_fid: Option<Fid>,
    },
}

struct Tags {
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// Why the connection ended (kind, message); set once.
    failure: Option<(io::ErrorKind, String)>,
    /// A thread is reading the socket (the leader); the others wait for it.
    reading: bool,
}

struct Fids {
    next: u32,
    free: Vec<u32>,
}

/// What the threads of a connection share.
struct Shared {
    tags: Mutex<Tags>,
    changed: Condvar,
    fids: Mutex<Fids>,
    /// Locked only by the thread that set `Tags::reading`.
    reader: Mutex<Stream>,
    msize_bytes: u32,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn fail(&self, kind: io::ErrorKind, message: String) {
        let mut tags = lock(&self.tags);
        if tags.failure.is_none() {
            tags.failure = Some((kind, message));
        }
        self.changed.notify_all();
    }

    fn release_fid(&self, fid: Fid) {
        lock(&self.fids).free.push(fid.0);
    }
}

pub(crate) struct Connection {
    writer: Mutex<Stream>,
    shared: Arc<Shared>,
    msize_bytes: u32,
    ordered: bool,
}

/// A request sent and not yet answered. Dropping it without `wait` lets the reply be
/// discarded when it comes.
pub(crate) struct Pending<'c> {
    connection: &'c Connection,
    tag: u16,
    waited: bool,
}

impl Connection {
    /// Negotiates the version on `stream` (msize at most `msize_bytes`); `tags_max` requests
    /// may then be in flight at once.
    ///
    /// It offers fsoc's ordered variant first (9P2000.L.fsoc: the server runs requests in
    /// arrival order, docs/PROTOCOL.md 6.3.1) and plain 9P2000.L to a server that answers
    /// "unknown"; `ordered()` says which was agreed.
    pub fn open(mut stream: Stream, msize_bytes: u32, tags_max: usize) -> io::Result<Connection> {
        let (negotiated, ordered) = match Self::offer_version(&mut stream, msize_bytes, VERSION_9P2000_L_FSOC, false)? {
            Some(agreed) => agreed,
            None => Self::offer_version(&mut stream, msize_bytes, VERSION_9P2000_L, true)?
                .ok_or_else(|| protocol_error("Tversion answered unknown"))?,
        };
        if negotiated > msize_bytes || negotiated < fsoc_9p::constants::MSIZE_MIN_BYTES {
            return Err(protocol_error(&format!("Rversion offers msize {negotiated}, asked for {msize_bytes}")));
        }
        let tags_max = tags_max.clamp(1, usize::from(u16::MAX));
        let shared = Arc::new(Shared {
            tags: Mutex::new(Tags {
                slots: (0..tags_max).map(|_| Slot::Free).collect(),
                // Popped from the end: tag 0 first.
                free: (0..tags_max).rev().filter_map(|tag| u16::try_from(tag).ok()).collect(),
                failure: None,
                reading: false,
            }),
            changed: Condvar::new(),
            fids: Mutex::new(Fids { next: 0, free: Vec::new() }),
            reader: Mutex::new(stream.try_clone()?),
            msize_bytes: negotiated,
        });
        Ok(Connection { writer: Mutex::new(stream), shared, msize_bytes: negotiated, ordered })
    }

    /// Sends Tversion offering `offer` and returns the agreed msize and whether the session is
    /// ordered; `None` when the server answers "unknown" and this is not the `last` offer.
    fn offer_version(
        stream: &mut Stream,
        msize_bytes: u32,
        offer: &[u8],
        last: bool,
    ) -> io::Result<Option<(u32, bool)>> {
        let mut buffer = [0u8; 64];
        let request = Request::Version { msize: msize_bytes, version: offer };
        let length = encode(Tag::NONE, &request, &mut buffer).map_err(|error| protocol_error(&error.to_string()))?;
        stream.write_all(buffer.get(..length).unwrap_or_default())?;
        let reply = read_message(stream, msize_bytes)?;
        match decode_reply(&reply) {
            // The ordered variant only when offered; plain 9P2000.L to either offer.
            Ok((_, Reply::Version { msize, version })) if version == offer => {
                Ok(Some((msize, version == VERSION_9P2000_L_FSOC)))
            }
            Ok((_, Reply::Version { msize, version })) if version == VERSION_9P2000_L => Ok(Some((msize, false))),
            Ok((_, Reply::Version { version, .. })) if version == VERSION_UNKNOWN && !last => Ok(None),
            reply => Err(Self::refused_version(reply, msize_bytes)),
        }
    }

    /// The error for an Rversion that agrees on no version this client speaks.
    fn refused_version(reply: Result<(Tag, Reply<'_>), fsoc_9p::DecodeError>, msize_bytes: u32) -> io::Error {
        match reply {
            Ok((_, Reply::Version { version, .. })) => protocol_error(&format!(
                "the server does not speak 9P2000.L at msize {msize_bytes} (it answered {:?})",
                String::from_utf8_lossy(version)
            )),
            Ok((_, Reply::Lerror { errno })) => reply_error(errno),
            Ok((_, other)) => protocol_error(&format!("Tversion answered with {other:?}")),
            Err(error) => protocol_error(&format!("Rversion: {error}")),
        }
    }

    /// Whether the server runs this connection's requests in arrival order (9P2000.L.fsoc):
    /// then requests that depend on each other may be in flight together (`Batch`).
    pub fn ordered(&self) -> bool {
        self.ordered
    }

    pub fn msize_bytes(&self) -> u32 {
        self.msize_bytes
    }

    /// A fid no other request uses (returned by `release_fid` or a clunk's reply).
    pub fn allocate_fid(&self) -> Fid {
        let mut fids = lock(&self.shared.fids);
        if let Some(fid) = fids.free.pop() {
            return Fid(fid);
        }
        let fid = fids.next;
        // NOFID (u32::MAX) is never handed out; 4 billion live fids cannot happen before the
        // server's own limit (65,536) refuses more.
        fids.next = fids.next.saturating_add(1).min(u32::MAX - 1);
        Fid(fid)
    }

    /// Gives back a fid the server does not know (a walk that failed).
    pub fn release_fid(&self, fid: Fid) {
        self.shared.release_fid(fid);
    }

    /// A free tag, marked in flight. `blocking`: waits for one (reading replies if nobody
    /// else is); otherwise None when every tag is held. A thread that already holds tags of
    /// its own must not block here: the replies that would free tags may be its own, which only
    /// it takes (a pipeline asks without blocking and waits for its oldest reply instead).
    fn acquire_tag(&self, blocking: bool) -> io::Result<Option<u16>> {
        let mut tags = lock(&self.shared.tags);
        loop {
            if let Some((kind, message)) = &tags.failure {
                return Err(io::Error::new(*kind, message.clone()));
            }
            if let Some(tag) = tags.free.pop() {
                if let Some(slot) = tags.slots.get_mut(usize::from(tag)) {
                    *slot = Slot::Waiting;
                }
                return Ok(Some(tag));
            }
            if !blocking {
                return Ok(None);
            }
            // Every tag is held: the replies that free them must be read, by this thread if
            // nobody else is reading.
            tags = self.shared.wait_or_read(tags);
        }
    }

    fn free_tag(tags: &mut Tags, tag: u16) {
        if let Some(slot) = tags.slots.get_mut(usize::from(tag)) {
            *slot = Slot::Free;
            tags.free.push(tag);
        }
    }

    fn transmit(&self, tag: u16, bytes: &[u8]) -> io::Result<()> {
        let written = lock(&self.writer).write_all(bytes);
        if let Err(error) = written {
            let message = format!("connection lost: {error}");
            self.shared.fail(io::ErrorKind::ConnectionAborted, message.clone());
            Self::free_tag(&mut lock(&self.shared.tags), tag);
            self.shared.changed.notify_all();
            return Err(io::Error::new(io::ErrorKind::ConnectionAborted, message));
        }
        Ok(())
    }

    /// Sends `request` (anything but Twrite, which has `send_write`), waiting for a free tag.
    pub fn send(&self, request: &Request<'_>) -> io::Result<Pending<'_>> {
        self.send_request(request, true)?.ok_or_else(|| io::Error::other("no tag"))
    }

    /// Sends `request` if a tag is free now (None otherwise): for a thread that already has
    /// requests in flight.
    pub fn try_send(&self, request: &Request<'_>) -> io::Result<Option<Pending<'_>>> {
        self.send_request(request, false)
    }

    fn send_request(&self, request: &Request<'_>, blocking: bool) -> io::Result<Option<Pending<'_>>> {
        let mut buffer = [0u8; REQUEST_BUFFER_BYTES];
        // Encoded before a tag is taken, so a request the codec refuses holds no tag; the tag
        // is written into the header after.
        let length = encode(Tag(0), request, &mut buffer)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
        let Some(tag) = self.acquire_tag(blocking)? else { return Ok(None) };
        if let Some(field) = buffer.get_mut(TAG_OFFSET..TAG_OFFSET + 2) {
            field.copy_from_slice(&tag.to_le_bytes());
        }
        let pending = Pending { connection: self, tag, waited: false };
        self.transmit(tag, buffer.get(..length).unwrap_or_default())?;
        Ok(Some(pending))
    }

    /// Sends a Twrite of `data` (at most msize − 24 bytes) at `offset` of `fid`; with
    /// `blocking` false, only if a tag is free now (see `try_send`).
    pub fn send_write(&self, fid: Fid, offset: u64, data: &[u8], blocking: bool) -> io::Result<Option<Pending<'_>>> {
        let count = u32::try_from(data.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut buffer = vec![0u8; WRITE_HEADER_SIZE_BYTES + data.len()];
        let length = encode_write_header(Tag(0), fid, offset, count, &mut buffer)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
        assert!(length <= self.msize_bytes as usize, "Twrite of {length} bytes above msize {}", self.msize_bytes);
        if let Some(target) = buffer.get_mut(WRITE_HEADER_SIZE_BYTES..) {
            target.copy_from_slice(data);
        }
        let Some(tag) = self.acquire_tag(blocking)? else { return Ok(None) };
        if let Some(field) = buffer.get_mut(TAG_OFFSET..TAG_OFFSET + 2) {
            field.copy_from_slice(&tag.to_le_bytes());
        }
        let pending = Pending { connection: self, tag, waited: false };
        self.transmit(tag, &buffer)?;
        Ok(Some(pending))
    }

    /// Sends `request` and waits for its reply.
    pub fn call(&self, request: &Request<'_>) -> io::Result<Vec<u8>> {
        self.send(request)?.wait()
    }

    /// Waits until every request sent without waiting (background clunks) has been answered,
    /// reading replies if nobody else is; Err once the connection has failed.
    pub fn wait_idle(&self) -> io::Result<()> {
        let mut tags = lock(&self.shared.tags);
        loop {
            if let Some((kind, message)) = &tags.failure {
                return Err(io::Error::new(*kind, message.clone()));
            }
            if !tags.slots.iter().any(|slot| matches!(slot, Slot::Abandoned { .. })) {
                return Ok(());
            }
            tags = self.shared.wait_or_read(tags);
        }
    }

    /// Clunks `fid` without waiting: the fid is reused only once the server has answered.
    pub fn clunk_in_background(&self, fid: Fid) {
        // A send that fails means the connection is gone, and every fid with it.
        let Ok(mut pending) = self.send(&Request::Clunk { fid }) else { return };
        pending.waited = true;
        let mut tags = lock(&self.shared.tags);
        match tags.slots.get_mut(usize::from(pending.tag)) {
            Some(Slot::Ready(_)) => {
                Self::free_tag(&mut tags, pending.tag);
                drop(tags);
                self.shared.release_fid(fid);
                self.shared.changed.notify_all();
            }
            Some(slot) => *slot = Slot::Abandoned { release_fid: Some(fid) },
            None => {}
        }
    }
}

impl Pending<'_> {
    /// The reply: the whole message, still to be decoded.
    pub fn wait(mut self) -> io::Result<Vec<u8>> {
        self.waited = true;
        let shared = &self.connection.shared;
        let mut tags = lock(&shared.tags);
        loop {
            let index = usize::from(self.tag);
            if let Some(slot @ Slot::Ready(_)) = tags.slots.get_mut(index) {
                let Slot::Ready(reply) = std::mem::replace(slot, Slot::Free) else { unreachable!("matched Ready") };
                tags.free.push(self.tag);
                shared.changed.notify_all();
                return Ok(reply);
            }
            if let Some((kind, message)) = &tags.failure {
                return Err(io::Error::new(*kind, message.clone()));
            }
            tags = shared.wait_or_read(tags);
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.waited {
            return;
        }
        let shared = &self.connection.shared;
        let mut tags = lock(&shared.tags);
        match tags.slots.get_mut(usize::from(self.tag)) {
            Some(Slot::Ready(_)) => {
                Connection::free_tag(&mut tags, self.tag);
                shared.changed.notify_all();
            }
            Some(slot) => *slot = Slot::Abandoned { release_fid: None },
            None => {}
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Every fid dies with the connection.
        lock(&self.writer).shutdown();
    }
}

/// Reads one whole message of at most `msize_bytes`.
fn read_message(stream: &mut Stream, msize_bytes: u32) -> io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let length = frame_size(&size, msize_bytes)
        .map_err(|error| protocol_error(&format!("reply framing: {error}")))?
        .unwrap_or(HEADER_SIZE_BYTES);
    let mut message = vec![0u8; length];
    if let Some(head) = message.get_mut(..4) {
        head.copy_from_slice(&size);
    }
    stream.read_exact(message.get_mut(4..).unwrap_or_default())?;
    Ok(message)
}

impl Shared {
    /// Waits for a change: reads one reply and hands it over if nobody is reading the socket,
    /// else waits for the thread that is.
    fn wait_or_read<'t>(&'t self, mut tags: MutexGuard<'t, Tags>) -> MutexGuard<'t, Tags> {
        if tags.reading {
            return self.changed.wait(tags).unwrap_or_else(PoisonError::into_inner);
        }
        tags.reading = true;
        drop(tags);
        self.read_one();
        let mut tags = lock(&self.tags);
        tags.reading = false;
        // Another waiter may take over the reading.
        self.changed.notify_all();
        tags
    }

    /// Reads one reply and hands it to its tag; a failure ends the connection.
    fn read_one(&self) {
        let mut stream = lock(&self.reader);
        let message = match read_message(&mut stream, self.msize_bytes) {
            Ok(message) => message,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                stream.shutdown();
                return self.fail(io::ErrorKind::InvalidData, error.to_string());
            }
            Err(error) => {
                let detail = if error.kind() == io::ErrorKind::UnexpectedEof {
                    "the server closed the connection".to_string()
                } else {
                    error.to_string()
                };
                stream.shutdown();
                return self.fail(io::ErrorKind::ConnectionAborted, format!("connection lost: {detail}"));
            }
        };
        drop(stream);
        let header = match decode_header(&message) {
            Ok(header) => header,
            Err(error) => return self.fail(io::ErrorKind::InvalidData, format!("malformed reply: {error}")),
        };
        let mut tags = lock(&self.tags);
        let tag = header.tag.0;
        match tags.slots.get_mut(usize::from(tag)) {
            Some(slot @ Slot::Waiting) => *slot = Slot::Ready(message),
            Some(Slot::Abandoned { release_fid }) => {
                let release_fid = *release_fid;
                Connection::free_tag(&mut tags, tag);
                if let Some(fid) = release_fid {
                    // Tclunk forgets the fid even when it is answered with Rlerror.
                    self.release_fid(fid);
                }
            }
            _ => {
                drop(tags);
                lock(&self.reader).shutdown();
                return self.fail(
                    io::ErrorKind::InvalidData,
                    format!("malformed reply: type {} under tag {tag}, which is not in flight", header.message_type),
                );
            }
        }
        drop(tags);
        self.changed.notify_all();
    }
}

/// Requests that go together, in order, answered together. On an ordered connection (the
/// server runs requests in arrival order) they are in flight at once: one round trip for the
/// lot, even when a request names a fid an earlier one makes. Otherwise each is sent once the
/// previous one has been answered, and after a refused one (Rlerror) the rest are not sent
/// (their results are ECANCELED), as a server without ordering would run them against a fid
/// that may not exist.
pub(crate) struct Batch<'c> {
    connection: &'c Connection,
    pending: Vec<Pending<'c>>,
    replies: Vec<io::Result<Vec<u8>>>,
    refused: bool,
}

/// Whether a reply message is an Rlerror.
pub(crate) fn is_refusal(message: &[u8]) -> bool {
    message.get(4) == Some(&fsoc_9p::constants::message_type::RLERROR)
}

impl<'c> Batch<'c> {
    pub fn new(connection: &'c Connection) -> Batch<'c> {
        Batch { connection, pending: Vec::new(), replies: Vec::new(), refused: false }
    }

    /// Sends `request` after the ones pushed before.
    pub fn push(&mut self, request: &Request<'_>) {
        if !self.connection.ordered {
            let reply = if self.refused {
                Err(io::Error::from_raw_os_error(libc::ECANCELED))
            } else {
                self.connection.call(request)
            };
            self.refused |= reply.as_ref().map_or(true, |message| is_refusal(message));
            self.replies.push(reply);
            return;
        }
        // A thread that holds tags must not block for another (see `acquire_tag`): with no tag
        // free, the replies so far are collected first.
        let sent = if self.pending.is_empty() {
            self.connection.send(request).map(Some)
        } else {
            self.connection.try_send(request)
        };
        match sent {
            Ok(Some(pending)) => self.pending.push(pending),
            Ok(None) => {
                self.collect();
                self.replies.push(self.connection.call(request));
            }
            Err(error) => {
                self.collect();
                self.replies.push(Err(error));
            }
        }
    }

    fn collect(&mut self) {
        for pending in self.pending.drain(..) {
            self.replies.push(pending.wait());
        }
    }

    /// Every reply, in the order the requests were pushed.
    pub fn finish(mut self) -> Vec<io::Result<Vec<u8>>> {
        self.collect();
        std::mem::take(&mut self.replies)
    }
}
