//! A minimal SVG writer for remat's charts: shapes, text in a generic font
//! family (no font file is loaded, so the output renders anywhere), and the
//! axis helpers the charts share (nice ticks, linear scales, byte units).

use std::fmt::Write;

/// An SVG document being written.
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

/// How a text is anchored at its point.
#[derive(Clone, Copy)]
pub enum Anchor {
    /// The point is the text's left end.
    Start,
    /// The point is the text's middle.
    Middle,
    /// The point is the text's right end.
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// Escapes the XML special characters of a text.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Svg {
    /// An empty white canvas of `width` x `height` pixels.
    pub fn new(width: f64, height: f64) -> Svg {
        let mut svg = Svg { width, height, body: String::new() };
        svg.rect(0.0, 0.0, width, height, "white", None);
        svg
    }

    /// A rectangle filled with `fill`, outlined with `stroke` if given.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, stroke: Option<&str>) {
        let stroke = stroke.map(|s| format!(r#" stroke="{s}""#)).unwrap_or_default();
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}"{stroke}/>"#
        );
    }

    /// A straight line; `dash` is an SVG dash array such as `"6 4"`.
    pub fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), stroke: &str, width: f64, dash: Option<&str>) {
        let dash = dash.map(|d| format!(r#" stroke-dasharray="{d}""#)).unwrap_or_default();
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" stroke-width="{width}"{dash}/>"#
        );
    }

    /// An open polyline through `points`; `dash` as for [`Svg::line`].
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, dash: Option<&str>) {
        let dash = dash.map(|d| format!(r#" stroke-dasharray="{d}""#)).unwrap_or_default();
        let _ = writeln!(
            self.body,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="{width}" stroke-linejoin="round"{dash}/>"#,
            path_points(points)
        );
    }

    /// A closed polygon filled with `fill`.
    pub fn polygon(&mut self, points: &[(f64, f64)], fill: &str, stroke: Option<&str>) {
        let stroke = stroke.map(|s| format!(r#" stroke="{s}" stroke-width="1""#)).unwrap_or_default();
        let _ = writeln!(self.body, r#"<polygon points="{}" fill="{fill}"{stroke}/>"#, path_points(points));
    }

    /// A circle.
    pub fn circle(&mut self, (x, y): (f64, f64), r: f64, fill: &str, stroke: &str) {
        let _ = writeln!(self.body, r#"<circle cx="{x:.2}" cy="{y:.2}" r="{r}" fill="{fill}" stroke="{stroke}"/>"#);
    }

    /// A text of `size` pixels, rotated by `rotate` degrees about its point.
    pub fn text(&mut self, at: (f64, f64), text: &str, size: f64, anchor: Anchor, rotate: f64) {
        self.text_with(at, text, size, anchor, rotate, "");
    }

    /// A text with a white outline under it, readable over lines and areas.
    pub fn text_halo(&mut self, at: (f64, f64), text: &str, size: f64, anchor: Anchor) {
        self.text_with(at, text, size, anchor, 0.0, r#" stroke="white" stroke-width="3" paint-order="stroke""#);
    }

    fn text_with(&mut self, (x, y): (f64, f64), text: &str, size: f64, anchor: Anchor, rotate: f64, extra: &str) {
        let transform =
            if rotate == 0.0 { String::new() } else { format!(r#" transform="rotate({rotate} {x:.2} {y:.2})""#) };
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.2}" y="{y:.2}" font-family="sans-serif" font-size="{size}" text-anchor="{}"{transform}{extra}>{}</text>"#,
            anchor.name(),
            escape(text)
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n{}</svg>\n",
            self.body,
            w = self.width,
            h = self.height
        )
    }
}

fn path_points(points: &[(f64, f64)]) -> String {
    points.iter().map(|(x, y)| format!("{x:.2},{y:.2}")).collect::<Vec<_>>().join(" ")
}

/// About `count` round tick values covering `lo..=hi` (steps of 1, 2 or 5
/// times a power of ten), and the range they span, which contains `lo..=hi`.
pub fn nice_ticks(lo: f64, hi: f64, count: usize) -> (Vec<f64>, f64, f64) {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 0.5 * lo.abs().max(1.0), hi + 0.5 * hi.abs().max(1.0)) };
    let raw = (hi - lo) / count.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).floor() * step;
    let last = (hi / step).ceil() * step;
    let n = ((last - first) / step).round() as usize;
    let ticks = (0..=n).map(|i| first + i as f64 * step).collect();
    (ticks, first, last)
}

/// A tick label without float noise (`0.30000000000000004` prints `0.3`).
pub fn tick_label(value: f64) -> String {
    tick_label_precision(value, 6)
}

/// `value` with at most `decimals` decimals, trailing zeros dropped.
pub fn tick_label_precision(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

/// The binary unit that suits byte values up to `max`: (divisor, name).
pub fn byte_unit(max: u64) -> (f64, &'static str) {
    const UNITS: [(f64, &str); 5] =
        [(1.0, "B"), (1024.0, "KiB"), (1048576.0, "MiB"), (1073741824.0, "GiB"), (1099511627776.0, "TiB")];
    UNITS.iter().rev().copied().find(|&(d, _)| max as f64 >= 2.0 * d).unwrap_or(UNITS[0])
}

/// A linear map from data values to pixels.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Data value at the first pixel.
    pub lo: f64,
    /// Data value at the last pixel.
    pub hi: f64,
    /// Pixel of `lo`.
    pub from: f64,
    /// Pixel of `hi`.
    pub to: f64,
}

impl Scale {
    /// The pixel of `value`.
    pub fn at(&self, value: f64) -> f64 {
        let span = self.hi - self.lo;
        if span == 0.0 { self.from } else { self.from + (value - self.lo) / span * (self.to - self.from) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover() {
        let (ticks, lo, hi) = nice_ticks(3.2, 47.9, 5);
        assert_eq!(ticks, vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
        assert_eq!((lo, hi), (0.0, 50.0));
        let (ticks, ..) = nice_ticks(0.12, 0.31, 4);
        let labels: Vec<_> = ticks.iter().map(|&t| tick_label(t)).collect();
        assert_eq!(labels, ["0.1", "0.15", "0.2", "0.25", "0.3", "0.35"]);
        // A single value still gets a range around it.
        let (ticks, lo, hi) = nice_ticks(5.0, 5.0, 4);
        assert!(lo < 5.0 && hi > 5.0 && ticks.len() >= 2);
    }

    #[test]
    fn units_and_escaping() {
        assert_eq!(byte_unit(100), (1.0, "B"));
        assert_eq!(byte_unit(90 << 20).1, "MiB");
        assert_eq!(byte_unit(3 << 30).1, "GiB");
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        let mut svg = Svg::new(10.0, 10.0);
        svg.text((1.0, 2.0), "F_all^1 < 2", 10.0, Anchor::Start, 0.0);
        let doc = svg.finish();
        assert!(doc.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(doc.contains("F_all^1 &lt; 2") && doc.contains(r#"font-family="sans-serif""#));
    }
}
