//! Layer 4: copy-on-write B+tree (being written).
