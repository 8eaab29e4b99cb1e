//! `--trace`: one line on stderr per request and per reply, naming the message, its tag, its
//! fids and the fields that decide what the server does (names, offsets, counts, flags, masks),
//! and for a reply what it carried or the errno. For finding out what a client such as the
//! Linux kernel's v9fs sends; data is summarised by length, never printed.
//!
//! Invariant: tracing only reads the request and reply bytes; it never changes what is sent.

use std::fmt::Write as _;

use fsoc_9p::{decode_reply, Reply, Request, Tag};

/// A name or target as text (lossy: the bytes are not necessarily UTF-8).
fn text(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// One line for a request, e.g. `tag 3 Twalk fid 1 newfid 2 ["a", "b"]`.
pub(crate) fn request_line(tag: Tag, request: &Request<'_>) -> String {
    let body = match request {
        Request::Version { msize, version } => format!("Tversion msize {msize} {}", text(version)),
        Request::Auth { afid, uname, aname, n_uname } => {
            format!("Tauth afid {} uname {} aname {} n_uname {n_uname}", afid.0, text(uname), text(aname))
        }
        // The aname may be the shared secret: its length only.
        Request::Attach { fid, afid, uname, aname, n_uname } => format!(
            "Tattach fid {} afid {} uname {} aname ({} bytes) n_uname {n_uname}",
            fid.0,
            afid.0,
            text(uname),
            aname.len()
        ),
        Request::Flush { old_tag } => format!("Tflush oldtag {}", old_tag.0),
        Request::Walk { fid, new_fid, names } => {
            let mut line = format!("Twalk fid {} newfid {} [", fid.0, new_fid.0);
            for (index, name) in names.as_slice().iter().enumerate() {
                let separator = if index == 0 { "" } else { ", " };
                let _ = write!(line, "{separator}{}", text(name));
            }
            line.push(']');
            line
        }
        Request::Lopen { fid, flags } => format!("Tlopen fid {} flags {flags:#o}", fid.0),
        Request::Lcreate { fid, name, flags, mode, gid } => {
            format!("Tlcreate fid {} {} flags {flags:#o} mode {mode:#o} gid {gid}", fid.0, text(name))
        }
        Request::Read { fid, offset, count } => format!("Tread fid {} offset {offset} count {count}", fid.0),
        Request::Write { fid, offset, data } => {
            format!("Twrite fid {} offset {offset} count {}", fid.0, data.len())
        }
        Request::Clunk { fid } => format!("Tclunk fid {}", fid.0),
        Request::Remove { fid } => format!("Tremove fid {}", fid.0),
        Request::Getattr { fid, request_mask } => format!("Tgetattr fid {} mask {request_mask:#x}", fid.0),
        Request::Setattr { fid, attributes } => format!(
            "Tsetattr fid {} valid {:#x} mode {:#o} uid {} gid {} size {} atime {}.{:09} mtime {}.{:09}",
            fid.0,
            attributes.valid_mask,
            attributes.mode,
            attributes.uid,
            attributes.gid,
            attributes.size_bytes,
            attributes.access_time.seconds,
            attributes.access_time.nanoseconds,
            attributes.modify_time.seconds,
            attributes.modify_time.nanoseconds
        ),
        Request::Readdir { fid, offset, count } => format!("Treaddir fid {} offset {offset} count {count}", fid.0),
        Request::Mkdir { directory_fid, name, mode, gid } => {
            format!("Tmkdir dfid {} {} mode {mode:#o} gid {gid}", directory_fid.0, text(name))
        }
        Request::Symlink { directory_fid, name, target, gid } => {
            format!("Tsymlink dfid {} {} -> {} gid {gid}", directory_fid.0, text(name), text(target))
        }
        Request::Link { directory_fid, fid, name } => {
            format!("Tlink dfid {} fid {} {}", directory_fid.0, fid.0, text(name))
        }
        Request::Readlink { fid } => format!("Treadlink fid {}", fid.0),
        Request::Rename { fid, directory_fid, name } => {
            format!("Trename fid {} dfid {} {}", fid.0, directory_fid.0, text(name))
        }
        Request::Renameat { old_directory_fid, old_name, new_directory_fid, new_name } => format!(
            "Trenameat olddirfid {} {} newdirfid {} {}",
            old_directory_fid.0,
            text(old_name),
            new_directory_fid.0,
            text(new_name)
        ),
        Request::Unlinkat { directory_fid, name, flags } => {
            format!("Tunlinkat dfid {} {} flags {flags:#x}", directory_fid.0, text(name))
        }
        Request::Fsync { fid, datasync } => format!("Tfsync fid {} datasync {datasync}", fid.0),
        Request::Statfs { fid } => format!("Tstatfs fid {}", fid.0),
        Request::Xattrwalk { fid, new_fid, name } => {
            format!("Txattrwalk fid {} newfid {} {}", fid.0, new_fid.0, text(name))
        }
        Request::Xattrcreate { fid, name, attribute_size_bytes, flags } => {
            format!("Txattrcreate fid {} {} size {attribute_size_bytes} flags {flags:#x}", fid.0, text(name))
        }
        Request::Lock { fid, lock } => format!(
            "Tlock fid {} type {} flags {:#x} start {} length {} proc {}",
            fid.0, lock.lock_type.0, lock.flags, lock.start, lock.length, lock.proc_id
        ),
        Request::Getlock { fid, query } => format!(
            "Tgetlock fid {} type {} start {} length {} proc {}",
            fid.0, query.lock_type.0, query.start, query.length, query.proc_id
        ),
        Request::Mknod { directory_fid, name, mode, major, minor, gid } => {
            format!("Tmknod dfid {} {} mode {mode:#o} {major}:{minor} gid {gid}", directory_fid.0, text(name))
        }
    };
    format!("tag {} {body}", tag.0)
}

/// One line for a request whose body did not decode.
pub(crate) fn undecodable_line(frame: &[u8]) -> String {
    let message_type = frame.get(4).copied().unwrap_or(0);
    let tag = frame.get(5..7).and_then(|bytes| <[u8; 2]>::try_from(bytes).ok()).map_or(0, u16::from_le_bytes);
    format!("tag {tag} type {message_type}: does not decode ({} bytes)", frame.len())
}

/// One line for an encoded reply, e.g. `tag 3 Rlerror 2` or `tag 4 Rread 4096 bytes`.
pub(crate) fn reply_line(bytes: &[u8]) -> String {
    let (tag, reply) = match decode_reply(bytes) {
        Ok(decoded) => decoded,
        Err(error) => return format!("a reply that does not decode ({} bytes): {error}", bytes.len()),
    };
    let body = match reply {
        Reply::Lerror { errno } => format!("Rlerror {}", errno.0),
        Reply::Version { msize, version } => format!("Rversion msize {msize} {}", text(version)),
        Reply::Attach { qid } => format!("Rattach qid {}", qid.path),
        Reply::Walk { qids } => {
            let paths: Vec<u64> = qids.as_slice().iter().map(|qid| qid.path).collect();
            format!("Rwalk {paths:?}")
        }
        Reply::Lopen { qid, iounit } => format!("Rlopen qid {} iounit {iounit}", qid.path),
        Reply::Lcreate { qid, iounit } => format!("Rlcreate qid {} iounit {iounit}", qid.path),
        Reply::Read { data } => format!("Rread {} bytes", data.len()),
        Reply::Write { count } => format!("Rwrite {count}"),
        Reply::Getattr { attributes } => format!(
            "Rgetattr valid {:#x} qid {} mode {:#o} nlink {} size {} blocks {} mtime {}.{:09}",
            attributes.valid_mask,
            attributes.qid.path,
            attributes.mode,
            attributes.link_count,
            attributes.size_bytes,
            attributes.block_count,
            attributes.modify_time.seconds,
            attributes.modify_time.nanoseconds
        ),
        Reply::Readdir { entries } => {
            let mut line = String::from("Rreaddir");
            for entry in entries.iter() {
                let _ = write!(line, " {}@{}", text(entry.name), entry.offset);
            }
            line
        }
        Reply::Mkdir { qid } | Reply::Symlink { qid } | Reply::Mknod { qid } => {
            format!("R{} qid {}", name_of(&reply), qid.path)
        }
        Reply::Readlink { target } => format!("Rreadlink {}", text(target)),
        Reply::Statfs { stats } => format!(
            "Rstatfs bsize {} blocks {} bfree {} files {} ffree {}",
            stats.block_size_bytes, stats.block_count, stats.free_block_count, stats.file_count, stats.free_file_count
        ),
        Reply::Lock { status } => format!("Rlock status {}", status.0),
        Reply::Getlock { query } => format!("Rgetlock type {}", query.lock_type.0),
        Reply::Xattrwalk { size_bytes } => format!("Rxattrwalk size {size_bytes}"),
        other => format!("R{}", name_of(&other)),
    };
    format!("tag {} {body}", tag.0)
}

/// The message's name without its T or R.
fn name_of(reply: &Reply<'_>) -> &'static str {
    match reply {
        Reply::Auth { .. } => "auth",
        Reply::Flush => "flush",
        Reply::Clunk => "clunk",
        Reply::Remove => "remove",
        Reply::Setattr => "setattr",
        Reply::Mkdir { .. } => "mkdir",
        Reply::Symlink { .. } => "symlink",
        Reply::Mknod { .. } => "mknod",
        Reply::Link => "link",
        Reply::Rename => "rename",
        Reply::Renameat => "renameat",
        Reply::Unlinkat => "unlinkat",
        Reply::Fsync => "fsync",
        Reply::Xattrcreate => "xattrcreate",
        _ => "?",
    }
}

/// Writes one trace line to stderr, naming the connection.
pub(crate) fn emit(connection: &str, direction: char, line: &str) {
    eprintln!("9p {connection} {direction} {line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_9p::{encode, Errno, Fid, WalkNames};

    #[test]
    fn lines_name_the_message_and_its_fields() {
        let names = WalkNames::from_slice(&[b"a".as_slice(), b"b"]).expect("names");
        let line = request_line(Tag(3), &Request::Walk { fid: Fid(1), new_fid: Fid(2), names });
        assert_eq!(line, r#"tag 3 Twalk fid 1 newfid 2 ["a", "b"]"#);
        let line = request_line(Tag(4), &Request::Write { fid: Fid(7), offset: 9, data: &[0; 100] });
        assert_eq!(line, "tag 4 Twrite fid 7 offset 9 count 100");
        let mut bytes = [0u8; 64];
        let length = encode(Tag(5), &Reply::Lerror { errno: Errno::ENOENT }, &mut bytes).expect("encode");
        assert_eq!(reply_line(&bytes[..length]), "tag 5 Rlerror 2");
        let length = encode(Tag(6), &Reply::Unlinkat, &mut bytes).expect("encode");
        assert_eq!(reply_line(&bytes[..length]), "tag 6 Runlinkat");
        assert_eq!(undecodable_line(&[9, 0, 0, 0, 110, 8, 0, 0, 0]), "tag 8 type 110: does not decode (9 bytes)");
    }
}
