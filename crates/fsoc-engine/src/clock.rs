//! The wall clock, as the nanoseconds since the Unix epoch that fsoc-core stamps on changes
//! (the core reads no clock: `FileSystem::now_ns` is set by whoever serves it), and the
//! conversions between `SystemTime` and those signed nanoseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, now.
pub fn wall_clock_ns() -> i64 {
    time_ns(SystemTime::now())
}

/// A `SystemTime` as signed nanoseconds since the epoch (negative before it), clamped to what
/// an i64 holds (the years 1678 to 2262).
pub fn time_ns(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |nanos| -nanos),
    }
}

/// Signed nanoseconds since the epoch as a `SystemTime`.
pub fn system_time(time_ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(time_ns.unsigned_abs());
    if time_ns >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_after_2020() {
        assert!(wall_clock_ns() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn times_before_the_epoch_round_trip() {
        for time_ns in [i64::MIN + 1, -1_000_000_001, -1, 0, 1, 1_700_000_000_123_456_789, i64::MAX] {
            assert_eq!(super::time_ns(system_time(time_ns)), time_ns, "{time_ns}");
        }
        assert_eq!(super::time_ns(UNIX_EPOCH - Duration::from_secs(86_400)), -86_400_000_000_000);
    }
}
