//! Sweeps littlefs's tunables on the full fsio workload to find the configuration most
//! favourable to littlefs on this geometry (the one `LittlefsConfig::BENCHMARK` records):
//! `cargo run --release -p fsoc-bench --example littlefs_sweep`.

use fsoc_bench::fsio::{self, FsioConfig, FsioOperation};
use fsoc_bench::{LittlefsConfig, LittlefsTarget};

fn main() {
    let config = FsioConfig::full(1);
    println!("cache_bytes metadata_max_bytes block_cycles | create_s open_s delete_s total_s | reads programs erases");
    for cache_size_bytes in [2048u32, 8192] {
        for metadata_max_bytes in [0u32, 32768, 16384, 8192, 6144, 4096, 2048] {
            for block_cycles in [1000, -1] {
                let settings =
                    LittlefsConfig { cache_size_bytes, metadata_max_bytes, block_cycles, ..LittlefsConfig::BENCHMARK };
                let result = match fsio::run_target::<LittlefsTarget>(&config, &settings, &mut |_| {}) {
                    Ok(result) => result,
                    Err(error) => {
                        println!("{cache_size_bytes} {metadata_max_bytes} {block_cycles} | failed: {error}");
                        continue;
                    }
                };
                let seconds: Vec<f64> =
                    FsioOperation::ALL.iter().map(|&op| result.total(op).sim_ns as f64 / 1e9).collect();
                let mut all = fsoc_bench::Measurement::default();
                FsioOperation::ALL.iter().for_each(|&op| all.add(&result.total(op)));
                println!(
                    "{cache_size_bytes} {metadata_max_bytes} {block_cycles} | {:.1} {:.1} {:.1} {:.1} | {} {} {}",
                    seconds[0],
                    seconds[1],
                    seconds[2],
                    all.sim_ns as f64 / 1e9,
                    all.reads,
                    all.programs,
                    all.erases
                );
            }
        }
    }
}
