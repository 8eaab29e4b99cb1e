//! Every call of the client against an in-process `fsoc serve`: what it returns, the errno of
//! each refusal (ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, ELOOP, EINVAL), the secret at
//! attach, and the typed errors of a server that breaks the protocol or goes away.

mod support;

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use fsoc_client::{Client, ConnectOptions, OpenOptions};
use support::{errno, TestServer};

#[test]
fn files_read_write_seek_and_open_options() {
    let server = TestServer::start();
    let client = server.connect();
    let mut file = client.create("notes").expect("create");
    file.write_all(b"hello, world").expect("write");
    assert_eq!(file.seek(SeekFrom::Start(7)).expect("seek"), 7);
    file.write_all(b"fsoc!").expect("overwrite");
    assert_eq!(file.seek(SeekFrom::End(-5)).expect("seek from end"), 7);
    assert_eq!(file.seek(SeekFrom::Current(2)).expect("seek current"), 9);
    assert_eq!(errno(&file.seek(SeekFrom::Current(-10)).unwrap_err()), libc::EINVAL);
    file.sync_all().expect("fsync");
    file.sync_data().expect("fdatasync");
    drop(file);
    assert_eq!(client.read("notes").expect("read"), b"hello, fsoc!");

    let mut text = String::new();
    client.open("/notes").expect("open").read_to_string(&mut text).expect("read_to_string");
    assert_eq!(text, "hello, fsoc!", "a leading / names the same file");

    // append: every write goes to the end; the position follows.
    let mut appender = OpenOptions::new().append(true).open(&client, "notes").expect("append");
    appender.write_all(b" more").expect("append write");
    assert_eq!(appender.stream_position().expect("position"), 17);
    drop(appender);
    assert_eq!(client.read("notes").expect("read"), b"hello, fsoc! more");

    // truncate, read+write without truncation, create of an existing file.
    let mut both = OpenOptions::new().read(true).write(true).open(&client, "notes").expect("rw");
    let mut head = [0u8; 5];
    both.read_exact(&mut head).expect("read head");
    assert_eq!(&head, b"hello");
    both.write_all(b"!!").expect("write after read");
    drop(both);
    assert_eq!(client.read("notes").expect("read"), b"hello!!fsoc! more");
    OpenOptions::new().write(true).create(true).open(&client, "notes").expect("create existing keeps it");
    assert_eq!(client.metadata("notes").expect("metadata").len(), 17);
    OpenOptions::new().write(true).truncate(true).open(&client, "notes").expect("truncate");
    assert_eq!(client.metadata("notes").expect("metadata").len(), 0);

    // create_new refuses an existing name; flags std refuses are EINVAL.
    let error = OpenOptions::new().write(true).create_new(true).open(&client, "notes").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyExists);
    assert_eq!(errno(&OpenOptions::new().open(&client, "notes").unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&OpenOptions::new().read(true).truncate(true).open(&client, "notes").unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&OpenOptions::new().read(true).create(true).open(&client, "x").unwrap_err()), libc::EINVAL);
    assert_eq!(client.open("missing").unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(errno(&client.open("missing/deeper").unwrap_err()), libc::ENOENT);
    assert_eq!(errno(&client.open("notes/deeper").unwrap_err()), libc::ENOTDIR);

    // set_len, positioned I/O, mode at create, set_permissions.
    let file = OpenOptions::new().read(true).write(true).create(true).mode(0o600).open(&client, "sized").expect("new");
    assert_eq!(file.metadata().expect("metadata").permissions().mode(), 0o600);
    file.set_len(10_000).expect("extend");
    assert_eq!(file.write_at(b"xyz", 9_000).expect("write_at"), 3);
    let mut buffer = [1u8; 4];
    assert_eq!(file.read_at(&mut buffer, 8_999).expect("read_at"), 4);
    assert_eq!(&buffer, b"\0xyz");
    file.set_len(5).expect("shrink");
    assert_eq!(file.metadata().expect("metadata").len(), 5);
    file.set_permissions(std::fs::Permissions::from_mode(0o640)).expect("fchmod");
    client.set_permissions("sized", std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    assert_eq!(client.metadata("sized").expect("metadata").permissions().mode(), 0o4755);
    drop((client, file));
    server.stop();
}

#[test]
fn metadata_describes_files_directories_and_links() {
    let server = TestServer::start();
    let client = server.connect();
    let before = SystemTime::now() - Duration::from_secs(2);
    client.write("file", vec![7u8; 5000]).expect("write");
    client.create_dir("directory").expect("mkdir");
    client.symlink("file", "link").expect("symlink");
    client.hard_link("file", "second").expect("link");

    let file = client.metadata("file").expect("metadata");
    assert!(file.is_file() && !file.is_dir() && !file.is_symlink());
    assert_eq!(file.len(), 5000);
    assert_eq!(file.nlink(), 2, "two names");
    assert_eq!(file.mode() & 0o170000, 0o100000);
    assert_eq!(file.permissions().mode(), 0o666, "default create mode, no umask on the server");
    let options = client.options();
    assert_eq!((file.uid(), file.gid()), (options.uid, options.gid), "owned by the attach's user and group");
    assert!(file.modified() >= before && file.accessed() >= before && file.changed() >= before);
    assert!(file.blocks() >= 5000 / 512, "{}", file.blocks());
    assert!(file.blksize() >= 512);
    assert_eq!(client.metadata("second").expect("metadata").ino(), file.ino(), "a hard link is the same inode");

    let directory = client.metadata("directory").expect("metadata");
    assert!(directory.is_dir() && directory.file_type().is_dir());
    assert_ne!(directory.ino(), file.ino());
    let root = client.metadata("/").expect("root");
    assert!(root.is_dir());
    assert_eq!(root.ino(), 1);

    // metadata follows the link, symlink_metadata does not.
    assert_eq!(client.metadata("link").expect("follow").ino(), file.ino());
    let link = client.symlink_metadata("link").expect("no follow");
    assert!(link.is_symlink());
    assert_eq!(link.len(), 4, "a link's size is its target's length");
    assert_eq!(client.read_link("link").expect("readlink"), PathBuf::from("file"));
    assert_eq!(errno(&client.read_link("file").unwrap_err()), libc::EINVAL);
    assert!(client.exists("link").expect("exists"));
    assert!(!client.exists("nothing").expect("exists"));
    drop(client);
    server.stop();
}

#[test]
fn symbolic_links_are_followed_through_paths() {
    let server = TestServer::start();
    let client = server.connect();
    client.create_dir_all("a/b/c").expect("mkdir -p");
    client.write("a/b/c/leaf", b"leaf").expect("write");
    client.symlink("b/c", "a/relative").expect("relative link");
    client.symlink("/a/b", "absolute").expect("absolute link");
    client.symlink("absolute/c", "chained").expect("link to a link");
    client.symlink("loop2", "loop1").expect("loop");
    client.symlink("loop1", "loop2").expect("loop");
    client.symlink("nowhere", "dangling").expect("dangling");
    client.symlink("../../b", "a/b/c/up").expect("dot-dot link");
    assert_eq!(client.read("a/relative/leaf").expect("relative"), b"leaf");
    assert_eq!(client.read("absolute/c/leaf").expect("absolute"), b"leaf");
    assert_eq!(client.read("chained/leaf").expect("chained"), b"leaf");
    assert_eq!(client.read("a/b/c/up/c/leaf").expect("dot-dot in a target"), b"leaf");
    assert_eq!(client.read("a/relative/../c/leaf").expect(".. after a link is physical"), b"leaf");
    assert_eq!(errno(&client.metadata("loop1").unwrap_err()), libc::ELOOP);
    assert_eq!(errno(&client.metadata("dangling").unwrap_err()), libc::ENOENT);
    assert!(client.symlink_metadata("dangling").expect("the link itself").is_symlink());
    // Writing through a link creates nothing new; create through a link opens its target.
    client.write("chained/leaf", b"changed").expect("write through links");
    assert_eq!(client.read("a/b/c/leaf").expect("read"), b"changed");
    client.symlink("a/b/c/leaf", "to-leaf").expect("link to a file");
    client.write("to-leaf", b"again").expect("create through a link");
    assert_eq!(client.read("a/b/c/leaf").expect("read"), b"again");
    // A path of more than 16 names is walked 16 at a time.
    let deep: PathBuf = (0..40).map(|index| format!("d{index}")).collect();
    client.create_dir_all(&deep).expect("40 levels");
    client.write(deep.join("bottom"), b"deep").expect("write deep");
    assert_eq!(client.read(deep.join("bottom")).expect("read deep"), b"deep");
    assert!(client.metadata(deep.join("bottom")).expect("metadata").is_file());
    drop(client);
    server.stop();
}

#[test]
fn directories_list_create_and_remove() {
    let server = TestServer::start();
    let client = server.connect();
    client.create_dir("dir").expect("mkdir");
    assert_eq!(client.create_dir("dir").unwrap_err().kind(), ErrorKind::AlreadyExists);
    assert_eq!(errno(&client.create_dir("/").unwrap_err()), libc::EEXIST);
    assert_eq!(errno(&client.create_dir("no/such").unwrap_err()), libc::ENOENT);
    client.create_dir_all("dir/x/y/z").expect("mkdir -p");
    client.create_dir_all("dir/x/y/z").expect("mkdir -p of an existing tree");
    client.write("dir/file", b"f").expect("write");
    assert_eq!(errno(&client.create_dir_all("dir/file/sub").unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(&client.create_dir_all("dir/file").unwrap_err()), libc::EEXIST);

    // A listing of more entries than one Rreaddir holds (names of 200 bytes, small msize).
    let small = ConnectOptions { msize_bytes: 8192, ..ConnectOptions::default() };
    let small_client = server.connect_with(&small);
    assert_eq!(small_client.msize_bytes(), 8192);
    let mut expected = Vec::new();
    for index in 0..300 {
        let name = format!("{index:03}-{}", "n".repeat(196));
        small_client.write(format!("dir/{name}"), b"").expect("create");
        expected.push(name);
    }
    expected.push("file".into());
    expected.push("x".into());
    expected.sort();
    let mut listed: Vec<String> = small_client
        .read_dir("dir")
        .expect("read_dir")
        .map(|entry| entry.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    listed.sort();
    assert_eq!(listed, expected, "every name once, no . or ..");
    let entry =
        client.read_dir("dir").expect("read_dir").map(|entry| entry.expect("entry")).find(|e| e.file_name() == "x");
    let entry = entry.expect("x is listed");
    assert!(entry.file_type().is_dir());
    assert_eq!(entry.ino(), client.metadata("dir/x").expect("metadata").ino());
    assert_eq!(entry.path(), PathBuf::from("dir/x"));
    assert_eq!(errno(&client.read_dir("dir/file").unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(&client.read_dir("none").unwrap_err()), libc::ENOENT);

    // Removal: the right call for the right kind, ENOTEMPTY for a full directory.
    assert_eq!(errno(&client.remove_dir("dir").unwrap_err()), libc::ENOTEMPTY);
    assert_eq!(errno(&client.remove_file("dir/x").unwrap_err()), libc::EISDIR);
    assert_eq!(errno(&client.remove_dir("dir/file").unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(&client.remove_file("dir/none").unwrap_err()), libc::ENOENT);
    assert_eq!(errno(&client.remove_dir("/").unwrap_err()), libc::EINVAL);
    client.remove_file("dir/file").expect("unlink");
    client.remove_dir("dir/x/y/z").expect("rmdir");
    client.remove_dir_all("dir").expect("rm -r");
    assert!(!client.exists("dir").expect("exists"));
    assert_eq!(client.read_dir("/").expect("root").count(), 0);
    drop((client, small_client));
    server.stop();
}

#[test]
fn rename_and_links() {
    let server = TestServer::start();
    let client = server.connect();
    client.create_dir_all("a/b").expect("mkdir");
    client.create_dir("c").expect("mkdir");
    client.write("a/one", b"1").expect("write");
    client.write("c/two", b"2").expect("write");
    client.rename("a/one", "c/moved").expect("rename across directories");
    assert_eq!(client.read("c/moved").expect("read"), b"1");
    assert_eq!(errno(&client.metadata("a/one").unwrap_err()), libc::ENOENT);
    client.rename("c/moved", "c/two").expect("rename over a file");
    assert_eq!(client.read("c/two").expect("read"), b"1");
    assert_eq!(client.read_dir("c").expect("list").count(), 1);
    assert_eq!(errno(&client.rename("c", "a").unwrap_err()), libc::ENOTEMPTY, "over a non-empty directory");
    assert_eq!(errno(&client.rename("a", "a/b/inside").unwrap_err()), libc::EINVAL, "into itself");
    assert_eq!(errno(&client.rename("none", "x").unwrap_err()), libc::ENOENT);
    client.rename("a/b", "c/b").expect("rename a directory");
    assert!(client.metadata("c/b").expect("metadata").is_dir());

    client.hard_link("c/two", "a/again").expect("link");
    assert_eq!(client.metadata("a/again").expect("metadata").nlink(), 2);
    assert_eq!(errno(&client.hard_link("c/two", "a/again").unwrap_err()), libc::EEXIST);
    assert_eq!(errno(&client.hard_link("c", "a/dirlink").unwrap_err()), libc::EPERM);
    assert_eq!(errno(&client.hard_link("none", "a/x").unwrap_err()), libc::ENOENT);
    assert_eq!(errno(&client.symlink("x", "a/again").unwrap_err()), libc::EEXIST);
    client.remove_file("c/two").expect("unlink one name");
    assert_eq!(client.read("a/again").expect("the other name"), b"1");
    assert_eq!(client.metadata("a/again").expect("metadata").nlink(), 1);

    // An open file outlives its unlink until it is closed.
    let mut open = client.open("a/again").expect("open");
    client.remove_file("a/again").expect("unlink while open");
    let mut contents = Vec::new();
    open.read_to_end(&mut contents).expect("read after unlink");
    assert_eq!(contents, b"1");
    drop(open);

    let directory_open = OpenOptions::new().write(true).open(&client, "c");
    assert_eq!(errno(&directory_open.unwrap_err()), libc::EISDIR);
    drop(client);
    server.stop();
}

#[test]
fn statfs_sync_tcp_and_the_secret() {
    let config = fsoc_serve::ServeConfig { secret: Some(b"0123456789abcdef-secret".to_vec()), ..Default::default() };
    let server = TestServer::start_with(config, true);
    assert!(server.address.starts_with("tcp:127.0.0.1:"), "{}", server.address);
    let refused = Client::connect(&server.address, &ConnectOptions::default()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");
    assert!(refused.to_string().contains("secret"), "{refused}");
    let directory = tempfile::tempdir().expect("tempdir");
    let secret_file = directory.path().join("secret");
    std::fs::write(&secret_file, "0123456789abcdef-secret\n").expect("write secret");
    let options = ConnectOptions::default().secret_file(&secret_file).expect("secret file");
    let client = server.connect_with(&options);
    let stats = client.statfs().expect("statfs");
    assert_eq!(stats.fs_type, 0x6673_6f63, "\"fsoc\"");
    assert_eq!(stats.name_length_max, 255);
    assert!(stats.block_count > 0 && stats.free_block_count <= stats.block_count);
    client.write("durable", vec![3u8; 100_000]).expect("write");
    let after = client.statfs().expect("statfs");
    assert!(after.free_block_count < stats.free_block_count, "{after:?} vs {stats:?}");
    client.sync().expect("sync");
    drop(client);
    let fs = server.stop();
    let (inode, _) = fs.lookup(1, b"durable").expect("on the volume");
    assert_eq!(fs.read(inode, 0, 200_000).expect("read").len(), 100_000);
}

#[test]
fn addresses_that_do_not_answer_are_errors() {
    let directory = tempfile::tempdir().expect("tempdir");
    let missing = format!("unix:{}", directory.path().join("none.sock").display());
    assert_eq!(Client::connect(&missing, &ConnectOptions::default()).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(Client::connect("udp:1:2", &ConnectOptions::default()).unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// A fake server that answers Tversion properly and then sends `after_version` for whatever
/// comes next; returns the client's error.
fn against_fake_server(after_version: Vec<u8>) -> std::io::Error {
    use std::os::unix::net::UnixListener;
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("fake.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let thread = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut request = [0u8; 64];
        let _ = stream.read(&mut request).expect("Tversion");
        let mut reply = vec![0u8; 64];
        let version = fsoc_9p::Reply::Version { msize: 8192, version: b"9P2000.L" };
        let length = fsoc_9p::encode(fsoc_9p::Tag::NONE, &version, &mut reply).expect("encode");
        stream.write_all(&reply[..length]).expect("Rversion");
        let _ = stream.read(&mut request).expect("Tattach");
        let _ = stream.write_all(&after_version);
        // Close after a moment, so a client still waiting sees the end.
        std::thread::sleep(Duration::from_millis(100));
    });
    let options = ConnectOptions { msize_bytes: 8192, ..ConnectOptions::default() };
    let error = Client::connect(&format!("unix:{}", path.display()), &options).unwrap_err();
    thread.join().expect("fake server");
    error
}

#[test]
fn a_server_breaking_the_protocol_gives_typed_errors() {
    // A size field above msize: the reply cannot be framed.
    let mut oversized = 100_000u32.to_le_bytes().to_vec();
    oversized.extend_from_slice(&[105, 0, 0]);
    let error = against_fake_server(oversized);
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
    assert!(error.to_string().contains("above msize"), "{error}");
    // A reply under a tag nobody sent.
    let error = against_fake_server(vec![20, 0, 0, 0, 105, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
    assert!(error.to_string().contains("not in flight"), "{error}");
    // Rattach with a body too short for its qid.
    let error = against_fake_server(vec![9, 0, 0, 0, 105, 0, 0, 1, 2]);
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
    // Rread where Rattach belongs.
    let error = against_fake_server(vec![11, 0, 0, 0, 117, 0, 0, 0, 0, 0, 0]);
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
    assert!(error.to_string().contains("Tattach answered with"), "{error}");
    // The server goes away.
    let error = against_fake_server(Vec::new());
    assert_eq!(error.kind(), ErrorKind::ConnectionAborted, "{error}");
}

#[test]
fn a_stopped_server_aborts_the_connection() {
    let server = TestServer::start();
    let client = server.connect();
    client.write("file", b"x").expect("write");
    let file = client.open("file").expect("open");
    let stopper_thread = std::thread::spawn(move || server.stop());
    // The server finishes once its connections are idle; this one is, so it closes it.
    std::thread::sleep(Duration::from_millis(300));
    let error = client.metadata("file").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionAborted, "{error}");
    let mut buffer = [0u8; 1];
    assert_eq!(file.read_at(&mut buffer, 0).unwrap_err().kind(), ErrorKind::ConnectionAborted);
    drop((file, client));
    stopper_thread.join().expect("server stops");
}
