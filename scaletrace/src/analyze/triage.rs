//! `analyze --triage`: on a fleet too large for the exact analysis of every host, a first pass
//! over what grows with flows and seconds (the kernel's per-flow windows, the flows, each rank's
//! compute time per minute; never a raw RTT sample) names the suspect nodes and ranks, and the
//! exact analysis then reads only their hosts, the peers that recorded their links and a few
//! reference hosts. One hour of a 1,000-node fleet holds 23 G raw RTT samples at the recorder's
//! defaults and 230 M kernel windows: the exact views cost about 7.6 core-µs per window, more
//! than two cores have for the hour in minutes, while the triage's sums over a few columns of
//! the windows do (docs/fleet.md). The triage needs recall, not precision: every finding still
//! comes from the exact analysis with its floors, which clean hosts pass without one.
use std::collections::BTreeSet;

use anyhow::{Context as _, Result};
use serde::Deserialize;

use super::{params::Params, sources, DuckDb, Resources, Sources, VIEWS_SQL};
use crate::wording::count;

pub const TRIAGE_SQL: &str = include_str!("triage.sql");

/// `--triage auto` reads every host's raw samples up to this many hosts (64 nodes' 10 minutes
/// took 36 s, bench/fleet.py), and triages above it.
pub const AUTO_ABOVE_HOSTS: i64 = 64;
/// Suspect nodes (by their largest share of the fleet's queueing, losses or timeout stalls, and
/// the first two by each) and ranks (by their share of the compute above the median rank's or
/// of the time in collectives below it) the exact analysis reads.
const SUSPECT_NODES: usize = 4;
const SUSPECT_RANKS: usize = 2;
/// Hosts that recorded evidence on a suspect node's links, most first: a congested node's
/// queueing is measured by its senders. Eight of 32 peers' flows already put most queued
/// samples on the node they share; a peer without evidence on those links adds nothing to
/// them.
const PEERS_PER_SUSPECT: usize = 8;
/// Hosts with no part in any suspicion, spread over the fleet by a hash of their names: what
/// the exact analysis compares the suspects with when every suspect host is impaired.
const REFERENCE_HOSTS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Triage a store of more than 64 hosts, read smaller ones whole.
    Auto,
    /// Always triage.
    On,
    /// Always read every host (the exact analysis of the whole store).
    Off,
}

/// The node views of views.sql the triage reads (each statement ends a line with `;`).
const SHARED_STATEMENTS: [&str; 6] = [
    "CREATE OR REPLACE MACRO st_us(",
    "CREATE OR REPLACE MACRO st_layer_order(",
    "CREATE OR REPLACE VIEW st_flow_node AS",
    "CREATE OR REPLACE VIEW st_addr_owner AS",
    "CREATE OR REPLACE MACRO st_remote_node(",
    "CREATE OR REPLACE VIEW st_data_flow AS",
];

fn shared_statements() -> Result<String> {
    let mut out = String::new();
    for start in SHARED_STATEMENTS {
        let at = VIEWS_SQL
            .find(start)
            .with_context(|| format!("internal: `{start}` is not in views.sql"))?;
        let len = VIEWS_SQL[at..]
            .find(";\n")
            .with_context(|| format!("internal: `{start}` does not end"))?;
        out.push_str(&VIEWS_SQL[at..at + len + 2]);
    }
    Ok(out)
}

#[derive(Debug, Deserialize)]
struct SuspectNode {
    node: String,
    /// What it holds the largest share of: queueing, retransmits or timeout stalls.
    kind: String,
    share: f64,
    queued_s: f64,
    retransmits: f64,
    stall_s: f64,
}

/// Up to `SUSPECT_NODES` nodes by their largest share, and the first two by each kind of
/// evidence besides: a lossy node is not crowded out by four congested ones.
const SUSPECT_NODES_SQL: &str = "
SELECT node, kind, share, queued_s, retransmits::DOUBLE AS retransmits, stall_s FROM (
    SELECT *, CASE share WHEN queued_share THEN 'queueing' WHEN loss_share THEN 'retransmits'
                         ELSE 'timeout stalls' END AS kind,
           row_number() OVER (ORDER BY share DESC, node) AS overall,
           row_number() OVER (ORDER BY queued_share DESC, node) AS by_queueing,
           row_number() OVER (ORDER BY loss_share DESC, node) AS by_loss,
           row_number() OVER (ORDER BY stall_share DESC, node) AS by_stall
    FROM (SELECT *, greatest(queued_share, loss_share, stall_share) AS share FROM st_triage_node)
    WHERE share > 0)
WHERE overall <= {top} OR (by_queueing <= 2 AND queued_share > 0) OR (by_loss <= 2 AND loss_share > 0)
   OR (by_stall <= 2 AND stall_share > 0)
ORDER BY share DESC, node";

#[derive(Debug, Deserialize)]
struct SuspectRank {
    host: String,
    rank: i64,
    excess_s: f64,
    deficit_s: f64,
}

#[derive(Debug, Deserialize)]
struct Host {
    host: String,
}

/// What the triage chose, and why.
#[derive(Debug)]
pub struct Triage {
    pub hosts_in_store: i64,
    /// Ranks in the store's timelines (what `--baseline` is checked against).
    pub ranks_in_store: i64,
    /// One line per suspect: "node333: 50% of the fleet's queueing at one end of its links
    /// (38400 s of queued windows, 0 retransmitted segments, 0.0 s of timeout stalls)".
    pub suspects: Vec<String>,
    /// The hosts the exact analysis reads.
    pub drill: BTreeSet<String>,
    /// Sending flows without kernel windows (recorded before `flow_windows` existed, or with
    /// `--flow-window 0s`): the triage cannot see their queueing, only their losses.
    pub flows_without_windows: i64,
    pub sending_flows: i64,
    pub seconds: f64,
}

impl Triage {
    /// The lines printed before the findings: the fleet, the suspects, the hosts read.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "scaletrace analyze: triage of {} in {:.1} s (kernel windows, flows and per-minute timelines, no raw RTT samples): {}; the findings below come from the exact analysis of {} of the {} hosts (--triage off reads every host)\n",
            count(self.hosts_in_store, "host"),
            self.seconds,
            match self.suspects.len() {
                0 => "no suspect".to_string(),
                n => count(n as i64, "suspect"),
            },
            self.drill.len(),
            self.hosts_in_store,
        );
        for s in &self.suspects {
            out.push_str(&format!("  suspect: {s}\n"));
        }
        if self.flows_without_windows > 0 {
            out.push_str(&format!(
                "  warning: {} of {} have no kernel windows (recorded with --flow-window 0s or by an older scaletrace): the triage saw their losses, not their queueing\n",
                self.flows_without_windows,
                count(self.sending_flows, "sending flow")
            ));
        }
        let hosts: Vec<&str> = self.drill.iter().map(String::as_str).collect();
        out.push_str(&format!("  hosts read: {}\n", hosts.join(" ")));
        out
    }
}

/// The hosts of the store's flows and timelines: what is counted, and what the references are
/// drawn from.
const HOSTS: &str = "(SELECT host FROM flows UNION SELECT host FROM gpu_events)";

#[derive(Deserialize)]
struct Count {
    n: i64,
}

/// One count from the triage's database.
fn count_of(db: &DuckDb, query: &str) -> Result<i64> {
    Ok(db.rows::<Count>(query)?.first().map_or(0, |r| r.n))
}

/// Runs the triage when `mode` asks for it (None: read every host).
pub fn run(
    mode: Mode,
    sources: &Sources,
    params: &Params,
    duckdb_lib: Option<&std::path::Path>,
    resources: &Resources,
) -> Result<Option<Triage>> {
    if mode == Mode::Off {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let db = DuckDb::open(duckdb_lib)?;
    db.execute(&resources.settings_sql())
        .context("--memory-limit / --temp-dir")?;
    db.execute(&format!(
        "SET TimeZone = 'UTC';\n{}\n{}\n{}",
        sources::views_sql(sources),
        params.sql(),
        shared_statements()?
    ))
    .context("creating the triage's table views")?;
    // before the triage's views, whose evidence is computed when created: a store read whole
    // pays for no pass over its windows
    let hosts_in_store = count_of(&db, &format!("SELECT count(*) AS n FROM {HOSTS}"))?;
    if mode == Mode::Auto && hosts_in_store <= AUTO_ABOVE_HOSTS {
        return Ok(None);
    }
    db.execute(TRIAGE_SQL)
        .context("computing the triage's evidence")?;
    let ranks_in_store = count_of(
        &db,
        "SELECT count(*) AS n FROM (SELECT DISTINCT host, rank FROM gpu_events WHERE rank IS NOT NULL)",
    )?;
    #[derive(Deserialize)]
    struct Coverage {
        sending: i64,
        without_windows: i64,
    }
    let coverage = db
        .rows::<Coverage>(
            "SELECT count(*) AS sending, count(*) FILTER (WHERE windows = 0) AS without_windows
             FROM st_triage_flow_evidence, st_params p WHERE bytes_sent >= p.min_flow_bytes",
        )?
        .into_iter()
        .next()
        .context("triage: no count of the flows")?;
    let nodes: Vec<SuspectNode> = db
        .rows(&SUSPECT_NODES_SQL.replace("{top}", &SUSPECT_NODES.to_string()))
        .context("triage: the nodes")?;
    let ranks: Vec<SuspectRank> = db
        .rows(&format!(
            "SELECT host, rank, excess_s, deficit_s FROM st_triage_rank
             ORDER BY greatest(excess_share, deficit_share) DESC, host, rank LIMIT {SUSPECT_RANKS}"
        ))
        .context("triage: the ranks")?;
    let mut suspects = Vec::new();
    let mut drill = BTreeSet::new();
    for n in &nodes {
        suspects.push(format!(
            "{}: {:.0}% of the fleet's {} at one end of its links ({:.0} s of queued windows, {} retransmitted segments, {:.1} s of timeout stalls)",
            n.node,
            100.0 * n.share,
            n.kind,
            n.queued_s,
            n.retransmits,
            n.stall_s
        ));
        let node = sources::quote(&n.node);
        let own: Vec<Host> = db.rows(&format!(
            "SELECT DISTINCT host FROM st_flow_node WHERE node = {node} ORDER BY host"
        ))?;
        // the peers with most of the suspect's own kind of evidence first
        let order = if n.kind == "retransmits" {
            "retransmits DESC, queued_s + stall_s DESC"
        } else {
            "queued_s + stall_s DESC, retransmits DESC"
        };
        let peers: Vec<Host> = db.rows(&format!(
            "SELECT host FROM st_triage_link WHERE node = {node}
               AND host NOT IN (SELECT host FROM st_flow_node WHERE node = {node})
               AND (queued_s + stall_s > 0 OR retransmits > 0)
             ORDER BY {order}, host LIMIT {PEERS_PER_SUSPECT}"
        ))?;
        drill.extend(own.into_iter().chain(peers).map(|h| h.host));
    }
    for r in &ranks {
        suspects.push(format!(
            "rank {} ({}): {:.1} s of compute above the median rank's, {:.1} s less time in collectives (the others waited for it)",
            r.rank, r.host, r.excess_s, r.deficit_s
        ));
        drill.insert(r.host.clone());
    }
    let references: Vec<Host> = db.rows(&format!(
        "SELECT host FROM {HOSTS} WHERE NOT {} ORDER BY hash(host), host LIMIT {REFERENCE_HOSTS}",
        sources::host_in(&drill)
    ))?;
    drill.extend(references.into_iter().map(|h| h.host));
    Ok(Some(Triage {
        hosts_in_store,
        ranks_in_store,
        suspects,
        drill,
        flows_without_windows: coverage.without_windows,
        sending_flows: coverage.sending,
        seconds: started.elapsed().as_secs_f64(),
    }))
}
