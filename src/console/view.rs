//! How the console shows values: times in UTC, durations, sizes and clock
//! skew as people read them; the JSON viewer and the LangGraph checkpoint
//! tree as nested HTML; and the small SVG charts of the last hour.
//!
//! Templates escape every value they print. The few fragments built here
//! (the JSON viewer and the tree, which nest deeper than a template can)
//! pass every piece of stored text through `escape` before it joins the
//! markup, and tests feed them markup and quotes.

use std::fmt::Write;

use crate::domain::clock::{civil_from_days, days_from_civil};
use crate::domain::model::UnixNanos;

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// Text made safe for HTML content and double- or single-quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `2026-11-28 03:14:27.123` in UTC.
pub fn time(at: UnixNanos) -> String {
    let (seconds, nanos) = (at.div_euclid(NANOS_PER_SECOND), at.rem_euclid(NANOS_PER_SECOND));
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{:03}", nanos / 1_000_000)
}

/// `2026-11-28T03:14:27.123Z`: what a `<time datetime>` holds.
pub fn iso(at: UnixNanos) -> String {
    time(at).replacen(' ', "T", 1) + "Z"
}

/// `2026-11-28T03:14`: the value of a `datetime-local` field.
pub fn minute_field(at: UnixNanos) -> String {
    time(at).replacen(' ', "T", 1)[..16].to_owned()
}

/// A UTC time as a filter gives it: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM`,
/// `YYYY-MM-DDTHH:MM:SS` (a space may stand for `T`, and a `Z` may end it).
pub fn parse_time(text: &str) -> Option<UnixNanos> {
    let text = text.trim().trim_end_matches('Z').replacen(' ', "T", 1);
    let (date, clock) = text.split_once('T').unwrap_or((&text, "00:00"));
    let mut date = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, mo, d) = (date.next()??, date.next()??, date.next()??);
    let mut clock = clock.splitn(3, ':');
    let h: i64 = clock.next()?.parse().ok()?;
    let mi: i64 = clock.next()?.parse().ok()?;
    let s: f64 = clock.next().map_or(Some(0.0), |s| s.parse().ok())?;
    let valid = (1..=12).contains(&mo) && (1..=31).contains(&d) && h < 24 && mi < 60 && (0.0..61.0).contains(&s);
    if !valid || !(1970..=9999).contains(&y) {
        return None;
    }
    let seconds = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60;
    Some(seconds * NANOS_PER_SECOND + (s * 1e9) as i64)
}

/// A length of time as people say it: `850 ms`, `12.5 s`, `4 m 3 s`, `3 h 2 m`, `2 d 5 h`.
pub fn duration(nanos: i64) -> String {
    let sign = if nanos < 0 { "−" } else { "" };
    let n = nanos.unsigned_abs();
    let s = n / 1_000_000_000;
    let text = match s {
        _ if n < 1_000_000_000 => format!("{} ms", n / 1_000_000),
        0..60 => format!("{:.1} s", n as f64 / 1e9),
        60..3600 => format!("{} m {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} m", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    };
    format!("{sign}{text}")
}

/// Clock skew, signed: how far the commit time is ahead of the client's timestamp.
pub fn skew(client: UnixNanos, committed: UnixNanos) -> String {
    let d = committed.saturating_sub(client);
    if d >= 0 { format!("+{}", duration(d)) } else { duration(d) }
}

/// `512 B`, `3.4 KiB`, `1.2 MiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// `1 checkpoint`, `5 checkpoints`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Text of a stored value: UTF-8 as it is, other bytes as hex.
pub fn bytes_text(bytes: &[u8], max: usize) -> String {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().fold(String::from("0x"), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }),
    };
    cut(&text, max)
}

/// `text` cut to at most `max` characters, with an ellipsis if it was.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A colour class per phase, in the order the phases first appear in
/// `phases` (oldest first), so the phases of a page differ while eight
/// colours last and a phase keeps its colour across the page.
pub fn phase_classes<'a>(phases: impl Iterator<Item = &'a str>) -> Vec<(String, usize)> {
    let mut classes: Vec<(String, usize)> = Vec::new();
    for phase in phases {
        if !classes.iter().any(|(p, _)| p == phase) {
            let class = classes.len() % 8;
            classes.push((phase.to_owned(), class));
        }
    }
    classes
}

/// The JSON viewer: a state as nested `<details>`, at most `budget` nodes
/// (strings cut at 200 characters); `None` when the state is not JSON.
pub fn json_viewer(state: &[u8], budget: usize) -> Option<(String, bool)> {
    let value: serde_json::Value = serde_json::from_slice(state).ok()?;
    let mut out = String::new();
    let mut left = budget;
    json_node(&mut out, None, &value, &mut left, 0);
    Some((out, left == 0))
}

fn json_node(out: &mut String, key: Option<&str>, value: &serde_json::Value, left: &mut usize, depth: usize) {
    use serde_json::Value;
    if *left == 0 {
        return;
    }
    *left -= 1;
    let label = key.map(|k| format!("<span class=\"json-key\">{}</span>: ", escape(k))).unwrap_or_default();
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
        scalar => {
            let (class, text) = match scalar {
                Value::String(s) => ("json-string", format!("\"{}\"", cut(s, 200))),
                Value::Null => ("json-null", "null".to_owned()),
                other => ("json-value", other.to_string()),
            };
            let _ =
                write!(out, "<div class=\"json-leaf\">{label}<span class=\"{class}\">{}</span></div>", escape(&text));
            return;
        }
    };
    let (open, close) = if value.is_object() { ('{', '}') } else { ('[', ']') };
    let summary = format!("{open} {} {close}", children.len());
    let open_attr = if depth < 2 { " open" } else { "" };
    let _ = write!(out, "<details class=\"json\"{open_attr}><summary>{label}{}</summary>", escape(&summary));
    for (k, v) in &children {
        json_node(out, Some(k), v, left, depth + 1);
    }
    out.push_str("</details>");
}

/// A checkpoint of a LangGraph thread, as the tree draws it.
pub struct TreeNode<'a> {
    pub id: &'a str,
    pub parent: &'a str,
    pub scope: &'a str,
    /// What the checkpoint's metadata says (its step and source), as text.
    pub note: String,
    /// Its pending writes as text, each marked when it is an interrupt.
    pub writes: Vec<(String, bool)>,
}

/// The checkpoints of a thread as nested `<ul class="tree">`, roots first
/// (a node whose parent is not among them is a root), each child under
/// its parent; ids are escaped, and each links to nothing.
pub fn checkpoint_tree(nodes: &[TreeNode<'_>]) -> String {
    let ids: std::collections::HashSet<(&str, &str)> = nodes.iter().map(|n| (n.scope, n.id)).collect();
    let mut out = String::from("<ul class=\"tree\">");
    for root in nodes.iter().filter(|n| n.parent.is_empty() || !ids.contains(&(n.scope, n.parent))) {
        tree_node(&mut out, root, nodes, 0);
    }
    out.push_str("</ul>");
    out
}

fn tree_node(out: &mut String, node: &TreeNode<'_>, nodes: &[TreeNode<'_>], depth: usize) {
    let scope = if node.scope.is_empty() {
        String::new()
    } else {
        format!(" <span class=\"muted\">{}</span>", escape(node.scope))
    };
    let _ = write!(out, "<li><code>{}</code>{scope}", escape(node.id));
    if !node.note.is_empty() {
        let _ = write!(out, " <span class=\"muted\">{}</span>", escape(&node.note));
    }
    if !node.writes.is_empty() {
        out.push_str("<ul class=\"writes\">");
        for (write, interrupt) in &node.writes {
            let class = if *interrupt { " class=\"interrupt\"" } else { "" };
            let _ = write!(out, "<li{class}>{}</li>", escape(write));
        }
        out.push_str("</ul>");
    }
    let children: Vec<&TreeNode<'_>> =
        nodes.iter().filter(|n| n.parent == node.id && n.scope == node.scope && n.id != node.id).collect();
    if !children.is_empty() && depth < 64 {
        out.push_str("<ul>");
        for child in children {
            tree_node(out, child, nodes, depth + 1);
        }
        out.push_str("</ul>");
    }
    out.push_str("</li>");
}

/// A bar chart of one series per minute, as an inline SVG: bars only, no
/// styles (the page's stylesheet colours them), labelled for screen readers.
pub fn bar_chart(label: &str, series: &[u64], class: &str) -> String {
    let (width, height) = (300.0, 60.0);
    let most = series.iter().copied().max().unwrap_or(0).max(1) as f64;
    let bar = width / series.len().max(1) as f64;
    let total: u64 = series.iter().sum();
    let mut out = format!(
        "<svg class=\"chart {class}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{}\" \
         preserveAspectRatio=\"none\"><title>{}</title>",
        escape(label),
        escape(&format!("{label}: {total} in all, at most {} in a minute", most as u64)),
    );
    for (i, &n) in series.iter().enumerate().filter(|(_, n)| **n > 0) {
        let h = (n as f64 / most * (height - 2.0)).max(1.0);
        let _ = write!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"/>",
            i as f64 * bar,
            height - h,
            bar * 0.8
        );
    }
    out.push_str("<line x1=\"0\" y1=\"59.5\" x2=\"300\" y2=\"59.5\"/></svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOADS: [&str; 3] = ["<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>", "it's"];

    #[test]
    fn escaping_leaves_no_markup_and_no_quote() {
        for payload in PAYLOADS {
            let escaped = escape(payload);
            assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped}");
        }
        assert_eq!(escape("a & <b>"), "a &amp; &lt;b&gt;");
    }

    #[test]
    fn the_json_viewer_and_the_tree_escape_keys_and_values() {
        let state = serde_json::json!({ PAYLOADS[0]: PAYLOADS[1], "list": [PAYLOADS[2], null, 3] }).to_string();
        let (html, cut_short) = json_viewer(state.as_bytes(), 100).unwrap();
        assert!(!cut_short);
        for payload in PAYLOADS {
            assert!(!html.contains(payload), "{html}");
        }
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert_eq!(json_viewer(b"not json", 10), None);
        let (_, cut_short) = json_viewer(state.as_bytes(), 2).unwrap();
        assert!(cut_short, "a state past the budget says so");
        let node = |id, parent| TreeNode { id, parent, scope: "", note: String::new(), writes: vec![] };
        let mut last = node("3", PAYLOADS[0]);
        last.note = PAYLOADS[1].to_owned();
        last.writes = vec![(PAYLOADS[2].to_owned(), true)];
        let nodes = [node("1", ""), node(PAYLOADS[0], "1"), last];
        let tree = checkpoint_tree(&nodes);
        for payload in PAYLOADS {
            assert!(!tree.contains(payload), "{tree}");
        }
        assert_eq!(tree.matches("<ul>").count(), 2, "two levels below the root: {tree}");
        assert_eq!(tree.matches("<li class=\"interrupt\">").count(), 1, "{tree}");
    }

    #[test]
    fn times_print_and_parse_in_utc() {
        let at = 1_795_000_000 * NANOS_PER_SECOND + 123_000_000;
        assert_eq!(time(at), "2026-11-18 11:06:40.123");
        assert_eq!(iso(at), "2026-11-18T11:06:40.123Z");
        assert_eq!(parse_time("2026-11-18T11:06:40.123Z"), Some(at));
        assert_eq!(parse_time(&minute_field(at)), Some(at - 40_123_000_000));
        assert_eq!(parse_time("2026-11-18"), Some(at - (11 * 3600 + 6 * 60 + 40) * NANOS_PER_SECOND - 123_000_000));
        assert_eq!(time(0), "1970-01-01 00:00:00.000");
        for wrong in ["", "yesterday", "2026-13-01", "2026-11-18T25:00", "2026-11-18T08"] {
            assert_eq!(parse_time(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn durations_sizes_and_skew_read_as_people_say_them() {
        assert_eq!(duration(850_000_000), "850 ms");
        assert_eq!(duration(12_500_000_000), "12.5 s");
        assert_eq!(duration(243 * NANOS_PER_SECOND), "4 m 3 s");
        assert_eq!(duration((3 * 3600 + 120) * NANOS_PER_SECOND), "3 h 2 m");
        assert_eq!(skew(0, 2 * 3600 * NANOS_PER_SECOND), "+2 h 0 m");
        assert_eq!(skew(3 * NANOS_PER_SECOND, 0), "−3.0 s");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 * 1024 + 512), "3.5 KiB");
        assert_eq!(bytes_text(&[0xff, 0x01], 10), "0xff01");
        assert_eq!(cut("abcdef", 3), "abc…");
    }

    #[test]
    fn phases_take_colours_in_the_order_they_first_appear() {
        let classes = phase_classes(["plan", "act", "plan", "done"].into_iter());
        assert_eq!(classes, vec![("plan".into(), 0), ("act".into(), 1), ("done".into(), 2)]);
    }

    #[test]
    fn a_chart_draws_a_bar_per_minute_and_labels_itself() {
        let chart = bar_chart("Writes per minute, last hour", &[0, 5, 10], "writes");
        assert_eq!(chart.matches("<rect").count(), 2, "a minute without any draws no bar");
        assert!(chart.contains("role=\"img\"") && chart.contains("15 in all"), "{chart}");
    }
}
