//! Layer 5: transactions — the working state and the committed state, superblock, metaroots,
//! and the commit protocol that turns one into the other atomically.

pub mod chip_set;
pub mod metaroot;
pub mod nvram_log;
pub mod rebuild;
pub mod store;
pub mod superblock;
pub mod volume;

pub use chip_set::ChipSetError;
pub use metaroot::{ChainLink, Metaroot, MetarootShape};
pub use rebuild::{rebuild_chip, RebuildReport};
pub use superblock::Superblock;
pub use volume::{TxnError, Volume, VolumeConfig, WornOut, AREA_WEAR_MARGIN};
