//! Runs the benchmarks from the command line until the `fsoc bench` subcommands exist:
//! `cargo run --release -p fsoc-bench --example bench -- fsio [SEED]` or
//! `... -- mount 10,1000,100000 [SEED]`. Prints the JSON report on stdout.

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let seed_at = |index: usize| arguments.get(index).map_or(1, |text| text.parse::<u64>().expect("seed"));
    let mut progress = |line: &str| eprintln!("{line}");
    let report = match arguments.first().map(String::as_str) {
        Some("fsio") => fsoc_bench::run_fsio_with_progress(seed_at(1), &mut progress),
        Some("mount") => {
            let files: Vec<u64> = arguments
                .get(1)
                .map_or("10,1000,100000", String::as_str)
                .split(',')
                .map(|count| count.parse().expect("file count"))
                .collect();
            fsoc_bench::run_mount_with_progress(&files, seed_at(2), &mut progress)
        }
        _ => {
            eprintln!("usage: bench fsio [SEED] | bench mount COUNTS [SEED]");
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
