//! The tests' server: `fsoc serve`'s `Server` in this process on a fresh RAM volume (one MLC
//! chip of 256 blocks, 32 MiB, as fsoc-serve's own tests use), listening on a Unix socket or
//! loopback TCP; `stop` takes the volume back, unmounts it and requires fsck to be clean.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

use fsoc_client::{Client, ConnectOptions};
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};
use fsoc_serve::{ListenAddress, ServeConfig, Served, Server, Stopper};

pub type TestFlash = SimFlash<RamStore>;

pub struct TestServer {
    /// What a client connects to: `unix:PATH` or `tcp:127.0.0.1:PORT`.
    pub address: String,
    stopper: Stopper,
    thread: std::thread::JoinHandle<Served<TestFlash>>,
    _directory: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(ServeConfig::default(), false)
    }

    pub fn start_tcp() -> TestServer {
        Self::start_with(ServeConfig::default(), true)
    }

    pub fn start_with(config: ServeConfig, tcp: bool) -> TestServer {
        let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 256, 1)).expect("flash");
        let fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
        let directory = tempfile::tempdir().expect("tempdir");
        let listen = if tcp {
            ListenAddress::parse("tcp:127.0.0.1:0").expect("address")
        } else {
            ListenAddress::Unix(directory.path().join("fsoc.sock"))
        };
        let listener = listen.bind().expect("bind");
        let address = listener.local_address().expect("bound address").to_string();
        let server = Server::new(fs, config).expect("server");
        let stopper = server.stopper();
        let thread = std::thread::spawn(move || server.run(&listener).expect("serve"));
        TestServer { address, stopper, thread, _directory: directory }
    }

    pub fn connect(&self) -> Client {
        self.connect_with(&ConnectOptions::default())
    }

    pub fn connect_with(&self, options: &ConnectOptions) -> Client {
        Client::connect(&self.address, options).unwrap_or_else(|error| panic!("connect {}: {error}", self.address))
    }

    pub fn socket_path(&self) -> PathBuf {
        PathBuf::from(self.address.strip_prefix("unix:").expect("a Unix socket"))
    }

    /// Stops the server (clients must be dropped first), commits, remounts and checks the
    /// volume; returns it remounted for inspection.
    pub fn stop(self) -> FileSystem<TestFlash> {
        self.stopper.stop();
        let served = self.thread.join().expect("server thread");
        assert!(served.failure.is_none(), "the server failed: {:?}", served.failure);
        let flash = served.fs.unmount().expect("unmount");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        assert!(fs.fsck(true).expect("fsck").is_clean(), "fsck after the test");
        fs
    }
}

/// The errno of an io::Error, for assertions.
pub fn errno(error: &std::io::Error) -> i32 {
    error.raw_os_error().unwrap_or_else(|| panic!("not an OS error: {error:?}"))
}
