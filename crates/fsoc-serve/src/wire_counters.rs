//! Messages and bytes on the wire, per message type and direction: what seed 000's Fig. 15
//! compares (bytes a file operation costs on the host-device bus). Both servers keep them:
//! the 9P server by 9P message type, the raw page server by its own (`raw_protocol`).

use std::sync::atomic::{AtomicU64, Ordering};

/// One counter pair per message-type byte: received (requests) and sent (replies) are told
/// apart by the type itself (9P and the raw protocol both give requests even and replies odd
/// numbers, except 9P's Rlerror, 7).
#[derive(Debug)]
pub struct WireCounters {
    messages: [AtomicU64; 256],
    bytes: [AtomicU64; 256],
}

/// One message type's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireCount {
    pub message_type: u8,
    pub messages: u64,
    pub bytes: u64,
}

impl Default for WireCounters {
    fn default() -> Self {
        WireCounters {
            messages: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl WireCounters {
    /// Counts one whole frame (its type is byte 4, after the 4-byte size); a frame too short
    /// to have a type counts under type 0.
    pub fn count_frame(&self, frame: &[u8]) {
        let message_type = frame.get(4).copied().unwrap_or(0);
        let index = usize::from(message_type);
        if let (Some(messages), Some(bytes)) = (self.messages.get(index), self.bytes.get(index)) {
            messages.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        }
    }

    /// The message types seen so far, in type order.
    pub fn snapshot(&self) -> Vec<WireCount> {
        (0u8..=255)
            .zip(self.messages.iter().zip(&self.bytes))
            .map(|(message_type, (messages, bytes))| WireCount {
                message_type,
                messages: messages.load(Ordering::Relaxed),
                bytes: bytes.load(Ordering::Relaxed),
            })
            .filter(|count| count.messages > 0)
            .collect()
    }

    /// Total bytes in all frames counted so far.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().map(|bytes| bytes.load(Ordering::Relaxed)).sum()
    }

    /// Total frames counted so far.
    pub fn total_messages(&self) -> u64 {
        self.messages.iter().map(|messages| messages.load(Ordering::Relaxed)).sum()
    }

    pub fn reset(&self) {
        for counter in self.messages.iter().chain(&self.bytes) {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_count_by_type() {
        let counters = WireCounters::default();
        counters.count_frame(&[11, 0, 0, 0, 100, 1, 0, 9, 9, 9, 9]);
        counters.count_frame(&[7, 0, 0, 0, 101, 1, 0]);
        counters.count_frame(&[7, 0, 0, 0, 101, 2, 0]);
        counters.count_frame(&[1, 2]);
        assert_eq!(
            counters.snapshot(),
            vec![
                WireCount { message_type: 0, messages: 1, bytes: 2 },
                WireCount { message_type: 100, messages: 1, bytes: 11 },
                WireCount { message_type: 101, messages: 2, bytes: 14 },
            ]
        );
        assert_eq!((counters.total_messages(), counters.total_bytes()), (4, 27));
        counters.reset();
        assert!(counters.snapshot().is_empty());
    }
}
