//! Every 9P2000.L message against a live server, with its error paths: what each answers on a
//! fresh volume, through the codec-built test client (support/mod.rs).

mod support;

use fsoc_9p::constants::{dirent_type, getattr, open_flags, setattr, UNLINKAT_REMOVE_DIRECTORY};
use fsoc_9p::{Errno, LockQuery, LockRequest, LockStatus, LockType, QidType, SetAttributes, Timestamp};
use fsoc_serve::ServeConfig;
use support::TestServer;

const ROOT: u32 = 1;
const RDONLY: u32 = open_flags::READ_ONLY;
const WRONLY: u32 = open_flags::WRITE_ONLY;
const RDWR: u32 = open_flags::READ_WRITE;

fn server() -> TestServer {
    TestServer::start(ServeConfig { commit_interval: None, ..ServeConfig::default() })
}

#[test]
fn version_attach_and_auth() {
    let server = server();
    let mut client = server.connect_raw();
    // Before Tversion nothing else is understood.
    assert_eq!(client.attach(ROOT, b"user", b""), Err(Errno::EPROTO));
    assert_eq!(client.version(8192), (8192, b"9P2000.L".to_vec()));
    assert_eq!(client.auth(7), Err(Errno::EOPNOTSUPP), "no authentication: Tauth is refused");
    let qid = client.attach(ROOT, b"user", b"").expect("attach");
    assert_eq!((qid.qid_type, qid.path), (QidType::DIRECTORY, 1), "the root is inode 1");
    assert_eq!(client.attach(ROOT, b"user", b""), Err(Errno::EBADF), "fid in use");
    assert_eq!(client.attach(2, b"user", b"/"), Ok(qid), "aname / is the root too");
    assert_eq!(client.attach(3, b"user", b"/elsewhere"), Err(Errno::ENOENT), "one tree only");
    let with_afid = fsoc_9p::Request::Attach {
        fid: fsoc_9p::Fid(4),
        afid: fsoc_9p::Fid(9),
        uname: b"user",
        aname: b"",
        n_uname: 0,
    };
    assert_eq!(client.call(&with_afid).errno(), Some(Errno::EBADF), "no auth fid exists");
    server.stop();
}

#[test]
fn walks_succeed_partially_or_fail_on_the_first_name() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    let a = client.mkdir(ROOT, b"a", 0o755).expect("mkdir a");
    client.walk(ROOT, 2, &[b"a"]).expect("walk a");
    let b = client.mkdir(2, b"b", 0o755).expect("mkdir b");
    client.clunk(2).expect("clunk");
    assert_eq!(client.walk(ROOT, 3, &[b"a", b"b"]), Ok(vec![a, b]));
    assert_eq!(client.walk(ROOT, 4, &[b"a", b"missing", b"b"]), Ok(vec![a]), "partial walk: fewer qids");
    assert_eq!(client.getattr(4), Err(Errno::EBADF), "a partial walk creates no fid");
    assert_eq!(client.walk(ROOT, 4, &[b"missing"]), Err(Errno::ENOENT), "the first name fails: Rlerror");
    assert_eq!(client.walk(ROOT, 4, &[b"."]), Err(Errno::ENOENT), "`.` is not a name");
    assert_eq!(client.walk(3, 4, &[b"..", b".."]), Ok(vec![a, client.getattr(ROOT).expect("root").qid]));
    assert_eq!(client.walk(ROOT, 5, &[b".."]).map(|qids| qids[0].path), Ok(1), "never above the root");
    assert_eq!(client.walk(ROOT, 3, &[]), Err(Errno::EBADF), "newfid in use");
    assert_eq!(client.walk(99, 6, &[]), Err(Errno::EBADF), "unknown fid");
    // A walk through a file fails with ENOTDIR at that step.
    client.put(ROOT, 7, b"file", b"x");
    assert_eq!(client.walk(ROOT, 8, &[b"file", b"deeper"]).map(|qids| qids.len()), Ok(1));
    client.walk(ROOT, 8, &[b"file"]).expect("walk file");
    assert_eq!(client.walk(8, 9, &[b"deeper"]), Err(Errno::ENOTDIR));
    // Walking a fid onto itself replaces it.
    client.walk(3, 3, &[b".."]).expect("walk in place");
    assert_eq!(client.getattr(3).map(|attributes| attributes.qid), Ok(a));
    let sixteen: Vec<&[u8]> = vec![b"..".as_slice(); 16];
    assert_eq!(client.walk(ROOT, 10, &sixteen).map(|qids| qids.len()), Ok(16));
    server.stop();
}

#[test]
fn files_are_created_opened_read_written_and_removed() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    client.walk(ROOT, 2, &[]).expect("clone");
    let (qid, iounit) = client.lcreate(2, b"f", RDWR | open_flags::CREATE, 0o640).expect("lcreate");
    assert_eq!(qid.qid_type, QidType::FILE);
    assert_eq!(iounit, client.msize - 24, "iounit: the data one message carries");
    assert_eq!(client.write(2, 0, b"hello, world"), Ok(12));
    assert_eq!(client.read(2, 7, 100), Ok(b"world".to_vec()));
    assert_eq!(client.read(2, 100, 10), Ok(Vec::new()), "past the end: nothing");
    let attributes = client.getattr(2).expect("getattr");
    assert_eq!(attributes.mode, 0o100640);
    assert_eq!((attributes.size_bytes, attributes.link_count, attributes.uid, attributes.gid), (12, 1, 1000, 100));
    assert_eq!(attributes.valid_mask & getattr::BASIC, getattr::BASIC);
    client.clunk(2).expect("clunk");
    assert_eq!(client.clunk(2), Err(Errno::EBADF), "clunked already");

    // Opening: access modes, a directory for writing, O_TRUNC, O_APPEND, O_EXCL.
    client.walk(ROOT, 3, &[b"f"]).expect("walk");
    assert_eq!(client.read(3, 0, 10), Err(Errno::EBADF), "not open");
    assert_eq!(client.lopen(3, 3).map(|_| ()), Err(Errno::EINVAL), "access mode 3");
    client.lopen(3, RDONLY).expect("lopen");
    assert_eq!(client.lopen(3, RDONLY).map(|_| ()), Err(Errno::EBADF), "open already");
    assert_eq!(client.write(3, 0, b"x"), Err(Errno::EBADF), "read-only fid");
    client.clunk(3).expect("clunk");
    client.walk(ROOT, 3, &[]).expect("clone root");
    assert_eq!(client.lopen(3, WRONLY).map(|_| ()), Err(Errno::EISDIR), "a directory for writing");
    assert_eq!(
        client.lcreate(3, b"f", WRONLY | open_flags::CREATE | open_flags::EXCLUSIVE, 0o644).map(|_| ()),
        Err(Errno::EEXIST)
    );
    client.lcreate(3, b"f", WRONLY | open_flags::CREATE | open_flags::APPEND, 0o644).expect("O_CREAT opens the file");
    assert_eq!(client.write(3, 0, b"!"), Ok(1), "appended whatever the offset");
    assert_eq!(client.read(3, 0, 10), Err(Errno::EBADF), "write-only fid");
    client.clunk(3).expect("clunk");
    assert_eq!(client.get(ROOT, 4, &[b"f"]), Ok(b"hello, world!".to_vec()));
    client.walk(ROOT, 4, &[b"f"]).expect("walk");
    client.lopen(4, WRONLY | open_flags::TRUNCATE).expect("lopen O_TRUNC");
    assert_eq!(client.getattr(4).map(|attributes| attributes.size_bytes), Ok(0));
    client.clunk(4).expect("clunk");

    // Tremove clunks the fid, even when it fails.
    client.walk(ROOT, 5, &[b"f"]).expect("walk");
    client.remove(5).expect("remove");
    assert_eq!(client.getattr(5), Err(Errno::EBADF), "Tremove clunked the fid");
    assert_eq!(client.walk(ROOT, 5, &[b"f"]), Err(Errno::ENOENT));
    client.walk(ROOT, 6, &[]).expect("clone root");
    assert_eq!(client.remove(6), Err(Errno::EBUSY), "the root cannot be removed");
    assert_eq!(client.getattr(6), Err(Errno::EBADF), "clunked anyway");
    server.stop();
}

#[test]
fn an_unlinked_open_file_lives_until_its_fid_is_clunked() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    client.put(ROOT, 2, b"doomed", b"still here");
    client.walk(ROOT, 3, &[b"doomed"]).expect("walk");
    client.lopen(3, RDONLY).expect("lopen");
    client.unlinkat(ROOT, b"doomed", 0).expect("unlink");
    assert_eq!(client.walk(ROOT, 4, &[b"doomed"]), Err(Errno::ENOENT));
    assert_eq!(client.read(3, 0, 100), Ok(b"still here".to_vec()), "open-unlinked reads on");
    client.clunk(3).expect("clunk");
    assert_eq!(client.getattr(3), Err(Errno::EBADF));
    let mut fs = server.stop().fs;
    assert!(fs.fsck(true).expect("fsck").is_clean(), "no orphan left behind");
}

#[test]
fn attributes_are_set() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    client.put(ROOT, 2, b"f", b"0123456789");
    client.walk(ROOT, 3, &[b"f"]).expect("walk");
    let time = |seconds| Timestamp { seconds, nanoseconds: 5 };
    let change = SetAttributes {
        valid_mask: setattr::MODE
            | setattr::UID
            | setattr::GID
            | setattr::SIZE
            | setattr::ATIME
            | setattr::ATIME_SET
            | setattr::MTIME
            | setattr::MTIME_SET,
        mode: 0o600,
        uid: 7,
        gid: 8,
        size_bytes: 4,
        access_time: time(1_000),
        modify_time: time(2_000),
    };
    client.setattr(3, change).expect("setattr");
    let attributes = client.getattr(3).expect("getattr");
    assert_eq!((attributes.mode, attributes.uid, attributes.gid, attributes.size_bytes), (0o100600, 7, 8, 4));
    assert_eq!((attributes.access_time, attributes.modify_time), (time(1_000), time(2_000)));
    // MTIME without MTIME_SET means now; CTIME alone touches ctime.
    client.setattr(3, SetAttributes { valid_mask: setattr::MTIME, ..SetAttributes::default() }).expect("now");
    assert!(client.getattr(3).expect("getattr").modify_time.seconds > 1_600_000_000);
    client.setattr(3, SetAttributes { valid_mask: setattr::CTIME, ..SetAttributes::default() }).expect("ctime");
    client.walk(ROOT, 4, &[]).expect("clone root");
    let truncate = SetAttributes { valid_mask: setattr::SIZE, size_bytes: 1, ..SetAttributes::default() };
    assert_eq!(client.setattr(4, truncate), Err(Errno::EISDIR), "a directory has no size to set");
    server.stop();
}

#[test]
fn directories_are_made_listed_and_removed() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    let qid = client.mkdir(ROOT, b"d", 0o750).expect("mkdir");
    assert_eq!(qid.qid_type, QidType::DIRECTORY);
    assert_eq!(client.mkdir(ROOT, b"d", 0o750), Err(Errno::EEXIST));
    client.walk(ROOT, 2, &[b"d"]).expect("walk");
    let mut names: Vec<Vec<u8>> = (0..300).map(|index| format!("entry-{index:04}").into_bytes()).collect();
    for name in &names {
        client.put(2, 3, name, name);
    }
    client.mkdir(2, b"sub", 0o755).expect("mkdir sub");
    assert_eq!(client.walk(2, 4, &[b"sub"]).map(|qids| qids.len()), Ok(1));
    client.put(4, 5, b"inner", b"x");
    client.clunk(4).expect("clunk");
    assert_eq!(client.readdir(2, 0, 4096), Err(Errno::EBADF), "not open");
    client.lopen(2, RDONLY | open_flags::DIRECTORY).expect("lopen dir");
    // Small replies, each continuing from the last entry's offset: every name once, in order.
    let listed = client.list(2, 200).expect("list");
    names.push(b"sub".to_vec());
    names.sort();
    let mut expected = vec![b".".to_vec(), b"..".to_vec()];
    expected.extend(names.iter().cloned());
    assert_eq!(listed, expected);
    let first = client.readdir(2, 0, 4096).expect("readdir");
    assert_eq!((first[0].2, first[2].2), (dirent_type::DIRECTORY, dirent_type::REGULAR));
    assert_eq!(client.readdir(2, 0, 10), Ok(Vec::new()), "a count below one entry: nothing");
    // rmdir of a non-empty directory, unlink of a directory, rmdir of a file.
    assert_eq!(client.unlinkat(2, b"sub", UNLINKAT_REMOVE_DIRECTORY), Err(Errno::ENOTEMPTY));
    assert_eq!(client.unlinkat(2, b"sub", 0), Err(Errno::EISDIR));
    assert_eq!(client.unlinkat(2, b"entry-0000", UNLINKAT_REMOVE_DIRECTORY), Err(Errno::ENOTDIR));
    assert_eq!(client.unlinkat(2, b"entry-0000", 0x4000), Err(Errno::EINVAL), "unknown flag");
    assert_eq!(client.unlinkat(2, b"missing", 0), Err(Errno::ENOENT));
    client.walk(2, 6, &[b"sub"]).expect("walk sub");
    client.unlinkat(6, b"inner", 0).expect("unlink inner");
    client.unlinkat(2, b"sub", UNLINKAT_REMOVE_DIRECTORY).expect("rmdir");
    assert_eq!(client.readdir(6, 0, 100), Err(Errno::EBADF), "a fid of a removed, unopened directory");
    // Reading a directory's data, and a file as a directory.
    assert_eq!(client.read(2, 0, 10), Err(Errno::EISDIR));
    client.walk(2, 7, &[b"entry-0001"]).expect("walk file");
    client.lopen(7, RDONLY).expect("lopen");
    assert_eq!(client.readdir(7, 0, 100), Err(Errno::ENOTDIR));
    assert_eq!(client.mkdir(7, b"x", 0o755), Err(Errno::ENOTDIR));
    server.stop();
}

#[test]
fn links_symlinks_and_renames() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    client.put(ROOT, 2, b"f", b"data");
    let link = client.symlink(ROOT, b"l", b"f").expect("symlink");
    assert_eq!(link.qid_type, QidType::SYMLINK);
    assert_eq!(client.symlink(ROOT, b"empty", b""), Err(Errno::ENOENT), "an empty target");
    client.walk(ROOT, 3, &[b"l"]).expect("walk");
    assert_eq!(client.readlink(3), Ok(b"f".to_vec()));
    assert_eq!(client.getattr(3).map(|attributes| attributes.mode), Ok(0o120777));
    assert_eq!(client.lopen(3, RDONLY).map(|_| ()), Err(Errno::ELOOP), "a symlink is not opened");
    client.walk(ROOT, 4, &[b"f"]).expect("walk f");
    assert_eq!(client.readlink(4), Err(Errno::EINVAL), "not a symlink");
    client.link(ROOT, 4, b"hard").expect("link");
    assert_eq!(client.getattr(4).map(|attributes| attributes.link_count), Ok(2));
    assert_eq!(client.link(ROOT, 4, b"hard"), Err(Errno::EEXIST));
    client.mkdir(ROOT, b"d", 0o755).expect("mkdir");
    client.walk(ROOT, 5, &[b"d"]).expect("walk d");
    assert_eq!(client.link(ROOT, 5, b"dirlink"), Err(Errno::EPERM), "no hard links to directories");
    // Trename moves the fid's file; the fid follows it.
    client.rename(4, 5, b"moved").expect("rename");
    assert_eq!(client.get(ROOT, 6, &[b"d", b"moved"]), Ok(b"data".to_vec()));
    client.rename(4, ROOT, b"back").expect("the fid knows where its file went");
    // Trenameat by names; onto an existing name it replaces.
    client.renameat(ROOT, b"back", 5, b"again").expect("renameat");
    client.renameat(ROOT, b"hard", 5, b"again").expect("renameat onto a link of the same file");
    assert_eq!(client.renameat(ROOT, b"missing", 5, b"x"), Err(Errno::ENOENT));
    assert_eq!(client.renameat(ROOT, b"d", 5, b"inside"), Err(Errno::EINVAL), "into itself");
    assert_eq!(client.rename(4, 5, b"x"), Err(Errno::ESTALE), "the fid's name was moved by renameat");
    client.walk(ROOT, 7, &[]).expect("clone root");
    assert_eq!(client.rename(7, 5, b"root"), Err(Errno::EBUSY), "the root has no name to change");
    server.stop();
}

/// An attribute list's names (NUL-terminated, in the volume's order), sorted.
fn sorted_names(list: Vec<u8>) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> =
        list.split(|&byte| byte == 0).filter(|name| !name.is_empty()).map(<[u8]>::to_vec).collect();
    names.sort();
    names
}

#[test]
fn fsync_statfs_locks_xattrs_and_mknod() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    client.put(ROOT, 2, b"f", b"durable");
    client.walk(ROOT, 3, &[b"f"]).expect("walk");
    client.fsync(3).expect("fsync");
    let stats = client.statfs(ROOT).expect("statfs");
    assert_eq!((stats.fs_type, stats.name_length_max, stats.fs_id), (0x6673_6f63, 255, 1));
    assert!(stats.free_block_count > 0 && stats.free_block_count <= stats.block_count);
    assert_eq!(client.statfs(99), Err(Errno::EBADF));
    // Extended attributes (format version 4): Txattrwalk to read one or the list, Txattrcreate
    // + Twrite + Tclunk to set, a declared size of 0 to remove.
    assert_eq!(client.getxattr(3, 4, b"user.x"), Err(Errno::ENODATA));
    assert_eq!(client.getxattr(3, 4, b""), Ok(Vec::new()), "no attributes yet");
    let big: Vec<u8> = (0..65_536u32).map(|index| (index % 251) as u8).collect();
    assert_eq!(client.setxattr(3, 4, b"user.colour", b"blue", 0), Ok(()));
    assert_eq!(client.setxattr(3, 4, b"user.big", &big, 0), Ok(()));
    assert_eq!(client.getxattr(3, 4, b"user.colour"), Ok(b"blue".to_vec()));
    assert_eq!(client.getxattr(3, 4, b"user.big"), Ok(big.clone()), "64 KiB in several reads");
    assert_eq!(client.getxattr(3, 4, b"").map(sorted_names), Ok(vec![b"user.big".to_vec(), b"user.colour".to_vec()]));
    assert_eq!(client.setxattr(3, 4, b"user.colour", b"red", 1), Err(Errno::EEXIST), "XATTR_CREATE");
    assert_eq!(client.setxattr(3, 4, b"user.none", b"red", 2), Err(Errno::ENODATA), "XATTR_REPLACE");
    assert_eq!(client.xattrcreate(3, b"user.huge", 65_537, 0), Err(Errno::E2BIG));
    assert_eq!(client.xattrcreate(3, b"other.x", 1, 0), Err(Errno::EOPNOTSUPP), "no such namespace");
    assert_eq!(client.xattrcreate(3, b"user.x", 1, 3), Err(Errno::EINVAL), "CREATE and REPLACE");
    // A short value is refused at the clunk; the fid goes all the same.
    client.walk(3, 4, &[]).expect("clone");
    client.xattrcreate(4, b"user.short", 10, 0).expect("xattrcreate");
    client.write(4, 0, b"abc").expect("write");
    assert_eq!(client.write(4, 0, b"again"), Err(Errno::EINVAL), "in order only");
    assert_eq!(client.clunk(4), Err(Errno::EINVAL));
    assert_eq!(client.getxattr(3, 4, b"user.short"), Err(Errno::ENODATA));
    // Removal: Txattrcreate of size 0 (what the Linux client sends for removexattr).
    assert_eq!(client.setxattr(3, 4, b"user.colour", b"", 2), Ok(()));
    assert_eq!(client.getxattr(3, 4, b"user.colour"), Err(Errno::ENODATA));
    assert_eq!(client.setxattr(3, 4, b"user.colour", b"", 2), Err(Errno::ENODATA), "removing what is gone");
    // The attach user is uid 1000, the file's owner: user. is its own, trusted. and security.
    // are root's, as Linux rules for a caller without capabilities.
    assert_eq!(client.setxattr(3, 4, b"trusted.t", b"root only", 0), Err(Errno::EPERM));
    assert_eq!(client.setxattr(3, 4, b"security.s", b"root only", 0), Err(Errno::EPERM));
    let mut root = server.connect();
    root.attach_as(ROOT, b"root", b"", 0).expect("attach as root");
    root.walk(ROOT, 3, &[b"f"]).expect("walk");
    assert_eq!(root.setxattr(3, 4, b"trusted.t", b"root only", 0), Ok(()));
    assert_eq!(root.getxattr(3, 4, b"").map(sorted_names), Ok(vec![b"trusted.t".to_vec(), b"user.big".to_vec()]));
    assert_eq!(client.getxattr(3, 4, b"").map(sorted_names), Ok(vec![b"user.big".to_vec()]), "trusted. hidden");
    assert_eq!(client.getxattr(3, 4, b"trusted.t"), Err(Errno::ENODATA));
    let lock =
        LockRequest { lock_type: LockType::WRITE, flags: 0, start: 0, length: 0, proc_id: 42, client_id: b"host" };
    assert_eq!(client.lock(3, lock), Ok(LockStatus::SUCCESS), "granted: one device, no arbitration");
    assert_eq!(client.lock(3, LockRequest { lock_type: LockType(7), ..lock }), Err(Errno::EINVAL));
    let query = LockQuery { lock_type: LockType::READ, start: 5, length: 10, proc_id: 42, client_id: b"host" };
    assert_eq!(client.getlock(3, query), Ok((LockType::UNLOCK.0, 5, 10, 42, b"host".to_vec())), "nothing conflicts");
    assert_eq!(client.getlock(3, LockQuery { lock_type: LockType(3), ..query }), Err(Errno::EINVAL));
    // Device nodes, FIFOs and sockets (format version 3): a FILE qid (9P2000.L has no other
    // type for them), the kind and device number in Rgetattr's mode and rdev.
    assert_eq!(client.mknod(ROOT, b"fifo", 0o010644).map(|qid| qid.qid_type), Ok(QidType::FILE));
    assert_eq!(client.mknod(ROOT, b"device", 0o020644).map(|qid| qid.qid_type), Ok(QidType::FILE));
    assert_eq!(client.mknod(ROOT, b"socket", 0o140644).map(|qid| qid.qid_type), Ok(QidType::FILE));
    assert_eq!(client.mknod(ROOT, b"fifo", 0o010644), Err(Errno::EEXIST));
    client.walk(ROOT, 50, &[b"device"]).expect("walk to the device node");
    let attributes = client.getattr(50).expect("getattr");
    assert_eq!((attributes.mode & 0o170000, attributes.mode & 0o7777, attributes.rdev), (0o020000, 0o644, 0x103));
    assert_eq!(client.mknod(ROOT, b"dir", 0o040755), Err(Errno::EINVAL), "directories are Tmkdir's");
    assert_eq!(client.mknod(ROOT, b"odd", 0o170644), Err(Errno::EINVAL), "no such file type");
    assert_eq!(client.mknod(ROOT, b"plain", 0o100644).map(|qid| qid.qid_type), Ok(QidType::FILE));
    server.stop();
}

#[test]
fn malformed_messages_get_rlerror_and_the_connection_goes_on() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    // An unknown type (Topen of 9P2000): EOPNOTSUPP under its tag.
    client.send_bytes(&[11, 0, 0, 0, 112, 5, 0, 1, 0, 0, 0]).expect("send");
    let reply = client.receive();
    assert_eq!((reply.tag().0, reply.errno()), (5, Some(Errno::EOPNOTSUPP)));
    // A Tclunk one byte short: EPROTO.
    client.send_bytes(&[10, 0, 0, 0, 120, 6, 0, 1, 0, 0]).expect("send");
    let reply = client.receive();
    assert_eq!((reply.tag().0, reply.errno()), (6, Some(Errno::EPROTO)));
    // A name longer than 255 bytes: ENAMETOOLONG.
    let mut twalk = vec![0u8, 0, 0, 0, 110, 7, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0x00, 0x01];
    twalk.extend(std::iter::repeat_n(b'a', 256));
    let size = twalk.len() as u32;
    twalk[..4].copy_from_slice(&size.to_le_bytes());
    client.send_bytes(&twalk).expect("send");
    let reply = client.receive();
    assert_eq!((reply.tag().0, reply.errno()), (7, Some(Errno::ENAMETOOLONG)));
    // A Tversion under another tag than NOTAG is refused and the session goes on.
    client.send(fsoc_9p::Tag(8), &fsoc_9p::Request::Version { msize: 8192, version: b"9P2000.L" });
    let reply = client.receive();
    assert_eq!((reply.tag().0, reply.errno()), (8, Some(Errno::EINVAL)));
    assert!(client.getattr(ROOT).is_ok(), "the session was not reset");
    server.stop();
}

/// With a secret, Tattach needs it as uname or aname; the third wrong attach is answered and
/// then the connection is closed.
#[test]
fn a_secret_is_checked_at_attach() {
    let secret = b"0123456789abcdef-secret".to_vec();
    let server = TestServer::start(ServeConfig {
        secret: Some(secret.clone()),
        commit_interval: None,
        ..ServeConfig::default()
    });
    let mut client = server.connect();
    assert_eq!(client.attach(ROOT, b"user", b""), Err(Errno::EACCES));
    assert_eq!(client.attach(ROOT, b"user", b"0123456789abcdef-secreT"), Err(Errno::EACCES));
    assert_eq!(client.attach(ROOT, b"0123456789abcdef-secre", b""), Err(Errno::EACCES), "the third is answered");
    assert!(client.is_closed(), "then the connection is closed");
    let mut by_aname = server.connect();
    assert_eq!(by_aname.attach(ROOT, b"user", &secret).map(|qid| qid.path), Ok(1));
    let mut by_uname = server.connect();
    assert_eq!(by_uname.attach(ROOT, &secret, b"/").map(|qid| qid.path), Ok(1));
    assert_eq!(by_uname.attach(2, &secret, b"/other"), Err(Errno::ENOENT), "the secret does not open other trees");
    server.stop();
}

/// O_SYNC and O_DSYNC (P9_DOTL_SYNC, P9_DOTL_DSYNC): a create and every write on the fid are
/// durable before their reply (a transaction point programs pages), where a plain create and
/// write stay in the working state until the next transaction point (none here: no commit
/// interval).
#[test]
fn o_sync_makes_creates_and_writes_durable_before_the_reply() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    let programs = |server: &TestServer| server.gate.programs();

    client.walk(ROOT, 2, &[]).expect("clone");
    let before = programs(&server);
    client.lcreate(2, b"plain", open_flags::READ_WRITE | open_flags::CREATE, 0o644).expect("create");
    client.write(2, 0, b"working state").expect("write");
    assert_eq!(programs(&server), before, "a plain create and write program nothing");

    for (index, sync) in [open_flags::SYNC | open_flags::DATA_SYNC, open_flags::DATA_SYNC].into_iter().enumerate() {
        let fid = 3 + index as u32;
        client.walk(ROOT, fid, &[]).expect("clone");
        let before_create = programs(&server);
        let name = format!("durable{index}");
        client
            .lcreate(fid, name.as_bytes(), open_flags::READ_WRITE | open_flags::CREATE | sync, 0o644)
            .expect("create");
        let after_create = programs(&server);
        assert!(after_create > before_create, "flags {sync:#o}: the create is committed before Rlcreate");
        client.write(fid, 0, b"durable").expect("write");
        assert!(programs(&server) > after_create, "flags {sync:#o}: the write is committed before Rwrite");
    }

    // An existing file opened O_SYNC: its writes too.
    client.walk(ROOT, 6, &[b"plain"]).expect("walk");
    client.lopen(6, open_flags::WRITE_ONLY | open_flags::SYNC | open_flags::DATA_SYNC).expect("lopen");
    let before_write = programs(&server);
    client.write(6, 0, b"again").expect("write");
    assert!(programs(&server) > before_write, "a write through an O_SYNC open is committed before Rwrite");
    server.stop();
}
