//! Layer 7 base: one mounted volume served to many request threads, whatever the transport.
//! The FUSE mount (fsoc-fuse) and the 9P2000.L server (fsoc-serve) are thin layers over it.
//!
//! - `SharedVolume`: the readers-writer lock around the volume. Requests that only look
//!   (`read`) run at once through `&FileSystem`; a change (`change`) runs alone, with the file
//!   system's clock set from the wall clock. A panic inside a request is caught, recorded and
//!   poisons the volume: every later request gets `EngineError::Failed` (EIO), so nothing is
//!   built on a half-applied change and the flash keeps the last committed state.
//! - `PeriodicCommitter`: a transaction point every few seconds while anything changed.
//! - `BackgroundScrubber`: the whole log read a few pages at a time, and data that reads found
//!   near the ECC's limit moved before it is lost.
//! - `DirectoryCursor`: fsoc's name-ordered listing as the numeric offsets (cookies) that
//!   FUSE and 9P hand back.
//! - `wall_clock_ns`: the one clock the servers read (fsoc-core reads none).
//!
//! Nothing here knows a transport: no FUSE types, no 9P messages, no errno of a wire. Callers
//! map `FsError::errno` (fsoc-core's one mapping) and `EngineError::errno` onto their own.
#![forbid(unsafe_code)]
// The storage crates' lint set: no unwrap, expect, panic!, unchecked indexing or truncating
// `as` in product code (unit tests are exempt); each remaining allowance says why at its item.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::cast_possible_truncation
    )
)]

mod background_scrub;
mod clock;
mod directory_cursor;
mod periodic_commit;
mod shared_volume;

pub use background_scrub::{BackgroundScrubber, ScrubStatus, SCRUB_PAGES_PER_SECOND_DEFAULT, SCRUB_STEP_PAGES};
pub use clock::{system_time, time_ns, wall_clock_ns};
pub use directory_cursor::{CursorEntry, DirectoryCursor, COOKIE_AFTER_DOT, COOKIE_AFTER_DOT_DOT};
pub use periodic_commit::{PeriodicCommitter, COMMIT_INTERVAL_DEFAULT};
pub use shared_volume::{current_request, EngineError, SharedVolume, VolumeState};
