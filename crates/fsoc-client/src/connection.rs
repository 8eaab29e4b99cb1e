//! One 9P2000.L connection: version negotiation, tags, fids, and replies matched to requests
//! out of order. Any thread sends a request (`Connection::send`) and waits for its own reply
//! (`Pending::wait`); one reader thread frames replies and hands each to the request with its
//! tag.
//!
//! Invariants: at most `tags_max` requests are in flight (a sender waits for a free tag); a
//! tag and a fid are reused only after the server's reply to the request that held it has been
//! received, so the server never sees a tag still in flight or a fid still being clunked; no
//! reply is read beyond msize (a longer size field ends the connection as a protocol error);
//! after the connection fails, every waiting and later request gets that failure.

use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use fsoc_9p::constants::{HEADER_SIZE_BYTES, VERSION_9P2000_L, WRITE_HEADER_SIZE_BYTES};
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
}

struct Fids {
    next: u32,
    free: Vec<u32>,
}

/// What the reader thread shares with the senders.
struct Shared {
    tags: Mutex<Tags>,
    changed: Condvar,
    fids: Mutex<Fids>,
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
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// A request sent and not yet answered. Dropping it without `wait` lets the reply be
/// discarded when it comes.
pub(crate) struct Pending<'c> {
    connection: &'c Connection,
    tag: u16,
    waited: bool,
}

impl Connection {
    /// Negotiates the version on `stream` (msize at most `msize_bytes`) and starts the reader
    /// thread; `tags_max` requests may then be in flight at once.
    pub fn open(mut stream: Stream, msize_bytes: u32, tags_max: usize) -> io::Result<Connection> {
        let mut buffer = [0u8; 64];
        let request = Request::Version { msize: msize_bytes, version: VERSION_9P2000_L };
        let length = encode(Tag::NONE, &request, &mut buffer).map_err(|error| protocol_error(&error.to_string()))?;
        stream.write_all(buffer.get(..length).unwrap_or_default())?;
        let reply = read_message(&mut stream, msize_bytes)?;
        let negotiated = match decode_reply(&reply) {
            Ok((_, Reply::Version { msize, version })) if version == VERSION_9P2000_L => msize,
            Ok((_, Reply::Version { version, .. })) => {
                return Err(protocol_error(&format!(
                    "the server does not speak 9P2000.L at msize {msize_bytes} (it answered {:?})",
                    String::from_utf8_lossy(version)
                )))
            }
            Ok((_, Reply::Lerror { errno })) => return Err(reply_error(errno)),
            Ok((_, other)) => return Err(protocol_error(&format!("Tversion answered with {other:?}"))),
            Err(error) => return Err(protocol_error(&format!("Rversion: {error}"))),
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
            }),
            changed: Condvar::new(),
            fids: Mutex::new(Fids { next: 0, free: Vec::new() }),
        });
        let reader_stream = stream.try_clone()?;
        let reader_shared = shared.clone();
        let reader = std::thread::Builder::new()
            .name("fsoc-client-reader".into())
            .spawn(move || read_replies(reader_stream, &reader_shared, negotiated))?;
        Ok(Connection { writer: Mutex::new(stream), shared, msize_bytes: negotiated, reader: Mutex::new(Some(reader)) })
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

    fn acquire_tag(&self) -> io::Result<u16> {
        let mut tags = lock(&self.shared.tags);
        loop {
            if let Some((kind, message)) = &tags.failure {
                return Err(io::Error::new(*kind, message.clone()));
            }
            if let Some(tag) = tags.free.pop() {
                if let Some(slot) = tags.slots.get_mut(usize::from(tag)) {
                    *slot = Slot::Waiting;
                }
                return Ok(tag);
            }
            tags = self.shared.changed.wait(tags).unwrap_or_else(PoisonError::into_inner);
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

    /// Sends `request` (anything but Twrite, which has `send_write`).
    pub fn send(&self, request: &Request<'_>) -> io::Result<Pending<'_>> {
        let mut buffer = [0u8; REQUEST_BUFFER_BYTES];
        // Encoded before a tag is taken, so a request the codec refuses holds no tag; the tag
        // is written into the header after.
        let length = encode(Tag(0), request, &mut buffer)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
        let tag = self.acquire_tag()?;
        if let Some(field) = buffer.get_mut(TAG_OFFSET..TAG_OFFSET + 2) {
            field.copy_from_slice(&tag.to_le_bytes());
        }
        let pending = Pending { connection: self, tag, waited: false };
        self.transmit(tag, buffer.get(..length).unwrap_or_default())?;
        Ok(pending)
    }

    /// Sends a Twrite of `data` (at most msize − 24 bytes) at `offset` of `fid`.
    pub fn send_write(&self, fid: Fid, offset: u64, data: &[u8]) -> io::Result<Pending<'_>> {
        let count = u32::try_from(data.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut buffer = vec![0u8; WRITE_HEADER_SIZE_BYTES + data.len()];
        let length = encode_write_header(Tag(0), fid, offset, count, &mut buffer)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
        assert!(length <= self.msize_bytes as usize, "Twrite of {length} bytes above msize {}", self.msize_bytes);
        if let Some(target) = buffer.get_mut(WRITE_HEADER_SIZE_BYTES..) {
            target.copy_from_slice(data);
        }
        let tag = self.acquire_tag()?;
        if let Some(field) = buffer.get_mut(TAG_OFFSET..TAG_OFFSET + 2) {
            field.copy_from_slice(&tag.to_le_bytes());
        }
        let pending = Pending { connection: self, tag, waited: false };
        self.transmit(tag, &buffer)?;
        Ok(pending)
    }

    /// Sends `request` and waits for its reply.
    pub fn call(&self, request: &Request<'_>) -> io::Result<Vec<u8>> {
        self.send(request)?.wait()
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
            tags = shared.changed.wait(tags).unwrap_or_else(PoisonError::into_inner);
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
        // The reader sees end of file and ends; every fid dies with the connection.
        lock(&self.writer).shutdown();
        if let Some(reader) = lock(&self.reader).take() {
            let _ = reader.join();
        }
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

/// The reader thread: frames replies and hands each to its tag until the connection ends.
fn read_replies(mut stream: Stream, shared: &Shared, msize_bytes: u32) {
    loop {
        let message = match read_message(&mut stream, msize_bytes) {
            Ok(message) => message,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                shared.fail(io::ErrorKind::InvalidData, error.to_string());
                break;
            }
            Err(error) => {
                let detail = if error.kind() == io::ErrorKind::UnexpectedEof {
                    "the server closed the connection".to_string()
                } else {
                    error.to_string()
                };
                shared.fail(io::ErrorKind::ConnectionAborted, format!("connection lost: {detail}"));
                break;
            }
        };
        let header = match decode_header(&message) {
            Ok(header) => header,
            Err(error) => {
                shared.fail(io::ErrorKind::InvalidData, format!("malformed reply: {error}"));
                break;
            }
        };
        let mut tags = lock(&shared.tags);
        let tag = header.tag.0;
        match tags.slots.get_mut(usize::from(tag)) {
            Some(slot @ Slot::Waiting) => *slot = Slot::Ready(message),
            Some(Slot::Abandoned { release_fid }) => {
                let release_fid = *release_fid;
                Connection::free_tag(&mut tags, tag);
                if let Some(fid) = release_fid {
                    // Tclunk forgets the fid even when it is answered with Rlerror.
                    shared.release_fid(fid);
                }
            }
            _ => {
                drop(tags);
                shared.fail(
                    io::ErrorKind::InvalidData,
                    format!("malformed reply: type {} under tag {tag}, which is not in flight", header.message_type),
                );
                break;
            }
        }
        drop(tags);
        shared.changed.notify_all();
    }
    stream.shutdown();
}
