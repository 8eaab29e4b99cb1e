//! POSIX edge cases of the model, each driven through `Session::check`, the one helper
//! that applies an operation at the next logical time and runs the model's invariant
//! checker afterwards.

use fsoc_model::errno::*;
use fsoc_model::{
    listing_through_calls, FileKind, ModelConfig, ModelFs, OpenFlags, Operation, Outcome, Output, Whence,
};

const TIME_STEP_NS: i64 = 1_000;

struct Session {
    model: ModelFs,
    now_ns: i64,
}

impl Session {
    fn new() -> Self {
        Session::with_config(ModelConfig::default())
    }

    fn with_config(config: ModelConfig) -> Self {
        Session { model: ModelFs::new(config), now_ns: 0 }
    }

    /// Applies `operation` one time step later than the previous one; checks invariants.
    fn check(&mut self, operation: Operation) -> Outcome {
        self.now_ns += TIME_STEP_NS;
        let outcome = self.model.apply(&operation, self.now_ns);
        self.model.check();
        outcome
    }

    fn ok(&mut self, operation: Operation) -> Output {
        let text = format!("{operation:?}");
        self.check(operation).unwrap_or_else(|errno| panic!("{text}: errno {errno}"))
    }

    fn err(&mut self, operation: Operation) -> i32 {
        let text = format!("{operation:?}");
        match self.check(operation) {
            Ok(output) => panic!("{text}: expected an error, got {output:?}"),
            Err(errno) => errno,
        }
    }

    fn open(&mut self, path: &str, flags: OpenFlags) -> u32 {
        match self.ok(open(path, flags)) {
            Output::Fd(fd) => fd,
            other => panic!("open returned {other:?}"),
        }
    }

    fn stat(&mut self, path: &str) -> fsoc_model::Attributes {
        match self.ok(Operation::Stat { path: path.into() }) {
            Output::Attributes(attributes) => attributes,
            other => panic!("stat returned {other:?}"),
        }
    }

    fn fstat(&mut self, fd: u32) -> fsoc_model::Attributes {
        match self.ok(Operation::Fstat { fd }) {
            Output::Attributes(attributes) => attributes,
            other => panic!("fstat returned {other:?}"),
        }
    }

    fn names(&mut self, path: &str) -> Vec<String> {
        match self.ok(Operation::Readdir { path: path.into() }) {
            Output::Entries(entries) => {
                entries.into_iter().map(|(name, _)| String::from_utf8(name).expect("ascii")).collect()
            }
            other => panic!("readdir returned {other:?}"),
        }
    }

    fn pread(&mut self, fd: u32, offset: u64, size_bytes: u64) -> Vec<u8> {
        match self.ok(Operation::Pread { fd, offset, size_bytes }) {
            Output::Bytes(bytes) => bytes,
            other => panic!("pread returned {other:?}"),
        }
    }

    fn create_file(&mut self, path: &str, data: &[u8]) {
        let fd = self.open(path, OpenFlags::CREATE.with_exclusive());
        assert_eq!(self.ok(write(fd, data)), Output::Count(data.len() as u64));
        self.ok(Operation::Close { fd });
    }
}

fn open(path: &str, flags: OpenFlags) -> Operation {
    Operation::Open { path: path.into(), flags, mode: 0o644 }
}
fn write(fd: u32, data: &[u8]) -> Operation {
    Operation::Write { fd, data: data.to_vec() }
}
fn mkdir(path: &str) -> Operation {
    Operation::Mkdir { path: path.into(), mode: 0o755 }
}
fn rename(source: &str, target: &str) -> Operation {
    Operation::Rename { source_path: source.into(), target_path: target.into() }
}
fn unlink(path: &str) -> Operation {
    Operation::Unlink { path: path.into() }
}
fn rmdir(path: &str) -> Operation {
    Operation::Rmdir { path: path.into() }
}
fn link(existing: &str, new: &str) -> Operation {
    Operation::Link { existing_path: existing.into(), new_path: new.into() }
}
fn symlink(target: &str, path: &str) -> Operation {
    Operation::Symlink { target: target.into(), link_path: path.into() }
}

#[test]
fn fresh_file_system_has_an_empty_root() {
    let mut session = Session::new();
    let root = session.stat("/");
    assert_eq!((root.ino, root.kind, root.mode, root.nlink, root.size), (1, FileKind::Directory, 0o755, 2, 0));
    assert_eq!((root.atime_ns, root.mtime_ns, root.ctime_ns), (0, 0, 0));
    assert!(session.names("/").is_empty());
}

#[test]
fn open_errors_follow_the_documented_order() {
    let mut session = Session::new();
    session.create_file("/f", b"data");
    session.ok(mkdir("/d"));
    session.ok(symlink("/f", "/s"));
    let create = OpenFlags::CREATE;
    assert_eq!(session.err(open("/missing", OpenFlags::READ_ONLY)), ENOENT);
    assert_eq!(session.err(open("/missing/x", create)), ENOENT);
    assert_eq!(session.err(open("/f/x", create)), ENOTDIR);
    assert_eq!(session.err(open("/s/x", create)), ENOTDIR, "intermediate symlink");
    assert_eq!(session.err(open("/f", create.with_exclusive())), EEXIST);
    assert_eq!(session.err(open("/s", create.with_exclusive())), EEXIST);
    assert_eq!(session.err(open("/d", create.with_exclusive())), EEXIST);
    assert_eq!(session.err(open("/d", create)), EISDIR);
    assert_eq!(session.err(open("/d", OpenFlags::READ_WRITE)), EISDIR);
    assert_eq!(session.err(open("/", OpenFlags::WRITE_ONLY)), EISDIR);
    assert_eq!(session.err(open("/f", OpenFlags::DIRECTORY)), ENOTDIR);
    assert_eq!(session.err(open("/s", OpenFlags::DIRECTORY)), ENOTDIR);
    assert_eq!(session.err(open("/s", OpenFlags::READ_ONLY)), ELOOP);
    assert_eq!(session.err(open("/f", OpenFlags::default())), EINVAL);
    assert_eq!(session.err(open("/n", OpenFlags::CREATE.with_directory())), EINVAL);
    assert_eq!(session.err(open("/a/../f", OpenFlags::READ_ONLY)), EINVAL);
    assert_eq!(session.err(open("f", OpenFlags::READ_ONLY)), EINVAL);
    // Successes: a directory read-only, the root, and create on an existing file, which
    // opens it without truncating.
    assert_eq!(session.open("/d", OpenFlags::DIRECTORY), 3);
    assert_eq!(session.open("/", OpenFlags::READ_ONLY), 4);
    let fd = session.open("/f", create);
    assert_eq!(fd, 5);
    assert_eq!(session.pread(fd, 0, 100), b"data");
}

#[test]
fn descriptors_are_the_lowest_unused_number_from_three() {
    let mut session = Session::new();
    let fds: Vec<u32> = (0..4).map(|_| session.open("/f", OpenFlags::CREATE)).collect();
    assert_eq!(fds, [3, 4, 5, 6]);
    session.ok(Operation::Close { fd: 4 });
    session.ok(Operation::Close { fd: 3 });
    assert_eq!(session.open("/f", OpenFlags::READ_ONLY), 3);
    assert_eq!(session.open("/f", OpenFlags::READ_ONLY), 4);
    assert_eq!(session.open("/f", OpenFlags::READ_ONLY), 7);
    assert_eq!(session.err(Operation::Close { fd: 8 }), EBADF);
    assert_eq!(session.err(Operation::Close { fd: 0 }), EBADF);
}

#[test]
fn open_fd_count_is_bounded_by_emfile() {
    let config = ModelConfig { open_fd_count_max: 2, ..ModelConfig::default() };
    let mut session = Session::with_config(config);
    session.open("/f", OpenFlags::CREATE);
    session.open("/f", OpenFlags::CREATE);
    assert_eq!(session.err(open("/f", OpenFlags::CREATE)), EMFILE);
    assert_eq!(session.err(open("/g", OpenFlags::CREATE)), EMFILE);
    assert_eq!(session.err(Operation::Stat { path: b"/g".to_vec() }), ENOENT, "nothing created");
}

#[test]
fn truncate_flag_acts_only_with_write() {
    let mut session = Session::new();
    session.create_file("/f", b"hello");
    let read_fd = session.open("/f", OpenFlags::READ_ONLY.with_truncate());
    assert_eq!(session.fstat(read_fd).size, 5, "read-only truncate is ignored");
    let before = session.stat("/f");
    let write_fd = session.open("/f", OpenFlags::WRITE_ONLY.with_truncate());
    let after = session.fstat(write_fd);
    assert_eq!(after.size, 0);
    assert!(after.mtime_ns > before.mtime_ns && after.ctime_ns > before.ctime_ns);
}

#[test]
fn reads_and_writes_respect_access_mode_and_offsets() {
    let mut session = Session::new();
    session.create_file("/f", b"0123456789");
    let read_fd = session.open("/f", OpenFlags::READ_ONLY);
    let write_fd = session.open("/f", OpenFlags::WRITE_ONLY);
    assert_eq!(session.err(write(read_fd, b"x")), EBADF);
    assert_eq!(session.err(Operation::Pwrite { fd: read_fd, offset: 0, data: b"x".to_vec() }), EBADF);
    assert_eq!(session.err(Operation::Read { fd: write_fd, size_bytes: 1 }), EBADF);
    assert_eq!(session.err(Operation::Pread { fd: write_fd, offset: 0, size_bytes: 1 }), EBADF);
    assert_eq!(session.err(Operation::Read { fd: 99, size_bytes: 1 }), EBADF);
    assert_eq!(session.ok(Operation::Read { fd: read_fd, size_bytes: 4 }), Output::Bytes(b"0123".to_vec()));
    assert_eq!(session.ok(Operation::Read { fd: read_fd, size_bytes: 100 }), Output::Bytes(b"456789".to_vec()));
    assert_eq!(session.ok(Operation::Read { fd: read_fd, size_bytes: 100 }), Output::Bytes(vec![]));
    // pread does not move the offset; write does.
    assert_eq!(session.pread(read_fd, 8, 100), b"89");
    assert_eq!(session.ok(write(write_fd, b"ab")), Output::Count(2));
    assert_eq!(session.ok(write(write_fd, b"cd")), Output::Count(2));
    assert_eq!(session.pread(read_fd, 0, 100), b"abcd456789");
    let seek = |fd, offset, whence| Operation::Seek { fd, offset, whence };
    assert_eq!(session.ok(seek(write_fd, 0, Whence::Current)), Output::Count(4));
    assert_eq!(session.ok(seek(write_fd, -2, Whence::End)), Output::Count(8));
    assert_eq!(session.ok(seek(write_fd, 3, Whence::Set)), Output::Count(3));
    assert_eq!(session.err(seek(write_fd, -4, Whence::Current)), EINVAL);
    assert_eq!(session.ok(seek(write_fd, 0, Whence::Current)), Output::Count(3), "unchanged");
    // A directory descriptor reads as EISDIR, writes as EBADF, seeks and fsyncs fine.
    let directory_fd = session.open("/", OpenFlags::DIRECTORY);
    assert_eq!(session.err(Operation::Read { fd: directory_fd, size_bytes: 1 }), EISDIR);
    assert_eq!(session.err(Operation::Pread { fd: directory_fd, offset: 0, size_bytes: 1 }), EISDIR);
    assert_eq!(session.err(write(directory_fd, b"x")), EBADF);
    assert_eq!(session.err(Operation::Ftruncate { fd: directory_fd, size_bytes: 0 }), EINVAL);
    assert_eq!(session.ok(seek(directory_fd, 0, Whence::End)), Output::Count(0));
    assert_eq!(session.ok(Operation::Fsync { fd: directory_fd }), Output::Unit);
}

#[test]
fn zero_length_writes_change_nothing() {
    let mut session = Session::new();
    session.create_file("/f", b"abc");
    let fd = session.open("/f", OpenFlags::READ_WRITE.with_append());
    let before = session.fstat(fd);
    assert_eq!(session.ok(write(fd, b"")), Output::Count(0));
    assert_eq!(session.ok(Operation::Pwrite { fd, offset: 1 << 60, data: vec![] }), Output::Count(0));
    assert_eq!(session.fstat(fd), before);
    assert_eq!(session.ok(Operation::Seek { fd, offset: 0, whence: Whence::Current }), Output::Count(0));
}

#[test]
fn append_writes_go_to_the_end_even_through_pwrite() {
    let mut session = Session::new();
    session.create_file("/f", b"head");
    let fd = session.open("/f", OpenFlags::READ_WRITE.with_append());
    session.ok(Operation::Seek { fd, offset: 1, whence: Whence::Set });
    assert_eq!(session.ok(write(fd, b"-one")), Output::Count(4));
    assert_eq!(session.ok(Operation::Seek { fd, offset: 0, whence: Whence::Current }), Output::Count(8));
    assert_eq!(session.ok(Operation::Pwrite { fd, offset: 0, data: b"-two".to_vec() }), Output::Count(4));
    assert_eq!(session.pread(fd, 0, 100), b"head-one-two");
    // pwrite leaves the offset where write put it.
    assert_eq!(session.ok(Operation::Seek { fd, offset: 0, whence: Whence::Current }), Output::Count(8));
    // Another descriptor's writes extend the file; append follows.
    let other = session.open("/f", OpenFlags::WRITE_ONLY);
    session.ok(Operation::Pwrite { fd: other, offset: 20, data: b"!".to_vec() });
    session.ok(write(fd, b"?"));
    assert_eq!(session.fstat(fd).size, 22);
    assert_eq!(session.pread(fd, 21, 1), b"?");
}

#[test]
fn holes_read_as_zeros() {
    let mut session = Session::new();
    let fd = session.open("/f", OpenFlags::CREATE);
    session.ok(Operation::Pwrite { fd, offset: 10_000, data: b"tail".to_vec() });
    assert_eq!(session.fstat(fd).size, 10_004);
    let mut expected = vec![0u8; 10_000];
    expected.extend_from_slice(b"tail");
    assert_eq!(session.pread(fd, 0, 20_000), expected);
    // Shrinking discards data; growing again reads zeros, not the old bytes.
    session.ok(Operation::Ftruncate { fd, size_bytes: 10_002 });
    session.ok(Operation::Ftruncate { fd, size_bytes: 10_010 });
    assert_eq!(session.pread(fd, 10_000, 100), b"ta\0\0\0\0\0\0\0\0");
    session.ok(Operation::Truncate { path: b"/f".to_vec(), size_bytes: 1 << 20 });
    assert_eq!(session.stat("/f").size, 1 << 20);
    assert_eq!(session.pread(fd, (1 << 20) - 3, 100), vec![0; 3]);
    // Seeking past EOF and writing leaves a hole too.
    session.ok(Operation::Seek { fd, offset: 5, whence: Whence::End });
    session.ok(write(fd, b"x"));
    assert_eq!(session.pread(fd, (1 << 20) - 1, 100), b"\0\0\0\0\0\0x");
}

#[test]
fn file_size_limit_gives_efbig_and_seek_einval() {
    let config = ModelConfig { file_size_max_bytes: 100, ..ModelConfig::default() };
    let mut session = Session::with_config(config);
    let fd = session.open("/f", OpenFlags::CREATE);
    assert_eq!(session.ok(Operation::Pwrite { fd, offset: 99, data: b"x".to_vec() }), Output::Count(1));
    assert_eq!(session.err(Operation::Pwrite { fd, offset: 99, data: b"xy".to_vec() }), EFBIG);
    assert_eq!(session.err(Operation::Pwrite { fd, offset: u64::MAX, data: b"x".to_vec() }), EFBIG);
    assert_eq!(session.stat("/f").size, 100, "a failed write writes nothing");
    assert_eq!(session.err(Operation::Ftruncate { fd, size_bytes: 101 }), EFBIG);
    assert_eq!(session.err(Operation::Truncate { path: b"/f".to_vec(), size_bytes: 101 }), EFBIG);
    assert_eq!(session.ok(Operation::Seek { fd, offset: 100, whence: Whence::Set }), Output::Count(100));
    assert_eq!(session.err(Operation::Seek { fd, offset: 101, whence: Whence::Set }), EINVAL);
    assert_eq!(session.err(Operation::Seek { fd, offset: i64::MAX, whence: Whence::End }), EINVAL);
    assert_eq!(session.err(write(fd, b"z")), EFBIG, "offset 100 is at the limit");
}

#[test]
fn ftruncate_needs_a_writable_descriptor() {
    let mut session = Session::new();
    session.create_file("/f", b"abc");
    let fd = session.open("/f", OpenFlags::READ_ONLY);
    assert_eq!(session.err(Operation::Ftruncate { fd, size_bytes: 0 }), EINVAL);
    assert_eq!(session.err(Operation::Ftruncate { fd: 42, size_bytes: 0 }), EBADF);
}

#[test]
fn path_truncate_rejects_directories_and_symlinks() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    session.ok(symlink("/d", "/s"));
    let truncate = |path: &str| Operation::Truncate { path: path.into(), size_bytes: 0 };
    assert_eq!(session.err(truncate("/d")), EISDIR);
    assert_eq!(session.err(truncate("/")), EISDIR);
    assert_eq!(session.err(truncate("/s")), EINVAL);
    assert_eq!(session.err(truncate("/missing")), ENOENT);
}

#[test]
fn nlink_counts_names_and_subdirectories() {
    let mut session = Session::new();
    session.create_file("/f", b"");
    assert_eq!(session.stat("/f").nlink, 1);
    session.ok(mkdir("/d"));
    session.ok(link("/f", "/d/g"));
    assert_eq!(session.stat("/f").nlink, 2);
    assert_eq!(session.stat("/d/g").nlink, 2);
    assert_eq!(session.stat("/").nlink, 3);
    assert_eq!(session.stat("/d").nlink, 2, "files do not count");
    session.ok(mkdir("/d/e"));
    session.ok(mkdir("/d/e2"));
    assert_eq!(session.stat("/d").nlink, 4);
    assert_eq!(session.stat("/").nlink, 3, "grandchildren do not count");
    session.ok(unlink("/f"));
    assert_eq!(session.stat("/d/g").nlink, 1);
    session.ok(rmdir("/d/e"));
    assert_eq!(session.stat("/d").nlink, 3);
    // Moving a directory moves its count between parents.
    session.ok(rename("/d/e2", "/e2"));
    assert_eq!(session.stat("/d").nlink, 2);
    assert_eq!(session.stat("/").nlink, 4);
}

#[test]
fn link_errors() {
    let mut session = Session::new();
    session.create_file("/f", b"");
    session.ok(mkdir("/d"));
    assert_eq!(session.err(link("/d", "/d2")), EPERM);
    assert_eq!(session.err(link("/d", "/f")), EEXIST, "EEXIST comes before EPERM");
    assert_eq!(session.err(link("/f", "/d")), EEXIST);
    assert_eq!(session.err(link("/f", "/")), EEXIST);
    assert_eq!(session.err(link("/missing", "/x")), ENOENT);
    assert_eq!(session.err(link("/f", "/missing/x")), ENOENT);
    assert_eq!(session.err(link("/f", "/f/x")), ENOTDIR);
    // A symlink can be hard-linked itself.
    session.ok(symlink("target", "/s"));
    session.ok(link("/s", "/s2"));
    assert_eq!(session.stat("/s").nlink, 2);
    assert_eq!(session.ok(Operation::Readlink { path: b"/s2".to_vec() }), Output::Bytes(b"target".to_vec()));
}

#[test]
fn link_count_limit_gives_emlink() {
    let config = ModelConfig { link_count_max: 3, ..ModelConfig::default() };
    let mut session = Session::with_config(config);
    session.create_file("/f", b"");
    session.ok(link("/f", "/g"));
    session.ok(link("/f", "/h"));
    assert_eq!(session.err(link("/f", "/i")), EMLINK);
    session.ok(mkdir("/d"));
    assert_eq!(session.stat("/").nlink, 3);
    assert_eq!(session.err(mkdir("/e")), EMLINK);
    session.ok(mkdir("/d/e"));
    assert_eq!(session.err(rename("/d/e", "/e")), EMLINK);
    session.ok(rename("/d/e", "/d/e2")); // same parent: no new link
}

#[test]
fn unlinked_open_file_lives_until_last_close() {
    let mut session = Session::new();
    session.create_file("/f", b"keep");
    let first = session.open("/f", OpenFlags::READ_WRITE);
    let second = session.open("/f", OpenFlags::READ_ONLY);
    session.ok(unlink("/f"));
    assert!(session.names("/").is_empty());
    assert_eq!(session.err(Operation::Stat { path: b"/f".to_vec() }), ENOENT);
    assert_eq!(session.fstat(first).nlink, 0);
    session.ok(Operation::Pwrite { fd: first, offset: 4, data: b"-more".to_vec() });
    assert_eq!(session.pread(second, 0, 100), b"keep-more");
    session.ok(Operation::Close { fd: first });
    assert_eq!(session.pread(second, 0, 100), b"keep-more");
    // A new file with the same name is a different file.
    session.create_file("/f", b"new");
    assert_eq!(session.pread(second, 0, 100), b"keep-more");
    session.ok(Operation::Close { fd: second });
    let listing = session.model.listing();
    assert_eq!(listing.entries.len(), 2, "{listing:?}");
}

#[test]
fn remount_closes_descriptors_and_frees_open_unlinked_files() {
    let mut session = Session::new();
    session.create_file("/f", b"x");
    let fd = session.open("/f", OpenFlags::READ_ONLY);
    session.ok(unlink("/f"));
    session.ok(Operation::Remount);
    assert_eq!(session.err(Operation::Fstat { fd }), EBADF);
    assert_eq!(session.open("/", OpenFlags::READ_ONLY), 3, "numbering restarts");
    assert!(session.model.open_files().len() == 1);
}

#[test]
fn rename_replaces_files_and_empty_directories() {
    let mut session = Session::new();
    session.create_file("/a", b"source");
    session.create_file("/b", b"target");
    let target_fd = session.open("/b", OpenFlags::READ_ONLY);
    session.ok(rename("/a", "/b"));
    assert_eq!(session.names("/"), ["b"]);
    let fd = session.open("/b", OpenFlags::READ_ONLY);
    assert_eq!(session.pread(fd, 0, 100), b"source");
    // The replaced file is now open-unlinked.
    assert_eq!(session.pread(target_fd, 0, 100), b"target");
    assert_eq!(session.fstat(target_fd).nlink, 0);
    session.ok(mkdir("/d"));
    session.ok(mkdir("/e"));
    session.ok(mkdir("/d/sub"));
    session.ok(rename("/e", "/d/sub"));
    assert_eq!(session.names("/"), ["b", "d"]);
    assert_eq!(session.stat("/").nlink, 3);
    assert_eq!(session.stat("/d").nlink, 3);
}

#[test]
fn rename_errors_follow_the_documented_order() {
    let mut session = Session::new();
    session.create_file("/f", b"");
    session.ok(mkdir("/d"));
    session.ok(mkdir("/d/sub"));
    session.create_file("/d/sub/g", b"");
    session.ok(mkdir("/empty"));
    assert_eq!(session.err(rename("/missing", "/x")), ENOENT);
    assert_eq!(session.err(rename("/f", "/missing/x")), ENOENT);
    assert_eq!(session.err(rename("/missing/x", "/f/y")), ENOENT, "source parent first");
    assert_eq!(session.err(rename("/f/x", "/missing/y")), ENOTDIR);
    assert_eq!(session.err(rename("/", "/x")), EBUSY);
    assert_eq!(session.err(rename("/d", "/")), EBUSY);
    assert_eq!(session.err(rename("/d", "/d/sub/new")), EINVAL, "into own subtree");
    assert_eq!(session.err(rename("/d", "/d/new")), EINVAL);
    assert_eq!(session.err(rename("/d", "/d/sub/g")), EINVAL, "EINVAL before ENOTDIR");
    assert_eq!(session.err(rename("/d/sub", "/d")), ENOTEMPTY, "target is an ancestor");
    assert_eq!(session.err(rename("/d/sub/g", "/d")), ENOTEMPTY, "even for a file source");
    assert_eq!(session.err(rename("/d", "/f")), ENOTDIR);
    assert_eq!(session.err(rename("/f", "/empty")), EISDIR);
    assert_eq!(session.err(rename("/empty", "/d")), ENOTEMPTY);
    assert_eq!(session.err(rename("/a/../b", "/x")), EINVAL);
    let listing = session.model.listing();
    assert_eq!(listing.entries.len(), 6, "nothing moved: {listing:?}");
}

#[test]
fn rename_onto_the_same_inode_does_nothing() {
    let mut session = Session::new();
    session.create_file("/f", b"");
    session.ok(link("/f", "/g"));
    session.ok(mkdir("/d"));
    let before = session.model.listing();
    session.ok(rename("/f", "/f"));
    session.ok(rename("/f", "/g"));
    session.ok(rename("/d", "/d"));
    assert_eq!(session.model.listing(), before, "no names and no timestamps change");
}

#[test]
fn rename_moves_a_directory_with_its_contents() {
    let mut session = Session::new();
    session.ok(mkdir("/a"));
    session.ok(mkdir("/a/b"));
    session.create_file("/a/b/f", b"deep");
    session.ok(mkdir("/c"));
    session.ok(rename("/a/b", "/c/moved"));
    let fd = session.open("/c/moved/f", OpenFlags::READ_ONLY);
    assert_eq!(session.pread(fd, 0, 10), b"deep");
    assert!(session.names("/a").is_empty());
    assert_eq!(session.stat("/a").nlink, 2);
    assert_eq!(session.stat("/c").nlink, 3);
}

#[test]
fn rmdir_and_unlink_errors() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    session.create_file("/d/f", b"");
    session.ok(symlink("/d", "/s"));
    assert_eq!(session.err(rmdir("/")), EBUSY);
    assert_eq!(session.err(rmdir("/d")), ENOTEMPTY);
    assert_eq!(session.err(rmdir("/d/f")), ENOTDIR);
    assert_eq!(session.err(rmdir("/s")), ENOTDIR);
    assert_eq!(session.err(rmdir("/missing")), ENOENT);
    assert_eq!(session.err(rmdir("/d/f/x")), ENOTDIR);
    assert_eq!(session.err(unlink("/d")), EISDIR);
    assert_eq!(session.err(unlink("/")), EISDIR);
    assert_eq!(session.err(unlink("/missing")), ENOENT);
    session.ok(unlink("/s"));
    session.ok(unlink("/d/f"));
    session.ok(rmdir("/d"));
    assert!(session.names("/").is_empty());
    assert_eq!(session.stat("/").nlink, 2);
}

#[test]
fn removed_directory_stays_open_with_nlink_zero() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    let fd = session.open("/d", OpenFlags::DIRECTORY);
    session.ok(rmdir("/d"));
    let attributes = session.fstat(fd);
    assert_eq!((attributes.kind, attributes.nlink), (FileKind::Directory, 0));
    session.ok(Operation::Close { fd });
    assert_eq!(session.model.listing().entries.len(), 1);
}

#[test]
fn mkdir_errors() {
    let mut session = Session::new();
    session.create_file("/f", b"");
    session.ok(symlink("/nowhere", "/s"));
    assert_eq!(session.err(mkdir("/")), EEXIST);
    assert_eq!(session.err(mkdir("/f")), EEXIST);
    assert_eq!(session.err(mkdir("/s")), EEXIST);
    assert_eq!(session.err(mkdir("/f/d")), ENOTDIR);
    assert_eq!(session.err(mkdir("/x/d")), ENOENT);
    let attributes = {
        session.ok(Operation::Mkdir { path: b"/m".to_vec(), mode: 0o170_750 });
        session.stat("/m")
    };
    assert_eq!(attributes.mode, 0o750, "only permission bits are kept");
}

#[test]
fn symlinks_are_never_followed() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    session.ok(symlink("/d", "/s"));
    let attributes = session.stat("/s");
    assert_eq!((attributes.kind, attributes.mode, attributes.size, attributes.nlink), (FileKind::Symlink, 0o777, 2, 1));
    assert_eq!(session.ok(Operation::Readlink { path: b"/s".to_vec() }), Output::Bytes(b"/d".to_vec()));
    assert_eq!(session.err(Operation::Readlink { path: b"/d".to_vec() }), EINVAL);
    assert_eq!(session.err(Operation::Readlink { path: b"/".to_vec() }), EINVAL);
    assert_eq!(session.err(Operation::Stat { path: b"/s/x".to_vec() }), ENOTDIR);
    assert_eq!(session.err(Operation::Readdir { path: b"/s".to_vec() }), ENOTDIR);
    assert_eq!(session.err(symlink("", "/t")), ENOENT);
    assert_eq!(session.err(symlink("a\0b", "/t")), EINVAL);
    let long_target = "x".repeat(4096);
    assert_eq!(session.err(symlink(&long_target, "/t")), ENAMETOOLONG);
    assert_eq!(session.err(symlink("", "/bad/..")), ENOENT, "target checked first");
    assert_eq!(session.err(symlink("x", "/s")), EEXIST);
    assert_eq!(session.err(symlink("x", "/")), EEXIST);
    // Dangling and relative targets are stored verbatim.
    session.ok(symlink("../../nowhere", "/t"));
    assert_eq!(session.stat("/t").size, 13);
}

#[test]
fn names_are_checked_before_lookup() {
    let mut session = Session::new();
    let long = "n".repeat(255);
    session.create_file(&format!("/{long}"), b"");
    let too_long = "n".repeat(256);
    assert_eq!(session.err(Operation::Stat { path: format!("/{too_long}").into() }), ENAMETOOLONG);
    assert_eq!(session.err(Operation::Stat { path: format!("/missing/{too_long}").into() }), ENAMETOOLONG);
    assert_eq!(session.err(Operation::Stat { path: b"/missing/.".to_vec() }), EINVAL);
    assert_eq!(session.err(Operation::Stat { path: b"/a//b".to_vec() }), EINVAL);
    assert_eq!(session.err(Operation::Stat { path: b"/a/".to_vec() }), EINVAL);
    assert_eq!(session.err(Operation::Stat { path: b"".to_vec() }), EINVAL);
    assert_eq!(session.names("/"), [long]);
}

#[test]
fn timestamps_follow_posix_with_noatime() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    let created_ns = session.now_ns;
    let directory = session.stat("/d");
    assert_eq!((directory.atime_ns, directory.mtime_ns, directory.ctime_ns), (created_ns, created_ns, created_ns));
    assert_eq!(session.stat("/").mtime_ns, created_ns, "parent modified");
    let fd = session.open("/d/f", OpenFlags::CREATE);
    let file_created_ns = session.now_ns;
    assert_eq!(session.stat("/d").mtime_ns, file_created_ns);
    assert_eq!(session.stat("/").mtime_ns, created_ns, "grandparent untouched");
    session.ok(write(fd, b"abc"));
    let written_ns = session.now_ns;
    let file = session.fstat(fd);
    assert_eq!((file.atime_ns, file.mtime_ns, file.ctime_ns), (file_created_ns, written_ns, written_ns));
    assert_eq!(session.stat("/d").mtime_ns, file_created_ns, "writes leave the parent alone");
    // Reads never touch atime (noatime).
    session.ok(Operation::Pread { fd, offset: 0, size_bytes: 3 });
    assert_eq!(session.fstat(fd).atime_ns, file_created_ns);
    session.ok(Operation::Chmod { path: b"/d/f".to_vec(), mode: 0o600 });
    let chmod_ns = session.now_ns;
    let file = session.fstat(fd);
    assert_eq!((file.mode, file.mtime_ns, file.ctime_ns), (0o600, written_ns, chmod_ns));
    session.ok(Operation::Chown { path: b"/d/f".to_vec(), uid: 7, gid: 8 });
    let chown_ns = session.now_ns;
    let file = session.fstat(fd);
    assert_eq!((file.uid, file.gid, file.ctime_ns), (7, 8, chown_ns));
    session.ok(Operation::Utimens { path: b"/d/f".to_vec(), atime_ns: 11, mtime_ns: 22 });
    let utimens_ns = session.now_ns;
    let file = session.fstat(fd);
    assert_eq!((file.atime_ns, file.mtime_ns, file.ctime_ns), (11, 22, utimens_ns));
    // Link stamps the inode's ctime and the new parent; rename both parents and the inode.
    session.ok(link("/d/f", "/g"));
    let link_ns = session.now_ns;
    assert_eq!(session.fstat(fd).ctime_ns, link_ns);
    assert_eq!(session.stat("/").mtime_ns, link_ns);
    assert_eq!(session.stat("/d").mtime_ns, file_created_ns);
    session.ok(rename("/g", "/d/h"));
    let rename_ns = session.now_ns;
    assert_eq!(session.stat("/").mtime_ns, rename_ns);
    assert_eq!(session.stat("/d").mtime_ns, rename_ns);
    assert_eq!(session.fstat(fd).ctime_ns, rename_ns);
    assert_eq!(session.fstat(fd).mtime_ns, 22, "rename keeps mtime");
    session.ok(unlink("/d/h"));
    let unlink_ns = session.now_ns;
    assert_eq!(session.fstat(fd).ctime_ns, unlink_ns);
    session.ok(Operation::Ftruncate { fd, size_bytes: 3 });
    let truncate_ns = session.now_ns;
    assert_eq!(session.fstat(fd).mtime_ns, truncate_ns, "even without a size change");
}

#[test]
fn power_cut_reverts_to_the_last_fsync_or_transact() {
    let mut session = Session::new();
    let committed_at_format = session.model.listing();
    session.create_file("/lost", b"never committed");
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing(), committed_at_format);

    let fd = session.open("/a", OpenFlags::CREATE);
    session.ok(write(fd, b"durable"));
    session.ok(Operation::Fsync { fd });
    let after_fsync = session.model.listing();
    assert_eq!(session.model.committed_listing(), after_fsync);
    session.ok(write(fd, b" and more"));
    session.ok(mkdir("/b"));
    assert_ne!(session.model.committed_listing(), session.model.listing());
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing(), after_fsync);
    assert_eq!(session.err(Operation::Fstat { fd }), EBADF, "descriptors are gone");
    assert_eq!(session.open("/a", OpenFlags::READ_ONLY), 3);

    session.ok(mkdir("/c"));
    session.ok(Operation::Transact);
    let after_transact = session.model.listing();
    session.ok(unlink("/a"));
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing(), after_transact);

    // A failed fsync commits nothing.
    session.ok(mkdir("/e"));
    assert_eq!(session.err(Operation::Fsync { fd: 77 }), EBADF);
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing(), after_transact);

    // Remount commits (clean unmount).
    session.ok(mkdir("/f"));
    session.ok(Operation::Remount);
    let after_remount = session.model.listing();
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing(), after_remount);
}

#[test]
fn power_cut_frees_files_open_unlinked_at_commit_time() {
    let mut session = Session::new();
    let fd = session.open("/f", OpenFlags::CREATE);
    session.ok(unlink("/f"));
    session.ok(write(fd, b"orphan"));
    session.ok(Operation::Fsync { fd });
    session.ok(Operation::PowerCut);
    assert_eq!(session.model.listing().entries.len(), 1);
    assert!(session.model.open_fds().is_empty());
    session.ok(Operation::PowerCut);
}

#[test]
fn explicit_commit_moves_the_power_cut_point() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    session.model.commit();
    session.ok(mkdir("/e"));
    session.ok(Operation::PowerCut);
    assert_eq!(session.names("/"), ["d"]);
}

#[test]
fn statfs_and_transact_succeed() {
    let mut session = Session::new();
    assert_eq!(session.ok(Operation::Statfs), Output::Statfs);
    assert_eq!(session.ok(Operation::Transact), Output::Unit);
}

#[test]
fn listing_through_calls_matches_the_direct_listing() {
    let mut session = Session::new();
    session.ok(mkdir("/d"));
    session.create_file("/d/f", b"contents");
    session.ok(link("/d/f", "/z"));
    session.ok(symlink("/d/f", "/d/s"));
    let fd = session.open("/sparse", OpenFlags::CREATE);
    session.ok(Operation::Pwrite { fd, offset: 3 << 20, data: b"end".to_vec() });
    session.ok(Operation::Ftruncate { fd, size_bytes: 5 << 20 });
    session.ok(unlink("/sparse"));
    let fd = session.open("/sparse2", OpenFlags::CREATE);
    session.ok(Operation::Pwrite { fd, offset: (2 << 20) + 5, data: b"end".to_vec() });
    session.ok(Operation::Ftruncate { fd, size_bytes: 3 << 20 });
    let direct = session.model.listing();
    let now_ns = session.now_ns;
    let mut model = session.model.clone();
    let through_calls = listing_through_calls(|operation| model.apply(operation, now_ns));
    assert_eq!(through_calls, direct);
    assert_eq!(model.open_fds(), session.model.open_fds(), "listing closes what it opens");
    let paths: Vec<&[u8]> = direct.entries.iter().map(|entry| entry.path.as_slice()).collect();
    assert_eq!(paths, [&b"/"[..], b"/d", b"/d/f", b"/d/s", b"/sparse2", b"/z"]);
    assert_eq!(direct.get(b"/z").and_then(|entry| entry.hard_link_of.clone()), Some(b"/d/f".to_vec()));
}
