-- scaletrace analysis views (DuckDB).
--
-- Expects one view per scaletrace table (flows, rtt, retransmits, interfaces, nccl_calls,
-- gpu_events, gpu_devices, ...) and st_params; `scaletrace sql DIR` prints those first.
-- Every view here is plain SQL over them: query any view from a notebook, or read `findings`.
-- Times are in µs since the epoch (DuckDB timestamps with time zone have µs precision).

------------------------------------------------------------------------------------------
-- Building blocks
------------------------------------------------------------------------------------------

-- One row per flow, with the interface that owns its local address (the address itself when
-- the interface is unknown, e.g. a flow in another network namespace).
CREATE OR REPLACE VIEW st_flow AS
SELECT f.host, f.flow_id, f.local_addr, f.local_port, f.remote_addr, f.remote_port,
       coalesce(i.name, f.local_addr) AS local_iface,
       f.host || ' ' || f.local_addr || ':' || f.local_port || ' -> ' || f.remote_addr || ':' || f.remote_port AS flow_label,
       f.start, f."end", f.duration_ns, f.bytes_sent, f.bytes_received, f.data_segs_out,
       f.total_retrans, f.pid, f.comm
FROM flows f
LEFT JOIN (SELECT host, addr, any_value(name) AS name FROM interfaces GROUP BY ALL) i
       ON i.host = f.host AND i.addr = f.local_addr;

-- RTT samples per flow and window: latency percentiles and bytes moved.
CREATE OR REPLACE VIEW st_rtt_window AS
WITH r AS (
    SELECT host, flow_id, epoch_us(ts) // p.window_us AS w, srtt_us, min_rtt_us,
           bytes_acked + bytes_received AS bytes
    FROM rtt, st_params p),
g AS (
    SELECT host, flow_id, w, count(*) AS samples,
           quantile_cont(srtt_us, 0.5) AS srtt_p50_us, quantile_cont(srtt_us, 0.99) AS srtt_p99_us,
           max(srtt_us) AS srtt_max_us, min(nullif(min_rtt_us, 0)) AS min_rtt_us,
           max(bytes) AS bytes_max, min(bytes) AS bytes_min
    FROM r GROUP BY ALL)
SELECT host, flow_id, w, samples, srtt_p50_us, srtt_p99_us, srtt_max_us, min_rtt_us,
       -- bytes since the previous window that had a sample (or since the first sample)
       bytes_max - coalesce(lag(bytes_max) OVER (PARTITION BY host, flow_id ORDER BY w), bytes_min) AS bytes
FROM g;

-- Each flow's own baseline: its path's minimum RTT and its median throughput.
CREATE OR REPLACE VIEW st_flow_baseline AS
SELECT host, flow_id,
       coalesce(min(min_rtt_us), min(srtt_p50_us)) AS base_rtt_us,
       median(bytes * 8e6 / p.window_us) AS median_bps,
       count(*) AS windows
FROM st_rtt_window, st_params p
GROUP BY ALL;

-- Retransmitted segments per flow and window.
CREATE OR REPLACE VIEW st_retrans_window AS
SELECT host, flow_id, epoch_us(ts) // p.window_us AS w, count(*) AS retransmits
FROM retransmits, st_params p
WHERE flow_id IS NOT NULL AND kind = 'retransmit'
GROUP BY ALL;

-- Per flow and window: latency, throughput and retransmits against the flow's baseline.
CREATE OR REPLACE VIEW st_flow_window AS
SELECT coalesce(r.host, x.host) AS host, coalesce(r.flow_id, x.flow_id) AS flow_id,
       coalesce(r.w, x.w) AS w,
       to_timestamp(coalesce(r.w, x.w) * p.window_us / 1e6) AS window_start,
       r.samples, r.srtt_p50_us, r.srtt_p99_us, r.srtt_max_us,
       r.bytes * 8e6 / p.window_us AS throughput_bps,
       coalesce(x.retransmits, 0) AS retransmits,
       b.base_rtt_us, b.median_bps,
       r.srtt_p50_us / nullif(b.base_rtt_us, 0) AS rtt_inflation,
       r.bytes * 8e6 / p.window_us / nullif(b.median_bps, 0) AS throughput_ratio,
       coalesce(r.srtt_p50_us / nullif(b.base_rtt_us, 0) >= p.degraded_rtt_inflation, false)
         OR coalesce(r.bytes * 8e6 / p.window_us / nullif(b.median_bps, 0) < p.collapse_throughput_ratio, false)
         AS degraded
FROM st_rtt_window r
FULL JOIN st_retrans_window x ON x.host = r.host AND x.flow_id = r.flow_id AND x.w = r.w
LEFT JOIN st_flow_baseline b ON b.host = coalesce(r.host, x.host) AND b.flow_id = coalesce(r.flow_id, x.flow_id)
CROSS JOIN st_params p;

------------------------------------------------------------------------------------------
-- 1. Retransmit and loss hot spots
------------------------------------------------------------------------------------------

-- Per flow: how many, how often, how bursty, and whether throughput collapsed with them.
CREATE OR REPLACE VIEW st_retrans_flow AS
WITH w AS (
    SELECT host, flow_id, count(*) AS windows,
           count(*) FILTER (WHERE retransmits > 0) AS windows_with_retrans,
           max(retransmits) AS max_in_window,
           count(*) FILTER (WHERE retransmits > 0 AND throughput_ratio < p.collapse_throughput_ratio) AS collapse_windows,
           sum(retransmits) AS retrans_events
    FROM st_flow_window, st_params p GROUP BY host, flow_id)
SELECT f.host, f.flow_id, f.flow_label, f.local_iface, f.remote_addr,
       greatest(coalesce(f.total_retrans, 0), coalesce(w.retrans_events, 0)) AS retransmits,
       f.data_segs_out,
       greatest(coalesce(f.total_retrans, 0), coalesce(w.retrans_events, 0)) / nullif(f.data_segs_out, 0) AS retrans_ratio,
       greatest(coalesce(f.total_retrans, 0), coalesce(w.retrans_events, 0)) / nullif(f.duration_ns / 1e9, 0) AS retrans_per_s,
       w.windows, w.windows_with_retrans, w.max_in_window,
       -- peak window against the flow's average window: 1 = evenly spread, large = one burst
       w.max_in_window / nullif(w.retrans_events / w.windows, 0) AS burstiness,
       w.collapse_windows
FROM st_flow f LEFT JOIN w USING (host, flow_id);

CREATE OR REPLACE VIEW st_retrans_peer AS
SELECT remote_addr, count(*) AS flows, count(DISTINCT host) FILTER (WHERE retransmits > 0) AS hosts,
       count(*) FILTER (WHERE retransmits > 0) AS flows_with_retrans,
       sum(retransmits) AS retransmits, sum(data_segs_out) AS data_segs_out,
       sum(retransmits) / nullif(sum(data_segs_out), 0) AS retrans_ratio,
       max(burstiness) AS burstiness, sum(collapse_windows) AS collapse_windows
FROM st_retrans_flow GROUP BY remote_addr;

CREATE OR REPLACE VIEW st_retrans_interface AS
SELECT host, local_iface, count(*) AS flows,
       count(*) FILTER (WHERE retransmits > 0) AS flows_with_retrans,
       sum(retransmits) AS retransmits, sum(data_segs_out) AS data_segs_out,
       sum(retransmits) / nullif(sum(data_segs_out), 0) AS retrans_ratio,
       max(burstiness) AS burstiness, sum(collapse_windows) AS collapse_windows
FROM st_retrans_flow GROUP BY host, local_iface;

-- Windows in which a host retransmitted far more than in its usual window.
CREATE OR REPLACE VIEW st_loss_burst AS
WITH h AS (
    SELECT host, w, any_value(window_start) AS window_start, sum(retransmits) AS retransmits,
           string_agg(DISTINCT f.remote_addr, ', ' ORDER BY f.remote_addr) FILTER (WHERE retransmits > 0) AS peers
    FROM st_flow_window JOIN st_flow f USING (host, flow_id) GROUP BY host, w),
s AS (
    SELECT *, (sum(retransmits) OVER (PARTITION BY host) - retransmits)
               / nullif(count(*) OVER (PARTITION BY host) - 1, 0) AS others_mean
    FROM h)
SELECT host, w, window_start, retransmits, peers, others_mean,
       retransmits / (coalesce(others_mean, 0) + 1) AS peak_ratio
FROM s, st_params p
WHERE retransmits >= p.burst_min_retransmits;

------------------------------------------------------------------------------------------
-- 2. Latency
------------------------------------------------------------------------------------------

-- Per flow over the whole capture, with the fleet's median p99 for comparison.
CREATE OR REPLACE VIEW st_latency_flow AS
WITH l AS (
    SELECT host, flow_id, count(*) AS samples,
           quantile_cont(srtt_us, 0.5) AS srtt_p50_us, quantile_cont(srtt_us, 0.99) AS srtt_p99_us,
           max(srtt_us) AS srtt_max_us
    FROM rtt GROUP BY ALL)
SELECT f.flow_label, f.remote_addr, f.local_iface, l.*, b.base_rtt_us,
       l.srtt_p50_us / nullif(b.base_rtt_us, 0) AS rtt_inflation,
       median(l.srtt_p99_us) OVER () AS fleet_median_p99_us,
       l.srtt_p99_us / nullif(median(l.srtt_p99_us) OVER (), 0) AS p99_vs_fleet
FROM l JOIN st_flow f USING (host, flow_id) LEFT JOIN st_flow_baseline b USING (host, flow_id);

------------------------------------------------------------------------------------------
-- 3. Topology-induced contention: flows sharing a NIC or a peer that degrade together
------------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW st_group_window AS
WITH fw AS (
    SELECT w.*, f.remote_addr, f.local_iface FROM st_flow_window w JOIN st_flow f USING (host, flow_id)
    WHERE w.samples > 0),
g AS (
    SELECT 'peer' AS scope, remote_addr AS subject, * FROM fw
    UNION ALL
    SELECT 'interface', host || '/' || local_iface, * FROM fw)
SELECT scope, subject, w, any_value(window_start) AS window_start,
       count(*) AS flows, count(*) FILTER (WHERE degraded) AS degraded_flows,
       avg(rtt_inflation) FILTER (WHERE degraded) AS degraded_rtt_inflation,
       avg(throughput_ratio) FILTER (WHERE degraded) AS degraded_throughput_ratio
FROM g GROUP BY ALL;

CREATE OR REPLACE VIEW st_contention AS
SELECT scope, subject, max(flows) AS flows, count(*) AS windows,
       count(*) FILTER (WHERE degraded_flows >= 2 AND degraded_flows >= flows * 0.5) AS together_windows,
       avg(degraded_flows) FILTER (WHERE degraded_flows >= 2 AND degraded_flows >= flows * 0.5) AS together_flows,
       avg(degraded_rtt_inflation) FILTER (WHERE degraded_flows >= 2) AS rtt_inflation,
       avg(degraded_throughput_ratio) FILTER (WHERE degraded_flows >= 2) AS throughput_ratio
FROM st_group_window GROUP BY scope, subject;

------------------------------------------------------------------------------------------
-- 4. Synchronization amplification: collectives across ranks
------------------------------------------------------------------------------------------

-- One row per rank and collective operation: NCCL kernels from imported GPU timelines, or,
-- without timelines, NCCL API calls (entry time only) joined to their rank via CommInitRank.
CREATE OR REPLACE VIEW st_collective_op AS
SELECT 'gpu_kernel' AS source, host, rank, device, collective,
       epoch_us(ts) AS start_us, epoch_us(ts) + dur_ns // 1000 AS end_us
FROM gpu_events
WHERE on_gpu AND collective IS NOT NULL AND rank IS NOT NULL
UNION ALL
SELECT 'nccl_call', c.host, i.rank, NULL, c.op, epoch_us(c.ts), NULL
FROM nccl_calls c
JOIN (SELECT host, pid, comm, any_value(rank) AS rank FROM nccl_calls
      WHERE op = 'CommInitRank' AND result = 'ncclSuccess' GROUP BY ALL) i USING (host, pid, comm)
WHERE c.op IN ('AllReduce', 'AllGather', 'ReduceScatter', 'Broadcast', 'Reduce')
  AND NOT EXISTS (SELECT 1 FROM gpu_events WHERE collective IS NOT NULL);

-- The n-th operation of a collective on every rank is one step.
CREATE OR REPLACE VIEW st_collective_rank_step AS
WITH o AS (
    SELECT *, row_number() OVER (PARTITION BY source, rank, collective ORDER BY start_us) AS step
    FROM st_collective_op),
s AS (
    SELECT *, count(*) OVER (PARTITION BY source, collective, step) AS ranks,
           max(start_us) OVER (PARTITION BY source, collective, step) AS last_start_us,
           min(start_us) OVER (PARTITION BY source, collective, step) AS first_start_us
    FROM o)
SELECT source, collective, step, host, rank, device, ranks, start_us, end_us,
       last_start_us - start_us AS wait_us,
       end_us - start_us AS dur_us,
       end_us - last_start_us AS transfer_us,
       (last_start_us - start_us) / nullif(end_us - start_us, 0) AS wait_fraction
FROM s
-- steps every rank reached (a trace cut at the edges has partial steps)
WHERE ranks = (SELECT max(c) FROM (SELECT count(DISTINCT rank) AS c FROM st_collective_op GROUP BY source, collective))
  AND ranks >= 2;

CREATE OR REPLACE VIEW st_collective_step AS
SELECT source, collective, step, any_value(ranks) AS ranks,
       to_timestamp(min(start_us) / 1e6) AS first_start,
       max(start_us) - min(start_us) AS arrival_spread_us,
       max(end_us) - min(end_us) AS finish_spread_us,
       max(end_us) - min(start_us) AS step_us,
       arg_max(rank, start_us) AS last_rank,
       arg_max(host, start_us) AS last_host,
       max(wait_fraction) AS fastest_wait_fraction
FROM st_collective_rank_step GROUP BY source, collective, step;

-- Ranks that arrive last, step after step.
CREATE OR REPLACE VIEW st_straggler AS
WITH s AS (
    SELECT source, collective, count(*) AS steps, median(arrival_spread_us) AS median_spread_us,
           median(step_us) AS median_step_us, any_value(ranks) AS ranks
    FROM st_collective_step GROUP BY ALL)
SELECT c.source, c.collective, c.last_rank AS rank, any_value(c.last_host) AS host,
       count(*) AS steps_last, any_value(s.steps) AS steps, any_value(s.ranks) AS ranks,
       count(*) / any_value(s.steps) AS share_last,
       median(c.arrival_spread_us) AS median_lateness_us,
       avg(c.fastest_wait_fraction) AS fastest_wait_fraction
FROM st_collective_step c JOIN s USING (source, collective), st_params p
-- a step counts only when the last rank was meaningfully late
WHERE c.arrival_spread_us >= greatest(p.min_spread_us, p.min_spread_fraction * s.median_step_us)
GROUP BY c.source, c.collective, c.last_rank;

CREATE OR REPLACE VIEW st_sync_amplification AS
SELECT source, collective, count(*) AS steps, any_value(ranks) AS ranks,
       median(arrival_spread_us) AS median_arrival_spread_us,
       quantile_cont(arrival_spread_us, 0.99) AS p99_arrival_spread_us,
       median(finish_spread_us) AS median_finish_spread_us,
       median(step_us) AS median_step_us,
       avg(fastest_wait_fraction) AS fastest_wait_fraction
FROM st_collective_step GROUP BY source, collective;

------------------------------------------------------------------------------------------
-- 5. Locality: GPU and NIC on different NUMA nodes / PCIe roots, against collective time
------------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW st_rank_locality AS
WITH rg AS (
    SELECT DISTINCT host, rank, device FROM gpu_events
    WHERE on_gpu AND rank IS NOT NULL AND device IS NOT NULL),
d AS (
    SELECT host, "index", any_value(numa_node) AS numa_node, any_value(nearest_nic) AS nearest_nic,
           any_value(nic_numa_node) AS nic_numa_node, any_value(nic_locality) AS nic_locality
    FROM gpu_devices GROUP BY ALL),
t AS (
    SELECT rank, median(transfer_us) AS transfer_us, median(dur_us) AS collective_us
    FROM st_collective_rank_step WHERE source = 'gpu_kernel' GROUP BY rank)
SELECT rg.host, rg.rank, rg.device, d.numa_node, d.nearest_nic, d.nic_numa_node, d.nic_locality,
       coalesce(d.nic_locality = 'SYS' OR d.numa_node <> d.nic_numa_node, false) AS mismatched,
       t.transfer_us, t.collective_us
FROM rg JOIN d ON d.host = rg.host AND d."index" = rg.device
LEFT JOIN t USING (rank);

CREATE OR REPLACE VIEW st_locality AS
SELECT l.*,
       l.transfer_us / nullif((SELECT median(transfer_us) FROM st_rank_locality WHERE NOT mismatched), 0)
         AS transfer_vs_well_placed
FROM st_rank_locality l;

------------------------------------------------------------------------------------------
-- 6. GPU idle explained: compute idle while collectives run, with the network at that time
------------------------------------------------------------------------------------------

-- GPU time per rank and window, split into collective kernels and everything else. Kernels on
-- several streams may overlap and are summed; fractions are capped at 1 (`scaletrace merge`
-- computes exact interval unions).
CREATE OR REPLACE VIEW st_gpu_window AS
WITH e AS (
    SELECT host, rank, collective IS NOT NULL AS is_collective,
           epoch_us(ts) AS s, epoch_us(ts) + greatest(dur_ns, 0) // 1000 AS e
    FROM gpu_events WHERE on_gpu AND rank IS NOT NULL),
x AS (
    SELECT host, rank, is_collective, s, e, unnest(range(s // p.window_us, e // p.window_us + 1)) AS w
    FROM e, st_params p),
o AS (
    SELECT host, rank, w, is_collective,
           least(e, (w + 1) * p.window_us) - greatest(s, w * p.window_us) AS overlap_us
    FROM x, st_params p)
SELECT host, rank, w, to_timestamp(w * any_value(p.window_us) / 1e6) AS window_start,
       least(1.0, coalesce(sum(overlap_us) FILTER (WHERE is_collective), 0) / any_value(p.window_us)) AS collective_fraction,
       least(1.0, coalesce(sum(overlap_us) FILTER (WHERE NOT is_collective), 0) / any_value(p.window_us)) AS compute_fraction
FROM o, st_params p GROUP BY host, rank, w;

-- Network symptoms per host and window.
CREATE OR REPLACE VIEW st_host_network_window AS
SELECT w.host, w.w, sum(w.retransmits) AS retransmits,
       count(*) FILTER (WHERE w.degraded) AS degraded_flows,
       max(w.rtt_inflation) AS max_rtt_inflation,
       string_agg(DISTINCT f.remote_addr, ', ' ORDER BY f.remote_addr) FILTER (WHERE w.degraded OR w.retransmits > 0) AS affected_peers
FROM st_flow_window w JOIN st_flow f USING (host, flow_id) GROUP BY w.host, w.w;

CREATE OR REPLACE VIEW st_gpu_idle_window AS
SELECT g.*, n.retransmits, n.degraded_flows, n.max_rtt_inflation, n.affected_peers,
       coalesce(n.retransmits > 0 OR n.degraded_flows > 0, false) AS network_symptom
FROM st_gpu_window g
LEFT JOIN st_host_network_window n USING (host, w), st_params p
WHERE g.collective_fraction >= p.idle_collective_fraction AND g.compute_fraction <= p.idle_compute_fraction;

CREATE OR REPLACE VIEW st_gpu_idle AS
SELECT i.host, i.rank, count(*) AS idle_windows,
       (SELECT count(*) FROM st_gpu_window g WHERE g.host = i.host AND g.rank = i.rank) AS windows,
       count(*) FILTER (WHERE network_symptom) AS explained_windows,
       sum(retransmits) AS retransmits, max(max_rtt_inflation) AS max_rtt_inflation,
       nullif(array_to_string(list_sort(list_distinct(flatten(list(string_split(affected_peers, ', '))))), ', '), '') AS affected_peers,
       avg(collective_fraction) AS collective_fraction
FROM st_gpu_idle_window i GROUP BY i.host, i.rank;

------------------------------------------------------------------------------------------
-- Findings: every diagnosis above that crosses its threshold, ranked within its category
-- (score: higher is worse; comparable within a category only)
------------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW findings AS
WITH f AS (
    SELECT 'retransmits' AS category, 'peer' AS scope, remote_addr AS subject, NULL::VARCHAR AS host, NULL::BIGINT AS rank,
           retrans_ratio AS score,
           printf('peer %s: %d retransmits over %d flows from %d hosts (%.3g%% of data segments), burstiness %.1f, %d windows where throughput collapsed with them',
                  remote_addr, retransmits, flows_with_retrans, hosts, 100 * retrans_ratio, coalesce(burstiness, 0), coalesce(collapse_windows, 0)) AS summary
    FROM st_retrans_peer, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'retransmits', 'interface', host || '/' || local_iface, host, NULL, retrans_ratio,
           printf('interface %s/%s: %d retransmits over %d flows (%.3g%% of data segments), burstiness %.1f, %d windows where throughput collapsed with them',
                  host, local_iface, retransmits, flows_with_retrans, 100 * retrans_ratio, coalesce(burstiness, 0), coalesce(collapse_windows, 0))
    FROM st_retrans_interface, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'retransmits', 'flow', flow_label, host, NULL, retrans_ratio,
           printf('flow %s: %d retransmits (%.3g%% of data segments, %.1f/s), burstiness %.1f, throughput collapsed in %d of %d windows with retransmits',
                  flow_label, retransmits, 100 * retrans_ratio, retrans_per_s, coalesce(burstiness, 0), coalesce(collapse_windows, 0), coalesce(windows_with_retrans, 0))
    FROM st_retrans_flow, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'loss_burst', 'window', host || ' @ ' || strftime(window_start, '%Y-%m-%d %H:%M:%S'), host, NULL, peak_ratio,
           printf('%s: %d retransmits in the window starting %s (usual window: %.1f), peers %s',
                  host, retransmits, strftime(window_start, '%H:%M:%S'), coalesce(others_mean, 0), coalesce(peers, '?'))
    FROM st_loss_burst, st_params p
    WHERE peak_ratio >= p.burst_peak_ratio
    UNION ALL
    SELECT 'latency', 'tail_outlier', flow_label, host, NULL, p99_vs_fleet,
           printf('flow %s: RTT p99 %.0f us is %.1fx the fleet median p99 (%.0f us); p50 %.0f us, max %d us',
                  flow_label, srtt_p99_us, p99_vs_fleet, fleet_median_p99_us, srtt_p50_us, srtt_max_us)
    FROM st_latency_flow, st_params p
    WHERE samples >= p.min_rtt_samples AND p99_vs_fleet >= p.tail_outlier_ratio
    UNION ALL
    SELECT 'latency', 'queueing', flow_label, host, NULL, rtt_inflation,
           printf('flow %s: median RTT %.0f us is %.1fx its own base RTT (%.0f us): queueing on the path',
                  flow_label, srtt_p50_us, rtt_inflation, base_rtt_us)
    FROM st_latency_flow, st_params p
    WHERE samples >= p.min_rtt_samples AND rtt_inflation >= p.degraded_rtt_inflation
    UNION ALL
    SELECT 'contention', scope, subject, NULL, NULL, together_windows / windows * together_flows,
           printf('%s %s: %.1f of its %d flows degraded together in %d of %d windows (RTT x%.1f, throughput x%.2f)',
                  scope, subject, together_flows, flows, together_windows, windows,
                  coalesce(rtt_inflation, 1), coalesce(throughput_ratio, 1))
    FROM st_contention, st_params p
    WHERE flows >= 2 AND together_windows >= p.min_together_windows
    UNION ALL
    SELECT 'straggler', 'rank', 'rank ' || rank, host, rank, share_last,
           printf('rank %d (%s) arrived last at %d of %d %s steps (%s), late by %.2f ms (median); the fastest ranks waited %.0f%% of those steps',
                  rank, host, steps_last, steps, collective, source, median_lateness_us / 1000, 100 * fastest_wait_fraction)
    FROM st_straggler, st_params p
    WHERE steps_last >= p.min_straggler_steps AND share_last >= greatest(p.min_straggler_share, 2.0 / ranks)
    UNION ALL
    SELECT 'sync_amplification', 'collective', collective || ' (' || source || ')', NULL, NULL, fastest_wait_fraction,
           printf('%s over %d ranks (%s): the fastest rank waits %.0f%% of each step on average; arrival spread median %.2f ms, p99 %.2f ms; step %.2f ms',
                  collective, ranks, source, 100 * fastest_wait_fraction, median_arrival_spread_us / 1000,
                  p99_arrival_spread_us / 1000, median_step_us / 1000)
    FROM st_sync_amplification, st_params p
    WHERE fastest_wait_fraction >= p.sync_wait_fraction AND median_arrival_spread_us >= p.min_spread_us
    UNION ALL
    SELECT 'locality', 'rank', 'rank ' || rank, host, rank, coalesce(transfer_vs_well_placed, 1),
           printf('rank %d (%s GPU %d): GPU on NUMA %s, nearest NIC %s on NUMA %s (%s); collective transfer time %s that of well-placed ranks',
                  rank, host, device, coalesce(numa_node::VARCHAR, '?'), coalesce(nearest_nic, '?'),
                  coalesce(nic_numa_node::VARCHAR, '?'), coalesce(nic_locality, '?'),
                  CASE WHEN transfer_vs_well_placed IS NULL THEN 'not comparable with'
                       ELSE printf('%.2fx', transfer_vs_well_placed) END)
    FROM st_locality WHERE mismatched
    UNION ALL
    SELECT 'gpu_idle', 'rank', 'rank ' || rank || ' (' || host || ')', host, rank,
           idle_windows / windows + explained_windows / windows,
           printf('rank %d (%s): compute idle while collectives ran in %d of %d windows; %d of them with network symptoms on the host (%d retransmits, RTT up to x%.1f, peers %s)',
                  rank, host, idle_windows, windows, explained_windows, coalesce(retransmits, 0),
                  coalesce(max_rtt_inflation, 1), coalesce(affected_peers, 'none'))
    FROM st_gpu_idle, st_params p
    WHERE idle_windows >= p.min_idle_windows)
SELECT category, scope, row_number() OVER (PARTITION BY category, scope ORDER BY score DESC, subject) AS rank_in_scope,
       subject, host, rank, score, summary
FROM f
ORDER BY category, scope, rank_in_scope;
