//! `ServeConfig`: every limit of the server, so memory and threads follow the configuration,
//! not the clients.

use std::time::Duration;

use fsoc_9p::constants::IO_HEADER_SIZE_BYTES;

/// The smallest msize the server agrees to: one 4 KiB page of data per read or write after
/// the I/O header (P9_IOHDRSZ). A client offering less gets Rversion "unknown".
pub const MSIZE_FLOOR_BYTES: u32 = 4096 + 24;
const _: () = assert!(IO_HEADER_SIZE_BYTES == 24, "the floor counts P9_IOHDRSZ");

/// The limits of a server. `Default` gives the documented defaults (docs/PROTOCOL.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeConfig {
    /// Connections served at once; one more is accepted and closed at once.
    pub connections_max: usize,
    /// Requests of one connection accepted and not yet answered (queued or running). The
    /// reader stops reading the connection while this many are in flight.
    pub requests_in_flight_max: usize,
    /// Bytes of request buffers one connection may hold: with msize m, at most
    /// max(2, this / m) requests are in flight (and at most `requests_in_flight_max`).
    pub buffer_bytes_per_connection_max: usize,
    /// Threads executing one connection's requests (started as needed).
    pub workers_per_connection_max: usize,
    /// How long a connection's reader polls for the next request before it sleeps in a
    /// blocking read (zero: never polls). A client on the same machine or a fast link sends its
    /// next request within tens of microseconds; a wake-up from a blocking read costs about as
    /// much (docs/PROTOCOL.md 8.3).
    pub poll_before_sleep: Duration,
    /// Fids one connection may hold; a walk or attach past it gets EMFILE. The Linux client
    /// with cache=loose or cache=mmap keeps a fid for every dentry it caches (released only
    /// when the guest evicts the dentry), so this bounds how many files such a mount can have
    /// looked up at once: 65,536 fids take at most about 23 MiB (a ~100-byte entry and a name
    /// of at most 255 bytes each).
    pub fids_per_connection_max: usize,
    /// The largest msize offered (1 MiB).
    pub msize_max_bytes: u32,
    /// The pre-shared key a client must give as uname or aname at attach (docs/PROTOCOL.md);
    /// `None` lets any client attach (loopback TCP and Unix sockets only: the command refuses
    /// other listeners without it).
    pub secret: Option<Vec<u8>>,
    /// A transaction point this often while anything changed; `None` commits only on fsync
    /// and at the end.
    pub commit_interval: Option<Duration>,
    /// Pages a second the background scrub reads (0: none; fsoc-engine's `BackgroundScrubber`).
    pub scrub_pages_per_second: u32,
    /// How long one reply may wait for a client that does not read before the connection is
    /// closed.
    pub reply_timeout: Duration,
    /// Failed attaches (wrong secret) after which a connection is closed.
    pub attach_failures_max: u32,
    /// Write one line per request and per reply to stderr (`fsoc serve --trace`): for seeing
    /// what a client sends, not for production (every message costs a formatted line).
    pub trace: bool,
}

/// `ServeConfig::poll_before_sleep` by default. PostMark through `fsoc mount --remote` on a
/// 2-CPU machine: 0 µs 6.2 s, 50 µs 5.6 s, 100 µs 4.5 s, 200 µs 4.0 s, 500 µs 4.3 s, 1 ms 4.6 s
/// (docs/PROTOCOL.md 6.3); a round trip of Tgetattr from 35 µs to 19 µs.
pub const POLL_BEFORE_SLEEP_DEFAULT: Duration = Duration::from_micros(200);

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            connections_max: 32,
            requests_in_flight_max: 32,
            buffer_bytes_per_connection_max: 16 << 20,
            workers_per_connection_max: 8,
            poll_before_sleep: POLL_BEFORE_SLEEP_DEFAULT,
            fids_per_connection_max: 65_536,
            msize_max_bytes: 1 << 20,
            secret: None,
            commit_interval: Some(fsoc_engine::COMMIT_INTERVAL_DEFAULT),
            scrub_pages_per_second: fsoc_engine::SCRUB_PAGES_PER_SECOND_DEFAULT,
            reply_timeout: Duration::from_secs(60),
            attach_failures_max: 3,
            trace: false,
        }
    }
}

impl ServeConfig {
    /// Requests one connection may have in flight at msize `msize_bytes`.
    pub fn requests_in_flight(&self, msize_bytes: u32) -> usize {
        let msize = usize::try_from(msize_bytes).unwrap_or(usize::MAX).max(1);
        (self.buffer_bytes_per_connection_max / msize).clamp(2, self.requests_in_flight_max.max(2))
    }

    /// Checks the relations between the limits; the server refuses to start otherwise.
    pub fn check(&self) -> Result<(), String> {
        if self.connections_max == 0 || self.workers_per_connection_max == 0 || self.fids_per_connection_max == 0 {
            return Err("connections, workers and fids per connection must each be at least 1".into());
        }
        if self.requests_in_flight_max == 0 {
            return Err("requests in flight must be at least 1".into());
        }
        if self.msize_max_bytes < MSIZE_FLOOR_BYTES {
            return Err(format!("msize {} is below the floor of {MSIZE_FLOOR_BYTES} bytes", self.msize_max_bytes));
        }
        if self.commit_interval.is_some_and(|interval| interval.is_zero()) {
            return Err("a commit interval of zero: give None to commit only on fsync".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_in_flight_follow_msize_within_the_limits() {
        let config = ServeConfig::default();
        assert_eq!(config.requests_in_flight(8192), 32, "small messages: the request limit");
        assert_eq!(config.requests_in_flight(128 << 10), 32, "the Linux default msize");
        assert_eq!(config.requests_in_flight(1 << 20), 16, "1 MiB messages: the buffer budget");
        let tiny = ServeConfig { buffer_bytes_per_connection_max: 1, ..ServeConfig::default() };
        assert_eq!(tiny.requests_in_flight(1 << 20), 2, "never below two, so a flush can pass");
        assert!(config.check().is_ok());
        assert!(ServeConfig { msize_max_bytes: 4096, ..ServeConfig::default() }.check().is_err());
    }
}
