//! Decoding: the frame length of a byte stream, the header, and whole requests and replies.
//! Total on any input: a message or a typed `DecodeError`, never a panic, never an
//! allocation (names and data are slices of the input; walk lists are inline).
//! **Invariant:** a message decodes only if it is exactly one message: its size field equals
//! the input's length and its last field ends there.
#![deny(clippy::indexing_slicing, clippy::host_endian_bytes)]

use crate::constants::{
    message_type, HEADER_SIZE_BYTES, NAME_LENGTH_MAX_BYTES, STRING_LENGTH_MAX_BYTES, SYMLINK_TARGET_LENGTH_MAX_BYTES,
    WALK_ELEMENT_COUNT_MAX,
};
use crate::directory::DirectoryEntries;
use crate::errno::Errno;
use crate::error::DecodeError;
use crate::message::{Reply, Request};
use crate::reader::Reader;
use crate::types::{
    Attributes, Fid, FsStats, LockQuery, LockRequest, LockStatus, LockType, SetAttributes, Tag, WalkNames, WalkQids,
};

/// The fixed start of every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The whole message's length, the size field included.
    pub size_bytes: u32,
    pub message_type: u8,
    pub tag: Tag,
}

/// How long the message at the start of `received` is, counting its size field: None until
/// the four size bytes have arrived. A size below the header or above `msize_bytes` is an
/// error: the connection cannot resynchronise after it, so the server closes it.
pub fn frame_size(received: &[u8], msize_bytes: u32) -> Result<Option<usize>, DecodeError> {
    let Some(size_field) = received.first_chunk::<4>() else {
        return Ok(None);
    };
    let size_bytes = u32::from_le_bytes(*size_field);
    if usize::try_from(size_bytes).is_ok_and(|size| size < HEADER_SIZE_BYTES) {
        return Err(DecodeError::SizeBelowHeader { size_bytes });
    }
    if size_bytes > msize_bytes {
        return Err(DecodeError::SizeAboveMsize { size_bytes, msize_bytes });
    }
    // Only a platform whose usize is narrower than msize can fail here; it cannot hold the
    // message, which is the same as its being above msize.
    usize::try_from(size_bytes).map(Some).map_err(|_| DecodeError::SizeAboveMsize { size_bytes, msize_bytes })
}

/// The header of the message at the start of `bytes`; the server reads the tag from it to
/// answer a message that does not decode.
pub fn decode_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let mut reader = Reader::new("header", bytes);
    let size_bytes = reader.u32()?;
    let message_type = reader.u8()?;
    let tag = Tag(reader.u16()?);
    if usize::try_from(size_bytes).is_ok_and(|size| size < HEADER_SIZE_BYTES) {
        return Err(DecodeError::SizeBelowHeader { size_bytes });
    }
    Ok(Header { size_bytes, message_type, tag })
}

/// The header and a reader over the body, after checking that the size field matches the
/// input's length exactly.
fn open(bytes: &[u8]) -> Result<(Header, Reader<'_>), DecodeError> {
    let header = decode_header(bytes)?;
    let structure = message_type::name(header.message_type);
    let size_bytes = usize::try_from(header.size_bytes).unwrap_or(usize::MAX);
    if size_bytes > bytes.len() {
        return Err(DecodeError::Truncated { structure, needed_bytes: size_bytes, actual_bytes: bytes.len() });
    }
    if size_bytes < bytes.len() {
        return Err(DecodeError::TrailingBytes { structure, extra_bytes: bytes.len() - size_bytes });
    }
    let body = bytes.get(HEADER_SIZE_BYTES..).unwrap_or(&[]);
    Ok((header, Reader::new(structure, body)))
}

/// Decodes one whole request (`bytes` is exactly one message, as `frame_size` measured).
pub fn decode_request(bytes: &[u8]) -> Result<(Tag, Request<'_>), DecodeError> {
    let (header, mut reader) = open(bytes)?;
    let request = request_body(header.message_type, &mut reader)?;
    reader.finish()?;
    Ok((header.tag, request))
}

/// Decodes one whole reply (`bytes` is exactly one message).
pub fn decode_reply(bytes: &[u8]) -> Result<(Tag, Reply<'_>), DecodeError> {
    let (header, mut reader) = open(bytes)?;
    let reply = reply_body(header.message_type, &mut reader)?;
    reader.finish()?;
    Ok((header.tag, reply))
}

const NAME: usize = NAME_LENGTH_MAX_BYTES;
const TARGET: usize = SYMLINK_TARGET_LENGTH_MAX_BYTES;
const ANY: usize = STRING_LENGTH_MAX_BYTES;

fn fid(reader: &mut Reader<'_>) -> Result<Fid, DecodeError> {
    Ok(Fid(reader.u32()?))
}

/// nwname[2] then that many names, at most 16: the count is checked before any name is read.
fn walk_names<'a>(reader: &mut Reader<'a>) -> Result<WalkNames<'a>, DecodeError> {
    let count = reader.u16()?;
    if usize::from(count) > WALK_ELEMENT_COUNT_MAX {
        return Err(DecodeError::TooManyWalkElements { structure: "Twalk", count });
    }
    let mut names = WalkNames::new();
    for _ in 0..count {
        let name = reader.string("wname", NAME)?;
        names.push(name).map_err(|_| DecodeError::TooManyWalkElements { structure: "Twalk", count })?;
    }
    Ok(names)
}

fn walk_qids(reader: &mut Reader<'_>) -> Result<WalkQids, DecodeError> {
    let count = reader.u16()?;
    if usize::from(count) > WALK_ELEMENT_COUNT_MAX {
        return Err(DecodeError::TooManyWalkElements { structure: "Rwalk", count });
    }
    let mut qids = WalkQids::new();
    for _ in 0..count {
        let qid = reader.qid()?;
        qids.push(qid).map_err(|_| DecodeError::TooManyWalkElements { structure: "Rwalk", count })?;
    }
    Ok(qids)
}

fn lock_query<'a>(reader: &mut Reader<'a>) -> Result<LockQuery<'a>, DecodeError> {
    Ok(LockQuery {
        lock_type: LockType(reader.u8()?),
        start: reader.u64()?,
        length: reader.u64()?,
        proc_id: reader.u32()?,
        client_id: reader.string("client_id", ANY)?,
    })
}

fn request_body<'a>(message_type: u8, r: &mut Reader<'a>) -> Result<Request<'a>, DecodeError> {
    use message_type::*;
    Ok(match message_type {
        TVERSION => Request::Version { msize: r.u32()?, version: r.string("version", ANY)? },
        TAUTH => Request::Auth {
            afid: fid(r)?,
            uname: r.string("uname", ANY)?,
            aname: r.string("aname", ANY)?,
            n_uname: r.u32()?,
        },
        TATTACH => Request::Attach {
            fid: fid(r)?,
            afid: fid(r)?,
            uname: r.string("uname", ANY)?,
            aname: r.string("aname", ANY)?,
            n_uname: r.u32()?,
        },
        TFLUSH => Request::Flush { old_tag: Tag(r.u16()?) },
        TWALK => Request::Walk { fid: fid(r)?, new_fid: fid(r)?, names: walk_names(r)? },
        TLOPEN => Request::Lopen { fid: fid(r)?, flags: r.u32()? },
        TLCREATE => Request::Lcreate {
            fid: fid(r)?,
            name: r.string("name", NAME)?,
            flags: r.u32()?,
            mode: r.u32()?,
            gid: r.u32()?,
        },
        TREAD => Request::Read { fid: fid(r)?, offset: r.u64()?, count: r.u32()? },
        TWRITE => Request::Write { fid: fid(r)?, offset: r.u64()?, data: r.counted_data()? },
        TCLUNK => Request::Clunk { fid: fid(r)? },
        TREMOVE => Request::Remove { fid: fid(r)? },
        TGETATTR => Request::Getattr { fid: fid(r)?, request_mask: r.u64()? },
        TSETATTR => Request::Setattr {
            fid: fid(r)?,
            attributes: SetAttributes {
                valid_mask: r.u32()?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                size_bytes: r.u64()?,
                access_time: r.timestamp()?,
                modify_time: r.timestamp()?,
            },
        },
        TREADDIR => Request::Readdir { fid: fid(r)?, offset: r.u64()?, count: r.u32()? },
        TMKDIR => {
            Request::Mkdir { directory_fid: fid(r)?, name: r.string("name", NAME)?, mode: r.u32()?, gid: r.u32()? }
        }
        TSYMLINK => Request::Symlink {
            directory_fid: fid(r)?,
            name: r.string("name", NAME)?,
            target: r.string("symtgt", TARGET)?,
            gid: r.u32()?,
        },
        TLINK => Request::Link { directory_fid: fid(r)?, fid: fid(r)?, name: r.string("name", NAME)? },
        TREADLINK => Request::Readlink { fid: fid(r)? },
        TRENAME => Request::Rename { fid: fid(r)?, directory_fid: fid(r)?, name: r.string("name", NAME)? },
        TRENAMEAT => Request::Renameat {
            old_directory_fid: fid(r)?,
            old_name: r.string("oldname", NAME)?,
            new_directory_fid: fid(r)?,
            new_name: r.string("newname", NAME)?,
        },
        TUNLINKAT => Request::Unlinkat { directory_fid: fid(r)?, name: r.string("name", NAME)?, flags: r.u32()? },
        TFSYNC => Request::Fsync { fid: fid(r)?, datasync: r.u32()? },
        TSTATFS => Request::Statfs { fid: fid(r)? },
        TXATTRWALK => Request::Xattrwalk { fid: fid(r)?, new_fid: fid(r)?, name: r.string("name", NAME)? },
        TXATTRCREATE => Request::Xattrcreate {
            fid: fid(r)?,
            name: r.string("name", NAME)?,
            attribute_size_bytes: r.u64()?,
            flags: r.u32()?,
        },
        TLOCK => Request::Lock {
            fid: fid(r)?,
            lock: LockRequest {
                lock_type: LockType(r.u8()?),
                flags: r.u32()?,
                start: r.u64()?,
                length: r.u64()?,
                proc_id: r.u32()?,
                client_id: r.string("client_id", ANY)?,
            },
        },
        TGETLOCK => Request::Getlock { fid: fid(r)?, query: lock_query(r)? },
        TMKNOD => Request::Mknod {
            directory_fid: fid(r)?,
            name: r.string("name", NAME)?,
            mode: r.u32()?,
            major: r.u32()?,
            minor: r.u32()?,
            gid: r.u32()?,
        },
        _ => return Err(DecodeError::UnknownType { message_type, direction: "request" }),
    })
}

fn reply_body<'a>(message_type: u8, r: &mut Reader<'a>) -> Result<Reply<'a>, DecodeError> {
    use message_type::*;
    Ok(match message_type {
        RVERSION => Reply::Version { msize: r.u32()?, version: r.string("version", ANY)? },
        RAUTH => Reply::Auth { aqid: r.qid()? },
        RATTACH => Reply::Attach { qid: r.qid()? },
        RLERROR => Reply::Lerror { errno: Errno(r.u32()?) },
        RFLUSH => Reply::Flush,
        RWALK => Reply::Walk { qids: walk_qids(r)? },
        RLOPEN => Reply::Lopen { qid: r.qid()?, iounit: r.u32()? },
        RLCREATE => Reply::Lcreate { qid: r.qid()?, iounit: r.u32()? },
        RREAD => Reply::Read { data: r.counted_data()? },
        RWRITE => Reply::Write { count: r.u32()? },
        RCLUNK => Reply::Clunk,
        RREMOVE => Reply::Remove,
        RGETATTR => Reply::Getattr {
            attributes: Attributes {
                valid_mask: r.u64()?,
                qid: r.qid()?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                link_count: r.u64()?,
                rdev: r.u64()?,
                size_bytes: r.u64()?,
                block_size_bytes: r.u64()?,
                block_count: r.u64()?,
                access_time: r.timestamp()?,
                modify_time: r.timestamp()?,
                change_time: r.timestamp()?,
                birth_time: r.timestamp()?,
                generation: r.u64()?,
                data_version: r.u64()?,
            },
        },
        RSETATTR => Reply::Setattr,
        RREADDIR => Reply::Readdir { entries: DirectoryEntries::parse(r.counted_data()?)? },
        RMKDIR => Reply::Mkdir { qid: r.qid()? },
        RSYMLINK => Reply::Symlink { qid: r.qid()? },
        RLINK => Reply::Link,
        RREADLINK => Reply::Readlink { target: r.string("target", TARGET)? },
        RRENAME => Reply::Rename,
        RRENAMEAT => Reply::Renameat,
        RUNLINKAT => Reply::Unlinkat,
        RFSYNC => Reply::Fsync,
        RSTATFS => Reply::Statfs {
            stats: FsStats {
                fs_type: r.u32()?,
                block_size_bytes: r.u32()?,
                block_count: r.u64()?,
                free_block_count: r.u64()?,
                available_block_count: r.u64()?,
                file_count: r.u64()?,
                free_file_count: r.u64()?,
                fs_id: r.u64()?,
                name_length_max: r.u32()?,
            },
        },
        RXATTRWALK => Reply::Xattrwalk { size_bytes: r.u64()? },
        RXATTRCREATE => Reply::Xattrcreate,
        RLOCK => Reply::Lock { status: LockStatus(r.u8()?) },
        RGETLOCK => Reply::Getlock { query: lock_query(r)? },
        RMKNOD => Reply::Mknod { qid: r.qid()? },
        _ => return Err(DecodeError::UnknownType { message_type, direction: "reply" }),
    })
}
