//! The raw page protocol (`fsoc serve --raw`, seed 000's conventional device): the host runs
//! fsoc's engine over `RemoteFlash`, and the device only moves pages. Checked: the same
//! workload gives exactly the same device time, counters and contents as on a local
//! simulator; the wire counters match the flash operations; one host at a time; the secret;
//! hostile frames.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::rng::SeededRng;
use fsoc_media::{FlashStats, Profile, RamStore, SimConfig, SimFlash};
use fsoc_serve::raw_protocol::{encode_request, raw_type, RawRequest, RAW_VERSION};
use fsoc_serve::{ListenAddress, RawServer, RemoteFlash, Stopper};

fn config() -> SimConfig {
    SimConfig::new(Profile::Mlc, 2, 64, 0x000A_0001)
}

struct Device {
    address: ListenAddress,
    stopper: Stopper,
    thread: std::thread::JoinHandle<SimFlash<RamStore>>,
    counters: std::sync::Arc<fsoc_serve::WireCounters>,
}

fn start(directory: &Path, secret: Option<&[u8]>) -> Device {
    let address = ListenAddress::Unix(directory.join("raw.sock"));
    let listener = address.bind().expect("bind");
    let server = RawServer::new(SimFlash::create(config()).expect("flash"), secret.map(<[u8]>::to_vec));
    let (stopper, counters) = (server.stopper(), server.counters());
    let thread = std::thread::spawn(move || server.run(&listener).expect("serve"));
    Device { address, stopper, thread, counters }
}

impl Device {
    fn stop(self) -> SimFlash<RamStore> {
        self.stopper.stop();
        self.thread.join().expect("server thread")
    }
}

/// A small durable workload: files of several sizes, fsync'd, some rewritten and removed.
fn workload<F: fsoc_flash::Flash>(fs: &mut FileSystem<F>) {
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    for index in 0..40u32 {
        let path = format!("/file{index}");
        let fd = fs.open(path.as_bytes(), flags, 0o644).expect("open");
        let length = (index as usize * 3_001) % 20_000 + 1;
        let bytes: Vec<u8> = (0..length).map(|offset| (offset as u32 ^ index) as u8).collect();
        fs.pwrite(fd, 0, &bytes).expect("pwrite");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
    }
    for index in (0..40u32).step_by(3) {
        fs.unlink(format!("/file{index}").as_bytes()).expect("unlink");
    }
    fs.commit().expect("commit");
}

fn contents<F: fsoc_flash::Flash>(fs: &FileSystem<F>) -> Vec<(String, Vec<u8>)> {
    (0..40u32)
        .filter_map(|index| {
            let path = format!("/file{index}");
            let (inode, _) = fs.stat(path.as_bytes()).ok()?;
            Some((path, fs.read(inode, 0, 1 << 20).expect("read")))
        })
        .collect()
}

#[test]
fn the_host_runs_the_engine_over_remote_pages_exactly_as_over_local_ones() {
    let directory = tempfile::tempdir().expect("tempdir");
    let device = start(directory.path(), None);
    let remote = RemoteFlash::connect(&device.address, None).expect("connect");
    let mut fs = FileSystem::format(remote, FsConfig::default(), 77).expect("format over the wire");
    workload(&mut fs);
    let remote_clock = fs.device_now_ns();
    let remote_contents = contents(&fs);
    let remote = fs.unmount().expect("unmount");
    let host_counts = remote.counters().snapshot();
    drop(remote);
    let device_counters = std::sync::Arc::clone(&device.counters);
    let flash = device.stop();

    // The same workload on a local simulator of the same configuration.
    let mut local =
        FileSystem::format(SimFlash::create(config()).expect("flash"), FsConfig::default(), 77).expect("format");
    workload(&mut local);
    assert_eq!(local.device_now_ns(), remote_clock, "device time is the device's, whatever the wire");
    assert_eq!(contents(&local), remote_contents);
    let local_flash = local.unmount().expect("unmount");
    assert_eq!(local_flash.counters(), flash.counters(), "the device saw exactly the local operations");

    // Wire counters: one message each way per flash call, on both ends.
    let programs = flash.counters().totals().programs;
    let count = |message_type: u8| {
        device_counters
            .snapshot()
            .iter()
            .find(|count| count.message_type == message_type)
            .map_or(0, |count| count.messages)
    };
    assert_eq!(count(raw_type::TPROGRAM), programs);
    assert_eq!(count(raw_type::RPROGRAM), programs);
    assert_eq!(count(raw_type::TERASE), flash.counters().totals().erases);
    assert_eq!(device_counters.snapshot(), host_counts, "host and device count the same frames");

    // What the device keeps is the volume: it mounts locally, clean.
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount the device's pages locally");
    assert_eq!(contents(&fs), remote_contents);
    assert!(fs.fsck(false).expect("fsck").is_clean());
}

#[test]
fn one_host_at_a_time_and_the_secret_is_checked() {
    let directory = tempfile::tempdir().expect("tempdir");
    let device = start(directory.path(), Some(b"0123456789abcdef"));
    assert!(RemoteFlash::connect(&device.address, None).is_err(), "no secret");
    assert!(RemoteFlash::connect(&device.address, Some(b"0123456789abcdeF")).is_err(), "wrong secret");
    let first = RemoteFlash::connect(&device.address, Some(b"0123456789abcdef")).expect("the secret");
    assert!(
        RemoteFlash::connect(&device.address, Some(b"0123456789abcdef")).is_err(),
        "a second host while the first owns the chips"
    );
    drop(first);
    // Once the first host is gone, another may connect (the server notices at its next accept).
    let mut connected = None;
    for _ in 0..50 {
        if let Ok(flash) = RemoteFlash::connect(&device.address, Some(b"0123456789abcdef")) {
            connected = Some(flash);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(connected.is_some(), "a host may connect after the first left");
    drop(connected);
    device.stop();
}

/// Seeded hostile frames (mutated valid requests, random bytes, oversized sizes) on fresh
/// connections: the server answers or disconnects, never panics, and serves a real host after.
#[test]
fn hostile_frames_leave_the_device_serving() {
    let directory = tempfile::tempdir().expect("tempdir");
    let device = start(directory.path(), None);
    let ListenAddress::Unix(path) = &device.address else { unreachable!("a unix socket") };
    let seed = 0xBAD_F00D;
    let mut rng = SeededRng::new(seed);
    let hello = encode_request(0, &RawRequest::Hello { version: RAW_VERSION, secret: b"" });
    let program = encode_request(
        1,
        &RawRequest::Program {
            issue_ns: 0,
            page: fsoc_flash::PageAddress::new(0, 3, 0),
            data: &[0u8; 4096],
            spare: &[0u8; 16],
        },
    );
    let read = encode_request(2, &RawRequest::Read { issue_ns: 0, page: fsoc_flash::PageAddress::new(1, 2, 0) });
    for round in 0..300u64 {
        let mut stream = connect_retrying(path);
        stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        let mut frames = vec![hello.clone()];
        for _ in 0..4 {
            let mut frame = match rng.below(3) {
                0 => program.clone(),
                1 => read.clone(),
                _ => (0..rng.below(64) as usize).map(|_| rng.below(256) as u8).collect(),
            };
            for _ in 0..rng.below(4) {
                if !frame.is_empty() {
                    let index = rng.below(frame.len() as u64) as usize;
                    frame[index] = rng.below(256) as u8;
                }
            }
            frames.push(frame);
        }
        for frame in &frames {
            if stream.write_all(frame).is_err() {
                break;
            }
        }
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        if let Err(error) = stream.read_to_end(&mut sink) {
            panic!("seed {seed:#x} round {round}: the device neither answered nor closed: {error}");
        }
    }
    // The last garbage connection may still be closing: a real host retries briefly.
    let remote = (0..100)
        .find_map(|_| {
            RemoteFlash::connect(&device.address, None)
                .inspect_err(|_| std::thread::sleep(std::time::Duration::from_millis(10)))
                .ok()
        })
        .expect("a real host after the garbage");
    assert_eq!(remote.device_info().chip_count, 2);
    drop(remote);
    device.stop();
}

fn connect_retrying(path: &Path) -> UnixStream {
    for _ in 0..100 {
        if let Ok(stream) = UnixStream::connect(path) {
            return stream;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot connect to {}", path.display());
}
