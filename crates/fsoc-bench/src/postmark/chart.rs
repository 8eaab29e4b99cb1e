//! The chart of a PostMark report, as seed 004's Figures 4, 7 and 8: simulated time, flash
//! erases and energy against NVRAM size, drawn from the report's JSON alone.

use std::fmt::Write as _;

use serde_json::Value;

use crate::svg_chart::{self, LogScale};

/// One panel's metric of a run.
struct Metric {
    title: &'static str,
    value: fn(&Value) -> f64,
}

const METRICS: [Metric; 3] = [
    Metric { title: "elapsed simulated time (s)", value: |run| run["elapsed_s"].as_f64().unwrap_or(0.0) },
    Metric { title: "flash erases", value: |run| run["flash_erases"].as_f64().unwrap_or(0.0) },
    Metric { title: "energy, flash + NVRAM (J)", value: |run| run["total_energy_j"].as_f64().unwrap_or(0.0) },
];

const SYNC_COLOR: &str = "#1f77b4";
const ASYNC_COLOR: &str = "#2ca02c";
const LITTLEFS_COLOR: &str = "#d62728";

/// Three panels (time, erases, energy) against NVRAM size, as seed 004's Figures 4, 7 and 8:
/// the sizes evenly spaced (they double, as the seed's axis), values on a log scale; fsoc sync
/// and async as lines over the sizes, the runs without NVRAM and littlefs as dashed lines.
pub fn chart_svg(report: &Value) -> String {
    const PANEL_WIDTH: f64 = 300.0;
    const PANEL_HEIGHT: f64 = 260.0;
    const LEFT: f64 = 70.0;
    const GAP: f64 = 80.0;
    const TOP: f64 = 70.0;
    let runs: &[Value] = report["runs"].as_array().map(Vec::as_slice).unwrap_or_default();
    let nvram = |run: &Value| run["nvram_bytes"].as_u64().unwrap_or(0);
    let of = |target: &str, variant: &str| {
        runs.iter().filter(move |run| run["target"] == target && run["variant"] == variant).collect::<Vec<_>>()
    };
    let mut sizes: Vec<u64> = runs.iter().map(nvram).filter(|&bytes| bytes > 0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    // Size i of n sits at the middle of the i-th of n equal slots.
    let slot = PANEL_WIDTH / sizes.len().max(1) as f64;
    let x_of =
        |left: f64, bytes: u64| left + slot * (sizes.iter().position(|&size| size == bytes).unwrap_or(0) as f64 + 0.5);
    let width = LEFT + 3.0 * PANEL_WIDTH + 2.0 * GAP + 30.0;
    let height = TOP + PANEL_HEIGHT + 125.0;
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, height);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="24" font-size="15">PostMark (seed 004) on fsoc against NVRAM size: {} files, {} transactions, simulated MLC chip</text>"#,
        report["config"]["workload"]["files"], report["workload"]["transactions"],
    );
    for (index, metric) in METRICS.iter().enumerate() {
        let left = LEFT + index as f64 * (PANEL_WIDTH + GAP);
        let values: Vec<f64> = runs.iter().map(metric.value).filter(|value| *value > 0.0).collect();
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(0.0, f64::max);
        let (low, high) = if values.is_empty() { (1.0, 10.0) } else { (low, high * 1.3) };
        let value_axis = LogScale::new(low, high, TOP, PANEL_HEIGHT);
        svg_chart::label(&mut svg, left, TOP - 10.0, "start", metric.title);
        svg_chart::frame(&mut svg, left, TOP, PANEL_WIDTH, PANEL_HEIGHT);
        value_axis.grid(&mut svg, left, PANEL_WIDTH);
        for &bytes in &sizes {
            let label = super::size_label(bytes).replace(" KiB", "K").replace(" MiB", "M");
            svg_chart::label(&mut svg, x_of(left, bytes), TOP + PANEL_HEIGHT + 14.0, "middle", &label);
        }
        svg_chart::label(&mut svg, left + PANEL_WIDTH / 2.0, TOP + PANEL_HEIGHT + 32.0, "middle", "NVRAM (bytes)");
        // Runs without NVRAM and the peer: horizontal dashed lines across the panel.
        let flat = [
            (of("fsoc", "sync").into_iter().find(|run| nvram(run) == 0), SYNC_COLOR, "sync, no NVRAM", -4.0),
            (of("fsoc", "async").into_iter().find(|run| nvram(run) == 0), ASYNC_COLOR, "async, no NVRAM", 13.0),
            (of("littlefs", "sync").into_iter().next(), LITTLEFS_COLOR, "littlefs (sync)", -4.0),
        ];
        // Labels above the line, the async one below (it is the lowest).
        for (run, color, name, label_dy) in flat {
            let Some(run) = run else { continue };
            let y = value_axis.y((metric.value)(run).max(low));
            svg_chart::dashed_series(&mut svg, &[(left, y), (left + PANEL_WIDTH, y)], color);
            svg_chart::label(&mut svg, left + PANEL_WIDTH - 4.0, y + label_dy, "end", name);
        }
        for (variant, color) in [("sync", SYNC_COLOR), ("async", ASYNC_COLOR)] {
            let points: Vec<(f64, f64)> = of("fsoc", variant)
                .into_iter()
                .filter(|run| nvram(run) > 0)
                .map(|run| (x_of(left, nvram(run)), value_axis.y((metric.value)(run).max(low))))
                .collect();
            svg_chart::series(&mut svg, &points, color, 3.0);
        }
    }
    for (index, (color, name)) in [
        (SYNC_COLOR, "fsoc sync: fsync or transact after every create, append and delete"),
        (ASYNC_COLOR, "fsoc async: one transaction point at the end"),
        (LITTLEFS_COLOR, "littlefs: commits at every close and remove (sync); it has no NVRAM"),
        ("#555", "solid: fsoc with NVRAM (FeRAM); dashed: fsoc without NVRAM, and littlefs"),
    ]
    .into_iter()
    .enumerate()
    {
        let y = TOP + PANEL_HEIGHT + 56.0 + 16.0 * index as f64;
        let _ = writeln!(svg, r#"<text x="{LEFT}" y="{y:.1}" fill="{color}" font-size="12">{name}</text>"#);
    }
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every panel gets the two NVRAM series and the three dashed reference lines.
    #[test]
    fn chart_draws_series_and_reference_lines() {
        let run = |target: &str, variant: &str, nvram: u64, seconds: f64| {
            serde_json::json!({"target": target, "variant": variant, "nvram_bytes": nvram, "elapsed_s": seconds,
                "flash_erases": seconds * 10.0, "total_energy_j": seconds / 10.0})
        };
        let report = serde_json::json!({
            "runs": [run("fsoc", "sync", 0, 100.0), run("fsoc", "async", 0, 50.0),
                     run("fsoc", "sync", 1024, 90.0), run("fsoc", "async", 1024, 50.0),
                     run("fsoc", "sync", 131072, 60.0), run("fsoc", "async", 131072, 50.0),
                     run("littlefs", "sync", 0, 300.0)],
            "config": {"workload": {"files": 1000}}, "workload": {"transactions": 10000},
        });
        let svg = chart_svg(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("stroke-dasharray").count(), 9, "3 reference lines × 3 panels");
        assert_eq!(svg.matches("<circle").count(), 12, "2 series × 2 sizes × 3 panels");
        assert!(svg.contains("littlefs (sync)") && svg.contains(">128K<") && svg.contains(">1K<"), "{svg}");
    }
}
