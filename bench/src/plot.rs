//! `throughput.svg`: two panels, throughput and p99 latency against the
//! number of callers (log-scale axes), for W1 1 KB appends by stepwell
//! beside the baselines. One colour per system; SQLite is drawn solid with
//! round markers, Postgres dashed with square ones. Hand-written SVG, so the
//! harness needs no plotting library.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::report::{Backend, Row, System};

/// One line on a panel.
struct Series {
    label: String,
    color: &'static str,
    backend: Backend,
    points: Vec<(f64, f64)>,
}

fn color(system: System) -> &'static str {
    match system {
        System::Stepwell => "#1f6fb4",
        System::Direct => "#e8740c",
        System::Pgbench => "#2a9d3a",
        System::Floor => "#8a8a8a",
    }
}

/// The lines of one panel: `value` of each closed-loop W1 1 KB row, by
/// (backend, system), in order of callers.
fn series(rows: &[Row], value: impl Fn(&Row) -> f64) -> Vec<Series> {
    let mut lines: BTreeMap<(u8, u8), Series> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.series == "w1-1kb" && r.pace == "closed" && r.ops > 0) {
        let key = (row.backend as u8, row.system as u8);
        let line = lines.entry(key).or_insert_with(|| Series {
            label: format!("{} · {}", row.system.name(), row.backend.name()),
            color: color(row.system),
            backend: row.backend,
            points: Vec::new(),
        });
        line.points.push((row.callers as f64, value(row)));
    }
    let mut lines: Vec<Series> = lines.into_values().collect();
    for line in &mut lines {
        line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// A log-scale axis over the data's range, widened to whole decades.
struct LogAxis {
    low: f64,
    high: f64,
}

impl LogAxis {
    fn decades(values: impl Iterator<Item = f64>) -> LogAxis {
        let (mut low, mut high) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| *v > 0.0) {
            low = low.min(v);
            high = high.max(v);
        }
        if low > high {
            return LogAxis { low: 1.0, high: 10.0 };
        }
        let low = 10f64.powf(low.log10().floor());
        let high = 10f64.powf(high.log10().ceil()).max(low * 10.0);
        LogAxis { low, high }
    }

    /// Where `v` falls, 0 at `low` to 1 at `high`.
    fn at(&self, v: f64) -> f64 {
        (v.max(self.low).ln() - self.low.ln()) / (self.high.ln() - self.low.ln())
    }

    /// Tick values: 1, 2, 5 per decade when there are few decades.
    fn ticks(&self) -> Vec<f64> {
        let decades = (self.high / self.low).log10().round() as i32;
        let steps: &[f64] = if decades <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        let mut ticks = Vec::new();
        let mut decade = self.low;
        while decade <= self.high * 1.0001 {
            for step in steps {
                let v = decade * step;
                if v <= self.high * 1.0001 {
                    ticks.push(v);
                }
            }
            decade *= 10.0;
        }
        ticks
    }
}

fn number(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

/// Panel geometry.
const WIDTH: f64 = 470.0;
const HEIGHT: f64 = 330.0;
const MARGIN_LEFT: f64 = 62.0;
const MARGIN_TOP: f64 = 34.0;
const MARGIN_BOTTOM: f64 = 46.0;
const MARGIN_RIGHT: f64 = 16.0;

fn panel(out: &mut String, left: f64, title: &str, y_label: &str, callers: &[f64], lines: &[Series]) {
    let (x0, y0) = (left + MARGIN_LEFT, MARGIN_TOP);
    let (w, h) = (WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM);
    let x_axis = LogAxis { low: callers[0] / 1.6, high: callers[callers.len() - 1] * 1.6 };
    let y_axis = LogAxis::decades(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)));
    let x = |v: f64| x0 + w * x_axis.at(v);
    let y = |v: f64| y0 + h * (1.0 - y_axis.at(v));

    let _ = writeln!(out, r#"<text x="{}" y="20" class="title">{title}</text>"#, x0 + w / 2.0);
    let _ = writeln!(out, r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>"##);
    for v in y_axis.ticks() {
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" class="ytick">{}</text>"##,
            x0 + w,
            x0 - 6.0,
            y(v) + 4.0,
            number(v),
            py = y(v),
        );
    }
    for &c in callers {
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" x2="{px:.1}" y1="{y0}" y2="{}" stroke="#e4e4e4"/><text x="{px:.1}" y="{}" class="xtick">{c}</text>"##,
            y0 + h,
            y0 + h + 16.0,
            px = x(c),
        );
    }
    axis_titles(out, (left, x0, y0, w, h), "concurrent callers (log scale)", y_label);
    for line in lines {
        let points: Vec<(f64, f64)> = line.points.iter().map(|&(c, v)| (x(c), y(v))).collect();
        polyline(out, &points, line.color, line.backend == Backend::Postgres, 2.0);
        for &(c, v) in &line.points {
            let _ = writeln!(out, "{}", marker(x(c), y(v), line));
        }
    }
}

/// A panel's axis titles: `x_label` under a plot area that starts at
/// (`x0`, `y0`) and is `w` by `h`, and `y_label` turned up beside it, at the
/// panel's left edge `left`.
pub fn axis_titles(out: &mut String, (left, x0, y0, w, h): (f64, f64, f64, f64, f64), x_label: &str, y_label: &str) {
    let _ = writeln!(out, r#"<text x="{}" y="{}" class="xlabel">{x_label}</text>"#, x0 + w / 2.0, y0 + h + 36.0);
    let _ = writeln!(
        out,
        r#"<text transform="translate({},{}) rotate(-90)" class="ylabel">{y_label}</text>"#,
        left + 16.0,
        y0 + h / 2.0
    );
}

/// A line through `points` (in pixels), dashed for Postgres's series.
pub fn polyline(out: &mut String, points: &[(f64, f64)], color: &str, dashed: bool, width: f64) {
    let points: Vec<String> = points.iter().map(|&(a, b)| format!("{a:.1},{b:.1}")).collect();
    let dash = if dashed { r#" stroke-dasharray="6 4""# } else { "" };
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="{width}"{dash}/>"#,
        points.join(" ")
    );
}

fn marker(cx: f64, cy: f64, line: &Series) -> String {
    match line.backend {
        Backend::Sqlite => format!(r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="{}"/>"#, line.color),
        Backend::Postgres => {
            format!(r#"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{}"/>"#, cx - 4.0, cy - 4.0, line.color)
        }
    }
}

/// The two-panel plot of the rows, titled with the run's mode.
pub fn svg(rows: &[Row], subtitle: &str) -> String {
    let throughput = series(rows, |r| r.throughput_per_s);
    let p99 = series(rows, |r| r.latency.p99_ms);
    let mut callers: Vec<f64> = throughput.iter().flat_map(|l| l.points.iter().map(|p| p.0)).collect();
    callers.sort_by(f64::total_cmp);
    callers.dedup();
    if callers.is_empty() {
        callers.push(1.0);
    }
    let legend_rows = throughput.len().div_ceil(3).max(1) as f64;
    let total_height = HEIGHT + 30.0 + 20.0 * legend_rows;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{total_height}" viewBox="0 0 {} {total_height}" font-family="sans-serif" font-size="12">"#,
        2.0 * WIDTH,
        2.0 * WIDTH
    );
    out.push_str(
        "<style>.title{font-size:14px;font-weight:bold;text-anchor:middle}.xtick{text-anchor:middle}\
         .ytick{text-anchor:end}.xlabel{text-anchor:middle}.ylabel{text-anchor:middle}</style>\n",
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    panel(&mut out, 0.0, "W1 append 1 KB: throughput", "checkpoints per second (log)", &callers, &throughput);
    panel(&mut out, WIDTH, "W1 append 1 KB: p99 latency", "p99 latency, ms (log)", &callers, &p99);
    for (i, line) in throughput.iter().enumerate() {
        let (lx, ly) = (MARGIN_LEFT + 300.0 * (i % 3) as f64, HEIGHT + 10.0 + 20.0 * (i / 3) as f64);
        let dash = if line.backend == Backend::Postgres { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/>{}<text x="{}" y="{}">{}</text>"#,
            lx + 30.0,
            line.color,
            marker(lx + 15.0, ly, line),
            lx + 38.0,
            ly + 4.0,
            line.label
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" fill="#555" text-anchor="end">{subtitle}</text>"##,
        2.0 * WIDTH - 10.0,
        total_height - 6.0
    );
    out.push_str("</svg>\n");
    out
}
