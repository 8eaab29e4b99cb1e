//! Layer 2: chip arrays. A `Flash` of p chips kept in p image files, one worker thread per
//! chip, with the simulator's virtual time (work in progress; see issue 4).
