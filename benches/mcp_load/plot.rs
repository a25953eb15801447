//! The SVG latency plot (`latency.svg`).

use serde_json::Value;

use crate::report::Report;

/// One panel: x on a log scale, y linear from 0, lines for each series.
pub(crate) struct Panel<'a> {
    pub(crate) title: &'a str,
    pub(crate) xlabel: &'a str,
    pub(crate) series: Vec<(&'a str, &'a str, Vec<(f64, f64)>)>,
    /// A dashed horizontal line (ms) and its label.
    pub(crate) target: Option<(f64, &'a str)>,
    /// Legend in the upper left corner (else the lower right).
    pub(crate) legend_top_left: bool,
}

pub(crate) fn panel_svg(p: &Panel, x0: f64, y0: f64, w: f64, h: f64) -> String {
    let mut s = String::new();
    let pts: Vec<(f64, f64)> = p.series.iter().flat_map(|x| x.2.clone()).collect();
    if pts.is_empty() {
        return s;
    }
    let (lx_min, lx_max) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), &(x, _)| {
        (a.min(x.log10()), b.max(x.log10()))
    });
    let (lx_min, lx_max) = (lx_min.floor(), lx_max.ceil().max(lx_min.floor() + 1.0));
    let y_max = pts
        .iter()
        .fold(0.0f64, |a, &(_, y)| a.max(y))
        .max(p.target.map_or(0.0, |t| t.0 * 1.1));
    // A round y range in ms.
    let step = [
        0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 50.0, 100.0,
    ]
    .into_iter()
    .find(|st| y_max / st <= 6.0)
    .unwrap_or(200.0);
    let y_top = (y_max / step).ceil().max(1.0) * step;
    let (ml, mr, mt, mb) = (60.0, 15.0, 30.0, 45.0);
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let px = |x: f64| x0 + ml + (x.log10() - lx_min) / (lx_max - lx_min) * pw;
    let py = |y: f64| y0 + mt + ph - y / y_top * ph;
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold" text-anchor="middle">{}</text>"#,
        x0 + ml + pw / 2.0,
        y0 + 18.0,
        p.title
    );
    s += &format!(
        r##"<rect x="{:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#444"/>"##,
        x0 + ml,
        y0 + mt
    );
    let mut y = 0.0;
    while y <= y_top + 1e-9 {
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 + ml,
            py(y),
            x0 + ml + pw,
            py(y),
            x0 + ml - 5.0,
            py(y) + 4.0,
            if step < 1.0 {
                format!("{y:.2}")
            } else {
                format!("{y:.0}")
            }
        );
        y += step;
    }
    let mut e = lx_min;
    while e <= lx_max + 1e-9 {
        let x = 10f64.powf(e);
        let label = match e as i32 {
            0 => "1".to_string(),
            1 => "10".to_string(),
            2 => "100".to_string(),
            3 => "1 k".to_string(),
            4 => "10 k".to_string(),
            5 => "100 k".to_string(),
            6 => "1 M".to_string(),
            k => format!("1e{k}"),
        };
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{label}</text>"##,
            px(x),
            y0 + mt,
            px(x),
            y0 + mt + ph,
            px(x),
            y0 + mt + ph + 15.0
        );
        e += 1.0;
    }
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        x0 + ml + pw / 2.0,
        y0 + h - 8.0,
        p.xlabel
    );
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">latency (ms)</text>"#,
        x0 + 15.0,
        y0 + mt + ph / 2.0,
        x0 + 15.0,
        y0 + mt + ph / 2.0
    );
    if let Some((t, label)) = p.target {
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#555" text-anchor="end">{label}</text>"##,
            x0 + ml,
            py(t),
            x0 + ml + pw,
            py(t),
            x0 + ml + pw - 4.0,
            py(t) - 4.0
        );
    }
    for (_, color, pts) in &p.series {
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        s += &format!(
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in pts {
            s += &format!(
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                px(x),
                py(y)
            );
        }
    }
    // Legend in a box at the lower right.
    let n = p.series.len() as f64;
    let (bw, bh) = (150.0, 8.0 + 16.0 * n);
    let (bx, by) = if p.legend_top_left {
        (x0 + ml + 8.0, y0 + mt + 8.0)
    } else {
        (x0 + ml + pw - bw - 8.0, y0 + mt + ph - bh - 8.0)
    };
    s += &format!(
        r##"<rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{bh:.1}" fill="white" fill-opacity="0.9" stroke="#bbb"/>"##
    );
    for (k, (name, color, _)) in p.series.iter().enumerate() {
        let ly = by + 12.0 + k as f64 * 16.0;
        s += &format!(
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{name}</text>"#,
            bx + 6.0,
            bx + 26.0,
            bx + 31.0,
            ly + 4.0
        );
    }
    s
}

pub(crate) fn plot(r: &Report) -> Option<String> {
    let get = |v: &Value, path: &[&str]| -> Option<f64> {
        let mut c = v;
        for p in path {
            c = c.get(*p)?;
        }
        c.as_f64()
    };
    let mut panels = Vec::new();
    if let Some(Value::Array(t)) = r.details.get("tail_by_history") {
        let series = |key: &str, pct: &str| -> Vec<(f64, f64)> {
            t.iter()
                .filter_map(|e| Some((get(e, &["stored"])?, get(e, &[key, pct])? / 1000.0)))
                .collect()
        };
        panels.push(Panel {
            title: "tail_attempt_logs: 50 new entries (after_entry_index)",
            xlabel: "entries stored for the process (log scale)",
            series: vec![
                ("p50", "#1f77b4", series("plain", "p50_us")),
                ("p99", "#ff7f0e", series("plain", "p99_us")),
                (
                    "p50 with since_token",
                    "#2ca02c",
                    series("with_since_token", "p50_us"),
                ),
                (
                    "p99 with since_token",
                    "#d62728",
                    series("with_since_token", "p99_us"),
                ),
            ],
            target: Some((1.0, "target p50 ≤ 1 ms")),
            legend_top_left: false,
        });
    }
    if let Some(Value::Array(b)) = r.details.get("status_by_batch") {
        let series = |pct: &str| -> Vec<(f64, f64)> {
            b.iter()
                .filter_map(|e| Some((get(e, &["batch"])?, get(e, &["stats", pct])? / 1000.0)))
                .collect()
        };
        panels.push(Panel {
            title: "get_attempt_status: one call, N attempts",
            xlabel: "attempts per call (log scale)",
            series: vec![
                ("p50", "#1f77b4", series("p50_us")),
                ("p99", "#ff7f0e", series("p99_us")),
            ],
            target: Some((1.0, "target p50 ≤ 1 ms (batch of 100)")),
            legend_top_left: true,
        });
    }
    if panels.is_empty() {
        return None;
    }
    let (w, h) = (480.0, 320.0);
    let total_w = w * panels.len() as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"#,
        h + 20.0
    );
    for (i, p) in panels.iter().enumerate() {
        s += &panel_svg(p, i as f64 * w, 0.0, w, h);
    }
    s += &format!(
        r##"<text x="8" y="{:.1}" font-size="10" fill="#666">MCP over HTTP (stateless JSON) to the vk-observer binary; client-side time to the last byte; {} · {} cores · {}</text>"##,
        h + 12.0,
        r.machine.get("cpu").map(String::as_str).unwrap_or(""),
        r.machine.get("nproc").map(String::as_str).unwrap_or(""),
        r.machine.get("git_head").map(String::as_str).unwrap_or("")
    );
    s += "</svg>\n";
    Some(s)
}
