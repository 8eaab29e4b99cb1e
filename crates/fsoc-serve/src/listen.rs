//! Where the server listens: `ListenAddress` (parsed from `tcp:HOST:PORT` or `unix:PATH`),
//! `Listener` (accepts until told to stop) and `Stream` (one connection, TCP or Unix).
//!
//! Invariants: a TCP address that is not loopback is refused unless the caller has a secret
//! (`ListenAddress::requires_secret`); a Unix socket path is never unlinked unless it is a
//! socket nobody answers on (a stale one), so a live server's socket or a regular file is never
//! removed.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a waiting accept looks at the stop flag.
const ACCEPT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A listening address from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddress {
    /// `tcp:HOST:PORT` with an IP literal (`[::1]` for IPv6) or `localhost`; port 0 picks one.
    Tcp(SocketAddr),
    /// `unix:PATH`.
    Unix(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0:?}: expected tcp:HOST:PORT (an IP address or localhost) or unix:PATH")]
    Syntax(String),
    #[error("{0}: a file that is not a socket is in the way")]
    NotASocket(PathBuf),
    #[error("{0}: another server is listening on this socket")]
    SocketInUse(PathBuf),
    #[error("cannot listen on {address}: {source}")]
    Io { address: String, source: io::Error },
}

impl ListenAddress {
    pub fn parse(text: &str) -> Result<ListenAddress, ListenError> {
        let syntax = || ListenError::Syntax(text.to_string());
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(syntax());
            }
            return Ok(ListenAddress::Unix(PathBuf::from(path)));
        }
        let rest = text.strip_prefix("tcp:").ok_or_else(syntax)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(syntax)?;
        let port: u16 = port.parse().map_err(|_| syntax())?;
        let ip = match host {
            "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
            bracketed if bracketed.starts_with('[') && bracketed.ends_with(']') => {
                bracketed.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| syntax())?
            }
            literal => literal.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| syntax())?,
        };
        Ok(ListenAddress::Tcp(SocketAddr::new(ip, port)))
    }

    /// Whether clients must give the secret: TCP on anything but a loopback address. A Unix
    /// socket is guarded by its file permissions, loopback by being on this machine only.
    pub fn requires_secret(&self) -> bool {
        match self {
            ListenAddress::Tcp(address) => !address.ip().is_loopback(),
            ListenAddress::Unix(_) => false,
        }
    }

    /// Binds the address.
    pub fn bind(&self) -> Result<Listener, ListenError> {
        let io_error = |source| ListenError::Io { address: self.to_string(), source };
        match self {
            ListenAddress::Tcp(address) => Ok(Listener::Tcp(TcpListener::bind(address).map_err(io_error)?)),
            ListenAddress::Unix(path) => {
                remove_stale_socket(path)?;
                let listener = UnixListener::bind(path).map_err(io_error)?;
                Ok(Listener::Unix { listener, path: path.clone() })
            }
        }
    }
}

impl std::fmt::Display for ListenAddress {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddress::Tcp(address) => write!(formatter, "tcp:{address}"),
            ListenAddress::Unix(path) => write!(formatter, "unix:{}", path.display()),
        }
    }
}

/// Removes `path` if it is a socket that no server answers on (left by a server that died).
fn remove_stale_socket(path: &Path) -> Result<(), ListenError> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !metadata.file_type().is_socket() {
        return Err(ListenError::NotASocket(path.to_path_buf()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ListenError::SocketInUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|source| ListenError::Io { address: format!("unix:{}", path.display()), source })
}

/// A bound listener.
pub enum Listener {
    Tcp(TcpListener),
    /// The socket file is removed when the listener is dropped.
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
}

impl Listener {
    /// The address actually bound (a TCP port 0 resolved).
    pub fn local_address(&self) -> io::Result<ListenAddress> {
        match self {
            Listener::Tcp(listener) => Ok(ListenAddress::Tcp(listener.local_addr()?)),
            Listener::Unix { path, .. } => Ok(ListenAddress::Unix(path.clone())),
        }
    }

    /// Waits for a connection until `stop` returns true (checked every 20 ms): `Ok(None)`
    /// then. The accept loop is the server's one unbounded loop.
    pub(crate) fn accept(&self, stop: impl Fn() -> bool) -> io::Result<Option<Stream>> {
        match self {
            Listener::Tcp(listener) => listener.set_nonblocking(true)?,
            Listener::Unix { listener, .. } => listener.set_nonblocking(true)?,
        }
        loop {
            if stop() {
                return Ok(None);
            }
            let accepted = match self {
                Listener::Tcp(listener) => listener.accept().map(|(stream, _)| Stream::Tcp(stream)),
                Listener::Unix { listener, .. } => listener.accept().map(|(stream, _)| Stream::Unix(stream)),
            };
            match accepted {
                Ok(stream) => {
                    stream.set_blocking()?;
                    return Ok(Some(stream));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL_INTERVAL),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                // A connection that died before it was accepted (ECONNABORTED), or too many
                // open files for now: not a reason to stop serving the others.
                Err(error) => {
                    log::warn!("accept: {error}");
                    std::thread::sleep(ACCEPT_POLL_INTERVAL);
                }
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One connection.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to a server listening at `address` (the host side of the raw protocol).
    pub(crate) fn connect(address: &ListenAddress) -> io::Result<Stream> {
        let stream = match address {
            ListenAddress::Tcp(socket) => Stream::Tcp(TcpStream::connect(socket)?),
            ListenAddress::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        };
        stream.set_blocking()?;
        Ok(stream)
    }

    fn set_blocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => {
                stream.set_nonblocking(false)?;
                // Replies are whole messages written at once: send them without delay.
                stream.set_nodelay(true)
            }
            Stream::Unix(stream) => stream.set_nonblocking(false),
        }
    }

    /// Waits up to `spin` for bytes (or the end of the stream) to read, polling without
    /// sleeping: when the peer answers within microseconds, as a server on the same machine
    /// does, this costs less than the thread switch of a blocking read (`poll_before_sleep`).
    /// Returns when there is something to read, at the first error, or when the time is up.
    /// poll(2) with a zero timeout, not a peeking recv: recv locks the socket, and TCP segments
    /// arriving meanwhile wait in its backlog (PostMark over loopback TCP: 4.84 s → 4.05 s).
    pub(crate) fn poll_readable(&self, spin: std::time::Duration) {
        if spin.is_zero() {
            return;
        }
        use std::os::fd::AsFd;
        let start = std::time::Instant::now();
        let fd = match self {
            Stream::Tcp(stream) => stream.as_fd(),
            Stream::Unix(stream) => stream.as_fd(),
        };
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        loop {
            let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&zero)) {
                Ok(0) | Err(rustix::io::Errno::INTR) if start.elapsed() < spin => std::hint::spin_loop(),
                _ => return,
            }
        }
    }

    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(stream) => stream.try_clone().map(Stream::Tcp),
            Stream::Unix(stream) => stream.try_clone().map(Stream::Unix),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_write_timeout(Some(timeout)),
            Stream::Unix(stream) => stream.set_write_timeout(Some(timeout)),
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) {
        // Already shut down, or the peer is gone: either way nothing more passes.
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(how),
            Stream::Unix(stream) => stream.shutdown(how),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            Stream::Unix(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            Stream::Unix(stream) => stream.write(buffer),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_say_when_a_secret_is_needed() {
        let loopback = ListenAddress::parse("tcp:127.0.0.1:5640").expect("parse");
        assert_eq!(loopback, ListenAddress::Tcp("127.0.0.1:5640".parse().expect("address")));
        assert!(!loopback.requires_secret());
        assert!(!ListenAddress::parse("tcp:localhost:0").expect("parse").requires_secret());
        assert!(!ListenAddress::parse("tcp:[::1]:564").expect("parse").requires_secret());
        assert!(ListenAddress::parse("tcp:0.0.0.0:564").expect("parse").requires_secret());
        assert!(ListenAddress::parse("tcp:192.168.1.5:564").expect("parse").requires_secret());
        assert!(!ListenAddress::parse("unix:/run/fsoc.sock").expect("parse").requires_secret());
        for bad in
            ["tcp:127.0.0.1", "tcp:host.example:564", "udp:1.2.3.4:5", "unix:", "tcp:[::1:5", "tcp:1.2.3.4:99999"]
        {
            assert!(ListenAddress::parse(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(loopback.to_string(), "tcp:127.0.0.1:5640");
    }

    #[test]
    fn a_stale_socket_is_replaced_but_a_file_or_a_live_socket_is_not() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("fsoc.sock");
        let address = ListenAddress::Unix(path.clone());
        let live = address.bind().expect("bind");
        assert!(matches!(address.bind(), Err(ListenError::SocketInUse(_))));
        drop(live);
        assert!(!path.exists(), "a listener removes its socket when dropped");
        // A listener closed without unlinking (a killed server) leaves a stale socket.
        let stale_path = directory.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale_path).expect("bind"));
        assert!(stale_path.exists());
        let replaced = ListenAddress::Unix(stale_path.clone()).bind().expect("a stale socket is replaced");
        assert!(UnixStream::connect(&stale_path).is_ok());
        drop(replaced);
        let file = directory.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(matches!(ListenAddress::Unix(file.clone()).bind(), Err(ListenError::NotASocket(_))));
        assert_eq!(std::fs::read(&file).expect("still there"), b"x");
    }
}
