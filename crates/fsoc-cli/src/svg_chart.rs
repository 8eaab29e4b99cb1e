//! The one hand-written SVG writer of the benchmark charts (`bench scaling`, `bench fuse`): the
//! document, panel frames and log-scale value axes with decade grid lines.
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

/// A vertical log10 value axis over a panel: whole decades from the one at or below the
/// smallest value to the one at or above the largest.
#[derive(Clone, Copy, Debug)]
pub struct LogScale {
    log_low: f64,
    log_high: f64,
    top: f64,
    height: f64,
}

impl LogScale {
    /// The axis of a panel at `top`, `height` tall, showing `value_min` to `value_max` (both
    /// positive; pass the maximum with any headroom wanted).
    pub fn new(value_min: f64, value_max: f64, top: f64, height: f64) -> LogScale {
        let log_low = value_min.log10().floor();
        let log_high = value_max.log10().ceil();
        // A single decade would divide by zero below: widen it.
        let log_high = if log_high > log_low { log_high } else { log_low + 1.0 };
        LogScale { log_low, log_high, top, height }
    }

    /// The y coordinate of `value` (values at or below zero are drawn at 1e-9).
    pub fn y(&self, value: f64) -> f64 {
        self.top + self.height - (value.max(1e-9).log10() - self.log_low) / (self.log_high - self.log_low) * self.height
    }

    /// A light grid line across the panel at every decade, labelled left of `left`.
    pub fn grid(&self, svg: &mut String, left: f64, width: f64) {
        let mut decade = self.log_low;
        while decade <= self.log_high {
            let y = self.y(10f64.powf(decade));
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                left + width,
                left - 4.0,
                y + 4.0,
                format_value(10f64.powf(decade))
            );
            decade += 1.0;
        }
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

    // A range inside one decade still gets a usable axis (no division by zero).
    #[test]
    fn log_scale_of_one_decade_is_finite() {
        let scale = LogScale::new(1.0, 1.0, 0.0, 100.0);
        assert!(scale.y(1.0).is_finite());
        assert!(scale.y(5.0) < scale.y(1.0));
    }
}
