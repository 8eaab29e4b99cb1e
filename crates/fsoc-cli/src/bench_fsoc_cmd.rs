//! `fsoc bench fsoc`: seed 000's section 5 (fsoc-bench's `on_chip`): Fig. 15, Table 2, the
//! performance model and queue depth, printed as tables, written as JSON, and drawn as two
//! SVG charts beside the JSON (`on_chip::charts`).

use std::path::Path;

use fsoc_bench::on_chip::{self, FsocBenchConfig, SettingOptions, OPERATIONS};
use serde_json::Value;

use crate::bench_cmd::{spinner, write_json};

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

pub fn run(json: Option<&Path>, quick: bool, seed: u64, options: &SettingOptions) -> Result<(), String> {
    let bar = spinner();
    let measured = on_chip::measure(quick, seed, options, &mut |line| bar.set_message(line.to_string()));
    bar.finish_and_clear();
    let (config, report) = measured.map_err(|error| format!("fsoc bench fsoc: {error}"))?;
    print_fig15(&report["fig15"], &config);
    print_table2(&report["table2"]);
    print_model(&report["model"]);
    print_queue_depth(&report["queue_depth"]);
    if let Some(json) = json {
        write_json(json, &report)?;
        println!("wrote {}", json.display());
        for (path, svg) in on_chip::charts::charts(json, &report) {
            std::fs::write(&path, svg).map_err(|error| format!("{}: {error}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn print_fig15(report: &Value, config: &FsocBenchConfig) {
    for regime in fsoc_bench::on_chip::Regime::ALL {
        println!(
            "\nFig. 15, {}: bytes on the bus per operation ({} objects each; {} B read and written per file)",
            regime.name(),
            config.traffic.operations,
            config.traffic.payload_bytes
        );
        println!(
            "| operation | FSOC bytes/op | conventional bytes/op | FSOC / conventional | messages/op FSOC, conv. |"
        );
        println!("|---|---|---|---|---|");
        for operation in OPERATIONS {
            let row = &report["regimes"][regime.name()][operation];
            println!(
                "| {operation} | {:.0} | {:.0} | {:.1}% | {:.1}, {:.1} |",
                number(&row["fsoc_bytes_per_op"]),
                number(&row["conventional_bytes_per_op"]),
                100.0 * number(&row["bytes_ratio"]),
                number(&row["fsoc_messages_per_op"]),
                number(&row["conventional_messages_per_op"])
            );
        }
    }
}

fn print_table2(report: &Value) {
    println!("\nTable 2: elapsed time (ms), serial (Eqs. (1)-(2)); conv./FSOC above 1: FSOC faster");
    println!("| workload | setting | FSOC ms | conventional ms | conv. / FSOC |");
    println!("|---|---|---|---|---|");
    for workload in fsoc_bench::on_chip::table2::WORKLOADS {
        if let Some(settings) = report["workloads"][workload]["elapsed"].as_object() {
            for (setting, row) in settings {
                println!(
                    "| {workload} | {setting} | {:.1} | {:.1} | {:.2} |",
                    number(&row["fsoc"]["total_ms"]),
                    number(&row["conventional"]["total_ms"]),
                    number(&row["conventional_over_fsoc"])
                );
            }
        }
    }
}

fn print_model(report: &Value) {
    println!(
        "\nPerformance model, Eqs. (3)-(4), against the read-then-compute workload (largest |error| {:.2}%, target 5%)",
        100.0 * number(&report["error_abs_max"])
    );
    let sweeps = report["compute_sweeps"].as_array().into_iter().flatten();
    let clocks = report["host_clock_sweeps"].as_array().into_iter().flatten();
    for sweep in sweeps.chain(clocks) {
        println!(
            "{} at host {:.0} MHz, device {:.0} MHz: crossover at {} ms of compute per read; largest error {:.2}%",
            sweep["setting"].as_str().unwrap_or("?"),
            number(&sweep["host_clock_mhz"]),
            number(&sweep["device_clock_mhz"]),
            sweep["crossover_compute_ms"].as_f64().map_or("none".into(), |ms| format!("{ms:.3}")),
            100.0 * number(&sweep["error_abs_max"])
        );
    }
}

fn print_queue_depth(report: &Value) {
    println!(
        "\nQueue depth: 4 KiB random reads over 9P, {} chips of {} ({} B pages), device time; raw rate {:.0} reads/s",
        report["config"]["chips"],
        report["config"]["profile"].as_str().unwrap_or("?"),
        report["config"]["page_bytes"],
        number(&report["raw"]["reads_per_s"])
    );
    println!("| depth | reads/s | MB/s | x depth 1 | of raw | bus-limited reads/s |");
    println!("|---|---|---|---|---|---|");
    for row in report["depths"].as_array().into_iter().flatten() {
        println!(
            "| {} | {:.0} | {:.1} | {:.2} | {:.1}% | {:.0} |",
            row["depth"],
            number(&row["reads_per_s"]),
            number(&row["mb_per_s"]),
            number(&row["speedup_over_depth_1"]),
            100.0 * number(&row["fraction_of_raw"]),
            number(&row["bus_limited_reads_per_s"])
        );
    }
}
