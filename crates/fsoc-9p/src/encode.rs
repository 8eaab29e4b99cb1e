//! Encoding into a caller's buffer: whole messages (`encode`), and the headers that go in front
//! of data already in place (`encode_read_header` for Rread, `encode_write_header` for Twrite),
//! so a server's read needs no second copy. Nothing here allocates.
//! **Invariant:** `encode` writes nothing unless the whole message fits, and what it writes
//! is exactly as long as its size field says (the same encoder measures and then writes).
#![deny(clippy::indexing_slicing, clippy::host_endian_bytes)]

use crate::constants::{
    message_type, HEADER_SIZE_BYTES, NAME_LENGTH_MAX_BYTES, READ_HEADER_SIZE_BYTES, STRING_LENGTH_MAX_BYTES,
    SYMLINK_TARGET_LENGTH_MAX_BYTES, WRITE_HEADER_SIZE_BYTES,
};
use crate::error::EncodeError;
use crate::message::{Reply, Request};
use crate::sink::{Counter, Sink, SliceWriter};
use crate::types::{Fid, LockQuery, Tag};

mod sealed {
    use crate::error::EncodeError;
    use crate::sink::Sink;

    pub trait Body {
        fn message_type(&self) -> u8;
        fn encode_body<S: Sink>(&self, sink: &mut S) -> Result<(), EncodeError>;
    }
}

/// A message `encode` can write: `Request` or `Reply`.
pub trait Encode: sealed::Body {}
impl Encode for Request<'_> {}
impl Encode for Reply<'_> {}

/// Writes `message` with `tag` at the start of `buffer` and returns its length in bytes.
/// Fails, writing nothing, if the buffer is too small or a string is over its limit.
pub fn encode<M: Encode>(tag: Tag, message: &M, buffer: &mut [u8]) -> Result<usize, EncodeError> {
    let mut counter = Counter { size_bytes: HEADER_SIZE_BYTES };
    message.encode_body(&mut counter)?;
    let size_bytes = counter.size_bytes;
    let size_field = u32::try_from(size_bytes).map_err(|_| EncodeError::MessageTooLarge { size_bytes })?;
    if size_bytes > buffer.len() {
        return Err(EncodeError::BufferTooSmall { needed_bytes: size_bytes, capacity_bytes: buffer.len() });
    }
    let mut writer = SliceWriter::new(buffer, 0);
    writer.u32(size_field)?;
    writer.u8(message.message_type())?;
    writer.u16(tag.0)?;
    message.encode_body(&mut writer)?;
    assert_eq!(writer.position, size_bytes, "type {}: bytes written differ from bytes counted", message.message_type());
    Ok(size_bytes)
}

/// Writes an Rread header for `count` bytes of data that the caller has put (or will put) at
/// `buffer[READ_HEADER_SIZE_BYTES..][..count]`; returns the message's length.
pub fn encode_read_header(tag: Tag, count: u32, buffer: &mut [u8]) -> Result<usize, EncodeError> {
    let data_size_bytes = usize::try_from(count).unwrap_or(usize::MAX);
    let size_bytes = READ_HEADER_SIZE_BYTES.saturating_add(data_size_bytes);
    let size_field = u32::try_from(size_bytes).map_err(|_| EncodeError::MessageTooLarge { size_bytes })?;
    if size_bytes > buffer.len() {
        return Err(EncodeError::BufferTooSmall { needed_bytes: size_bytes, capacity_bytes: buffer.len() });
    }
    let mut writer = SliceWriter::new(buffer, 0);
    writer.u32(size_field)?;
    writer.u8(message_type::RREAD)?;
    writer.u16(tag.0)?;
    writer.u32(count)?;
    assert_eq!(writer.position, READ_HEADER_SIZE_BYTES, "Rread header length");
    Ok(size_bytes)
}

/// Writes a Twrite header for `count` bytes of data at `buffer[WRITE_HEADER_SIZE_BYTES..]`;
/// returns the message's length.
pub fn encode_write_header(
    tag: Tag,
    fid: Fid,
    offset: u64,
    count: u32,
    buffer: &mut [u8],
) -> Result<usize, EncodeError> {
    let data_size_bytes = usize::try_from(count).unwrap_or(usize::MAX);
    let size_bytes = WRITE_HEADER_SIZE_BYTES.saturating_add(data_size_bytes);
    let size_field = u32::try_from(size_bytes).map_err(|_| EncodeError::MessageTooLarge { size_bytes })?;
    if size_bytes > buffer.len() {
        return Err(EncodeError::BufferTooSmall { needed_bytes: size_bytes, capacity_bytes: buffer.len() });
    }
    let mut writer = SliceWriter::new(buffer, 0);
    writer.u32(size_field)?;
    writer.u8(message_type::TWRITE)?;
    writer.u16(tag.0)?;
    writer.u32(fid.0)?;
    writer.u64(offset)?;
    writer.u32(count)?;
    assert_eq!(writer.position, WRITE_HEADER_SIZE_BYTES, "Twrite header length");
    Ok(size_bytes)
}

const NAME: usize = NAME_LENGTH_MAX_BYTES;
const TARGET: usize = SYMLINK_TARGET_LENGTH_MAX_BYTES;
const ANY: usize = STRING_LENGTH_MAX_BYTES;

fn lock_query<S: Sink>(structure: &'static str, query: &LockQuery<'_>, s: &mut S) -> Result<(), EncodeError> {
    s.u8(query.lock_type.0)?;
    s.u64(query.start)?;
    s.u64(query.length)?;
    s.u32(query.proc_id)?;
    s.string(structure, "client_id", query.client_id, ANY)
}

impl sealed::Body for Request<'_> {
    fn message_type(&self) -> u8 {
        Request::message_type(self)
    }

    fn encode_body<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let structure = message_type::name(Request::message_type(self));
        match self {
            Request::Version { msize, version } => {
                s.u32(*msize)?;
                s.string(structure, "version", version, ANY)
            }
            Request::Auth { afid, uname, aname, n_uname } => {
                s.u32(afid.0)?;
                s.string(structure, "uname", uname, ANY)?;
                s.string(structure, "aname", aname, ANY)?;
                s.u32(*n_uname)
            }
            Request::Attach { fid, afid, uname, aname, n_uname } => {
                s.u32(fid.0)?;
                s.u32(afid.0)?;
                s.string(structure, "uname", uname, ANY)?;
                s.string(structure, "aname", aname, ANY)?;
                s.u32(*n_uname)
            }
            Request::Flush { old_tag } => s.u16(old_tag.0),
            Request::Walk { fid, new_fid, names } => {
                s.u32(fid.0)?;
                s.u32(new_fid.0)?;
                // At most 16 by WalkList's construction.
                s.u16(u16::try_from(names.len()).unwrap_or(u16::MAX))?;
                for name in names.as_slice() {
                    s.string(structure, "wname", name, NAME)?;
                }
                Ok(())
            }
            Request::Lopen { fid, flags } => {
                s.u32(fid.0)?;
                s.u32(*flags)
            }
            Request::Lcreate { fid, name, flags, mode, gid } => {
                s.u32(fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.u32(*flags)?;
                s.u32(*mode)?;
                s.u32(*gid)
            }
            Request::Read { fid, offset, count } | Request::Readdir { fid, offset, count } => {
                s.u32(fid.0)?;
                s.u64(*offset)?;
                s.u32(*count)
            }
            Request::Write { fid, offset, data } => {
                s.u32(fid.0)?;
                s.u64(*offset)?;
                s.counted_data(data)
            }
            Request::Clunk { fid } | Request::Remove { fid } | Request::Readlink { fid } | Request::Statfs { fid } => {
                s.u32(fid.0)
            }
            Request::Getattr { fid, request_mask } => {
                s.u32(fid.0)?;
                s.u64(*request_mask)
            }
            Request::Setattr { fid, attributes } => {
                s.u32(fid.0)?;
                s.u32(attributes.valid_mask)?;
                s.u32(attributes.mode)?;
                s.u32(attributes.uid)?;
                s.u32(attributes.gid)?;
                s.u64(attributes.size_bytes)?;
                s.timestamp(&attributes.access_time)?;
                s.timestamp(&attributes.modify_time)
            }
            Request::Mkdir { directory_fid, name, mode, gid } => {
                s.u32(directory_fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.u32(*mode)?;
                s.u32(*gid)
            }
            Request::Symlink { directory_fid, name, target, gid } => {
                s.u32(directory_fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.string(structure, "symtgt", target, TARGET)?;
                s.u32(*gid)
            }
            Request::Link { directory_fid, fid, name } => {
                s.u32(directory_fid.0)?;
                s.u32(fid.0)?;
                s.string(structure, "name", name, NAME)
            }
            Request::Rename { fid, directory_fid, name } => {
                s.u32(fid.0)?;
                s.u32(directory_fid.0)?;
                s.string(structure, "name", name, NAME)
            }
            Request::Renameat { old_directory_fid, old_name, new_directory_fid, new_name } => {
                s.u32(old_directory_fid.0)?;
                s.string(structure, "oldname", old_name, NAME)?;
                s.u32(new_directory_fid.0)?;
                s.string(structure, "newname", new_name, NAME)
            }
            Request::Unlinkat { directory_fid, name, flags } => {
                s.u32(directory_fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.u32(*flags)
            }
            Request::Fsync { fid, datasync } => {
                s.u32(fid.0)?;
                s.u32(*datasync)
            }
            Request::Xattrwalk { fid, new_fid, name } => {
                s.u32(fid.0)?;
                s.u32(new_fid.0)?;
                s.string(structure, "name", name, NAME)
            }
            Request::Xattrcreate { fid, name, attribute_size_bytes, flags } => {
                s.u32(fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.u64(*attribute_size_bytes)?;
                s.u32(*flags)
            }
            Request::Lock { fid, lock } => {
                s.u32(fid.0)?;
                s.u8(lock.lock_type.0)?;
                s.u32(lock.flags)?;
                s.u64(lock.start)?;
                s.u64(lock.length)?;
                s.u32(lock.proc_id)?;
                s.string(structure, "client_id", lock.client_id, ANY)
            }
            Request::Getlock { fid, query } => {
                s.u32(fid.0)?;
                lock_query(structure, query, s)
            }
            Request::Mknod { directory_fid, name, mode, major, minor, gid } => {
                s.u32(directory_fid.0)?;
                s.string(structure, "name", name, NAME)?;
                s.u32(*mode)?;
                s.u32(*major)?;
                s.u32(*minor)?;
                s.u32(*gid)
            }
        }
    }
}

impl sealed::Body for Reply<'_> {
    fn message_type(&self) -> u8 {
        Reply::message_type(self)
    }

    fn encode_body<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let structure = message_type::name(Reply::message_type(self));
        match self {
            Reply::Version { msize, version } => {
                s.u32(*msize)?;
                s.string(structure, "version", version, ANY)
            }
            Reply::Auth { aqid: qid }
            | Reply::Attach { qid }
            | Reply::Mkdir { qid }
            | Reply::Symlink { qid }
            | Reply::Mknod { qid } => s.qid(qid),
            Reply::Lerror { errno } => s.u32(errno.0),
            Reply::Flush
            | Reply::Clunk
            | Reply::Remove
            | Reply::Setattr
            | Reply::Link
            | Reply::Rename
            | Reply::Renameat
            | Reply::Unlinkat
            | Reply::Fsync
            | Reply::Xattrcreate => Ok(()),
            Reply::Walk { qids } => {
                s.u16(u16::try_from(qids.len()).unwrap_or(u16::MAX))?;
                for qid in qids.as_slice() {
                    s.qid(qid)?;
                }
                Ok(())
            }
            Reply::Lopen { qid, iounit } | Reply::Lcreate { qid, iounit } => {
                s.qid(qid)?;
                s.u32(*iounit)
            }
            Reply::Read { data } => s.counted_data(data),
            Reply::Write { count } => s.u32(*count),
            Reply::Getattr { attributes: a } => {
                s.u64(a.valid_mask)?;
                s.qid(&a.qid)?;
                s.u32(a.mode)?;
                s.u32(a.uid)?;
                s.u32(a.gid)?;
                s.u64(a.link_count)?;
                s.u64(a.rdev)?;
                s.u64(a.size_bytes)?;
                s.u64(a.block_size_bytes)?;
                s.u64(a.block_count)?;
                s.timestamp(&a.access_time)?;
                s.timestamp(&a.modify_time)?;
                s.timestamp(&a.change_time)?;
                s.timestamp(&a.birth_time)?;
                s.u64(a.generation)?;
                s.u64(a.data_version)
            }
            // The entries were checked when made (DirectoryEntries::parse or the writer).
            Reply::Readdir { entries } => s.counted_data(entries.as_bytes()),
            Reply::Readlink { target } => s.string(structure, "target", target, TARGET),
            Reply::Statfs { stats } => {
                s.u32(stats.fs_type)?;
                s.u32(stats.block_size_bytes)?;
                s.u64(stats.block_count)?;
                s.u64(stats.free_block_count)?;
                s.u64(stats.available_block_count)?;
                s.u64(stats.file_count)?;
                s.u64(stats.free_file_count)?;
                s.u64(stats.fs_id)?;
                s.u32(stats.name_length_max)
            }
            Reply::Xattrwalk { size_bytes } => s.u64(*size_bytes),
            Reply::Lock { status } => s.u8(status.0),
            Reply::Getlock { query } => lock_query(structure, query, s),
        }
    }
}
