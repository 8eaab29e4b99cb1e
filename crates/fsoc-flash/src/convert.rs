//! Integer conversions for values that are in range by construction: a count bounded by a
//! `u32` geometry field, an offset inside a buffer sized by the page size, a length that fits
//! a format field because the encoder bounded it. Such values never come unchecked from flash
//! or from a caller (those go through `try_from` and a typed error); each call site's
//! invariant is what makes the conversion exact.
//!
//! The storage crates deny `as` casts that may truncate (`clippy::cast_possible_truncation`);
//! these few helpers are the one place a narrowing conversion may stop the program, loudly and
//! at the caller's line (`#[track_caller]`), instead of silently truncating.

/// `value` as a `usize` (an offset or length into memory: bounded by a buffer or geometry).
#[track_caller]
#[inline]
// In range by construction at every call site; a broken invariant must stop loudly rather
// than truncate silently.
#[allow(clippy::panic)]
pub fn usize_from_u64(value: u64) -> usize {
    match usize::try_from(value) {
        Ok(converted) => converted,
        Err(_) => panic!("usize_from_u64: {value} does not fit in usize"),
    }
}

/// `value` as a `u32` (a count or index bounded by a `u32` geometry field).
#[track_caller]
#[inline]
// In range by construction at every call site; a broken invariant must stop loudly rather
// than truncate silently.
#[allow(clippy::panic)]
pub fn u32_from_usize(value: usize) -> u32 {
    match u32::try_from(value) {
        Ok(converted) => converted,
        Err(_) => panic!("u32_from_usize: {value} does not fit in u32"),
    }
}

/// `value` as a `u16` (a length bounded by the page, at most 64 KiB - 1 where a format stores
/// it in 16 bits).
#[track_caller]
#[inline]
// In range by construction at every call site; a broken invariant must stop loudly rather
// than truncate silently.
#[allow(clippy::panic)]
pub fn u16_from_usize(value: usize) -> u16 {
    match u16::try_from(value) {
        Ok(converted) => converted,
        Err(_) => panic!("u16_from_usize: {value} does not fit in u16"),
    }
}

/// `value` as a `u32` (a count or index bounded by a `u32` geometry field).
#[track_caller]
#[inline]
// In range by construction at every call site; a broken invariant must stop loudly rather
// than truncate silently.
#[allow(clippy::panic)]
pub fn u32_from_u64(value: u64) -> u32 {
    match u32::try_from(value) {
        Ok(converted) => converted,
        Err(_) => panic!("u32_from_u64: {value} does not fit in u32"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_range_convert_exactly() {
        assert_eq!(usize_from_u64(7), 7);
        assert_eq!(u32_from_usize(u32::MAX as usize), u32::MAX);
        assert_eq!(u32_from_u64(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(u16_from_usize(usize::from(u16::MAX)), u16::MAX);
    }

    #[test]
    #[should_panic(expected = "does not fit in u32")]
    fn a_value_out_of_range_stops_instead_of_truncating() {
        u32_from_u64(u64::from(u32::MAX) + 1);
    }
}
