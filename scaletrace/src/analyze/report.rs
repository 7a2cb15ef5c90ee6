//! The self-contained HTML report: overview, every finding by category, and SVG charts of
//! the data behind them (RTT and throughput timelines, RTT distributions, retransmits per
//! host, per-rank collective wait and GPU collective time as heatmaps).
use std::{collections::BTreeMap, fmt::Write as _};

use anyhow::Result;
use serde::Deserialize;

use super::{
    svg::{escape, heatmap, line_chart, Series},
    withheld_by_reason, AnalyzeArgs, BelowFloors, DuckDb, Finding, Overview, CATEGORIES,
};

/// Flows worth plotting: the worst tails and the most retransmits.
const FOCUS_FLOWS: &str = "
    SELECT host, flow_id, flow_label FROM (
        SELECT host, flow_id, flow_label FROM st_latency_flow
        ORDER BY p99_vs_fleet DESC NULLS LAST LIMIT 5)
    UNION
    SELECT host, flow_id, flow_label FROM (
        SELECT host, flow_id, flow_label FROM st_retrans_flow WHERE retransmits > 0
        ORDER BY retransmits DESC LIMIT 3)";

#[derive(Deserialize)]
struct FlowPoint {
    label: String,
    x: f64,
    srtt_p50_us: Option<f64>,
    throughput_bps: Option<f64>,
}

#[derive(Deserialize)]
struct Quantiles {
    label: String,
    q: Vec<Option<f64>>,
}

#[derive(Deserialize)]
struct Cell {
    row: String,
    col: i64,
    v: Option<f64>,
}

#[derive(Deserialize)]
struct HostPoint {
    host: String,
    x: f64,
    retransmits: f64,
}

fn series_by<T>(
    rows: &[T],
    key: impl Fn(&T) -> &str,
    point: impl Fn(&T) -> Option<(f64, f64)>,
) -> Vec<Series> {
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        if let Some(p) = point(r) {
            by.entry(key(r).to_string()).or_default().push(p);
        }
    }
    by.into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect()
}

fn grid(cells: Vec<Cell>) -> Vec<(String, Vec<Option<f64>>)> {
    let cols: Vec<i64> = {
        let mut c: Vec<i64> = cells.iter().map(|c| c.col).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let index: BTreeMap<i64, usize> = cols.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let mut rows: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for c in cells {
        let row = rows.entry(c.row).or_insert_with(|| vec![None; cols.len()]);
        row[index[&c.col]] = c.v;
    }
    rows.into_iter().collect()
}

#[derive(Deserialize, Default)]
struct Presence {
    network: bool,
    collectives: bool,
    windows: bool,
    steps: bool,
}

fn charts(db: &DuckDb) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    // Only the charts the input can fill: GPU-only input gets no empty network charts.
    let has: Presence = db
        .rows(
            "SELECT (SELECT count(*) FROM rtt) > 0 AS network,
                    (SELECT count(*) FROM st_collective_rank_step) > 0 AS collectives,
                    (SELECT count(*) FROM st_rank_window) > 0 AS windows,
                    (SELECT count(*) FROM st_rank_step) > 0 AS steps",
        )?
        .pop()
        .unwrap_or_default();
    if has.network {
        let t0 = "(SELECT min(window_start) FROM st_flow_window)";
        let flow_points: Vec<FlowPoint> = db.rows(&format!(
            "SELECT f.flow_label AS label, epoch(w.window_start) - epoch({t0}) AS x,
                    w.srtt_p50_us, w.throughput_bps
             FROM st_flow_window w JOIN ({FOCUS_FLOWS}) f USING (host, flow_id)
             WHERE w.samples > 0"
        ))?;
        out.push((
            "RTT over time".to_string(),
            line_chart(
                "Median RTT per window: flows with the worst tails or most retransmits",
                "seconds since the first window",
                "RTT (µs, log)",
                &series_by(
                    &flow_points,
                    |p| &p.label,
                    |p| p.srtt_p50_us.map(|v| (p.x, v)),
                ),
                true,
            ),
        ));
        out.push((
            "Throughput over time".to_string(),
            line_chart(
                "Throughput per window (same flows)",
                "seconds since the first window",
                "Gbit/s",
                &series_by(
                    &flow_points,
                    |p| &p.label,
                    |p| p.throughput_bps.map(|v| (p.x, v / 1e9)),
                ),
                false,
            ),
        ));
        let levels: Vec<String> = (0..=50)
            .map(|i| format!("{:.2}", i as f64 / 50.0))
            .collect();
        let quantiles: Vec<Quantiles> = db.rows(&format!(
            "SELECT f.flow_label AS label, quantile_cont(r.srtt_us, [{}]) AS q
             FROM rtt r JOIN ({FOCUS_FLOWS}) f USING (host, flow_id) GROUP BY f.flow_label",
            levels.join(", ")
        ))?;
        let cdf: Vec<Series> = quantiles
            .iter()
            .map(|q| Series {
                name: q.label.clone(),
                points: q
                    .q
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (i as f64 * 2.0, v)))
                    .collect(),
            })
            .collect();
        out.push((
            "RTT distribution".to_string(),
            line_chart(
                "RTT by percentile (same flows)",
                "percentile",
                "RTT (µs, log)",
                &cdf,
                true,
            ),
        ));
        let hosts: Vec<HostPoint> = db.rows(&format!(
            "SELECT host, epoch(window_start) - epoch({t0}) AS x, sum(retransmits)::DOUBLE AS retransmits
             FROM st_flow_window
             WHERE host IN (SELECT host FROM st_flow_window GROUP BY host HAVING sum(retransmits) > 0
                            ORDER BY sum(retransmits) DESC LIMIT 6)
             GROUP BY host, window_start"
        ))?;
        out.push((
            "Retransmits per host".to_string(),
            line_chart(
                "Retransmits per window, hosts with the most",
                "seconds since the first window",
                "retransmits",
                &series_by(&hosts, |p| &p.host, |p| Some((p.x, p.retransmits))),
                false,
            ),
        ));
    }
    if has.collectives {
        // The most frequent collective; at most ~150 step columns.
        let waits: Vec<Cell> = db.rows(
            "WITH c AS (SELECT source, collective FROM st_collective_rank_step
                        GROUP BY ALL ORDER BY count(*) DESC LIMIT 1),
                  k AS (SELECT greatest(1, ceil(max(step) / 150))::BIGINT AS every FROM st_collective_rank_step)
             SELECT 'rank ' || lpad(rank::VARCHAR, 4, ' ') AS row, step AS col, wait_us / 1000.0 AS v
             FROM st_collective_rank_step JOIN c USING (source, collective), k
             WHERE step % k.every = 0",
        )?;
        out.push((
            "Collective wait per rank".to_string(),
            heatmap(
                "Time each rank waited for the last arrival, per step of the most frequent collective",
                "step (sampled)",
                "wait (ms)",
                &grid(waits),
                None,
            ),
        ));
    }
    if has.windows {
        let comm: Vec<Cell> = db.rows(
            "WITH k AS (SELECT greatest(1, ceil((max(w) - min(w)) / 300))::BIGINT AS every, min(w) AS w0 FROM st_rank_window)
             SELECT host || ' rank ' || lpad(coalesce(rank::VARCHAR, '?'), 4, ' ') AS row, w - k.w0 AS col, comm_frac AS v
             FROM st_rank_window, k WHERE (w - k.w0) % k.every = 0",
        )?;
        out.push((
            "Time in collectives".to_string(),
            heatmap(
                "Share of each window's traced time each rank spent in collectives (white 0, darkest 100 %)",
                "window",
                "share",
                &grid(comm),
                Some(1.0),
            ),
        ));
    }
    if has.steps {
        let exposed: Vec<Cell> = db.rows(
            "WITH k AS (SELECT greatest(1, ceil((max(step) - min(step)) / 150))::BIGINT AS every, min(step) AS s0 FROM st_rank_step)
             SELECT host || ' rank ' || lpad(rank::VARCHAR, 4, ' ') AS row, step - k.s0 AS col,
                    exposed_comm_us / nullif(step_us, 0) AS v
             FROM st_rank_step, k WHERE (step - k.s0) % k.every = 0",
        )?;
        out.push((
            "Exposed communication per step".to_string(),
            heatmap(
                "Share of each training step (ProfilerStep) spent in communication not hidden behind compute, per rank",
                "step",
                "share",
                &grid(exposed),
                Some(1.0),
            ),
        ));
    }
    Ok(out)
}

#[derive(Deserialize)]
struct RankSteps {
    host: String,
    rank: i64,
    steps: i64,
    median_step_ms: f64,
    busy: f64,
    compute: f64,
    comm: f64,
    overlap: f64,
    exposed_comm: f64,
    idle: f64,
}

/// Per rank: its training steps (ProfilerStep) and how each was spent, as shares of step time.
fn rank_steps(db: &DuckDb, h: &mut String) -> Result<()> {
    let rows: Vec<RankSteps> = db.rows(
        "SELECT host, rank, count(*) AS steps, median(step_us) / 1000.0 AS median_step_ms,
                sum(busy_us) / sum(step_us) AS busy, sum(compute_us) / sum(step_us) AS compute,
                sum(comm_us) / sum(step_us) AS comm, sum(overlap_us) / sum(step_us) AS overlap,
                sum(exposed_comm_us) / sum(step_us) AS exposed_comm, sum(idle_us) / sum(step_us) AS idle
         FROM st_rank_step WHERE step_us > 0 GROUP BY host, rank ORDER BY rank, host",
    )?;
    h.push_str("<h2>Training steps per rank</h2>");
    if rows.is_empty() {
        h.push_str("<p class=\"none\">no ProfilerStep annotations in the imported timelines</p>");
        return Ok(());
    }
    h.push_str("<table><tr><th>rank</th><th>host</th><th>steps</th><th>median step</th><th>busy</th><th>compute</th><th>communication</th><th>overlap</th><th>exposed comm.</th><th>idle</th></tr>");
    let pct = |v: f64| format!("{:.1} %", 100.0 * v);
    for r in rows {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2} ms</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.rank,
            escape(&r.host),
            r.steps,
            r.median_step_ms,
            pct(r.busy),
            pct(r.compute),
            pct(r.comm),
            pct(r.overlap),
            pct(r.exposed_comm),
            pct(r.idle)
        );
    }
    h.push_str("</table>");
    Ok(())
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;vertical-align:top}
th{background:#f0f0f0}h2{border-bottom:1px solid #ccc;margin-top:1.5em}.none{color:#777}.chart{display:block;margin:1em 0}";

/// What the analysis concluded, as `analyze` printed it.
#[derive(Clone, Copy)]
pub struct Outcome<'a> {
    pub overview: &'a Overview,
    pub findings: &'a [Finding],
    pub withheld: &'a [Finding],
    pub below_floors: &'a [BelowFloors],
    pub not_analyzed: &'a [(&'a str, String)],
    /// The triage's lines (`analyze --triage`): the report covers its hosts only.
    pub triage: Option<&'a str>,
}

pub fn render(db: &DuckDb, outcome: Outcome, args: &AnalyzeArgs) -> Result<String> {
    let Outcome {
        overview,
        findings,
        withheld,
        below_floors,
        not_analyzed,
        triage,
    } = outcome;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>scaletrace analysis</title><style>{STYLE}</style></head><body>"
    );
    let _ = write!(
        h,
        "<h1>scaletrace analysis</h1><p>{}; window {}; sources: {}</p>",
        escape(&overview.describe()),
        humantime::format_duration(args.window),
        escape(&args.paths.join(", "))
    );
    // the report covers the triaged hosts only: said where it is read
    if let Some(t) = triage {
        let _ = write!(h, "<pre>{}</pre>", escape(t));
    }
    h.push_str("<h2>Findings</h2>");
    for (category, title, _) in CATEGORIES {
        let _ = write!(h, "<h3>{}</h3>", escape(title));
        if let Some((_, why)) = not_analyzed.iter().find(|(c, _)| *c == category) {
            let _ = write!(h, "<p class=\"none\">not analyzed: {}</p>", escape(why));
            continue;
        }
        let of: Vec<&Finding> = findings.iter().filter(|f| f.category == category).collect();
        if of.is_empty() {
            h.push_str("<p class=\"none\">nothing found</p>");
            if category == "slowdown" && !below_floors.is_empty() {
                h.push_str(
                    "<p class=\"none\">Below the floors (not findings):</p><ul class=\"none\">",
                );
                for b in below_floors {
                    let _ = write!(h, "<li>{}</li>", escape(&b.describe()));
                }
                h.push_str("</ul>");
            }
        } else {
            h.push_str("<table><tr><th>#</th><th>scope</th><th>subject</th><th>score</th><th>finding</th></tr>");
            for f in of {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    f.rank_in_scope,
                    escape(&f.scope),
                    escape(&f.subject),
                    f.score.map(|s| format!("{s:.3}")).unwrap_or_default(),
                    escape(&f.summary)
                );
                for (label, value) in f.details() {
                    let _ = write!(
                        h,
                        "<tr><td></td><td></td><td></td><td></td><td><em>{label}:</em> {}</td></tr>",
                        escape(value)
                    );
                }
            }
            h.push_str("</table>");
        }
        let held: Vec<&Finding> = withheld.iter().filter(|f| f.category == category).collect();
        for (reason, of) in withheld_by_reason(&held) {
            let _ = write!(
                h,
                "<p class=\"none\">{} (not findings):</p><ul class=\"none\">",
                escape(reason)
            );
            for f in of {
                let _ = write!(h, "<li>[{}] {}</li>", escape(&f.scope), escape(&f.summary));
            }
            h.push_str("</ul>");
        }
    }
    rank_steps(db, &mut h)?;
    h.push_str("<h2>Charts</h2>");
    for (title, svg) in charts(db)? {
        let _ = write!(h, "<h3>{}</h3>{svg}", escape(&title));
    }
    h.push_str("<p class=\"none\">Every number here comes from the views printed by <code>scaletrace sql</code>; see docs/queries.md.</p></body></html>\n");
    Ok(h)
}
