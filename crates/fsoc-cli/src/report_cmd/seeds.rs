//! The five source documents (../shared/seeds/README.md) and the figures they publish that the
//! report sets beside fsoc's, each with where the seed states it.

/// One seed document.
pub(crate) struct Seed {
    pub id: &'static str,
    pub file: &'static str,
    pub title: &'static str,
    /// What the project takes from it.
    pub takes: &'static str,
}

pub(crate) const SEEDS: [Seed; 5] = [
    Seed {
        id: "000",
        file: "000_2bd939e5584c4260.txt",
        title: "FSOC: a flash-memory-based file system on the chip",
        takes: "the service mode: the file system in the device, a protocol to hosts, traffic accounting (Fig. 15), Table 2 and the performance model Eqs. (1)-(4)",
    },
    Seed {
        id: "001",
        file: "001_89062cd80204a3eb.txt",
        title: "MA (MTD-array): UBIFS striped over parallel raw NAND chips",
        takes: "the chip array: striping, per-chip queues, array-wide wear levelling, the IOzone record sweep with O_SYNC, mount time (Fig. 6)",
    },
    Seed {
        id: "002",
        file: "002_8c31f0087b4e34a9.txt",
        title: "HWFS: a file system in hardware with command queueing",
        takes: "queued, tagged commands and the efficiency metric: the file system's rate against the raw device's",
    },
    Seed {
        id: "003",
        file: "003_19f6bdfd4a43c000.txt",
        title: "Datalight Reliance Nitro: a transactional file system",
        takes: "copy-on-write B+trees, atomic transaction points, delta commits, mount in a few block reads, the FSIO create/open/delete benchmark",
    },
    Seed {
        id: "004",
        file: "004_05eadcd7f5f2bf4d.txt",
        title: "NVFAT: byte-addressable NVRAM as a metadata write cache",
        takes: "the NVRAM commit tier, Sync-PostMark, and the erase and energy accounting",
    },
];

/// What the seeds publish, quoted or computed from their own numbers.
pub(crate) mod published {
    pub const S000_FIG15_METADATA: &str =
        "FSOC moves 5–30% of the conventional device's bytes for mkdir, rmdir, create and delete (Fig. 15)";
    pub const S000_FIG15_DATA: &str = "about 100%: reads and writes move \"almost the same\" traffic (Fig. 15)";
    pub const S000_TABLE2_READ: &str = "FSOC 1,730 ms, conventional 1,603 ms: FSOC/conv. 1.08 (Table 2, 1 MB read)";
    pub const S000_TABLE2_CREATE: &str =
        "FSOC 8,986 ms, conventional 28,926 ms: FSOC/conv. 0.31 (Table 2, 500 creates)";
    pub const S000_TABLE2_ANDREW: &str =
        "FSOC 4,920 ms, conventional 4,961 ms: FSOC/conv. 0.99 (Table 2, Andrew phase 2)";
    pub const S000_MODEL_ERROR: &str = "2–3% (below 1% once measurement overhead is subtracted; section 5)";
    pub const S001_SCALING_2: &str = "MA-UBIFS, 2 MTDs: +78.7% (1.79×), TLC, 16 MB records (Fig. 8)";
    pub const S001_SCALING_4: &str = "MA-UBIFS, 4 MTDs: +188.7% (2.89×), TLC, 16 MB records (Fig. 8)";
    pub const S001_SCALING_8: &str =
        "none: the seed stops at 4 MTDs (\"we expect more performance improvements if more than 4 UBIs are used\")";
    pub const S001_MOUNT: &str = "MA-UBIFS mounts in less than 120 ms with 4 MTDs (up to 16,000 files; Fig. 6)";
    pub const S002_EFFICIENCY_READ: &str =
        "HWFS reaches 85% of the SSD's peak read (241 MB/s; 16 commands queued, 16 KB blocks)";
    pub const S002_EFFICIENCY_WRITE: &str =
        "HWFS reaches 80% of the SSD's peak write (219 MB/s; 16 commands queued, 16 KB blocks)";
    pub const S002_QUEUEING: &str =
        "no depth-1-to-32 ratio published; with queueing HWFS reaches 241 MB/s read against 152 MB/s unqueued at 16 KB (1.59×)";
    pub const S003_MOUNT: &str = "Reliance Nitro mounts with 3–5 logical block reads";
    pub const S003_CREATE: &str = "Reliance Nitro 6–18× faster than T-exFAT (SD card, 33 MB partition)";
    pub const S003_OPEN: &str = "Reliance Nitro about 80% faster than T-exFAT below 133 files, up to 186× above";
    pub const S003_DELETE: &str = "Reliance Nitro 2–8× faster than T-exFAT";
    pub const S003_CRASH: &str = "claims \"100% logical reliability\" across power loss; publishes no power-cut count";
    pub const S004_CRASH: &str = "NVFAT keeps metadata consistent in NVRAM; publishes no power-cut test";
    pub const S004_SPEEDUP: &str = "13.6× (Sync-PostMark 14,883 s → 1,096 s with 128 KB of NVRAM)";
    pub const S004_ENERGY: &str = "14.5× (114.2 J → 7.9 J with 128 KB of NVRAM)";
    pub const S004_WEAR: &str =
        "fewer erases and a narrower erase-count spread as NVRAM grows (Fig. 7); no single ratio published";
    pub const S004_SYNC_NONE: &str = "14,883 s (VFAT, every write O_SYNC, 32 MB partition behind a log-block FTL)";
    pub const S004_SYNC_128K: &str = "1,096 s (NVFAT with 128 KB of NVRAM)";
    pub const S004_ENERGY_NONE: &str = "114.2 J (VFAT)";
    pub const S004_ENERGY_128K: &str = "7.9 J (NVFAT with 128 KB of NVRAM)";
}
