//! Many requests in flight on one connection: a 4 MiB file written and read back with
//! pipelined Twrites/Treads, 8 threads reading one file at once through one connection (and
//! through a connection with only 2 tags, so senders wait for tags), and a fake server that
//! answers only once 4 reads are in flight, in reverse order, which a client that did not
//! pipeline or that matched replies by order would fail.

mod fake_server;
mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::Arc;

use fake_server::{receive_message, send_reply};
use fsoc_9p::{decode_request, Qid, QidType, Reply, Request, WalkQids};
use fsoc_client::{Client, ConnectOptions};
use support::TestServer;

/// Bytes that differ at every offset, so a chunk put in the wrong place is seen.
fn pattern(length: usize, seed: u64) -> Vec<u8> {
    let mut rng = fsoc_media::rng::SeededRng::new(seed);
    (0..length).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn four_mebibytes_round_trip_with_pipelining() {
    let server = TestServer::start();
    // 64 KiB messages: 65 writes and reads of the iounit for 4 MiB, 8 in flight.
    let options = ConnectOptions { msize_bytes: 64 << 10, pipeline_depth: 8, ..ConnectOptions::default() };
    let client = server.connect_with(&options);
    let contents = pattern(4 << 20, 1);
    let mut file = client.create("big").expect("create");
    assert_eq!(file.node().iounit(), (64 << 10) - 24);
    file.write_all(&contents).expect("write 4 MiB");
    file.sync_all().expect("fsync");
    drop(file);
    assert_eq!(client.metadata("big").expect("metadata").len(), 4 << 20);
    let read = client.read("big").expect("read 4 MiB");
    assert!(read == contents, "the 4 MiB read back differ");
    // Read through Read with a buffer of many iounits, and one larger than the rest of the
    // file (the pipelined reads past the end are dropped).
    let mut file = client.open("big").expect("open");
    let mut again = Vec::new();
    let mut buffer = vec![0u8; 1_000_000];
    loop {
        let read = file.read(&mut buffer).expect("read");
        if read == 0 {
            break;
        }
        again.extend_from_slice(&buffer[..read]);
    }
    assert!(again == contents, "read in 1 MB pieces differs");
    // An unaligned pipelined write in the middle.
    let patch = pattern(300_000, 2);
    assert_eq!(file.node().iounit() as usize, (64 << 10) - 24);
    drop(file);
    let file = fsoc_client::OpenOptions::new().write(true).open(&client, "big").expect("open for writing");
    assert_eq!(file.write_at(&patch, 1_234_567).expect("write_at"), patch.len());
    drop(file);
    let mut expected = contents;
    expected[1_234_567..1_234_567 + patch.len()].copy_from_slice(&patch);
    assert!(client.read("big").expect("read") == expected, "the patched file differs");
    drop(client);
    server.stop();
}

fn threads_read_through_one_connection(options: &ConnectOptions) {
    let server = TestServer::start();
    let client = server.connect_with(options);
    let contents = Arc::new(pattern(1 << 20, 3));
    client.write("shared", &*contents).expect("write");
    let file = Arc::new(client.open("shared").expect("open"));
    let threads: Vec<_> = (0..8u64)
        .map(|thread| {
            let (file, contents) = (file.clone(), contents.clone());
            let client = client.clone();
            std::thread::spawn(move || {
                let mut rng = fsoc_media::rng::SeededRng::new(thread);
                for _ in 0..50 {
                    let offset = rng.below(1 << 20) as usize;
                    let length = (rng.below(20_000) as usize).min((1 << 20) - offset);
                    let mut buffer = vec![0u8; length];
                    let read = file.read_at(&mut buffer, offset as u64).expect("read_at");
                    assert_eq!(&buffer[..read], &contents[offset..offset + read], "thread {thread} at {offset}");
                    assert!(read == length || read == (file.node().iounit() as usize), "{read} of {length}");
                    // Path calls of several threads interleave on the connection too.
                    assert_eq!(client.metadata("shared").expect("metadata").len(), 1 << 20);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("reader thread");
    }
    drop((file, client));
    server.stop();
}

#[test]
fn eight_threads_read_at_once_through_one_connection() {
    threads_read_through_one_connection(&ConnectOptions::default());
}

/// Regression (found measuring `fsoc mount --remote` with one tag): a pipeline must not wait
/// for a tag while its own replies hold every tag; it waits for its oldest reply instead.
#[test]
fn pipelines_and_paired_requests_work_with_a_single_tag() {
    let server = TestServer::start();
    let options =
        ConnectOptions { msize_bytes: 8192, pipeline_depth: 8, requests_in_flight_max: 1, ..ConnectOptions::default() };
    let client = server.connect_with(&options);
    let contents = pattern(200_000, 4);
    client.write("file", &contents).expect("pipelined write with one tag");
    assert!(client.read("file").expect("pipelined read with one tag") == contents);
    let (node, metadata) = client.root().clone_with_attributes().expect("walk and getattr with one tag");
    assert!(node.is_directory() && metadata.is_dir());
    drop((node, client));
    threads_read_through_one_connection(&options);
    server.stop();
}

#[test]
fn eight_threads_share_two_tags() {
    threads_read_through_one_connection(&ConnectOptions { requests_in_flight_max: 2, ..ConnectOptions::default() });
}

#[test]
fn replies_out_of_order_reach_their_requests() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("fake.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    const MSIZE: u32 = 8192;
    const IOUNIT: u32 = MSIZE - 24;
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let file_qid = Qid { qid_type: QidType::FILE, version: 0, path: 7 };
        let mut reads = Vec::new();
        loop {
            let message = receive_message(&mut stream);
            let (tag, request) = decode_request(&message).expect("request");
            match request {
                Request::Version { .. } => {
                    send_reply(&mut stream, tag, &Reply::Version { msize: MSIZE, version: b"9P2000.L" })
                }
                Request::Attach { .. } => send_reply(&mut stream, tag, &Reply::Attach { qid: Qid::default() }),
                Request::Walk { names, .. } => {
                    let qids = WalkQids::from_slice(&vec![file_qid; names.len()]).expect("qids");
                    send_reply(&mut stream, tag, &Reply::Walk { qids });
                }
                Request::Lopen { .. } => send_reply(&mut stream, tag, &Reply::Lopen { qid: file_qid, iounit: 0 }),
                Request::Clunk { .. } => send_reply(&mut stream, tag, &Reply::Clunk),
                Request::Read { offset, count, .. } => {
                    reads.push((tag, offset, count));
                    // Nothing is answered until four reads are in flight; then the last first.
                    if reads.len() == 4 {
                        let tags: std::collections::BTreeSet<_> = reads.iter().map(|read| read.0).collect();
                        assert_eq!(tags.len(), 4, "four distinct tags in flight");
                        for &(tag, offset, count) in reads.iter().rev() {
                            let data: Vec<u8> = (offset..offset + u64::from(count)).map(|byte| byte as u8).collect();
                            send_reply(&mut stream, tag, &Reply::Read { data: &data });
                        }
                        reads.clear();
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
            if matches!(request, Request::Clunk { .. }) {
                return;
            }
        }
    });
    let options = ConnectOptions { msize_bytes: MSIZE, pipeline_depth: 4, ..ConnectOptions::default() };
    let client = Client::connect(&format!("unix:{}", path.display()), &options).expect("connect");
    let file = client.open("file").expect("open");
    let mut buffer = vec![0u8; 4 * IOUNIT as usize];
    assert_eq!(file.read_at(&mut buffer, 1000).expect("read"), buffer.len());
    for (index, byte) in buffer.iter().enumerate() {
        assert_eq!(*byte, (1000 + index) as u8, "byte {index} came from the wrong reply");
    }
    drop(file);
    server.join().expect("fake server");
}
