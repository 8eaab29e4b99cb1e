//! The codec's two error types: what is wrong with received bytes (`DecodeError`) and why a
//! message could not be written (`EncodeError`). Each names the message and the bad value.

/// Received bytes that are not a 9P2000.L message. A server answers with Rlerror (EPROTO,
/// or ENAMETOOLONG for `StringTooLong`) when it could read the tag, or disconnects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{structure}: need {needed_bytes} bytes, got {actual_bytes}")]
    Truncated { structure: &'static str, needed_bytes: usize, actual_bytes: usize },
    #[error("{structure}: {extra_bytes} bytes after the last field")]
    TrailingBytes { structure: &'static str, extra_bytes: usize },
    #[error("size field {size_bytes} is below the 7-byte header")]
    SizeBelowHeader { size_bytes: u32 },
    #[error("size field {size_bytes} is above msize {msize_bytes}")]
    SizeAboveMsize { size_bytes: u32, msize_bytes: u32 },
    /// A type code that is not a 9P2000.L message of the expected direction (a reply code
    /// given to `decode_request`, or a 9P2000 code that 9P2000.L dropped).
    #[error("{message_type} is not a 9P2000.L {direction}")]
    UnknownType { message_type: u8, direction: &'static str },
    #[error("{structure}: {count} walk elements, at most 16")]
    TooManyWalkElements { structure: &'static str, count: u16 },
    #[error("{structure}: {field} is {length_bytes} bytes, at most {limit_bytes}")]
    StringTooLong { structure: &'static str, field: &'static str, length_bytes: usize, limit_bytes: usize },
}

/// A message that cannot be written into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("message needs {needed_bytes} bytes, buffer holds {capacity_bytes}")]
    BufferTooSmall { needed_bytes: usize, capacity_bytes: usize },
    #[error("{structure}: {field} is {length_bytes} bytes, at most {limit_bytes}")]
    StringTooLong { structure: &'static str, field: &'static str, length_bytes: usize, limit_bytes: usize },
    /// Above what the four-byte size field can state.
    #[error("message of {size_bytes} bytes does not fit a 4-byte size field")]
    MessageTooLarge { size_bytes: usize },
}
