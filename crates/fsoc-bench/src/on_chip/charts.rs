//! The two charts of `fsoc bench fsoc`'s report, written beside its JSON: the performance
//! model (Figs. 11 and 12: measured solid, Eqs. (3)-(4) dashed) as `NAME-model.svg`, and Table
//! 2 with the queue-depth sweep as `NAME-table2-queue.svg`. Drawn from the JSON alone, so the
//! committed results draw as a fresh run does.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::svg_chart::{self, LinearScale, LogScale};

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

fn sibling(json: &Path, suffix: &str) -> PathBuf {
    let stem = json.file_stem().and_then(|stem| stem.to_str()).unwrap_or("fsoc");
    json.with_file_name(format!("{stem}-{suffix}.svg"))
}

/// Both charts, with the paths they go to.
pub fn charts(json: &Path, report: &Value) -> Vec<(PathBuf, String)> {
    vec![
        (sibling(json, "model"), model_chart(&report["model"])),
        (sibling(json, "table2-queue"), table2_queue_chart(&report["table2"], &report["queue_depth"])),
    ]
}

/// A series of a panel: its points, colour, and whether it is dashed (a prediction).
type Line<'a> = (Vec<(f64, f64)>, &'a str, bool);

const PANEL_WIDTH: f64 = 300.0;
const PANEL_HEIGHT: f64 = 220.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 40.0;
const GAP: f64 = 80.0;
const FSOC_COLOR: &str = "#1f77b4";
const CONVENTIONAL_COLOR: &str = "#d62728";

fn axis_titles(svg: &mut String, left: f64, x_title: &str, y_title: &str) {
    svg_chart::label(svg, left + PANEL_WIDTH / 2.0, TOP + PANEL_HEIGHT + 32.0, "middle", x_title);
    let y = TOP + PANEL_HEIGHT / 2.0;
    let _ = std::fmt::Write::write_fmt(
        svg,
        format_args!(
            "<text x=\"{:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1} {y:.1})\">{}</text>\n",
            left - 45.0,
            left - 45.0,
            svg_chart::escape(y_title)
        ),
    );
}

/// Figs. 11 and 12: run time against compute per read, measured (solid) and Eqs. (3)-(4)
/// (dashed); one panel per compute sweep, then one of the host-clock sweep (measured only).
pub fn model_chart(report: &Value) -> String {
    let sweeps: Vec<&Value> = report["compute_sweeps"].as_array().into_iter().flatten().collect();
    let clocks: Vec<&Value> = report["host_clock_sweeps"].as_array().into_iter().flatten().collect();
    let panels = sweeps.len() + 1;
    let width = LEFT + panels as f64 * (PANEL_WIDTH + GAP);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, TOP + PANEL_HEIGHT + 70.0);
    let points = |sweep: &Value, mode: &str, key: &str| -> Vec<(f64, f64)> {
        sweep["points"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|point| (number(&point["compute_ms"]), number(&point[mode][key])))
            .collect()
    };
    let panel = |svg: &mut String, index: usize, title: &str, lines: &[Line<'_>]| {
        let left = LEFT + index as f64 * (PANEL_WIDTH + GAP);
        let all = lines.iter().flat_map(|(line, _, _)| line.iter());
        let (x_max, y_max) = all.fold((0.0f64, 0.0f64), |(x, y), (px, py)| (x.max(*px), y.max(*py)));
        let x_axis = LinearScale::new(0.0, x_max, left, PANEL_WIDTH);
        let y_axis = LinearScale::new(0.0, y_max * 1.05, TOP, PANEL_HEIGHT);
        svg_chart::frame(svg, left, TOP, PANEL_WIDTH, PANEL_HEIGHT);
        y_axis.grid(svg, left, PANEL_WIDTH);
        x_axis.grid_vertical(svg, TOP, PANEL_HEIGHT);
        svg_chart::label(svg, left + PANEL_WIDTH / 2.0, TOP - 10.0, "middle", title);
        axis_titles(svg, left, "compute per 4 KiB read (ms)", "run time, 1 MiB (ms)");
        for (line, color, dashed) in lines {
            let mapped: Vec<(f64, f64)> = line.iter().map(|(x, y)| (x_axis.x(*x), y_axis.y(*y))).collect();
            if *dashed {
                svg_chart::dashed_series(svg, &mapped, color);
            } else {
                svg_chart::series(svg, &mapped, color, 2.0);
            }
        }
    };
    for (index, sweep) in sweeps.iter().enumerate() {
        let title = format!(
            "{} (host {:.0} MHz): measured, Eqs. (3)-(4) dashed",
            sweep["setting"].as_str().unwrap_or("?"),
            number(&sweep["host_clock_mhz"])
        );
        panel(
            &mut svg,
            index,
            &title,
            &[
                (points(sweep, "conventional", "measured_ms"), CONVENTIONAL_COLOR, false),
                (points(sweep, "conventional", "predicted_ms"), "#ff9896", true),
                (points(sweep, "fsoc", "measured_ms"), FSOC_COLOR, false),
                (points(sweep, "fsoc", "predicted_ms"), "#aec7e8", true),
            ],
        );
    }
    let clock_lines: Vec<Line<'_>> = clocks
        .iter()
        .zip(["#2ca02c", "#9467bd", "#8c564b"])
        .flat_map(|(sweep, color)| {
            [
                (points(sweep, "conventional", "measured_ms"), color, false),
                (points(sweep, "fsoc", "measured_ms"), color, true),
            ]
        })
        .collect();
    panel(&mut svg, sweeps.len(), "Fig. 12: host 45/56/67 MHz (green/purple/brown); FSOC dashed", &clock_lines);
    let legend_y = TOP + PANEL_HEIGHT + 56.0;
    svg_chart::label(
        &mut svg,
        LEFT,
        legend_y,
        "start",
        "red: conventional (raw pages, fsoc on the host); blue: FSOC (fsoc on the chip, 9P)",
    );
    svg_chart::end(&mut svg);
    svg
}

/// Table 2 (conventional ÷ FSOC elapsed time per workload and setting, as bars) and queue
/// depth (reads per second against depth, with the raw rate).
pub fn table2_queue_chart(table2: &Value, queue: &Value) -> String {
    let width = LEFT + 2.0 * (PANEL_WIDTH + GAP);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, TOP + PANEL_HEIGHT + 70.0);
    // Table 2.
    let workloads = super::table2::WORKLOADS;
    let mut bars = Vec::new();
    for workload in workloads {
        if let Some(settings) = table2["workloads"][workload]["elapsed"].as_object() {
            for (setting, row) in settings {
                bars.push((workload, setting.clone(), number(&row["conventional_over_fsoc"])));
            }
        }
    }
    let ratio_max = bars.iter().map(|(_, _, ratio)| *ratio).fold(1.0, f64::max);
    let y_axis = LinearScale::new(0.0, ratio_max * 1.1, TOP, PANEL_HEIGHT);
    svg_chart::frame(&mut svg, LEFT, TOP, PANEL_WIDTH, PANEL_HEIGHT);
    y_axis.grid(&mut svg, LEFT, PANEL_WIDTH);
    svg_chart::label(
        &mut svg,
        LEFT + PANEL_WIDTH / 2.0,
        TOP - 10.0,
        "middle",
        "Table 2: conventional / FSOC elapsed time",
    );
    axis_titles(&mut svg, LEFT, "", "conventional / FSOC (above 1: FSOC faster)");
    let slot = PANEL_WIDTH / bars.len().max(1) as f64;
    let colors = ["#ff7f0e", "#17becf", "#7f7f7f"];
    let settings: Vec<String> =
        bars.iter().map(|(_, setting, _)| setting.clone()).fold(Vec::new(), |mut all, setting| {
            if !all.contains(&setting) {
                all.push(setting);
            }
            all
        });
    for (index, (workload, setting, ratio)) in bars.iter().enumerate() {
        let color = colors[settings.iter().position(|name| name == setting).unwrap_or(0) % colors.len()];
        let x = LEFT + index as f64 * slot + slot * 0.15;
        svg_chart::bar(&mut svg, x, y_axis.y(*ratio), slot * 0.7, y_axis.y(0.0) - y_axis.y(*ratio), color);
        svg_chart::label(&mut svg, x + slot * 0.35, y_axis.y(*ratio) - 3.0, "middle", &format!("{ratio:.2}"));
        if index % settings.len().max(1) == 0 {
            svg_chart::label(
                &mut svg,
                x + slot * settings.len() as f64 / 2.0 - slot * 0.15,
                TOP + PANEL_HEIGHT + 14.0,
                "middle",
                workload,
            );
        }
    }
    let one = y_axis.y(1.0);
    svg.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{one:.1}\" x2=\"{}\" y2=\"{one:.1}\" stroke=\"#000\" stroke-dasharray=\"3,3\"/>\n",
        LEFT + PANEL_WIDTH
    ));
    for (index, setting) in settings.iter().enumerate() {
        svg_chart::bar(
            &mut svg,
            LEFT + index as f64 * 150.0,
            TOP + PANEL_HEIGHT + 44.0,
            10.0,
            10.0,
            colors[index % colors.len()],
        );
        svg_chart::label(&mut svg, LEFT + index as f64 * 150.0 + 14.0, TOP + PANEL_HEIGHT + 53.0, "start", setting);
    }
    // Queue depth.
    let left = LEFT + PANEL_WIDTH + GAP;
    let rows: Vec<(f64, f64)> = queue["depths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| (number(&row["depth"]), number(&row["reads_per_s"])))
        .collect();
    let raw = number(&queue["raw"]["reads_per_s"]);
    let y_max = rows.iter().map(|(_, rate)| *rate).fold(raw, f64::max) * 1.1;
    let x_axis = LogScale::new(1.0, 32.0 * 1.5, left, PANEL_WIDTH);
    let y_axis = LinearScale::new(0.0, y_max, TOP, PANEL_HEIGHT);
    svg_chart::frame(&mut svg, left, TOP, PANEL_WIDTH, PANEL_HEIGHT);
    y_axis.grid(&mut svg, left, PANEL_WIDTH);
    x_axis.grid_vertical(&mut svg, TOP, PANEL_HEIGHT);
    svg_chart::label(
        &mut svg,
        left + PANEL_WIDTH / 2.0,
        TOP - 10.0,
        "middle",
        "4 KiB random reads over 9P, 4 chips (device time)",
    );
    axis_titles(&mut svg, left, "requests in flight", "reads per second");
    let mapped: Vec<(f64, f64)> = rows.iter().map(|(depth, rate)| (x_axis.x(*depth), y_axis.y(*rate))).collect();
    svg_chart::series(&mut svg, &mapped, FSOC_COLOR, 3.0);
    for ((depth, rate), (x, y)) in rows.iter().zip(&mapped) {
        svg_chart::label(&mut svg, *x, y - 6.0, "middle", &format!("{rate:.0} (depth {depth})"));
    }
    let raw_y = y_axis.y(raw);
    svg_chart::dashed_series(&mut svg, &[(left, raw_y), (left + PANEL_WIDTH, raw_y)], "#000");
    svg_chart::label(
        &mut svg,
        left + PANEL_WIDTH - 4.0,
        raw_y + 14.0,
        "end",
        &format!("raw chips, depth 32: {raw:.0}"),
    );
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // The committed results draw: every compute sweep and the clock sweep as lines (measured
    // solid, predicted dashed), six Table 2 bars, and the queue-depth line with the raw rate.
    #[test]
    fn charts_of_the_committed_results() {
        let report: Value =
            serde_json::from_str(include_str!("../../../fsoc-cli/results/fsoc.json")).expect("results/fsoc.json");
        let charts = charts(Path::new("out/fsoc.json"), &report);
        assert_eq!(charts[0].0, Path::new("out/fsoc-model.svg"));
        let (model, table2_queue) = (&charts[0].1, &charts[1].1);
        // Two compute sweeps of 2 measured lines each, three clocks of 1 solid line each.
        assert_eq!(model.matches("<polyline").count(), 2 * 4 + 3 * 2, "{model}");
        assert_eq!(model.matches("stroke-dasharray").count(), 2 * 2 + 3, "{model}");
        assert_eq!(table2_queue.matches("<rect x=").count(), 6 + 2 + 2, "bars, legend, frames: {table2_queue}");
        assert!(table2_queue.contains("depth 32") && table2_queue.contains("raw chips"), "{table2_queue}");
    }
}
