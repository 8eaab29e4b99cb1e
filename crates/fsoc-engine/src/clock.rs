//! The wall clock, as the nanoseconds since the Unix epoch that fsoc-core stamps on changes
//! (the core reads no clock: `FileSystem::now_ns` is set by whoever serves it).

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch. fsoc stores unsigned nanoseconds, so a clock before 1970
/// reads as the epoch and one after 2554 as the largest value.
pub fn wall_clock_ns() -> u64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_is_after_2020() {
        assert!(super::wall_clock_ns() > 1_577_836_800_000_000_000);
    }
}
