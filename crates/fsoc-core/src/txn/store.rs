//! Adapters that let the B+trees read and allocate pages through the segment log. They keep the
//! segment layer's own error, so a power loss under a tree operation is reported as such.
//!
//! `LogNodeReader` serves readers (`&SegmentLog`, so several may exist at once, one per reading
//! call); `LogNodeStore` serves the one writer (`&mut SegmentLog`).

use alloc::vec::Vec;
use core::cell::Cell;

use fsoc_flash::{Flash, NandError};

use crate::address::LogAddress;
use crate::btree::{NodeReader, NodeStore, NodeTag, TreeError};
use crate::segment::{PageTag, SegmentError, SegmentLog};

/// Maps a segment-layer error onto the tree's, remembering the original in `slot`.
fn convert(slot: &Cell<Option<SegmentError>>, address: LogAddress, error: SegmentError) -> TreeError {
    let converted = match &error {
        SegmentError::NoFreeSegment => TreeError::NoSpace,
        SegmentError::Unreadable { .. } => {
            TreeError::Io { address, reason: "page unreadable (uncorrectable or erased)" }
        }
        SegmentError::Media(NandError::PowerLost) => TreeError::Io { address, reason: "power lost" },
        SegmentError::Media(_) => TreeError::Io { address, reason: "flash error" },
        SegmentError::CorruptTable { .. } => TreeError::Io { address, reason: "segment table corrupt" },
        SegmentError::Accounting { .. } => {
            TreeError::Io { address, reason: "segment accounting broken by a corrupt record" }
        }
    };
    slot.set(Some(error));
    converted
}

/// Read-only node pages for one reading call.
pub struct LogNodeReader<'a, F: Flash> {
    log: &'a SegmentLog<F>,
    /// The segment-layer error behind the last `TreeError::Io`.
    error: Cell<Option<SegmentError>>,
}

impl<'a, F: Flash> LogNodeReader<'a, F> {
    pub fn new(log: &'a SegmentLog<F>) -> Self {
        LogNodeReader { log, error: Cell::new(None) }
    }

    /// The segment-layer error behind the last tree error, if any (taken: asked once).
    pub fn take_error(&self) -> Option<SegmentError> {
        self.error.take()
    }
}

/// Node reads through the segment log, for both adapters (they differ only in how they hold
/// the log).
macro_rules! node_reader_over_log {
    ($adapter:ident) => {
        impl<F: Flash> NodeReader for $adapter<'_, F> {
            fn node_size_bytes(&self) -> usize {
                self.log.layout().page_size_bytes()
            }

            fn read_page(&self, address: LogAddress, out: &mut Vec<u8>) -> Result<(), TreeError> {
                self.log.read(address, out).map_err(|error| convert(&self.error, address, error))
            }
        }
    };
}

node_reader_over_log!(LogNodeReader);

/// Node pages for the writer: reads, appends and releases.
pub struct LogNodeStore<'a, F: Flash> {
    pub log: &'a mut SegmentLog<F>,
    /// The segment-layer error behind the last `TreeError::Io` / `NoSpace`.
    error: Cell<Option<SegmentError>>,
}

impl<'a, F: Flash> LogNodeStore<'a, F> {
    pub fn new(log: &'a mut SegmentLog<F>) -> Self {
        LogNodeStore { log, error: Cell::new(None) }
    }

    /// The segment-layer error behind the last tree error, if any (taken: asked once).
    pub fn take_error(&self) -> Option<SegmentError> {
        self.error.take()
    }
}

node_reader_over_log!(LogNodeStore);

impl<F: Flash> NodeStore for LogNodeStore<'_, F> {
    fn append_node(&mut self, bytes: &[u8], tag: NodeTag) -> Result<LogAddress, TreeError> {
        let page_tag = PageTag::Node { tree_id: tag.tree_id, level: tag.level };
        self.log.append(bytes, page_tag).map_err(|error| convert(&self.error, LogAddress::NULL, error))
    }

    fn release(&mut self, address: LogAddress) {
        self.log.release(address);
    }
}
