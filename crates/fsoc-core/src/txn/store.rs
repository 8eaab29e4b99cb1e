//! Adapters that let the B+trees read and allocate pages through the segment log. Their error
//! is the segment layer's own, so a power loss under a tree operation is reported as such.
//!
//! `LogNodeReader` serves readers (`&SegmentLog`, so several may exist at once, one per reading
//! call); `LogNodeStore` serves the one writer (`&mut SegmentLog`).

use alloc::vec::Vec;
use fsoc_flash::Flash;

use crate::address::LogAddress;
use crate::btree::{NodeReader, NodeStore, NodeTag};
use crate::segment::{PageTag, SegmentError, SegmentLog};

/// Read-only node pages for one reading call.
pub struct LogNodeReader<'a, F: Flash> {
    log: &'a SegmentLog<F>,
}

impl<'a, F: Flash> LogNodeReader<'a, F> {
    pub fn new(log: &'a SegmentLog<F>) -> Self {
        LogNodeReader { log }
    }
}

/// Node reads through the segment log, for both adapters (they differ only in how they hold
/// the log). The segment layer's own error comes out of the tree in `TreeError::Store`.
macro_rules! node_reader_over_log {
    ($adapter:ident) => {
        impl<F: Flash> NodeReader for $adapter<'_, F> {
            type Error = SegmentError;

            fn node_size_bytes(&self) -> usize {
                self.log.layout().page_size_bytes()
            }

            fn read_page(&self, address: LogAddress, out: &mut Vec<u8>) -> Result<(), SegmentError> {
                self.log.read(address, out)
            }

            fn read_redundant_copy(&self, address: LogAddress, out: &mut Vec<u8>) -> Result<bool, SegmentError> {
                out.resize(self.log.layout().page_size_bytes(), 0);
                self.log.read_rebuilt(address, out)
            }
        }
    };
}

node_reader_over_log!(LogNodeReader);

/// Node pages for the writer: reads, appends and releases.
pub struct LogNodeStore<'a, F: Flash> {
    pub log: &'a mut SegmentLog<F>,
}

impl<'a, F: Flash> LogNodeStore<'a, F> {
    pub fn new(log: &'a mut SegmentLog<F>) -> Self {
        LogNodeStore { log }
    }
}

node_reader_over_log!(LogNodeStore);

impl<F: Flash> NodeStore for LogNodeStore<'_, F> {
    fn append_node(&mut self, bytes: &[u8], tag: NodeTag) -> Result<LogAddress, SegmentError> {
        let page_tag = PageTag::Node { tree_id: tag.tree_id, level: tag.level };
        self.log.append(bytes, page_tag)
    }

    fn release(&mut self, address: LogAddress) -> Result<(), SegmentError> {
        self.log.release_metadata(address)
    }
}
