//! Runs the benchmarks from the command line until the `fsoc bench` subcommands exist:
//! `cargo run --release -p fsoc-bench --example bench -- fsio [SEED [FILE_SIZE_BYTES]]` or
//! `... -- mount 10,1000,100000 [SEED [LITTLEFS_FILES_MAX]]`. Prints the JSON report on stdout.

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let seed_at = |index: usize| arguments.get(index).map_or(1, |text| text.parse::<u64>().expect("seed"));
    let mut progress = |line: &str| eprintln!("{line}");
    let report = match arguments.first().map(String::as_str) {
        Some("fsio") => {
            let mut config = fsoc_bench::fsio::FsioConfig::full(seed_at(1));
            if let Some(size) = arguments.get(2) {
                config.file_size_bytes = size.parse().expect("file size in bytes");
            }
            fsoc_bench::fsio::run(&config, &mut progress)
        }
        Some("mount") => {
            let files: Vec<u64> = arguments
                .get(1)
                .map_or("10,1000,100000", String::as_str)
                .split(',')
                .map(|count| count.parse().expect("file count"))
                .collect();
            let mut config = fsoc_bench::mount::MountConfig::new(&files, seed_at(2));
            if let Some(limit) = arguments.get(3) {
                config.littlefs_files_max = limit.parse().expect("littlefs file count limit");
            }
            fsoc_bench::mount::run(&config, &mut progress)
        }
        _ => {
            eprintln!("usage: bench fsio [SEED [FILE_SIZE_BYTES]] | bench mount COUNTS [SEED [LITTLEFS_FILES_MAX]]");
            std::process::exit(2);
        }
    };
    match report {
        Ok(report) => println!("{}", serde_json::to_string_pretty(&report).expect("JSON")),
        Err(error) => {
            eprintln!("benchmark failed: {error}");
            std::process::exit(1);
        }
    }
}
