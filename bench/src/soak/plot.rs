//! `soak.svg`: four panels against minutes into the soak: the sidecar's
//! resident memory, its open file descriptors, the SQLite WAL's size, and
//! the p99 latency per window of the main request kinds. SQLite is drawn
//! solid with round markers, Postgres dashed with square ones, in the style
//! of the bench's `throughput.svg`. Hand-written SVG, linear axes.

use std::fmt::Write as _;

use super::Backend;
use super::report::Soaked;
use super::stats::Kind;
use super::verdict::MIB;

struct Series {
    label: String,
    color: &'static str,
    backend: Backend,
    points: Vec<(f64, f64)>,
}

const WIDTH: f64 = 470.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 62.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 46.0;
const RIGHT: f64 = 16.0;

fn backend_color(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "#1f6fb4",
        Backend::Postgres => "#e8740c",
    }
}

/// The kinds whose p99 is drawn, with their colours.
const P99_KINDS: [(Kind, &str); 4] = [
    (Kind::Checkpoint, "#1f6fb4"),
    (Kind::Restore, "#e8740c"),
    (Kind::BeginComplete, "#2a9d3a"),
    (Kind::SignalAwait, "#8a3ab9"),
];

/// A "nice" upper bound of an axis from 0: 1, 2 or 5 times a power of ten.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let decade = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * decade).find(|m| *m >= v).unwrap_or(10.0 * decade)
}

fn resource(soaks: &[Soaked], value: impl Fn(&super::sample::Sample) -> Option<f64>) -> Vec<Series> {
    soaks
        .iter()
        .map(|s| Series {
            label: s.backend.name().into(),
            color: backend_color(s.backend),
            backend: s.backend,
            points: s.samples.iter().filter_map(|x| Some((x.t_s / 60.0, value(x)?))).collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

fn p99(soaks: &[Soaked]) -> Vec<Series> {
    let mut lines = Vec::new();
    for s in soaks {
        for (kind, color) in P99_KINDS {
            let points = s
                .windows
                .iter()
                .filter(|w| w.kind(kind).requests > 0)
                .map(|w| ((w.start_s + w.end_s) / 120.0, w.kind(kind).p99_ms))
                .collect();
            lines.push(Series {
                label: format!("{} · {}", kind.name(), s.backend.name()),
                color,
                backend: s.backend,
                points,
            });
        }
    }
    lines
}

fn panel(out: &mut String, (left, top): (f64, f64), title: &str, y_label: &str, x_max: f64, lines: &[Series]) {
    let (x0, y0) = (left + LEFT, top + TOP);
    let (w, h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let y_max = nice_max(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max));
    let x = |v: f64| x0 + w * v / x_max;
    let y = |v: f64| y0 + h * (1.0 - v / y_max);
    let _ = writeln!(out, r#"<text x="{}" y="{}" class="title">{title}</text>"#, x0 + w / 2.0, top + 20.0);
    let _ = writeln!(out, r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>"##);
    for i in 0..=4 {
        let (vy, vx) = (y_max * f64::from(i) / 4.0, x_max * f64::from(i) / 4.0);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" class="ytick">{}</text><text x="{:.1}" y="{}" class="xtick">{}</text>"##,
            x0 + w,
            x0 - 6.0,
            y(vy) + 4.0,
            short(vy),
            x(vx),
            y0 + h + 16.0,
            short(vx),
            py = y(vy),
        );
    }
    crate::plot::axis_titles(out, (left, x0, y0, w, h), "minutes into the soak", y_label);
    for line in lines {
        let points: Vec<(f64, f64)> = line.points.iter().map(|&(a, b)| (x(a), y(b))).collect();
        crate::plot::polyline(out, &points, line.color, line.backend == Backend::Postgres, 1.5);
    }
}

fn short(v: f64) -> String {
    match v {
        v if v >= 1e4 => format!("{:.0}k", v / 1e3),
        v if v >= 10.0 || v == 0.0 => format!("{v:.0}"),
        v => format!("{v:.1}"),
    }
}

fn legend(out: &mut String, top: f64, lines: &[Series]) {
    for (i, line) in lines.iter().enumerate() {
        let (lx, ly) = (LEFT + 300.0 * (i % 3) as f64, top + 20.0 * (i / 3) as f64);
        let dash = if line.backend == Backend::Postgres { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 30.0,
            line.color,
            lx + 38.0,
            ly + 4.0,
            line.label
        );
    }
}

/// The four-panel plot of the soaks.
pub fn svg(soaks: &[Soaked], subtitle: &str) -> String {
    let rss = resource(soaks, |s| Some(s.rss_kib as f64 / 1024.0));
    let fds = resource(soaks, |s| Some(s.fds as f64));
    let wal = resource(soaks, |s| s.wal_bytes.map(|b| b as f64 / MIB));
    let p99 = p99(soaks);
    let x_max = nice_max(soaks.iter().map(|s| s.duration_s / 60.0).fold(0.0, f64::max));
    let legend_rows = (rss.len().div_ceil(3) + p99.len().div_ceil(3)) as f64;
    let total = 2.0 * HEIGHT + 30.0 + 20.0 * legend_rows;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total}" viewBox="0 0 {w} {total}" font-family="sans-serif" font-size="12">"#,
        w = 2.0 * WIDTH
    );
    out.push_str(
        "<style>.title{font-size:14px;font-weight:bold;text-anchor:middle}.xtick{text-anchor:middle}\
         .ytick{text-anchor:end}.xlabel{text-anchor:middle}.ylabel{text-anchor:middle}</style>\n",
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    panel(&mut out, (0.0, 0.0), "Sidecar resident memory", "RSS, MiB", x_max, &rss);
    panel(&mut out, (WIDTH, 0.0), "Sidecar open file descriptors", "open fds", x_max, &fds);
    panel(&mut out, (0.0, HEIGHT), "SQLite WAL file size", "-wal, MiB", x_max, &wal);
    panel(&mut out, (WIDTH, HEIGHT), "p99 latency per window", "p99, ms", x_max, &p99);
    legend(&mut out, 2.0 * HEIGHT + 10.0, &rss);
    legend(&mut out, 2.0 * HEIGHT + 10.0 + 20.0 * rss.len().div_ceil(3) as f64, &p99);
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" fill="#555" text-anchor="end">{subtitle}</text>"##,
        2.0 * WIDTH - 10.0,
        total - 6.0
    );
    out.push_str("</svg>\n");
    out
}
