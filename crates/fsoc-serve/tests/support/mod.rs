//! Helpers for the server's tests: a server on a fresh RAM volume behind a Unix socket
//! (`TestServer`), a 9P client built on the fsoc-9p codec (`Client`, one method per message,
//! each answering `Result<_, Errno>`), and a flash whose next page read can be held
//! (`GateFlash`), so a test can keep one request running while it sends others.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use fsoc_9p::constants::{getattr, VERSION_9P2000_L};
use fsoc_9p::{
    decode_reply, encode, Attributes, Errno, Fid, FsStats, LockQuery, LockRequest, LockStatus, Qid, Reply, Request,
    SetAttributes, Tag, WalkNames,
};
use fsoc_core::{FileSystem, FsConfig};
use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, PageAddress, ReadStatus, Timing,
};
use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};
use fsoc_serve::{ListenAddress, ServeConfig, Served, Server, Stopper};

/// How long a test waits for any one reply before it fails (a hung server fails the test).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

pub type TestFlash = GateFlash;

/// A fresh volume: one MLC chip of 256 blocks (32 MiB).
pub fn fresh_volume() -> FileSystem<TestFlash> {
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 256, 1)).expect("flash");
    FileSystem::format(GateFlash::new(flash), FsConfig::default(), 1).expect("format")
}

/// A server on a Unix socket in a temporary directory, serving on a background thread.
pub struct TestServer {
    pub path: PathBuf,
    pub gate: Gate,
    stopper: Stopper,
    thread: std::thread::JoinHandle<Served<TestFlash>>,
    _directory: tempfile::TempDir,
}

impl TestServer {
    pub fn start(config: ServeConfig) -> TestServer {
        Self::start_with(fresh_volume(), config)
    }

    pub fn start_with(fs: FileSystem<TestFlash>, config: ServeConfig) -> TestServer {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("fsoc.sock");
        let gate = fs.flash().gate.clone();
        let listener = ListenAddress::Unix(path.clone()).bind().expect("bind");
        let server = Server::new(fs, config).expect("server");
        let stopper = server.stopper();
        let thread = std::thread::spawn(move || server.run(&listener).expect("serve"));
        TestServer { path, gate, stopper, thread, _directory: directory }
    }

    /// A connection that has negotiated 9P2000.L at `msize`.
    pub fn connect(&self) -> Client {
        let mut client = self.connect_raw();
        let (msize, version) = client.version(64 << 10);
        assert_eq!(version, VERSION_9P2000_L);
        assert_eq!(msize, 64 << 10);
        client
    }

    /// A connection that has sent nothing yet.
    pub fn connect_raw(&self) -> Client {
        let stream = UnixStream::connect(&self.path).expect("connect");
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
        Client { stream, msize: 8192, next_tag: 1 }
    }

    /// Stops the server and takes the file system back (not yet unmounted).
    pub fn stop(self) -> Served<TestFlash> {
        self.gate.open();
        self.stopper.stop();
        self.thread.join().expect("server thread")
    }
}

/// Whether nothing arrives on `client` within `wait` (the server is holding replies back). A
/// byte read here fails the caller's assertion anyway, so consuming it does no harm.
pub fn silent_for(client: &mut Client, wait: Duration) -> bool {
    client.stream.set_read_timeout(Some(wait)).expect("timeout");
    let mut byte = [0u8; 1];
    let silent = matches!(
        Read::read(&mut client.stream, &mut byte),
        Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    );
    client.stream.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
    silent
}

/// One raw reply.
pub struct Message(pub Vec<u8>);

impl Message {
    pub fn tag(&self) -> Tag {
        decode_reply(&self.0).expect("reply decodes").0
    }
    pub fn reply(&self) -> Reply<'_> {
        decode_reply(&self.0).unwrap_or_else(|error| panic!("reply does not decode: {error}: {:02x?}", self.0)).1
    }
    pub fn errno(&self) -> Option<Errno> {
        match self.reply() {
            Reply::Lerror { errno } => Some(errno),
            _ => None,
        }
    }
}

/// A 9P2000.L client on the fsoc-9p codec.
pub struct Client {
    pub stream: UnixStream,
    pub msize: u32,
    next_tag: u16,
}

pub type Answer<T> = Result<T, Errno>;
/// One entry of an Rreaddir: qid, offset, d_type, name.
pub type Listed = (Qid, u64, u8, Vec<u8>);

impl Client {
    pub fn tag(&mut self) -> Tag {
        let tag = Tag(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1).max(1) % 0xffff;
        tag
    }

    /// Sends `request` under `tag` without waiting.
    pub fn send(&mut self, tag: Tag, request: &Request<'_>) {
        let mut buffer = vec![0u8; 2 << 20];
        let length = encode(tag, request, &mut buffer).expect("encode");
        self.stream.write_all(&buffer[..length]).expect("send");
    }

    /// Sends raw bytes.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next reply, whatever its tag; None when the server closed the connection.
    pub fn try_receive(&mut self) -> Option<Message> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let length = u32::from_le_bytes(size) as usize;
        assert!((7..=2 << 20).contains(&length), "reply size {length}");
        let mut bytes = vec![0u8; length];
        bytes[..4].copy_from_slice(&size);
        self.stream.read_exact(&mut bytes[4..]).expect("reply body");
        Some(Message(bytes))
    }

    pub fn receive(&mut self) -> Message {
        self.try_receive().expect("the server closed the connection")
    }

    /// Whether the server has closed the connection (a read returns end of file in time).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0) | Err(_))
    }

    /// Sends `request` and waits for its reply (nothing else may be in flight).
    pub fn call(&mut self, request: &Request<'_>) -> Message {
        let tag = self.tag();
        self.send(tag, request);
        let message = self.receive();
        assert_eq!(message.tag(), tag, "reply to another tag");
        message
    }

    fn expect<T>(&mut self, request: &Request<'_>, pick: impl FnOnce(Reply<'_>) -> Option<T>) -> Answer<T> {
        let message = self.call(request);
        let reply = message.reply();
        if let Reply::Lerror { errno } = reply {
            return Err(errno);
        }
        let description = format!("{reply:?}");
        Ok(pick(reply).unwrap_or_else(|| panic!("{request:?} answered with {description}")))
    }

    pub fn version(&mut self, msize: u32) -> (u32, Vec<u8>) {
        let message = {
            self.send(Tag::NONE, &Request::Version { msize, version: VERSION_9P2000_L });
            self.receive()
        };
        match message.reply() {
            Reply::Version { msize, version } => {
                self.msize = msize;
                (msize, version.to_vec())
            }
            other => panic!("Tversion answered with {other:?}"),
        }
    }

    pub fn attach(&mut self, fid: u32, uname: &[u8], aname: &[u8]) -> Answer<Qid> {
        self.attach_as(fid, uname, aname, 1000)
    }

    /// Tattach naming the user by number (`n_uname`), as the Linux client does.
    pub fn attach_as(&mut self, fid: u32, uname: &[u8], aname: &[u8], n_uname: u32) -> Answer<Qid> {
        let request = Request::Attach { fid: Fid(fid), afid: Fid::NONE, uname, aname, n_uname };
        self.expect(&request, |reply| match reply {
            Reply::Attach { qid } => Some(qid),
            _ => None,
        })
    }

    pub fn walk(&mut self, fid: u32, new_fid: u32, names: &[&[u8]]) -> Answer<Vec<Qid>> {
        let names = WalkNames::from_slice(names).expect("at most 16 names");
        self.expect(&Request::Walk { fid: Fid(fid), new_fid: Fid(new_fid), names }, |reply| match reply {
            Reply::Walk { qids } => Some(qids.as_slice().to_vec()),
            _ => None,
        })
    }

    pub fn lopen(&mut self, fid: u32, flags: u32) -> Answer<(Qid, u32)> {
        self.expect(&Request::Lopen { fid: Fid(fid), flags }, |reply| match reply {
            Reply::Lopen { qid, iounit } => Some((qid, iounit)),
            _ => None,
        })
    }

    pub fn lcreate(&mut self, fid: u32, name: &[u8], flags: u32, mode: u32) -> Answer<(Qid, u32)> {
        self.expect(&Request::Lcreate { fid: Fid(fid), name, flags, mode, gid: 100 }, |reply| match reply {
            Reply::Lcreate { qid, iounit } => Some((qid, iounit)),
            _ => None,
        })
    }

    pub fn read(&mut self, fid: u32, offset: u64, count: u32) -> Answer<Vec<u8>> {
        self.expect(&Request::Read { fid: Fid(fid), offset, count }, |reply| match reply {
            Reply::Read { data } => Some(data.to_vec()),
            _ => None,
        })
    }

    pub fn write(&mut self, fid: u32, offset: u64, data: &[u8]) -> Answer<u32> {
        self.expect(&Request::Write { fid: Fid(fid), offset, data }, |reply| match reply {
            Reply::Write { count } => Some(count),
            _ => None,
        })
    }

    pub fn clunk(&mut self, fid: u32) -> Answer<()> {
        self.expect(&Request::Clunk { fid: Fid(fid) }, |reply| matches!(reply, Reply::Clunk).then_some(()))
    }

    pub fn remove(&mut self, fid: u32) -> Answer<()> {
        self.expect(&Request::Remove { fid: Fid(fid) }, |reply| matches!(reply, Reply::Remove).then_some(()))
    }

    pub fn getattr(&mut self, fid: u32) -> Answer<Attributes> {
        self.expect(&Request::Getattr { fid: Fid(fid), request_mask: getattr::ALL }, |reply| match reply {
            Reply::Getattr { attributes } => Some(attributes),
            _ => None,
        })
    }

    pub fn setattr(&mut self, fid: u32, attributes: SetAttributes) -> Answer<()> {
        self.expect(&Request::Setattr { fid: Fid(fid), attributes }, |reply| {
            matches!(reply, Reply::Setattr).then_some(())
        })
    }

    /// One Rreaddir: (qid, offset, type, name) of each entry.
    pub fn readdir(&mut self, fid: u32, offset: u64, count: u32) -> Answer<Vec<Listed>> {
        self.expect(&Request::Readdir { fid: Fid(fid), offset, count }, |reply| match reply {
            Reply::Readdir { entries } => Some(
                entries.iter().map(|entry| (entry.qid, entry.offset, entry.dirent_type, entry.name.to_vec())).collect(),
            ),
            _ => None,
        })
    }

    /// Every name in the open directory `fid`, `.` and `..` included, `count` bytes a call.
    pub fn list(&mut self, fid: u32, count: u32) -> Answer<Vec<Vec<u8>>> {
        let mut names = Vec::new();
        let mut offset = 0;
        loop {
            let entries = self.readdir(fid, offset, count)?;
            let Some(last) = entries.last() else { return Ok(names) };
            offset = last.1;
            names.extend(entries.into_iter().map(|entry| entry.3));
        }
    }

    pub fn mkdir(&mut self, fid: u32, name: &[u8], mode: u32) -> Answer<Qid> {
        self.expect(&Request::Mkdir { directory_fid: Fid(fid), name, mode, gid: 100 }, |reply| match reply {
            Reply::Mkdir { qid } => Some(qid),
            _ => None,
        })
    }

    pub fn symlink(&mut self, fid: u32, name: &[u8], target: &[u8]) -> Answer<Qid> {
        self.expect(&Request::Symlink { directory_fid: Fid(fid), name, target, gid: 100 }, |reply| match reply {
            Reply::Symlink { qid } => Some(qid),
            _ => None,
        })
    }

    pub fn mknod(&mut self, fid: u32, name: &[u8], mode: u32) -> Answer<Qid> {
        let request = Request::Mknod { directory_fid: Fid(fid), name, mode, major: 1, minor: 3, gid: 100 };
        self.expect(&request, |reply| match reply {
            Reply::Mknod { qid } => Some(qid),
            _ => None,
        })
    }

    pub fn link(&mut self, directory_fid: u32, fid: u32, name: &[u8]) -> Answer<()> {
        self.expect(&Request::Link { directory_fid: Fid(directory_fid), fid: Fid(fid), name }, |reply| {
            matches!(reply, Reply::Link).then_some(())
        })
    }

    pub fn readlink(&mut self, fid: u32) -> Answer<Vec<u8>> {
        self.expect(&Request::Readlink { fid: Fid(fid) }, |reply| match reply {
            Reply::Readlink { target } => Some(target.to_vec()),
            _ => None,
        })
    }

    pub fn rename(&mut self, fid: u32, directory_fid: u32, name: &[u8]) -> Answer<()> {
        self.expect(&Request::Rename { fid: Fid(fid), directory_fid: Fid(directory_fid), name }, |reply| {
            matches!(reply, Reply::Rename).then_some(())
        })
    }

    pub fn renameat(&mut self, old_fid: u32, old_name: &[u8], new_fid: u32, new_name: &[u8]) -> Answer<()> {
        let request =
            Request::Renameat { old_directory_fid: Fid(old_fid), old_name, new_directory_fid: Fid(new_fid), new_name };
        self.expect(&request, |reply| matches!(reply, Reply::Renameat).then_some(()))
    }

    pub fn unlinkat(&mut self, fid: u32, name: &[u8], flags: u32) -> Answer<()> {
        self.expect(&Request::Unlinkat { directory_fid: Fid(fid), name, flags }, |reply| {
            matches!(reply, Reply::Unlinkat).then_some(())
        })
    }

    pub fn fsync(&mut self, fid: u32) -> Answer<()> {
        self.expect(&Request::Fsync { fid: Fid(fid), datasync: 0 }, |reply| matches!(reply, Reply::Fsync).then_some(()))
    }

    pub fn statfs(&mut self, fid: u32) -> Answer<FsStats> {
        self.expect(&Request::Statfs { fid: Fid(fid) }, |reply| match reply {
            Reply::Statfs { stats } => Some(stats),
            _ => None,
        })
    }

    pub fn xattrwalk(&mut self, fid: u32, new_fid: u32, name: &[u8]) -> Answer<u64> {
        self.expect(&Request::Xattrwalk { fid: Fid(fid), new_fid: Fid(new_fid), name }, |reply| match reply {
            Reply::Xattrwalk { size_bytes } => Some(size_bytes),
            _ => None,
        })
    }

    pub fn xattrcreate(&mut self, fid: u32, name: &[u8], size: u64, flags: u32) -> Answer<()> {
        let request = Request::Xattrcreate { fid: Fid(fid), name, attribute_size_bytes: size, flags };
        self.expect(&request, |reply| matches!(reply, Reply::Xattrcreate).then_some(()))
    }

    /// setxattr as the Linux client does it: a fid walked from `fid`, Txattrcreate, the value
    /// in Twrites, then Tclunk, whose answer is the call's.
    pub fn setxattr(&mut self, fid: u32, spare_fid: u32, name: &[u8], value: &[u8], flags: u32) -> Answer<()> {
        self.walk(fid, spare_fid, &[]).expect("clone the fid");
        if let Err(errno) = self.xattrcreate(spare_fid, name, value.len() as u64, flags) {
            self.clunk(spare_fid).expect("clunk");
            return Err(errno);
        }
        for (index, chunk) in value.chunks(1000).enumerate() {
            self.write(spare_fid, (index * 1000) as u64, chunk).expect("write the value");
        }
        self.clunk(spare_fid)
    }

    /// getxattr (or listxattr, with an empty name) as the Linux client does it.
    pub fn getxattr(&mut self, fid: u32, spare_fid: u32, name: &[u8]) -> Answer<Vec<u8>> {
        let size = self.xattrwalk(fid, spare_fid, name)?;
        let mut value = Vec::new();
        while (value.len() as u64) < size {
            let chunk = self.read(spare_fid, value.len() as u64, 4000).expect("read the value");
            assert!(!chunk.is_empty(), "the value ends early");
            value.extend_from_slice(&chunk);
        }
        self.clunk(spare_fid).expect("clunk");
        Ok(value)
    }

    pub fn lock(&mut self, fid: u32, lock: LockRequest<'_>) -> Answer<LockStatus> {
        self.expect(&Request::Lock { fid: Fid(fid), lock }, |reply| match reply {
            Reply::Lock { status } => Some(status),
            _ => None,
        })
    }

    pub fn getlock(&mut self, fid: u32, query: LockQuery<'_>) -> Answer<(u8, u64, u64, u32, Vec<u8>)> {
        self.expect(&Request::Getlock { fid: Fid(fid), query }, |reply| match reply {
            Reply::Getlock { query } => {
                Some((query.lock_type.0, query.start, query.length, query.proc_id, query.client_id.to_vec()))
            }
            _ => None,
        })
    }

    pub fn auth(&mut self, afid: u32) -> Answer<Qid> {
        let request = Request::Auth { afid: Fid(afid), uname: b"user", aname: b"", n_uname: 0 };
        self.expect(&request, |reply| match reply {
            Reply::Auth { aqid } => Some(aqid),
            _ => None,
        })
    }

    /// Creates (or truncates) `name` in the directory `directory_fid` with `contents`, through a
    /// fresh fid that is clunked after.
    pub fn put(&mut self, directory_fid: u32, scratch_fid: u32, name: &[u8], contents: &[u8]) {
        self.walk(directory_fid, scratch_fid, &[]).expect("clone");
        self.lcreate(scratch_fid, name, 0o1101, 0o644).expect("lcreate"); // O_WRONLY|O_CREAT|O_TRUNC
        let chunk = (self.msize - 24) as usize;
        for (index, piece) in contents.chunks(chunk).enumerate() {
            let written = self.write(scratch_fid, (index * chunk) as u64, piece).expect("write");
            assert_eq!(written as usize, piece.len());
        }
        self.clunk(scratch_fid).expect("clunk");
    }

    /// The whole contents of `path` from the root fid `root`, through a fresh fid.
    pub fn get(&mut self, root: u32, scratch_fid: u32, path: &[&[u8]]) -> Answer<Vec<u8>> {
        self.walk(root, scratch_fid, path)?;
        let opened = self.lopen(scratch_fid, 0);
        if let Err(errno) = opened {
            self.clunk(scratch_fid).expect("clunk");
            return Err(errno);
        }
        let mut contents = Vec::new();
        loop {
            let data = self.read(scratch_fid, contents.len() as u64, self.msize - 24)?;
            if data.is_empty() {
                break;
            }
            contents.extend(data);
        }
        self.clunk(scratch_fid).expect("clunk");
        Ok(contents)
    }
}

/// Holds the next page read after `arm` until `open`, so a request stays running; and counts
/// the pages programmed (`programs`), so a test sees when the server wrote to flash.
#[derive(Clone, Default)]
pub struct Gate {
    state: Arc<(Mutex<GateState>, Condvar)>,
    programs: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Default)]
struct GateState {
    armed: bool,
    holding: bool,
    open: bool,
}

impl Gate {
    /// The next page read waits (one read only).
    pub fn arm(&self) {
        let (state, _) = &*self.state;
        *state.lock().unwrap() = GateState { armed: true, holding: false, open: false };
    }

    /// Waits until a read is held at the gate.
    pub fn wait_until_holding(&self) {
        let (state, changed) = &*self.state;
        let guard = state.lock().unwrap();
        let (guard, timeout) = changed.wait_timeout_while(guard, REPLY_TIMEOUT, |state| !state.holding).unwrap();
        assert!(!timeout.timed_out() && guard.holding, "no read reached the gate");
    }

    /// Lets the held read (and every later one) through.
    pub fn open(&self) {
        let (state, changed) = &*self.state;
        let mut guard = state.lock().unwrap();
        guard.open = true;
        guard.armed = false;
        changed.notify_all();
    }

    /// Pages programmed on the flash so far.
    pub fn programs(&self) -> u64 {
        self.programs.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn pass(&self) {
        let (state, changed) = &*self.state;
        let mut guard = state.lock().unwrap();
        if !guard.armed {
            return;
        }
        guard.armed = false;
        guard.holding = true;
        changed.notify_all();
        while !guard.open {
            guard = changed.wait(guard).unwrap();
        }
        guard.holding = false;
    }
}

/// SimFlash with a `Gate` on page reads.
pub struct GateFlash {
    inner: SimFlash<RamStore>,
    pub gate: Gate,
}

impl GateFlash {
    pub fn new(inner: SimFlash<RamStore>) -> Self {
        GateFlash { inner, gate: Gate::default() }
    }
}

impl Flash for GateFlash {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn chip_count(&self) -> u32 {
        self.inner.chip_count()
    }
    fn timing(&self) -> Timing {
        self.inner.timing()
    }
    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        self.gate.pass();
        self.inner.read_page(issue_ns, page, data, spare)
    }
    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        self.gate.programs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.program_page(issue_ns, page, data, spare)
    }
    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        self.inner.erase_block(issue_ns, block)
    }
    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.inner.is_bad_block(block)
    }
    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.inner.mark_bad_block(block)
    }
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.inner.busy_until_ns(chip)
    }
    fn all_done_ns(&self) -> Nanos {
        self.inner.all_done_ns()
    }
    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.inner.erase_count(block)
    }
    fn paired_page_distance(&self) -> u32 {
        self.inner.paired_page_distance()
    }
    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        self.inner.ecc_correctable_bits_per_512()
    }
    fn flush(&mut self) -> Result<(), NandError> {
        self.inner.flush()
    }
    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.inner.write_barrier()
    }
    fn prefetch(&self, pages: &[PageAddress]) {
        self.inner.prefetch(pages)
    }
}
