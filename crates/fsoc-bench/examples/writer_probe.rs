//! Probe: time of a 64 KiB write + fsync on a 4-chip threaded array (for profiling).
use std::time::Instant;

use fsoc_array::ThreadedFlash;
use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{Profile, SimConfig};

fn main() {
    let base = std::path::Path::new("/dev/shm/writer-probe");
    let sim = SimConfig::new(Profile::Mlc, 4, 2048, 1);
    let flash = ThreadedFlash::create(base, sim).unwrap();
    let paths = flash.paths().to_vec();
    let mut fs = FileSystem::format(flash, FsConfig::default(), 1).unwrap();
    let file = fs.create(1, b"stream", FileKind::File, 0o644, 0, 0, None).unwrap();
    let data = vec![0x5au8; 64 << 10];
    let rounds: u64 = std::env::args().nth(1).map_or(3000, |a| a.parse().unwrap());
    let mode = std::env::args().nth(2).unwrap_or_default();
    let (mut write_t, mut commit_t) = (0f64, 0f64);
    for round in 0..rounds {
        let offset = (round * (64 << 10)) % (8 << 20);
        let t = Instant::now();
        fs.write(file, offset, &data).unwrap();
        let t2 = Instant::now();
        if mode != "nosync" {
            let started = fs.begin_fsync(file).unwrap();
            let t3 = Instant::now();
            started.wait().unwrap();
            commit_t += (t3 - t2).as_secs_f64();
        }
        write_t += (t2 - t).as_secs_f64();
    }
    println!("write {:.1} us, begin_fsync {:.1} us", write_t / rounds as f64 * 1e6, commit_t / rounds as f64 * 1e6);
    drop(fs);
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}
