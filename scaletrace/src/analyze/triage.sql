-- The fleet pass of `analyze --triage` (analyze/triage.rs): which hosts of a large fleet the
-- exact analysis should read. It reads what grows with flows and seconds (the kernel's
-- per-flow windows, the flows, each rank's compute time per minute), never a raw RTT sample,
-- and it names suspects, not causes: the findings come from the exact analysis over the
-- suspects' hosts, the peers that recorded their links and a few references, with the same
-- floors as on a whole store. Runs after the table views, `st_params` and the node views of
-- views.sql that it shares (`st_flow_node`, `st_data_flow`: triage.rs names them).

-- Each data flow with its nodes and its path's minimum RTT as the kernel keeps it, else (a flow
-- whose `flows` rows have none) its smallest smoothed RTT in its windows, as the exact analysis
-- falls back; only those flows' windows are read for it.
CREATE OR REPLACE VIEW st_triage_flow AS
WITH m AS (
    SELECT host, flow_id, min(nullif(min_rtt_us, 0)) AS min_rtt_us,
           sum(coalesce(total_retrans, 0)) AS retransmits, sum(coalesce(rto_recovery_ns, 0)) / 1e9 AS stall_s
    FROM flows GROUP BY ALL),
fallback AS (
    SELECT w.host, w.flow_id, min(nullif(w.srtt_min_us, 0)) AS srtt_min_us
    FROM flow_windows w SEMI JOIN (SELECT host, flow_id FROM m WHERE min_rtt_us IS NULL) n USING (host, flow_id)
    GROUP BY ALL)
SELECT d.host, d.flow_id, d.node, d.remote_node, d.bytes_sent,
       coalesce(m.min_rtt_us, b.srtt_min_us) AS min_rtt_us, m.retransmits, m.stall_s
FROM st_data_flow d JOIN m USING (host, flow_id) LEFT JOIN fallback b USING (host, flow_id);

-- Per flow: the seconds of its kernel windows whose RTT's 90th percentile lay at least
-- `min_queueing_us` above its path's minimum (a tenth of the window's RTT updates or more
-- queued: an AllReduce's burst through a congested port fills part of a step, not all of it),
-- with its retransmitted segments and timeout stall time from `flows` (exact, and there for
-- recordings without windows too). Only sending flows are judged on queueing, as in the exact
-- analysis; every flow's losses count.
CREATE OR REPLACE VIEW st_triage_flow_evidence AS
WITH q AS (
    SELECT w.host, w.flow_id, count(*) AS windows,
           coalesce(sum(w.window_ns) FILTER (WHERE f.bytes_sent >= p.min_flow_bytes
                                             AND w.srtt_p90_us - f.min_rtt_us >= p.min_queueing_us), 0) / 1e9 AS queued_s
    FROM flow_windows w JOIN st_triage_flow f USING (host, flow_id), st_params p
    GROUP BY ALL)
SELECT f.host, f.flow_id, f.node, f.remote_node, f.bytes_sent, coalesce(q.windows, 0) AS windows,
       coalesce(q.queued_s, 0) AS queued_s, f.retransmits, f.stall_s
FROM st_triage_flow f LEFT JOIN q USING (host, flow_id);
-- computed once: the node shares, the links and the coverage line each read it, and each
-- reading would scan every window again (230 M in a 1,000-node hour)
CREATE OR REPLACE TEMP TABLE st_triage_flow_evidence__computed AS SELECT * FROM st_triage_flow_evidence;
CREATE OR REPLACE VIEW st_triage_flow_evidence AS SELECT * FROM st_triage_flow_evidence__computed;

-- The hosts that recorded each node's links, with the evidence on those links: where the
-- exact analysis finds a suspect node's queued samples and retransmits (a congested node's
-- inbound flows are recorded by its senders).
CREATE OR REPLACE VIEW st_triage_link AS
SELECT node, host, sum(queued_s) AS queued_s, sum(retransmits) AS retransmits, sum(stall_s) AS stall_s
FROM (SELECT node, host, queued_s, retransmits, stall_s FROM st_triage_flow_evidence
      UNION ALL SELECT remote_node, host, queued_s, retransmits, stall_s FROM st_triage_flow_evidence)
GROUP BY ALL;

-- Each node's share of the fleet's queueing, losses and timeout stalls, counted at both ends
-- of every flow (so the shares of all nodes add up to 2): a congested port, a lossy link or a
-- slow NIC gathers its peers' evidence on itself, where evidence spread over the fleet (load
-- everywhere) gives no node much of it. Its links' evidence over every host that recorded them.
CREATE OR REPLACE VIEW st_triage_node AS
WITH n AS (SELECT node, sum(queued_s) AS queued_s, sum(retransmits) AS retransmits, sum(stall_s) AS stall_s
           FROM st_triage_link GROUP BY node)
SELECT n.*,
       coalesce(n.queued_s / nullif(sum(n.queued_s) OVER (), 0), 0) AS queued_share,
       coalesce(n.retransmits / nullif(sum(n.retransmits) OVER (), 0), 0) AS loss_share,
       coalesce(n.stall_s / nullif(sum(n.stall_s) OVER (), 0), 0) AS stall_share
FROM n;

-- Each rank, per minute, against the median rank of that minute: its compute time (GPU work
-- outside collectives) above the median's, and its time in collectives below it. A straggler
-- does more of its own work, and waits least in collectives since every other rank waits for
-- it there: the second shows it in jobs without GPU kernels too (gloo on CPUs, a data loader
-- or host stall). Collectives are counted in each rank's innermost layer (`st_layer_order`, as
-- the exact analysis matches them), not once per layer. A rank whose excess or deficit adds up
-- to less than the verdict's floor (`min_lost_s`) cannot have cost the job that much: no
-- suspect (in a uniform fleet every minute has ranks a few µs off its median).
CREATE OR REPLACE VIEW st_triage_rank AS
WITH by_layer AS (
    SELECT host, rank, st_us(ts) // 60000000 AS minute, st_layer_order(comm_source) AS layer,
           sum(dur_ns) FILTER (WHERE on_gpu AND collective IS NULL) AS own_ns,
           sum(dur_ns) FILTER (WHERE collective IS NOT NULL) AS comm_ns
    FROM gpu_events WHERE rank IS NOT NULL GROUP BY ALL),
innermost AS (SELECT host, rank, min(layer) AS layer FROM by_layer WHERE comm_ns > 0 GROUP BY ALL),
m AS (
    SELECT b.host, b.rank, b.minute, coalesce(sum(b.own_ns), 0) AS own_ns,
           coalesce(sum(b.comm_ns) FILTER (WHERE b.layer = i.layer), 0) AS comm_ns
    FROM by_layer b LEFT JOIN innermost i USING (host, rank) GROUP BY ALL),
x AS (
    SELECT host, rank, greatest(own_ns - median(own_ns) OVER (PARTITION BY minute), 0) AS excess_ns,
           greatest(median(comm_ns) OVER (PARTITION BY minute) - comm_ns, 0) AS deficit_ns
    FROM m),
r AS (SELECT host, rank, sum(excess_ns) / 1e9 AS excess_s, sum(deficit_ns) / 1e9 AS deficit_s FROM x GROUP BY ALL)
SELECT r.*, coalesce(r.excess_s / nullif(sum(r.excess_s) OVER (), 0), 0) AS excess_share,
       coalesce(r.deficit_s / nullif(sum(r.deficit_s) OVER (), 0), 0) AS deficit_share
FROM r, st_params p WHERE greatest(r.excess_s, r.deficit_s) >= p.min_lost_s;
