//! `Node`: one fid, the client's handle for one file on the server, with one method per 9P
//! request that acts on it. The path API (`Client`, `File`) and `fsoc mount --remote` are
//! built on it. A node is clunked when dropped (in the background: the fid is reused only once
//! the server has answered).
//!
//! Invariants: a node's fid is known to the server for the node's whole life (a walk that
//! fails creates no node, and its fid goes back to the pool at once); no read or write sends
//! more than the open file's iounit, so no message passes msize.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use fsoc_9p::constants::{getattr, IO_HEADER_SIZE_BYTES, READDIR_HEADER_SIZE_BYTES, WALK_ELEMENT_COUNT_MAX};
use fsoc_9p::{decode_reply, Errno, Fid, Qid, QidType, Reply, Request, SetAttributes, WalkNames};

use crate::connection::{Batch, Connection, Pending};
use crate::error::{protocol_error, reply_error};
use crate::metadata::{Metadata, StatFs};

/// Decodes `message` and picks the expected reply out of it: Rlerror becomes its errno, any
/// other reply a protocol error.
pub(crate) fn expect<'m, T>(
    request_name: &str,
    message: &'m [u8],
    pick: impl FnOnce(Reply<'m>) -> Option<T>,
) -> io::Result<T> {
    let reply = decode_reply(message).map_err(|error| protocol_error(&format!("reply to {request_name}: {error}")))?.1;
    if let Reply::Lerror { errno } = reply {
        return Err(reply_error(errno));
    }
    // `Reply` is Copy: the description is made only for a mismatch (formatting every reply,
    // an Rread's data byte by byte, once cost more CPU than the rest of the client).
    pick(reply).ok_or_else(|| protocol_error(&format!("{request_name} answered with {reply:?}")))
}

/// `expect` for one reply of a `Batch`.
fn expect_reply<T>(
    request_name: &str,
    reply: Option<io::Result<Vec<u8>>>,
    pick: impl FnOnce(Reply<'_>) -> Option<T>,
) -> io::Result<T> {
    let message = reply.unwrap_or_else(|| Err(protocol_error("a batched reply is missing")))?;
    expect(request_name, &message, pick)
}

/// The attributes in one reply of a `Batch` (an Rgetattr).
fn attributes_in(reply: Option<io::Result<Vec<u8>>>) -> io::Result<Metadata> {
    expect_reply("Tgetattr", reply, |reply| match reply {
        Reply::Getattr { attributes } => Some(Metadata::new(attributes)),
        _ => None,
    })
}

/// What `Node::create_file` made.
#[derive(Debug)]
pub struct Created {
    /// The new file, open.
    pub opened: Node,
    /// A second fid for it, not open.
    pub node: Node,
    pub metadata: Metadata,
    /// The directory's attributes after the create, when asked for (None if that failed).
    pub directory: Option<Metadata>,
}

/// One entry of an Rreaddir, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    pub qid: Qid,
    /// Where the listing continues after this entry (the next Treaddir's offset).
    pub offset: u64,
    /// Linux d_type (fsoc_9p::constants::dirent_type).
    pub dirent_type: u8,
    pub name: Vec<u8>,
}

/// A fid on the server.
pub struct Node {
    connection: Arc<Connection>,
    fid: Fid,
    qid: Qid,
    /// Set by `lopen`/`lcreate`: the most data one Tread or Twrite carries.
    iounit: u32,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Node").field("fid", &self.fid).field("qid", &self.qid).finish()
    }
}

/// What a walk of up to 16 names reached: a node when every name was walked, and the qids
/// of the names walked (fewer than asked when a later name failed).
pub(crate) struct Walked {
    pub node: Option<Node>,
    pub qids: Vec<Qid>,
}

impl Node {
    pub(crate) fn attached(connection: Arc<Connection>, fid: Fid, qid: Qid) -> Node {
        Node { connection, fid, qid, iounit: 0 }
    }

    pub(crate) fn connection(&self) -> &Connection {
        &self.connection
    }

    pub fn qid(&self) -> Qid {
        self.qid
    }

    pub fn fid(&self) -> Fid {
        self.fid
    }

    pub fn is_directory(&self) -> bool {
        self.qid.qid_type.0 & QidType::DIRECTORY.0 != 0
    }

    pub fn is_symlink(&self) -> bool {
        self.qid.qid_type.0 & QidType::SYMLINK.0 != 0
    }

    /// The most data one read or write of this open node moves.
    pub fn iounit(&self) -> u32 {
        self.iounit
    }

    fn call<T>(&self, request: &Request<'_>, pick: impl FnOnce(Reply<'_>) -> Option<T>) -> io::Result<T> {
        let name = fsoc_9p::constants::message_type::name(request.message_type());
        expect(name, &self.connection.call(request)?, pick)
    }

    /// Walks up to 16 `names` to a new fid; a partial walk gives the qids walked and no node.
    pub(crate) fn walk_partial(&self, names: &[&[u8]]) -> io::Result<Walked> {
        assert!(names.len() <= WALK_ELEMENT_COUNT_MAX, "{} names in one walk", names.len());
        let names = WalkNames::from_slice(names).map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        let new_fid = self.connection.allocate_fid();
        let answer = self.call(&Request::Walk { fid: self.fid, new_fid, names }, |reply| match reply {
            Reply::Walk { qids } => Some(qids.as_slice().to_vec()),
            _ => None,
        });
        let qids = match answer {
            Ok(qids) => qids,
            Err(error) => {
                self.connection.release_fid(new_fid);
                return Err(error);
            }
        };
        if qids.len() > names.len() {
            self.connection.release_fid(new_fid);
            return Err(protocol_error(&format!("Rwalk of {} qids for {} names", qids.len(), names.len())));
        }
        if qids.len() < names.len() {
            self.connection.release_fid(new_fid);
            return Ok(Walked { node: None, qids });
        }
        let qid = qids.last().copied().unwrap_or(self.qid);
        let node = Node { connection: self.connection.clone(), fid: new_fid, qid, iounit: 0 };
        Ok(Walked { node: Some(node), qids })
    }

    /// Walks `names` (any number, 16 a message) without following symbolic links: ENOENT when
    /// a name is missing, ENOTDIR when a name before the last is not a directory.
    pub fn walk(&self, names: &[&[u8]]) -> io::Result<Node> {
        let mut current: Option<Node> = None;
        let mut chunks = names.chunks(WALK_ELEMENT_COUNT_MAX).peekable();
        if chunks.peek().is_none() {
            return self.clone_node();
        }
        for chunk in chunks {
            let from = current.as_ref().unwrap_or(self);
            let walked = from.walk_partial(chunk)?;
            match walked.node {
                Some(node) => current = Some(node),
                None => {
                    let last = walked.qids.last().copied().unwrap_or(from.qid);
                    return Err(short_walk_error(last));
                }
            }
        }
        current.ok_or_else(|| protocol_error("walk reached no node"))
    }

    /// A second fid for the same file (not open).
    pub fn clone_node(&self) -> io::Result<Node> {
        self.walk_partial(&[])?.node.ok_or_else(|| protocol_error("a clone walk failed"))
    }

    /// A second fid for this file and its attributes: one round trip on an ordered connection.
    pub fn clone_with_attributes(&self) -> io::Result<(Node, Metadata)> {
        let new_fid = self.connection.allocate_fid();
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Walk { fid: self.fid, new_fid, names: WalkNames::new() });
        batch.push(&Request::Getattr { fid: self.fid, request_mask: getattr::BASIC });
        let mut replies = batch.finish().into_iter();
        let node = self.walked(new_fid, 0, replies.next())?;
        Ok((node, attributes_in(replies.next())?))
    }

    /// Walks up to 16 `names` (at least one) and gets the attributes of what they reach: one
    /// round trip on an ordered connection. ENOENT or ENOTDIR as `walk` for a short walk.
    pub fn walk_with_attributes(&self, names: &[&[u8]]) -> io::Result<(Node, Metadata)> {
        assert!((1..=WALK_ELEMENT_COUNT_MAX).contains(&names.len()), "{} names in one walk", names.len());
        let names = WalkNames::from_slice(names).map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        let new_fid = self.connection.allocate_fid();
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Walk { fid: self.fid, new_fid, names });
        batch.push(&Request::Getattr { fid: new_fid, request_mask: getattr::BASIC });
        let mut replies = batch.finish().into_iter();
        let node = self.walked(new_fid, names.len(), replies.next())?;
        Ok((node, attributes_in(replies.next())?))
    }

    /// The node a batched Twalk to `new_fid` of `count` names made, from its reply; for a short
    /// walk the error of its last qid (ENOENT, or ENOTDIR after a non-directory), for a refused
    /// or unsent one its error (the fid goes back to the pool either way; requests batched
    /// after it on the fid were refused by the server).
    fn walked(&self, new_fid: Fid, count: usize, reply: Option<io::Result<Vec<u8>>>) -> io::Result<Node> {
        let qids = reply.unwrap_or_else(|| Err(protocol_error("a batched reply is missing"))).and_then(|message| {
            expect("Twalk", &message, |reply| match reply {
                Reply::Walk { qids } => Some(qids.as_slice().to_vec()),
                _ => None,
            })
        });
        match qids {
            Ok(qids) if qids.len() == count => {
                let qid = qids.last().copied().unwrap_or(self.qid);
                Ok(Node { connection: self.connection.clone(), fid: new_fid, qid, iounit: 0 })
            }
            Ok(qids) if qids.len() < count => {
                self.connection.release_fid(new_fid);
                Err(short_walk_error(qids.last().copied().unwrap_or(self.qid)))
            }
            Ok(qids) => {
                self.connection.release_fid(new_fid);
                Err(protocol_error(&format!("Rwalk of {} qids for {count} names", qids.len())))
            }
            Err(error) => {
                self.connection.release_fid(new_fid);
                Err(error)
            }
        }
    }

    /// A clone of this node opened with `flags` (Twalk and Tlopen): one round trip on an
    /// ordered connection.
    pub fn open_clone(&self, flags: u32) -> io::Result<Node> {
        let new_fid = self.connection.allocate_fid();
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Walk { fid: self.fid, new_fid, names: WalkNames::new() });
        batch.push(&Request::Lopen { fid: new_fid, flags });
        let mut replies = batch.finish().into_iter();
        let mut node = self.walked(new_fid, 0, replies.next())?;
        let (qid, iounit) = expect_reply("Tlopen", replies.next(), |reply| match reply {
            Reply::Lopen { qid, iounit } => Some((qid, iounit)),
            _ => None,
        })?;
        node.opened(qid, iounit);
        Ok(node)
    }

    /// Creates `name` in this directory and opens it (Tlcreate on a clone), with a second fid
    /// for the new file, its attributes and, with `directory_too`, this directory's attributes
    /// after the create: one round trip on an ordered connection.
    pub fn create_file(
        &self,
        name: &[u8],
        flags: u32,
        mode: u32,
        gid: u32,
        directory_too: bool,
    ) -> io::Result<Created> {
        let opened_fid = self.connection.allocate_fid();
        let node_fid = self.connection.allocate_fid();
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Walk { fid: self.fid, new_fid: opened_fid, names: WalkNames::new() });
        batch.push(&Request::Lcreate { fid: opened_fid, name, flags, mode, gid });
        batch.push(&Request::Walk { fid: opened_fid, new_fid: node_fid, names: WalkNames::new() });
        batch.push(&Request::Getattr { fid: opened_fid, request_mask: getattr::BASIC });
        if directory_too {
            batch.push(&Request::Getattr { fid: self.fid, request_mask: getattr::BASIC });
        }
        let mut replies = batch.finish().into_iter();
        let opened = self.walked(opened_fid, 0, replies.next());
        let created = expect_reply("Tlcreate", replies.next(), |reply| match reply {
            Reply::Lcreate { qid, iounit } => Some((qid, iounit)),
            _ => None,
        });
        // Made by the walk whether or not the create worked: clunked on drop if unused.
        let node = self.walked(node_fid, 0, replies.next());
        let mut opened = opened?;
        let (qid, iounit) = created?;
        opened.opened(qid, iounit);
        let mut node = node?;
        node.qid = qid;
        let metadata = attributes_in(replies.next())?;
        let directory = if directory_too { attributes_in(replies.next()).ok() } else { None };
        Ok(Created { opened, node, metadata, directory })
    }

    pub fn getattr(&self) -> io::Result<Metadata> {
        self.call(&Request::Getattr { fid: self.fid, request_mask: getattr::BASIC }, |reply| match reply {
            Reply::Getattr { attributes } => Some(Metadata::new(attributes)),
            _ => None,
        })
    }

    pub fn setattr(&self, attributes: SetAttributes) -> io::Result<()> {
        self.call(&Request::Setattr { fid: self.fid, attributes }, |reply| {
            matches!(reply, Reply::Setattr).then_some(())
        })
    }

    /// Opens this fid (Tlopen, `flags` as open(2)'s, Linux values).
    pub fn lopen(&mut self, flags: u32) -> io::Result<()> {
        let (qid, iounit) = self.call(&Request::Lopen { fid: self.fid, flags }, |reply| match reply {
            Reply::Lopen { qid, iounit } => Some((qid, iounit)),
            _ => None,
        })?;
        self.opened(qid, iounit);
        Ok(())
    }

    /// Creates `name` in this directory and opens it: this node then names the new file.
    pub fn lcreate(&mut self, name: &[u8], flags: u32, mode: u32, gid: u32) -> io::Result<()> {
        let request = Request::Lcreate { fid: self.fid, name, flags, mode, gid };
        let (qid, iounit) = self.call(&request, |reply| match reply {
            Reply::Lcreate { qid, iounit } => Some((qid, iounit)),
            _ => None,
        })?;
        self.opened(qid, iounit);
        Ok(())
    }

    fn opened(&mut self, qid: Qid, iounit: u32) {
        let limit = self.connection.msize_bytes().saturating_sub(IO_HEADER_SIZE_BYTES as u32);
        // 0 means "msize less the I/O header"; a larger one than that is not believed.
        self.iounit = if iounit == 0 { limit } else { iounit.min(limit) };
        self.qid = qid;
    }

    fn io_size(&self, length: usize) -> u32 {
        let unit = if self.iounit == 0 {
            self.connection.msize_bytes().saturating_sub(IO_HEADER_SIZE_BYTES as u32)
        } else {
            self.iounit
        };
        u32::try_from(length).unwrap_or(u32::MAX).min(unit)
    }

    /// Sends a Tread; with `blocking` false only if a tag is free now.
    fn send_read(&self, offset: u64, count: u32, blocking: bool) -> io::Result<Option<Pending<'_>>> {
        let request = Request::Read { fid: self.fid, offset, count };
        if blocking {
            self.connection.send(&request).map(Some)
        } else {
            self.connection.try_send(&request)
        }
    }

    fn finish_read(pending: Pending<'_>, buffer: &mut [u8]) -> io::Result<usize> {
        let message = pending.wait()?;
        let data = expect("Tread", &message, |reply| match reply {
            Reply::Read { data } => Some(data),
            _ => None,
        })?;
        let asked = buffer.len();
        let target = buffer
            .get_mut(..data.len())
            .ok_or_else(|| protocol_error(&format!("Rread of {} bytes for {asked} asked", data.len())))?;
        target.copy_from_slice(data);
        Ok(data.len())
    }

    /// One Tread at `offset`, at most `buffer.len()` and the iounit: the bytes read (0 at end
    /// of file).
    pub fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<usize> {
        let count = self.io_size(buffer.len());
        let pending = self.send_read(offset, count, true)?.ok_or_else(|| io::Error::other("no tag"))?;
        Self::finish_read(pending, buffer.get_mut(..count as usize).unwrap_or_default())
    }

    /// Fills `buffer` from `offset` with up to `depth` Treads in flight; stops at end of file
    /// (a short read). Returns the bytes read.
    pub fn read_at_pipelined(&self, offset: u64, buffer: &mut [u8], depth: usize) -> io::Result<usize> {
        let unit = self.io_size(usize::MAX) as usize;
        let mut chunks = buffer.chunks_mut(unit.max(1)).peekable();
        let mut in_flight: VecDeque<(Pending<'_>, &mut [u8])> = VecDeque::new();
        let mut next_offset = offset;
        let mut total = 0usize;
        loop {
            while in_flight.len() < depth.max(1) {
                let Some(chunk) = chunks.peek() else { break };
                let count = self.io_size(chunk.len());
                // Blocks for a tag only with nothing of its own in flight (see acquire_tag).
                let Some(pending) = self.send_read(next_offset, count, in_flight.is_empty())? else { break };
                let Some(chunk) = chunks.next() else { break };
                in_flight.push_back((pending, chunk));
                next_offset += u64::from(count);
            }
            let Some((pending, chunk)) = in_flight.pop_front() else { return Ok(total) };
            let wanted = chunk.len();
            let read = Self::finish_read(pending, chunk)?;
            total += read;
            if read < wanted {
                // End of file: the reads still in flight are past it. Their replies are taken
                // (empty ones), not left unread in the socket, where with no thread waiting
                // nobody would read them.
                for (pending, _) in in_flight {
                    let _ = pending.wait();
                }
                return Ok(total);
            }
        }
    }

    fn send_write(&self, offset: u64, data: &[u8], blocking: bool) -> io::Result<Option<Pending<'_>>> {
        self.connection.send_write(self.fid, offset, data, blocking)
    }

    fn finish_write(pending: Pending<'_>) -> io::Result<usize> {
        let message = pending.wait()?;
        expect("Twrite", &message, |reply| match reply {
            Reply::Write { count } => Some(count as usize),
            _ => None,
        })
    }

    /// One Twrite of at most the iounit: the bytes written.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<usize> {
        let count = self.io_size(data.len()) as usize;
        let pending = self
            .send_write(offset, data.get(..count).unwrap_or_default(), true)?
            .ok_or_else(|| io::Error::other("no tag"))?;
        let written = Self::finish_write(pending)?;
        if written > count {
            return Err(protocol_error(&format!("Rwrite of {written} bytes for {count} sent")));
        }
        Ok(written)
    }

    /// Writes all of `data` from `offset` with up to `depth` Twrites in flight (the server may
    /// run them in any order: each names its offset). Returns the bytes written before the
    /// first short write.
    pub fn write_at_pipelined(&self, offset: u64, data: &[u8], depth: usize) -> io::Result<usize> {
        let unit = self.io_size(usize::MAX) as usize;
        let mut chunks = data.chunks(unit.max(1)).peekable();
        let mut in_flight: VecDeque<(Pending<'_>, usize)> = VecDeque::new();
        let mut next_offset = offset;
        let mut total = 0usize;
        let mut short = false;
        loop {
            while !short && in_flight.len() < depth.max(1) {
                let Some(&chunk) = chunks.peek() else { break };
                // Blocks for a tag only with nothing of its own in flight (see acquire_tag).
                let Some(pending) = self.send_write(next_offset, chunk, in_flight.is_empty())? else { break };
                chunks.next();
                in_flight.push_back((pending, chunk.len()));
                next_offset += chunk.len() as u64;
            }
            let Some((pending, sent)) = in_flight.pop_front() else { return Ok(total) };
            let written = Self::finish_write(pending)?;
            if written > sent {
                return Err(protocol_error(&format!("Rwrite of {written} bytes for {sent} sent")));
            }
            if !short {
                total += written;
            }
            if written < sent {
                short = true;
            }
        }
    }

    /// One Treaddir from `offset` (0, or the last entry's offset) of at most `count` bytes;
    /// empty at the end.
    pub fn readdir(&self, offset: u64, count: u32) -> io::Result<Vec<RawEntry>> {
        let limit = self.connection.msize_bytes().saturating_sub(READDIR_HEADER_SIZE_BYTES as u32);
        self.call(&Request::Readdir { fid: self.fid, offset, count: count.min(limit) }, |reply| match reply {
            Reply::Readdir { entries } => Some(
                entries
                    .iter()
                    .map(|entry| RawEntry {
                        qid: entry.qid,
                        offset: entry.offset,
                        dirent_type: entry.dirent_type,
                        name: entry.name.to_vec(),
                    })
                    .collect(),
            ),
            _ => None,
        })
    }

    /// The largest Treaddir count this connection allows.
    pub fn readdir_count_max(&self) -> u32 {
        self.connection.msize_bytes().saturating_sub(READDIR_HEADER_SIZE_BYTES as u32)
    }

    pub fn mkdir(&self, name: &[u8], mode: u32, gid: u32) -> io::Result<Qid> {
        self.call(&Request::Mkdir { directory_fid: self.fid, name, mode, gid }, |reply| match reply {
            Reply::Mkdir { qid } => Some(qid),
            _ => None,
        })
    }

    pub fn symlink(&self, name: &[u8], target: &[u8], gid: u32) -> io::Result<Qid> {
        self.call(&Request::Symlink { directory_fid: self.fid, name, target, gid }, |reply| match reply {
            Reply::Symlink { qid } => Some(qid),
            _ => None,
        })
    }

    /// Links `file` as `name` in this directory.
    pub fn link(&self, file: &Node, name: &[u8]) -> io::Result<()> {
        self.call(&Request::Link { directory_fid: self.fid, fid: file.fid, name }, |reply| {
            matches!(reply, Reply::Link).then_some(())
        })
    }

    /// Removes `name` from this directory: a file or symlink, or with `directory` an empty
    /// directory.
    /// Unlinks `name` (Tunlinkat, as `unlinkat`) and gets this directory's attributes after
    /// it (None if the Tgetattr failed): one round trip on an ordered connection.
    pub fn unlinkat_with_attributes(&self, name: &[u8], directory: bool) -> io::Result<Option<Metadata>> {
        let flags = if directory { fsoc_9p::constants::UNLINKAT_REMOVE_DIRECTORY } else { 0 };
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Unlinkat { directory_fid: self.fid, name, flags });
        batch.push(&Request::Getattr { fid: self.fid, request_mask: getattr::BASIC });
        let mut replies = batch.finish().into_iter();
        expect_reply("Tunlinkat", replies.next(), |reply| matches!(reply, Reply::Unlinkat).then_some(()))?;
        Ok(attributes_in(replies.next()).ok())
    }

    /// Tsetattr, then the attributes after it: one round trip on an ordered connection.
    pub fn setattr_with_attributes(&self, attributes: SetAttributes) -> io::Result<Metadata> {
        let mut batch = Batch::new(&self.connection);
        batch.push(&Request::Setattr { fid: self.fid, attributes });
        batch.push(&Request::Getattr { fid: self.fid, request_mask: getattr::BASIC });
        let mut replies = batch.finish().into_iter();
        expect_reply("Tsetattr", replies.next(), |reply| matches!(reply, Reply::Setattr).then_some(()))?;
        attributes_in(replies.next())
    }

    pub fn unlinkat(&self, name: &[u8], directory: bool) -> io::Result<()> {
        let flags = if directory { fsoc_9p::constants::UNLINKAT_REMOVE_DIRECTORY } else { 0 };
        self.call(&Request::Unlinkat { directory_fid: self.fid, name, flags }, |reply| {
            matches!(reply, Reply::Unlinkat).then_some(())
        })
    }

    /// rename(2) of `old_name` in this directory to `new_name` in `new_directory`.
    pub fn renameat(&self, old_name: &[u8], new_directory: &Node, new_name: &[u8]) -> io::Result<()> {
        let request =
            Request::Renameat { old_directory_fid: self.fid, old_name, new_directory_fid: new_directory.fid, new_name };
        self.call(&request, |reply| matches!(reply, Reply::Renameat).then_some(()))
    }

    pub fn readlink(&self) -> io::Result<Vec<u8>> {
        self.call(&Request::Readlink { fid: self.fid }, |reply| match reply {
            Reply::Readlink { target } => Some(target.to_vec()),
            _ => None,
        })
    }

    /// A transaction point on the server: when this returns, every change made before it is
    /// on flash.
    pub fn fsync(&self, data_only: bool) -> io::Result<()> {
        self.call(&Request::Fsync { fid: self.fid, datasync: u32::from(data_only) }, |reply| {
            matches!(reply, Reply::Fsync).then_some(())
        })
    }

    pub fn statfs(&self) -> io::Result<StatFs> {
        self.call(&Request::Statfs { fid: self.fid }, |reply| match reply {
            Reply::Statfs { stats } => Some(StatFs::from(stats)),
            _ => None,
        })
    }
}

/// The error of a walk that stopped after a name whose qid is `last`: the next name is missing
/// (ENOENT) in a directory, or a name before the last is not a directory (ENOTDIR).
pub(crate) fn short_walk_error(last: Qid) -> io::Error {
    if last.qid_type.0 & QidType::DIRECTORY.0 != 0 {
        reply_error(Errno::ENOENT)
    } else {
        reply_error(Errno::ENOTDIR)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.connection.clunk_in_background(self.fid);
    }
}
