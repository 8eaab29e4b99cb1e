//! The one SVG writer of the benchmark charts (`bench scaling`, `bench fuse`, `bench mount`,
//! `bench fsoc`): the document, panel frames, log-scale axes with decade grid lines, linear
//! axes with round ticks, line series (solid or dashed), bars and labels.
//!
//! Invariant: it emits the same bytes for the same calls (the scaling chart was written by this
//! code before it moved here, and its output did not change).

use std::fmt::Write as _;

/// Starts a document of `width` × `height` with a white background (sans-serif, 11 px text).
pub fn begin(svg: &mut String, width: f64, height: f64) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
}

/// Ends the document `begin` started.
pub fn end(svg: &mut String) {
    svg.push_str("</svg>\n");
}

/// A grey frame around a panel.
pub fn frame(svg: &mut String, left: f64, top: f64, width: f64, height: f64) {
    let _ =
        writeln!(svg, r##"<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#888"/>"##);
}

/// Escapes text for an SVG text node or attribute.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A log10 axis over a panel, vertical (`y`, `grid`) or horizontal (`x`, `grid_vertical`):
/// whole decades from the one at or below the smallest value to the one at or above the
/// largest.
#[derive(Clone, Copy, Debug)]
pub struct LogScale {
    log_low: f64,
    log_high: f64,
    start: f64,
    length: f64,
}

impl LogScale {
    /// The axis of a panel starting at `start` (its top, or its left edge), `length` long,
    /// showing `value_min` to `value_max` (both positive; pass the maximum with any headroom
    /// wanted).
    pub fn new(value_min: f64, value_max: f64, start: f64, length: f64) -> LogScale {
        let log_low = value_min.log10().floor();
        let log_high = value_max.log10().ceil();
        // A single decade would divide by zero below: widen it.
        let log_high = if log_high > log_low { log_high } else { log_low + 1.0 };
        LogScale { log_low, log_high, start, length }
    }

    /// Where `value` lies between the lowest decade (0) and the highest (1); values at or
    /// below zero are placed at 1e-9.
    fn fraction(&self, value: f64) -> f64 {
        (value.max(1e-9).log10() - self.log_low) / (self.log_high - self.log_low)
    }

    /// The y coordinate of `value` on a vertical axis (larger values higher up).
    pub fn y(&self, value: f64) -> f64 {
        self.start + self.length - self.fraction(value) * self.length
    }

    /// The x coordinate of `value` on a horizontal axis (larger values to the right).
    pub fn x(&self, value: f64) -> f64 {
        self.start + self.fraction(value) * self.length
    }

    /// The decades the axis spans, lowest first.
    fn decades(&self) -> impl Iterator<Item = f64> {
        let (low, high) = (self.log_low as i32, self.log_high as i32);
        (low..=high).map(|decade| 10f64.powi(decade))
    }

    /// A light grid line across the panel at every decade of a vertical axis, labelled left
    /// of `left`.
    pub fn grid(&self, svg: &mut String, left: f64, width: f64) {
        grid_across(svg, self.decades().map(|value| (self.y(value), format_value(value))), left, width);
    }

    /// A light grid line down the panel at every decade of a horizontal axis, labelled below
    /// the panel (`top` + `height`).
    pub fn grid_vertical(&self, svg: &mut String, top: f64, height: f64) {
        grid_down(svg, self.decades().map(|value| (self.x(value), format_value(value))), top, height);
    }
}

/// Light grid lines across a panel at the given heights, each labelled left of `left`.
fn grid_across(svg: &mut String, lines: impl Iterator<Item = (f64, String)>, left: f64, width: f64) {
    for (y, label) in lines {
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            left + width,
            left - 4.0,
            y + 4.0,
        );
    }
}

/// Light grid lines down a panel at the given x positions, each labelled below it.
fn grid_down(svg: &mut String, lines: impl Iterator<Item = (f64, String)>, top: f64, height: f64) {
    for (x, label) in lines {
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{label}</text>"##,
            top + height,
            top + height + 14.0,
        );
    }
}

/// A linear axis over a panel, vertical (`y`, `grid`) or horizontal (`x`, `grid_vertical`),
/// from zero (or the smallest value, if negative) to a round value at or above the largest.
#[derive(Clone, Copy, Debug)]
pub struct LinearScale {
    low: f64,
    high: f64,
    step: f64,
    start: f64,
    length: f64,
}

impl LinearScale {
    pub fn new(value_min: f64, value_max: f64, start: f64, length: f64) -> LinearScale {
        let low = value_min.min(0.0);
        let span = (value_max - low).max(1e-12);
        // A step of 1, 2 or 5 times a power of ten giving about five ticks.
        let rough = span / 5.0;
        let power = 10f64.powf(rough.log10().floor());
        let step =
            [1.0, 2.0, 5.0, 10.0].into_iter().map(|factor| factor * power).find(|step| *step >= rough).unwrap_or(rough);
        let high = low + (span / step).ceil() * step;
        LinearScale { low, high, step, start, length }
    }

    fn fraction(&self, value: f64) -> f64 {
        (value - self.low) / (self.high - self.low)
    }

    pub fn y(&self, value: f64) -> f64 {
        self.start + self.length - self.fraction(value) * self.length
    }

    pub fn x(&self, value: f64) -> f64 {
        self.start + self.fraction(value) * self.length
    }

    fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        let count = ((self.high - self.low) / self.step).round() as i64;
        (0..=count).map(move |index| self.low + index as f64 * self.step)
    }

    /// Grid lines across the panel at every tick of a vertical axis, labelled left of `left`.
    pub fn grid(&self, svg: &mut String, left: f64, width: f64) {
        grid_across(svg, self.ticks().map(|value| (self.y(value), format_tick(value))), left, width);
    }

    /// Grid lines down the panel at every tick of a horizontal axis, labelled below it.
    pub fn grid_vertical(&self, svg: &mut String, top: f64, height: f64) {
        grid_down(svg, self.ticks().map(|value| (self.x(value), format_tick(value))), top, height);
    }
}

/// A tick label: whole numbers without decimals, others with up to three significant ones.
fn format_tick(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{}", (value * 1000.0).round() / 1000.0)
    }
}

/// A dashed line through `points` (a model's prediction beside a measured series).
pub fn dashed_series(svg: &mut String, points: &[(f64, f64)], color: &str) {
    let coordinates: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.5" stroke-dasharray="5,3"/>"#,
        coordinates.join(" ")
    );
}

/// A filled bar from `(left, top)` of `width` × `height`.
pub fn bar(svg: &mut String, left: f64, top: f64, width: f64, height: f64, color: &str) {
    let _ =
        writeln!(svg, r#"<rect x="{left:.1}" y="{top:.1}" width="{width:.1}" height="{height:.1}" fill="{color}"/>"#);
}

/// Text at `(x, y)`, anchored `anchor` (start, middle, end), escaped.
pub fn label(svg: &mut String, x: f64, y: f64, anchor: &str, text: &str) {
    let _ = writeln!(svg, r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#, escape(text));
}

/// A line through `points` (already in chart coordinates) with a dot of `dot_radius` at each.
pub fn series(svg: &mut String, points: &[(f64, f64)], color: &str, dot_radius: f64) {
    let coordinates: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
        coordinates.join(" ")
    );
    for (x, y) in points {
        let _ = writeln!(svg, r#"<circle cx="{x:.1}" cy="{y:.1}" r="{dot_radius}" fill="{color}"/>"#);
    }
}

/// A decade label: whole numbers from 1 up, the shortest decimal below.
pub fn format_value(value: f64) -> String {
    if value >= 1.0 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The axis maps its decades onto the panel's edges and labels each one.
    #[test]
    fn log_scale_spans_whole_decades() {
        let scale = LogScale::new(0.3, 40.0, 10.0, 100.0);
        assert!((scale.y(0.1) - 110.0).abs() < 1e-9, "{}", scale.y(0.1));
        assert!((scale.y(100.0) - 10.0).abs() < 1e-9, "{}", scale.y(100.0));
        let mut svg = String::new();
        scale.grid(&mut svg, 50.0, 200.0);
        assert_eq!(svg.lines().count(), 4, "0.1, 1, 10, 100:\n{svg}");
        assert!(svg.contains(">0.1<") && svg.contains(">100<"), "{svg}");
    }

    // A horizontal axis runs left to right, with a labelled line per decade.
    #[test]
    fn horizontal_scale_and_series() {
        let scale = LogScale::new(10.0, 1000.0, 50.0, 200.0);
        assert!((scale.x(10.0) - 50.0).abs() < 1e-9 && (scale.x(1000.0) - 250.0).abs() < 1e-9);
        let mut svg = String::new();
        scale.grid_vertical(&mut svg, 0.0, 100.0);
        assert_eq!(svg.lines().count(), 3, "10, 100, 1000:\n{svg}");
        let mut line = String::new();
        series(&mut line, &[(1.0, 2.0), (3.04, 4.06)], "red", 2.5);
        assert_eq!(
            line,
            "<polyline points=\"1.0,2.0 3.0,4.1\" fill=\"none\" stroke=\"red\" stroke-width=\"2\"/>\n\
             <circle cx=\"1.0\" cy=\"2.0\" r=\"2.5\" fill=\"red\"/>\n<circle cx=\"3.0\" cy=\"4.1\" r=\"2.5\" fill=\"red\"/>\n"
        );
    }

    // A linear axis starts at zero, ends on a round tick at or above the largest value, and
    // labels each tick.
    #[test]
    fn linear_scale_has_round_ticks() {
        let scale = LinearScale::new(3.0, 47.0, 0.0, 100.0);
        assert!((scale.y(0.0) - 100.0).abs() < 1e-9 && (scale.y(50.0) - 0.0).abs() < 1e-9);
        let mut svg = String::new();
        scale.grid(&mut svg, 50.0, 200.0);
        assert_eq!(svg.lines().count(), 6, "0, 10, ..., 50:\n{svg}");
        assert!(svg.contains(">0<") && svg.contains(">50<"), "{svg}");
        let fine = LinearScale::new(0.0, 0.37, 0.0, 100.0);
        let mut svg = String::new();
        fine.grid_vertical(&mut svg, 0.0, 10.0);
        assert!(svg.contains(">0.1<") && svg.contains(">0.4<"), "{svg}");
    }

    // A range inside one decade still gets a usable axis (no division by zero).
    #[test]
    fn log_scale_of_one_decade_is_finite() {
        let scale = LogScale::new(1.0, 1.0, 0.0, 100.0);
        assert!(scale.y(1.0).is_finite());
        assert!(scale.y(5.0) < scale.y(1.0));
    }
}
