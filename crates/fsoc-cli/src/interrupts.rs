//! Ctrl-C (SIGINT), SIGTERM and SIGHUP as a request to stop: a long command (`fsoc image
//! build`, the benchmarks that mount volumes) notes the signal and stops at its next check,
//! through its guards, instead of dying with volumes mounted or files half written.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT, SIGTERM or SIGHUP: the run stops at the next check and cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes Ctrl-C (and SIGTERM, SIGHUP) stop the command through its guards instead of killing
/// it with volumes still mounted. The child programs in the foreground get SIGINT themselves.
pub fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(signal, note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

/// The flag a signal sets, for a benchmark that checks it itself (`fsoc_bench::fuse::mounts::stop_when`).
#[cfg(feature = "lab")]
pub fn flag() -> &'static AtomicBool {
    &INTERRUPTED
}

/// Whether the user asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
