//! `fsoc serve IMAGE --listen tcp:HOST:PORT|unix:PATH`: serves a volume over 9P2000.L until
//! SIGINT, SIGTERM or SIGHUP, then finishes the requests in flight, commits and closes the
//! image cleanly (exit status 0). With `--raw`, serves the image's chips instead, page by page
//! (seed 000's conventional device; docs/PROTOCOL.md section 7): the host runs the file system.
//!
//! Invariants: the image is locked exclusively for the whole time it is served (as by `fsoc
//! mount`); a TCP listener on an address other than loopback is refused without
//! `--secret-file`; the final commit happens after the last connection has ended, so it is the
//! last write to the volume.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use fsoc_serve::{read_secret_file, ListenAddress, ServeConfig, Server};

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// The volume: an image file from `fsoc mkfs`, or an array from `fsoc array mkfs` as BASE
    /// or any of its chip files BASE.chipN. Locked while served.
    image: PathBuf,
    /// Where to listen: tcp:HOST:PORT (an IP address or localhost; port 0 picks a free port,
    /// printed at start) or unix:PATH (a Unix socket, removed at exit).
    #[arg(long, value_name = "ADDRESS")]
    listen: String,
    /// A file holding the pre-shared key (16 to 255 bytes, no whitespace or comma) that every
    /// client must give as its uname or aname at attach. Required for TCP on an address other
    /// than loopback.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<PathBuf>,
    /// Serve read-only: nothing on the image changes.
    #[arg(long)]
    read_only: bool,
    /// Make a transaction point this often (seconds) while anything changed; 0 commits only on
    /// fsync and at exit.
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    commit_interval: u64,
    /// Read the whole volume this many pages a second in the background, moving data that
    /// reads find near the ECC's limit before it is lost; 0 turns the background scrub off.
    #[arg(long, default_value_t = fsoc_engine::SCRUB_PAGES_PER_SECOND_DEFAULT, value_name = "PAGES_PER_SECOND")]
    scrub_rate: u32,
    /// Requests one connection may have in flight (queued or running), 1 to 1024; fewer when
    /// large messages would pass 16 MiB of buffers per connection.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    requests_in_flight: u16,
    /// Microseconds a connection polls for the next request before sleeping, 0 to 100000
    /// (0: never polls). Polling spends up to this much CPU after each request; a client that
    /// answers sooner is served without a thread wake-up (docs/PROTOCOL.md 8.3).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = fsoc_serve::POLL_BEFORE_SLEEP_DEFAULT.as_micros() as u32, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    poll_us: u32,
    /// Connections served at once, 1 to 1024.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    connections: u16,
    /// Print connection and shutdown steps.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Print every 9P request and reply (type, tag, fids, names, offsets; the errno of an
    /// Rlerror) on stderr, one line each, for finding out what a client sends.
    #[arg(long)]
    trace: bool,
    /// Export the chips' raw pages (read, program, erase, bad-block marks) instead of files:
    /// the conventional storage device of seed 000, for a host that runs fsoc itself
    /// (`fsoc_serve::RemoteFlash`). One host at a time; the file system is not mounted here.
    #[arg(long, conflicts_with_all = ["read_only", "trace"])]
    raw: bool,
}

/// Signals that stop the server; blocked in every thread and taken by `sigwait`.
fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize and fill the set this function owns.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks the termination signals before any thread starts, so they reach only `sigwait`.
pub(crate) fn block_termination_signals() -> libc::sigset_t {
    let signals = termination_signals();
    // SAFETY: changes this thread's mask (inherited by threads spawned later); the set is valid.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
    signals
}

/// Starts the thread that stops the server at the first termination signal.
fn stop_on_signal(signals: libc::sigset_t, stopper: fsoc_serve::Stopper) -> Result<(), String> {
    std::thread::Builder::new()
        .name("fsoc-signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is a valid set and `signal` a valid out-pointer.
            if unsafe { libc::sigwait(&signals, &mut signal) } == 0 {
                log::info!("signal {signal}: finishing the request in progress, then stopping");
                stopper.stop();
            }
        })
        .map(drop)
        .map_err(|error| format!("cannot start the signal thread: {error}"))
}

/// `--raw`: exports the chips of the volume's files page by page until a termination signal.
fn serve_raw(arguments: &ServeArgs, address: &ListenAddress, secret: Option<Vec<u8>>) -> Result<(), String> {
    let files = crate::volume_files::VolumeFiles::locate(&arguments.image);
    let locks = files.lock(true)?;
    // Before the chip workers of an array start: they inherit the mask.
    let signals = block_termination_signals();
    let flash = crate::volume_files::open_flash(&files, false)?;
    let listener = address.bind().map_err(|error| error.to_string())?;
    let bound = listener.local_address().map_err(|error| format!("{address}: {error}"))?;
    let server = fsoc_serve::RawServer::new(flash, secret);
    let counters = server.counters();
    stop_on_signal(signals, server.stopper())?;
    announce(&format!(
        "fsoc: serving the raw pages of {} on {bound} (fsoc raw page protocol); stop with Ctrl-C or SIGTERM",
        files.name().display()
    ));
    let flash = server.run(&listener).map_err(|error| format!("{}: {error}", arguments.image.display()))?;
    drop(listener);
    let closed = flash.close().map_err(|error| format!("{}: {error}", files.name().display()));
    drop(locks);
    closed?;
    eprintln!(
        "fsoc: {} closed after {} messages, {} bytes on the wire",
        files.name().display(),
        counters.total_messages(),
        counters.total_bytes()
    );
    Ok(())
}

/// Prints the line that says where the server listens in one write: scripts and tests wait for
/// it and read the address from it, and stderr is unbuffered (a formatted line would otherwise
/// go out piece by piece, and a reader could take a cut-off address).
fn announce(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

pub fn run(arguments: ServeArgs) -> Result<(), String> {
    fsoc_fuse::logger::install("fsoc serve", arguments.verbose);
    let image = &arguments.image;
    let address = ListenAddress::parse(&arguments.listen).map_err(|error| error.to_string())?;
    let secret = match &arguments.secret_file {
        Some(path) => Some(read_secret_file(path)?),
        None if address.requires_secret() => {
            return Err(format!(
                "listening on {address} (not a loopback address) lets other machines reach the volume: give \
                 --secret-file PATH, a pre-shared key that clients send as their uname or aname at attach"
            ))
        }
        None => None,
    };
    if arguments.raw {
        return serve_raw(&arguments, &address, secret);
    }
    // Before the chip workers of an array start: they inherit the mask (a worker without it
    // would take a SIGTERM and end the process without the clean stop).
    let signals = block_termination_signals();
    let crate::volume_files::OpenVolume { files, fs, locks } =
        crate::volume_files::open(image, arguments.read_only, true)?;
    if let Some(damage) = fs.mount_report().damage {
        log::warn!("{}: {damage}; run `fsoc fsck {}` after stopping the server", image.display(), image.display());
    }
    let config = ServeConfig {
        connections_max: usize::from(arguments.connections),
        requests_in_flight_max: usize::from(arguments.requests_in_flight),
        secret,
        commit_interval: (arguments.commit_interval > 0).then(|| Duration::from_secs(arguments.commit_interval)),
        scrub_pages_per_second: arguments.scrub_rate,
        trace: arguments.trace,
        poll_before_sleep: Duration::from_micros(u64::from(arguments.poll_us)),
        ..ServeConfig::default()
    };
    let listener = address.bind().map_err(|error| error.to_string())?;
    let bound = listener.local_address().map_err(|error| format!("{address}: {error}"))?;
    let server = Server::new(fs, config).map_err(|error| error.to_string())?;
    stop_on_signal(signals, server.stopper())?;
    announce(&format!("fsoc: serving {} on {bound} (9P2000.L); stop with Ctrl-C or SIGTERM", files.name().display()));
    let served = server.run(&listener).map_err(|error| format!("{}: {error}", image.display()))?;
    drop(listener);
    let closed = crate::volume_files::close_served(served.fs, served.failure.as_deref(), files.name(), image);
    drop(locks);
    closed?;
    eprintln!(
        "fsoc: {} committed and closed after {} connection(s)",
        files.name().display(),
        served.connections_served
    );
    Ok(())
}
