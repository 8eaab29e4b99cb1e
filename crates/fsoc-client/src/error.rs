//! The client's errors are `std::io::Error`s: an Rlerror becomes the OS error of its errno
//! (9P2000.L carries Linux numbers, and this client runs on Linux), so `kind()` and
//! `raw_os_error()` say what `std::fs` would; a reply that breaks the protocol is
//! `InvalidData`, a lost connection `ConnectionAborted`, each with a message saying so.

use std::io;

use fsoc_9p::Errno;

/// The error an Rlerror carries.
pub(crate) fn reply_error(errno: Errno) -> io::Error {
    io::Error::from_raw_os_error(i32::try_from(errno.0).unwrap_or(i32::MAX))
}

/// A reply that is not what the protocol allows.
pub(crate) fn protocol_error(detail: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("9P protocol error: {detail}"))
}

/// An error of errno `errno` raised by the client itself (e.g. ELOOP while following links).
pub(crate) fn os_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}
