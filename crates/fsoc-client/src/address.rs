//! Where the server is: `Address` (parsed from `tcp:HOST:PORT` or `unix:PATH`, the syntax of
//! `fsoc serve --listen`) and `Stream`, one connected socket of either kind.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// A server address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `tcp:HOST:PORT`: HOST is an IP literal (`[::1]` for IPv6), `localhost` or a host name.
    Tcp { host: String, port: u16 },
    /// `unix:PATH`.
    Unix(PathBuf),
}

impl Address {
    pub fn parse(text: &str) -> io::Result<Address> {
        let syntax =
            || io::Error::new(io::ErrorKind::InvalidInput, format!("{text:?}: expected tcp:HOST:PORT or unix:PATH"));
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(syntax());
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        let rest = text.strip_prefix("tcp:").ok_or_else(syntax)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(syntax)?;
        let port: u16 = port.parse().map_err(|_| syntax())?;
        let host = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(host);
        if host.is_empty() || port == 0 {
            return Err(syntax());
        }
        Ok(Address::Tcp { host: host.to_string(), port })
    }

    pub(crate) fn connect(&self) -> io::Result<Stream> {
        match self {
            Address::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), *port))?;
                // Requests are small and latency-bound: do not let Nagle hold them back.
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp { host, port } if host.contains(':') => write!(formatter, "tcp:[{host}]:{port}"),
            Address::Tcp { host, port } => write!(formatter, "tcp:{host}:{port}"),
            Address::Unix(path) => write!(formatter, "unix:{}", path.display()),
        }
    }
}

/// One connection, TCP or Unix.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(stream) => stream.try_clone().map(Stream::Tcp),
            Stream::Unix(stream) => stream.try_clone().map(Stream::Unix),
        }
    }

    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Both),
            Stream::Unix(stream) => stream.shutdown(Shutdown::Both),
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
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(bytes),
            Stream::Unix(stream) => stream.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.flush(),
            Stream::Unix(stream) => stream.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_fsoc_serve_prints_them() {
        assert_eq!(
            Address::parse("tcp:127.0.0.1:5640").unwrap(),
            Address::Tcp { host: "127.0.0.1".into(), port: 5640 }
        );
        assert_eq!(Address::parse("tcp:[::1]:5640").unwrap(), Address::Tcp { host: "::1".into(), port: 5640 });
        assert_eq!(Address::parse("tcp:[::1]:5640").unwrap().to_string(), "tcp:[::1]:5640");
        assert_eq!(Address::parse("unix:/run/fsoc.sock").unwrap(), Address::Unix("/run/fsoc.sock".into()));
        for bad in ["", "tcp:", "tcp:host", "tcp:host:0", "tcp::5640", "unix:", "udp:1.2.3.4:5", "tcp:h:99999"] {
            assert_eq!(Address::parse(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
