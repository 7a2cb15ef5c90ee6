//! Small SVG charts for the HTML report: line charts and heatmaps, written directly (no
//! JavaScript, no fonts to embed), so the report is one self-contained file.
use std::fmt::Write as _;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 270.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 45.0;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Round tick values covering [lo, hi].
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    // also catches NaN bounds
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 {
        out.push(t);
        t += step;
    }
    out
}

/// 1-2-5 ticks on a log10 axis (values are log10 already); linear ticks if too few fit.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for k in (lo.floor() as i32)..=(hi.ceil() as i32) {
        for m in [1.0f64, 2.0, 5.0] {
            let t = (m * 10f64.powi(k)).log10();
            if t >= lo - 1e-9 && t <= hi + 1e-9 {
                out.push(t);
            }
        }
    }
    if out.len() < 2 {
        return ticks(lo, hi, 5);
    }
    out
}

fn label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn open_svg(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        escape(title)
    );
}

/// Lines over a shared x axis; `log_y` plots log10 of positive values.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> String {
    let tf = |y: f64| if log_y { y.max(1e-9).log10() } else { y };
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (x, tf(y))))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let mut out = String::new();
    open_svg(&mut out, title);
    if all.is_empty() {
        out.push_str(r#"<text x="100" y="150">no data</text></svg>"#);
        return out;
    }
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    let (mut y0, mut y1) = (f64::MAX, f64::MIN);
    for &(x, y) in &all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !log_y {
        y0 = y0.min(0.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let pw = WIDTH - LEFT - RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>"##
    );
    for t in ticks(x0, x1, 8) {
        let _ = write!(
            out,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle">{4}</text>"##,
            sx(t),
            TOP,
            TOP + ph,
            TOP + ph + 14.0,
            label(t)
        );
    }
    let y_ticks = if log_y {
        log_ticks(y0, y1)
    } else {
        ticks(y0, y1, 5)
    };
    for t in y_ticks {
        let shown = if log_y { 10f64.powf(t) } else { t };
        let _ = write!(
            out,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{3:.1}" y="{4:.1}" text-anchor="end">{5}</text>"##,
            LEFT,
            sy(t),
            LEFT + pw,
            LEFT - 4.0,
            sy(t) + 4.0,
            label(shown)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 8.0,
        escape(x_label),
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| (x, tf(y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="1.6" points="{}"/>"#,
            pts.join(" ")
        );
        let ly = TOP + 12.0 + 16.0 * i as f64;
        let _ = write!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}"><title>{}</title>{}</text>"#,
            LEFT + pw + 10.0,
            ly - 4.0,
            LEFT + pw + 26.0,
            ly,
            escape(&s.name),
            escape(&elide_middle(&s.name, LEGEND_CHARS))
        );
    }
    out.push_str("</svg>");
    out
}

/// Characters of a series name the legend has room for.
const LEGEND_CHARS: usize = 44;

/// `s` in at most `n` characters, cut in the middle: a flow's label is
/// `host local:port -> remote:port`, and cut at its end it lost the remote port, the part that
/// tells two flows of one host apart. The whole name is the legend entry's tooltip.
fn elide_middle(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= n {
        return s.to_string();
    }
    let head = (n - 1) / 2;
    let tail = n - 1 - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// Cells coloured from white (0) to red (the largest value); None is grey.
/// `full_scale`: the value drawn darkest, for quantities with a natural maximum (a share is
/// 1.0: 18 % must not look like 100 % because nothing else was higher); None: the data's maximum.
pub fn heatmap(
    title: &str,
    x_label: &str,
    value_label: &str,
    rows: &[(String, Vec<Option<f64>>)],
    full_scale: Option<f64>,
) -> String {
    let mut out = String::new();
    open_svg(&mut out, title);
    let cols = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    if rows.is_empty() || cols == 0 {
        out.push_str(r#"<text x="100" y="150">no data</text></svg>"#);
        return out;
    }
    let max = full_scale.unwrap_or_else(|| {
        rows.iter()
            .flat_map(|r| r.1.iter().flatten())
            .fold(0.0f64, |m, v| m.max(*v))
    });
    let pw = WIDTH - LEFT - RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let cw = pw / cols as f64;
    let rh = ph / rows.len() as f64;
    for (r, (name, values)) in rows.iter().enumerate() {
        let y = TOP + r as f64 * rh;
        for (c, v) in values.iter().enumerate() {
            let fill = match v {
                None => "#cccccc".to_string(),
                Some(v) => {
                    let t = if max > 0.0 {
                        (v / max).clamp(0.0, 1.0)
                    } else {
                        0.0
                    };
                    let gb = (255.0 * (1.0 - t)).round() as u8;
                    format!("rgb(255,{gb},{gb})")
                }
            };
            let _ = write!(
                out,
                r#"<rect class="cell" x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}"/>"#,
                LEFT + c as f64 * cw,
                y,
                cw + 0.3,
                rh + 0.3
            );
        }
        if rows.len() <= 40 || r % (rows.len() / 20).max(1) == 0 {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 4.0,
                y + rh / 2.0 + 4.0,
                escape(name)
            );
        }
    }
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
        LEFT + pw / 2.0,
        HEIGHT - 8.0,
        escape(x_label)
    );
    // colour scale
    let lx = LEFT + pw + 20.0;
    for i in 0..10 {
        let gb = (255.0 * (1.0 - i as f64 / 9.0)).round() as u8;
        let _ = write!(
            out,
            r##"<rect x="{lx}" y="{:.1}" width="16" height="14" fill="rgb(255,{gb},{gb})" stroke="#eee"/>"##,
            TOP + 140.0 - 14.0 * i as f64
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}">{}</text><text x="{:.1}" y="{:.1}">0</text><text x="{lx}" y="{:.1}">{}</text>"#,
        lx + 20.0,
        TOP + 14.0 * 0.0 + 14.0,
        label(max),
        lx + 20.0,
        TOP + 152.0,
        TOP + 175.0,
        escape(value_label)
    );
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(3.0, 97.0, 4);
        assert!(t.first().unwrap() >= &3.0 && t.last().unwrap() <= &97.0);
        assert_eq!(ticks(5.0, 5.0, 4), vec![5.0]);
        let l: Vec<f64> = log_ticks(1.5f64.log10(), 300f64.log10())
            .iter()
            .map(|t| (10f64.powf(*t) * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(l, vec![2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
    }

    #[test]
    fn line_chart_draws_one_polyline_per_series_and_escapes_names() {
        let s = vec![
            Series {
                name: "a<b".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
            },
            Series {
                name: "c".into(),
                points: vec![(0.0, 3.0), (1.0, f64::NAN)],
            },
        ];
        let svg = line_chart("t", "x", "y", &s, true);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(!svg.contains("NaN"));
        assert!(line_chart("t", "x", "y", &[], false).contains("no data"));
    }

    #[test]
    fn a_long_legend_name_keeps_both_ends_and_is_whole_in_its_tooltip() {
        let name = "node2 10.203.232.3:40544 -> 10.203.232.2:39977 (rank 3)";
        let short = elide_middle(name, LEGEND_CHARS);
        assert_eq!(short.chars().count(), LEGEND_CHARS);
        assert!(
            short.starts_with("node2 10.203.232.3") && short.ends_with(":39977 (rank 3)"),
            "{short}"
        );
        assert_eq!(elide_middle("node0", LEGEND_CHARS), "node0");
        let s = vec![Series {
            name: name.into(),
            points: vec![(0.0, 1.0), (1.0, 2.0)],
        }];
        let svg = line_chart("t", "x", "y", &s, false);
        assert!(
            svg.contains(&format!("<title>{}</title>", escape(name))),
            "{svg}"
        );
    }

    #[test]
    fn heatmap_scales_cells_to_the_maximum() {
        let rows = vec![("r0".to_string(), vec![Some(0.0), Some(10.0), None])];
        let svg = heatmap("t", "x", "v", &rows, None);
        assert!(svg.contains("rgb(255,255,255)"));
        assert!(svg.contains(r#"fill="rgb(255,0,0)""#));
        assert!(svg.contains("#cccccc"));
    }
}
