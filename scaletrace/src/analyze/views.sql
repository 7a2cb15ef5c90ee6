-- scaletrace analysis views (DuckDB).
--
-- Expects one view per scaletrace table (flows, rtt, retransmits, interfaces, nccl_calls,
-- gpu_events, gpu_devices, ...) and st_params; `scaletrace sql DIR` prints those first.
-- Every view here is plain SQL over them: query any view from a notebook, or read `findings`.
-- Times are in µs since the epoch, through st_us(): the tables' timestamps are nanosecond
-- timestamps with time zone, which some DuckDB versions' epoch_us() does not accept.

CREATE OR REPLACE MACRO st_us(t) AS epoch_ns(t) // 1000;

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
       f.total_retrans, f.dsack_dups, f.rto_count, f.rto_recovery_ns, f.loss_recovery_ns, f.pid, f.comm
FROM flows f
LEFT JOIN (SELECT host, addr, any_value(name) AS name FROM interfaces GROUP BY ALL) i
       ON i.host = f.host AND i.addr = f.local_addr;

-- The span of each flow's kernel windows (`flow_windows`) that tile the analysis window (a
-- whole number of them in each: `record --flow-window 1s` serves `analyze --window 1s`, `10s`
-- or `1min`; windows start on whole multiples of their length, so none straddles two): its
-- first and last window, and its smallest smoothed RTT in them. A flow with windows of several
-- such lengths (recorders with different settings) is read from its longest.
CREATE OR REPLACE VIEW st_windowed_flow AS
WITH fit AS (
    SELECT fw.host, fw.flow_id, fw.ts, fw.window_ns, fw.srtt_min_us
    FROM flow_windows fw, st_params p
    WHERE fw.window_ns > 0 AND (p.window_us * 1000) % fw.window_ns = 0),
chosen AS (SELECT host, flow_id, max(window_ns) AS window_ns FROM fit GROUP BY ALL)
SELECT f.host, f.flow_id, any_value(f.window_ns) AS window_ns,
       min(st_us(f.ts) // p.window_us) AS first_w, max(st_us(f.ts) // p.window_us) AS last_w,
       min(nullif(f.srtt_min_us, 0)) AS srtt_min_us
FROM fit f JOIN chosen c USING (host, flow_id, window_ns), st_params p
GROUP BY f.host, f.flow_id;

-- A bucket of `flow_windows.rtt_buckets` (0-based) as the recorder reads it (rtt_histogram.rs):
-- bucket i holds lower(i) to below lower(i + 1) µs and stands for its middle (itself below 4
-- µs); a quantile is the value of the bucket that holds its rank, kept within the window's
-- exact minimum and maximum, and the open last bucket (3.67 s and more) reads as the maximum.
CREATE OR REPLACE MACRO st_bucket_lower_us(i) AS
    CASE WHEN i < 4 THEN i ELSE (4 + i % 4) * (1::BIGINT << (i // 4 - 1)) END;
CREATE OR REPLACE MACRO st_bucket_quantile_us(i, lo, hi) AS
    CASE WHEN i IS NULL THEN NULL
         WHEN i >= 83 THEN hi::DOUBLE
         ELSE least(greatest(CASE WHEN i < 4 THEN i::DOUBLE
                                  ELSE (st_bucket_lower_us(i) + st_bucket_lower_us(i + 1)) / 2.0 END,
                             lo), hi) END;

-- quantile_cont's position h of quantile q among n samples, whether the samples of one value
-- (`n` of them after `below` others) reach position floor(h) + k, and the value between the
-- samples at floor(h) and floor(h) + 1 (`hi` is null when there is none)
CREATE OR REPLACE MACRO st_quantile_position(total, q) AS (total - 1)::DOUBLE * q;
CREATE OR REPLACE MACRO st_holds_position(below, n, total, q, k) AS
    below + n > floor(st_quantile_position(total, q)) + k;
CREATE OR REPLACE MACRO st_between_positions(lo, hi, h) AS
    lo + (h - floor(h)) * (coalesce(hi, lo)::DOUBLE - lo);

-- Each flow's RTT over its whole capture, from its raw samples: what the fleet's usual queueing
-- and the per-flow latency findings judge it on, and the span of its samples (`first_us`,
-- `last_us`), which tells `st_rtt_window` whether any lie outside its kernel windows (one pass
-- over the samples for all three).
-- The percentiles are quantile_cont's, to the last bit (the samples at positions floor(h) and
-- floor(h) + 1 of the flow's order, h = (n - 1) * q as a double, and lo + (hi - lo) * (h -
-- floor(h)) between them), computed from how often each value occurs: a smoothed RTT is a
-- whole number of µs, so a flow's values repeat as its samples grow (at most one row per µs of
-- its RTT's range: an hour of 10 ms samples is 360,000 samples), where quantile_cont holds
-- every sample in memory, and this group can spill to disk. With quantile_cont, the analysis
-- of 64 nodes' 10 minutes (246 M samples, bench/fleet.py) peaked at 6.5 GB; with this, 2.3 GB.
-- (The DDP lab's 2-minute runs have 0.7 distinct values a sample: nothing to gain there.)
-- Spark's `percentile` interpolates by another formula: the same up to rounding. Not from the
-- kernel's windows, which would need no raw samples: their histograms weigh each ACK, not each
-- moment (a flow's bursts count more), and read so, the findings of 16 of the 18 recorded DDP
-- runs changed and all 6 clean runs had latency findings (bench/eval.py --rescore, 2026-12-06).
CREATE OR REPLACE VIEW st_flow_raw_rtt AS
WITH v AS (SELECT host, flow_id, srtt_us AS x, count(*) AS n, min(ts) AS first_ts, max(ts) AS last_ts FROM rtt GROUP BY ALL),
-- each value's samples are the (0-based) positions [below, below + n) in the flow's order
c AS (
    SELECT *, sum(n) OVER (PARTITION BY host, flow_id ORDER BY x) - n AS below,
           sum(n) OVER (PARTITION BY host, flow_id) AS total
    FROM v),
-- the values at positions k and k + 1 around each percentile's (n - 1) * q
k AS (
    SELECT host, flow_id, any_value(total)::BIGINT AS samples, max(x) AS srtt_max_us,
           st_us(min(first_ts)) AS first_us, st_us(max(last_ts)) AS last_us,
           any_value(st_quantile_position(total, 0.5)) AS h50, any_value(st_quantile_position(total, 0.99)) AS h99,
           min(x) FILTER (WHERE st_holds_position(below, n, total, 0.5, 0)) AS lo50,
           min(x) FILTER (WHERE st_holds_position(below, n, total, 0.5, 1)) AS hi50,
           min(x) FILTER (WHERE st_holds_position(below, n, total, 0.99, 0)) AS lo99,
           min(x) FILTER (WHERE st_holds_position(below, n, total, 0.99, 1)) AS hi99
    FROM c GROUP BY host, flow_id)
SELECT host, flow_id, samples,
       st_between_positions(lo50, hi50, h50) AS srtt_p50_us,
       st_between_positions(lo99, hi99, h99) AS srtt_p99_us,
       srtt_max_us, first_us, last_us
FROM k;

-- RTT per flow and window: latency percentiles, how many RTT measurements, bytes moved.
-- From the kernel's windows over the span where a flow has them of the analysis window's
-- length or one that divides it (`record --flow-window` and `analyze --window` are both 1 s by
-- default): every RTT update counted, percentiles from its histogram (within 12.5 %; shorter
-- windows' histograms added up), exact bytes, and the flow's minimum RTT from `flows` (else its
-- smallest smoothed RTT). From the raw samples elsewhere (a recording older than the windows,
-- `--flow-window 0s` or a length that does not divide `--window`, the part of a flow recorded
-- before or after its windows; an analysis window its shorter windows cover only in part is
-- read from those alone): that path holds every sample of a window in memory
-- for its percentiles, and 246 M samples (64 nodes' 10 minutes at 64 flows each,
-- bench/fleet.py) ran out of 8 GB there.
CREATE OR REPLACE VIEW st_rtt_window AS
WITH s AS (
    SELECT host, flow_id, st_us(ts) // p.window_us AS w, srtt_us, min_rtt_us,
           bytes_acked + bytes_received AS bytes
    FROM rtt, st_params p),
-- the flows with samples outside their windows' span, or no windows: the only samples read
-- here are theirs. Joined with every sample instead, this view took 11 of 58 s on 64 nodes'
-- 10 minutes (bench/fleet.py) to keep none; a join with no flows reads no samples.
outside AS (
    SELECT f.host, f.flow_id, k.first_w, k.last_w
    FROM st_flow_raw_rtt f LEFT JOIN st_windowed_flow k USING (host, flow_id), st_params p
    WHERE k.flow_id IS NULL OR f.first_us // p.window_us < k.first_w OR f.last_us // p.window_us > k.last_w),
r AS (
    SELECT s.*,
           -- after the flow's windows: its bytes count from its first sample there, not across them
           coalesce(s.w > k.last_w, false) AS after_windows
    FROM s JOIN outside k ON k.host = s.host AND k.flow_id = s.flow_id
    WHERE k.first_w IS NULL OR s.w NOT BETWEEN k.first_w AND k.last_w),
g AS (
    SELECT host, flow_id, after_windows, w, count(*) AS samples,
           quantile_cont(srtt_us, 0.5) AS srtt_p50_us, quantile_cont(srtt_us, 0.99) AS srtt_p99_us,
           max(srtt_us) AS srtt_max_us, min(nullif(min_rtt_us, 0)) AS min_rtt_us,
           max(bytes) AS bytes_max, min(bytes) AS bytes_min
    FROM r GROUP BY ALL),
kw AS (
    -- a window as long as the analysis window is read from its percentiles, not its histogram:
    -- this CTE is computed once for its three readers, and carrying every window's 84 buckets
    -- through it held 0.8 of 2.2 GB on 64 nodes' 10 minutes (bench/fleet.py)
    SELECT fw.* REPLACE (CASE WHEN fw.window_ns <> p.window_us * 1000 THEN fw.rtt_buckets END AS rtt_buckets),
           st_us(fw.ts) // p.window_us AS w, fw.window_ns = p.window_us * 1000 AS whole
    FROM flow_windows fw
    JOIN st_windowed_flow k ON k.host = fw.host AND k.flow_id = fw.flow_id AND k.window_ns = fw.window_ns,
    st_params p),
single AS (
    -- a window written twice (an agent restarted within it) is one, with both parts' counts
    SELECT host, flow_id, w, sum(rtt_updates)::BIGINT AS samples,
           arg_max(srtt_p50_us, rtt_updates) AS srtt_p50_us, arg_max(srtt_p99_us, rtt_updates) AS srtt_p99_us,
           max(srtt_max_us) AS srtt_max_us, sum(bytes_sent + bytes_received)::UBIGINT AS bytes
    FROM kw WHERE whole GROUP BY ALL),
-- kernel windows shorter than the analysis window: their histograms added up bucket by bucket,
-- the percentiles read from the sum as the recorder reads one window's
parts AS (
    SELECT host, flow_id, w, sum(rtt_updates)::BIGINT AS samples, min(srtt_min_us) AS lo,
           max(srtt_max_us) AS srtt_max_us, sum(bytes_sent + bytes_received)::UBIGINT AS bytes
    FROM kw WHERE NOT whole GROUP BY ALL),
bucket AS (
    SELECT host, flow_id, w, i, sum(n) AS n
    FROM (SELECT host, flow_id, w, unnest(rtt_buckets) AS n, unnest(range(0, len(rtt_buckets))) AS i
          FROM kw WHERE NOT whole AND rtt_updates > 0)
    WHERE n > 0 GROUP BY ALL),
-- the rank of a percentile counts the updates (as the recorder does): buckets that hold fewer
-- (a torn read of a window being written) leave it to the maximum, as the open last bucket
pct AS (
    SELECT c.host, c.flow_id, c.w, min(c.i) FILTER (WHERE c.below >= greatest(1, ceil(0.5 * k.samples))) AS i50,
           min(c.i) FILTER (WHERE c.below >= greatest(1, ceil(0.99 * k.samples))) AS i99
    FROM (SELECT *, sum(n) OVER (PARTITION BY host, flow_id, w ORDER BY i) AS below FROM bucket) c
    JOIN parts k USING (host, flow_id, w)
    GROUP BY ALL),
kernel AS (
    SELECT * FROM single
    UNION ALL BY NAME
    SELECT k.host, k.flow_id, k.w, k.samples,
           st_bucket_quantile_us(CASE WHEN k.samples > 0 THEN coalesce(c.i50, 83) END, k.lo, k.srtt_max_us) AS srtt_p50_us,
           st_bucket_quantile_us(CASE WHEN k.samples > 0 THEN coalesce(c.i99, 83) END, k.lo, k.srtt_max_us) AS srtt_p99_us,
           k.srtt_max_us, k.bytes
    FROM parts k LEFT JOIN pct c USING (host, flow_id, w))
SELECT host, flow_id, w, samples, srtt_p50_us, srtt_p99_us, srtt_max_us, min_rtt_us,
       -- bytes since the previous window that had a sample (or since the first sample)
       bytes_max - coalesce(lag(bytes_max) OVER (PARTITION BY host, flow_id, after_windows ORDER BY w), bytes_min) AS bytes
FROM g
UNION ALL BY NAME
SELECT k.*, coalesce(f.min_rtt_us, s.srtt_min_us) AS min_rtt_us
FROM kernel k JOIN st_windowed_flow s USING (host, flow_id)
LEFT JOIN (SELECT host, flow_id, min(nullif(min_rtt_us, 0)) AS min_rtt_us FROM flows GROUP BY ALL) f
       USING (host, flow_id);

-- Each flow's own baseline: its path's minimum RTT, its median throughput and how many RTT
-- samples it has in a window as a rule.
CREATE OR REPLACE VIEW st_flow_baseline AS
SELECT host, flow_id,
       coalesce(min(min_rtt_us), min(srtt_p50_us)) AS base_rtt_us,
       -- over the windows with an RTT measurement, as the raw samples give them: a kernel
       -- window opened by a retransmit has none
       median(bytes * 8e6 / p.window_us) FILTER (WHERE samples > 0) AS median_bps,
       median(samples) FILTER (WHERE samples > 0) AS median_window_samples,
       count(*) AS windows
FROM st_rtt_window, st_params p
GROUP BY ALL;

-- The fleet's usual queueing: the first quartile, over the flows that carry data, of each
-- flow's median RTT above its own base RTT. On a loaded host every flow's RTT rises with CPU
-- scheduling; only a path well above what the other paths see is queueing worth a finding.
-- A quartile, not the median: in a full mesh one slow node's links are half the flows of four
-- nodes and two thirds of three, and a median of them made its own queueing the usual.
-- Over the flows that send data, as the latency findings judged against it: a socket measures
-- RTT on its own segments, and a receiving end's few ACK-paced sends are no path's usual.
CREATE OR REPLACE VIEW st_fleet_queueing AS
WITH l AS (SELECT host, flow_id, srtt_p50_us AS p50 FROM st_flow_raw_rtt)
SELECT coalesce(quantile_cont(l.p50 - b.base_rtt_us, 0.25), 0) AS queueing_us,
       greatest(p.min_queueing_us, p.queueing_vs_fleet * coalesce(quantile_cont(l.p50 - b.base_rtt_us, 0.25), 0)) AS threshold_us
FROM l JOIN st_flow_baseline b USING (host, flow_id) JOIN flows f USING (host, flow_id), st_params p
WHERE coalesce(f.bytes_sent, 0) >= p.min_flow_bytes
GROUP BY p.min_queueing_us, p.queueing_vs_fleet;

-- Retransmitted segments per flow and window.
-- The node each flow belongs to: its recorder's host, or, for a socket in another network
-- namespace than the recorder's (one recorder in the root namespace of a machine whose pods or
-- containers each have their own), `host/namespace`: every namespace is a node of its own.
CREATE OR REPLACE VIEW st_flow_node AS
SELECT host, flow_id, any_value(local_addr) AS local_addr,
       any_value(CASE WHEN coalesce(netns, '') = '' THEN host ELSE host || '/' || netns END) AS node
FROM flows GROUP BY host, flow_id;

-- The node at the other end of a flow of `own_node`: the one whose flows use `remote` as their
-- local address in the same capture, else the address itself.
CREATE OR REPLACE VIEW st_addr_owner AS SELECT DISTINCT node, local_addr AS addr FROM st_flow_node;
CREATE OR REPLACE MACRO st_remote_node(remote, own_node) AS
    coalesce((SELECT min(o.node) FROM st_addr_owner o WHERE o.addr = remote AND o.node <> own_node), remote);

CREATE OR REPLACE VIEW st_retrans_window AS
SELECT host, flow_id, st_us(ts) // p.window_us AS w, count(*) AS retransmits
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
       d.rtt_degraded, d.rtt_degraded OR d.throughput_collapsed AS degraded
FROM st_rtt_window r
FULL JOIN st_retrans_window x ON x.host = r.host AND x.flow_id = r.flow_id AND x.w = r.w
LEFT JOIN st_flow_baseline b ON b.host = coalesce(r.host, x.host) AND b.flow_id = coalesce(r.flow_id, x.flow_id)
CROSS JOIN st_params p
LEFT JOIN st_fleet_queueing q ON true
CROSS JOIN LATERAL (
    SELECT
       -- judged on RTT only in a window where the flow was about as busy as usual: the few
       -- ACKs of a job starting up or exiting (its processes, the profiler writing its traces,
       -- holding the CPUs) inflate the smoothed RTT of every flow by milliseconds at once
       coalesce(r.srtt_p50_us / nullif(b.base_rtt_us, 0) >= p.degraded_rtt_inflation
                AND r.srtt_p50_us - b.base_rtt_us >= coalesce(q.threshold_us, p.min_queueing_us)
                AND r.samples >= p.min_window_activity * b.median_window_samples, false) AS rtt_degraded,
       coalesce(b.median_bps >= p.min_flow_bps
                AND r.bytes * 8e6 / p.window_us / nullif(b.median_bps, 0) < p.collapse_throughput_ratio, false)
         AS throughput_collapsed) d;

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
       f.dsack_dups, f.rto_count, f.rto_recovery_ns / 1e9 AS rto_recovery_s, f.loss_recovery_ns / 1e9 AS loss_recovery_s,
       w.windows, w.windows_with_retrans, w.max_in_window,
       -- peak window against the flow's average window: 1 = evenly spread, large = one burst
       w.max_in_window / nullif(w.retrans_events / w.windows, 0) AS burstiness,
       w.collapse_windows
FROM st_flow f LEFT JOIN w USING (host, flow_id);

-- What a count of retransmits hides when the receivers reported many of them as duplicates
-- (DSACK): the originals had arrived, late (reordering, jitter), not been lost. Said beside
-- the count on the peer and interface lines too, not only the flow's: 282 retransmits all
-- spurious read as loss there.
CREATE OR REPLACE MACRO st_dsack_note(dsack_dups, retransmits) AS
    CASE WHEN coalesce(dsack_dups, 0) > 0
         THEN printf('; the receivers already had %d of the segments resent (DSACK: late, not lost)', least(dsack_dups, retransmits))
         ELSE '' END;

-- The retransmits' share of the data segments sent, for a summary. A recording whose flows
-- lack `data_segs_out` (a recorder that did not write it) has no share to give: printf of a
-- NULL is NULL, and a finding without a summary stopped the whole analysis (66 nodes of
-- bench/fleet.py with a lossy node, whose flows throughput collapsed with the retransmits).
CREATE OR REPLACE MACRO st_segments_share(retrans_ratio) AS
    coalesce(printf('%.3g%% of data segments', 100 * retrans_ratio), 'share of data segments not recorded');

CREATE OR REPLACE VIEW st_retrans_peer AS
SELECT remote_addr, count(*) AS flows, count(DISTINCT host) FILTER (WHERE retransmits > 0) AS hosts,
       count(*) FILTER (WHERE retransmits > 0) AS flows_with_retrans,
       sum(retransmits) AS retransmits, sum(data_segs_out) AS data_segs_out,
       sum(retransmits) / nullif(sum(data_segs_out), 0) AS retrans_ratio,
       max(burstiness) AS burstiness, sum(collapse_windows) AS collapse_windows,
       sum(coalesce(dsack_dups, 0)) AS dsack_dups
FROM st_retrans_flow GROUP BY remote_addr;

CREATE OR REPLACE VIEW st_retrans_interface AS
SELECT host, local_iface, count(*) AS flows,
       count(*) FILTER (WHERE retransmits > 0) AS flows_with_retrans,
       sum(retransmits) AS retransmits, sum(data_segs_out) AS data_segs_out,
       sum(retransmits) / nullif(sum(data_segs_out), 0) AS retrans_ratio,
       max(burstiness) AS burstiness, sum(collapse_windows) AS collapse_windows,
       sum(coalesce(dsack_dups, 0)) AS dsack_dups,
       -- the nodes its retransmitted segments were sent to: the interface sends, the loss may be
       -- at either end
       string_agg(DISTINCT remote_node, ', ' ORDER BY remote_node) FILTER (WHERE retransmits > 0) AS toward
FROM (SELECT *, st_remote_node(remote_addr, host) AS remote_node FROM st_retrans_flow)
GROUP BY host, local_iface;

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
-- 1b. RDMA retransmit hot spots
------------------------------------------------------------------------------------------

-- An RDMA NIC retransmits in hardware, out of the kernel's sight: its only traces are the
-- device's own counters (`nic_counters`). RC transport recovers loss by go-back-N: the responder
-- sees a gap and NAKs, the requester counts the NAK (or its ack timeout) and resends, the
-- responder counts the duplicates. These are those counters under each driver's names
-- (rxe: drivers/infiniband/sw/rxe/rxe_hw_counters.c; mlx5: its hw_counters documentation;
-- bnxt_re: hw_counters.c), and the per-port packet counters they are judged against.
-- `loss` counters see a gap: a packet that never arrived. `retry` counters see a resend, which a
-- late ACK causes as well as a loss: on a clean veth, soft-RoCE under emulation counted 1207
-- duplicate requests (0.6 % of packets, from ack timeouts of a slow responder) and 10 gaps. So
-- a device is a hot spot by its gaps; its retries are reported beside them.
CREATE OR REPLACE VIEW st_rdma_counter_kind AS
SELECT * FROM (VALUES
    ('out_of_seq_request', 'loss'),     -- rxe responder: a request after a gap
    ('out_of_sequence', 'loss'),        -- mlx5 responder: the same
    ('rcvd_seq_err', 'loss'),           -- rxe requester: a sequence-error NAK, a gap in responses
    ('packet_seq_err', 'loss'),         -- mlx5 requester: a sequence-error NAK
    ('implied_nak_seq_err', 'loss'),    -- mlx5 requester: a response implied one
    ('seq_err_naks_rcvd', 'loss'),      -- bnxt_re: sequence-error NAKs
    ('duplicate_request', 'retry'),     -- rxe, mlx5 responder: a request it already had
    ('completer_retry_err', 'retry'),   -- rxe requester: went back to resend
    ('local_ack_timeout_err', 'retry'), -- mlx5 requester: no ACK in time, resent
    ('roce_adp_retrans', 'retry'),      -- mlx5 adaptive retransmission
    ('to_retransmits', 'retry'),        -- bnxt_re: timeout retransmits
    ('sent_pkts', 'packets'), ('rcvd_pkts', 'packets'),                 -- rxe
    ('port_xmit_packets', 'packets'), ('port_rcv_packets', 'packets'),  -- IB port counters
    ('tx_pkts', 'packets'), ('rx_pkts', 'packets')                      -- bnxt_re
) t(counter, kind);

-- Per RDMA device port over the recording (the sum of a counter's deltas is its growth while
-- recording; the first reading has none).
CREATE OR REPLACE VIEW st_rdma_device AS
WITH c AS (
    SELECT n.host, n.device, n.port, n.source, n.counter, k.kind, sum(n.delta)::BIGINT AS growth
    FROM nic_counters n JOIN st_rdma_counter_kind k USING (counter)
    WHERE n.source IN ('ib', 'ib_hw') GROUP BY ALL),
-- a device may show its packets in two places (port counters and hw counters): the larger
p AS (
    SELECT host, device, port, max(packets) AS packets FROM (
        SELECT host, device, port, source, sum(growth) AS packets FROM c WHERE kind = 'packets' GROUP BY ALL)
    GROUP BY ALL),
l AS (
    SELECT host, device, port,
           coalesce(sum(growth) FILTER (WHERE kind = 'loss'), 0) AS loss_events,
           coalesce(sum(growth) FILTER (WHERE kind = 'retry'), 0) AS retry_events,
           string_agg(printf('%s %d', counter, growth), ', ' ORDER BY growth DESC, counter)
               FILTER (WHERE growth > 0) AS loss_counters
    FROM c WHERE kind IN ('loss', 'retry') GROUP BY ALL),
-- the QPs that carried packets on the device (RDMA netlink), busiest first
q AS (
    SELECT host, device, any_value(netdev) FILTER (WHERE netdev IS NOT NULL) AS netdev,
           string_agg(printf('QP %d (%s%s) %d packets', qp_num, coalesce(comm, 'pid ' || pid, '?'),
                             CASE WHEN dest_qp_num IS NULL THEN '' ELSE printf(' -> QP %d', dest_qp_num) END, packets),
                      ', ' ORDER BY packets DESC, qp_num) FILTER (WHERE packets > 0 AND qp_rank <= 3) AS busiest_qps,
           count(*) FILTER (WHERE packets > 0) AS active_qps
    FROM (SELECT host, device, qp_num, any_value(netdev) AS netdev, any_value(comm) AS comm,
                 any_value(pid) AS pid, max(dest_qp_num) AS dest_qp_num,
                 coalesce(sum(delta), 0)::BIGINT AS packets,
                 row_number() OVER (PARTITION BY host, device ORDER BY coalesce(sum(delta), 0) DESC, qp_num) AS qp_rank
          FROM qp_counters WHERE source = 'psn' GROUP BY host, device, qp_num)
    GROUP BY host, device)
SELECT l.host, l.device, l.port, q.netdev, l.loss_events, l.retry_events, l.loss_counters, p.packets,
       l.loss_events / nullif(p.packets, 0) AS loss_ratio, q.busiest_qps, coalesce(q.active_qps, 0) AS active_qps
FROM l LEFT JOIN p USING (host, device, port) LEFT JOIN q USING (host, device);

------------------------------------------------------------------------------------------
-- 2. Latency
------------------------------------------------------------------------------------------

-- Per flow over the whole capture, with the fleet's median p99 for comparison.
-- Latency is judged on the data a flow sends (`flow_bytes` is its bytes sent): a socket measures
-- RTT on its own segments, and one that mostly receives (the far side of a bulk transfer, a
-- ring's receiving end) measures it on its few small sends, which wait on the peer's delayed
-- ACKs and a busy CPU. A clean DDP run's receiving end had a p99 4x the fleet's from that alone.
CREATE OR REPLACE VIEW st_latency_flow AS
WITH l AS (SELECT * EXCLUDE (first_us, last_us) FROM st_flow_raw_rtt),
j AS (
    SELECT f.flow_label, f.remote_addr, f.local_iface, l.*, b.base_rtt_us,
           coalesce(f.bytes_sent, 0) AS flow_bytes,
           coalesce(f.bytes_sent, 0) >= p.min_flow_bytes AS sends_data
    FROM l JOIN st_flow f USING (host, flow_id) LEFT JOIN st_flow_baseline b USING (host, flow_id), st_params p)
SELECT j.* EXCLUDE (sends_data),
       j.srtt_p50_us / nullif(j.base_rtt_us, 0) AS rtt_inflation,
       -- the fleet's usual tail: over the flows that send data, as the flows judged against it
       median(j.srtt_p99_us) FILTER (WHERE j.sends_data) OVER () AS fleet_median_p99_us,
       j.srtt_p99_us / nullif(median(j.srtt_p99_us) FILTER (WHERE j.sends_data) OVER (), 0) AS p99_vs_fleet
FROM j;

------------------------------------------------------------------------------------------
-- 3. Topology-induced contention: flows sharing a NIC or a peer that degrade together
------------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW st_group_window AS
WITH fw AS (
    -- the flows that send data, as the latency findings: a control connection's (TCPStore, the
    -- mesh's barrier pairs) RTT is that of a few ACK-paced packets, no path's
    SELECT w.*, f.remote_addr, f.local_iface
    FROM st_flow_window w JOIN st_flow f USING (host, flow_id), st_params p
    WHERE w.samples > 0 AND coalesce(f.bytes_sent, 0) >= p.min_flow_bytes),
g AS (
    SELECT 'peer' AS scope, remote_addr AS subject, * FROM fw
    UNION ALL
    SELECT 'interface', host || '/' || local_iface, * FROM fw),
-- every flow of the capture in the window: a busy CPU (or a job starting and stopping)
-- inflates the RTT of all flows at once, which is no one NIC's or peer's contention
fleet AS (SELECT w, count(*) AS flows, count(*) FILTER (WHERE rtt_degraded) AS degraded_flows FROM fw GROUP BY w),
gw AS (
    SELECT scope, subject, w, any_value(window_start) AS window_start,
           -- by latency: bursty training traffic has windows of low throughput (a job starting,
           -- stopping, computing) on every flow at once, which is not contention
           count(*) AS flows, count(*) FILTER (WHERE rtt_degraded) AS degraded_flows,
           avg(rtt_inflation) FILTER (WHERE degraded) AS degraded_rtt_inflation,
           avg(throughput_ratio) FILTER (WHERE degraded) AS degraded_throughput_ratio
    FROM g GROUP BY ALL)
SELECT gw.*, fleet.flows - gw.flows AS other_flows, fleet.degraded_flows - gw.degraded_flows AS other_degraded_flows
FROM gw JOIN fleet USING (w);

-- A window counts when most of a group's flows degraded together and, in the rest of the
-- capture, at most half as large a share of flows did: contention is local to a NIC or a peer.
CREATE OR REPLACE VIEW st_contention AS
WITH t AS (
    SELECT *, degraded_flows >= 2 AND degraded_flows >= flows * 0.5
              AND coalesce(other_degraded_flows / nullif(other_flows, 0), 0) <= 0.5 * degraded_flows / flows AS together
    FROM st_group_window)
SELECT scope, subject, max(flows) AS flows, count(*) AS windows,
       count(*) FILTER (WHERE together) AS together_windows,
       avg(degraded_flows) FILTER (WHERE together) AS together_flows,
       avg(degraded_rtt_inflation) FILTER (WHERE degraded_flows >= 2) AS rtt_inflation,
       avg(degraded_throughput_ratio) FILTER (WHERE degraded_flows >= 2) AS throughput_ratio
FROM t GROUP BY scope, subject;

------------------------------------------------------------------------------------------
-- 4. Synchronization amplification: collectives across ranks
------------------------------------------------------------------------------------------

-- Every imported timeline event on the UTC axis (events of traces that lost their time base are
-- left out: `time_aligned` is false for them), in µs; `st_event` holds those of the job.
CREATE OR REPLACE VIEW st_trace_event AS
SELECT host, rank, source, import_file, pid, category, name, on_gpu, collective, comm_source, process_group, seq,
       msg_bytes, group_size, epoch_ns(ts) AS start_ns, epoch_ns(ts) + greatest(dur_ns, 0) AS end_ns,
       epoch_ns(ts) // 1000 AS start_us, (epoch_ns(ts) + greatest(dur_ns, 0)) // 1000 AS end_us
FROM gpu_events
WHERE coalesce(time_aligned, true);

-- A collective that one operation on every rank of its group makes a step of: not a barrier,
-- nor point-to-point traffic (Send, Recv, SendRecv: each is two ranks' business), nor unknown.
CREATE OR REPLACE MACRO st_matchable_collective(c) AS
    c NOT IN ('Barrier', 'Send', 'Recv', 'SendRecv', 'Other');

-- What each traced rank's timeline covers: one row per imported trace file (two traces of one
-- rank a day apart are two spans, not one day), its device (GPU when it has GPU events, else the
-- CPU), the communication layer its collectives are read from (the most precise one that has
-- any: NCCL kernels, other communication kernels, the backend's own annotation such as
-- `gloo:all_reduce`, then the `c10d::` call; the most precise one at all when none has), and
-- the world size it states. A layer with only point-to-point operations is passed over: the
-- sampled traces of HTA's test data (../shared/real-traces) keep NCCL's SendRecv kernels and
-- c10d's allreduce, all_gather and all_to_all calls, and read from the kernels they had "no
-- collective operations".
CREATE OR REPLACE MACRO st_layer_order(comm_source) AS
    CASE comm_source WHEN 'nccl_kernel' THEN 1 WHEN 'comm_kernel' THEN 2 WHEN 'backend' THEN 3 WHEN 'c10d' THEN 4 END;
CREATE OR REPLACE VIEW st_rank_trace AS
WITH r AS (
    SELECT host, rank, bool_or(on_gpu) AS has_gpu,
           coalesce(min(st_layer_order(comm_source)) FILTER (WHERE st_matchable_collective(collective)),
                    min(st_layer_order(comm_source))) AS layer_order
    FROM st_trace_event GROUP BY host, rank)
SELECT e.host, e.rank, e.import_file, any_value(e.source) AS source, min(e.start_ns) AS first_ns, max(e.end_ns) AS last_ns,
       min(e.start_us) AS first_us, max(e.end_us) AS last_us,
       -- the process that wrote it (CPU rows carry the process id, GPU rows the device)
       mode(e.pid) FILTER (WHERE NOT e.on_gpu) AS pid,
       any_value(CASE WHEN r.has_gpu THEN 'gpu' ELSE 'cpu' END) AS device,
       any_value(CASE r.layer_order WHEN 1 THEN 'nccl_kernel' WHEN 2 THEN 'comm_kernel'
                                    WHEN 3 THEN 'backend' WHEN 4 THEN 'c10d' END) AS comm_layer,
       -- the largest group this trace states (its world): per trace, since two traces of one
       -- rank may be of two jobs of different sizes
       max(e.group_size) AS group_size
FROM st_trace_event e JOIN r ON r.host = e.host AND r.rank IS NOT DISTINCT FROM e.rank
GROUP BY e.host, e.rank, e.import_file;

-- What a collective's `source` (its communication layer) means, for people.
CREATE OR REPLACE MACRO st_source_name(source) AS
    CASE source WHEN 'nccl_kernel' THEN 'NCCL kernels' WHEN 'comm_kernel' THEN 'communication kernels'
                WHEN 'backend' THEN 'the backend''s own annotations, e.g. gloo:all_reduce'
                WHEN 'c10d' THEN 'c10d calls' WHEN 'param_comms' THEN 'record_param_comms'
                WHEN 'nccl_call' THEN 'NCCL API calls' ELSE source END;

-- Traces that can be one job: they share a moment in time (the moment most traced ranks
-- cover), state the same group size, and come from the process that traced the rank at that
-- moment. Anything else is refused, with the reason, instead of being matched into nonsense:
-- two runs a day apart are not one job, nor are two runs of the same hosts and ranks read
-- together (their sequence numbers repeat; matched, they made "steps" of 10 ranks out of 5).
-- A rank's later traces from the same process are kept (a profiler schedule with `repeat`
-- writes one trace per cycle).
CREATE OR REPLACE VIEW st_job_moment AS
SELECT a.first_us AS moment_us, count(DISTINCT (b.host, b.rank)) AS ranks
FROM st_rank_trace a JOIN st_rank_trace b ON b.first_us <= a.first_us AND b.last_us >= a.first_us
WHERE a.rank IS NOT NULL AND b.rank IS NOT NULL
GROUP BY a.first_us ORDER BY ranks DESC, moment_us LIMIT 1;

CREATE OR REPLACE VIEW st_rank_refused AS
WITH t AS (
    SELECT host, rank, source, import_file, pid, first_us <= m.moment_us AND last_us >= m.moment_us AS at_moment, group_size
    FROM st_rank_trace, st_job_moment m WHERE rank IS NOT NULL),
r AS (
    SELECT host, rank, bool_or(at_moment) AS rank_at_moment,
           list(DISTINCT pid) FILTER (WHERE at_moment AND pid IS NOT NULL) AS job_pids
    FROM t GROUP BY host, rank),
g AS (SELECT mode(group_size) AS group_size FROM t WHERE at_moment)
SELECT t.host, t.rank, t.source, t.import_file,
       CASE WHEN NOT r.rank_at_moment THEN 'its trace does not overlap in time with the other ranks'' traces'
            WHEN t.group_size IS NOT NULL AND g.group_size IS NOT NULL AND t.group_size <> g.group_size
              THEN printf('it states a group size of %d, the other ranks %d', t.group_size, g.group_size)
            ELSE printf('%s (imported as %s) comes from another process (pid %d) than its trace of the job (pid %s): another run',
                        regexp_extract(t.source, '[^/]*$'), t.import_file, t.pid, array_to_string(r.job_pids, ', ')) END AS reason
FROM t JOIN r USING (host, rank) CROSS JOIN g
WHERE NOT r.rank_at_moment
   OR (t.group_size IS NOT NULL AND g.group_size IS NOT NULL AND t.group_size <> g.group_size)
   OR (NOT t.at_moment AND t.pid IS NOT NULL AND len(coalesce(r.job_pids, [])) > 0
       AND NOT list_contains(r.job_pids, t.pid));

-- Timelines and a network capture read together but of different times (another day's trace
-- beside today's capture): no network observation can be tied to a training step, and the
-- categories that join them would only say "nothing found". One row when they do not overlap.
CREATE OR REPLACE VIEW st_timeline_network_apart AS
WITH t AS (SELECT min(ts) AS first, max(ts + to_microseconds(dur_ns // 1000)) AS last
           FROM gpu_events WHERE coalesce(time_aligned, true)),
n AS (SELECT min(first) AS first, max(last) AS last FROM (
          SELECT min(start) AS first, max(coalesce("end", start)) AS last FROM flows
          UNION ALL SELECT min(ts), max(ts) FROM rtt
          UNION ALL SELECT min(ts), max(ts + to_microseconds((window_ns // 1000)::BIGINT)) FROM flow_windows))
SELECT t.first AS timeline_first, t.last AS timeline_last, n.first AS network_first, n.last AS network_last
FROM t, n
WHERE t.first IS NOT NULL AND n.first IS NOT NULL AND (t.last < n.first OR t.first > n.last);

-- The job's timeline events: every imported event but those of refused traces (a rank's
-- steps, own time and lanes would otherwise mix two runs' ProfilerStep#N).
CREATE OR REPLACE VIEW st_event AS
SELECT e.* FROM st_trace_event e
ANTI JOIN st_rank_refused r ON r.host = e.host AND r.rank = e.rank AND r.import_file = e.import_file;

-- ProfilerStep#N annotations: the training steps of each rank (N counts iterations from the
-- start of the job, so step N of every rank is the same iteration).
CREATE OR REPLACE VIEW st_profiler_step AS
SELECT host, rank, TRY_CAST(regexp_extract(name, '#(\d+)', 1) AS BIGINT) AS step,
       min(start_ns) AS start_ns, max(end_ns) AS end_ns, min(start_us) AS start_us, max(end_us) AS end_us
FROM st_event
-- the CPU annotation; Kineto mirrors it on the GPU timeline as `gpu_user_annotation`
WHERE name LIKE 'ProfilerStep#%' AND NOT on_gpu AND category <> 'gpu_user_annotation' AND rank IS NOT NULL
GROUP BY ALL;

-- One row per rank and collective operation, from the rank's communication layer, or, without
-- timelines, from NCCL API calls (entry time only) joined to their rank via CommInitRank. The
-- key that matches one operation across ranks: the process group and its sequence number when
-- the trace has them (each group counts its own: a job with data- and tensor-parallel groups
-- has a `seq 1` in each); else the ProfilerStep and the operation's order within it; else its
-- order.
CREATE OR REPLACE VIEW st_collective_op AS
WITH k AS (
    SELECT e.comm_source AS source, e.host, e.rank, e.collective, e.process_group, e.seq,
           e.msg_bytes, e.group_size, e.start_us, e.end_us,
           (SELECT max(p.step) FROM st_profiler_step p
             WHERE p.host = e.host AND p.rank = e.rank AND p.start_us <= e.start_us AND p.end_us > e.start_us) AS profiler_step
    FROM st_event e
    JOIN (SELECT DISTINCT host, rank, comm_layer FROM st_rank_trace) t
      ON t.host = e.host AND t.rank = e.rank AND t.comm_layer = e.comm_source
    WHERE e.rank IS NOT NULL AND st_matchable_collective(e.collective))
SELECT source, host, rank, collective, process_group, msg_bytes, group_size, start_us, end_us, profiler_step,
       coalesce(
         'pg ' || coalesce(process_group, '?') || ' seq ' || seq,
         coalesce('pg ' || process_group || ' ', '') || 'step ' || profiler_step || ' #'
           || row_number() OVER (PARTITION BY host, rank, collective, process_group, profiler_step ORDER BY start_us, end_us),
         coalesce('pg ' || process_group || ' ', '') || '#'
           || row_number() OVER (PARTITION BY host, rank, collective, process_group ORDER BY start_us, end_us)) AS match_key
FROM k
UNION ALL
SELECT 'nccl_call', c.host, i.rank, c.op, NULL, NULL, NULL, st_us(c.ts), NULL, NULL,
       '#' || row_number() OVER (PARTITION BY c.host, i.rank, c.op ORDER BY c.ts)
FROM nccl_calls c
JOIN (SELECT host, pid, comm, any_value(rank) AS rank FROM nccl_calls
      WHERE op = 'CommInitRank' AND result = 'ncclSuccess' GROUP BY ALL) i USING (host, pid, comm)
WHERE c.op IN ('AllReduce', 'AllGather', 'ReduceScatter', 'Broadcast', 'Reduce')
  AND NOT EXISTS (SELECT 1 FROM gpu_events WHERE collective IS NOT NULL);

-- One collective operation on every rank of its group is one step: every traced rank, or, for
-- an operation of a smaller process group (its `group_size`), that many. A step is matched
-- only when every such rank has it and, for timelines with end times, all of its ranks'
-- operations overlap in time (an operation cannot finish before the last rank joins it); the
-- others are in st_collective_refused.
CREATE OR REPLACE VIEW st_collective_candidate AS
WITH k AS (
    SELECT *, min(start_us) OVER (PARTITION BY source, collective, match_key) AS key_start_us
    FROM st_collective_op),
o AS (
    SELECT * EXCLUDE (key_start_us),
           dense_rank() OVER (PARTITION BY source, collective ORDER BY key_start_us, match_key) AS step_id
    FROM k)
SELECT *, count(*) OVER (PARTITION BY source, collective, match_key) AS ranks,
       max(start_us) OVER (PARTITION BY source, collective, match_key) AS last_start_us,
       min(start_us) OVER (PARTITION BY source, collective, match_key) AS first_start_us,
       min(end_us) OVER (PARTITION BY source, collective, match_key) AS first_end_us,
       -- a group size below 2 says nothing about a collective's ranks (real traces state 1 on
       -- calls without a process group)
       least((SELECT count(DISTINCT (host, rank)) FROM st_collective_op x WHERE x.source = o.source),
             coalesce(max(CASE WHEN group_size >= 2 THEN group_size END)
                        OVER (PARTITION BY source, collective, match_key), 1e9)::BIGINT) AS expected_ranks
FROM o;

CREATE OR REPLACE VIEW st_collective_refused AS
SELECT source, collective, count(DISTINCT match_key) AS steps,
       count(DISTINCT match_key) FILTER (WHERE ranks < expected_ranks) AS not_on_every_rank,
       -- the same key twice on a rank: two runs whose sequence numbers repeat
       count(DISTINCT match_key) FILTER (WHERE ranks > expected_ranks) AS repeated,
       count(DISTINCT match_key) FILTER (WHERE ranks = expected_ranks AND last_start_us > first_end_us) AS not_overlapping
FROM st_collective_candidate
WHERE ranks <> expected_ranks OR last_start_us > first_end_us
GROUP BY ALL;

CREATE OR REPLACE VIEW st_collective_rank_step AS
SELECT source, collective, step_id AS step, match_key, process_group, profiler_step, host, rank, ranks,
       start_us, end_us, msg_bytes,
       last_start_us - start_us AS wait_us,
       end_us - start_us AS dur_us,
       end_us - last_start_us AS transfer_us,
       -- bounded: the wait is part of this rank's operation
       least(1.0, greatest(0.0, (last_start_us - start_us) / nullif(end_us - start_us, 0))) AS wait_fraction
FROM st_collective_candidate
WHERE ranks = expected_ranks AND ranks >= 2 AND NOT coalesce(last_start_us > first_end_us, false);

CREATE OR REPLACE VIEW st_collective_step AS
SELECT source, collective, step, any_value(match_key) AS match_key, any_value(process_group) AS process_group,
       -- the training step (ProfilerStep#N) most of its ranks ran it in
       mode(profiler_step) AS iteration, any_value(ranks) AS ranks,
       to_timestamp(min(start_us) / 1e6) AS first_start,
       min(start_us) AS first_start_us, max(end_us) AS last_end_us,
       max(start_us) - min(start_us) AS arrival_spread_us,
       max(end_us) - min(end_us) AS finish_spread_us,
       max(end_us) - min(start_us) AS step_us,
       median(end_us - start_us) AS median_dur_us,
       max(end_us) - max(start_us) AS transfer_us,
       -- ties (one µs) broken by rank, so that the same data always names the same rank
       arg_max(rank, (start_us, rank)) AS last_rank,
       arg_max(host, (start_us, rank)) AS last_host,
       max(wait_fraction) AS fastest_wait_fraction
FROM st_collective_rank_step GROUP BY source, collective, step;

-- Bandwidth of each collective operation that states its message size (NCCL kernels and
-- `record_param_comms` in PyTorch >= 2.1): algorithm bandwidth = bytes / duration, and bus
-- bandwidth = algorithm bandwidth x the share of the data each rank sends over links, as
-- nccl-tests define it (AllReduce 2(n-1)/n; AllGather, ReduceScatter (n-1)/n; others 1), so
-- that ranks and collectives compare against the link speed.
CREATE OR REPLACE VIEW st_collective_bandwidth AS
SELECT host, rank, collective, comm_source, process_group, group_size, msg_bytes, start_us,
       (end_ns - start_ns) / 1000.0 AS dur_us,
       msg_bytes * 8e9 / nullif(end_ns - start_ns, 0) AS algbw_bps,
       msg_bytes * 8e9 / nullif(end_ns - start_ns, 0) *
         CASE WHEN group_size IS NULL OR group_size < 2 THEN 1.0
              WHEN collective = 'AllReduce' THEN 2.0 * (group_size - 1) / group_size
              WHEN collective IN ('AllGather', 'ReduceScatter') THEN (group_size - 1.0) / group_size
              ELSE 1.0 END AS busbw_bps
FROM st_event
WHERE msg_bytes IS NOT NULL AND comm_source IN ('nccl_kernel', 'comm_kernel') AND end_ns > start_ns;

-- Ranks that arrive last, step after step.
CREATE OR REPLACE VIEW st_straggler AS
WITH s AS (
    SELECT source, collective, count(*) AS steps, median(arrival_spread_us) AS median_spread_us,
           median(step_us) AS median_step_us, any_value(ranks) AS ranks
    FROM st_collective_step GROUP BY ALL)
SELECT c.source, c.collective, c.last_rank AS rank, any_value(c.last_host) AS host,
       count(*) AS steps_last, any_value(s.steps) AS steps, any_value(s.ranks) AS ranks,
       count(*) / any_value(s.steps) AS share_last,
       -- the most steps any rank of this collective arrived last in
       max(count(*)) OVER (PARTITION BY c.source, c.collective) AS most_steps_last,
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
    FROM st_collective_rank_step WHERE source IN ('nccl_kernel', 'comm_kernel') GROUP BY rank)
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

-- Busy intervals per traced rank, in three lanes: `comm` (its collective operations, from its
-- communication layer), `compute` (everything else its device ran: GPU kernels, memcpy and
-- memset; for CPU-only traces the CPU operators, less waits and synchronizations), and `busy`
-- (either). Each lane's intervals are merged, so time covered twice (nested operators, kernels
-- on several streams) counts once. In ns: rounding each of thousands of kernels to µs would
-- shift a step's busy time by hundreds of µs.
CREATE OR REPLACE VIEW st_lane_event AS
SELECT e.host, e.rank, 'comm' AS lane, e.start_ns AS s, e.end_ns AS e
FROM st_event e
JOIN (SELECT DISTINCT host, rank, device, comm_layer FROM st_rank_trace) t
  ON t.host = e.host AND t.rank IS NOT DISTINCT FROM e.rank
WHERE e.end_ns > e.start_ns
  AND CASE WHEN t.device = 'gpu' THEN e.on_gpu AND e.comm_source IS NOT NULL
           ELSE e.comm_source = t.comm_layer END
UNION ALL
SELECT e.host, e.rank, 'compute', e.start_ns, e.end_ns
FROM st_event e
JOIN (SELECT DISTINCT host, rank, device FROM st_rank_trace) t
  ON t.host = e.host AND t.rank IS NOT DISTINCT FROM e.rank
WHERE e.comm_source IS NULL AND e.end_ns > e.start_ns
  AND CASE WHEN t.device = 'gpu' THEN e.on_gpu
           ELSE e.category = 'cpu_op' AND e.name NOT ILIKE '%wait%' AND e.name NOT ILIKE '%synchronize%' END;

CREATE OR REPLACE VIEW st_lane_interval AS
WITH x AS (
    SELECT * FROM st_lane_event
    UNION ALL
    SELECT host, rank, 'busy', s, e FROM st_lane_event),
m AS (
    SELECT *, max(e) OVER (PARTITION BY host, rank, lane ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM x),
g AS (
    SELECT *, sum(CASE WHEN prev_end >= s THEN 0 ELSE 1 END)
                OVER (PARTITION BY host, rank, lane ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM m)
SELECT host, rank, lane, min(s) AS s, max(e) AS e FROM g GROUP BY host, rank, lane, island;

-- Per rank and training step (ProfilerStep#N): busy, compute, communication, their overlap,
-- idle, and the communication not hidden behind compute (exposed), in µs.
CREATE OR REPLACE VIEW st_rank_step AS
WITH o AS (
    SELECT p.host, p.rank, p.step, p.start_ns, p.end_ns, i.lane,
           sum(greatest(0, least(i.e, p.end_ns) - greatest(i.s, p.start_ns))) / 1000.0 AS us
    FROM st_profiler_step p
    LEFT JOIN st_lane_interval i
      ON i.host = p.host AND i.rank = p.rank AND i.s < p.end_ns AND i.e > p.start_ns
    GROUP BY ALL)
SELECT host, rank, step, to_timestamp(any_value(start_ns) / 1e9) AS step_start,
       any_value(end_ns - start_ns) / 1000.0 AS step_us,
       coalesce(sum(us) FILTER (WHERE lane = 'busy'), 0) AS busy_us,
       coalesce(sum(us) FILTER (WHERE lane = 'compute'), 0) AS compute_us,
       coalesce(sum(us) FILTER (WHERE lane = 'comm'), 0) AS comm_us,
       compute_us + comm_us - busy_us AS overlap_us,
       step_us - busy_us AS idle_us,
       comm_us - overlap_us AS exposed_comm_us
FROM o GROUP BY host, rank, step;

-- Per traced rank and window: the same shares, of the time the rank was traced in that window
-- (not of the whole window). Windows outside every trace of the rank have no row, and no grid
-- is filled across gaps between traces.
CREATE OR REPLACE VIEW st_rank_window AS
WITH p AS (SELECT window_us, window_us * 1000 AS wn FROM st_params),
w AS (
    SELECT DISTINCT host, rank, unnest(range(first_ns // p.wn, (last_ns - 1) // p.wn + 1)) AS w
    FROM st_rank_trace, p WHERE last_ns > first_ns),
tr AS (
    SELECT w.host, w.rank, w.w, any_value(t.device) AS device,
           least(any_value(p.wn), sum(least(t.last_ns, (w.w + 1) * p.wn) - greatest(t.first_ns, w.w * p.wn))) AS traced_ns
    FROM w CROSS JOIN p JOIN st_rank_trace t
      ON t.host = w.host AND t.rank IS NOT DISTINCT FROM w.rank
     AND t.first_ns < (w.w + 1) * p.wn AND t.last_ns > w.w * p.wn
    GROUP BY ALL),
o AS (
    SELECT tr.host, tr.rank, tr.w, i.lane,
           sum(least(i.e, (tr.w + 1) * p.wn) - greatest(i.s, tr.w * p.wn)) AS ns
    FROM tr CROSS JOIN p JOIN st_lane_interval i
      ON i.host = tr.host AND i.rank IS NOT DISTINCT FROM tr.rank
     AND i.s < (tr.w + 1) * p.wn AND i.e > tr.w * p.wn
    GROUP BY ALL),
c AS (
    SELECT host, rank, start_us // (SELECT window_us FROM st_params) AS w, count(*) AS collective_ops
    FROM st_collective_op WHERE source <> 'nccl_call' GROUP BY ALL),
f AS (
    SELECT tr.host, tr.rank, tr.w, tr.device, tr.traced_ns,
           coalesce(sum(o.ns) FILTER (WHERE o.lane = 'busy'), 0) / tr.traced_ns AS busy_frac,
           coalesce(sum(o.ns) FILTER (WHERE o.lane = 'compute'), 0) / tr.traced_ns AS compute_frac,
           coalesce(sum(o.ns) FILTER (WHERE o.lane = 'comm'), 0) / tr.traced_ns AS comm_frac
    FROM tr LEFT JOIN o ON o.host = tr.host AND o.rank IS NOT DISTINCT FROM tr.rank AND o.w = tr.w
    WHERE tr.traced_ns > 0
    GROUP BY tr.host, tr.rank, tr.w, tr.device, tr.traced_ns)
SELECT f.host, f.rank, f.w, to_timestamp(f.w * p.window_us / 1e6) AS window_start, f.device,
       f.traced_ns / 1000.0 AS traced_us,
       -- interval unions cannot exceed the traced time; least() only absorbs µs rounding
       least(1.0, f.busy_frac) AS busy_frac, least(1.0, f.compute_frac) AS compute_frac,
       least(1.0, f.comm_frac) AS comm_frac,
       greatest(0.0, least(1.0, f.compute_frac + f.comm_frac - f.busy_frac)) AS overlap_frac,
       greatest(0.0, 1.0 - least(1.0, f.busy_frac)) AS idle_frac,
       coalesce(c.collective_ops, 0) AS collective_ops,
       f.comm_frac >= p.idle_collective_fraction AND f.compute_frac <= p.idle_compute_fraction AS waiting_on_collectives
FROM f LEFT JOIN c ON c.host = f.host AND c.rank IS NOT DISTINCT FROM f.rank AND c.w = f.w, st_params p;

-- Network symptoms per host and window.
CREATE OR REPLACE VIEW st_host_network_window AS
SELECT w.host, w.w, sum(w.retransmits) AS retransmits,
       count(*) FILTER (WHERE w.degraded) AS degraded_flows,
       max(w.rtt_inflation) AS max_rtt_inflation,
       string_agg(DISTINCT f.remote_addr, ', ' ORDER BY f.remote_addr) FILTER (WHERE w.degraded OR w.retransmits > 0) AS affected_peers
FROM st_flow_window w JOIN st_flow f USING (host, flow_id) GROUP BY w.host, w.w;

-- Network per host and window: bytes, RTT percentiles, retransmits (the network half of
-- `windows`).
CREATE OR REPLACE VIEW st_host_net_window AS
WITH r AS (
    SELECT host, st_us(ts) // p.window_us AS w, srtt_us FROM rtt, st_params p),
q AS (
    SELECT host, w, count(*) AS rtt_samples, quantile_cont(srtt_us, 0.5) AS rtt_p50_us,
           quantile_cont(srtt_us, 0.99) AS rtt_p99_us
    FROM r GROUP BY ALL),
b AS (SELECT host, w, sum(greatest(bytes, 0)) AS bytes FROM st_rtt_window GROUP BY ALL),
x AS (SELECT host, w, sum(retransmits) AS retransmits FROM st_retrans_window GROUP BY ALL)
SELECT coalesce(q.host, x.host) AS host, coalesce(q.w, x.w) AS w, coalesce(b.bytes, 0) AS net_bytes,
       coalesce(b.bytes, 0) * 8e6 / p.window_us AS net_throughput_bps,
       coalesce(q.rtt_samples, 0) AS rtt_samples, q.rtt_p50_us, q.rtt_p99_us,
       coalesce(x.retransmits, 0) AS retransmits
FROM q
FULL JOIN x ON x.host = q.host AND x.w = q.w
LEFT JOIN b ON b.host = coalesce(q.host, x.host) AND b.w = coalesce(q.w, x.w), st_params p;

-- The `windows` table of `scaletrace merge`: every traced rank's window with its host's network
-- in the same window, and the host's network windows where no rank was traced (rank null).
CREATE OR REPLACE VIEW st_window AS
SELECT coalesce(g.host, n.host) AS host, g.rank, coalesce(g.w, n.w) AS w,
       to_timestamp(coalesce(g.w, n.w) * p.window_us / 1e6) AS window_start,
       g.device, g.traced_us, g.busy_frac, g.compute_frac, g.comm_frac, g.overlap_frac, g.idle_frac,
       g.collective_ops, g.waiting_on_collectives,
       n.net_bytes, n.net_throughput_bps, n.rtt_samples, n.rtt_p50_us, n.rtt_p99_us, n.retransmits
FROM st_rank_window g
FULL JOIN st_host_net_window n ON n.host = g.host AND n.w = g.w, st_params p;

CREATE OR REPLACE VIEW st_gpu_idle_window AS
SELECT g.*, n.retransmits, n.degraded_flows, n.max_rtt_inflation, n.affected_peers,
       coalesce(n.retransmits > 0 OR n.degraded_flows > 0, false) AS network_symptom
FROM st_rank_window g
LEFT JOIN st_host_network_window n USING (host, w)
-- GPUs only: a CPU-only rank (gloo) runs its collectives on a thread beside the compute.
WHERE g.waiting_on_collectives AND g.rank IS NOT NULL AND g.device = 'gpu';

CREATE OR REPLACE VIEW st_gpu_idle AS
SELECT i.host, i.rank, count(*) AS idle_windows, coalesce(any_value(n.windows), 0) AS windows,
       count(*) FILTER (WHERE network_symptom) AS explained_windows,
       sum(retransmits) AS retransmits, max(max_rtt_inflation) AS max_rtt_inflation,
       nullif(array_to_string(list_sort(list_distinct(flatten(list(string_split(affected_peers, ', '))))), ', '), '') AS affected_peers,
       avg(comm_frac) AS collective_fraction
-- (the windows by a join: Spark takes no correlated subquery beside aggregates)
FROM st_gpu_idle_window i
LEFT JOIN (SELECT host, rank, count(*) AS windows FROM st_rank_window GROUP BY host, rank) n
       ON n.host = i.host AND n.rank = i.rank
GROUP BY i.host, i.rank;

-- The same per host: one finding per node, not per GPU. A slow link makes every rank of the
-- job wait in the same windows, and a line per rank named the same windows and peers eight
-- times per node (128 lines for one congested peer in a 16-node fleet, bench/fleet.py); the
-- network symptoms are the host's anyway. Windows count once per host however many of its
-- ranks idled in them.
CREATE OR REPLACE VIEW st_gpu_idle_host AS
WITH r AS (SELECT * FROM st_gpu_idle, st_params p WHERE idle_windows >= p.min_idle_windows),
w AS (
    SELECT DISTINCT i.host, i.w, i.network_symptom, i.retransmits, i.max_rtt_inflation, i.affected_peers
    FROM st_gpu_idle_window i JOIN r USING (host, rank)),
-- each per host, joined below (Spark takes no correlated subquery beside aggregates)
k AS (SELECT host, count(*) AS idle_ranks, list(rank ORDER BY rank) AS ranks FROM r GROUP BY host),
g AS (SELECT host, count(DISTINCT rank) AS gpu_ranks, count(DISTINCT w) AS windows
      FROM st_rank_window WHERE device = 'gpu' GROUP BY host),
h AS (SELECT host, count(*) AS idle_windows, count(*) FILTER (WHERE network_symptom) AS explained_windows,
             coalesce(sum(retransmits), 0) AS retransmits, max(max_rtt_inflation) AS max_rtt_inflation,
             nullif(array_to_string(list_sort(list_distinct(flatten(list(string_split(affected_peers, ', '))))), ', '), '') AS affected_peers
      FROM w GROUP BY host)
SELECT k.host, k.idle_ranks, k.ranks, coalesce(g.gpu_ranks, 0) AS gpu_ranks, coalesce(g.windows, 0) AS windows,
       coalesce(h.idle_windows, 0) AS idle_windows, coalesce(h.explained_windows, 0) AS explained_windows,
       coalesce(h.retransmits, 0) AS retransmits, h.max_rtt_inflation, h.affected_peers
FROM k LEFT JOIN g ON g.host = k.host LEFT JOIN h ON h.host = k.host;

------------------------------------------------------------------------------------------
-- 7. What slowed the job, where, and how much it cost
------------------------------------------------------------------------------------------

-- Each matched collective step against its healthy transfer time (from the last rank's arrival
-- to the end): the 10th percentile of the same operation of the same process group over the
-- run (the same position within the training step when the trace has ProfilerStep and no
-- sequence numbers, so buckets of different sizes are not compared). A step is slow when its transfer took at least `min_excess_us` and
-- `min_excess_fraction` of that baseline longer, late when its last rank arrived at least
-- `min_excess_us` after the first.
CREATE OR REPLACE VIEW st_collective_excess AS
WITH s AS (
    SELECT *, CASE WHEN match_key LIKE '%step % #%' THEN regexp_extract(match_key, '#\d+$') ELSE 'any' END AS position,
           coalesce(process_group, '') AS group_key
    FROM st_collective_step),
b AS (
    SELECT source, collective, group_key, position, quantile_cont(transfer_us, 0.1) AS base_us, count(*) AS occurrences
    FROM s GROUP BY ALL)
SELECT s.*, b.base_us, b.occurrences, greatest(0, s.transfer_us - b.base_us) AS transfer_excess_us,
       -- the transfer after the last arrival took much longer than it does when healthy
       b.occurrences >= p.min_occurrences
         AND s.transfer_us - b.base_us >= greatest(p.min_excess_us, p.min_excess_fraction * b.base_us) AS slow,
       -- the last rank arrived much later than the first
       s.arrival_spread_us >= greatest(p.min_excess_us, p.min_spread_us) AS late
FROM s JOIN b USING (source, collective, group_key, position), st_params p;

-- Matching points in time (RTT samples) to the intervals of collective steps: an equi-join on
-- a time bin of about a step's length, then the exact test. A sample in [s, e] falls in one of
-- the bins from s's to e's, so each (sample, interval) pair is found once, as the range join
-- found it. DuckDB's inequality join of every sample with every step held 21 GB and 412 s for
-- 64 nodes' 2 minutes (49 M samples, bench/fleet.py); the bins keep it to a hash join.
CREATE OR REPLACE VIEW st_match_bin AS
SELECT greatest(1000, coalesce(median(last_end_us - first_start_us), 0))::BIGINT AS bin_us
FROM st_collective_excess;
CREATE OR REPLACE MACRO st_bins(s, e, bin_us) AS range(s // bin_us, e // bin_us + 1);

-- The usual queueing the verdict judges slow steps against: `st_fleet_queueing`'s rule over
-- the RTT samples taken during the collective steps that were not slow, when the timelines
-- have enough of them: what the paths see while the job runs at its healthy speed. Over the
-- whole run, a fault on the node at two of the three links of a 3-node ring (20 ms of netem
-- delay from step 12 of 30) was the usual itself: its queued samples stayed below three times
-- it, and the job lost 2.4 s with nothing found. Without such steps, the whole run's.
CREATE OR REPLACE VIEW st_healthy_queueing AS
WITH healthy AS (
    SELECT DISTINCT first_start_us AS s, last_end_us AS e FROM st_collective_excess
    WHERE NOT slow AND transfer_us IS NOT NULL),
hb AS (
    SELECT DISTINCT unnest(st_bins(h.s, h.e, m.bin_us)) AS bin, h.s, h.e FROM healthy h, st_match_bin m),
-- each flow's median in those steps, quantile_cont's from how often each value occurs, as
-- `st_flow_raw_rtt` computes it: quantile_cont held every sample in memory
v AS (
    SELECT r.host, r.flow_id, r.srtt_us AS x, count(*) AS n
    FROM (SELECT host, flow_id, srtt_us, st_us(ts) AS ts_us, st_us(ts) // m.bin_us AS bin
          FROM rtt, st_match_bin m) r
    -- a semi join on the bin, not a correlated EXISTS: DuckDB decorrelated that into a
    -- DISTINCT over every sample's time (6.8 s of 7.5 on 64 nodes' 2 minutes)
    SEMI JOIN hb ON hb.bin = r.bin AND r.ts_us BETWEEN hb.s AND hb.e
    GROUP BY ALL),
c AS (
    SELECT *, sum(n) OVER (PARTITION BY host, flow_id ORDER BY x) - n AS below,
           sum(n) OVER (PARTITION BY host, flow_id) AS total
    FROM v),
l AS (
    SELECT host, flow_id,
           st_between_positions(min(x) FILTER (WHERE st_holds_position(below, n, total, 0.5, 0)),
                                min(x) FILTER (WHERE st_holds_position(below, n, total, 0.5, 1)),
                                any_value(st_quantile_position(total, 0.5))) AS p50
    FROM c GROUP BY host, flow_id),
h AS (
    SELECT coalesce(quantile_cont(l.p50 - b.base_rtt_us, 0.25), 0) AS queueing_us,
           greatest(p.min_queueing_us, p.queueing_vs_fleet * coalesce(quantile_cont(l.p50 - b.base_rtt_us, 0.25), 0)) AS threshold_us,
           count(*) AS flows
    FROM l JOIN st_flow_baseline b USING (host, flow_id) JOIN flows f USING (host, flow_id), st_params p
    WHERE coalesce(f.bytes_sent, 0) >= p.min_flow_bytes
    GROUP BY p.min_queueing_us, p.queueing_vs_fleet),
-- one row (an aggregate of h, which has one or none), not a lateral join: Spark refuses those
u AS (
    SELECT coalesce(max(h.flows), 0) > 0
           AND (SELECT count(*) FROM healthy) >= (SELECT min_occurrences FROM st_params) AS used
    FROM h)
SELECT CASE WHEN used THEN h.queueing_us ELSE f.queueing_us END AS queueing_us,
       CASE WHEN used THEN h.threshold_us ELSE f.threshold_us END AS threshold_us,
       CASE WHEN used THEN 'healthy steps' ELSE 'whole run' END AS judged_over
FROM st_fleet_queueing f LEFT JOIN h ON true CROSS JOIN u;

-- Which node is at each end of a retransmitted segment: the recording host, and the host that
-- owns the remote address in the same capture (else the address itself).
CREATE OR REPLACE VIEW st_retrans_ends AS
WITH r AS (
    SELECT r.host, st_us(r.ts) AS ts_us, epoch_ns(r.ts) AS ts_ns, r.flow_id, r.remote_addr, coalesce(n.node, r.host) AS node
    FROM retransmits r LEFT JOIN st_flow_node n ON n.host = r.host AND n.flow_id = r.flow_id
    WHERE r.kind = 'retransmit' AND r.remote_addr <> r.local_addr)
SELECT r.*, st_remote_node(r.remote_addr, r.node) AS remote_node
FROM r;

-- The node a step's evidence blames: the one at the end of most of it, or, when two nodes tie
-- (all of it on the one link between them: a ring sends over one link per node), the link
-- `link A - B`, since the evidence cannot tell which end's port is at fault. Three or more
-- tied nodes name the first by name: any rule will do, but the same data must always give the
-- same answer (an arbitrary pick among ties made two analyses of one run differ by a step).
CREATE OR REPLACE MACRO st_blamed_end(top_nodes) AS
    CASE WHEN len(top_nodes) = 2
         THEN 'link ' || list_sort(top_nodes)[1] || ' - ' || list_sort(top_nodes)[2]
         ELSE list_sort(top_nodes)[1] END;

-- The nodes a culprit names: both ends of a `link A - B`, else the node itself.
CREATE OR REPLACE MACRO st_culprit_ends(culprit_name) AS
    CASE WHEN culprit_name LIKE 'link %' THEN string_split(substr(culprit_name, 6), ' - ') ELSE [culprit_name] END;

-- Retransmits during each slow step, counted for each end of their link: the node whose own
-- link loses packets collects the retransmits of all its peers and ranks above each neighbour.
CREATE OR REPLACE VIEW st_slow_step_retransmits AS
WITH x AS (SELECT * FROM st_collective_excess WHERE slow OR late),
ends AS (
    SELECT x.source, x.collective, x.step, e.node, count(*) AS retransmits
    FROM x JOIN st_retrans_ends l ON l.ts_us BETWEEN x.first_start_us AND x.last_end_us
    CROSS JOIN LATERAL (SELECT unnest([l.node, l.remote_node]) AS node) e
    GROUP BY ALL)
SELECT source, collective, step,
       st_blamed_end(list(node) FILTER (WHERE retransmits = top)) AS node,
       max(retransmits) AS node_retransmits,
       -- each retransmit was counted at both of its ends
       sum(retransmits) // 2 AS retransmits
FROM (SELECT *, max(retransmits) OVER (PARTITION BY source, collective, step) AS top FROM ends)
GROUP BY source, collective, step;

-- The flows that carry data (at least `min_flow_bytes`), with their node and the node at the
-- other end: the one owning the remote address in the same capture (else the address itself).
CREATE OR REPLACE VIEW st_data_flow AS
WITH f AS (
    SELECT host, flow_id, any_value(local_addr) AS local_addr, any_value(remote_addr) AS remote_addr,
           sum(coalesce(bytes_sent, 0)) AS bytes_sent
    FROM flows, st_params p
    GROUP BY host, flow_id, p.min_flow_bytes
    HAVING sum(coalesce(bytes_sent, 0) + coalesce(bytes_received, 0)) >= p.min_flow_bytes),
n AS (SELECT f.*, fn.node FROM f JOIN st_flow_node fn USING (host, flow_id))
SELECT n.*, st_remote_node(n.remote_addr, n.node) AS remote_node
FROM n WHERE n.remote_addr <> n.local_addr;

-- The queueing in an RTT sample: its smoothed RTT above the path's windowed minimum (itself
-- where the kernel gave none). Signed: the kernel's minimum is over a 5-minute window and
-- restarts from a fresh sample when its best one ages out, which can leave it above the
-- smoothed RTT for a while; in the columns' unsigned type the difference was an overflow error
-- that stopped the whole analysis.
CREATE OR REPLACE MACRO st_queued_us(srtt_us, min_rtt_us) AS
    srtt_us::BIGINT - coalesce(nullif(min_rtt_us, 0), srtt_us);

-- RTT samples of the flows that send data, with the node at each end and the queueing in each
-- sample: its smoothed RTT above the path's windowed minimum. A socket measures RTT on what it
-- sends: one that sent less than `min_flow_bytes` (the quiet end of a connection whose data
-- flows the other way) times small messages and its peer's delayed ACKs, not a path, and the
-- usual it is judged against (`st_healthy_queueing`) leaves such ends out too. Under
-- reordering toward node0, node2's end of node3's 198 MB flow to it (91 kB sent) queued in 78
-- steps and named node3 the first culprit.
-- For queries: `st_queued_sample` and `st_queueing_contrast` write this view's join out again,
-- to pick or count the samples before they meet their flows; which samples count is decided
-- in all three alike.
CREATE OR REPLACE VIEW st_rtt_ends AS
SELECT r.host, n.node, st_us(r.ts) AS ts_us, r.flow_id, n.remote_node,
       st_queued_us(r.srtt_us, r.min_rtt_us) AS queued_us
FROM rtt r JOIN st_data_flow n USING (host, flow_id), st_params p
WHERE n.bytes_sent >= p.min_flow_bytes;

-- Each data flow's delivery rate while it sent: the kernel's rate sample (bytes delivered over
-- the interval that delivered them) at the RTT samples where its acknowledged bytes grew; the
-- median of them is the rate its path gives it (a rate limit, a lower link speed, a busy port).
CREATE OR REPLACE VIEW st_flow_delivery AS
WITH s AS (
    SELECT host, flow_id, delivery_rate_bps,
           bytes_acked - lag(bytes_acked) OVER (PARTITION BY host, flow_id ORDER BY ts) AS acked
    FROM rtt WHERE delivery_rate_bps > 0)
SELECT n.host, n.flow_id, n.node, n.remote_node, median(s.delivery_rate_bps) AS rate_bps, count(*) AS sending_samples,
       sum(s.acked) AS acked_bytes
FROM s JOIN st_data_flow n USING (host, flow_id), st_params p
WHERE s.acked > 0
GROUP BY n.host, n.flow_id, n.node, n.remote_node, p.min_rtt_samples
HAVING count(*) >= p.min_rtt_samples;

-- A count for people: 1 flow, 2 flows.
CREATE OR REPLACE MACRO st_count(n, word) AS
    printf('%d %s%s', n, word, CASE WHEN n = 1 THEN '' ELSE 's' END);

-- A rate for people: 96 Mbit/s, 1.3 Gbit/s.
CREATE OR REPLACE MACRO st_rate(bps) AS
    CASE WHEN bps IS NULL THEN '?' WHEN bps >= 1e9 THEN printf('%.1f Gbit/s', bps / 1e9)
         ELSE printf('%.0f Mbit/s', bps / 1e6) END;

-- The RTT samples queued well above the fleet's usual (`st_healthy_queueing`): `st_rtt_ends`'
-- rows, each with its time bin (`st_bins`). The bin is computed here, on the samples' side: a
-- join condition `r.ts_us // x.bin_us = x.bin` names both sides, so DuckDB cannot hash on it
-- and ran a range join instead (15.7 s of CPU for one view on 64 nodes' 2 minutes,
-- bench/fleet.py). The samples are picked before they meet their flows: joined first, every
-- sample of the capture met its flow to keep a few (10.6 of 58 s on 64 nodes' 10 minutes).
CREATE OR REPLACE VIEW st_queued_sample AS
WITH q AS (
    SELECT r.host, st_us(r.ts) AS ts_us, r.flow_id, st_queued_us(r.srtt_us, r.min_rtt_us) AS queued_us
    FROM rtt r CROSS JOIN st_healthy_queueing h
    WHERE st_queued_us(r.srtt_us, r.min_rtt_us) >= h.threshold_us)
SELECT q.host, n.node, q.ts_us, q.flow_id, n.remote_node, q.queued_us, q.ts_us // m.bin_us AS bin
FROM q JOIN st_data_flow n USING (host, flow_id), st_match_bin m, st_params p
WHERE n.bytes_sent >= p.min_flow_bytes;

-- RTT samples queued well above the fleet's usual (`st_healthy_queueing`) during each collective
-- step: a slow link (a rate limit, a congested port, a link that negotiated a lower speed)
-- queues its own flows' packets and no others, without losing any. Counted for each end.
CREATE OR REPLACE VIEW st_step_queueing AS
WITH ends AS (
    SELECT x.source, x.collective, x.step, any_value(x.slow) AS slow, e.node, count(*) AS samples
    FROM (SELECT x.*, unnest(st_bins(x.first_start_us, x.last_end_us, m.bin_us)) AS bin
          FROM st_collective_excess x, st_match_bin m) x
    JOIN st_queued_sample r ON r.bin = x.bin AND r.ts_us BETWEEN x.first_start_us AND x.last_end_us
    CROSS JOIN LATERAL (SELECT unnest([r.node, r.remote_node]) AS node) e
    GROUP BY x.source, x.collective, x.step, e.node)
SELECT source, collective, step, any_value(slow) AS slow,
       st_blamed_end(list(node) FILTER (WHERE samples = top)) AS node,
       max(samples) AS node_samples,
       -- each sample was counted at both of its ends
       sum(samples) // 2 AS samples
FROM (SELECT *, max(samples) OVER (PARTITION BY source, collective, step) AS top FROM ends)
GROUP BY source, collective, step;

CREATE OR REPLACE VIEW st_slow_step_queueing AS
SELECT source, collective, step, node, node_samples, samples FROM st_step_queueing WHERE slow;

-- Each rank's own time in each iteration against the median of the other ranks' in the same
-- iteration.
CREATE OR REPLACE VIEW st_rank_iteration_own AS
WITH r AS (SELECT host, rank, step AS iteration, step_us - comm_us AS own_us FROM st_rank_step)
SELECT r.*, r.own_us - (SELECT median(r2.own_us) FROM r r2 WHERE r2.iteration = r.iteration AND r2.rank <> r.rank) AS extra_own_us
FROM r;

-- Whether a rank's extra own work in a training step explains its arriving late by lateness_us:
-- at least `min_excess_us` and half the lateness more than the other ranks did. On a busy host
-- the ranks take turns arriving last by a few ms with no more work of their own.
CREATE OR REPLACE MACRO st_own_work_explains(extra_own_us, lateness_us) AS
    extra_own_us >= greatest((SELECT min_excess_us FROM st_params), 0.5 * lateness_us);

-- What each slow step cost and whom it is blamed on, as an interval of job time within its
-- training iteration (ProfilerStep, when the trace has it):
-- - a rank that arrived late by at least `min_excess_us` made every other rank wait from the
--   first arrival to its own ([first_start, its start]): a straggler (the last arrival whose
--   own work explains its lateness, see below);
-- - the transfer after the last arrival that took longer than its healthy duration
--   ([last_start + healthy transfer, last_end]) is blamed on the node at the end of most
--   retransmits during the step (network: loss); without retransmits, on the node at the end of
--   most queued RTT samples (queueing: a slow or congested link); else it is unexplained.
-- Intervals, not sums: collectives may run concurrently (gloo and NCCL use several streams or
-- threads), and the same wait must not count twice.
CREATE OR REPLACE VIEW st_slow_step_cause AS
WITH x AS (SELECT * FROM st_collective_excess WHERE slow OR late),
-- A late step's straggler: the last rank to arrive whose own work in that training step
-- explains its lateness, else the last rank to arrive. The last arrival alone is not always
-- the rank that held the step up: with a rank planted 60 ms slow, rank 0's previous
-- all-reduce ended 63 ms late on rank 0 alone, so rank 0 reached the next one 6.5 ms after
-- the slow rank, with no extra work of its own; blaming it dropped the slow rank's last step.
arrival AS (
    SELECT x.source, x.collective, x.step, r.host, r.rank, r.start_us - x.first_start_us AS lateness_us,
           -- a rank whose own work is unknown (no ProfilerStep) counts as explained, as in
           -- st_culprit_iteration: without any, the last to arrive is the straggler
           coalesce(st_own_work_explains(o.extra_own_us, r.start_us - x.first_start_us), o.extra_own_us IS NULL)
             AND r.start_us - x.first_start_us >= greatest(p.min_excess_us, p.min_spread_us) AS explained,
           r.start_us
    FROM x JOIN st_collective_rank_step r USING (source, collective, step)
    LEFT JOIN st_rank_iteration_own o ON o.host = r.host AND o.rank = r.rank AND o.iteration = x.iteration
    CROSS JOIN st_params p
    WHERE x.late),
straggler AS (
    SELECT source, collective, step,
           arg_max(host, (explained, start_us, rank)) AS host, arg_max(rank, (explained, start_us, rank)) AS rank,
           arg_max(lateness_us, (explained, start_us, rank)) AS lateness_us
    FROM arrival GROUP BY ALL)
SELECT x.source, x.collective, x.step, x.iteration, 'straggler' AS cause,
       'rank ' || g.rank || ' (' || g.host || ')' AS culprit, g.host, g.rank,
       x.first_start_us AS s, x.first_start_us + g.lateness_us AS e, coalesce(t.retransmits, 0) AS retransmits,
       NULL::BIGINT AS queued_samples, g.lateness_us, x.base_us
FROM x JOIN straggler g USING (source, collective, step)
LEFT JOIN st_slow_step_retransmits t USING (source, collective, step)
UNION ALL
SELECT x.source, x.collective, x.step, x.iteration, w.cause,
       CASE w.cause WHEN 'network' THEN t.node WHEN 'queueing' THEN q.node ELSE 'unexplained' END,
       CASE WHEN w.cause = 'network' AND t.node NOT LIKE 'link %' THEN t.node
            WHEN w.cause = 'queueing' AND q.node NOT LIKE 'link %' THEN q.node END, NULL,
       x.last_end_us - x.transfer_excess_us, x.last_end_us, coalesce(t.retransmits, 0), q.samples, NULL, x.base_us
FROM x LEFT JOIN st_slow_step_retransmits t USING (source, collective, step)
LEFT JOIN st_slow_step_queueing q USING (source, collective, step)
CROSS JOIN st_params p
CROSS JOIN LATERAL (
    SELECT CASE WHEN coalesce(t.retransmits, 0) >= p.min_step_retransmits THEN 'network'
                WHEN coalesce(q.node_samples, 0) >= p.min_step_queued_samples THEN 'queueing'
                ELSE 'unexplained' END AS cause) w
WHERE x.slow;

-- Each rank's own time per training step: the step less its time in collectives (which
-- includes waiting inside them for the others). A rank that computes longer (a real straggler)
-- has more of it than the others; a rank that arrives late because its previous transfer was
-- slow does not.
CREATE OR REPLACE VIEW st_rank_own_time AS
WITH r AS (SELECT host, rank, median(step_us - comm_us) AS own_us, count(*) AS steps FROM st_rank_step GROUP BY ALL)
SELECT r.*, (SELECT median(r2.own_us) FROM r r2 WHERE r2.rank <> r.rank) AS others_own_us,
       r.own_us - (SELECT median(r2.own_us) FROM r r2 WHERE r2.rank <> r.rank) AS extra_own_us
FROM r;

-- The job's traced time: from the first to the last matched collective.
CREATE OR REPLACE VIEW st_job_span AS
SELECT (max(last_end_us) - min(first_start_us)) / 1e6 AS traced_s, count(*) AS steps,
       count(DISTINCT iteration) AS iterations, min(first_start_us) AS span_start_us, max(last_end_us) AS span_end_us
FROM st_collective_excess;

-- A link named on a tie between its two ends and a node at one of its ends named in other
-- steps (its retransmits or queueing on more than that one link) are one fault: the node's own
-- link. The link's steps join the node when the node was blamed in at least
-- `min_culprit_steps` steps (the end blamed in more steps, if both were), under the node's
-- cause: a node blamed for the same cause first, else for the other (a rate limit's queue also
-- overflows: under 100 Mbit/s on node2 the steps with its drops named `link node2 - node3` a
-- second culprit, and the two lines split one fault's 24.3 s into 17.1 s and 7.3 s).
CREATE OR REPLACE VIEW st_slow_step_blame AS
WITH n AS (
    SELECT cause, culprit, count(*) AS steps FROM st_slow_step_cause, st_params p
    WHERE cause IN ('network', 'queueing') AND culprit NOT LIKE 'link %'
    GROUP BY cause, culprit, p.min_culprit_steps HAVING count(*) >= p.min_culprit_steps),
l AS (
    SELECT DISTINCT cause, culprit, st_culprit_ends(culprit) AS ends
    FROM st_slow_step_cause WHERE cause IN ('network', 'queueing') AND culprit LIKE 'link %'),
m AS (
    SELECT l.cause, l.culprit, arg_max(n.culprit, (n.cause = l.cause, n.steps, n.culprit)) AS node,
           arg_max(n.cause, (n.cause = l.cause, n.steps, n.culprit)) AS node_cause
    FROM l JOIN n ON list_contains(l.ends, n.culprit) GROUP BY ALL)
SELECT c.* REPLACE (coalesce(m.node_cause, c.cause) AS cause, coalesce(m.node, c.culprit) AS culprit,
                    coalesce(m.node, c.host) AS host)
FROM st_slow_step_cause c LEFT JOIN m USING (cause, culprit);

-- The job time blamed on each culprit of the network or queueing kind, as the windows of its
-- steps ([first start, last end]) and the nodes at its ends: its slow steps (`slow`), and for
-- a queueing node or link the steps in which it held the most queued samples (`persistent`).
CREATE OR REPLACE VIEW st_culprit_step_window AS
WITH steps AS (
    SELECT DISTINCT 'slow' AS kind, cause, culprit, source, collective, step
    FROM st_slow_step_blame WHERE cause IN ('network', 'queueing')
    UNION ALL
    SELECT DISTINCT 'persistent', 'queueing', q.node, q.source, q.collective, q.step
    FROM st_step_queueing q, st_params p WHERE q.node_samples >= p.min_step_queued_samples)
SELECT s.kind, s.cause, s.culprit, x.first_start_us AS s, x.last_end_us AS e,
       st_culprit_ends(s.culprit) AS ends
FROM steps s JOIN st_collective_excess x USING (source, collective, step);

-- A flow between `node` and `remote_node` is on a culprit's links: for a node, any flow of it;
-- for a link, a flow between its two ends.
CREATE OR REPLACE MACRO st_on_culprit_links(ends, node, remote_node) AS
    CASE WHEN len(ends) = 2 THEN list_contains(ends, node) AND list_contains(ends, remote_node)
         ELSE list_contains(ends, node) OR list_contains(ends, remote_node) END;

-- How many distinct RTT samples queued above the fleet's usual on the flows of a queueing
-- culprit (a node's, or a link's) during its steps, and how many distinct retransmits on the
-- links of a network culprit during its slow steps. Distinct, not a sum over steps: the steps
-- of concurrent collectives overlap in time, and sums counted 17,489 queued samples in a
-- capture of 12,048 and 1,105 retransmits in a run of 1,099.
CREATE OR REPLACE VIEW st_culprit_queued_samples AS
SELECT w.kind, w.culprit, count(DISTINCT (q.host, q.flow_id, q.ts_us)) AS queued_samples
FROM (SELECT w.*, unnest(st_bins(w.s, w.e, m.bin_us)) AS bin
      FROM st_culprit_step_window w, st_match_bin m WHERE w.cause = 'queueing') w
JOIN st_queued_sample q ON q.bin = w.bin AND q.ts_us BETWEEN w.s AND w.e
WHERE st_on_culprit_links(w.ends, q.node, q.remote_node)
GROUP BY w.kind, w.culprit;

CREATE OR REPLACE VIEW st_culprit_retransmits AS
SELECT w.culprit, count(DISTINCT (r.host, r.flow_id, r.ts_ns)) AS retransmits
FROM st_culprit_step_window w JOIN st_retrans_ends r ON r.ts_us BETWEEN w.s AND w.e
WHERE w.cause = 'network' AND st_on_culprit_links(w.ends, r.node, r.remote_node)
GROUP BY w.culprit;

-- How much more a queueing culprit's links queued than the others while it lasted (from its
-- first slow step to its last): the share of their RTT samples above the usual
-- (`st_healthy_queueing`) against that share on the flows off its links. On a busy host every
-- path queues now and then, and which node holds the most queued samples in a step is chance:
-- one of 24 clean runs had node0 on top in enough steps to be named, its links queueing 25 %
-- of their samples against 17 % elsewhere; under rate limits the limited node's links queued
-- 2.9 to 83 times as often as the others (six runs). A slow link queues its own flows, not the
-- others'. Null where every flow is on its links. Over `st_rtt_ends`' samples, counted per flow
-- before the flows' ends are joined: joined first, every sample met its flow (9.3 s against
-- 5.0 on 64 nodes' 10 minutes, bench/fleet.py).
CREATE OR REPLACE VIEW st_queueing_contrast AS
WITH c AS (
    SELECT culprit, any_value(ends) AS ends, min(s) AS s, max(e) AS e
    FROM st_culprit_step_window WHERE cause = 'queueing' AND kind = 'slow' GROUP BY culprit),
x AS (
    SELECT c.culprit, r.host, r.flow_id, count(*) AS samples,
           count(*) FILTER (WHERE st_queued_us(r.srtt_us, r.min_rtt_us) >= q.threshold_us) AS queued
    -- a culprit's span can be the whole run: a few intervals, no bins
    FROM c JOIN rtt r ON st_us(r.ts) BETWEEN c.s AND c.e
    CROSS JOIN st_healthy_queueing q
    GROUP BY c.culprit, r.host, r.flow_id),
y AS (
    SELECT x.*, st_on_culprit_links(c.ends, n.node, n.remote_node) AS own
    FROM x JOIN c USING (culprit) JOIN st_data_flow n USING (host, flow_id), st_params p
    WHERE n.bytes_sent >= p.min_flow_bytes)
SELECT culprit, sum(queued) FILTER (WHERE own) / sum(samples) FILTER (WHERE own) AS own_share,
       sum(queued) FILTER (WHERE NOT own) / sum(samples) FILTER (WHERE NOT own) AS other_share,
       coalesce(sum(samples) FILTER (WHERE own), 0)::BIGINT AS own_samples,
       coalesce(sum(samples) FILTER (WHERE NOT own), 0)::BIGINT AS other_samples
FROM y GROUP BY culprit;

-- Of the segments resent on a network culprit's links during its slow steps, how many the
-- receivers reported as duplicates (DSACK): spurious retransmits, whose original had arrived,
-- only late. Loss leaves next to none; reordering and delay variation (jitter, packets of one
-- flow spread over paths of different length) make the sender resend segments that were only
-- late, and cost the same stalls. From each flow's running counters in its RTT samples: what
-- they grew by since the flow's previous sample, for the samples inside the culprit's steps
-- (each sample once, however many overlapping steps hold it). Null counters (a kernel that
-- does not give them) leave the culprit out. `reordered`: the receivers already had at least
-- `min_spurious_share` of them, so the verdict calls it reordering or jitter, not loss.
-- Only the flows on a network culprit's links are put in order, whole (a flow's previous
-- sample may lie before the culprit's steps): sorting every sample of the capture for them
-- is what held memory on a fleet's store.
CREATE OR REPLACE VIEW st_culprit_spurious AS
-- (the samples are r_s, not s: inside the EXISTS below Spark would take s for st_culprit_step_window's column)
WITH c AS (SELECT DISTINCT culprit, ends FROM st_culprit_step_window WHERE cause = 'network'),
on_links AS (
    SELECT DISTINCT n.host, n.flow_id, n.node, n.remote_node
    FROM st_data_flow n JOIN c ON st_on_culprit_links(c.ends, n.node, n.remote_node)),
r_s AS (
    SELECT n.node, n.remote_node, st_us(r.ts) AS ts_us,
           -- signed: a count that went down (a socket reused after a disconnect) adds nothing
           greatest(0, r.total_retrans::BIGINT - lag(r.total_retrans::BIGINT) OVER w) AS resent,
           greatest(0, r.dsack_dups::BIGINT - lag(r.dsack_dups::BIGINT) OVER w) AS spurious
    FROM rtt r JOIN on_links n USING (host, flow_id)
    WINDOW w AS (PARTITION BY r.host, r.flow_id ORDER BY r.ts))
SELECT c.culprit, sum(r_s.resent) AS resent, sum(r_s.spurious) AS spurious,
       -- a DSACK can come in a sample after its retransmit's: at most all of them
       least(1.0, sum(r_s.spurious) / nullif(sum(r_s.resent), 0)) AS spurious_share,
       sum(r_s.resent) > 0 AND sum(r_s.spurious) > 0 AND sum(r_s.spurious) >= any_value(p.min_spurious_share) * sum(r_s.resent) AS reordered
FROM c JOIN r_s ON st_on_culprit_links(c.ends, r_s.node, r_s.remote_node) CROSS JOIN st_params p
WHERE r_s.spurious IS NOT NULL AND r_s.resent IS NOT NULL
  AND EXISTS (SELECT 1 FROM st_culprit_step_window sw
              WHERE sw.cause = 'network' AND sw.culprit = c.culprit AND r_s.ts_us BETWEEN sw.s AND sw.e)
GROUP BY c.culprit;

-- A slow link present from the job's first step leaves no healthy step to compare with: every
-- transfer is slow alike and none stands out in `st_collective_excess`. It still queues its
-- own flows' packets, and no others, in step after step: a node (or link) that holds the most
-- queued samples in at least `min_persistent_share` of all collective steps and of all such
-- steps is a culprit whose cost cannot be priced from this job alone.
CREATE OR REPLACE VIEW st_persistent_queueing AS
WITH t AS (SELECT count(*) AS steps FROM st_collective_excess),
q AS (
    SELECT node AS culprit, count(*) AS queued_steps,
           string_agg(DISTINCT collective, ', ' ORDER BY collective) AS collectives
    FROM st_step_queueing, st_params p
    WHERE node_samples >= p.min_step_queued_samples
    GROUP BY node)
SELECT q.*, coalesce(n.queued_samples, 0) AS queued_samples, t.steps, q.queued_steps / t.steps AS share_of_steps,
       q.queued_steps / sum(q.queued_steps) OVER () AS share_of_queued_steps,
       CASE WHEN q.culprit LIKE 'link %' THEN NULL ELSE q.culprit END AS host
FROM q CROSS JOIN t
LEFT JOIN st_culprit_queued_samples n ON n.kind = 'persistent' AND n.culprit = q.culprit;

-- A stall carried over into the next collective: a rank that left a slow collective late
-- (its transfer stalled on a culprit's links) reaches its next collective late by as much,
-- with no more work of its own than the others. Its lateness there, up to how much later it
-- left the slow collective than the first rank did, is that culprit's: with 2 % loss on
-- node2, an all-reduce stalled 218 ms on a retransmit timeout and its ranks left it 215 ms
-- apart; the next iteration's first two all-reduces waited 217 ms for rank 1, which had done
-- no extra work, and those 200 ms of step time were nobody's. It counts when the late release
-- holds at least half the lateness (as own work must, `st_own_work_explains`) and at least
-- `min_excess_us`, and the collective it left is of this training step or the one before (an
-- older one says nothing about this arrival). Its evidence is the wait after the slow step's
-- end: up to there the slow step's own interval holds it, and the same wait counts once.
CREATE OR REPLACE VIEW st_carried_stall AS
WITH late AS (
    -- (a straggler's interval ends where it arrived)
    SELECT b.source, b.collective, b.step, b.iteration, b.host, b.rank, b.s, b.lateness_us, b.e AS start_us
    FROM st_slow_step_blame b
    JOIN st_rank_iteration_own o ON o.host = b.host AND o.rank = b.rank AND o.iteration = b.iteration
    WHERE b.cause = 'straggler' AND NOT st_own_work_explains(o.extra_own_us, b.lateness_us)),
left_last AS (
    -- the collective the late rank left last before it arrived, in this training step or the
    -- one before (an equi-join on the step: a late arrival meets two steps' collectives, not
    -- every one of its rank's)
    SELECT l.source, l.collective, l.step, l.iteration, l.s, l.lateness_us,
           arg_max(p.collective, (p.end_us, p.step, p.collective)) AS prev_collective,
           arg_max(p.step, (p.end_us, p.step, p.collective)) AS prev_step,
           max(p.end_us) AS left_us
    FROM (SELECT *, unnest([iteration - 1, iteration]) AS searched FROM late) l
    JOIN st_collective_rank_step p
      ON p.source = l.source AND p.host = l.host AND p.rank = l.rank AND p.profiler_step = l.searched
    WHERE p.end_us <= l.start_us
    GROUP BY l.source, l.collective, l.step, l.iteration, l.s, l.lateness_us),
carried AS (
    SELECT l.*, least(l.lateness_us, l.left_us - (x.last_end_us - x.finish_spread_us)) AS carried_us,
           x.last_end_us AS prev_end_us
    FROM left_last l JOIN st_collective_step x ON x.source = l.source AND x.collective = l.prev_collective AND x.step = l.prev_step)
SELECT b.cause, b.culprit, c.source, c.collective, c.step, c.iteration,
       greatest(c.s, c.prev_end_us) AS s, c.s + c.carried_us AS e, c.carried_us
FROM carried c
JOIN st_slow_step_blame b ON b.source = c.source AND b.collective = c.prev_collective AND b.step = c.prev_step
CROSS JOIN st_params p
WHERE b.cause IN ('network', 'queueing')
  AND c.carried_us >= greatest(p.min_excess_us, 0.5 * c.lateness_us)
  AND c.s + c.carried_us > greatest(c.s, c.prev_end_us);

-- Each culprit's evidence per training iteration: the union of its intervals (job time in
-- which every rank waited because of it), and the stalls carried over from its steps
-- (`st_carried_stall`). A rank's lateness counts in an iteration only when
-- it did more of its own work in it (at least `min_excess_us` and half its lateness more than
-- the other ranks): on a busy host the ranks take turns arriving last by a few ms, and such
-- iterations are healthy.
CREATE OR REPLACE VIEW st_culprit_iteration AS
WITH c AS (
    SELECT c.cause, c.culprit, c.iteration, c.s, c.e FROM st_slow_step_blame c CROSS JOIN st_params p
    LEFT JOIN st_rank_iteration_own o
      ON c.cause = 'straggler' AND o.host = c.host AND o.rank = c.rank AND o.iteration = c.iteration
    WHERE c.cause <> 'straggler' OR o.extra_own_us IS NULL OR st_own_work_explains(o.extra_own_us, c.lateness_us)
    UNION ALL
    SELECT cause, culprit, iteration, s, e FROM st_carried_stall),
m AS (
    SELECT *, max(e) OVER (PARTITION BY cause, culprit, iteration ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM c),
u AS (
    SELECT cause, culprit, iteration, s, e,
           sum(CASE WHEN prev_end >= s THEN 0 ELSE 1 END)
             OVER (PARTITION BY cause, culprit, iteration ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM m)
SELECT cause, culprit, iteration, sum(e - s) AS evidence_us, min(s) AS first_us, max(e) AS last_us
FROM (SELECT cause, culprit, iteration, island, min(s) AS s, max(e) AS e FROM u GROUP BY ALL)
GROUP BY cause, culprit, iteration;

-- One row per culprit: its evidence, and whether it stands out enough to be blamed.
CREATE OR REPLACE VIEW st_culprit AS
WITH ev AS (SELECT cause, culprit, sum(evidence_us) / 1e6 AS evidence_s FROM st_culprit_iteration GROUP BY ALL),
c AS (
    SELECT cause, culprit, any_value(host) AS host, any_value(rank) AS rank,
           count(*) AS slow_steps, sum(retransmits) AS step_retransmits,
           -- a queueing culprit's steps that lost packets too (its link's, merged into it)
           count(*) FILTER (WHERE retransmits >= (SELECT min_step_retransmits FROM st_params)) AS lossy_steps,
           median(e - s) / 1e3 AS median_excess_ms, median(lateness_us) / 1e3 AS median_lateness_ms,
           median(base_us) / 1e3 AS median_base_ms, string_agg(DISTINCT collective, ', ' ORDER BY collective) AS collectives
    FROM st_slow_step_blame GROUP BY cause, culprit)
SELECT c.* EXCLUDE (step_retransmits),
       CASE WHEN c.cause = 'network' THEN coalesce(t.retransmits, 0) ELSE c.step_retransmits END AS retransmits,
       CASE WHEN c.cause = 'queueing' THEN coalesce(n.queued_samples, 0) END AS queued_samples, ev.evidence_s,
       ev.evidence_s / nullif(sum(ev.evidence_s) OVER (PARTITION BY c.cause), 0) AS share_of_cause,
       o.extra_own_us / 1e3 AS extra_own_ms,
       CASE WHEN c.cause = 'unexplained' THEN false
            WHEN c.cause = 'network' THEN true
            -- a straggler is one rank that did more of its own work than the others; without
            -- ProfilerStep to tell, it must at least hold most of the lateness
            WHEN c.cause = 'straggler' AND o.extra_own_us IS NOT NULL
              THEN o.extra_own_us >= greatest(p.min_excess_us, 500 * c.median_lateness_ms)
            -- queueing rises with any load; one node (or link) must hold most of it, its links
            -- queueing more often than the others while it lasted
            ELSE ev.evidence_s / nullif(sum(ev.evidence_s) OVER (PARTITION BY c.cause), 0) >= 0.5
                 AND coalesce(qc.own_share >= p.queueing_contrast * qc.other_share, true) END AS evidenced
FROM c JOIN ev USING (cause, culprit) CROSS JOIN st_params p
LEFT JOIN st_queueing_contrast qc ON c.cause = 'queueing' AND qc.culprit = c.culprit
LEFT JOIN st_rank_own_time o ON c.cause = 'straggler' AND o.host = c.host AND o.rank = c.rank
LEFT JOIN st_culprit_queued_samples n ON c.cause = 'queueing' AND n.kind = 'slow' AND n.culprit = c.culprit
LEFT JOIN st_culprit_retransmits t ON c.cause = 'network' AND t.culprit = c.culprit;

-- The iterations in which a blamed straggler did extra work of its own (at least
-- `min_excess_us` more than the other ranks' median): a rank slow in every step is not late by
-- the same margin in each collective (the others' arrivals vary), so its lateness leaves
-- evidence in only some iterations; the others are not healthy either.
CREATE OR REPLACE VIEW st_straggler_iteration AS
SELECT c.cause, c.culprit, o.iteration, o.extra_own_us
FROM st_culprit c
JOIN st_rank_iteration_own o ON o.host = c.host AND o.rank = c.rank
CROSS JOIN st_params p
WHERE c.cause = 'straggler' AND c.evidenced AND o.extra_own_us >= p.min_excess_us;

-- The iterations each blamed culprit impaired: those its evidence fell in (a culprit with
-- evidence), or a straggler's extra work.
CREATE OR REPLACE VIEW st_culprit_impaired_iteration AS
SELECT i.cause, i.culprit, i.iteration
FROM st_culprit_iteration i JOIN st_culprit c USING (cause, culprit) WHERE c.evidenced
UNION
SELECT cause, culprit, iteration FROM st_straggler_iteration;

-- The job's step time per training iteration (ProfilerStep#N): the median over ranks, and
-- whether any blamed culprit left evidence in it (or a blamed straggler did extra work in it).
CREATE OR REPLACE VIEW st_iteration AS
SELECT s.step AS iteration, median(s.end_us - s.start_us) AS step_us, count(*) AS ranks,
       EXISTS (SELECT 1 FROM st_culprit_impaired_iteration i WHERE i.iteration = s.step) AS impaired
FROM st_profiler_step s GROUP BY s.step;

-- Enough healthy iterations to price against: `min_healthy_iterations` and `min_healthy_share`.
CREATE OR REPLACE MACRO st_enough_healthy(healthy, total) AS
    healthy >= (SELECT greatest(p.min_healthy_iterations, p.min_healthy_share * total) FROM st_params p);

-- Each blamed culprit's span: from the first to the last iteration it impaired (its evidence,
-- or a straggler's extra work).
CREATE OR REPLACE VIEW st_culprit_span AS
SELECT cause, culprit, min(iteration) AS first_iteration, max(iteration) AS last_iteration
FROM st_culprit_impaired_iteration GROUP BY cause, culprit;

-- The iterations the healthy step time is the median of: those without a blamed culprit's
-- evidence; of them, the ones outside every culprit's span alone when there are enough of them
-- (`st_enough_healthy`): inside, a step without evidence ran while the fault held too. A
-- reordering link that began at step 29 of 80 left evidence in 30 of the 50 steps after it,
-- and the 20 others were as slow (131 ms against 116 ms before): taken as healthy they raised
-- the healthy step to 125 ms and hid half of what the fault cost.
CREATE OR REPLACE VIEW st_healthy_iteration AS
WITH marked AS (
    SELECT t.iteration, t.step_us, t.impaired,
           NOT t.impaired AND NOT EXISTS (SELECT 1 FROM st_culprit_span s
                                          WHERE t.iteration BETWEEN s.first_iteration AND s.last_iteration) AS outside
    FROM st_iteration t),
counts AS (SELECT count(*) FILTER (WHERE outside) AS outside_healthy, count(*) AS iterations FROM marked)
SELECT m.iteration, m.step_us
FROM marked m CROSS JOIN counts c
WHERE CASE WHEN st_enough_healthy(c.outside_healthy, c.iterations) THEN m.outside ELSE NOT m.impaired END;

-- The healthy step time: the median of `st_healthy_iteration` when the job has enough of them
-- (a fault that began mid-run, or one that strikes some steps only); else the step time of a
-- run of the same job without the problem (`analyze --baseline`).
CREATE OR REPLACE VIEW st_healthy_step AS
WITH counts AS (
    SELECT (SELECT median(step_us) FROM st_healthy_iteration) AS step_us,
           (SELECT count(*) FROM st_healthy_iteration) AS healthy_iterations,
           (SELECT count(*) FROM st_iteration) AS iterations),
own AS (SELECT *, st_enough_healthy(healthy_iterations, iterations) AS usable FROM counts)
SELECT CASE WHEN own.usable THEN own.step_us ELSE b.step_us END AS healthy_step_us,
       own.healthy_iterations, own.iterations,
       own.usable OR b.step_us IS NOT NULL AS usable,
       CASE WHEN own.usable THEN 'run' WHEN b.step_us IS NOT NULL THEN 'baseline' END AS healthy_from
FROM own LEFT JOIN st_baseline b ON true;

-- The steps a culprit held without leaving evidence: inside its span, impaired by no culprit,
-- charged to it when they look like its steps and not like the healthy ones: slower than the
-- healthy iterations by a one-sided rank-sum test (z ≥ `quiet_slower_z`; its own span's steps
-- left out of the healthy side), and their median nearer its impaired steps' median than the
-- healthy one. A fault that holds every step does not leave evidence in each (a reordering
-- link: 30 of the 50 steps after its onset, the 20 others as slow); one that strikes some
-- steps leaves the others as fast as the healthy ones, and a machine whose steps drift a few
-- percent while a culprit's rare slow steps come and go leaves the others nearer the healthy.
-- Only against this run's own healthy steps (`healthy_from = 'run'`). Shared among the
-- culprits whose span holds the step by their evidence.
CREATE OR REPLACE VIEW st_culprit_quiet_iteration AS
WITH span AS (
    SELECT s.*, c.evidence_s FROM st_culprit_span s JOIN st_culprit c USING (cause, culprit)),
quiet AS (
    SELECT s.cause, s.culprit, t.iteration, t.step_us,
           s.evidence_s / nullif(sum(s.evidence_s) OVER (PARTITION BY t.iteration), 0) AS share
    FROM span s JOIN st_iteration t ON t.iteration BETWEEN s.first_iteration AND s.last_iteration
    WHERE NOT t.impaired),
pooled AS (
    SELECT cause, culprit, true AS is_quiet, step_us FROM quiet
    UNION ALL
    SELECT s.cause, s.culprit, false AS is_quiet, h.step_us
    FROM span s JOIN st_healthy_iteration h
      ON h.iteration NOT BETWEEN s.first_iteration AND s.last_iteration),
ranked AS (
    -- tied step times share their average rank
    SELECT *, rank() OVER (PARTITION BY cause, culprit ORDER BY step_us)
              + (count(*) OVER (PARTITION BY cause, culprit, step_us) - 1) / 2.0 AS r
    FROM pooled),
test AS (
    SELECT cause, culprit, count(*) FILTER (WHERE is_quiet) AS n_quiet,
           count(*) FILTER (WHERE NOT is_quiet) AS n_healthy,
           sum(r) FILTER (WHERE is_quiet) AS rank_sum,
           median(step_us) FILTER (WHERE is_quiet) AS quiet_median_us
    FROM ranked GROUP BY cause, culprit),
own AS (
    SELECT i.cause, i.culprit, median(t.step_us) AS impaired_median_us
    FROM st_culprit_impaired_iteration i JOIN st_iteration t USING (iteration)
    GROUP BY i.cause, i.culprit),
judged AS (
    SELECT t.cause, t.culprit,
           (t.rank_sum - t.n_quiet * (t.n_quiet + 1) / 2.0 - t.n_quiet * t.n_healthy / 2.0)
             / sqrt(t.n_quiet * t.n_healthy * (t.n_quiet + t.n_healthy + 1) / 12.0) AS slower_z,
           t.quiet_median_us, o.impaired_median_us
    FROM test t JOIN own o USING (cause, culprit) WHERE t.n_healthy > 0 AND t.n_quiet > 0)
SELECT q.cause, q.culprit, q.iteration, q.step_us, q.share, j.slower_z
FROM quiet q JOIN judged j USING (cause, culprit) CROSS JOIN st_healthy_step h CROSS JOIN st_params p
WHERE h.healthy_from = 'run' AND j.slower_z >= p.quiet_slower_z
  AND j.quiet_median_us - h.healthy_step_us >= (j.impaired_median_us - h.healthy_step_us) / 2;

-- Per culprit: its charged steps without evidence and what they cost above the healthy step;
-- a charge that adds nothing is no charge (no row).
CREATE OR REPLACE VIEW st_culprit_quiet AS
SELECT q.cause, q.culprit, count(*) AS quiet_iterations, any_value(q.slower_z) AS slower_z,
       avg(q.step_us) / 1e3 AS quiet_mean_step_ms,
       sum((q.step_us - h.healthy_step_us) * q.share) / 1e6 AS quiet_excess_s
FROM st_culprit_quiet_iteration q CROSS JOIN st_healthy_step h
GROUP BY q.cause, q.culprit
HAVING sum((q.step_us - h.healthy_step_us) * q.share) > 0;

-- What each culprit cost: every impaired iteration's step time above the healthy step time.
-- The step time is what the job lost, whatever the evidence's intervals add up to (a late
-- rank's wait overlaps work the others would do anyway; a retransmit stall shows only part of
-- a recovery). A straggler's extra work in an iteration is charged to it first, up to that
-- excess: the others waited at least that long for it, so the slowest rank's own work is the
-- step's critical path, and RTTs that rise meanwhile (its host's busy CPU answering late, the
-- others' flows idle) are not what held the step. The rest is shared among the culprits with
-- evidence in the iteration in proportion to the evidence not already paid for (a straggler's
-- lateness is the extra work just charged); without such evidence, among the stragglers by
-- their extra work. Each iteration's charges add up to its excess.
CREATE OR REPLACE VIEW st_culprit_cost AS
WITH parts AS (
    SELECT i.cause, i.culprit, i.iteration, i.evidence_us, 0 AS extra_own_us
    FROM st_culprit_iteration i JOIN st_culprit c USING (cause, culprit) WHERE c.evidenced
    UNION ALL
    SELECT cause, culprit, iteration, 0, extra_own_us FROM st_straggler_iteration),
b AS (
    SELECT cause, culprit, iteration, sum(evidence_us) AS evidence_us, sum(extra_own_us) AS extra_own_us
    FROM parts GROUP BY ALL),
w AS (
    SELECT b.*, t.step_us - h.healthy_step_us AS excess_us, h.healthy_step_us, h.healthy_from, t.step_us,
           sum(b.extra_own_us) OVER (PARTITION BY b.iteration) AS iteration_own_us,
           count(*) OVER (PARTITION BY b.iteration) AS iteration_culprits
    FROM b JOIN st_iteration t USING (iteration) CROSS JOIN st_healthy_step h
    WHERE h.usable),
own AS (
    SELECT *, least(greatest(excess_us, 0), iteration_own_us) AS own_first_us FROM w),
charged AS (
    SELECT *, coalesce(own_first_us * extra_own_us / nullif(iteration_own_us, 0), 0) AS own_charge_us FROM own),
rest AS (
    SELECT *, greatest(evidence_us - own_charge_us, 0) AS open_evidence_us,
           sum(greatest(evidence_us - own_charge_us, 0)) OVER (PARTITION BY iteration) AS iteration_open_us
    FROM charged)
SELECT cause, culprit, count(*) AS iterations,
       greatest(0, sum(own_charge_us
                       + (excess_us - own_first_us)
                         * CASE WHEN iteration_open_us > 0 THEN open_evidence_us / iteration_open_us
                                WHEN iteration_own_us > 0 THEN extra_own_us / iteration_own_us
                                ELSE 1.0 / iteration_culprits END)) / 1e6 AS step_excess_s,
       avg(step_us) / 1e3 AS mean_step_ms, any_value(healthy_step_us) / 1e3 AS healthy_step_ms,
       any_value(healthy_from) AS healthy_from
FROM rest
GROUP BY cause, culprit;

-- Without a healthy step time (a straggler from the first step, no baseline), a straggler is
-- priced by the extra work it did: its own time above the other ranks' in each iteration, what
-- they waited for. Its lateness would also count the arrival spread of a healthy step.
CREATE OR REPLACE VIEW st_straggler_own_cost AS
SELECT cause, culprit, count(*) AS iterations, sum(extra_own_us) / 1e6 AS own_excess_s
FROM st_straggler_iteration GROUP BY cause, culprit;

-- One row per culprit: the job time it cost, its evidence, and its share of all time lost.
-- Priced by step time against the healthy step (`step_time`: this run's, or the baseline's),
-- else a straggler by its extra own work (`own_time`), else by the evidence's own duration.
CREATE OR REPLACE VIEW st_slowdown AS
WITH priced AS (
    SELECT c.*, coalesce(k.step_excess_s + coalesce(q.quiet_excess_s, 0), o.own_excess_s, c.evidence_s) AS time_lost_s,
           CASE WHEN k.step_excess_s IS NOT NULL THEN 'step_time'
                WHEN o.own_excess_s IS NOT NULL THEN 'own_time' ELSE 'evidence' END AS priced_by,
           k.iterations AS impaired_iterations, k.mean_step_ms, k.healthy_step_ms, k.healthy_from,
           CASE WHEN k.step_excess_s IS NOT NULL THEN q.quiet_iterations END AS quiet_iterations,
           CASE WHEN k.step_excess_s IS NOT NULL THEN q.quiet_mean_step_ms END AS quiet_mean_step_ms,
           j.traced_s, j.steps
    FROM st_culprit c CROSS JOIN st_job_span j
    LEFT JOIN st_culprit_cost k USING (cause, culprit)
    LEFT JOIN st_straggler_own_cost o USING (cause, culprit)
    LEFT JOIN st_culprit_quiet q USING (cause, culprit))
SELECT *, time_lost_s / nullif(traced_s, 0) AS lost_fraction FROM priced;

-- The verdict's floors: a culprit named in it slowed at least `min_culprit_steps` steps and
-- cost at least `min_lost_s` and `min_lost_fraction` of the traced time. Below them a culprit
-- is within what two healthy runs on a busy host differ by.
CREATE OR REPLACE MACRO st_above_floors(slow_steps, time_lost_s, lost_fraction) AS
    (SELECT slow_steps >= p.min_culprit_steps AND time_lost_s >= p.min_lost_s
            AND lost_fraction >= p.min_lost_fraction FROM st_params p);

-- Culprits with evidence whose cost stays below the verdict's floors, largest first: an
-- engineer asking why the job got slower still learns what came closest, by how much, and
-- which floor kept it out (a rank 20 ms slower per step that cost the job 2 % is real, but no
-- finding).
CREATE OR REPLACE VIEW st_below_floors AS
-- (costs rounded as `st_finding`'s, for the same reason: this list is printed largest first)
SELECT d.cause, d.culprit, d.host, d.rank, d.slow_steps, round(d.time_lost_s, 9) AS time_lost_s,
       round(d.lost_fraction, 9) AS lost_fraction, d.traced_s, d.priced_by,
       concat_ws(', ',
         CASE WHEN d.slow_steps < p.min_culprit_steps THEN printf('fewer than %d slow steps', p.min_culprit_steps::BIGINT) END,
         CASE WHEN d.time_lost_s < p.min_lost_s THEN printf('less than %.2f s', p.min_lost_s) END,
         CASE WHEN d.lost_fraction < p.min_lost_fraction
              THEN printf('less than %.0f%% of the traced time', 100 * p.min_lost_fraction) END) AS below
FROM st_slowdown d CROSS JOIN st_params p
WHERE d.evidenced AND d.cause <> 'unexplained' AND d.time_lost_s > 0
  AND NOT st_above_floors(d.slow_steps, d.time_lost_s, d.lost_fraction);

-- What such a link cost when the job also ran without it (it came mid-run): the step time of
-- the iterations in which it held the most queued samples, above the median of the iterations
-- that neither it nor a verdict culprit impaired, when there are enough of those (as in
-- `st_healthy_step`). From the first step on there are not: it is priced against the baseline
-- run's step time when there is one (`analyze --baseline`), else it stays unpriced.
CREATE OR REPLACE VIEW st_persistent_cost AS
WITH pc AS (
    SELECT q.culprit FROM st_persistent_queueing q, st_params p
    WHERE q.share_of_steps >= p.min_persistent_share AND q.share_of_queued_steps >= p.min_persistent_share),
imp AS (
    SELECT DISTINCT q.node AS culprit, x.iteration
    FROM st_step_queueing q JOIN st_collective_excess x USING (source, collective, step) CROSS JOIN st_params p
    WHERE q.node_samples >= p.min_step_queued_samples AND x.iteration IS NOT NULL),
t AS (
    SELECT pc.culprit, i.iteration, i.step_us,
           i.iteration IN (SELECT iteration FROM imp WHERE imp.culprit = pc.culprit) AS queued,
           -- priced by a culprit: its evidence, or a step without evidence charged to it
           i.impaired OR i.iteration IN (SELECT iteration FROM st_culprit_quiet_iteration) AS impaired
    FROM pc CROSS JOIN st_iteration i),
own AS (
    SELECT culprit, median(step_us) FILTER (WHERE NOT queued AND NOT impaired) AS healthy_step_us,
           count(*) FILTER (WHERE NOT queued AND NOT impaired) AS healthy_iterations, count(*) AS iterations
    FROM t GROUP BY culprit),
h AS (
    SELECT own.culprit, own.healthy_iterations,
           CASE WHEN st_enough_healthy(own.healthy_iterations, own.iterations)
                THEN own.healthy_step_us ELSE b.step_us END AS healthy_step_us,
           CASE WHEN st_enough_healthy(own.healthy_iterations, own.iterations)
                THEN 'run' WHEN b.step_us IS NOT NULL THEN 'baseline' END AS healthy_from
    FROM own LEFT JOIN st_baseline b ON true)
SELECT h.culprit, h.healthy_step_us / 1e3 AS healthy_step_ms, h.healthy_iterations, h.healthy_from,
       count(*) FILTER (WHERE t.queued) AS impaired_iterations,
       avg(t.step_us) FILTER (WHERE t.queued) / 1e3 AS mean_step_ms,
       greatest(0, sum(t.step_us - h.healthy_step_us) FILTER (WHERE t.queued)) / 1e6 AS time_lost_s,
       -- how many of its iterations a verdict culprit already impaired (and priced)
       count(*) FILTER (WHERE t.queued AND t.impaired) / nullif(count(*) FILTER (WHERE t.queued), 0) AS shared_with_verdict
FROM h JOIN t USING (culprit)
WHERE h.healthy_from IS NOT NULL
GROUP BY h.culprit, h.healthy_step_us, h.healthy_iterations, h.healthy_from;

-- For a node or `link A - B` blamed for queueing: the delivery rate of its slowest bulk flow,
-- against the median of the bulk flows that touch neither it nor (for a link) its ends. A slow
-- link delivers less to its own flows and to no others. Bulk flows carry at least a quarter of
-- the bytes of the busiest one (a ring's links; not the mesh's barrier connections, whose few
-- bytes are sent at whatever rate the application offers).
CREATE OR REPLACE VIEW st_culprit_delivery AS
WITH c AS (
    SELECT culprit FROM st_persistent_queueing
    UNION SELECT culprit FROM st_slowdown WHERE cause = 'queueing'),
e AS (
    SELECT culprit, st_culprit_ends(culprit) AS ends
    FROM c),
bulk AS (SELECT * FROM st_flow_delivery WHERE acked_bytes >= 0.25 * (SELECT max(acked_bytes) FROM st_flow_delivery))
SELECT e.culprit,
       min(f.rate_bps) FILTER (WHERE list_contains(e.ends, f.node) OR list_contains(e.ends, f.remote_node)) AS slowest_bps,
       median(f.rate_bps) FILTER (WHERE NOT list_contains(e.ends, f.node) AND NOT list_contains(e.ends, f.remote_node)) AS others_bps
FROM e CROSS JOIN bulk f
GROUP BY e.culprit;

-- Each node's busiest interface by name (where the capture has interface names): where an
-- operator looks first.
CREATE OR REPLACE VIEW st_node_iface AS
SELECT node, arg_max(iface, bytes) AS iface
FROM (SELECT n.node, f.local_iface AS iface, sum(coalesce(f.bytes_sent, 0) + coalesce(f.bytes_received, 0)) AS bytes
      FROM st_flow f JOIN st_flow_node n USING (host, flow_id)
      WHERE f.local_iface <> f.local_addr
      GROUP BY ALL)
GROUP BY node;

-- A node's interface for a command line, or a placeholder where the capture has no name.
CREATE OR REPLACE MACRO st_iface_of(node_name) AS
    coalesce((SELECT i.iface FROM st_node_iface i WHERE i.node = node_name), '<interface>');

-- Moments for people (a clock time; the header gives the date) and for programs (ISO 8601).
CREATE OR REPLACE MACRO st_clock(us) AS strftime(make_timestamp(us::BIGINT), '%H:%M:%S');
CREATE OR REPLACE MACRO st_iso(us) AS strftime(make_timestamp(us::BIGINT), '%Y-%m-%dT%H:%M:%S.%fZ');

-- When each culprit held the job up. An engineer paged about a slow job first asks when it
-- began (a change made at that moment, a link that flapped) and whether it still goes on. The
-- onset is the training step that best splits the traced steps into a part before it and a
-- part from it on, each held up at its own rate, the rate from it on the higher: one change
-- point, the split under which two Bernoulli rates explain the held-up steps most likely. A
-- split always fits at least as well as none, so it must gain more than 1.5 ln(steps) (a
-- Bayesian information criterion for its two parameters, with margin) over one rate for all;
-- else the problem was there throughout and its onset is its first held-up step (an
-- intermittent fault from the start otherwise got a random late onset). A step of noise
-- before the fault is then no onset (a slow rank planted at step 33 left evidence in step 19
-- too), nor a short run of held-up steps at the end of an intermittent fault (2 % loss held up
-- 29 of 50 steps from step 30; by difference of shares the last 3 steps won). Without
-- training steps (no ProfilerStep): the first and last moments of its evidence. Only the
-- culprits the verdict can name: those with evidence, and slow links from the first step.
-- A straggler's step counts by how much of its typical extra work (its median held step) it
-- did, at most once: a slow rank adds its slowness every step, and on a busy host any rank
-- does a few ms more than the others in some steps (a rank slowed 60 ms from step 15 also
-- "held up" 4 of the 12 steps before it, by 6-21 ms against ~70 ms from step 15 on, two of
-- them just before it, and the onset came 2 steps early). A network culprit's steps count whole: its evidence varies by
-- nature (a retransmit timeout holds a step 200 ms, a fast retransmit a few ms) and a fault
-- arriving mid-step holds its first step briefly (weighing them moved 5 of 24 stored network
-- onsets 1-2 steps late). And a network culprit's onset is the earliest split the evidence
-- cannot tell from the best (its gain within 1.92, the 95 % likelihood-ratio bound for one
-- parameter): an intermittent fault leaves no clean edge (3 % loss planted at step 15 first
-- held up steps 15, 18 and 19, then none until 23, and the best split was 23).
CREATE OR REPLACE MACRO st_bernoulli_ll(k, n) AS
    CASE WHEN k <= 0 OR k >= n THEN 0.0 ELSE k * ln(k / n) + (n - k) * ln(1 - k / n) END;

CREATE OR REPLACE VIEW st_culprit_when AS
WITH hit AS (
    SELECT cause, culprit, iteration, min(first_us) AS first_us, max(last_us) AS last_us, sum(evidence_us) AS evidence_us
    FROM (SELECT i.cause, i.culprit, i.iteration, i.first_us, i.last_us, i.evidence_us
          FROM st_culprit_iteration i JOIN st_culprit c USING (cause, culprit) WHERE c.evidenced
          UNION ALL
          -- a slow link from the first step (`st_persistent_queueing`): the steps it queued most in
          SELECT 'persistent', q.node, x.iteration, x.first_start_us, x.last_end_us, x.last_end_us - x.first_start_us
          FROM st_step_queueing q JOIN st_collective_excess x USING (source, collective, step), st_params p
          WHERE q.node_samples >= p.min_step_queued_samples
            AND q.node IN (SELECT culprit FROM st_persistent_queueing
                           WHERE share_of_steps >= p.min_persistent_share AND share_of_queued_steps >= p.min_persistent_share))
    GROUP BY cause, culprit, iteration),
its AS (SELECT DISTINCT iteration FROM st_collective_excess WHERE iteration IS NOT NULL),
grid AS (
    SELECT c.cause, c.culprit, i.iteration, h.iteration IS NOT NULL AS held,
           CASE WHEN h.iteration IS NULL THEN 0.0
                WHEN c.cause = 'straggler' THEN coalesce(least(1.0, h.evidence_us / nullif(c.typical_us, 0)), 1.0)
                ELSE 1.0 END AS weight
    FROM (SELECT cause, culprit, median(evidence_us) AS typical_us FROM hit WHERE iteration IS NOT NULL GROUP BY ALL) c
    CROSS JOIN its i
    LEFT JOIN hit h ON h.cause = c.cause AND h.culprit = c.culprit AND h.iteration = i.iteration),
split AS (
    SELECT *, sum(weight) OVER later AS held_from, count(*) OVER later AS steps_from,
           sum(weight) OVER (PARTITION BY cause, culprit) AS held_all, count(*) OVER (PARTITION BY cause, culprit) AS steps
    FROM grid
    WINDOW later AS (PARTITION BY cause, culprit ORDER BY iteration DESC ROWS UNBOUNDED PRECEDING)),
scored AS (
    SELECT *, st_bernoulli_ll(held_from, steps_from) + st_bernoulli_ll(held_all - held_from, steps - steps_from)
                - st_bernoulli_ll(held_all, steps) AS gain,
           -- held up at least as often from it on as before it
           held_from / steps_from >= coalesce((held_all - held_from) / nullif(steps - steps_from, 0), 0) AS rising
    FROM split WHERE held),
ranked AS (SELECT *, max(gain) FILTER (WHERE rising) OVER (PARTITION BY cause, culprit) AS max_gain FROM scored),
onset AS (
    SELECT cause, culprit,
           CASE WHEN max(gain) FILTER (WHERE rising) > 1.5 * ln(any_value(steps))
                THEN CASE WHEN cause = 'straggler' THEN arg_max(iteration, (gain, -iteration)) FILTER (WHERE rising)
                          ELSE min(iteration) FILTER (WHERE rising AND gain >= max_gain - 1.92) END
                -- no change point: its first step held up by at least half its typical
                ELSE coalesce(min(iteration) FILTER (WHERE weight >= 0.5), min(iteration)) END AS onset_iteration,
           coalesce(max(gain) FILTER (WHERE rising) > 1.5 * ln(any_value(steps)), false) AS changed
    FROM ranked GROUP BY cause, culprit),
stepped AS (
    SELECT o.cause, o.culprit, o.onset_iteration, o.changed, max(g.iteration) FILTER (WHERE g.held) AS last_iteration,
           count(*) FILTER (WHERE g.held AND g.iteration >= o.onset_iteration) AS held_after,
           count(*) FILTER (WHERE g.held AND g.iteration < o.onset_iteration) AS held_before,
           count(*) FILTER (WHERE g.iteration < o.onset_iteration) AS steps_before
    FROM onset o JOIN grid g USING (cause, culprit) GROUP BY ALL),
counted AS (
    -- traced steps, counted (a profiler schedule may leave gaps in the numbers)
    SELECT t.*, count(*) FILTER (WHERE i.iteration BETWEEN t.onset_iteration AND t.last_iteration) AS steps_between,
           count(*) FILTER (WHERE i.iteration > t.last_iteration) AS steps_after
    FROM stepped t CROSS JOIN its i GROUP BY ALL),
span AS (SELECT min(iteration) AS first_it, max(iteration) AS last_it FROM its)
SELECT h.cause, h.culprit,
       coalesce(min(h.first_us) FILTER (WHERE h.iteration = t.onset_iteration), min(h.first_us)) AS first_us,
       max(h.last_us) AS last_us, t.onset_iteration AS first_step,
       CASE WHEN t.onset_iteration IS NULL
            THEN printf('from %s to %s UTC (traced: %s to %s)', st_clock(min(h.first_us)), st_clock(max(h.last_us)),
                        st_clock(any_value(j.span_start_us)), st_clock(any_value(j.span_end_us)))
            ELSE printf('%s training step %d (%s UTC): held up %d of the %s from there to step %d (%s)%s%s',
                        CASE WHEN t.onset_iteration = any_value(sp.first_it) THEN 'there from the first traced step,'
                             WHEN NOT t.changed THEN 'there throughout the traced steps (no change point), first at'
                             ELSE 'began at' END,
                        t.onset_iteration, st_clock(min(h.first_us) FILTER (WHERE h.iteration = t.onset_iteration)),
                        t.held_after, st_count(t.steps_between, 'step'), t.last_iteration, st_clock(max(h.last_us)),
                        CASE WHEN t.steps_after = 0 THEN ', the last traced step: still going when the trace ended'
                             ELSE printf('; none in the %s after it (the trace ends at step %d)', st_count(t.steps_after, 'step'), any_value(sp.last_it)) END,
                        CASE WHEN t.held_before > 0 THEN printf('; before it, %d of %s', t.held_before, st_count(t.steps_before, 'step')) ELSE '' END)
            END AS seen_when
FROM hit h LEFT JOIN counted t USING (cause, culprit) CROSS JOIN span sp CROSS JOIN st_job_span j
GROUP BY h.cause, h.culprit, t.onset_iteration, t.changed, t.last_iteration, t.held_after, t.held_before,
         t.steps_before, t.steps_between, t.steps_after;

-- Where to look next for each kind of culprit: the evidence says which link or rank, not
-- which part of it; these are the places that cause each kind, with the node's interface.
CREATE OR REPLACE MACRO st_next_check(kind, blamed, on_host, rank_no) AS
    CASE WHEN kind = 'straggler'
           THEN printf('look at what rank %d does outside collectives on %s: its input pipeline (data loading), other processes competing for its CPUs or memory%s',
                       rank_no, on_host,
                       CASE WHEN (SELECT bool_or(t.device = 'gpu') FROM st_rank_trace t WHERE t.host = on_host AND t.rank = rank_no)
                            THEN ', its GPU''s clocks and throttling (nvidia-smi -q -d PERFORMANCE)' ELSE '' END)
         WHEN kind = 'reordering'
           THEN printf('look for what reorders or delays packets %s: variable delay or jitter (tc -s qdisc: netem, shapers), packets of one flow spread over paths of different length (bonding or LAG in a per-packet mode, ECMP or adaptive routing in the switches), a link that fails over back and forth; then its error and drop counters, for the segments that were lost',
                       CASE WHEN blamed LIKE 'link %' THEN printf('between %s and %s', st_culprit_ends(blamed)[1], st_culprit_ends(blamed)[2])
                            ELSE printf('on %s''s link (%s)', blamed, st_iface_of(blamed)) END)
         WHEN blamed LIKE 'link %' THEN
           CASE kind
             WHEN 'network' THEN printf('look for packet loss between %s and %s: both NICs'' error and drop counters (ethtool -S), the switch ports, cables or optics between them',
                                        st_culprit_ends(blamed)[1], st_culprit_ends(blamed)[2])
             ELSE printf('look at the path between %s and %s: the speed both NICs negotiated (ethtool), shaping, policing or added delay (tc -s qdisc), other traffic on the switch ports between them, its round trip against the other paths'' (ping)',
                         st_culprit_ends(blamed)[1], st_culprit_ends(blamed)[2]) END
         WHEN kind = 'network'
           THEN printf('look for packet loss on %s''s link: its NIC''s error and drop counters (ethtool -S %s on %s), the switch port''s error and discard counters, the cable or optic',
                       blamed, st_iface_of(blamed), blamed)
         ELSE printf('look at %s''s link: the speed it negotiated (ethtool %s on %s), shaping, policing or added delay on it (tc -s qdisc show dev %s), other traffic on its switch port, its round trip to the other nodes against theirs (ping)',
                     blamed, st_iface_of(blamed), blamed,
                     st_iface_of(blamed)) END;

------------------------------------------------------------------------------------------
-- Findings: every diagnosis above that crosses its threshold, ranked within its category
-- (score: higher is worse; comparable within a category only)
------------------------------------------------------------------------------------------

-- The jobs each host's data flows and RDMA QPs belong to, from the cgroups of their sockets
-- and processes: the Slurm job (`slurm_job`), else the Kubernetes pod (`pod_uid`). A finding
-- about a host names them ("job 4121: ..."): on a cluster that runs many jobs, whose slowdown
-- it is. The three that moved the most bytes, then how many more. Null where nothing carries a
-- label (a recording made before these columns, processes outside any job).
CREATE OR REPLACE VIEW st_host_job AS
WITH labelled AS (
    SELECT f.host, coalesce('job ' || f.slurm_job, 'pod ' || f.pod_uid) AS job,
           coalesce(f.bytes_sent, 0) + coalesce(f.bytes_received, 0) AS bytes
    FROM flows f JOIN st_data_flow d USING (host, flow_id)
    UNION ALL
    SELECT host, coalesce('job ' || slurm_job, 'pod ' || pod_uid), 0 FROM qps),
per_job AS (
    SELECT host, job, sum(bytes) AS bytes FROM labelled WHERE job IS NOT NULL GROUP BY host, job),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY host ORDER BY bytes DESC, job) AS n,
           count(*) OVER (PARTITION BY host) AS jobs
    FROM per_job)
SELECT host, string_agg(job, ', ' ORDER BY n)
             || CASE WHEN max(jobs) > 3 THEN printf(' and %d more', max(jobs) - 3) ELSE '' END AS job
FROM ranked WHERE n <= 3
GROUP BY host;

-- The job of one flow (`st_flow.flow_label`): a finding about a flow names its own job, not
-- every job of its host.
CREATE OR REPLACE VIEW st_flow_job AS
SELECT fl.flow_label, any_value(coalesce('job ' || f.slurm_job, 'pod ' || f.pod_uid)) AS job
FROM st_flow fl JOIN flows f USING (host, flow_id)
WHERE coalesce(f.slurm_job, f.pod_uid) IS NOT NULL
GROUP BY fl.flow_label;

CREATE OR REPLACE VIEW st_finding AS
-- Ranks that arrived last, each with its own work per training step against the other ranks'
-- (`st_rank_own_time`). One that did no more of it (less than the verdict asks of a straggler)
-- was held up by something else, typically its previous transfer on a slow link: under a rate
-- limit on node0 a rank of node3 arrived last in 193 of 308 steps with 1.6 ms *less* own work.
-- A rank the verdict names as a straggler is listed whatever its share of the whole trace: a
-- rank slowed from step 25 of 80 arrived last in 48 % of the steps, under the 2/ranks floor,
-- and the report said "the other ranks waited for it" above "Straggler ranks: nothing found".
-- Still only for a collective it arrived last in most often, and in enough steps: not for
-- each collective where it once was the last (a broadcast at the start).
WITH late_rank AS (
    SELECT 'straggler' AS category, 'rank' AS scope, 'rank ' || t.rank AS subject, t.host, t.rank,
           t.share_last AS score,
           printf('rank %d (%s) arrived last at %d of %d %s steps (timed by %s), late by %.2f ms (median); the fastest ranks waited %.0f%% of those steps%s',
                  t.rank, t.host, t.steps_last, t.steps, t.collective, st_source_name(t.source), t.median_lateness_us / 1000, 100 * t.fastest_wait_fraction,
                  CASE WHEN o.extra_own_us IS NULL THEN ''
                       ELSE printf('; its own work per training step: %+.1f ms against the other ranks'' median', o.extra_own_us / 1000) END) AS summary,
           coalesce(o.extra_own_us < greatest(p.min_spread_us, 0.5 * t.median_lateness_us), false)
             -- a rank the verdict names as a straggler is one here too
             AND NOT EXISTS (SELECT 1 FROM st_culprit c WHERE c.cause = 'straggler' AND c.evidenced
                               AND c.host = t.host AND c.rank = t.rank) AS held_up
    FROM st_straggler t CROSS JOIN st_params p
    LEFT JOIN st_rank_own_time o ON o.host = t.host AND o.rank = t.rank
    -- the verdict's stragglers (`s` below: evidenced, above its floors)
    LEFT JOIN (SELECT DISTINCT host, rank FROM st_slowdown
               WHERE cause = 'straggler' AND evidenced AND st_above_floors(slow_steps, time_lost_s, lost_fraction)) named
      ON named.host = t.host AND named.rank = t.rank
    WHERE (t.steps_last >= p.min_straggler_steps AND t.share_last >= greatest(p.min_straggler_share, 2.0 / t.ranks))
       OR (named.rank IS NOT NULL AND t.steps_last >= p.min_straggler_steps AND t.steps_last = t.most_steps_last)),
f AS (
    SELECT 'retransmits' AS category, 'peer' AS scope, remote_addr AS subject, NULL::VARCHAR AS host, NULL::BIGINT AS rank,
           -- ranked by how many segments were lost, not by ratio: a small flow losing a few
           -- segments is a smaller hot spot than a bulk flow losing hundreds
           retransmits::DOUBLE AS score,
           printf('peer %s%s: %d retransmits over %s from %s (%s)%s, burstiness %.1f, %s where throughput collapsed with them',
                  remote_addr, coalesce(' (' || (SELECT min(o.node) FROM st_addr_owner o WHERE o.addr = remote_addr) || ')', ''), retransmits,
                  st_count(flows_with_retrans, 'flow'), st_count(hosts, 'host'), st_segments_share(retrans_ratio), st_dsack_note(dsack_dups, retransmits),
                  coalesce(burstiness, 0), st_count(coalesce(collapse_windows, 0), 'window')) AS summary
    FROM st_retrans_peer, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'retransmits', 'interface', host || '/' || local_iface, host, NULL, retransmits::DOUBLE,
           printf('interface %s/%s: %d retransmits over %s%s (%s)%s, burstiness %.1f, %s where throughput collapsed with them',
                  host, local_iface, retransmits, st_count(flows_with_retrans, 'flow'), coalesce(' sent toward ' || toward, ''), st_segments_share(retrans_ratio),
                  st_dsack_note(dsack_dups, retransmits), coalesce(burstiness, 0), st_count(coalesce(collapse_windows, 0), 'window'))
    FROM st_retrans_interface, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'retransmits', 'flow', flow_label, host, NULL, retransmits::DOUBLE,
           printf('flow %s: %d retransmits (%s, %.1f/s)%s%s%s, burstiness %.1f, throughput collapsed in %d of %d windows with retransmits',
                  flow_label, retransmits, st_segments_share(retrans_ratio), retrans_per_s,
                  CASE WHEN coalesce(dsack_dups, 0) > 0
                       THEN printf('; the receiver already had %d of the segments resent (DSACK: late, not lost)', dsack_dups) ELSE '' END,
                  CASE WHEN coalesce(loss_recovery_s, 0) > 0
                       THEN printf('; in loss recovery %.2f s', loss_recovery_s) ELSE '' END,
                  CASE WHEN coalesce(rto_count, 0) > 0
                       THEN printf('; %d retransmission timeouts, stalled %.2f s after them', rto_count, rto_recovery_s) ELSE '' END,
                  coalesce(burstiness, 0), coalesce(collapse_windows, 0), coalesce(windows_with_retrans, 0))
    FROM st_retrans_flow, st_params p
    WHERE retransmits >= p.min_retransmits AND (retrans_ratio >= p.min_retrans_ratio OR collapse_windows > 0)
    UNION ALL
    SELECT 'rdma_retransmits', 'device', host || '/' || device, host, NULL, loss_ratio,
           printf('RDMA device %s/%s (port %d%s): %d sequence gaps (lost packets) and %d retries over %d packets (gaps %.3g%%; %s): the NIC recovered lost packets in hardware, which TCP never sees%s',
                  host, device, port, CASE WHEN netdev IS NULL THEN '' ELSE ', netdev ' || netdev END,
                  loss_events, retry_events, packets, 100 * loss_ratio, loss_counters,
                  CASE WHEN busiest_qps IS NULL THEN '' ELSE printf('; busiest QPs: %s', busiest_qps) END)
    FROM st_rdma_device, st_params p
    WHERE loss_events >= p.min_retransmits AND loss_ratio >= p.min_retrans_ratio
    UNION ALL
    SELECT 'loss_burst', 'window', host || ' @ ' || strftime(window_start, '%Y-%m-%d %H:%M:%S'), host, NULL, peak_ratio,
           printf('%s: %d retransmits in the window starting %s (usual window: %.1f), peers %s',
                  host, retransmits, strftime(window_start, '%H:%M:%S'), coalesce(others_mean, 0), coalesce(peers, '?'))
    FROM st_loss_burst, st_params p
    WHERE peak_ratio >= p.burst_peak_ratio
    UNION ALL
    SELECT 'latency', 'tail_outlier', flow_label, host, NULL, p99_vs_fleet,
           printf('flow %s: RTT p99 %.0f µs is %.1fx the fleet median p99 (%.0f µs); p50 %.0f µs, max %d µs',
                  flow_label, srtt_p99_us, p99_vs_fleet, fleet_median_p99_us, srtt_p50_us, srtt_max_us)
    FROM st_latency_flow, st_params p
    WHERE samples >= p.min_rtt_samples AND p99_vs_fleet >= p.tail_outlier_ratio
      AND flow_bytes >= p.min_flow_bytes AND srtt_p99_us - fleet_median_p99_us >= p.min_queueing_us
    UNION ALL
    SELECT 'latency', 'queueing', flow_label, host, NULL, rtt_inflation,
           printf('flow %s: median RTT %.0f µs is %.1fx its own base RTT (%.0f µs): queueing on the path',
                  flow_label, srtt_p50_us, rtt_inflation, base_rtt_us)
    FROM st_latency_flow, st_params p, st_healthy_queueing q
    WHERE samples >= p.min_rtt_samples AND rtt_inflation >= p.degraded_rtt_inflation
      AND flow_bytes >= p.min_flow_bytes AND srtt_p50_us - base_rtt_us >= q.threshold_us
    UNION ALL
    SELECT 'contention', scope, subject, NULL, NULL, together_windows / windows * together_flows,
           printf('%s %s%s: its flows degraded together in %d of %d windows (%s of its %d flows at a time on average; RTT x%.1f, throughput x%.2f)',
                  scope, subject,
                  CASE WHEN scope = 'peer'
                       THEN coalesce(' (' || (SELECT min(o.node) FROM st_addr_owner o WHERE o.addr = subject) || ')', '')
                       ELSE '' END,
                  together_windows, windows,
                  CASE WHEN together_flows = round(together_flows) THEN printf('%d', together_flows::BIGINT)
                       ELSE printf('%.1f', together_flows) END, flows,
                  coalesce(rtt_inflation, 1), coalesce(throughput_ratio, 1))
    FROM st_contention, st_params p
    WHERE flows >= 2 AND together_windows >= p.min_together_windows
    UNION ALL
    SELECT category, scope, subject, host, rank, score, summary FROM late_rank WHERE NOT held_up
    UNION ALL
    SELECT 'sync_amplification', 'collective', collective || ' (' || source || ')', NULL, NULL, fastest_wait_fraction,
           printf('%s over %d ranks (timed by %s): the fastest rank waits %.0f%% of each step on average; arrival spread median %.2f ms, p99 %.2f ms; step %.2f ms',
                  collective, ranks, st_source_name(source), 100 * fastest_wait_fraction, median_arrival_spread_us / 1000,
                  p99_arrival_spread_us / 1000, median_step_us / 1000)
    FROM st_sync_amplification, st_params p
    WHERE fastest_wait_fraction >= p.sync_wait_fraction
      AND median_arrival_spread_us >= greatest(p.min_spread_us, p.min_spread_fraction * median_step_us)
    UNION ALL
    SELECT 'locality', 'rank', 'rank ' || rank, host, rank, coalesce(transfer_vs_well_placed, 1),
           printf('rank %d (%s GPU %d): GPU on NUMA %s, nearest NIC %s on NUMA %s (%s); collective transfer time %s that of well-placed ranks',
                  rank, host, device, coalesce(numa_node::VARCHAR, '?'), coalesce(nearest_nic, '?'),
                  coalesce(nic_numa_node::VARCHAR, '?'), coalesce(nic_locality, '?'),
                  CASE WHEN transfer_vs_well_placed IS NULL THEN 'not comparable with'
                       ELSE printf('%.2fx', transfer_vs_well_placed) END)
    FROM st_locality WHERE mismatched
    UNION ALL
    SELECT 'gpu_idle', 'node', host, host, CASE WHEN idle_ranks = 1 THEN ranks[1] END,
           idle_windows / windows + explained_windows / windows,
           printf('%s: compute idle while collectives ran on %d of its %d GPU ranks (%s%s%s) in %d of %d windows; %d of them with network symptoms on the host (%d retransmits, RTT up to x%.1f, peers %s)',
                  host, idle_ranks, gpu_ranks, CASE WHEN idle_ranks = 1 THEN 'rank ' ELSE 'ranks ' END,
                  array_to_string(list_slice(ranks, 1, 8), ', '), CASE WHEN idle_ranks > 8 THEN ', ...' ELSE '' END,
                  idle_windows, windows, explained_windows, retransmits,
                  coalesce(max_rtt_inflation, 1), coalesce(affected_peers, 'none'))
    FROM st_gpu_idle_host),
-- The verdict: culprits of slow collective steps, by the job time they cost.
s AS (
    SELECT 'slowdown' AS category,
           CASE WHEN cause = 'straggler' THEN 'rank' WHEN culprit LIKE 'link %' THEN 'link' ELSE 'node' END AS scope,
           culprit AS subject, host, rank, time_lost_s AS score, time_lost_s,
           CASE cause
             WHEN 'network' THEN printf('%s: the job lost %.1f s (%.0f%% of %.0f s traced)%s in %d slow %s steps (each transfer a median %.0f ms longer than a healthy %.0f ms) with %d retransmits on %s during them%s: every rank waits for the slowest link (synchronization amplification)',
                                        culprit, time_lost_s, 100 * lost_fraction, traced_s, priced, slow_steps, collectives, median_excess_ms, median_base_ms, retransmits,
                                        CASE WHEN culprit LIKE 'link %' THEN 'that link' ELSE 'the links of ' || culprit END,
                                        CASE WHEN reordered
                                             THEN printf('; the receivers already had %.0f%% of the segments resent (DSACK): most arrived late or out of order, not lost (reordering or jitter on the path)', 100 * spurious_share)
                                             ELSE '' END)
             WHEN 'queueing' THEN printf('%s: the job lost %.1f s (%.0f%% of %.0f s traced)%s in %d slow %s steps (each transfer a median %.0f ms longer than a healthy %.0f ms) %s, while %d RTT samples on %s queued above the fleet''s usual%s: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for',
                                         culprit, time_lost_s, 100 * lost_fraction, traced_s, priced, slow_steps, collectives, median_excess_ms, median_base_ms,
                                         CASE WHEN lossy_steps = 0 THEN 'with no retransmits during them'
                                              ELSE printf('with retransmits on its links in %d of them (its queue overflowed)', lossy_steps) END,
                                         queued_samples,
                                         CASE WHEN culprit LIKE 'link %' THEN 'that link' ELSE 'the links of ' || culprit END,
                                         delivery)
             WHEN 'straggler' THEN printf('%s: the job lost %.1f s (%.0f%% of %.0f s traced)%s in %d %s steps it held up, arriving %.0f ms after the first rank (median): the other ranks waited for it%s',
                                          culprit, time_lost_s, 100 * lost_fraction, traced_s, priced, slow_steps, collectives, median_lateness_ms,
                                          CASE WHEN extra_own_ms IS NULL THEN ''
                                               ELSE printf('; it spends %.0f ms more per training step outside collectives than the other ranks (median)', extra_own_ms) END)
             END AS summary,
           st_iso(w.first_us) AS first_seen, st_iso(w.last_us) AS last_seen, w.first_step, w.seen_when,
           st_next_check(CASE WHEN reordered THEN 'reordering' ELSE cause END, culprit, host, rank) AS next_check
    FROM (SELECT st_slowdown.*, coalesce(x.reordered, false) AS reordered, x.spurious_share,
                 CASE WHEN priced_by = 'step_time'
                         THEN printf(': %d training steps took %.0f ms on average instead of a healthy %.0f ms%s%s',
                                     impaired_iterations, mean_step_ms, healthy_step_ms,
                                     CASE WHEN healthy_from = 'baseline' THEN ' (the baseline run''s)' ELSE '' END,
                                     CASE WHEN quiet_iterations > 0
                                          THEN printf(' (and %s between them without its evidence, %.0f ms on average: slower than the healthy ones)',
                                                      st_count(quiet_iterations, 'training step'), quiet_mean_step_ms)
                                          ELSE '' END)
                         WHEN priced_by = 'own_time'
                         THEN ' (its extra work per step: no healthy step to compare with; --baseline prices it by step time)'
                         ELSE '' END AS priced,
                         coalesce((SELECT printf('; its slowest flow delivered %s, the other flows %s (median)',
                                                 st_rate(d.slowest_bps), st_rate(d.others_bps))
                                   FROM st_culprit_delivery d WHERE d.culprit = st_slowdown.culprit
                                     AND d.slowest_bps IS NOT NULL AND d.others_bps IS NOT NULL), '') AS delivery
                  FROM st_slowdown LEFT JOIN st_culprit_spurious x ON st_slowdown.cause = 'network' AND x.culprit = st_slowdown.culprit) d
    LEFT JOIN st_culprit_when w USING (cause, culprit) CROSS JOIN st_params p
    -- Slow steps nobody can be blamed for stay in st_slowdown (cause 'unexplained'): on a busy
    -- host transfers vary by tens of percent, and a finding without a culprit is not one.
    WHERE evidenced AND cause <> 'unexplained' AND st_above_floors(slow_steps, time_lost_s, lost_fraction)),
-- ... and a slow link that was there from the first step, which no step-time comparison shows
-- (named, not priced), unless the verdict already priced it.
pq AS (
    SELECT 'slowdown' AS category, CASE WHEN q.culprit LIKE 'link %' THEN 'link' ELSE 'node' END AS scope,
           q.culprit AS subject, q.host, NULL::BIGINT AS rank,
           -- unpriced: ranked below every priced culprit of its scope
           coalesce(k.time_lost_s, 0.0) AS score, k.time_lost_s,
           CASE WHEN k.time_lost_s IS NULL
             THEN printf('%s: its links queued packets above the fleet''s usual in %d of %d %s steps (%d RTT samples)%s, slowing them evenly from the first traced step: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for; time lost not estimated: too few steps ran without it (analyze --baseline RUN prices it against a run without it)',
                         q.culprit, q.queued_steps, q.steps, q.collectives, q.queued_samples, delivery)
             ELSE printf('%s: the job lost %.1f s (%.0f%% of %.0f s traced): %d training steps took %.0f ms on average instead of a healthy %.0f ms%s, while its links queued packets above the fleet''s usual in %d of %d %s steps (%d RTT samples)%s: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for',
                         q.culprit, k.time_lost_s, 100 * k.time_lost_s / nullif(j.traced_s, 0), j.traced_s, k.impaired_iterations,
                         k.mean_step_ms, k.healthy_step_ms,
                         CASE WHEN k.healthy_from = 'baseline' THEN ' (the baseline run''s)' ELSE '' END,
                         q.queued_steps, q.steps, q.collectives, q.queued_samples, delivery) END AS summary,
           st_iso(w.first_us) AS first_seen, st_iso(w.last_us) AS last_seen, w.first_step, w.seen_when,
           st_next_check('queueing', q.culprit, q.host, NULL) AS next_check
    FROM st_persistent_queueing q CROSS JOIN st_params p CROSS JOIN st_job_span j
    LEFT JOIN st_persistent_cost k USING (culprit)
    LEFT JOIN st_culprit_when w ON w.cause = 'persistent' AND w.culprit = q.culprit
    CROSS JOIN LATERAL (
        SELECT coalesce(max(printf('; its slowest flow delivered %s, the other flows %s (median)',
                                   st_rate(d.slowest_bps), st_rate(d.others_bps))), '') AS delivery
        FROM st_culprit_delivery d WHERE d.culprit = q.culprit
          AND d.slowest_bps IS NOT NULL AND d.others_bps IS NOT NULL) dl
    WHERE q.share_of_steps >= p.min_persistent_share AND q.share_of_queued_steps >= p.min_persistent_share
      AND NOT EXISTS (SELECT 1 FROM s WHERE s.subject = q.culprit)
      -- most of its iterations already lost their time to a verdict culprit: it is that
      -- culprit's neighbour, queueing the late or held traffic (under reordering on node2's
      -- link node1 queued in 210 of 308 steps, all of them node2's, and was named beside it
      -- with the same 4.1 s)
      AND coalesce(k.shared_with_verdict, 0) < 0.5
      -- priced, it must pass the verdict's floors like any culprit
      AND (k.time_lost_s IS NULL
           OR (k.time_lost_s >= p.min_lost_s AND k.time_lost_s >= p.min_lost_fraction * j.traced_s))),
-- Slow packets (latency, contention) and ranks waiting for each other (sync_amplification) are
-- what a busy host shows on any run: a clean 4-rank DDP run had one flow's RTT p99 at 3.2x the
-- fleet's. When collective timelines say whether the job lost time, such evidence is a finding
-- only if it did (a culprit in the verdict, or a straggler); otherwise it is `withheld` (with
-- the reason): listed as standing out, not as a finding. Without timelines it is all the
-- diagnosis there is.
-- `timed`: the verdict could have seen lost time — matched steps with end times and enough
-- occurrences to have a healthy duration (NCCL API calls have entry times only; a profiler
-- window of 3 steps has no healthy duration to compare with).
lost AS (
    SELECT EXISTS (SELECT 1 FROM st_collective_excess x, st_params p
                   WHERE x.transfer_us IS NOT NULL AND x.occurrences >= p.min_occurrences) AS timed,
           (SELECT min(first_start_us) FROM st_collective_excess) AS span_start_us,
           (SELECT max(last_end_us) FROM st_collective_excess) AS span_end_us,
           EXISTS (SELECT 1 FROM s) OR EXISTS (SELECT 1 FROM pq)
             OR EXISTS (SELECT 1 FROM f WHERE category = 'straggler') AS job_lost_time),
-- A flow judged on latency is judged by the timelines only when most of its RTT samples fall
-- within the traced steps: samples from before or after the profiler ran say nothing about
-- whether steps got slower.
-- (The flows are picked before the join: filtered after it, DuckDB built the label of every
-- RTT sample's flow, 7 of 10 s of the findings on 64 nodes' 2 minutes.)
flow_in_span AS (
    SELECT fl.host, fl.flow_label,
           count(*) FILTER (WHERE st_us(r.ts) BETWEEN lost.span_start_us AND lost.span_end_us) / count(*) AS share
    FROM (SELECT host, flow_id, flow_label FROM st_flow
          WHERE flow_label IN (SELECT subject FROM f WHERE category = 'latency')) fl
    JOIN rtt r USING (host, flow_id) CROSS JOIN lost
    GROUP BY fl.host, fl.flow_label),
a AS (
    SELECT *, NULL::DOUBLE AS time_lost_s, NULL::VARCHAR AS withheld FROM f
    UNION ALL BY NAME
    SELECT * FROM s
    UNION ALL BY NAME
    SELECT * FROM pq
    UNION ALL BY NAME
    SELECT category, scope, subject, host, rank, score, summary,
           'arrived last without more work of its own than the other ranks: held up by something else, not a straggler' AS withheld
    FROM late_rank WHERE held_up)
-- Scores and costs to 9 decimal places: DuckDB adds a group's doubles (an avg(), a sum of step
-- times above the healthy median) in whatever order its threads finish, so their last bit
-- varied between two analyses of the same data (the sync_amplification score, an average
-- wait fraction: ...3509, ...351, ...3508 in five runs of tests/data/slow-rank-noise-before-onset);
-- rounded, the same data gives the same findings, to the byte.
SELECT a.category, a.scope, row_number() OVER (PARTITION BY a.category, a.scope ORDER BY a.withheld IS NOT NULL, round(a.score, 9) DESC, a.subject) AS rank_in_scope,
       a.subject, a.host, coalesce(fj.job, hj.job) AS job, a.rank, round(a.score, 9) AS score, round(a.time_lost_s, 9) AS time_lost_s,
       coalesce(coalesce(fj.job, hj.job) || ': ', '') || a.summary AS summary,
       a.first_seen, a.last_seen, a.first_step, a.seen_when, a.next_check,
       coalesce(a.withheld, CASE WHEN a.category IN ('latency', 'contention') AND lost.timed AND NOT lost.job_lost_time
                                      AND (a.category <> 'latency' OR coalesce(w.share, 0) >= 0.5)
                                 THEN 'stood out, but the job lost no step time to any culprit above the verdict''s floors' END) AS withheld
FROM a CROSS JOIN lost
LEFT JOIN flow_in_span w ON a.category = 'latency' AND w.host = a.host AND w.flow_label = a.subject
LEFT JOIN st_host_job hj ON hj.host = a.host
LEFT JOIN st_flow_job fj ON a.scope IN ('flow', 'tail_outlier') AND fj.flow_label = a.subject
-- ranks waiting for each other is how synchronous training works: without lost time it is not
-- even worth a line (a clean 6-rank gloo job's fastest rank waits ~30 % of every step)
WHERE NOT (a.category = 'sync_amplification' AND lost.timed AND NOT lost.job_lost_time)
-- the verdict first (what cost the most time first, then what could not be priced), then the
-- evidence by category
ORDER BY category <> 'slowdown', time_lost_s IS NULL, time_lost_s DESC, category, scope, rank_in_scope;

-- The findings: `st_finding` without what is withheld, in the same order.
CREATE OR REPLACE VIEW findings AS
SELECT * EXCLUDE (withheld) FROM st_finding WHERE withheld IS NULL
ORDER BY category <> 'slowdown', time_lost_s IS NULL, time_lost_s DESC, category, scope, rank_in_scope;
