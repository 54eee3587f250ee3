//! Line plots as standalone SVG ([`line_plot`]): a prefill bench file's TTFT
//! and attention transient memory against prompt length (one series per
//! arm), and any other x/y series (`bench serve`'s throughput against
//! concurrency). Written by hand: a few lines of SVG, no font or raster
//! dependencies.

use crate::prefill_schema::{PrefillBenchFile, PrefillSample};
use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Median TTFT (ms) per arm against prompt length.
pub fn ttft_plot(f: &PrefillBenchFile) -> String {
    plot(f, "Median TTFT vs prompt length", "TTFT (ms)", &|s| {
        s.ttft_ms.median
    })
}

/// Attention transient peak (MiB) per arm against prompt length.
pub fn transient_plot(f: &PrefillBenchFile) -> String {
    plot(
        f,
        "Attention transient peak vs prompt length",
        "transient (MiB)",
        &|s| s.memory.attention_transient_peak_bytes as f64 / (1u64 << 20) as f64,
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart: x ticks at `xs` (a log axis when they span more than 4×),
/// one polyline with a point per `(x, y)` and a legend entry per series.
pub struct LinePlot<'a> {
    pub title: &'a str,
    /// The x axis' label and unit, drawn `label (unit)` or `label (unit, log scale)`.
    pub xlabel: &'a str,
    pub xunit: &'a str,
    pub ylabel: &'a str,
    pub xs: Vec<f64>,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

fn plot(
    f: &PrefillBenchFile,
    title: &str,
    ylabel: &str,
    y: &dyn Fn(&PrefillSample) -> f64,
) -> String {
    let mut arms: Vec<&str> = Vec::new();
    for s in &f.samples {
        if !arms.contains(&s.arm.as_str()) {
            arms.push(&s.arm);
        }
    }
    let series = arms
        .iter()
        .map(|arm| {
            let pts = f
                .samples
                .iter()
                .filter(|p| p.arm == *arm)
                .map(|p| (p.length as f64, y(p)))
                .collect();
            (arm.to_string(), pts)
        })
        .collect();
    line_plot(&LinePlot {
        title,
        xlabel: "prompt length",
        xunit: "tokens",
        ylabel,
        xs: f.lengths.iter().map(|&l| l as f64).collect(),
        series,
    })
}

/// `p` as a standalone SVG document.
pub fn line_plot(p: &LinePlot) -> String {
    let xs = &p.xs;
    let (xmin, xmax) = xs
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let ymax = p
        .series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|&(_, v)| v))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let log_x = xmin > 0.0 && xmax / xmin > 4.0;
    let fx = |x: f64| -> f64 {
        let t = if xmax <= xmin {
            0.5
        } else if log_x {
            (x.ln() - xmin.ln()) / (xmax.ln() - xmin.ln())
        } else {
            (x - xmin) / (xmax - xmin)
        };
        LEFT + t * (W - LEFT - RIGHT)
    };
    let fy = |v: f64| TOP + (1.0 - v / ymax) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        W / 2.0,
        esc(p.title)
    );
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    let _ = writeln!(
        s,
        r#"<path d="M{x0},{y0} L{x0},{y1} L{x1},{y1}" stroke="black" fill="none"/>"#
    );
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let yy = fy(v);
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{yy:.1}" x2="{x0}" y2="{yy:.1}" stroke="black"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 4.0,
            x0 - 6.0,
            yy + 4.0,
            fmt_num(v)
        );
    }
    for &x in xs {
        let xx = fx(x);
        let _ = writeln!(
            s,
            r#"<line x1="{xx:.1}" y1="{y1}" x2="{xx:.1}" y2="{}" stroke="black"/><text x="{xx:.1}" y="{}" text-anchor="middle">{}</text>"#,
            y1 + 4.0,
            y1 + 18.0,
            x
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{} ({}{})</text>"#,
        (x0 + x1) / 2.0,
        H - 10.0,
        esc(p.xlabel),
        esc(p.xunit),
        if log_x { ", log scale" } else { "" }
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(p.ylabel)
    );
    series(&mut s, &p.series, &fx, &fy, x1);
    s.push_str("</svg>\n");
    s
}

/// One polyline with points and a legend entry per series; `fx` / `fy` map
/// an x / y value to the canvas, `x1` is the plot's right edge.
fn series(
    s: &mut String,
    all: &[(String, Vec<(f64, f64)>)],
    fx: &dyn Fn(f64) -> f64,
    fy: &dyn Fn(f64) -> f64,
    x1: f64,
) {
    for (i, (name, raw)) in all.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = raw
            .iter()
            .map(|&(x, v)| (fx(x), fy(v)))
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" stroke="{color}" stroke-width="2" fill="none"/>"#,
            path.join(" ")
        );
        for (a, b) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{color}"/>"#
            );
        }
        let ly = TOP + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            x1 + 10.0,
            x1 + 30.0,
            x1 + 36.0,
            ly + 4.0,
            esc(name)
        );
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}
