//! Batched calls (`Node::walk_with_attributes`, `open_clone`, `create_file`,
//! `unlinkat_with_attributes`, `setattr_with_attributes`): against `fsoc serve`, which agrees
//! to the ordered variant 9P2000.L.fsoc, their requests go out together and give the same
//! results as one call after another, also with a single tag; against a server that knows only
//! 9P2000.L (a fake one answering "unknown" to the ordered offer), the client falls back to
//! plain 9P2000.L and sends each request only once the one before is answered, stopping at a
//! refusal.

mod fake_server;
mod support;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use fake_server::{receive_message, send_reply};
use fsoc_9p::constants::{open_flags, setattr};
use fsoc_9p::{decode_request, encode, Errno, Qid, QidType, Reply, Request, SetAttributes, WalkQids};
use fsoc_client::{Client, ConnectOptions};
use support::TestServer;

fn batched_calls_work(client: &Client) {
    assert!(client.ordered(), "fsoc serve agrees to 9P2000.L.fsoc");
    client.create_dir("d").expect("mkdir");
    let root = client.root();
    let (directory, metadata) = root.walk_with_attributes(&[b"d"]).expect("walk and getattr");
    assert!(metadata.is_dir() && directory.is_directory());
    let before = metadata.changed();

    let created =
        directory.create_file(b"f", open_flags::READ_WRITE | open_flags::CREATE, 0o640, 0, true).expect("create");
    assert!(created.metadata.is_file());
    assert_eq!(created.metadata.mode() & 0o7777, 0o640);
    assert_eq!(created.node.qid(), created.opened.qid());
    assert_eq!(created.metadata.ino(), created.opened.qid().path);
    let after = created.directory.as_ref().expect("the directory's attributes");
    assert!(after.changed() >= before, "fetched after the create");
    assert_eq!(created.opened.write_at(0, b"hello").expect("write through the created fid"), 5);

    // The same name again, exclusively: EEXIST, and every fid the batch made is given back.
    let again = directory.create_file(
        b"f",
        open_flags::READ_WRITE | open_flags::CREATE | open_flags::EXCLUSIVE,
        0o640,
        0,
        true,
    );
    assert_eq!(again.expect_err("exclusive create of an existing name").raw_os_error(), Some(libc::EEXIST));

    let opened = created.node.open_clone(open_flags::READ_ONLY).expect("open a clone");
    let mut buffer = [0u8; 16];
    assert_eq!(opened.read_at(0, &mut buffer).expect("read"), 5);
    assert_eq!(&buffer[..5], b"hello");

    let changed = created
        .node
        .setattr_with_attributes(SetAttributes { valid_mask: setattr::MODE, mode: 0o600, ..SetAttributes::default() })
        .expect("setattr and getattr");
    assert_eq!(changed.mode() & 0o7777, 0o600);

    let missing = directory.walk_with_attributes(&[b"nothing"]).expect_err("a missing name");
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    drop((created, opened));
    let after_unlink = directory.unlinkat_with_attributes(b"f", false).expect("unlink").expect("attributes");
    assert_eq!(after_unlink.nlink(), 2, "the directory after the unlink");
    let gone = directory.unlinkat_with_attributes(b"f", false).expect_err("unlinked already");
    assert_eq!(gone.raw_os_error(), Some(libc::ENOENT));
    assert!(client.read_dir("d").expect("list").next().is_none(), "nothing left in d");
}

#[test]
fn batched_calls_against_fsoc_serve() {
    let server = TestServer::start();
    batched_calls_work(&server.connect());
    server.stop();
}

/// A batch that finds no free tag collects its own replies before it sends more.
#[test]
fn batched_calls_with_a_single_tag() {
    let server = TestServer::start();
    let options = ConnectOptions { requests_in_flight_max: 1, ..ConnectOptions::default() };
    batched_calls_work(&server.connect_with(&options));
    server.stop();
}

/// Whether the client has sent anything more within 100 ms (it should be waiting for our
/// reply). A byte read here fails the caller's assertion anyway, so consuming it is harmless.
fn more_pending(stream: &mut UnixStream) -> bool {
    stream.set_read_timeout(Some(std::time::Duration::from_millis(100))).expect("timeout");
    let mut byte = [0u8; 1];
    let pending = stream.read(&mut byte).is_ok_and(|count| count > 0);
    stream.set_read_timeout(None).expect("timeout");
    pending
}

#[test]
fn a_plain_9p2000_l_server_gets_one_request_at_a_time() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("plain.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let directory_qid = Qid { qid_type: QidType::DIRECTORY, version: 0, path: 1 };
        let mut seen = Vec::new();
        loop {
            let message = receive_message(&mut stream);
            let (tag, request) = decode_request(&message).expect("request");
            seen.push(fsoc_9p::constants::message_type::name(request.message_type()).to_string());
            // Clunks are sent without waiting for their replies; nothing else is.
            if !matches!(request, Request::Clunk { .. }) {
                assert!(!more_pending(&mut stream), "a request was sent before {seen:?} was answered");
            }
            match request {
                Request::Version { msize, version } if version == b"9P2000.L" => {
                    send_reply(&mut stream, tag, &Reply::Version { msize, version: b"9P2000.L" })
                }
                Request::Version { msize, .. } => {
                    send_reply(&mut stream, tag, &Reply::Version { msize, version: b"unknown" })
                }
                Request::Attach { .. } => send_reply(&mut stream, tag, &Reply::Attach { qid: directory_qid }),
                Request::Walk { names, .. } => {
                    let qids = WalkQids::from_slice(&vec![directory_qid; names.len()]).expect("qids");
                    send_reply(&mut stream, tag, &Reply::Walk { qids });
                }
                Request::Lcreate { .. } => send_reply(&mut stream, tag, &Reply::Lerror { errno: Errno::EEXIST }),
                // The client may be gone by the last one (it does not wait for clunks).
                Request::Clunk { .. } => {
                    let mut buffer = [0u8; 16];
                    let length = encode(tag, &Reply::Clunk, &mut buffer).expect("encode");
                    let _ = stream.write_all(&buffer[..length]);
                }
                other => panic!("unexpected {other:?} after {seen:?}"),
            }
            if matches!(request, Request::Clunk { .. })
                && seen.iter().filter(|name| name.as_str() == "Tclunk").count() == 2
            {
                return seen;
            }
        }
    });
    let client = Client::connect(&format!("unix:{}", path.display()), &ConnectOptions::default()).expect("connect");
    assert!(!client.ordered(), "the server does not know 9P2000.L.fsoc");
    let refused = client.root().create_file(b"f", open_flags::READ_WRITE | open_flags::CREATE, 0o644, 0, true);
    assert_eq!(refused.expect_err("the fake refuses every create").raw_os_error(), Some(libc::EEXIST));
    // Then the clone walked for the create and the attach's root are clunked.
    drop(client);
    let seen = server.join().expect("fake server");
    assert_eq!(
        seen,
        ["Tversion", "Tversion", "Tattach", "Twalk", "Tlcreate", "Tclunk", "Tclunk"],
        "the ordered offer, then 9P2000.L; after the refused create nothing more of the batch"
    );
}
