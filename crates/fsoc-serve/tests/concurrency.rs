//! Requests in flight: replies out of order, Tflush of running and queued requests, the
//! in-flight bound, fid and connection limits, msize negotiation, Tversion resetting a
//! session, many connections at once, and a stop that finishes what is in flight.
//!
//! Ordering is made deterministic with `Gate`: the flash holds the next page read after
//! `arm`, so one request stays running while the test sends others.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use fsoc_9p::constants::open_flags;
use fsoc_9p::{Errno, Fid, Reply, Request, Tag};
use fsoc_serve::ServeConfig;
use support::{silent_for, Client, TestServer};

const ROOT: u32 = 1;

fn config() -> ServeConfig {
    ServeConfig { commit_interval: None, ..ServeConfig::default() }
}

/// A client attached as fid 1 with a 64 KiB file `big` open for reading as fid 2.
fn with_open_file(server: &TestServer) -> (Client, Vec<u8>) {
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    let contents: Vec<u8> = (0..65536u32).map(|index| (index % 251) as u8).collect();
    client.put(ROOT, 9, b"big", &contents);
    client.walk(ROOT, 2, &[b"big"]).expect("walk");
    client.lopen(2, open_flags::READ_ONLY).expect("lopen");
    (client, contents)
}

fn read_request(offset: u64) -> Request<'static> {
    Request::Read { fid: Fid(2), offset, count: 4096 }
}

fn getattr_request() -> Request<'static> {
    Request::Getattr { fid: Fid(ROOT), request_mask: 0x7ff }
}

/// A read held at the flash is overtaken by a getattr sent after it.
#[test]
fn replies_come_out_of_order_while_a_read_is_held() {
    let server = TestServer::start(config());
    let (mut client, contents) = with_open_file(&server);
    server.gate.arm();
    client.send(Tag(10), &read_request(8192));
    server.gate.wait_until_holding();
    client.send(Tag(11), &getattr_request());
    let first = client.receive();
    assert_eq!(first.tag(), Tag(11), "the later request is answered first");
    assert!(matches!(first.reply(), Reply::Getattr { .. }));
    server.gate.open();
    let second = client.receive();
    assert_eq!(second.tag(), Tag(10));
    match second.reply() {
        Reply::Read { data } => assert_eq!(data, &contents[8192..12288]),
        other => panic!("{other:?}"),
    }
    server.stop();
}

/// Tflush of a running request: its reply comes first, then Rflush, both after the hold.
#[test]
fn a_flush_of_a_running_request_is_answered_after_its_reply() {
    let server = TestServer::start(config());
    let (mut client, _) = with_open_file(&server);
    server.gate.arm();
    client.send(Tag(10), &read_request(0));
    server.gate.wait_until_holding();
    client.send(Tag(11), &Request::Flush { old_tag: Tag(10) });
    client.send(Tag(12), &getattr_request());
    assert_eq!(client.receive().tag(), Tag(12), "no Rflush before the flushed request's reply");
    server.gate.open();
    let read = client.receive();
    assert_eq!(read.tag(), Tag(10));
    assert!(matches!(read.reply(), Reply::Read { .. }));
    let flush = client.receive();
    assert_eq!(flush.tag(), Tag(11));
    assert!(matches!(flush.reply(), Reply::Flush));
    server.stop();
}

/// Tflush of a request still queued (the one worker is busy): Rflush at once, and the flushed
/// request is never answered. A flush of an unknown tag is answered at once too.
#[test]
fn a_flush_of_a_queued_request_drops_it() {
    let server = TestServer::start(ServeConfig { workers_per_connection_max: 1, ..config() });
    let (mut client, _) = with_open_file(&server);
    server.gate.arm();
    client.send(Tag(10), &read_request(0));
    server.gate.wait_until_holding();
    client.send(Tag(12), &getattr_request());
    client.send(Tag(13), &Request::Flush { old_tag: Tag(12) });
    let flush = client.receive();
    assert_eq!(flush.tag(), Tag(13), "Rflush before the held read completes");
    client.send(Tag(14), &Request::Flush { old_tag: Tag(999) });
    assert_eq!(client.receive().tag(), Tag(14));
    server.gate.open();
    assert_eq!(client.receive().tag(), Tag(10));
    client.send(Tag(15), &Request::Clunk { fid: Fid(2) });
    assert_eq!(client.receive().tag(), Tag(15), "tag 12 was dropped: no reply for it");
    server.stop();
}

/// With two requests in flight (one held, one queued) the reader reads nothing more: even a
/// Tflush, which needs no buffer, is not answered until a request finishes.
#[test]
fn the_reader_stops_at_the_in_flight_limit() {
    let server =
        TestServer::start(ServeConfig { requests_in_flight_max: 2, workers_per_connection_max: 1, ..config() });
    let (mut client, _) = with_open_file(&server);
    server.gate.arm();
    client.send(Tag(1), &read_request(0));
    server.gate.wait_until_holding();
    client.send(Tag(2), &getattr_request());
    client.send(Tag(3), &getattr_request());
    client.send(Tag(4), &Request::Flush { old_tag: Tag(999) });
    assert!(silent_for(&mut client, Duration::from_millis(300)), "a reply while the limit was reached");
    server.gate.open();
    let mut tags: Vec<u16> = (0..4).map(|_| client.receive().tag().0).collect();
    tags.sort();
    assert_eq!(tags, [1, 2, 3, 4], "every request answered once");
    server.stop();
}

/// Many requests pipelined on one connection: each answered exactly once, with its own data.
#[test]
fn pipelined_requests_are_each_answered_once() {
    let server = TestServer::start(config());
    let (mut client, contents) = with_open_file(&server);
    for index in 0..32u16 {
        client.send(Tag(100 + index), &read_request(u64::from(index) * 2048));
    }
    let mut answered = BTreeMap::new();
    for _ in 0..32 {
        let message = client.receive();
        let tag = message.tag().0;
        let Reply::Read { data } = message.reply() else { panic!("tag {tag}: {:?}", message.reply()) };
        assert!(answered.insert(tag, data.to_vec()).is_none(), "tag {tag} answered twice");
    }
    for (tag, data) in answered {
        let offset = usize::from(tag - 100) * 2048;
        assert_eq!(data, contents[offset..(offset + 4096).min(contents.len())], "tag {tag}");
    }
    server.stop();
}

#[test]
fn fids_are_limited_per_connection() {
    let server = TestServer::start(ServeConfig { fids_per_connection_max: 8, ..config() });
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    for fid in 2..=8 {
        client.walk(ROOT, fid, &[]).expect("clone");
    }
    assert_eq!(client.walk(ROOT, 9, &[]), Err(Errno::EMFILE));
    assert_eq!(client.attach(9, b"user", b""), Err(Errno::EMFILE));
    client.walk(ROOT, 8, &[]).map(|_| ()).expect_err("fid 8 in use");
    client.clunk(5).expect("clunk");
    client.walk(ROOT, 9, &[]).expect("room again");
    // Another connection has a table of its own.
    let mut other = server.connect();
    other.attach(ROOT, b"user", b"").expect("attach");
    other.walk(ROOT, 2, &[]).expect("clone");
    server.stop();
}

#[test]
fn msize_is_negotiated_within_bounds() {
    let server = TestServer::start(config());
    let mut client = server.connect_raw();
    assert_eq!(client.version(4119), (4119, b"unknown".to_vec()), "below a page of data plus header");
    assert_eq!(client.attach(ROOT, b"user", b""), Err(Errno::EPROTO), "no session after `unknown`");
    assert_eq!(client.version(4120), (4120, b"9P2000.L".to_vec()));
    assert_eq!(client.version(100 << 20), (1 << 20, b"9P2000.L".to_vec()), "clamped to 1 MiB");
    client.send(Tag::NONE, &Request::Version { msize: 8192, version: b"9P2000.u" });
    match client.receive().reply() {
        Reply::Version { version, .. } => assert_eq!(version, b"unknown"),
        other => panic!("{other:?}"),
    }
    assert_eq!(client.version(8192), (8192, b"9P2000.L".to_vec()));
    client.attach(ROOT, b"user", b"").expect("attach");
    let contents = vec![7u8; 100_000];
    client.put(ROOT, 9, b"big", &contents);
    client.walk(ROOT, 2, &[b"big"]).expect("walk");
    client.lopen(2, open_flags::READ_WRITE).expect("lopen");
    assert_eq!(client.read(2, 0, 1 << 20).map(|data| data.len()), Ok(8192 - 11), "a read fills one message");
    // The largest Twrite that fits msize, then one byte more: the connection is closed.
    let largest = vec![1u8; 8192 - 23];
    assert_eq!(client.write(2, 0, &largest), Ok(8192 - 23));
    client.send_bytes(&(8193u32).to_le_bytes()).expect("send");
    assert!(client.is_closed(), "a size field above msize closes the connection");
    server.stop();
}

/// A Tversion mid-session clunks every fid: an open-unlinked file is deleted then.
#[test]
fn tversion_resets_the_session() {
    let server = TestServer::start(config());
    let (mut client, _) = with_open_file(&server);
    client.unlinkat(ROOT, b"big", 0).expect("unlink while open");
    assert_eq!(client.version(16384), (16384, b"9P2000.L".to_vec()));
    assert_eq!(client.getattr(ROOT), Err(Errno::EBADF), "fids are gone");
    client.attach(ROOT, b"user", b"").expect("attach again");
    let mut fs = server.stop().fs;
    assert!(fs.fsck(true).expect("fsck").is_clean(), "the open-unlinked file was released");
}

/// Eight connections work at once, each on its own files; a connection past the limit is
/// closed at once.
#[test]
fn connections_are_served_at_once_up_to_the_limit() {
    let server = TestServer::start(ServeConfig { connections_max: 8, ..config() });
    let threads: Vec<_> = (0..8u32)
        .map(|number| {
            let mut client = server.connect();
            std::thread::spawn(move || {
                client.attach(ROOT, b"user", b"").expect("attach");
                let directory = format!("c{number}").into_bytes();
                client.mkdir(ROOT, &directory, 0o755).expect("mkdir");
                client.walk(ROOT, 2, &[&directory]).expect("walk");
                for file in 0..20u32 {
                    let contents = vec![number as u8; 1000 + file as usize * 100];
                    let name = format!("f{file}").into_bytes();
                    client.put(2, 3, &name, &contents);
                    assert_eq!(client.get(2, 4, &[&name]), Ok(contents));
                }
                client
            })
        })
        .collect();
    let clients: Vec<Client> = threads.into_iter().map(|thread| thread.join().expect("client thread")).collect();
    let mut extra = server.connect_raw();
    assert!(extra.is_closed(), "the ninth connection is refused");
    drop(clients);
    let mut fs = server.stop().fs;
    assert!(fs.fsck(true).expect("fsck").is_clean());
}

/// Stopping the server answers the request it is running before the connection closes.
#[test]
fn a_stop_finishes_the_request_in_flight() {
    let server = TestServer::start(config());
    let (mut client, contents) = with_open_file(&server);
    server.gate.arm();
    client.send(Tag(10), &read_request(0));
    server.gate.wait_until_holding();
    let stopping = std::thread::spawn(move || server.stop());
    let reply = client.receive();
    assert_eq!(reply.tag(), Tag(10));
    match reply.reply() {
        Reply::Read { data } => assert_eq!(data, &contents[..4096]),
        other => panic!("{other:?}"),
    }
    assert!(client.is_closed(), "closed after the last reply");
    let served = stopping.join().expect("stop");
    assert_eq!(served.failure, None);
}
