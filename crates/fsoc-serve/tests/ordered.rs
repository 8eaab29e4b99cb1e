//! The ordered session (Tversion "9P2000.L.fsoc", docs/PROTOCOL.md 6.3.1): requests start in
//! arrival order, a sequential one after every earlier request has ended, a concurrent one
//! (Tread, Twrite, Treaddir, Tfsync) after every earlier sequential one; so a client may send
//! requests that depend on each other without waiting in between. A plain 9P2000.L session
//! keeps answering out of order (concurrency.rs).
//!
//! Ordering is made deterministic with `Gate`: the flash holds the next page read after
//! `arm`, so one read stays running while the test sends the rest.

mod support;

use std::time::Duration;

use fsoc_9p::constants::{open_flags, VERSION_9P2000_L, VERSION_9P2000_L_FSOC, VERSION_UNKNOWN};
use fsoc_9p::{Fid, Reply, Request, Tag, WalkNames};
use fsoc_serve::ServeConfig;
use support::{silent_for, Client, TestServer};

const ROOT: u32 = 1;

fn config() -> ServeConfig {
    ServeConfig { commit_interval: None, ..ServeConfig::default() }
}

/// Negotiates `version` and returns what the server answered.
fn negotiate(client: &mut Client, version: &[u8]) -> Vec<u8> {
    client.send(Tag::NONE, &Request::Version { msize: 64 << 10, version });
    match client.receive().reply() {
        Reply::Version { version, .. } => version.to_vec(),
        other => panic!("Tversion answered with {other:?}"),
    }
}

/// An ordered session attached as fid 1, with a 64 KiB file `big` open for reading as fid 2.
fn ordered_with_open_file(server: &TestServer) -> Client {
    let mut client = server.connect_raw();
    assert_eq!(negotiate(&mut client, VERSION_9P2000_L_FSOC), VERSION_9P2000_L_FSOC);
    client.msize = 64 << 10;
    client.attach(ROOT, b"user", b"").expect("attach");
    let contents: Vec<u8> = (0..65536u32).map(|index| (index % 251) as u8).collect();
    client.put(ROOT, 9, b"big", &contents);
    client.walk(ROOT, 2, &[b"big"]).expect("walk");
    client.lopen(2, open_flags::READ_ONLY).expect("lopen");
    client
}

/// Sends a read of fid 2 under `tag` and waits until the flash holds it.
fn hold_a_read(server: &TestServer, client: &mut Client, tag: Tag) {
    server.gate.arm();
    client.send(tag, &Request::Read { fid: Fid(2), offset: 8192, count: 4096 });
    server.gate.wait_until_holding();
}

#[test]
fn the_ordered_variant_is_agreed_only_when_offered() {
    let server = TestServer::start(config());
    for (offer, answer) in [
        (VERSION_9P2000_L_FSOC, VERSION_9P2000_L_FSOC),
        (VERSION_9P2000_L, VERSION_9P2000_L),
        (b"9P2000.L.other".as_slice(), VERSION_UNKNOWN),
    ] {
        let mut client = server.connect_raw();
        assert_eq!(negotiate(&mut client, offer), answer, "offered {:?}", String::from_utf8_lossy(offer));
    }
    server.stop();
}

/// While a read is held, a sequential request waits for it (unlike a plain session, where a
/// getattr overtakes a held read), and a second read does not.
#[test]
fn a_sequential_request_waits_for_earlier_ones_and_reads_overlap() {
    let server = TestServer::start(config());
    let mut client = ordered_with_open_file(&server);
    hold_a_read(&server, &mut client, Tag(10));
    client.send(Tag(11), &Request::Getattr { fid: Fid(ROOT), request_mask: 0x7ff });
    client.send(Tag(12), &Request::Read { fid: Fid(2), offset: 0, count: 4096 });
    // The getattr is held behind the read, and the second read behind the getattr.
    assert!(silent_for(&mut client, Duration::from_millis(300)), "nothing overtakes the held read in arrival order");
    server.gate.open();
    let tags: Vec<Tag> = (0..3).map(|_| client.receive().tag()).collect();
    assert_eq!(tags, [Tag(10), Tag(11), Tag(12)]);

    // Two reads in a row: the second, concurrent with the first, is answered while the first
    // is held.
    server.gate.arm();
    client.send(Tag(20), &Request::Read { fid: Fid(2), offset: 16384, count: 4096 });
    server.gate.wait_until_holding();
    client.send(Tag(21), &Request::Read { fid: Fid(2), offset: 0, count: 4096 });
    assert_eq!(client.receive().tag(), Tag(21), "reads run alongside each other");
    server.gate.open();
    assert_eq!(client.receive().tag(), Tag(20));
    server.stop();
}

/// A create sent as one batch behind a held read: clone, create on the clone, a clone of the
/// new file, its attributes and the directory's, each depending on the one before; every one
/// succeeds, in order.
#[test]
fn dependent_requests_sent_together_run_in_order() {
    let server = TestServer::start(config());
    let mut client = ordered_with_open_file(&server);
    hold_a_read(&server, &mut client, Tag(10));
    let name = b"new";
    let batch = [
        Request::Walk { fid: Fid(ROOT), new_fid: Fid(5), names: WalkNames::new() },
        Request::Lcreate { fid: Fid(5), name, flags: open_flags::READ_WRITE | open_flags::CREATE, mode: 0o644, gid: 0 },
        Request::Walk { fid: Fid(5), new_fid: Fid(6), names: WalkNames::new() },
        Request::Getattr { fid: Fid(6), request_mask: 0x7ff },
        Request::Write { fid: Fid(5), offset: 0, data: b"written" },
        Request::Getattr { fid: Fid(5), request_mask: 0x7ff },
        Request::Getattr { fid: Fid(ROOT), request_mask: 0x7ff },
        Request::Clunk { fid: Fid(6) },
    ];
    for (index, request) in batch.iter().enumerate() {
        client.send(Tag(11 + index as u16), request);
    }
    server.gate.open();
    let mut replies = std::collections::BTreeMap::new();
    for _ in 0..=batch.len() {
        let message = client.receive();
        replies.insert(message.tag().0, message);
    }
    assert!(matches!(replies[&10].reply(), Reply::Read { .. }));
    assert!(matches!(replies[&11].reply(), Reply::Walk { .. }), "{:?}", replies[&11].reply());
    let created = match replies[&12].reply() {
        Reply::Lcreate { qid, .. } => qid,
        other => panic!("Tlcreate: {other:?}"),
    };
    assert!(matches!(replies[&13].reply(), Reply::Walk { .. }), "{:?}", replies[&13].reply());
    match replies[&14].reply() {
        Reply::Getattr { attributes } => assert_eq!(attributes.qid, created, "the clone names the new file"),
        other => panic!("Tgetattr of the clone: {other:?}"),
    }
    assert!(matches!(replies[&15].reply(), Reply::Write { count: 7 }), "{:?}", replies[&15].reply());
    match replies[&16].reply() {
        Reply::Getattr { attributes } => assert_eq!(attributes.size_bytes, 7, "after the write"),
        other => panic!("Tgetattr of the file: {other:?}"),
    }
    assert!(matches!(replies[&17].reply(), Reply::Getattr { .. }));
    assert!(matches!(replies[&18].reply(), Reply::Clunk));
    server.stop();
}

/// A Tflush of a request held in arrival order drops it (Rflush at once, no reply), and what
/// was held behind it still runs.
#[test]
fn a_flush_of_a_held_request_drops_it() {
    let server = TestServer::start(config());
    let mut client = ordered_with_open_file(&server);
    hold_a_read(&server, &mut client, Tag(10));
    client.send(Tag(11), &Request::Getattr { fid: Fid(ROOT), request_mask: 0x7ff });
    client.send(Tag(12), &Request::Getattr { fid: Fid(2), request_mask: 0x7ff });
    client.send(Tag(13), &Request::Flush { old_tag: Tag(11) });
    assert_eq!(client.receive().tag(), Tag(13), "Rflush while the read is still held");
    server.gate.open();
    assert_eq!(client.receive().tag(), Tag(10));
    assert_eq!(client.receive().tag(), Tag(12), "tag 11 was dropped: no reply for it");
    server.stop();
}
