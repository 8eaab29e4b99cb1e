//! Layer 3: the segment log — copy-on-write page allocation in stripes, the segment table,
//! and the physical layout. Nothing here knows what a B+tree node or a file is.

pub mod cleaner;
pub mod device;
pub mod layout;
pub mod log;
mod pair_set;
pub mod parity;
pub mod segment_table;

pub use cleaner::{DeadPages, VictimPage, WEAR_SPREAD_MAX};
pub use device::{Device, PageTag};
pub use layout::{Layout, Redundancy};
pub use log::{LogHead, SegmentError, SegmentLog};
pub use segment_table::SegmentTable;
