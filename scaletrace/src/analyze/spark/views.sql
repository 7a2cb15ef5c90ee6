-- scaletrace analysis views for Spark SQL, made from ../views.sql by translate.py:
-- do not edit; change ../views.sql and run translate.py.

/* ---------------------------------------------------------------------------------------- */
/* Building blocks */
/* ---------------------------------------------------------------------------------------- */
/* One row per flow, with the interface that owns its local address (the address itself when */
/* the interface is unknown, e.g. a flow in another network namespace). */
CREATE OR REPLACE TEMPORARY VIEW st_flow AS
SELECT
  f.host,
  f.flow_id,
  f.local_addr,
  f.local_port,
  f.remote_addr,
  f.remote_port,
  COALESCE(i.name, f.local_addr) AS local_iface,
  f.host || ' ' || f.local_addr || ':' || f.local_port || ' -> ' || f.remote_addr || ':' || f.remote_port AS flow_label,
  f.start,
  f.`end`,
  f.duration_ns,
  f.bytes_sent,
  f.bytes_received,
  f.data_segs_out,
  f.total_retrans,
  f.dsack_dups,
  f.rto_count,
  f.rto_recovery_ns,
  f.loss_recovery_ns,
  f.pid,
  f.comm
FROM flows AS f
LEFT JOIN (
  SELECT
    host,
    addr,
    ANY_VALUE(name, TRUE) AS name
  FROM interfaces
  GROUP BY ALL
) AS i
  ON i.host = f.host AND i.addr = f.local_addr;

/* The span of each flow's kernel windows (`flow_windows`) that tile the analysis window (a */
/* whole number of them in each: `record --flow-window 1s` serves `analyze --window 1s`, `10s` */
/* or `1min`; windows start on whole multiples of their length, so none straddles two): its */
/* first and last window, and its smallest smoothed RTT in them. A flow with windows of several */
/* such lengths (recorders with different settings) is read from its longest. */
CREATE OR REPLACE TEMPORARY VIEW st_windowed_flow AS
WITH fit AS (
  SELECT
    fw.host,
    fw.flow_id,
    fw.ts,
    fw.window_ns,
    fw.srtt_min_us
  FROM flow_windows AS fw, st_params AS p
  WHERE
    fw.window_ns > 0 AND (
      p.window_us * 1000
    ) % fw.window_ns = 0
), chosen AS (
  SELECT
    host,
    flow_id,
    MAX(window_ns) AS window_ns
  FROM fit
  GROUP BY ALL
)
SELECT
  f.host,
  f.flow_id,
  ANY_VALUE(f.window_ns, TRUE) AS window_ns,
  MIN((
    (
      f.ts
    ) DIV 1000
  ) DIV p.window_us) AS first_w,
  MAX((
    (
      f.ts
    ) DIV 1000
  ) DIV p.window_us) AS last_w,
  MIN(NULLIF(f.srtt_min_us, 0)) AS srtt_min_us
FROM fit AS f
JOIN chosen AS c
  USING (host, flow_id, window_ns), st_params AS p
GROUP BY
  f.host,
  f.flow_id;

/* Each flow's RTT over its whole capture, from its raw samples: what the fleet's usual queueing */
/* and the per-flow latency findings judge it on, and the span of its samples (`first_us`, */
/* `last_us`), which tells `st_rtt_window` whether any lie outside its kernel windows (one pass */
/* over the samples for all three). */
/* The percentiles are quantile_cont's, to the last bit (the samples at positions floor(h) and */
/* floor(h) + 1 of the flow's order, h = (n - 1) * q as a double, and lo + (hi - lo) * (h - */
/* floor(h)) between them), computed from how often each value occurs: a smoothed RTT is a */
/* whole number of µs, so a flow's values repeat as its samples grow (at most one row per µs of */
/* its RTT's range: an hour of 10 ms samples is 360,000 samples), where quantile_cont holds */
/* every sample in memory, and this group can spill to disk. With quantile_cont, the analysis */
/* of 64 nodes' 10 minutes (246 M samples, bench/fleet.py) peaked at 6.5 GB; with this, 2.3 GB. */
/* (The DDP lab's 2-minute runs have 0.7 distinct values a sample: nothing to gain there.) */
/* Spark's `percentile` interpolates by another formula: the same up to rounding. Not from the */
/* kernel's windows, which would need no raw samples: their histograms weigh each ACK, not each */
/* moment (a flow's bursts count more), and read so, the findings of 16 of the 18 recorded DDP */
/* runs changed and all 6 clean runs had latency findings (bench/eval.py --rescore, 2026-12-06). */
CREATE OR REPLACE TEMPORARY VIEW st_flow_raw_rtt AS
WITH v AS (
  SELECT
    host,
    flow_id,
    srtt_us AS x,
    COUNT(*) AS n,
    MIN(ts) AS first_ts,
    MAX(ts) AS last_ts
  FROM rtt
  GROUP BY ALL
), c /* each value's samples are the (0-based) positions [below, below + n) in the flow's order */ AS (
  SELECT
    *,
    SUM(n) OVER (PARTITION BY host, flow_id ORDER BY x NULLS LAST) - n AS below,
    SUM(n) OVER (PARTITION BY host, flow_id) AS total
  FROM v
), k /* the values at positions k and k + 1 around each percentile's (n - 1) * q */ AS (
  SELECT
    host,
    flow_id,
    CAST(IF(
      TYPEOF(ANY_VALUE(total, TRUE)) IN ('double', 'float'),
      BROUND(ANY_VALUE(total, TRUE)),
      ROUND(ANY_VALUE(total, TRUE))
    ) AS BIGINT) AS samples,
    MAX(x) AS srtt_max_us,
    (
      (
        MIN(first_ts)
      ) DIV 1000
    ) AS first_us,
    (
      (
        MAX(last_ts)
      ) DIV 1000
    ) AS last_us,
    ANY_VALUE((
      CAST((
        (
          total
        ) - 1
      ) AS DOUBLE) * (
        0.5
      )
    ), TRUE) AS h50,
    ANY_VALUE((
      CAST((
        (
          total
        ) - 1
      ) AS DOUBLE) * (
        0.99
      )
    ), TRUE) AS h99,
    MIN(x) FILTER(WHERE
      (
        (
          below
        ) + (
          n
        ) > FLOOR(
          (
            CAST((
              (
                (
                  total
                )
              ) - 1
            ) AS DOUBLE) * (
              (
                0.5
              )
            )
          )
        ) + (
          0
        )
      )) AS lo50,
    MIN(x) FILTER(WHERE
      (
        (
          below
        ) + (
          n
        ) > FLOOR(
          (
            CAST((
              (
                (
                  total
                )
              ) - 1
            ) AS DOUBLE) * (
              (
                0.5
              )
            )
          )
        ) + (
          1
        )
      )) AS hi50,
    MIN(x) FILTER(WHERE
      (
        (
          below
        ) + (
          n
        ) > FLOOR(
          (
            CAST((
              (
                (
                  total
                )
              ) - 1
            ) AS DOUBLE) * (
              (
                0.99
              )
            )
          )
        ) + (
          0
        )
      )) AS lo99,
    MIN(x) FILTER(WHERE
      (
        (
          below
        ) + (
          n
        ) > FLOOR(
          (
            CAST((
              (
                (
                  total
                )
              ) - 1
            ) AS DOUBLE) * (
              (
                0.99
              )
            )
          )
        ) + (
          1
        )
      )) AS hi99
  FROM c
  GROUP BY
    host,
    flow_id
)
SELECT
  host,
  flow_id,
  samples,
  (
    (
      lo50
    ) + (
      (
        h50
      ) - FLOOR((
        h50
      ))
    ) * (
      CAST(COALESCE((
        hi50
      ), (
        lo50
      )) AS DOUBLE) - (
        lo50
      )
    )
  ) AS srtt_p50_us,
  (
    (
      lo99
    ) + (
      (
        h99
      ) - FLOOR((
        h99
      ))
    ) * (
      CAST(COALESCE((
        hi99
      ), (
        lo99
      )) AS DOUBLE) - (
        lo99
      )
    )
  ) AS srtt_p99_us,
  srtt_max_us,
  first_us,
  last_us
FROM k;

/* RTT per flow and window: latency percentiles, how many RTT measurements, bytes moved. */
/* From the kernel's windows over the span where a flow has them of the analysis window's */
/* length or one that divides it (`record --flow-window` and `analyze --window` are both 1 s by */
/* default): every RTT update counted, percentiles from its histogram (within 12.5 %; shorter */
/* windows' histograms added up), exact bytes, and the flow's minimum RTT from `flows` (else its */
/* smallest smoothed RTT). From the raw samples elsewhere (a recording older than the windows, */
/* `--flow-window 0s` or a length that does not divide `--window`, the part of a flow recorded */
/* before or after its windows; an analysis window its shorter windows cover only in part is */
/* read from those alone): that path holds every sample of a window in memory */
/* for its percentiles, and 246 M samples (64 nodes' 10 minutes at 64 flows each, */
/* bench/fleet.py) ran out of 8 GB there. */
CREATE OR REPLACE TEMPORARY VIEW st_rtt_window AS
WITH s AS (
  SELECT
    rtt.host AS host,
    rtt.flow_id AS flow_id,
    (
      (
        rtt.ts
      ) DIV 1000
    ) DIV p.window_us AS w,
    rtt.srtt_us AS srtt_us,
    rtt.min_rtt_us AS min_rtt_us,
    rtt.bytes_acked + rtt.bytes_received AS bytes
  FROM rtt AS rtt, st_params AS p
), outside /* the flows with samples outside their windows' span, or no windows: the only samples read */ /* here are theirs. Joined with every sample instead, this view took 11 of 58 s on 64 nodes' */ /* 10 minutes (bench/fleet.py) to keep none; a join with no flows reads no samples. */ AS (
  SELECT
    f.host AS host,
    f.flow_id AS flow_id,
    k.first_w AS first_w,
    k.last_w AS last_w
  FROM st_flow_raw_rtt AS f
  LEFT JOIN st_windowed_flow AS k
    ON f.host = k.host AND f.flow_id = k.flow_id, st_params AS p
  WHERE
    k.flow_id IS NULL
    OR f.first_us DIV p.window_us < k.first_w
    OR f.last_us DIV p.window_us > k.last_w
), r AS (
  SELECT
    s.host AS host,
    s.flow_id AS flow_id,
    s.w AS w,
    s.srtt_us AS srtt_us,
    s.min_rtt_us AS min_rtt_us,
    s.bytes AS bytes,
    COALESCE(s.w > k.last_w, FALSE) AS after_windows /* after the flow's windows: its bytes count from its first sample there, not across them */
  FROM s AS s
  JOIN outside AS k
    ON k.host = s.host AND k.flow_id = s.flow_id
  WHERE
    k.first_w IS NULL OR NOT s.w BETWEEN k.first_w AND k.last_w
), g AS (
  SELECT
    r.host AS host,
    r.flow_id AS flow_id,
    r.after_windows AS after_windows,
    r.w AS w,
    COUNT(*) AS samples,
    PERCENTILE(r.srtt_us, 0.5) AS srtt_p50_us,
    PERCENTILE(r.srtt_us, 0.99) AS srtt_p99_us,
    MAX(r.srtt_us) AS srtt_max_us,
    MIN(NULLIF(r.min_rtt_us, 0)) AS min_rtt_us,
    MAX(r.bytes) AS bytes_max,
    MIN(r.bytes) AS bytes_min
  FROM r AS r
  GROUP BY ALL
), kw AS (
  /* a window as long as the analysis window is read from its percentiles, not its histogram: */
  /* this CTE is computed once for its three readers, and carrying every window's 84 buckets */
  /* through it held 0.8 of 2.2 GB on 64 nodes' 10 minutes (bench/fleet.py) */
  SELECT
    fw.host AS host,
    fw.ts AS ts,
    fw.flow_id AS flow_id,
    fw.window_ns AS window_ns,
    fw.rtt_updates AS rtt_updates,
    fw.srtt_min_us AS srtt_min_us,
    fw.srtt_mean_us AS srtt_mean_us,
    fw.srtt_max_us AS srtt_max_us,
    fw.srtt_p50_us AS srtt_p50_us,
    fw.srtt_p90_us AS srtt_p90_us,
    fw.srtt_p99_us AS srtt_p99_us,
    CASE WHEN fw.window_ns <> p.window_us * 1000 THEN fw.rtt_buckets END AS rtt_buckets,
    fw.bytes_sent AS bytes_sent,
    fw.bytes_received AS bytes_received,
    fw.retrans_segments AS retrans_segments,
    fw.retransmit_events AS retransmit_events,
    fw.rto_count AS rto_count,
    fw.rto_recovery_ns AS rto_recovery_ns,
    fw.loss_recovery_ns AS loss_recovery_ns,
    (
      (
        fw.ts
      ) DIV 1000
    ) DIV p.window_us AS w,
    fw.window_ns = p.window_us * 1000 AS whole
  FROM flow_windows AS fw
  JOIN st_windowed_flow AS k
    ON k.host = fw.host AND k.flow_id = fw.flow_id AND k.window_ns = fw.window_ns, st_params AS p
), single AS (
  /* a window written twice (an agent restarted within it) is one, with both parts' counts */
  SELECT
    kw.host AS host,
    kw.flow_id AS flow_id,
    kw.w AS w,
    CAST(IF(
      TYPEOF(SUM(kw.rtt_updates)) IN ('double', 'float'),
      BROUND(SUM(kw.rtt_updates)),
      ROUND(SUM(kw.rtt_updates))
    ) AS BIGINT) AS samples,
    MAX_BY(kw.srtt_p50_us, kw.rtt_updates) AS srtt_p50_us,
    MAX_BY(kw.srtt_p99_us, kw.rtt_updates) AS srtt_p99_us,
    MAX(kw.srtt_max_us) AS srtt_max_us,
    CAST(IF(
      TYPEOF(SUM(kw.bytes_sent + kw.bytes_received)) IN ('double', 'float'),
      BROUND(SUM(kw.bytes_sent + kw.bytes_received)),
      ROUND(SUM(kw.bytes_sent + kw.bytes_received))
    ) AS BIGINT) AS bytes
  FROM kw AS kw
  WHERE
    kw.whole
  GROUP BY ALL
), parts /* kernel windows shorter than the analysis window: their histograms added up bucket by bucket, */ /* the percentiles read from the sum as the recorder reads one window's */ AS (
  SELECT
    kw.host AS host,
    kw.flow_id AS flow_id,
    kw.w AS w,
    CAST(IF(
      TYPEOF(SUM(kw.rtt_updates)) IN ('double', 'float'),
      BROUND(SUM(kw.rtt_updates)),
      ROUND(SUM(kw.rtt_updates))
    ) AS BIGINT) AS samples,
    MIN(kw.srtt_min_us) AS lo,
    MAX(kw.srtt_max_us) AS srtt_max_us,
    CAST(IF(
      TYPEOF(SUM(kw.bytes_sent + kw.bytes_received)) IN ('double', 'float'),
      BROUND(SUM(kw.bytes_sent + kw.bytes_received)),
      ROUND(SUM(kw.bytes_sent + kw.bytes_received))
    ) AS BIGINT) AS bytes
  FROM kw AS kw
  WHERE
    NOT kw.whole
  GROUP BY ALL
), bucket AS (
  SELECT
    _0.host AS host,
    _0.flow_id AS flow_id,
    _0.w AS w,
    _0.i AS i,
    SUM(_0.n) AS n
  FROM (
    SELECT
      kw.host AS host,
      kw.flow_id AS flow_id,
      kw.w AS w,
      POSEXPLODE(kw.rtt_buckets) AS (i, n)
    FROM kw AS kw
    WHERE
      NOT kw.whole AND kw.rtt_updates > 0
  ) AS _0
  WHERE
    _0.n > 0
  GROUP BY ALL
), pct /* the rank of a percentile counts the updates (as the recorder does): buckets that hold fewer */ /* (a torn read of a window being written) leave it to the maximum, as the open last bucket */ AS (
  SELECT
    c.host AS host,
    c.flow_id AS flow_id,
    c.w AS w,
    MIN(c.i) FILTER(WHERE
      c.below >= GREATEST(1, CEIL(0.5 * k.samples))) AS i50,
    MIN(c.i) FILTER(WHERE
      c.below >= GREATEST(1, CEIL(0.99 * k.samples))) AS i99
  FROM (
    SELECT
      bucket.host AS host,
      bucket.flow_id AS flow_id,
      bucket.w AS w,
      bucket.i AS i,
      bucket.n AS n,
      SUM(bucket.n) OVER (PARTITION BY bucket.host, bucket.flow_id, bucket.w ORDER BY bucket.i NULLS LAST) AS below
    FROM bucket AS bucket
  ) AS c
  JOIN parts AS k
    ON c.host = k.host AND c.flow_id = k.flow_id AND c.w = k.w
  GROUP BY ALL
), kernel AS (
  SELECT
    single.host AS host,
    single.flow_id AS flow_id,
    single.w AS w,
    single.samples AS samples,
    single.srtt_p50_us AS srtt_p50_us,
    single.srtt_p99_us AS srtt_p99_us,
    single.srtt_max_us AS srtt_max_us,
    single.bytes AS bytes
  FROM single AS single
  UNION ALL
  SELECT
    k.host AS host,
    k.flow_id AS flow_id,
    k.w AS w,
    k.samples AS samples,
    (
      CASE
        WHEN (
          CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
        ) IS NULL
        THEN NULL
        WHEN (
          CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
        ) >= 83
        THEN CAST((
          k.srtt_max_us
        ) AS DOUBLE)
        ELSE LEAST(
          GREATEST(
            CASE
              WHEN (
                CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
              ) < 4
              THEN CAST((
                CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
              ) AS DOUBLE)
              ELSE (
                (
                  CASE
                    WHEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                      )
                    ) < 4
                    THEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                      )
                    )
                    ELSE (
                      4 + (
                        (
                          CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                        )
                      ) % 4
                    ) * (
                      SHIFTLEFT(
                        CAST(1 AS BIGINT),
                        (
                          (
                            (
                              CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                            )
                          ) DIV 4 - 1
                        )
                      )
                    )
                  END
                ) + (
                  CASE
                    WHEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                      ) + 1
                    ) < 4
                    THEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                      ) + 1
                    )
                    ELSE (
                      4 + (
                        (
                          CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                        ) + 1
                      ) % 4
                    ) * (
                      SHIFTLEFT(
                        CAST(1 AS BIGINT),
                        (
                          (
                            (
                              CASE WHEN k.samples > 0 THEN COALESCE(c.i50, 83) END
                            ) + 1
                          ) DIV 4 - 1
                        )
                      )
                    )
                  END
                )
              ) / 2.0
            END,
            (
              k.lo
            )
          ),
          (
            k.srtt_max_us
          )
        )
      END
    ) AS srtt_p50_us,
    (
      CASE
        WHEN (
          CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
        ) IS NULL
        THEN NULL
        WHEN (
          CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
        ) >= 83
        THEN CAST((
          k.srtt_max_us
        ) AS DOUBLE)
        ELSE LEAST(
          GREATEST(
            CASE
              WHEN (
                CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
              ) < 4
              THEN CAST((
                CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
              ) AS DOUBLE)
              ELSE (
                (
                  CASE
                    WHEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                      )
                    ) < 4
                    THEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                      )
                    )
                    ELSE (
                      4 + (
                        (
                          CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                        )
                      ) % 4
                    ) * (
                      SHIFTLEFT(
                        CAST(1 AS BIGINT),
                        (
                          (
                            (
                              CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                            )
                          ) DIV 4 - 1
                        )
                      )
                    )
                  END
                ) + (
                  CASE
                    WHEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                      ) + 1
                    ) < 4
                    THEN (
                      (
                        CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                      ) + 1
                    )
                    ELSE (
                      4 + (
                        (
                          CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                        ) + 1
                      ) % 4
                    ) * (
                      SHIFTLEFT(
                        CAST(1 AS BIGINT),
                        (
                          (
                            (
                              CASE WHEN k.samples > 0 THEN COALESCE(c.i99, 83) END
                            ) + 1
                          ) DIV 4 - 1
                        )
                      )
                    )
                  END
                )
              ) / 2.0
            END,
            (
              k.lo
            )
          ),
          (
            k.srtt_max_us
          )
        )
      END
    ) AS srtt_p99_us,
    k.srtt_max_us AS srtt_max_us,
    k.bytes AS bytes
  FROM parts AS k
  LEFT JOIN pct AS c
    ON k.host = c.host AND k.flow_id = c.flow_id AND k.w = c.w
)
SELECT
  g.host AS host,
  g.flow_id AS flow_id,
  g.w AS w,
  g.samples AS samples,
  g.srtt_p50_us AS srtt_p50_us,
  g.srtt_p99_us AS srtt_p99_us,
  g.srtt_max_us AS srtt_max_us,
  g.min_rtt_us AS min_rtt_us,
  g.bytes_max /* bytes since the previous window that had a sample (or since the first sample) */ - COALESCE(
    LAG(g.bytes_max) OVER (PARTITION BY g.host, g.flow_id, g.after_windows ORDER BY g.w NULLS LAST),
    g.bytes_min
  ) AS bytes
FROM g AS g
UNION ALL
SELECT
  k.host AS host,
  k.flow_id AS flow_id,
  k.w AS w,
  k.samples AS samples,
  k.srtt_p50_us AS srtt_p50_us,
  k.srtt_p99_us AS srtt_p99_us,
  k.srtt_max_us AS srtt_max_us,
  COALESCE(f.min_rtt_us, s.srtt_min_us) AS min_rtt_us,
  k.bytes AS bytes
FROM kernel AS k
JOIN st_windowed_flow AS s
  ON k.host = s.host AND k.flow_id = s.flow_id
LEFT JOIN (
  SELECT
    flows.host AS host,
    flows.flow_id AS flow_id,
    MIN(NULLIF(flows.min_rtt_us, 0)) AS min_rtt_us
  FROM flows AS flows
  GROUP BY ALL
) AS f
  ON COALESCE(k.host, s.host) = f.host AND COALESCE(k.flow_id, s.flow_id) = f.flow_id;

/* Each flow's own baseline: its path's minimum RTT, its median throughput and how many RTT */
/* samples it has in a window as a rule. */
CREATE OR REPLACE TEMPORARY VIEW st_flow_baseline AS
SELECT
  host,
  flow_id,
  COALESCE(MIN(min_rtt_us), MIN(srtt_p50_us)) AS base_rtt_us,
  MEDIAN(bytes * 8e6 / p.window_us) /* over the windows with an RTT measurement, as the raw samples give them: a kernel */ /* window opened by a retransmit has none */ FILTER(WHERE
    samples > 0) AS median_bps,
  MEDIAN(samples) FILTER(WHERE
    samples > 0) AS median_window_samples,
  COUNT(*) AS windows
FROM st_rtt_window, st_params AS p
GROUP BY ALL;

/* The fleet's usual queueing: the first quartile, over the flows that carry data, of each */
/* flow's median RTT above its own base RTT. On a loaded host every flow's RTT rises with CPU */
/* scheduling; only a path well above what the other paths see is queueing worth a finding. */
/* A quartile, not the median: in a full mesh one slow node's links are half the flows of four */
/* nodes and two thirds of three, and a median of them made its own queueing the usual. */
/* Over the flows that send data, as the latency findings judged against it: a socket measures */
/* RTT on its own segments, and a receiving end's few ACK-paced sends are no path's usual. */
CREATE OR REPLACE TEMPORARY VIEW st_fleet_queueing AS
WITH l AS (
  SELECT
    host,
    flow_id,
    srtt_p50_us AS p50
  FROM st_flow_raw_rtt
)
SELECT
  COALESCE(PERCENTILE(l.p50 - b.base_rtt_us, 0.25), 0) AS queueing_us,
  GREATEST(
    p.min_queueing_us,
    p.queueing_vs_fleet * COALESCE(PERCENTILE(l.p50 - b.base_rtt_us, 0.25), 0)
  ) AS threshold_us
FROM l
JOIN st_flow_baseline AS b
  USING (host, flow_id)
JOIN flows AS f
  USING (host, flow_id), st_params AS p
WHERE
  COALESCE(f.bytes_sent, 0) >= p.min_flow_bytes
GROUP BY
  p.min_queueing_us,
  p.queueing_vs_fleet;

/* Retransmitted segments per flow and window. */
/* The node each flow belongs to: its recorder's host, or, for a socket in another network */
/* namespace than the recorder's (one recorder in the root namespace of a machine whose pods or */
/* containers each have their own), `host/namespace`: every namespace is a node of its own. */
CREATE OR REPLACE TEMPORARY VIEW st_flow_node AS
SELECT
  host,
  flow_id,
  ANY_VALUE(local_addr, TRUE) AS local_addr,
  ANY_VALUE(CASE WHEN COALESCE(netns, '') = '' THEN host ELSE host || '/' || netns END, TRUE) AS node
FROM flows
GROUP BY
  host,
  flow_id;

/* The node at the other end of a flow of `own_node`: the one whose flows use `remote` as their */
/* local address in the same capture, else the address itself. */
CREATE OR REPLACE TEMPORARY VIEW st_addr_owner AS
SELECT DISTINCT
  node,
  local_addr AS addr
FROM st_flow_node;

CREATE OR REPLACE TEMPORARY VIEW st_retrans_window AS
SELECT
  host,
  flow_id,
  (
    (
      ts
    ) DIV 1000
  ) DIV p.window_us AS w,
  COUNT(*) AS retransmits
FROM retransmits, st_params AS p
WHERE
  NOT flow_id IS NULL AND kind = 'retransmit'
GROUP BY ALL;

/* Per flow and window: latency, throughput and retransmits against the flow's baseline. */
CREATE OR REPLACE TEMPORARY VIEW st_flow_window AS
SELECT
  COALESCE(r.host, x.host) AS host,
  COALESCE(r.flow_id, x.flow_id) AS flow_id,
  COALESCE(r.w, x.w) AS w,
  TIMESTAMP_MICROS(
    CAST(IF(
      TYPEOF((
        COALESCE(r.w, x.w) * p.window_us / 1e6
      ) * 1000000) IN ('double', 'float'),
      BROUND((
        COALESCE(r.w, x.w) * p.window_us / 1e6
      ) * 1000000),
      ROUND((
        COALESCE(r.w, x.w) * p.window_us / 1e6
      ) * 1000000)
    ) AS BIGINT)
  ) AS window_start,
  r.samples,
  r.srtt_p50_us,
  r.srtt_p99_us,
  r.srtt_max_us,
  r.bytes * 8e6 / p.window_us AS throughput_bps,
  COALESCE(x.retransmits, 0) AS retransmits,
  b.base_rtt_us,
  b.median_bps,
  r.srtt_p50_us / NULLIF(b.base_rtt_us, 0) AS rtt_inflation,
  r.bytes * 8e6 / p.window_us / NULLIF(b.median_bps, 0) AS throughput_ratio,
  d.rtt_degraded,
  d.rtt_degraded OR d.throughput_collapsed AS degraded
FROM st_rtt_window AS r
FULL JOIN st_retrans_window AS x
  ON x.host = r.host AND x.flow_id = r.flow_id AND x.w = r.w
LEFT JOIN st_flow_baseline AS b
  ON b.host = COALESCE(r.host, x.host) AND b.flow_id = COALESCE(r.flow_id, x.flow_id)
CROSS JOIN st_params AS p
LEFT JOIN st_fleet_queueing AS q
  ON TRUE
CROSS JOIN LATERAL (
  SELECT
    COALESCE(
      r.srtt_p50_us / NULLIF(b.base_rtt_us, 0) >= p.degraded_rtt_inflation
      AND r.srtt_p50_us - b.base_rtt_us >= COALESCE(q.threshold_us, p.min_queueing_us)
      AND r.samples >= p.min_window_activity * b.median_window_samples,
      FALSE
    ) AS rtt_degraded, /* judged on RTT only in a window where the flow was about as busy as usual: the few */ /* ACKs of a job starting up or exiting (its processes, the profiler writing its traces, */ /* holding the CPUs) inflate the smoothed RTT of every flow by milliseconds at once */
    COALESCE(
      b.median_bps >= p.min_flow_bps
      AND r.bytes * 8e6 / p.window_us / NULLIF(b.median_bps, 0) < p.collapse_throughput_ratio,
      FALSE
    ) AS throughput_collapsed
) AS d;

/* ---------------------------------------------------------------------------------------- */
/* 1. Retransmit and loss hot spots */
/* ---------------------------------------------------------------------------------------- */
/* Per flow: how many, how often, how bursty, and whether throughput collapsed with them. */
CREATE OR REPLACE TEMPORARY VIEW st_retrans_flow AS
WITH w AS (
  SELECT
    host,
    flow_id,
    COUNT(*) AS windows,
    COUNT(*) FILTER(WHERE
      retransmits > 0) AS windows_with_retrans,
    MAX(retransmits) AS max_in_window,
    COUNT(*) FILTER(WHERE
      retransmits > 0 AND throughput_ratio < p.collapse_throughput_ratio) AS collapse_windows,
    SUM(retransmits) AS retrans_events
  FROM st_flow_window, st_params AS p
  GROUP BY
    host,
    flow_id
)
SELECT
  f.host,
  f.flow_id,
  f.flow_label,
  f.local_iface,
  f.remote_addr,
  GREATEST(COALESCE(f.total_retrans, 0), COALESCE(w.retrans_events, 0)) AS retransmits,
  f.data_segs_out,
  GREATEST(COALESCE(f.total_retrans, 0), COALESCE(w.retrans_events, 0)) / NULLIF(f.data_segs_out, 0) AS retrans_ratio,
  GREATEST(COALESCE(f.total_retrans, 0), COALESCE(w.retrans_events, 0)) / NULLIF(f.duration_ns / 1e9, 0) AS retrans_per_s,
  f.dsack_dups,
  f.rto_count,
  f.rto_recovery_ns / 1e9 AS rto_recovery_s,
  f.loss_recovery_ns / 1e9 AS loss_recovery_s,
  w.windows,
  w.windows_with_retrans,
  w.max_in_window,
  w.max_in_window /* peak window against the flow's average window: 1 = evenly spread, large = one burst */ / NULLIF(w.retrans_events / w.windows, 0) AS burstiness,
  w.collapse_windows
FROM st_flow AS f
LEFT JOIN w
  USING (host, flow_id);

CREATE OR REPLACE TEMPORARY VIEW st_retrans_peer AS
SELECT
  remote_addr,
  COUNT(*) AS flows,
  COUNT(DISTINCT host) FILTER(WHERE
    retransmits > 0) AS hosts,
  COUNT(*) FILTER(WHERE
    retransmits > 0) AS flows_with_retrans,
  SUM(retransmits) AS retransmits,
  SUM(data_segs_out) AS data_segs_out,
  SUM(retransmits) / NULLIF(SUM(data_segs_out), 0) AS retrans_ratio,
  MAX(burstiness) AS burstiness,
  SUM(collapse_windows) AS collapse_windows,
  SUM(COALESCE(dsack_dups, 0)) AS dsack_dups
FROM st_retrans_flow
GROUP BY
  remote_addr;

CREATE OR REPLACE TEMPORARY VIEW st_retrans_interface AS
SELECT
  host,
  local_iface,
  COUNT(*) AS flows,
  COUNT(*) FILTER(WHERE
    retransmits > 0) AS flows_with_retrans,
  SUM(retransmits) AS retransmits,
  SUM(data_segs_out) AS data_segs_out,
  SUM(retransmits) / NULLIF(SUM(data_segs_out), 0) AS retrans_ratio,
  MAX(burstiness) AS burstiness,
  SUM(collapse_windows) AS collapse_windows,
  SUM(COALESCE(dsack_dups, 0)) AS dsack_dups,
  CASE
    WHEN SIZE(ARRAY_SORT(COLLECT_SET(remote_node) FILTER(WHERE
      retransmits > 0))) = 0
    THEN NULL
    ELSE ARRAY_JOIN(ARRAY_SORT(COLLECT_SET(remote_node) FILTER(WHERE
      retransmits > 0)), ', ')
  END AS toward
FROM (
  SELECT
    *,
    (
      COALESCE(
        (
          SELECT
            MIN(o.node)
          FROM st_addr_owner AS o
          WHERE
            o.addr = (
              remote_addr
            ) AND o.node <> (
              host
            )
        ),
        (
          remote_addr
        )
      )
    ) AS remote_node
  FROM st_retrans_flow
)
GROUP BY
  host,
  local_iface;

/* Windows in which a host retransmitted far more than in its usual window. */
CREATE OR REPLACE TEMPORARY VIEW st_loss_burst AS
WITH h AS (
  SELECT
    host,
    w,
    ANY_VALUE(window_start, TRUE) AS window_start,
    SUM(retransmits) AS retransmits,
    CASE
      WHEN SIZE(ARRAY_SORT(COLLECT_SET(f.remote_addr) FILTER(WHERE
        retransmits > 0))) = 0
      THEN NULL
      ELSE ARRAY_JOIN(ARRAY_SORT(COLLECT_SET(f.remote_addr) FILTER(WHERE
        retransmits > 0)), ', ')
    END AS peers
  FROM st_flow_window
  JOIN st_flow AS f
    USING (host, flow_id)
  GROUP BY
    host,
    w
), s AS (
  SELECT
    *,
    (
      SUM(retransmits) OVER (PARTITION BY host) - retransmits
    ) / NULLIF(COUNT(*) OVER (PARTITION BY host) - 1, 0) AS others_mean
  FROM h
)
SELECT
  host,
  w,
  window_start,
  retransmits,
  peers,
  others_mean,
  retransmits / (
    COALESCE(others_mean, 0) + 1
  ) AS peak_ratio
FROM s, st_params AS p
WHERE
  retransmits >= p.burst_min_retransmits;

/* ---------------------------------------------------------------------------------------- */
/* 1b. RDMA retransmit hot spots */
/* ---------------------------------------------------------------------------------------- */
/* An RDMA NIC retransmits in hardware, out of the kernel's sight: its only traces are the */
/* device's own counters (`nic_counters`). RC transport recovers loss by go-back-N: the responder */
/* sees a gap and NAKs, the requester counts the NAK (or its ack timeout) and resends, the */
/* responder counts the duplicates. These are those counters under each driver's names */
/* (rxe: drivers/infiniband/sw/rxe/rxe_hw_counters.c; mlx5: its hw_counters documentation; */
/* bnxt_re: hw_counters.c), and the per-port packet counters they are judged against. */
/* `loss` counters see a gap: a packet that never arrived. `retry` counters see a resend, which a */
/* late ACK causes as well as a loss: on a clean veth, soft-RoCE under emulation counted 1207 */
/* duplicate requests (0.6 % of packets, from ack timeouts of a slow responder) and 10 gaps. So */
/* a device is a hot spot by its gaps; its retries are reported beside them. */
CREATE OR REPLACE TEMPORARY VIEW st_rdma_counter_kind AS
SELECT
  *
FROM VALUES
  ('out_of_seq_request', 'loss'), /* rxe responder: a request after a gap */
  ('out_of_sequence', 'loss'), /* mlx5 responder: the same */
  ('rcvd_seq_err', 'loss'), /* rxe requester: a sequence-error NAK, a gap in responses */
  ('packet_seq_err', 'loss'), /* mlx5 requester: a sequence-error NAK */
  ('implied_nak_seq_err', 'loss'), /* mlx5 requester: a response implied one */
  ('seq_err_naks_rcvd', 'loss'), /* bnxt_re: sequence-error NAKs */
  ('duplicate_request', 'retry'), /* rxe, mlx5 responder: a request it already had */
  ('completer_retry_err', 'retry'), /* rxe requester: went back to resend */
  ('local_ack_timeout_err', 'retry'), /* mlx5 requester: no ACK in time, resent */
  ('roce_adp_retrans', 'retry'), /* mlx5 adaptive retransmission */
  ('to_retransmits', 'retry'), /* bnxt_re: timeout retransmits */
  ('sent_pkts', 'packets'),
  ('rcvd_pkts', 'packets'), /* rxe */
  ('port_xmit_packets', 'packets'),
  ('port_rcv_packets', 'packets'), /* IB port counters */
  ('tx_pkts', 'packets'),
  ('rx_pkts', 'packets') /* bnxt_re */ AS t(counter, kind);

/* Per RDMA device port over the recording (the sum of a counter's deltas is its growth while */
/* recording; the first reading has none). */
CREATE OR REPLACE TEMPORARY VIEW st_rdma_device AS
WITH c AS (
  SELECT
    n.host,
    n.device,
    n.port,
    n.source,
    n.counter,
    k.kind,
    CAST(IF(
      TYPEOF(SUM(n.delta)) IN ('double', 'float'),
      BROUND(SUM(n.delta)),
      ROUND(SUM(n.delta))
    ) AS BIGINT) AS growth
  FROM nic_counters AS n
  JOIN st_rdma_counter_kind AS k
    USING (counter)
  WHERE
    n.source IN ('ib', 'ib_hw')
  GROUP BY ALL
), p /* a device may show its packets in two places (port counters and hw counters): the larger */ AS (
  SELECT
    host,
    device,
    port,
    MAX(packets) AS packets
  FROM (
    SELECT
      host,
      device,
      port,
      source,
      SUM(growth) AS packets
    FROM c
    WHERE
      kind = 'packets'
    GROUP BY ALL
  )
  GROUP BY ALL
), l AS (
  SELECT
    host,
    device,
    port,
    COALESCE(SUM(growth) FILTER(WHERE
      kind = 'loss'), 0) AS loss_events,
    COALESCE(SUM(growth) FILTER(WHERE
      kind = 'retry'), 0) AS retry_events,
    CASE
      WHEN SIZE(
        TRANSFORM(
          ARRAY_SORT(
            COLLECT_LIST(
              STRUCT(
                -(
                  growth
                ) AS k0,
                (
                  counter
                ) AS k1,
                IF(counter IS NULL OR growth IS NULL, NULL, FORMAT_STRING('%s %d', counter, growth)) AS v
              )
            ) FILTER(WHERE
              growth > 0)
          ),
          s -> s.v
        )
      ) = 0
      THEN NULL
      ELSE ARRAY_JOIN(
        TRANSFORM(
          ARRAY_SORT(
            COLLECT_LIST(
              STRUCT(
                -(
                  growth
                ) AS k0,
                (
                  counter
                ) AS k1,
                IF(counter IS NULL OR growth IS NULL, NULL, FORMAT_STRING('%s %d', counter, growth)) AS v
              )
            ) FILTER(WHERE
              growth > 0)
          ),
          s -> s.v
        ),
        ', '
      )
    END AS loss_counters
  FROM c
  WHERE
    kind IN ('loss', 'retry')
  GROUP BY ALL
), q /* the QPs that carried packets on the device (RDMA netlink), busiest first */ AS (
  SELECT
    host,
    device,
    ANY_VALUE(netdev, TRUE) FILTER(WHERE
      NOT netdev IS NULL) AS netdev,
    CASE
      WHEN SIZE(
        TRANSFORM(
          ARRAY_SORT(
            COLLECT_LIST(
              STRUCT(
                -(
                  packets
                ) AS k0,
                (
                  qp_num
                ) AS k1,
                IF(
                  qp_num IS NULL
                  OR COALESCE(comm, 'pid ' || pid, '?') IS NULL
                  OR CASE
                    WHEN dest_qp_num IS NULL
                    THEN ''
                    ELSE IF(dest_qp_num IS NULL, NULL, FORMAT_STRING(' -> QP %d', dest_qp_num))
                  END IS NULL
                  OR packets IS NULL,
                  NULL,
                  FORMAT_STRING(
                    'QP %d (%s%s) %d packets',
                    qp_num,
                    COALESCE(comm, 'pid ' || pid, '?'),
                    CASE
                      WHEN dest_qp_num IS NULL
                      THEN ''
                      ELSE IF(dest_qp_num IS NULL, NULL, FORMAT_STRING(' -> QP %d', dest_qp_num))
                    END,
                    packets
                  )
                ) AS v
              )
            ) FILTER(WHERE
              packets > 0 AND qp_rank <= 3)
          ),
          s -> s.v
        )
      ) = 0
      THEN NULL
      ELSE ARRAY_JOIN(
        TRANSFORM(
          ARRAY_SORT(
            COLLECT_LIST(
              STRUCT(
                -(
                  packets
                ) AS k0,
                (
                  qp_num
                ) AS k1,
                IF(
                  qp_num IS NULL
                  OR COALESCE(comm, 'pid ' || pid, '?') IS NULL
                  OR CASE
                    WHEN dest_qp_num IS NULL
                    THEN ''
                    ELSE IF(dest_qp_num IS NULL, NULL, FORMAT_STRING(' -> QP %d', dest_qp_num))
                  END IS NULL
                  OR packets IS NULL,
                  NULL,
                  FORMAT_STRING(
                    'QP %d (%s%s) %d packets',
                    qp_num,
                    COALESCE(comm, 'pid ' || pid, '?'),
                    CASE
                      WHEN dest_qp_num IS NULL
                      THEN ''
                      ELSE IF(dest_qp_num IS NULL, NULL, FORMAT_STRING(' -> QP %d', dest_qp_num))
                    END,
                    packets
                  )
                ) AS v
              )
            ) FILTER(WHERE
              packets > 0 AND qp_rank <= 3)
          ),
          s -> s.v
        ),
        ', '
      )
    END AS busiest_qps,
    COUNT(*) FILTER(WHERE
      packets > 0) AS active_qps
  FROM (
    SELECT
      host,
      device,
      qp_num,
      ANY_VALUE(netdev, TRUE) AS netdev,
      ANY_VALUE(comm, TRUE) AS comm,
      ANY_VALUE(pid, TRUE) AS pid,
      MAX(dest_qp_num) AS dest_qp_num,
      CAST(IF(
        TYPEOF(COALESCE(SUM(delta), 0)) IN ('double', 'float'),
        BROUND(COALESCE(SUM(delta), 0)),
        ROUND(COALESCE(SUM(delta), 0))
      ) AS BIGINT) AS packets,
      ROW_NUMBER() OVER (
        PARTITION BY host, device
        ORDER BY COALESCE(SUM(delta), 0) DESC, qp_num NULLS LAST
      ) AS qp_rank
    FROM qp_counters
    WHERE
      source = 'psn'
    GROUP BY
      host,
      device,
      qp_num
  )
  GROUP BY
    host,
    device
)
SELECT
  l.host,
  l.device,
  l.port,
  q.netdev,
  l.loss_events,
  l.retry_events,
  l.loss_counters,
  p.packets,
  l.loss_events / NULLIF(p.packets, 0) AS loss_ratio,
  q.busiest_qps,
  COALESCE(q.active_qps, 0) AS active_qps
FROM l
LEFT JOIN p
  USING (host, device, port)
LEFT JOIN q
  USING (host, device);

/* ---------------------------------------------------------------------------------------- */
/* 2. Latency */
/* ---------------------------------------------------------------------------------------- */
/* Per flow over the whole capture, with the fleet's median p99 for comparison. */
/* Latency is judged on the data a flow sends (`flow_bytes` is its bytes sent): a socket measures */
/* RTT on its own segments, and one that mostly receives (the far side of a bulk transfer, a */
/* ring's receiving end) measures it on its few small sends, which wait on the peer's delayed */
/* ACKs and a busy CPU. A clean DDP run's receiving end had a p99 4x the fleet's from that alone. */
CREATE OR REPLACE TEMPORARY VIEW st_latency_flow AS
WITH l AS (
  SELECT
    *
    EXCEPT (first_us, last_us)
  FROM st_flow_raw_rtt
), j AS (
  SELECT
    f.flow_label,
    f.remote_addr,
    f.local_iface,
    l.*,
    b.base_rtt_us,
    COALESCE(f.bytes_sent, 0) AS flow_bytes,
    COALESCE(f.bytes_sent, 0) >= p.min_flow_bytes AS sends_data
  FROM l
  JOIN st_flow AS f
    USING (host, flow_id)
  LEFT JOIN st_flow_baseline AS b
    USING (host, flow_id), st_params AS p
)
SELECT
  j.*
  EXCEPT (sends_data),
  j.srtt_p50_us / NULLIF(j.base_rtt_us, 0) AS rtt_inflation,
  MEDIAN(j.srtt_p99_us) FILTER(WHERE
    j.sends_data) OVER () AS fleet_median_p99_us, /* the fleet's usual tail: over the flows that send data, as the flows judged against it */
  j.srtt_p99_us / NULLIF(MEDIAN(j.srtt_p99_us) FILTER(WHERE
    j.sends_data) OVER (), 0) AS p99_vs_fleet
FROM j;

/* ---------------------------------------------------------------------------------------- */
/* 3. Topology-induced contention: flows sharing a NIC or a peer that degrade together */
/* ---------------------------------------------------------------------------------------- */
CREATE OR REPLACE TEMPORARY VIEW st_group_window AS
WITH fw AS (
  /* the flows that send data, as the latency findings: a control connection's (TCPStore, the */
  /* mesh's barrier pairs) RTT is that of a few ACK-paced packets, no path's */
  SELECT
    w.*,
    f.remote_addr,
    f.local_iface
  FROM st_flow_window AS w
  JOIN st_flow AS f
    USING (host, flow_id), st_params AS p
  WHERE
    w.samples > 0 AND COALESCE(f.bytes_sent, 0) >= p.min_flow_bytes
), g AS (
  SELECT
    'peer' AS scope,
    remote_addr AS subject,
    *
  FROM fw
  UNION ALL
  SELECT
    'interface',
    host || '/' || local_iface,
    *
  FROM fw
), fleet /* every flow of the capture in the window: a busy CPU (or a job starting and stopping) */ /* inflates the RTT of all flows at once, which is no one NIC's or peer's contention */ AS (
  SELECT
    w,
    COUNT(*) AS flows,
    COUNT(*) FILTER(WHERE
      rtt_degraded) AS degraded_flows
  FROM fw
  GROUP BY
    w
), gw AS (
  SELECT
    scope,
    subject,
    w,
    ANY_VALUE(window_start, TRUE) AS window_start,
    COUNT(*) AS flows, /* by latency: bursty training traffic has windows of low throughput (a job starting, */ /* stopping, computing) on every flow at once, which is not contention */
    COUNT(*) FILTER(WHERE
      rtt_degraded) AS degraded_flows,
    AVG(rtt_inflation) FILTER(WHERE
      degraded) AS degraded_rtt_inflation,
    AVG(throughput_ratio) FILTER(WHERE
      degraded) AS degraded_throughput_ratio
  FROM g
  GROUP BY ALL
)
SELECT
  gw.*,
  fleet.flows - gw.flows AS other_flows,
  fleet.degraded_flows - gw.degraded_flows AS other_degraded_flows
FROM gw
JOIN fleet
  USING (w);

/* A window counts when most of a group's flows degraded together and, in the rest of the */
/* capture, at most half as large a share of flows did: contention is local to a NIC or a peer. */
CREATE OR REPLACE TEMPORARY VIEW st_contention AS
WITH t AS (
  SELECT
    *,
    degraded_flows >= 2
    AND degraded_flows >= flows * 0.5
    AND COALESCE(other_degraded_flows / NULLIF(other_flows, 0), 0) <= 0.5 * degraded_flows / flows AS together
  FROM st_group_window
)
SELECT
  scope,
  subject,
  MAX(flows) AS flows,
  COUNT(*) AS windows,
  COUNT(*) FILTER(WHERE
    together) AS together_windows,
  AVG(degraded_flows) FILTER(WHERE
    together) AS together_flows,
  AVG(degraded_rtt_inflation) FILTER(WHERE
    degraded_flows >= 2) AS rtt_inflation,
  AVG(degraded_throughput_ratio) FILTER(WHERE
    degraded_flows >= 2) AS throughput_ratio
FROM t
GROUP BY
  scope,
  subject;

/* ---------------------------------------------------------------------------------------- */
/* 4. Synchronization amplification: collectives across ranks */
/* ---------------------------------------------------------------------------------------- */
/* Every imported timeline event on the UTC axis (events of traces that lost their time base are */
/* left out: `time_aligned` is false for them), in µs; `st_event` holds those of the job. */
CREATE OR REPLACE TEMPORARY VIEW st_trace_event AS
SELECT
  host,
  rank,
  source,
  import_file,
  pid,
  category,
  name,
  on_gpu,
  collective,
  comm_source,
  process_group,
  seq,
  msg_bytes,
  group_size,
  ts AS start_ns,
  ts + GREATEST(dur_ns, 0) AS end_ns,
  ts DIV 1000 AS start_us,
  (
    ts + GREATEST(dur_ns, 0)
  ) DIV 1000 AS end_us
FROM gpu_events
WHERE
  COALESCE(time_aligned, TRUE);

CREATE OR REPLACE TEMPORARY VIEW st_rank_trace AS
WITH r AS (
  SELECT
    host,
    rank,
    BOOL_OR(on_gpu) AS has_gpu,
    COALESCE(
      MIN(
        (
          CASE (
              comm_source
            )
            WHEN 'nccl_kernel'
            THEN 1
            WHEN 'comm_kernel'
            THEN 2
            WHEN 'backend'
            THEN 3
            WHEN 'c10d'
            THEN 4
          END
        )
      ) FILTER(WHERE
        (
          NOT (
            collective
          ) IN ('Barrier', 'Send', 'Recv', 'SendRecv', 'Other')
        )),
      MIN(
        (
          CASE (
              comm_source
            )
            WHEN 'nccl_kernel'
            THEN 1
            WHEN 'comm_kernel'
            THEN 2
            WHEN 'backend'
            THEN 3
            WHEN 'c10d'
            THEN 4
          END
        )
      )
    ) AS layer_order
  FROM st_trace_event
  GROUP BY
    host,
    rank
)
SELECT
  e.host,
  e.rank,
  e.import_file,
  ANY_VALUE(e.source, TRUE) AS source,
  MIN(e.start_ns) AS first_ns,
  MAX(e.end_ns) AS last_ns,
  MIN(e.start_us) AS first_us,
  MAX(e.end_us) AS last_us,
  MODE(e.pid) /* the process that wrote it (CPU rows carry the process id, GPU rows the device) */ FILTER(WHERE
    NOT e.on_gpu) AS pid,
  ANY_VALUE(CASE WHEN r.has_gpu THEN 'gpu' ELSE 'cpu' END, TRUE) AS device,
  ANY_VALUE(
    CASE r.layer_order
      WHEN 1
      THEN 'nccl_kernel'
      WHEN 2
      THEN 'comm_kernel'
      WHEN 3
      THEN 'backend'
      WHEN 4
      THEN 'c10d'
    END,
    TRUE
  ) AS comm_layer,
  MAX(e.group_size) AS group_size /* the largest group this trace states (its world): per trace, since two traces of one */ /* rank may be of two jobs of different sizes */
FROM st_trace_event AS e
JOIN r
  ON r.host = e.host AND r.rank IS NOT DISTINCT FROM e.rank
GROUP BY
  e.host,
  e.rank,
  e.import_file;

/* Traces that can be one job: they share a moment in time (the moment most traced ranks */
/* cover), state the same group size, and come from the process that traced the rank at that */
/* moment. Anything else is refused, with the reason, instead of being matched into nonsense: */
/* two runs a day apart are not one job, nor are two runs of the same hosts and ranks read */
/* together (their sequence numbers repeat; matched, they made "steps" of 10 ranks out of 5). */
/* A rank's later traces from the same process are kept (a profiler schedule with `repeat` */
/* writes one trace per cycle). */
CREATE OR REPLACE TEMPORARY VIEW st_job_moment AS
SELECT
  a.first_us AS moment_us,
  COUNT(DISTINCT (b.host, b.rank)) AS ranks
FROM st_rank_trace AS a
JOIN st_rank_trace AS b
  ON b.first_us <= a.first_us AND b.last_us >= a.first_us
WHERE
  NOT a.rank IS NULL AND NOT b.rank IS NULL
GROUP BY
  a.first_us
ORDER BY
  ranks DESC,
  moment_us NULLS LAST
LIMIT 1;

CREATE OR REPLACE TEMPORARY VIEW st_rank_refused AS
WITH t AS (
  SELECT
    host,
    rank,
    source,
    import_file,
    pid,
    first_us <= m.moment_us AND last_us >= m.moment_us AS at_moment,
    group_size
  FROM st_rank_trace, st_job_moment AS m
  WHERE
    NOT rank IS NULL
), r AS (
  SELECT
    host,
    rank,
    BOOL_OR(at_moment) AS rank_at_moment,
    COLLECT_LIST(DISTINCT pid) FILTER(WHERE
      at_moment AND NOT pid IS NULL) AS job_pids
  FROM t
  GROUP BY
    host,
    rank
), g AS (
  SELECT
    MODE(group_size) AS group_size
  FROM t
  WHERE
    at_moment
)
SELECT
  t.host,
  t.rank,
  t.source,
  t.import_file,
  CASE
    WHEN NOT r.rank_at_moment
    THEN 'its trace does not overlap in time with the other ranks\' traces'
    WHEN NOT t.group_size IS NULL
    AND NOT g.group_size IS NULL
    AND t.group_size <> g.group_size
    THEN IF(
      t.group_size IS NULL OR g.group_size IS NULL,
      NULL,
      FORMAT_STRING('it states a group size of %d, the other ranks %d', t.group_size, g.group_size)
    )
    ELSE IF(
      REGEXP_EXTRACT(t.source, '[^/]*$', 0) IS NULL
      OR t.import_file IS NULL
      OR t.pid IS NULL
      OR ARRAY_JOIN(r.job_pids, ', ') IS NULL,
      NULL,
      FORMAT_STRING(
        '%s (imported as %s) comes from another process (pid %d) than its trace of the job (pid %s): another run',
        REGEXP_EXTRACT(t.source, '[^/]*$', 0),
        t.import_file,
        t.pid,
        ARRAY_JOIN(r.job_pids, ', ')
      )
    )
  END AS reason
FROM t
JOIN r
  USING (host, rank)
CROSS JOIN g
WHERE
  NOT r.rank_at_moment
  OR (
    NOT t.group_size IS NULL
    AND NOT g.group_size IS NULL
    AND t.group_size <> g.group_size
  )
  OR (
    NOT t.at_moment
    AND NOT t.pid IS NULL
    AND SIZE(COALESCE(r.job_pids, ARRAY())) > 0
    AND NOT ARRAY_CONTAINS(r.job_pids, t.pid)
  );

/* Timelines and a network capture read together but of different times (another day's trace */
/* beside today's capture): no network observation can be tied to a training step, and the */
/* categories that join them would only say "nothing found". One row when they do not overlap. */
CREATE OR REPLACE TEMPORARY VIEW st_timeline_network_apart AS
WITH t AS (
  SELECT
    MIN(ts) AS first,
    MAX(ts + (
      (
        dur_ns DIV 1000
      ) * 1000
    )) AS last
  FROM gpu_events
  WHERE
    COALESCE(time_aligned, TRUE)
), n AS (
  SELECT
    MIN(first) AS first,
    MAX(last) AS last
  FROM (
    SELECT
      MIN(start) AS first,
      MAX(COALESCE(`end`, start)) AS last
    FROM flows
    UNION ALL
    SELECT
      MIN(ts),
      MAX(ts)
    FROM rtt
    UNION ALL
    SELECT
      MIN(ts),
      MAX(
        ts + (
          (
            CAST(IF(
              TYPEOF((
                window_ns DIV 1000
              )) IN ('double', 'float'),
              BROUND((
                window_ns DIV 1000
              )),
              ROUND((
                window_ns DIV 1000
              ))
            ) AS BIGINT)
          ) * 1000
        )
      )
    FROM flow_windows
  )
)
SELECT
  t.first AS timeline_first,
  t.last AS timeline_last,
  n.first AS network_first,
  n.last AS network_last
FROM t, n
WHERE
  NOT t.first IS NULL
  AND NOT n.first IS NULL
  AND (
    t.last < n.first OR t.first > n.last
  );

/* The job's timeline events: every imported event but those of refused traces (a rank's */
/* steps, own time and lanes would otherwise mix two runs' ProfilerStep#N). */
CREATE OR REPLACE TEMPORARY VIEW st_event AS
SELECT
  e.*
FROM st_trace_event AS e
ANTI JOIN st_rank_refused AS r
  ON r.host = e.host AND r.rank = e.rank AND r.import_file = e.import_file;

/* ProfilerStep#N annotations: the training steps of each rank (N counts iterations from the */
/* start of the job, so step N of every rank is the same iteration). */
CREATE OR REPLACE TEMPORARY VIEW st_profiler_step AS
SELECT
  host,
  rank,
  TRY_CAST(IF(
    TYPEOF(REGEXP_EXTRACT(name, '#(\\d+)')) IN ('double', 'float'),
    BROUND(REGEXP_EXTRACT(name, '#(\\d+)')),
    ROUND(REGEXP_EXTRACT(name, '#(\\d+)'))
  ) AS BIGINT) AS step,
  MIN(start_ns) AS start_ns,
  MAX(end_ns) AS end_ns,
  MIN(start_us) AS start_us,
  MAX(end_us) AS end_us
FROM st_event
/* the CPU annotation; Kineto mirrors it on the GPU timeline as `gpu_user_annotation` */
WHERE
  name LIKE 'ProfilerStep#%'
  AND NOT on_gpu
  AND category <> 'gpu_user_annotation'
  AND NOT rank IS NULL
GROUP BY ALL;

/* One row per rank and collective operation, from the rank's communication layer, or, without */
/* timelines, from NCCL API calls (entry time only) joined to their rank via CommInitRank. The */
/* key that matches one operation across ranks: the process group and its sequence number when */
/* the trace has them (each group counts its own: a job with data- and tensor-parallel groups */
/* has a `seq 1` in each); else the ProfilerStep and the operation's order within it; else its */
/* order. */
CREATE OR REPLACE TEMPORARY VIEW st_collective_op AS
WITH k AS (
  SELECT
    e.comm_source AS source,
    e.host,
    e.rank,
    e.collective,
    e.process_group,
    e.seq,
    e.msg_bytes,
    e.group_size,
    e.start_us,
    e.end_us,
    (
      SELECT
        MAX(p.step)
      FROM st_profiler_step AS p
      WHERE
        p.host = e.host
        AND p.rank = e.rank
        AND p.start_us <= e.start_us
        AND p.end_us > e.start_us
    ) AS profiler_step
  FROM st_event AS e
  JOIN (
    SELECT DISTINCT
      host,
      rank,
      comm_layer
    FROM st_rank_trace
  ) AS t
    ON t.host = e.host AND t.rank = e.rank AND t.comm_layer = e.comm_source
  WHERE
    NOT e.rank IS NULL
    AND (
      NOT (
        e.collective
      ) IN ('Barrier', 'Send', 'Recv', 'SendRecv', 'Other')
    )
)
SELECT
  source,
  host,
  rank,
  collective,
  process_group,
  msg_bytes,
  group_size,
  start_us,
  end_us,
  profiler_step,
  COALESCE(
    'pg ' || COALESCE(process_group, '?') || ' seq ' || seq,
    COALESCE('pg ' || process_group || ' ', '') || 'step ' || profiler_step || ' #' || ROW_NUMBER() OVER (
      PARTITION BY host, rank, collective, process_group, profiler_step
      ORDER BY start_us NULLS LAST, end_us NULLS LAST
    ),
    COALESCE('pg ' || process_group || ' ', '') || '#' || ROW_NUMBER() OVER (
      PARTITION BY host, rank, collective, process_group
      ORDER BY start_us NULLS LAST, end_us NULLS LAST
    )
  ) AS match_key
FROM k
UNION ALL
SELECT
  'nccl_call',
  c.host,
  i.rank,
  c.op,
  NULL,
  NULL,
  NULL,
  (
    (
      c.ts
    ) DIV 1000
  ),
  NULL,
  NULL,
  '#' || ROW_NUMBER() OVER (PARTITION BY c.host, i.rank, c.op ORDER BY c.ts NULLS LAST)
FROM nccl_calls AS c
JOIN (
  SELECT
    host,
    pid,
    comm,
    ANY_VALUE(rank, TRUE) AS rank
  FROM nccl_calls
  WHERE
    op = 'CommInitRank' AND result = 'ncclSuccess'
  GROUP BY ALL
) AS i
  USING (host, pid, comm)
WHERE
  c.op IN ('AllReduce', 'AllGather', 'ReduceScatter', 'Broadcast', 'Reduce')
  AND NOT EXISTS(
    SELECT
      1
    FROM gpu_events
    WHERE
      NOT collective IS NULL
  );

/* One collective operation on every rank of its group is one step: every traced rank, or, for */
/* an operation of a smaller process group (its `group_size`), that many. A step is matched */
/* only when every such rank has it and, for timelines with end times, all of its ranks' */
/* operations overlap in time (an operation cannot finish before the last rank joins it); the */
/* others are in st_collective_refused. */
CREATE OR REPLACE TEMPORARY VIEW st_collective_candidate AS
WITH k AS (
  SELECT
    *,
    MIN(start_us) OVER (PARTITION BY source, collective, match_key) AS key_start_us
  FROM st_collective_op
), o AS (
  SELECT
    *
    EXCEPT (key_start_us),
    DENSE_RANK() OVER (
      PARTITION BY source, collective
      ORDER BY key_start_us NULLS LAST, match_key NULLS LAST
    ) AS step_id
  FROM k
)
SELECT
  *,
  COUNT(*) OVER (PARTITION BY source, collective, match_key) AS ranks,
  MAX(start_us) OVER (PARTITION BY source, collective, match_key) AS last_start_us,
  MIN(start_us) OVER (PARTITION BY source, collective, match_key) AS first_start_us,
  MIN(end_us) OVER (PARTITION BY source, collective, match_key) AS first_end_us,
  LEAST(
    (
      SELECT
        COUNT(DISTINCT (host, rank))
      FROM st_collective_op AS x
      WHERE
        x.source = o.source
    ),
    CAST(IF(
      TYPEOF(
        COALESCE(
          MAX(CASE WHEN group_size >= 2 THEN group_size END) OVER (PARTITION BY source, collective, match_key),
          1e9
        )
      ) IN ('double', 'float'),
      BROUND(
        COALESCE(
          MAX(CASE WHEN group_size >= 2 THEN group_size END) OVER (PARTITION BY source, collective, match_key),
          1e9
        )
      ),
      ROUND(
        COALESCE(
          MAX(CASE WHEN group_size >= 2 THEN group_size END) OVER (PARTITION BY source, collective, match_key),
          1e9
        )
      )
    ) AS BIGINT)
  ) AS expected_ranks /* a group size below 2 says nothing about a collective's ranks (real traces state 1 on */ /* calls without a process group) */
FROM o;

CREATE OR REPLACE TEMPORARY VIEW st_collective_refused AS
SELECT
  source,
  collective,
  COUNT(DISTINCT match_key) AS steps,
  COUNT(DISTINCT match_key) FILTER(WHERE
    ranks < expected_ranks) AS not_on_every_rank,
  COUNT(DISTINCT match_key) /* the same key twice on a rank: two runs whose sequence numbers repeat */ FILTER(WHERE
    ranks > expected_ranks) AS repeated,
  COUNT(DISTINCT match_key) FILTER(WHERE
    ranks = expected_ranks AND last_start_us > first_end_us) AS not_overlapping
FROM st_collective_candidate
WHERE
  ranks <> expected_ranks OR last_start_us > first_end_us
GROUP BY ALL;

CREATE OR REPLACE TEMPORARY VIEW st_collective_rank_step AS
SELECT
  source,
  collective,
  step_id AS step,
  match_key,
  process_group,
  profiler_step,
  host,
  rank,
  ranks,
  start_us,
  end_us,
  msg_bytes,
  last_start_us - start_us AS wait_us,
  end_us - start_us AS dur_us,
  end_us - last_start_us AS transfer_us,
  LEAST(1.0, GREATEST(0.0, (
    last_start_us - start_us
  ) / NULLIF(end_us - start_us, 0))) AS wait_fraction /* bounded: the wait is part of this rank's operation */
FROM st_collective_candidate
WHERE
  ranks = expected_ranks
  AND ranks >= 2
  AND NOT COALESCE(last_start_us > first_end_us, FALSE);

CREATE OR REPLACE TEMPORARY VIEW st_collective_step AS
SELECT
  source,
  collective,
  step,
  ANY_VALUE(match_key, TRUE) AS match_key,
  ANY_VALUE(process_group, TRUE) AS process_group,
  MODE(profiler_step) AS iteration, /* the training step (ProfilerStep#N) most of its ranks ran it in */
  ANY_VALUE(ranks, TRUE) AS ranks,
  TIMESTAMP_MICROS(
    CAST(IF(
      TYPEOF((
        MIN(start_us) / 1e6
      ) * 1000000) IN ('double', 'float'),
      BROUND((
        MIN(start_us) / 1e6
      ) * 1000000),
      ROUND((
        MIN(start_us) / 1e6
      ) * 1000000)
    ) AS BIGINT)
  ) AS first_start,
  MIN(start_us) AS first_start_us,
  MAX(end_us) AS last_end_us,
  MAX(start_us) - MIN(start_us) AS arrival_spread_us,
  MAX(end_us) - MIN(end_us) AS finish_spread_us,
  MAX(end_us) - MIN(start_us) AS step_us,
  MEDIAN(end_us - start_us) AS median_dur_us,
  MAX(end_us) - MAX(start_us) AS transfer_us,
  MAX_BY(rank, (start_us, rank)) AS last_rank, /* ties (one µs) broken by rank, so that the same data always names the same rank */
  MAX_BY(host, (start_us, rank)) AS last_host,
  MAX(wait_fraction) AS fastest_wait_fraction
FROM st_collective_rank_step
GROUP BY
  source,
  collective,
  step;

/* Bandwidth of each collective operation that states its message size (NCCL kernels and */
/* `record_param_comms` in PyTorch >= 2.1): algorithm bandwidth = bytes / duration, and bus */
/* bandwidth = algorithm bandwidth x the share of the data each rank sends over links, as */
/* nccl-tests define it (AllReduce 2(n-1)/n; AllGather, ReduceScatter (n-1)/n; others 1), so */
/* that ranks and collectives compare against the link speed. */
CREATE OR REPLACE TEMPORARY VIEW st_collective_bandwidth AS
SELECT
  host,
  rank,
  collective,
  comm_source,
  process_group,
  group_size,
  msg_bytes,
  start_us,
  (
    end_ns - start_ns
  ) / 1000.0 AS dur_us,
  msg_bytes * 8e9 / NULLIF(end_ns - start_ns, 0) AS algbw_bps,
  msg_bytes * 8e9 / NULLIF(end_ns - start_ns, 0) * CASE
    WHEN group_size IS NULL OR group_size < 2
    THEN 1.0
    WHEN collective = 'AllReduce'
    THEN 2.0 * (
      group_size - 1
    ) / group_size
    WHEN collective IN ('AllGather', 'ReduceScatter')
    THEN (
      group_size - 1.0
    ) / group_size
    ELSE 1.0
  END AS busbw_bps
FROM st_event
WHERE
  NOT msg_bytes IS NULL
  AND comm_source IN ('nccl_kernel', 'comm_kernel')
  AND end_ns > start_ns;

/* Ranks that arrive last, step after step. */
CREATE OR REPLACE TEMPORARY VIEW st_straggler AS
WITH s AS (
  SELECT
    source,
    collective,
    COUNT(*) AS steps,
    MEDIAN(arrival_spread_us) AS median_spread_us,
    MEDIAN(step_us) AS median_step_us,
    ANY_VALUE(ranks, TRUE) AS ranks
  FROM st_collective_step
  GROUP BY ALL
)
SELECT
  c.source,
  c.collective,
  c.last_rank AS rank,
  ANY_VALUE(c.last_host, TRUE) AS host,
  COUNT(*) AS steps_last,
  ANY_VALUE(s.steps, TRUE) AS steps,
  ANY_VALUE(s.ranks, TRUE) AS ranks,
  COUNT(*) / ANY_VALUE(s.steps, TRUE) AS share_last,
  MAX(COUNT(*)) OVER (PARTITION BY c.source, c.collective) AS most_steps_last, /* the most steps any rank of this collective arrived last in */
  MEDIAN(c.arrival_spread_us) AS median_lateness_us,
  AVG(c.fastest_wait_fraction) AS fastest_wait_fraction
FROM st_collective_step AS c
JOIN s
  USING (source, collective), st_params AS p
/* a step counts only when the last rank was meaningfully late */
WHERE
  c.arrival_spread_us >= GREATEST(p.min_spread_us, p.min_spread_fraction * s.median_step_us)
GROUP BY
  c.source,
  c.collective,
  c.last_rank;

CREATE OR REPLACE TEMPORARY VIEW st_sync_amplification AS
SELECT
  source,
  collective,
  COUNT(*) AS steps,
  ANY_VALUE(ranks, TRUE) AS ranks,
  MEDIAN(arrival_spread_us) AS median_arrival_spread_us,
  PERCENTILE(arrival_spread_us, 0.99) AS p99_arrival_spread_us,
  MEDIAN(finish_spread_us) AS median_finish_spread_us,
  MEDIAN(step_us) AS median_step_us,
  AVG(fastest_wait_fraction) AS fastest_wait_fraction
FROM st_collective_step
GROUP BY
  source,
  collective;

/* ---------------------------------------------------------------------------------------- */
/* 5. Locality: GPU and NIC on different NUMA nodes / PCIe roots, against collective time */
/* ---------------------------------------------------------------------------------------- */
CREATE OR REPLACE TEMPORARY VIEW st_rank_locality AS
WITH rg AS (
  SELECT DISTINCT
    host,
    rank,
    device
  FROM gpu_events
  WHERE
    on_gpu AND NOT rank IS NULL AND NOT device IS NULL
), d AS (
  SELECT
    host,
    `index`,
    ANY_VALUE(numa_node, TRUE) AS numa_node,
    ANY_VALUE(nearest_nic, TRUE) AS nearest_nic,
    ANY_VALUE(nic_numa_node, TRUE) AS nic_numa_node,
    ANY_VALUE(nic_locality, TRUE) AS nic_locality
  FROM gpu_devices
  GROUP BY ALL
), t AS (
  SELECT
    rank,
    MEDIAN(transfer_us) AS transfer_us,
    MEDIAN(dur_us) AS collective_us
  FROM st_collective_rank_step
  WHERE
    source IN ('nccl_kernel', 'comm_kernel')
  GROUP BY
    rank
)
SELECT
  rg.host,
  rg.rank,
  rg.device,
  d.numa_node,
  d.nearest_nic,
  d.nic_numa_node,
  d.nic_locality,
  COALESCE(d.nic_locality = 'SYS' OR d.numa_node <> d.nic_numa_node, FALSE) AS mismatched,
  t.transfer_us,
  t.collective_us
FROM rg
JOIN d
  ON d.host = rg.host AND d.`index` = rg.device
LEFT JOIN t
  USING (rank);

CREATE OR REPLACE TEMPORARY VIEW st_locality AS
SELECT
  l.*,
  l.transfer_us / NULLIF(
    (
      SELECT
        MEDIAN(transfer_us)
      FROM st_rank_locality
      WHERE
        NOT mismatched
    ),
    0
  ) AS transfer_vs_well_placed
FROM st_rank_locality AS l;

/* ---------------------------------------------------------------------------------------- */
/* 6. GPU idle explained: compute idle while collectives run, with the network at that time */
/* ---------------------------------------------------------------------------------------- */
/* Busy intervals per traced rank, in three lanes: `comm` (its collective operations, from its */
/* communication layer), `compute` (everything else its device ran: GPU kernels, memcpy and */
/* memset; for CPU-only traces the CPU operators, less waits and synchronizations), and `busy` */
/* (either). Each lane's intervals are merged, so time covered twice (nested operators, kernels */
/* on several streams) counts once. In ns: rounding each of thousands of kernels to µs would */
/* shift a step's busy time by hundreds of µs. */
CREATE OR REPLACE TEMPORARY VIEW st_lane_event AS
SELECT
  e.host,
  e.rank,
  'comm' AS lane,
  e.start_ns AS s,
  e.end_ns AS e
FROM st_event AS e
JOIN (
  SELECT DISTINCT
    host,
    rank,
    device,
    comm_layer
  FROM st_rank_trace
) AS t
  ON t.host = e.host AND t.rank IS NOT DISTINCT FROM e.rank
WHERE
  e.end_ns > e.start_ns
  AND CASE
    WHEN t.device = 'gpu'
    THEN e.on_gpu AND NOT e.comm_source IS NULL
    ELSE e.comm_source = t.comm_layer
  END
UNION ALL
SELECT
  e.host,
  e.rank,
  'compute',
  e.start_ns,
  e.end_ns
FROM st_event AS e
JOIN (
  SELECT DISTINCT
    host,
    rank,
    device
  FROM st_rank_trace
) AS t
  ON t.host = e.host AND t.rank IS NOT DISTINCT FROM e.rank
WHERE
  e.comm_source IS NULL
  AND e.end_ns > e.start_ns
  AND CASE
    WHEN t.device = 'gpu'
    THEN e.on_gpu
    ELSE e.category = 'cpu_op'
    AND e.name NOT ILIKE '%wait%'
    AND e.name NOT ILIKE '%synchronize%'
  END;

CREATE OR REPLACE TEMPORARY VIEW st_lane_interval AS
WITH x AS (
  SELECT
    *
  FROM st_lane_event
  UNION ALL
  SELECT
    host,
    rank,
    'busy',
    s,
    e
  FROM st_lane_event
), m AS (
  SELECT
    *,
    MAX(e) OVER (
      PARTITION BY host, rank, lane
      ORDER BY s NULLS LAST, e NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prev_end
  FROM x
), g AS (
  SELECT
    *,
    SUM(CASE WHEN prev_end >= s THEN 0 ELSE 1 END) OVER (
      PARTITION BY host, rank, lane
      ORDER BY s NULLS LAST, e NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS island
  FROM m
)
SELECT
  host,
  rank,
  lane,
  MIN(s) AS s,
  MAX(e) AS e
FROM g
GROUP BY
  host,
  rank,
  lane,
  island;

/* Per rank and training step (ProfilerStep#N): busy, compute, communication, their overlap, */
/* idle, and the communication not hidden behind compute (exposed), in µs. */
CREATE OR REPLACE TEMPORARY VIEW st_rank_step AS
WITH o AS (
  SELECT
    p.host,
    p.rank,
    p.step,
    p.start_ns,
    p.end_ns,
    i.lane,
    SUM(GREATEST(0, LEAST(i.e, p.end_ns) - GREATEST(i.s, p.start_ns))) / 1000.0 AS us
  FROM st_profiler_step AS p
  LEFT JOIN st_lane_interval AS i
    ON i.host = p.host AND i.rank = p.rank AND i.s < p.end_ns AND i.e > p.start_ns
  GROUP BY ALL
)
SELECT
  host,
  rank,
  step,
  TIMESTAMP_MICROS(
    CAST(IF(
      TYPEOF((
        ANY_VALUE(start_ns, TRUE) / 1e9
      ) * 1000000) IN ('double', 'float'),
      BROUND((
        ANY_VALUE(start_ns, TRUE) / 1e9
      ) * 1000000),
      ROUND((
        ANY_VALUE(start_ns, TRUE) / 1e9
      ) * 1000000)
    ) AS BIGINT)
  ) AS step_start,
  ANY_VALUE(end_ns - start_ns, TRUE) / 1000.0 AS step_us,
  COALESCE(SUM(us) FILTER(WHERE
    lane = 'busy'), 0) AS busy_us,
  COALESCE(SUM(us) FILTER(WHERE
    lane = 'compute'), 0) AS compute_us,
  COALESCE(SUM(us) FILTER(WHERE
    lane = 'comm'), 0) AS comm_us,
  compute_us + comm_us - busy_us AS overlap_us,
  step_us - busy_us AS idle_us,
  comm_us - overlap_us AS exposed_comm_us
FROM o
GROUP BY
  host,
  rank,
  step;

/* Per traced rank and window: the same shares, of the time the rank was traced in that window */
/* (not of the whole window). Windows outside every trace of the rank have no row, and no grid */
/* is filled across gaps between traces. */
CREATE OR REPLACE TEMPORARY VIEW st_rank_window AS
WITH p AS (
  SELECT
    window_us,
    window_us * 1000 AS wn
  FROM st_params
), w AS (
  SELECT DISTINCT
    host,
    rank,
    EXPLODE(
      IF(
        (
          (
            last_ns - 1
          ) DIV p.wn + 1 - 1
        ) < first_ns DIV p.wn,
        ARRAY(),
        SEQUENCE(first_ns DIV p.wn, (
          (
            last_ns - 1
          ) DIV p.wn + 1 - 1
        ))
      )
    ) AS w
  FROM st_rank_trace, p
  WHERE
    last_ns > first_ns
), tr AS (
  SELECT
    w.host,
    w.rank,
    w.w,
    ANY_VALUE(t.device, TRUE) AS device,
    LEAST(
      ANY_VALUE(p.wn, TRUE),
      SUM(LEAST(t.last_ns, (
        w.w + 1
      ) * p.wn) - GREATEST(t.first_ns, w.w * p.wn))
    ) AS traced_ns
  FROM w
  CROSS JOIN p
  JOIN st_rank_trace AS t
    ON t.host = w.host
    AND t.rank IS NOT DISTINCT FROM w.rank
    AND t.first_ns < (
      w.w + 1
    ) * p.wn
    AND t.last_ns > w.w * p.wn
  GROUP BY ALL
), o AS (
  SELECT
    tr.host,
    tr.rank,
    tr.w,
    i.lane,
    SUM(LEAST(i.e, (
      tr.w + 1
    ) * p.wn) - GREATEST(i.s, tr.w * p.wn)) AS ns
  FROM tr
  CROSS JOIN p
  JOIN st_lane_interval AS i
    ON i.host = tr.host
    AND i.rank IS NOT DISTINCT FROM tr.rank
    AND i.s < (
      tr.w + 1
    ) * p.wn
    AND i.e > tr.w * p.wn
  GROUP BY ALL
), c AS (
  SELECT
    host,
    rank,
    start_us DIV (
      SELECT
        window_us
      FROM st_params
    ) AS w,
    COUNT(*) AS collective_ops
  FROM st_collective_op
  WHERE
    source <> 'nccl_call'
  GROUP BY ALL
), f AS (
  SELECT
    tr.host,
    tr.rank,
    tr.w,
    tr.device,
    tr.traced_ns,
    COALESCE(SUM(o.ns) FILTER(WHERE
      o.lane = 'busy'), 0) / tr.traced_ns AS busy_frac,
    COALESCE(SUM(o.ns) FILTER(WHERE
      o.lane = 'compute'), 0) / tr.traced_ns AS compute_frac,
    COALESCE(SUM(o.ns) FILTER(WHERE
      o.lane = 'comm'), 0) / tr.traced_ns AS comm_frac
  FROM tr
  LEFT JOIN o
    ON o.host = tr.host AND o.rank IS NOT DISTINCT FROM tr.rank AND o.w = tr.w
  WHERE
    tr.traced_ns > 0
  GROUP BY
    tr.host,
    tr.rank,
    tr.w,
    tr.device,
    tr.traced_ns
)
SELECT
  f.host,
  f.rank,
  f.w,
  TIMESTAMP_MICROS(
    CAST(IF(
      TYPEOF((
        f.w * p.window_us / 1e6
      ) * 1000000) IN ('double', 'float'),
      BROUND((
        f.w * p.window_us / 1e6
      ) * 1000000),
      ROUND((
        f.w * p.window_us / 1e6
      ) * 1000000)
    ) AS BIGINT)
  ) AS window_start,
  f.device,
  f.traced_ns / 1000.0 AS traced_us,
  LEAST(1.0, f.busy_frac) AS busy_frac, /* interval unions cannot exceed the traced time; least() only absorbs µs rounding */
  LEAST(1.0, f.compute_frac) AS compute_frac,
  LEAST(1.0, f.comm_frac) AS comm_frac,
  GREATEST(0.0, LEAST(1.0, f.compute_frac + f.comm_frac - f.busy_frac)) AS overlap_frac,
  GREATEST(0.0, 1.0 - LEAST(1.0, f.busy_frac)) AS idle_frac,
  COALESCE(c.collective_ops, 0) AS collective_ops,
  f.comm_frac >= p.idle_collective_fraction
  AND f.compute_frac <= p.idle_compute_fraction AS waiting_on_collectives
FROM f
LEFT JOIN c
  ON c.host = f.host AND c.rank IS NOT DISTINCT FROM f.rank AND c.w = f.w, st_params AS p;

/* Network symptoms per host and window. */
CREATE OR REPLACE TEMPORARY VIEW st_host_network_window AS
SELECT
  w.host,
  w.w,
  SUM(w.retransmits) AS retransmits,
  COUNT(*) FILTER(WHERE
    w.degraded) AS degraded_flows,
  MAX(w.rtt_inflation) AS max_rtt_inflation,
  CASE
    WHEN SIZE(
      ARRAY_SORT(COLLECT_SET(f.remote_addr) FILTER(WHERE
        w.degraded OR w.retransmits > 0))
    ) = 0
    THEN NULL
    ELSE ARRAY_JOIN(
      ARRAY_SORT(COLLECT_SET(f.remote_addr) FILTER(WHERE
        w.degraded OR w.retransmits > 0)),
      ', '
    )
  END AS affected_peers
FROM st_flow_window AS w
JOIN st_flow AS f
  USING (host, flow_id)
GROUP BY
  w.host,
  w.w;

/* Network per host and window: bytes, RTT percentiles, retransmits (the network half of */
/* `windows`). */
CREATE OR REPLACE TEMPORARY VIEW st_host_net_window AS
WITH r AS (
  SELECT
    host,
    (
      (
        ts
      ) DIV 1000
    ) DIV p.window_us AS w,
    srtt_us
  FROM rtt, st_params AS p
), q AS (
  SELECT
    host,
    w,
    COUNT(*) AS rtt_samples,
    PERCENTILE(srtt_us, 0.5) AS rtt_p50_us,
    PERCENTILE(srtt_us, 0.99) AS rtt_p99_us
  FROM r
  GROUP BY ALL
), b AS (
  SELECT
    host,
    w,
    SUM(GREATEST(bytes, 0)) AS bytes
  FROM st_rtt_window
  GROUP BY ALL
), x AS (
  SELECT
    host,
    w,
    SUM(retransmits) AS retransmits
  FROM st_retrans_window
  GROUP BY ALL
)
SELECT
  COALESCE(q.host, x.host) AS host,
  COALESCE(q.w, x.w) AS w,
  COALESCE(b.bytes, 0) AS net_bytes,
  COALESCE(b.bytes, 0) * 8e6 / p.window_us AS net_throughput_bps,
  COALESCE(q.rtt_samples, 0) AS rtt_samples,
  q.rtt_p50_us,
  q.rtt_p99_us,
  COALESCE(x.retransmits, 0) AS retransmits
FROM q
FULL JOIN x
  ON x.host = q.host AND x.w = q.w
LEFT JOIN b
  ON b.host = COALESCE(q.host, x.host) AND b.w = COALESCE(q.w, x.w), st_params AS p;

/* The `windows` table of `scaletrace merge`: every traced rank's window with its host's network */
/* in the same window, and the host's network windows where no rank was traced (rank null). */
CREATE OR REPLACE TEMPORARY VIEW st_window AS
SELECT
  COALESCE(g.host, n.host) AS host,
  g.rank,
  COALESCE(g.w, n.w) AS w,
  TIMESTAMP_MICROS(
    CAST(IF(
      TYPEOF((
        COALESCE(g.w, n.w) * p.window_us / 1e6
      ) * 1000000) IN ('double', 'float'),
      BROUND((
        COALESCE(g.w, n.w) * p.window_us / 1e6
      ) * 1000000),
      ROUND((
        COALESCE(g.w, n.w) * p.window_us / 1e6
      ) * 1000000)
    ) AS BIGINT)
  ) AS window_start,
  g.device,
  g.traced_us,
  g.busy_frac,
  g.compute_frac,
  g.comm_frac,
  g.overlap_frac,
  g.idle_frac,
  g.collective_ops,
  g.waiting_on_collectives,
  n.net_bytes,
  n.net_throughput_bps,
  n.rtt_samples,
  n.rtt_p50_us,
  n.rtt_p99_us,
  n.retransmits
FROM st_rank_window AS g
FULL JOIN st_host_net_window AS n
  ON n.host = g.host AND n.w = g.w, st_params AS p;

CREATE OR REPLACE TEMPORARY VIEW st_gpu_idle_window AS
SELECT
  g.*,
  n.retransmits,
  n.degraded_flows,
  n.max_rtt_inflation,
  n.affected_peers,
  COALESCE(n.retransmits > 0 OR n.degraded_flows > 0, FALSE) AS network_symptom
FROM st_rank_window AS g
LEFT JOIN st_host_network_window AS n
  USING (host, w)
/* GPUs only: a CPU-only rank (gloo) runs its collectives on a thread beside the compute. */
WHERE
  g.waiting_on_collectives AND NOT g.rank IS NULL AND g.device = 'gpu';

CREATE OR REPLACE TEMPORARY VIEW st_gpu_idle AS
SELECT
  i.host,
  i.rank,
  COUNT(*) AS idle_windows,
  COALESCE(ANY_VALUE(n.windows, TRUE), 0) AS windows,
  COUNT(*) FILTER(WHERE
    network_symptom) AS explained_windows,
  SUM(retransmits) AS retransmits,
  MAX(max_rtt_inflation) AS max_rtt_inflation,
  NULLIF(
    ARRAY_JOIN(
      ARRAY_SORT(
        ARRAY_DISTINCT(FLATTEN(COLLECT_LIST(SPLIT(affected_peers, CONCAT('\\Q', ', ', '\\E')))))
      ),
      ', '
    ),
    ''
  ) AS affected_peers,
  AVG(comm_frac) AS collective_fraction
/* (the windows by a join: Spark takes no correlated subquery beside aggregates) */
FROM st_gpu_idle_window AS i
LEFT JOIN (
  SELECT
    host,
    rank,
    COUNT(*) AS windows
  FROM st_rank_window
  GROUP BY
    host,
    rank
) AS n
  ON n.host = i.host AND n.rank = i.rank
GROUP BY
  i.host,
  i.rank;

/* The same per host: one finding per node, not per GPU. A slow link makes every rank of the */
/* job wait in the same windows, and a line per rank named the same windows and peers eight */
/* times per node (128 lines for one congested peer in a 16-node fleet, bench/fleet.py); the */
/* network symptoms are the host's anyway. Windows count once per host however many of its */
/* ranks idled in them. */
CREATE OR REPLACE TEMPORARY VIEW st_gpu_idle_host AS
WITH r AS (
  SELECT
    *
  FROM st_gpu_idle, st_params AS p
  WHERE
    idle_windows >= p.min_idle_windows
), w AS (
  SELECT DISTINCT
    i.host,
    i.w,
    i.network_symptom,
    i.retransmits,
    i.max_rtt_inflation,
    i.affected_peers
  FROM st_gpu_idle_window AS i
  JOIN r
    USING (host, rank)
), k /* each per host, joined below (Spark takes no correlated subquery beside aggregates) */ AS (
  SELECT
    host,
    COUNT(*) AS idle_ranks,
    ARRAY_SORT(COLLECT_LIST(rank)) AS ranks
  FROM r
  GROUP BY
    host
), g AS (
  SELECT
    host,
    COUNT(DISTINCT rank) AS gpu_ranks,
    COUNT(DISTINCT w) AS windows
  FROM st_rank_window
  WHERE
    device = 'gpu'
  GROUP BY
    host
), h AS (
  SELECT
    host,
    COUNT(*) AS idle_windows,
    COUNT(*) FILTER(WHERE
      network_symptom) AS explained_windows,
    COALESCE(SUM(retransmits), 0) AS retransmits,
    MAX(max_rtt_inflation) AS max_rtt_inflation,
    NULLIF(
      ARRAY_JOIN(
        ARRAY_SORT(
          ARRAY_DISTINCT(FLATTEN(COLLECT_LIST(SPLIT(affected_peers, CONCAT('\\Q', ', ', '\\E')))))
        ),
        ', '
      ),
      ''
    ) AS affected_peers
  FROM w
  GROUP BY
    host
)
SELECT
  k.host,
  k.idle_ranks,
  k.ranks,
  COALESCE(g.gpu_ranks, 0) AS gpu_ranks,
  COALESCE(g.windows, 0) AS windows,
  COALESCE(h.idle_windows, 0) AS idle_windows,
  COALESCE(h.explained_windows, 0) AS explained_windows,
  COALESCE(h.retransmits, 0) AS retransmits,
  h.max_rtt_inflation,
  h.affected_peers
FROM k
LEFT JOIN g
  ON g.host = k.host
LEFT JOIN h
  ON h.host = k.host;

/* ---------------------------------------------------------------------------------------- */
/* 7. What slowed the job, where, and how much it cost */
/* ---------------------------------------------------------------------------------------- */
/* Each matched collective step against its healthy transfer time (from the last rank's arrival */
/* to the end): the 10th percentile of the same operation of the same process group over the */
/* run (the same position within the training step when the trace has ProfilerStep and no */
/* sequence numbers, so buckets of different sizes are not compared). A step is slow when its transfer took at least `min_excess_us` and */
/* `min_excess_fraction` of that baseline longer, late when its last rank arrived at least */
/* `min_excess_us` after the first. */
CREATE OR REPLACE TEMPORARY VIEW st_collective_excess AS
WITH s AS (
  SELECT
    *,
    CASE
      WHEN match_key LIKE '%step % #%'
      THEN REGEXP_EXTRACT(match_key, '#\\d+$', 0)
      ELSE 'any'
    END AS position,
    COALESCE(process_group, '') AS group_key
  FROM st_collective_step
), b AS (
  SELECT
    source,
    collective,
    group_key,
    position,
    PERCENTILE(transfer_us, 0.1) AS base_us,
    COUNT(*) AS occurrences
  FROM s
  GROUP BY ALL
)
SELECT
  s.*,
  b.base_us,
  b.occurrences,
  GREATEST(0, s.transfer_us - b.base_us) AS transfer_excess_us,
  b.occurrences /* the transfer after the last arrival took much longer than it does when healthy */ >= p.min_occurrences
  AND s.transfer_us - b.base_us >= GREATEST(p.min_excess_us, p.min_excess_fraction * b.base_us) AS slow,
  s.arrival_spread_us /* the last rank arrived much later than the first */ >= GREATEST(p.min_excess_us, p.min_spread_us) AS late
FROM s
JOIN b
  USING (source, collective, group_key, position), st_params AS p;

/* Matching points in time (RTT samples) to the intervals of collective steps: an equi-join on */
/* a time bin of about a step's length, then the exact test. A sample in [s, e] falls in one of */
/* the bins from s's to e's, so each (sample, interval) pair is found once, as the range join */
/* found it. DuckDB's inequality join of every sample with every step held 21 GB and 412 s for */
/* 64 nodes' 2 minutes (49 M samples, bench/fleet.py); the bins keep it to a hash join. */
CREATE OR REPLACE TEMPORARY VIEW st_match_bin AS
SELECT
  CAST(IF(
    TYPEOF(GREATEST(1000, COALESCE(MEDIAN(last_end_us - first_start_us), 0))) IN ('double', 'float'),
    BROUND(GREATEST(1000, COALESCE(MEDIAN(last_end_us - first_start_us), 0))),
    ROUND(GREATEST(1000, COALESCE(MEDIAN(last_end_us - first_start_us), 0)))
  ) AS BIGINT) AS bin_us
FROM st_collective_excess;

/* The usual queueing the verdict judges slow steps against: `st_fleet_queueing`'s rule over */
/* the RTT samples taken during the collective steps that were not slow, when the timelines */
/* have enough of them: what the paths see while the job runs at its healthy speed. Over the */
/* whole run, a fault on the node at two of the three links of a 3-node ring (20 ms of netem */
/* delay from step 12 of 30) was the usual itself: its queued samples stayed below three times */
/* it, and the job lost 2.4 s with nothing found. Without such steps, the whole run's. */
CREATE OR REPLACE TEMPORARY VIEW st_healthy_queueing AS
WITH healthy AS (
  SELECT DISTINCT
    first_start_us AS s,
    last_end_us AS e
  FROM st_collective_excess
  WHERE
    NOT slow AND NOT transfer_us IS NULL
), hb AS (
  SELECT DISTINCT
    EXPLODE(
      (
        IF(
          (
            h.e DIV m.bin_us + 1 - 1
          ) < h.s DIV m.bin_us,
          ARRAY(),
          SEQUENCE(h.s DIV m.bin_us, (
            h.e DIV m.bin_us + 1 - 1
          ))
        )
      )
    ) AS bin,
    h.s,
    h.e
  FROM healthy AS h, st_match_bin AS m
), v /* each flow's median in those steps, quantile_cont's from how often each value occurs, as */ /* `st_flow_raw_rtt` computes it: quantile_cont held every sample in memory */ AS (
  SELECT
    r.host,
    r.flow_id,
    r.srtt_us AS x,
    COUNT(*) AS n
  FROM (
    SELECT
      host,
      flow_id,
      srtt_us,
      (
        (
          ts
        ) DIV 1000
      ) AS ts_us,
      (
        (
          ts
        ) DIV 1000
      ) DIV m.bin_us AS bin
    FROM rtt, st_match_bin AS m
  ) AS r
  /* a semi join on the bin, not a correlated EXISTS: DuckDB decorrelated that into a */
  /* DISTINCT over every sample's time (6.8 s of 7.5 on 64 nodes' 2 minutes) */
  SEMI JOIN hb
    ON hb.bin = r.bin AND r.ts_us BETWEEN hb.s AND hb.e
  GROUP BY ALL
), c AS (
  SELECT
    *,
    SUM(n) OVER (PARTITION BY host, flow_id ORDER BY x NULLS LAST) - n AS below,
    SUM(n) OVER (PARTITION BY host, flow_id) AS total
  FROM v
), l AS (
  SELECT
    host,
    flow_id,
    (
      (
        MIN(x) FILTER(WHERE
          (
            (
              below
            ) + (
              n
            ) > FLOOR(
              (
                CAST((
                  (
                    (
                      total
                    )
                  ) - 1
                ) AS DOUBLE) * (
                  (
                    0.5
                  )
                )
              )
            ) + (
              0
            )
          ))
      ) + (
        (
          ANY_VALUE((
            CAST((
              (
                total
              ) - 1
            ) AS DOUBLE) * (
              0.5
            )
          ), TRUE)
        ) - FLOOR(
          (
            ANY_VALUE((
              CAST((
                (
                  total
                ) - 1
              ) AS DOUBLE) * (
                0.5
              )
            ), TRUE)
          )
        )
      ) * (
        CAST(COALESCE(
          (
            MIN(x) FILTER(WHERE
              (
                (
                  below
                ) + (
                  n
                ) > FLOOR(
                  (
                    CAST((
                      (
                        (
                          total
                        )
                      ) - 1
                    ) AS DOUBLE) * (
                      (
                        0.5
                      )
                    )
                  )
                ) + (
                  1
                )
              ))
          ),
          (
            MIN(x) FILTER(WHERE
              (
                (
                  below
                ) + (
                  n
                ) > FLOOR(
                  (
                    CAST((
                      (
                        (
                          total
                        )
                      ) - 1
                    ) AS DOUBLE) * (
                      (
                        0.5
                      )
                    )
                  )
                ) + (
                  0
                )
              ))
          )
        ) AS DOUBLE) - (
          MIN(x) FILTER(WHERE
            (
              (
                below
              ) + (
                n
              ) > FLOOR(
                (
                  CAST((
                    (
                      (
                        total
                      )
                    ) - 1
                  ) AS DOUBLE) * (
                    (
                      0.5
                    )
                  )
                )
              ) + (
                0
              )
            ))
        )
      )
    ) AS p50
  FROM c
  GROUP BY
    host,
    flow_id
), h AS (
  SELECT
    COALESCE(PERCENTILE(l.p50 - b.base_rtt_us, 0.25), 0) AS queueing_us,
    GREATEST(
      p.min_queueing_us,
      p.queueing_vs_fleet * COALESCE(PERCENTILE(l.p50 - b.base_rtt_us, 0.25), 0)
    ) AS threshold_us,
    COUNT(*) AS flows
  FROM l
  JOIN st_flow_baseline AS b
    USING (host, flow_id)
  JOIN flows AS f
    USING (host, flow_id), st_params AS p
  WHERE
    COALESCE(f.bytes_sent, 0) >= p.min_flow_bytes
  GROUP BY
    p.min_queueing_us,
    p.queueing_vs_fleet
), u /* one row (an aggregate of h, which has one or none), not a lateral join: Spark refuses those */ AS (
  SELECT
    COALESCE(MAX(h.flows), 0) > 0
    AND (
      SELECT
        COUNT(*)
      FROM healthy
    ) >= (
      SELECT
        min_occurrences
      FROM st_params
    ) AS used
  FROM h
)
SELECT
  CASE WHEN used THEN h.queueing_us ELSE f.queueing_us END AS queueing_us,
  CASE WHEN used THEN h.threshold_us ELSE f.threshold_us END AS threshold_us,
  CASE WHEN used THEN 'healthy steps' ELSE 'whole run' END AS judged_over
FROM st_fleet_queueing AS f
LEFT JOIN h
  ON TRUE
CROSS JOIN u;

/* Which node is at each end of a retransmitted segment: the recording host, and the host that */
/* owns the remote address in the same capture (else the address itself). */
CREATE OR REPLACE TEMPORARY VIEW st_retrans_ends AS
WITH r AS (
  SELECT
    r.host,
    (
      (
        r.ts
      ) DIV 1000
    ) AS ts_us,
    r.ts AS ts_ns,
    r.flow_id,
    r.remote_addr,
    COALESCE(n.node, r.host) AS node
  FROM retransmits AS r
  LEFT JOIN st_flow_node AS n
    ON n.host = r.host AND n.flow_id = r.flow_id
  WHERE
    r.kind = 'retransmit' AND r.remote_addr <> r.local_addr
)
SELECT
  r.*,
  (
    COALESCE(
      (
        SELECT
          MIN(o.node)
        FROM st_addr_owner AS o
        WHERE
          o.addr = (
            r.remote_addr
          ) AND o.node <> (
            r.node
          )
      ),
      (
        r.remote_addr
      )
    )
  ) AS remote_node
FROM r;

/* Retransmits during each slow step, counted for each end of their link: the node whose own */
/* link loses packets collects the retransmits of all its peers and ranks above each neighbour. */
CREATE OR REPLACE TEMPORARY VIEW st_slow_step_retransmits AS
WITH x AS (
  SELECT
    *
  FROM st_collective_excess
  WHERE
    slow OR late
), ends AS (
  SELECT
    x.source,
    x.collective,
    x.step,
    e.node,
    COUNT(*) AS retransmits
  FROM x
  JOIN st_retrans_ends AS l
    ON l.ts_us BETWEEN x.first_start_us AND x.last_end_us
  CROSS JOIN LATERAL (
    SELECT
      EXPLODE(ARRAY(l.node, l.remote_node)) AS node
  ) AS e
  GROUP BY ALL
)
SELECT
  source,
  collective,
  step,
  (
    CASE
      WHEN SIZE((
        COLLECT_LIST(node) FILTER(WHERE
          retransmits = top)
      )) = 2
      THEN 'link ' || ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          retransmits = top)
      ))[0] || ' - ' || ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          retransmits = top)
      ))[1]
      ELSE ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          retransmits = top)
      ))[0]
    END
  ) AS node,
  MAX(retransmits) AS node_retransmits,
  SUM(retransmits) /* each retransmit was counted at both of its ends */ DIV 2 AS retransmits
FROM (
  SELECT
    *,
    MAX(retransmits) OVER (PARTITION BY source, collective, step) AS top
  FROM ends
)
GROUP BY
  source,
  collective,
  step;

/* The flows that carry data (at least `min_flow_bytes`), with their node and the node at the */
/* other end: the one owning the remote address in the same capture (else the address itself). */
CREATE OR REPLACE TEMPORARY VIEW st_data_flow AS
WITH f AS (
  SELECT
    host,
    flow_id,
    ANY_VALUE(local_addr, TRUE) AS local_addr,
    ANY_VALUE(remote_addr, TRUE) AS remote_addr,
    SUM(COALESCE(bytes_sent, 0)) AS bytes_sent
  FROM flows, st_params AS p
  GROUP BY
    host,
    flow_id,
    p.min_flow_bytes
  HAVING
    SUM(COALESCE(bytes_sent, 0) + COALESCE(bytes_received, 0)) >= p.min_flow_bytes
), n AS (
  SELECT
    f.*,
    fn.node
  FROM f
  JOIN st_flow_node AS fn
    USING (host, flow_id)
)
SELECT
  n.*,
  (
    COALESCE(
      (
        SELECT
          MIN(o.node)
        FROM st_addr_owner AS o
        WHERE
          o.addr = (
            n.remote_addr
          ) AND o.node <> (
            n.node
          )
      ),
      (
        n.remote_addr
      )
    )
  ) AS remote_node
FROM n
WHERE
  n.remote_addr <> n.local_addr;

/* RTT samples of the flows that send data, with the node at each end and the queueing in each */
/* sample: its smoothed RTT above the path's windowed minimum. A socket measures RTT on what it */
/* sends: one that sent less than `min_flow_bytes` (the quiet end of a connection whose data */
/* flows the other way) times small messages and its peer's delayed ACKs, not a path, and the */
/* usual it is judged against (`st_healthy_queueing`) leaves such ends out too. Under */
/* reordering toward node0, node2's end of node3's 198 MB flow to it (91 kB sent) queued in 78 */
/* steps and named node3 the first culprit. */
/* For queries: `st_queued_sample` and `st_queueing_contrast` write this view's join out again, */
/* to pick or count the samples before they meet their flows; which samples count is decided */
/* in all three alike. */
CREATE OR REPLACE TEMPORARY VIEW st_rtt_ends AS
SELECT
  r.host,
  n.node,
  (
    (
      r.ts
    ) DIV 1000
  ) AS ts_us,
  r.flow_id,
  n.remote_node,
  (
    CAST(IF(
      TYPEOF((
        r.srtt_us
      )) IN ('double', 'float'),
      BROUND((
        r.srtt_us
      )),
      ROUND((
        r.srtt_us
      ))
    ) AS BIGINT) - COALESCE(NULLIF((
      r.min_rtt_us
    ), 0), (
      r.srtt_us
    ))
  ) AS queued_us
FROM rtt AS r
JOIN st_data_flow AS n
  USING (host, flow_id), st_params AS p
WHERE
  n.bytes_sent >= p.min_flow_bytes;

/* Each data flow's delivery rate while it sent: the kernel's rate sample (bytes delivered over */
/* the interval that delivered them) at the RTT samples where its acknowledged bytes grew; the */
/* median of them is the rate its path gives it (a rate limit, a lower link speed, a busy port). */
CREATE OR REPLACE TEMPORARY VIEW st_flow_delivery AS
WITH s AS (
  SELECT
    host,
    flow_id,
    delivery_rate_bps,
    bytes_acked - LAG(bytes_acked) OVER (PARTITION BY host, flow_id ORDER BY ts NULLS LAST) AS acked
  FROM rtt
  WHERE
    delivery_rate_bps > 0
)
SELECT
  n.host,
  n.flow_id,
  n.node,
  n.remote_node,
  MEDIAN(s.delivery_rate_bps) AS rate_bps,
  COUNT(*) AS sending_samples,
  SUM(s.acked) AS acked_bytes
FROM s
JOIN st_data_flow AS n
  USING (host, flow_id), st_params AS p
WHERE
  s.acked > 0
GROUP BY
  n.host,
  n.flow_id,
  n.node,
  n.remote_node,
  p.min_rtt_samples
HAVING
  COUNT(*) >= p.min_rtt_samples;

/* The RTT samples queued well above the fleet's usual (`st_healthy_queueing`): `st_rtt_ends`' */
/* rows, each with its time bin (`st_bins`). The bin is computed here, on the samples' side: a */
/* join condition `r.ts_us // x.bin_us = x.bin` names both sides, so DuckDB cannot hash on it */
/* and ran a range join instead (15.7 s of CPU for one view on 64 nodes' 2 minutes, */
/* bench/fleet.py). The samples are picked before they meet their flows: joined first, every */
/* sample of the capture met its flow to keep a few (10.6 of 58 s on 64 nodes' 10 minutes). */
CREATE OR REPLACE TEMPORARY VIEW st_queued_sample AS
WITH q AS (
  SELECT
    r.host,
    (
      (
        r.ts
      ) DIV 1000
    ) AS ts_us,
    r.flow_id,
    (
      CAST(IF(
        TYPEOF((
          r.srtt_us
        )) IN ('double', 'float'),
        BROUND((
          r.srtt_us
        )),
        ROUND((
          r.srtt_us
        ))
      ) AS BIGINT) - COALESCE(NULLIF((
        r.min_rtt_us
      ), 0), (
        r.srtt_us
      ))
    ) AS queued_us
  FROM rtt AS r
  CROSS JOIN st_healthy_queueing AS h
  WHERE
    (
      CAST(IF(
        TYPEOF((
          r.srtt_us
        )) IN ('double', 'float'),
        BROUND((
          r.srtt_us
        )),
        ROUND((
          r.srtt_us
        ))
      ) AS BIGINT) - COALESCE(NULLIF((
        r.min_rtt_us
      ), 0), (
        r.srtt_us
      ))
    ) >= h.threshold_us
)
SELECT
  q.host,
  n.node,
  q.ts_us,
  q.flow_id,
  n.remote_node,
  q.queued_us,
  q.ts_us DIV m.bin_us AS bin
FROM q
JOIN st_data_flow AS n
  USING (host, flow_id), st_match_bin AS m, st_params AS p
WHERE
  n.bytes_sent >= p.min_flow_bytes;

/* RTT samples queued well above the fleet's usual (`st_healthy_queueing`) during each collective */
/* step: a slow link (a rate limit, a congested port, a link that negotiated a lower speed) */
/* queues its own flows' packets and no others, without losing any. Counted for each end. */
CREATE OR REPLACE TEMPORARY VIEW st_step_queueing AS
WITH ends AS (
  SELECT
    x.source,
    x.collective,
    x.step,
    ANY_VALUE(x.slow, TRUE) AS slow,
    e.node,
    COUNT(*) AS samples
  FROM (
    SELECT
      x.*,
      EXPLODE(
        (
          IF(
            (
              x.last_end_us DIV m.bin_us + 1 - 1
            ) < x.first_start_us DIV m.bin_us,
            ARRAY(),
            SEQUENCE(x.first_start_us DIV m.bin_us, (
              x.last_end_us DIV m.bin_us + 1 - 1
            ))
          )
        )
      ) AS bin
    FROM st_collective_excess AS x, st_match_bin AS m
  ) AS x
  JOIN st_queued_sample AS r
    ON r.bin = x.bin AND r.ts_us BETWEEN x.first_start_us AND x.last_end_us
  CROSS JOIN LATERAL (
    SELECT
      EXPLODE(ARRAY(r.node, r.remote_node)) AS node
  ) AS e
  GROUP BY
    x.source,
    x.collective,
    x.step,
    e.node
)
SELECT
  source,
  collective,
  step,
  ANY_VALUE(slow, TRUE) AS slow,
  (
    CASE
      WHEN SIZE((
        COLLECT_LIST(node) FILTER(WHERE
          samples = top)
      )) = 2
      THEN 'link ' || ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          samples = top)
      ))[0] || ' - ' || ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          samples = top)
      ))[1]
      ELSE ARRAY_SORT((
        COLLECT_LIST(node) FILTER(WHERE
          samples = top)
      ))[0]
    END
  ) AS node,
  MAX(samples) AS node_samples,
  SUM(samples) /* each sample was counted at both of its ends */ DIV 2 AS samples
FROM (
  SELECT
    *,
    MAX(samples) OVER (PARTITION BY source, collective, step) AS top
  FROM ends
)
GROUP BY
  source,
  collective,
  step;

CREATE OR REPLACE TEMPORARY VIEW st_slow_step_queueing AS
SELECT
  source,
  collective,
  step,
  node,
  node_samples,
  samples
FROM st_step_queueing
WHERE
  slow;

/* Each rank's own time in each iteration against the median of the other ranks' in the same */
/* iteration. */
CREATE OR REPLACE TEMPORARY VIEW st_rank_iteration_own AS
WITH r AS (
  SELECT
    host,
    rank,
    step AS iteration,
    step_us - comm_us AS own_us
  FROM st_rank_step
)
SELECT
  r.*,
  r.own_us - (
    SELECT
      MEDIAN(r2.own_us)
    FROM r AS r2
    WHERE
      r2.iteration = r.iteration AND r2.rank <> r.rank
  ) AS extra_own_us
FROM r;

/* What each slow step cost and whom it is blamed on, as an interval of job time within its */
/* training iteration (ProfilerStep, when the trace has it): */
/* - a rank that arrived late by at least `min_excess_us` made every other rank wait from the */
/*   first arrival to its own ([first_start, its start]): a straggler (the last arrival whose */
/*   own work explains its lateness, see below); */
/* - the transfer after the last arrival that took longer than its healthy duration */
/*   ([last_start + healthy transfer, last_end]) is blamed on the node at the end of most */
/*   retransmits during the step (network: loss); without retransmits, on the node at the end of */
/*   most queued RTT samples (queueing: a slow or congested link); else it is unexplained. */
/* Intervals, not sums: collectives may run concurrently (gloo and NCCL use several streams or */
/* threads), and the same wait must not count twice. */
CREATE OR REPLACE TEMPORARY VIEW st_slow_step_cause AS
WITH x AS (
  SELECT
    *
  FROM st_collective_excess
  WHERE
    slow OR late
), arrival /* A late step's straggler: the last rank to arrive whose own work in that training step */ /* explains its lateness, else the last rank to arrive. The last arrival alone is not always */ /* the rank that held the step up: with a rank planted 60 ms slow, rank 0's previous */ /* all-reduce ended 63 ms late on rank 0 alone, so rank 0 reached the next one 6.5 ms after */ /* the slow rank, with no extra work of its own; blaming it dropped the slow rank's last step. */ AS (
  SELECT
    x.source,
    x.collective,
    x.step,
    r.host,
    r.rank,
    r.start_us - x.first_start_us AS lateness_us,
    COALESCE(
      (
        (
          o.extra_own_us
        ) >= GREATEST(
          (
            SELECT
              min_excess_us
            FROM st_params
          ),
          0.5 * (
            r.start_us - x.first_start_us
          )
        )
      ),
      o.extra_own_us IS NULL
    ) /* a rank whose own work is unknown (no ProfilerStep) counts as explained, as in */ /* st_culprit_iteration: without any, the last to arrive is the straggler */
    AND r.start_us - x.first_start_us >= GREATEST(p.min_excess_us, p.min_spread_us) AS explained,
    r.start_us
  FROM x
  JOIN st_collective_rank_step AS r
    USING (source, collective, step)
  LEFT JOIN st_rank_iteration_own AS o
    ON o.host = r.host AND o.rank = r.rank AND o.iteration = x.iteration
  CROSS JOIN st_params AS p
  WHERE
    x.late
), straggler AS (
  SELECT
    source,
    collective,
    step,
    MAX_BY(host, (explained, start_us, rank)) AS host,
    MAX_BY(rank, (explained, start_us, rank)) AS rank,
    MAX_BY(lateness_us, (explained, start_us, rank)) AS lateness_us
  FROM arrival
  GROUP BY ALL
)
SELECT
  x.source,
  x.collective,
  x.step,
  x.iteration,
  'straggler' AS cause,
  'rank ' || g.rank || ' (' || g.host || ')' AS culprit,
  g.host,
  g.rank,
  x.first_start_us AS s,
  x.first_start_us + g.lateness_us AS e,
  COALESCE(t.retransmits, 0) AS retransmits,
  CAST(NULL AS BIGINT) AS queued_samples,
  g.lateness_us,
  x.base_us
FROM x
JOIN straggler AS g
  USING (source, collective, step)
LEFT JOIN st_slow_step_retransmits AS t
  USING (source, collective, step)
UNION ALL
SELECT
  x.source,
  x.collective,
  x.step,
  x.iteration,
  w.cause,
  CASE w.cause
    WHEN 'network'
    THEN t.node
    WHEN 'queueing'
    THEN q.node
    ELSE 'unexplained'
  END,
  CASE
    WHEN w.cause = 'network' AND t.node NOT LIKE 'link %'
    THEN t.node
    WHEN w.cause = 'queueing' AND q.node NOT LIKE 'link %'
    THEN q.node
  END,
  NULL,
  x.last_end_us - x.transfer_excess_us,
  x.last_end_us,
  COALESCE(t.retransmits, 0),
  q.samples,
  NULL,
  x.base_us
FROM x
LEFT JOIN st_slow_step_retransmits AS t
  USING (source, collective, step)
LEFT JOIN st_slow_step_queueing AS q
  USING (source, collective, step)
CROSS JOIN st_params AS p
CROSS JOIN LATERAL (
  SELECT
    CASE
      WHEN COALESCE(t.retransmits, 0) >= p.min_step_retransmits
      THEN 'network'
      WHEN COALESCE(q.node_samples, 0) >= p.min_step_queued_samples
      THEN 'queueing'
      ELSE 'unexplained'
    END AS cause
) AS w
WHERE
  x.slow;

/* Each rank's own time per training step: the step less its time in collectives (which */
/* includes waiting inside them for the others). A rank that computes longer (a real straggler) */
/* has more of it than the others; a rank that arrives late because its previous transfer was */
/* slow does not. */
CREATE OR REPLACE TEMPORARY VIEW st_rank_own_time AS
WITH r AS (
  SELECT
    host,
    rank,
    MEDIAN(step_us - comm_us) AS own_us,
    COUNT(*) AS steps
  FROM st_rank_step
  GROUP BY ALL
)
SELECT
  r.*,
  (
    SELECT
      MEDIAN(r2.own_us)
    FROM r AS r2
    WHERE
      r2.rank <> r.rank
  ) AS others_own_us,
  r.own_us - (
    SELECT
      MEDIAN(r2.own_us)
    FROM r AS r2
    WHERE
      r2.rank <> r.rank
  ) AS extra_own_us
FROM r;

/* The job's traced time: from the first to the last matched collective. */
CREATE OR REPLACE TEMPORARY VIEW st_job_span AS
SELECT
  (
    MAX(last_end_us) - MIN(first_start_us)
  ) / 1e6 AS traced_s,
  COUNT(*) AS steps,
  COUNT(DISTINCT iteration) AS iterations,
  MIN(first_start_us) AS span_start_us,
  MAX(last_end_us) AS span_end_us
FROM st_collective_excess;

/* A link named on a tie between its two ends and a node at one of its ends named in other */
/* steps (its retransmits or queueing on more than that one link) are one fault: the node's own */
/* link. The link's steps join the node when the node was blamed in at least */
/* `min_culprit_steps` steps (the end blamed in more steps, if both were), under the node's */
/* cause: a node blamed for the same cause first, else for the other (a rate limit's queue also */
/* overflows: under 100 Mbit/s on node2 the steps with its drops named `link node2 - node3` a */
/* second culprit, and the two lines split one fault's 24.3 s into 17.1 s and 7.3 s). */
CREATE OR REPLACE TEMPORARY VIEW st_slow_step_blame AS
WITH n AS (
  SELECT
    st_slow_step_cause.cause AS cause,
    st_slow_step_cause.culprit AS culprit,
    COUNT(*) AS steps
  FROM st_slow_step_cause AS st_slow_step_cause, st_params AS p
  WHERE
    st_slow_step_cause.cause IN ('network', 'queueing')
    AND st_slow_step_cause.culprit NOT LIKE 'link %'
  GROUP BY
    st_slow_step_cause.cause,
    st_slow_step_cause.culprit,
    p.min_culprit_steps
  HAVING
    COUNT(*) >= p.min_culprit_steps
), l AS (
  SELECT DISTINCT
    st_slow_step_cause.cause AS cause,
    st_slow_step_cause.culprit AS culprit,
    (
      CASE
        WHEN (
          st_slow_step_cause.culprit
        ) LIKE 'link %'
        THEN SPLIT(SUBSTRING((
          st_slow_step_cause.culprit
        ), 6), CONCAT('\\Q', ' - ', '\\E'))
        ELSE ARRAY((
          st_slow_step_cause.culprit
        ))
      END
    ) AS ends
  FROM st_slow_step_cause AS st_slow_step_cause
  WHERE
    st_slow_step_cause.cause IN ('network', 'queueing')
    AND st_slow_step_cause.culprit LIKE 'link %'
), m AS (
  SELECT
    l.cause AS cause,
    l.culprit AS culprit,
    MAX_BY(n.culprit, (n.cause = l.cause, n.steps, n.culprit)) AS node,
    MAX_BY(n.cause, (n.cause = l.cause, n.steps, n.culprit)) AS node_cause
  FROM l AS l
  JOIN n AS n
    ON ARRAY_CONTAINS(l.ends, n.culprit)
  GROUP BY ALL
)
SELECT
  c.source AS source,
  c.collective AS collective,
  c.step AS step,
  c.iteration AS iteration,
  COALESCE(m.node_cause, c.cause) AS cause,
  COALESCE(m.node, c.culprit) AS culprit,
  COALESCE(m.node, c.host) AS host,
  c.rank AS rank,
  c.s AS s,
  c.e AS e,
  c.retransmits AS retransmits,
  c.queued_samples AS queued_samples,
  c.lateness_us AS lateness_us,
  c.base_us AS base_us
FROM st_slow_step_cause AS c
LEFT JOIN m AS m
  ON c.cause = m.cause AND c.culprit = m.culprit;

/* The job time blamed on each culprit of the network or queueing kind, as the windows of its */
/* steps ([first start, last end]) and the nodes at its ends: its slow steps (`slow`), and for */
/* a queueing node or link the steps in which it held the most queued samples (`persistent`). */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_step_window AS
WITH steps AS (
  SELECT DISTINCT
    'slow' AS kind,
    cause,
    culprit,
    source,
    collective,
    step
  FROM st_slow_step_blame
  WHERE
    cause IN ('network', 'queueing')
  UNION ALL
  SELECT DISTINCT
    'persistent',
    'queueing',
    q.node,
    q.source,
    q.collective,
    q.step
  FROM st_step_queueing AS q, st_params AS p
  WHERE
    q.node_samples >= p.min_step_queued_samples
)
SELECT
  s.kind,
  s.cause,
  s.culprit,
  x.first_start_us AS s,
  x.last_end_us AS e,
  (
    CASE
      WHEN (
        s.culprit
      ) LIKE 'link %'
      THEN SPLIT(SUBSTRING((
        s.culprit
      ), 6), CONCAT('\\Q', ' - ', '\\E'))
      ELSE ARRAY((
        s.culprit
      ))
    END
  ) AS ends
FROM steps AS s
JOIN st_collective_excess AS x
  USING (source, collective, step);

/* How many distinct RTT samples queued above the fleet's usual on the flows of a queueing */
/* culprit (a node's, or a link's) during its steps, and how many distinct retransmits on the */
/* links of a network culprit during its slow steps. Distinct, not a sum over steps: the steps */
/* of concurrent collectives overlap in time, and sums counted 17,489 queued samples in a */
/* capture of 12,048 and 1,105 retransmits in a run of 1,099. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_queued_samples AS
SELECT
  w.kind,
  w.culprit,
  COUNT(DISTINCT (q.host, q.flow_id, q.ts_us)) AS queued_samples
FROM (
  SELECT
    w.*,
    EXPLODE(
      (
        IF(
          (
            w.e DIV m.bin_us + 1 - 1
          ) < w.s DIV m.bin_us,
          ARRAY(),
          SEQUENCE(w.s DIV m.bin_us, (
            w.e DIV m.bin_us + 1 - 1
          ))
        )
      )
    ) AS bin
  FROM st_culprit_step_window AS w, st_match_bin AS m
  WHERE
    w.cause = 'queueing'
) AS w
JOIN st_queued_sample AS q
  ON q.bin = w.bin AND q.ts_us BETWEEN w.s AND w.e
WHERE
  (
    CASE
      WHEN SIZE((
        w.ends
      )) = 2
      THEN ARRAY_CONTAINS((
        w.ends
      ), (
        q.node
      ))
      AND ARRAY_CONTAINS((
        w.ends
      ), (
        q.remote_node
      ))
      ELSE ARRAY_CONTAINS((
        w.ends
      ), (
        q.node
      ))
      OR ARRAY_CONTAINS((
        w.ends
      ), (
        q.remote_node
      ))
    END
  )
GROUP BY
  w.kind,
  w.culprit;

CREATE OR REPLACE TEMPORARY VIEW st_culprit_retransmits AS
SELECT
  w.culprit,
  COUNT(DISTINCT (r.host, r.flow_id, r.ts_ns)) AS retransmits
FROM st_culprit_step_window AS w
JOIN st_retrans_ends AS r
  ON r.ts_us BETWEEN w.s AND w.e
WHERE
  w.cause = 'network'
  AND (
    CASE
      WHEN SIZE((
        w.ends
      )) = 2
      THEN ARRAY_CONTAINS((
        w.ends
      ), (
        r.node
      ))
      AND ARRAY_CONTAINS((
        w.ends
      ), (
        r.remote_node
      ))
      ELSE ARRAY_CONTAINS((
        w.ends
      ), (
        r.node
      ))
      OR ARRAY_CONTAINS((
        w.ends
      ), (
        r.remote_node
      ))
    END
  )
GROUP BY
  w.culprit;

/* How much more a queueing culprit's links queued than the others while it lasted (from its */
/* first slow step to its last): the share of their RTT samples above the usual */
/* (`st_healthy_queueing`) against that share on the flows off its links. On a busy host every */
/* path queues now and then, and which node holds the most queued samples in a step is chance: */
/* one of 24 clean runs had node0 on top in enough steps to be named, its links queueing 25 % */
/* of their samples against 17 % elsewhere; under rate limits the limited node's links queued */
/* 2.9 to 83 times as often as the others (six runs). A slow link queues its own flows, not the */
/* others'. Null where every flow is on its links. Over `st_rtt_ends`' samples, counted per flow */
/* before the flows' ends are joined: joined first, every sample met its flow (9.3 s against */
/* 5.0 on 64 nodes' 10 minutes, bench/fleet.py). */
CREATE OR REPLACE TEMPORARY VIEW st_queueing_contrast AS
WITH c AS (
  SELECT
    culprit,
    ANY_VALUE(ends, TRUE) AS ends,
    MIN(s) AS s,
    MAX(e) AS e
  FROM st_culprit_step_window
  WHERE
    cause = 'queueing' AND kind = 'slow'
  GROUP BY
    culprit
), x AS (
  SELECT
    c.culprit,
    r.host,
    r.flow_id,
    COUNT(*) AS samples,
    COUNT(*) FILTER(WHERE
      (
        CAST(IF(
          TYPEOF((
            r.srtt_us
          )) IN ('double', 'float'),
          BROUND((
            r.srtt_us
          )),
          ROUND((
            r.srtt_us
          ))
        ) AS BIGINT) - COALESCE(NULLIF((
          r.min_rtt_us
        ), 0), (
          r.srtt_us
        ))
      ) >= q.threshold_us) AS queued
  /* a culprit's span can be the whole run: a few intervals, no bins */
  FROM c
  JOIN rtt AS r
    ON (
      (
        r.ts
      ) DIV 1000
    ) BETWEEN c.s AND c.e
  CROSS JOIN st_healthy_queueing AS q
  GROUP BY
    c.culprit,
    r.host,
    r.flow_id
), y AS (
  SELECT
    x.*,
    (
      CASE
        WHEN SIZE((
          c.ends
        )) = 2
        THEN ARRAY_CONTAINS((
          c.ends
        ), (
          n.node
        ))
        AND ARRAY_CONTAINS((
          c.ends
        ), (
          n.remote_node
        ))
        ELSE ARRAY_CONTAINS((
          c.ends
        ), (
          n.node
        ))
        OR ARRAY_CONTAINS((
          c.ends
        ), (
          n.remote_node
        ))
      END
    ) AS own
  FROM x
  JOIN c
    USING (culprit)
  JOIN st_data_flow AS n
    USING (host, flow_id), st_params AS p
  WHERE
    n.bytes_sent >= p.min_flow_bytes
)
SELECT
  culprit,
  SUM(queued) FILTER(WHERE
    own) / SUM(samples) FILTER(WHERE
    own) AS own_share,
  SUM(queued) FILTER(WHERE
    NOT own) / SUM(samples) FILTER(WHERE
    NOT own) AS other_share,
  CAST(IF(
    TYPEOF(COALESCE(SUM(samples) FILTER(WHERE
      own), 0)) IN ('double', 'float'),
    BROUND(COALESCE(SUM(samples) FILTER(WHERE
      own), 0)),
    ROUND(COALESCE(SUM(samples) FILTER(WHERE
      own), 0))
  ) AS BIGINT) AS own_samples,
  CAST(IF(
    TYPEOF(COALESCE(SUM(samples) FILTER(WHERE
      NOT own), 0)) IN ('double', 'float'),
    BROUND(COALESCE(SUM(samples) FILTER(WHERE
      NOT own), 0)),
    ROUND(COALESCE(SUM(samples) FILTER(WHERE
      NOT own), 0))
  ) AS BIGINT) AS other_samples
FROM y
GROUP BY
  culprit;

/* Of the segments resent on a network culprit's links during its slow steps, how many the */
/* receivers reported as duplicates (DSACK): spurious retransmits, whose original had arrived, */
/* only late. Loss leaves next to none; reordering and delay variation (jitter, packets of one */
/* flow spread over paths of different length) make the sender resend segments that were only */
/* late, and cost the same stalls. From each flow's running counters in its RTT samples: what */
/* they grew by since the flow's previous sample, for the samples inside the culprit's steps */
/* (each sample once, however many overlapping steps hold it). Null counters (a kernel that */
/* does not give them) leave the culprit out. `reordered`: the receivers already had at least */
/* `min_spurious_share` of them, so the verdict calls it reordering or jitter, not loss. */
/* Only the flows on a network culprit's links are put in order, whole (a flow's previous */
/* sample may lie before the culprit's steps): sorting every sample of the capture for them */
/* is what held memory on a fleet's store. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_spurious AS
/* (the samples are r_s, not s: inside the EXISTS below Spark would take s for st_culprit_step_window's column) */
WITH c AS (
  SELECT DISTINCT
    culprit,
    ends
  FROM st_culprit_step_window
  WHERE
    cause = 'network'
), on_links AS (
  SELECT DISTINCT
    n.host,
    n.flow_id,
    n.node,
    n.remote_node
  FROM st_data_flow AS n
  JOIN c
    ON (
      CASE
        WHEN SIZE((
          c.ends
        )) = 2
        THEN ARRAY_CONTAINS((
          c.ends
        ), (
          n.node
        ))
        AND ARRAY_CONTAINS((
          c.ends
        ), (
          n.remote_node
        ))
        ELSE ARRAY_CONTAINS((
          c.ends
        ), (
          n.node
        ))
        OR ARRAY_CONTAINS((
          c.ends
        ), (
          n.remote_node
        ))
      END
    )
), r_s AS (
  SELECT
    n.node,
    n.remote_node,
    (
      (
        r.ts
      ) DIV 1000
    ) AS ts_us,
    GREATEST(
      0,
      CAST(IF(
        TYPEOF(r.total_retrans) IN ('double', 'float'),
        BROUND(r.total_retrans),
        ROUND(r.total_retrans)
      ) AS BIGINT) - LAG(
        CAST(IF(
          TYPEOF(r.total_retrans) IN ('double', 'float'),
          BROUND(r.total_retrans),
          ROUND(r.total_retrans)
        ) AS BIGINT)
      ) OVER w
    ) AS resent, /* signed: a count that went down (a socket reused after a disconnect) adds nothing */
    GREATEST(
      0,
      CAST(IF(
        TYPEOF(r.dsack_dups) IN ('double', 'float'),
        BROUND(r.dsack_dups),
        ROUND(r.dsack_dups)
      ) AS BIGINT) - LAG(
        CAST(IF(
          TYPEOF(r.dsack_dups) IN ('double', 'float'),
          BROUND(r.dsack_dups),
          ROUND(r.dsack_dups)
        ) AS BIGINT)
      ) OVER w
    ) AS spurious
  FROM rtt AS r
  JOIN on_links AS n
    USING (host, flow_id)
  WINDOW w AS (PARTITION BY r.host, r.flow_id ORDER BY r.ts NULLS LAST)
)
SELECT
  c.culprit,
  SUM(r_s.resent) AS resent,
  SUM(r_s.spurious) AS spurious,
  LEAST(1.0, SUM(r_s.spurious) / NULLIF(SUM(r_s.resent), 0)) AS spurious_share, /* a DSACK can come in a sample after its retransmit's: at most all of them */
  SUM(r_s.resent) > 0
  AND SUM(r_s.spurious) > 0
  AND SUM(r_s.spurious) >= ANY_VALUE(p.min_spurious_share, TRUE) * SUM(r_s.resent) AS reordered
FROM c
JOIN r_s
  ON (
    CASE
      WHEN SIZE((
        c.ends
      )) = 2
      THEN ARRAY_CONTAINS((
        c.ends
      ), (
        r_s.node
      ))
      AND ARRAY_CONTAINS((
        c.ends
      ), (
        r_s.remote_node
      ))
      ELSE ARRAY_CONTAINS((
        c.ends
      ), (
        r_s.node
      ))
      OR ARRAY_CONTAINS((
        c.ends
      ), (
        r_s.remote_node
      ))
    END
  )
CROSS JOIN st_params AS p
WHERE
  NOT r_s.spurious IS NULL
  AND NOT r_s.resent IS NULL
  AND EXISTS(
    SELECT
      1
    FROM st_culprit_step_window AS sw
    WHERE
      sw.cause = 'network'
      AND sw.culprit = c.culprit
      AND r_s.ts_us BETWEEN sw.s AND sw.e
  )
GROUP BY
  c.culprit;

/* A slow link present from the job's first step leaves no healthy step to compare with: every */
/* transfer is slow alike and none stands out in `st_collective_excess`. It still queues its */
/* own flows' packets, and no others, in step after step: a node (or link) that holds the most */
/* queued samples in at least `min_persistent_share` of all collective steps and of all such */
/* steps is a culprit whose cost cannot be priced from this job alone. */
CREATE OR REPLACE TEMPORARY VIEW st_persistent_queueing AS
WITH t AS (
  SELECT
    COUNT(*) AS steps
  FROM st_collective_excess
), q AS (
  SELECT
    node AS culprit,
    COUNT(*) AS queued_steps,
    CASE
      WHEN SIZE(ARRAY_SORT(COLLECT_SET(collective))) = 0
      THEN NULL
      ELSE ARRAY_JOIN(ARRAY_SORT(COLLECT_SET(collective)), ', ')
    END AS collectives
  FROM st_step_queueing, st_params AS p
  WHERE
    node_samples >= p.min_step_queued_samples
  GROUP BY
    node
)
SELECT
  q.*,
  COALESCE(n.queued_samples, 0) AS queued_samples,
  t.steps,
  q.queued_steps / t.steps AS share_of_steps,
  q.queued_steps / SUM(q.queued_steps) OVER () AS share_of_queued_steps,
  CASE WHEN q.culprit LIKE 'link %' THEN NULL ELSE q.culprit END AS host
FROM q
CROSS JOIN t
LEFT JOIN st_culprit_queued_samples AS n
  ON n.kind = 'persistent' AND n.culprit = q.culprit;

/* A stall carried over into the next collective: a rank that left a slow collective late */
/* (its transfer stalled on a culprit's links) reaches its next collective late by as much, */
/* with no more work of its own than the others. Its lateness there, up to how much later it */
/* left the slow collective than the first rank did, is that culprit's: with 2 % loss on */
/* node2, an all-reduce stalled 218 ms on a retransmit timeout and its ranks left it 215 ms */
/* apart; the next iteration's first two all-reduces waited 217 ms for rank 1, which had done */
/* no extra work, and those 200 ms of step time were nobody's. It counts when the late release */
/* holds at least half the lateness (as own work must, `st_own_work_explains`) and at least */
/* `min_excess_us`, and the collective it left is of this training step or the one before (an */
/* older one says nothing about this arrival). Its evidence is the wait after the slow step's */
/* end: up to there the slow step's own interval holds it, and the same wait counts once. */
CREATE OR REPLACE TEMPORARY VIEW st_carried_stall AS
WITH late AS (
  /* (a straggler's interval ends where it arrived) */
  SELECT
    b.source,
    b.collective,
    b.step,
    b.iteration,
    b.host,
    b.rank,
    b.s,
    b.lateness_us,
    b.e AS start_us
  FROM st_slow_step_blame AS b
  JOIN st_rank_iteration_own AS o
    ON o.host = b.host AND o.rank = b.rank AND o.iteration = b.iteration
  WHERE
    b.cause = 'straggler'
    AND NOT (
      (
        o.extra_own_us
      ) >= GREATEST((
        SELECT
          min_excess_us
        FROM st_params
      ), 0.5 * (
        b.lateness_us
      ))
    )
), left_last AS (
  /* the collective the late rank left last before it arrived, in this training step or the */
  /* one before (an equi-join on the step: a late arrival meets two steps' collectives, not */
  /* every one of its rank's) */
  SELECT
    l.source,
    l.collective,
    l.step,
    l.iteration,
    l.s,
    l.lateness_us,
    MAX_BY(p.collective, (p.end_us, p.step, p.collective)) AS prev_collective,
    MAX_BY(p.step, (p.end_us, p.step, p.collective)) AS prev_step,
    MAX(p.end_us) AS left_us
  FROM (
    SELECT
      *,
      EXPLODE(ARRAY(iteration - 1, iteration)) AS searched
    FROM late
  ) AS l
  JOIN st_collective_rank_step AS p
    ON p.source = l.source
    AND p.host = l.host
    AND p.rank = l.rank
    AND p.profiler_step = l.searched
  WHERE
    p.end_us <= l.start_us
  GROUP BY
    l.source,
    l.collective,
    l.step,
    l.iteration,
    l.s,
    l.lateness_us
), carried AS (
  SELECT
    l.*,
    LEAST(l.lateness_us, l.left_us - (
      x.last_end_us - x.finish_spread_us
    )) AS carried_us,
    x.last_end_us AS prev_end_us
  FROM left_last AS l
  JOIN st_collective_step AS x
    ON x.source = l.source AND x.collective = l.prev_collective AND x.step = l.prev_step
)
SELECT
  b.cause,
  b.culprit,
  c.source,
  c.collective,
  c.step,
  c.iteration,
  GREATEST(c.s, c.prev_end_us) AS s,
  c.s + c.carried_us AS e,
  c.carried_us
FROM carried AS c
JOIN st_slow_step_blame AS b
  ON b.source = c.source AND b.collective = c.prev_collective AND b.step = c.prev_step
CROSS JOIN st_params AS p
WHERE
  b.cause IN ('network', 'queueing')
  AND c.carried_us >= GREATEST(p.min_excess_us, 0.5 * c.lateness_us)
  AND c.s + c.carried_us > GREATEST(c.s, c.prev_end_us);

/* Each culprit's evidence per training iteration: the union of its intervals (job time in */
/* which every rank waited because of it), and the stalls carried over from its steps */
/* (`st_carried_stall`). A rank's lateness counts in an iteration only when */
/* it did more of its own work in it (at least `min_excess_us` and half its lateness more than */
/* the other ranks): on a busy host the ranks take turns arriving last by a few ms, and such */
/* iterations are healthy. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_iteration AS
WITH c AS (
  SELECT
    c.cause,
    c.culprit,
    c.iteration,
    c.s,
    c.e
  FROM st_slow_step_blame AS c
  CROSS JOIN st_params AS p
  LEFT JOIN st_rank_iteration_own AS o
    ON c.cause = 'straggler'
    AND o.host = c.host
    AND o.rank = c.rank
    AND o.iteration = c.iteration
  WHERE
    c.cause <> 'straggler'
    OR o.extra_own_us IS NULL
    OR (
      (
        o.extra_own_us
      ) >= GREATEST((
        SELECT
          min_excess_us
        FROM st_params
      ), 0.5 * (
        c.lateness_us
      ))
    )
  UNION ALL
  SELECT
    cause,
    culprit,
    iteration,
    s,
    e
  FROM st_carried_stall
), m AS (
  SELECT
    *,
    MAX(e) OVER (
      PARTITION BY cause, culprit, iteration
      ORDER BY s NULLS LAST, e NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prev_end
  FROM c
), u AS (
  SELECT
    cause,
    culprit,
    iteration,
    s,
    e,
    SUM(CASE WHEN prev_end >= s THEN 0 ELSE 1 END) OVER (
      PARTITION BY cause, culprit, iteration
      ORDER BY s NULLS LAST, e NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS island
  FROM m
)
SELECT
  cause,
  culprit,
  iteration,
  SUM(e - s) AS evidence_us,
  MIN(s) AS first_us,
  MAX(e) AS last_us
FROM (
  SELECT
    cause,
    culprit,
    iteration,
    island,
    MIN(s) AS s,
    MAX(e) AS e
  FROM u
  GROUP BY ALL
)
GROUP BY
  cause,
  culprit,
  iteration;

/* One row per culprit: its evidence, and whether it stands out enough to be blamed. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit AS
WITH ev AS (
  SELECT
    cause,
    culprit,
    SUM(evidence_us) / 1e6 AS evidence_s
  FROM st_culprit_iteration
  GROUP BY ALL
), c AS (
  SELECT
    cause,
    culprit,
    ANY_VALUE(host, TRUE) AS host,
    ANY_VALUE(rank, TRUE) AS rank,
    COUNT(*) AS slow_steps,
    SUM(retransmits) AS step_retransmits,
    COUNT(*) /* a queueing culprit's steps that lost packets too (its link's, merged into it) */ FILTER(WHERE
      retransmits >= (
        SELECT
          min_step_retransmits
        FROM st_params
      )) AS lossy_steps,
    MEDIAN(e - s) / 1e3 AS median_excess_ms,
    MEDIAN(lateness_us) / 1e3 AS median_lateness_ms,
    MEDIAN(base_us) / 1e3 AS median_base_ms,
    CASE
      WHEN SIZE(ARRAY_SORT(COLLECT_SET(collective))) = 0
      THEN NULL
      ELSE ARRAY_JOIN(ARRAY_SORT(COLLECT_SET(collective)), ', ')
    END AS collectives
  FROM st_slow_step_blame
  GROUP BY
    cause,
    culprit
)
SELECT
  c.*
  EXCEPT (step_retransmits),
  CASE
    WHEN c.cause = 'network'
    THEN COALESCE(t.retransmits, 0)
    ELSE c.step_retransmits
  END AS retransmits,
  CASE WHEN c.cause = 'queueing' THEN COALESCE(n.queued_samples, 0) END AS queued_samples,
  ev.evidence_s,
  ev.evidence_s / NULLIF(SUM(ev.evidence_s) OVER (PARTITION BY c.cause), 0) AS share_of_cause,
  o.extra_own_us / 1e3 AS extra_own_ms,
  CASE
    WHEN c.cause = 'unexplained'
    THEN FALSE
    WHEN c.cause = 'network'
    THEN TRUE
    WHEN c.cause = 'straggler' AND NOT o.extra_own_us IS NULL
    THEN o.extra_own_us >= GREATEST(p.min_excess_us, 500 * c.median_lateness_ms)
    ELSE ev.evidence_s / NULLIF(SUM(ev.evidence_s) OVER (PARTITION BY c.cause), 0) >= 0.5
    AND COALESCE(qc.own_share >= p.queueing_contrast * qc.other_share, TRUE)
  END AS evidenced
FROM c
JOIN ev
  USING (cause, culprit)
CROSS JOIN st_params AS p
LEFT JOIN st_queueing_contrast AS qc
  ON c.cause = 'queueing' AND qc.culprit = c.culprit
LEFT JOIN st_rank_own_time AS o
  ON c.cause = 'straggler' AND o.host = c.host AND o.rank = c.rank
LEFT JOIN st_culprit_queued_samples AS n
  ON c.cause = 'queueing' AND n.kind = 'slow' AND n.culprit = c.culprit
LEFT JOIN st_culprit_retransmits AS t
  ON c.cause = 'network' AND t.culprit = c.culprit;

/* The iterations in which a blamed straggler did extra work of its own (at least */
/* `min_excess_us` more than the other ranks' median): a rank slow in every step is not late by */
/* the same margin in each collective (the others' arrivals vary), so its lateness leaves */
/* evidence in only some iterations; the others are not healthy either. */
CREATE OR REPLACE TEMPORARY VIEW st_straggler_iteration AS
SELECT
  c.cause,
  c.culprit,
  o.iteration,
  o.extra_own_us
FROM st_culprit AS c
JOIN st_rank_iteration_own AS o
  ON o.host = c.host AND o.rank = c.rank
CROSS JOIN st_params AS p
WHERE
  c.cause = 'straggler' AND c.evidenced AND o.extra_own_us >= p.min_excess_us;

/* The iterations each blamed culprit impaired: those its evidence fell in (a culprit with */
/* evidence), or a straggler's extra work. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_impaired_iteration AS
SELECT
  i.cause,
  i.culprit,
  i.iteration
FROM st_culprit_iteration AS i
JOIN st_culprit AS c
  USING (cause, culprit)
WHERE
  c.evidenced
UNION
SELECT
  cause,
  culprit,
  iteration
FROM st_straggler_iteration;

/* The job's step time per training iteration (ProfilerStep#N): the median over ranks, and */
/* whether any blamed culprit left evidence in it (or a blamed straggler did extra work in it). */
CREATE OR REPLACE TEMPORARY VIEW st_iteration AS
SELECT
  s.step AS iteration,
  MEDIAN(s.end_us - s.start_us) AS step_us,
  COUNT(*) AS ranks,
  EXISTS(
    SELECT
      1
    FROM st_culprit_impaired_iteration AS i
    WHERE
      i.iteration = s.step
  ) AS impaired
FROM st_profiler_step AS s
GROUP BY
  s.step;

/* Each blamed culprit's span: from the first to the last iteration it impaired (its evidence, */
/* or a straggler's extra work). */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_span AS
SELECT
  cause,
  culprit,
  MIN(iteration) AS first_iteration,
  MAX(iteration) AS last_iteration
FROM st_culprit_impaired_iteration
GROUP BY
  cause,
  culprit;

/* The iterations the healthy step time is the median of: those without a blamed culprit's */
/* evidence; of them, the ones outside every culprit's span alone when there are enough of them */
/* (`st_enough_healthy`): inside, a step without evidence ran while the fault held too. A */
/* reordering link that began at step 29 of 80 left evidence in 30 of the 50 steps after it, */
/* and the 20 others were as slow (131 ms against 116 ms before): taken as healthy they raised */
/* the healthy step to 125 ms and hid half of what the fault cost. */
CREATE OR REPLACE TEMPORARY VIEW st_healthy_iteration AS
WITH marked AS (
  SELECT
    t.iteration,
    t.step_us,
    t.impaired,
    NOT t.impaired
    AND NOT EXISTS(
      SELECT
        1
      FROM st_culprit_span AS s
      WHERE
        t.iteration BETWEEN s.first_iteration AND s.last_iteration
    ) AS outside
  FROM st_iteration AS t
), counts AS (
  SELECT
    COUNT(*) FILTER(WHERE
      outside) AS outside_healthy,
    COUNT(*) AS iterations
  FROM marked
)
SELECT
  m.iteration,
  m.step_us
FROM marked AS m
CROSS JOIN counts AS c
WHERE
  CASE
    WHEN (
      (
        c.outside_healthy
      ) >= (
        SELECT
          GREATEST(p.min_healthy_iterations, p.min_healthy_share * (
            c.iterations
          ))
        FROM st_params AS p
      )
    )
    THEN m.outside
    ELSE NOT m.impaired
  END;

/* The healthy step time: the median of `st_healthy_iteration` when the job has enough of them */
/* (a fault that began mid-run, or one that strikes some steps only); else the step time of a */
/* run of the same job without the problem (`analyze --baseline`). */
CREATE OR REPLACE TEMPORARY VIEW st_healthy_step AS
WITH counts AS (
  SELECT
    (
      SELECT
        MEDIAN(step_us)
      FROM st_healthy_iteration
    ) AS step_us,
    (
      SELECT
        COUNT(*)
      FROM st_healthy_iteration
    ) AS healthy_iterations,
    (
      SELECT
        COUNT(*)
      FROM st_iteration
    ) AS iterations
), own AS (
  SELECT
    *,
    (
      (
        healthy_iterations
      ) >= (
        SELECT
          GREATEST(p.min_healthy_iterations, p.min_healthy_share * (
            iterations
          ))
        FROM st_params AS p
      )
    ) AS usable
  FROM counts
)
SELECT
  CASE WHEN own.usable THEN own.step_us ELSE b.step_us END AS healthy_step_us,
  own.healthy_iterations,
  own.iterations,
  own.usable OR NOT b.step_us IS NULL AS usable,
  CASE WHEN own.usable THEN 'run' WHEN NOT b.step_us IS NULL THEN 'baseline' END AS healthy_from
FROM own
LEFT JOIN st_baseline AS b
  ON TRUE;

/* The steps a culprit held without leaving evidence: inside its span, impaired by no culprit, */
/* charged to it when they look like its steps and not like the healthy ones: slower than the */
/* healthy iterations by a one-sided rank-sum test (z ≥ `quiet_slower_z`; its own span's steps */
/* left out of the healthy side), and their median nearer its impaired steps' median than the */
/* healthy one. A fault that holds every step does not leave evidence in each (a reordering */
/* link: 30 of the 50 steps after its onset, the 20 others as slow); one that strikes some */
/* steps leaves the others as fast as the healthy ones, and a machine whose steps drift a few */
/* percent while a culprit's rare slow steps come and go leaves the others nearer the healthy. */
/* Only against this run's own healthy steps (`healthy_from = 'run'`). Shared among the */
/* culprits whose span holds the step by their evidence. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_quiet_iteration AS
WITH span AS (
  SELECT
    s.*,
    c.evidence_s
  FROM st_culprit_span AS s
  JOIN st_culprit AS c
    USING (cause, culprit)
), quiet AS (
  SELECT
    s.cause,
    s.culprit,
    t.iteration,
    t.step_us,
    s.evidence_s / NULLIF(SUM(s.evidence_s) OVER (PARTITION BY t.iteration), 0) AS share
  FROM span AS s
  JOIN st_iteration AS t
    ON t.iteration BETWEEN s.first_iteration AND s.last_iteration
  WHERE
    NOT t.impaired
), pooled AS (
  SELECT
    cause,
    culprit,
    TRUE AS is_quiet,
    step_us
  FROM quiet
  UNION ALL
  SELECT
    s.cause,
    s.culprit,
    FALSE AS is_quiet,
    h.step_us
  FROM span AS s
  JOIN st_healthy_iteration AS h
    ON NOT h.iteration BETWEEN s.first_iteration AND s.last_iteration
), ranked AS (
  /* tied step times share their average rank */
  SELECT
    *,
    RANK() OVER (PARTITION BY cause, culprit ORDER BY step_us NULLS LAST) + (
      COUNT(*) OVER (PARTITION BY cause, culprit, step_us) - 1
    ) / 2.0 AS r
  FROM pooled
), test AS (
  SELECT
    cause,
    culprit,
    COUNT(*) FILTER(WHERE
      is_quiet) AS n_quiet,
    COUNT(*) FILTER(WHERE
      NOT is_quiet) AS n_healthy,
    SUM(r) FILTER(WHERE
      is_quiet) AS rank_sum,
    MEDIAN(step_us) FILTER(WHERE
      is_quiet) AS quiet_median_us
  FROM ranked
  GROUP BY
    cause,
    culprit
), own AS (
  SELECT
    i.cause,
    i.culprit,
    MEDIAN(t.step_us) AS impaired_median_us
  FROM st_culprit_impaired_iteration AS i
  JOIN st_iteration AS t
    USING (iteration)
  GROUP BY
    i.cause,
    i.culprit
), judged AS (
  SELECT
    t.cause,
    t.culprit,
    (
      t.rank_sum - t.n_quiet * (
        t.n_quiet + 1
      ) / 2.0 - t.n_quiet * t.n_healthy / 2.0
    ) / SQRT(t.n_quiet * t.n_healthy * (
      t.n_quiet + t.n_healthy + 1
    ) / 12.0) AS slower_z,
    t.quiet_median_us,
    o.impaired_median_us
  FROM test AS t
  JOIN own AS o
    USING (cause, culprit)
  WHERE
    t.n_healthy > 0 AND t.n_quiet > 0
)
SELECT
  q.cause,
  q.culprit,
  q.iteration,
  q.step_us,
  q.share,
  j.slower_z
FROM quiet AS q
JOIN judged AS j
  USING (cause, culprit)
CROSS JOIN st_healthy_step AS h
CROSS JOIN st_params AS p
WHERE
  h.healthy_from = 'run'
  AND j.slower_z >= p.quiet_slower_z
  AND j.quiet_median_us - h.healthy_step_us >= (
    j.impaired_median_us - h.healthy_step_us
  ) / 2;

/* Per culprit: its charged steps without evidence and what they cost above the healthy step; */
/* a charge that adds nothing is no charge (no row). */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_quiet AS
SELECT
  q.cause,
  q.culprit,
  COUNT(*) AS quiet_iterations,
  ANY_VALUE(q.slower_z, TRUE) AS slower_z,
  AVG(q.step_us) / 1e3 AS quiet_mean_step_ms,
  SUM((
    q.step_us - h.healthy_step_us
  ) * q.share) / 1e6 AS quiet_excess_s
FROM st_culprit_quiet_iteration AS q
CROSS JOIN st_healthy_step AS h
GROUP BY
  q.cause,
  q.culprit
HAVING
  SUM((
    q.step_us - h.healthy_step_us
  ) * q.share) > 0;

/* What each culprit cost: every impaired iteration's step time above the healthy step time. */
/* The step time is what the job lost, whatever the evidence's intervals add up to (a late */
/* rank's wait overlaps work the others would do anyway; a retransmit stall shows only part of */
/* a recovery). A straggler's extra work in an iteration is charged to it first, up to that */
/* excess: the others waited at least that long for it, so the slowest rank's own work is the */
/* step's critical path, and RTTs that rise meanwhile (its host's busy CPU answering late, the */
/* others' flows idle) are not what held the step. The rest is shared among the culprits with */
/* evidence in the iteration in proportion to the evidence not already paid for (a straggler's */
/* lateness is the extra work just charged); without such evidence, among the stragglers by */
/* their extra work. Each iteration's charges add up to its excess. */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_cost AS
WITH parts AS (
  SELECT
    i.cause,
    i.culprit,
    i.iteration,
    i.evidence_us,
    0 AS extra_own_us
  FROM st_culprit_iteration AS i
  JOIN st_culprit AS c
    USING (cause, culprit)
  WHERE
    c.evidenced
  UNION ALL
  SELECT
    cause,
    culprit,
    iteration,
    0,
    extra_own_us
  FROM st_straggler_iteration
), b AS (
  SELECT
    cause,
    culprit,
    iteration,
    SUM(evidence_us) AS evidence_us,
    SUM(extra_own_us) AS extra_own_us
  FROM parts
  GROUP BY ALL
), w AS (
  SELECT
    b.*,
    t.step_us - h.healthy_step_us AS excess_us,
    h.healthy_step_us,
    h.healthy_from,
    t.step_us,
    SUM(b.extra_own_us) OVER (PARTITION BY b.iteration) AS iteration_own_us,
    COUNT(*) OVER (PARTITION BY b.iteration) AS iteration_culprits
  FROM b
  JOIN st_iteration AS t
    USING (iteration)
  CROSS JOIN st_healthy_step AS h
  WHERE
    h.usable
), own AS (
  SELECT
    *,
    LEAST(GREATEST(excess_us, 0), iteration_own_us) AS own_first_us
  FROM w
), charged AS (
  SELECT
    *,
    COALESCE(own_first_us * extra_own_us / NULLIF(iteration_own_us, 0), 0) AS own_charge_us
  FROM own
), rest AS (
  SELECT
    *,
    GREATEST(evidence_us - own_charge_us, 0) AS open_evidence_us,
    SUM(GREATEST(evidence_us - own_charge_us, 0)) OVER (PARTITION BY iteration) AS iteration_open_us
  FROM charged
)
SELECT
  cause,
  culprit,
  COUNT(*) AS iterations,
  GREATEST(
    0,
    SUM(
      own_charge_us + (
        excess_us - own_first_us
      ) * CASE
        WHEN iteration_open_us > 0
        THEN open_evidence_us / iteration_open_us
        WHEN iteration_own_us > 0
        THEN extra_own_us / iteration_own_us
        ELSE 1.0 / iteration_culprits
      END
    )
  ) / 1e6 AS step_excess_s,
  AVG(step_us) / 1e3 AS mean_step_ms,
  ANY_VALUE(healthy_step_us, TRUE) / 1e3 AS healthy_step_ms,
  ANY_VALUE(healthy_from, TRUE) AS healthy_from
FROM rest
GROUP BY
  cause,
  culprit;

/* Without a healthy step time (a straggler from the first step, no baseline), a straggler is */
/* priced by the extra work it did: its own time above the other ranks' in each iteration, what */
/* they waited for. Its lateness would also count the arrival spread of a healthy step. */
CREATE OR REPLACE TEMPORARY VIEW st_straggler_own_cost AS
SELECT
  cause,
  culprit,
  COUNT(*) AS iterations,
  SUM(extra_own_us) / 1e6 AS own_excess_s
FROM st_straggler_iteration
GROUP BY
  cause,
  culprit;

/* One row per culprit: the job time it cost, its evidence, and its share of all time lost. */
/* Priced by step time against the healthy step (`step_time`: this run's, or the baseline's), */
/* else a straggler by its extra own work (`own_time`), else by the evidence's own duration. */
CREATE OR REPLACE TEMPORARY VIEW st_slowdown AS
WITH priced AS (
  SELECT
    c.*,
    COALESCE(k.step_excess_s + COALESCE(q.quiet_excess_s, 0), o.own_excess_s, c.evidence_s) AS time_lost_s,
    CASE
      WHEN NOT k.step_excess_s IS NULL
      THEN 'step_time'
      WHEN NOT o.own_excess_s IS NULL
      THEN 'own_time'
      ELSE 'evidence'
    END AS priced_by,
    k.iterations AS impaired_iterations,
    k.mean_step_ms,
    k.healthy_step_ms,
    k.healthy_from,
    CASE WHEN NOT k.step_excess_s IS NULL THEN q.quiet_iterations END AS quiet_iterations,
    CASE WHEN NOT k.step_excess_s IS NULL THEN q.quiet_mean_step_ms END AS quiet_mean_step_ms,
    j.traced_s,
    j.steps
  FROM st_culprit AS c
  CROSS JOIN st_job_span AS j
  LEFT JOIN st_culprit_cost AS k
    USING (cause, culprit)
  LEFT JOIN st_straggler_own_cost AS o
    USING (cause, culprit)
  LEFT JOIN st_culprit_quiet AS q
    USING (cause, culprit)
)
SELECT
  *,
  time_lost_s / NULLIF(traced_s, 0) AS lost_fraction
FROM priced;

/* Culprits with evidence whose cost stays below the verdict's floors, largest first: an */
/* engineer asking why the job got slower still learns what came closest, by how much, and */
/* which floor kept it out (a rank 20 ms slower per step that cost the job 2 % is real, but no */
/* finding). */
CREATE OR REPLACE TEMPORARY VIEW st_below_floors AS
/* (costs rounded as `st_finding`'s, for the same reason: this list is printed largest first) */
SELECT
  d.cause,
  d.culprit,
  d.host,
  d.rank,
  d.slow_steps,
  ROUND(d.time_lost_s, 9) AS time_lost_s,
  ROUND(d.lost_fraction, 9) AS lost_fraction,
  d.traced_s,
  d.priced_by,
  CONCAT_WS(
    ', ',
    CASE
      WHEN d.slow_steps < p.min_culprit_steps
      THEN IF(
        CAST(IF(
          TYPEOF(p.min_culprit_steps) IN ('double', 'float'),
          BROUND(p.min_culprit_steps),
          ROUND(p.min_culprit_steps)
        ) AS BIGINT) IS NULL,
        NULL,
        FORMAT_STRING(
          'fewer than %d slow steps',
          CAST(IF(
            TYPEOF(p.min_culprit_steps) IN ('double', 'float'),
            BROUND(p.min_culprit_steps),
            ROUND(p.min_culprit_steps)
          ) AS BIGINT)
        )
      )
    END,
    CASE
      WHEN d.time_lost_s < p.min_lost_s
      THEN IF(
        p.min_lost_s IS NULL,
        NULL,
        FORMAT_STRING(
          'less than %s s',
          FORMAT_NUMBER(p.min_lost_s, IF((
            2
          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0'))
        )
      )
    END,
    CASE
      WHEN d.lost_fraction < p.min_lost_fraction
      THEN IF(
        100 * p.min_lost_fraction IS NULL,
        NULL,
        FORMAT_STRING(
          'less than %s%% of the traced time',
          FORMAT_NUMBER(100 * p.min_lost_fraction, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
        )
      )
    END
  ) AS below
FROM st_slowdown AS d
CROSS JOIN st_params AS p
WHERE
  d.evidenced
  AND d.cause <> 'unexplained'
  AND d.time_lost_s > 0
  AND NOT (
    (
      SELECT
        (
          d.slow_steps
        ) >= p.min_culprit_steps
        AND (
          d.time_lost_s
        ) >= p.min_lost_s
        AND (
          d.lost_fraction
        ) >= p.min_lost_fraction
      FROM st_params AS p
    )
  );

/* What such a link cost when the job also ran without it (it came mid-run): the step time of */
/* the iterations in which it held the most queued samples, above the median of the iterations */
/* that neither it nor a verdict culprit impaired, when there are enough of those (as in */
/* `st_healthy_step`). From the first step on there are not: it is priced against the baseline */
/* run's step time when there is one (`analyze --baseline`), else it stays unpriced. */
CREATE OR REPLACE TEMPORARY VIEW st_persistent_cost AS
WITH pc AS (
  SELECT
    q.culprit
  FROM st_persistent_queueing AS q, st_params AS p
  WHERE
    q.share_of_steps >= p.min_persistent_share
    AND q.share_of_queued_steps >= p.min_persistent_share
), imp AS (
  SELECT DISTINCT
    q.node AS culprit,
    x.iteration
  FROM st_step_queueing AS q
  JOIN st_collective_excess AS x
    USING (source, collective, step)
  CROSS JOIN st_params AS p
  WHERE
    q.node_samples >= p.min_step_queued_samples AND NOT x.iteration IS NULL
), t AS (
  SELECT
    pc.culprit,
    i.iteration,
    i.step_us,
    i.iteration IN (
      SELECT
        iteration
      FROM imp
      WHERE
        imp.culprit = pc.culprit
    ) AS queued,
    i.impaired /* priced by a culprit: its evidence, or a step without evidence charged to it */
    OR i.iteration IN (
      SELECT
        iteration
      FROM st_culprit_quiet_iteration
    ) AS impaired
  FROM pc
  CROSS JOIN st_iteration AS i
), own AS (
  SELECT
    culprit,
    MEDIAN(step_us) FILTER(WHERE
      NOT queued AND NOT impaired) AS healthy_step_us,
    COUNT(*) FILTER(WHERE
      NOT queued AND NOT impaired) AS healthy_iterations,
    COUNT(*) AS iterations
  FROM t
  GROUP BY
    culprit
), h AS (
  SELECT
    own.culprit,
    own.healthy_iterations,
    CASE
      WHEN (
        (
          own.healthy_iterations
        ) >= (
          SELECT
            GREATEST(p.min_healthy_iterations, p.min_healthy_share * (
              own.iterations
            ))
          FROM st_params AS p
        )
      )
      THEN own.healthy_step_us
      ELSE b.step_us
    END AS healthy_step_us,
    CASE
      WHEN (
        (
          own.healthy_iterations
        ) >= (
          SELECT
            GREATEST(p.min_healthy_iterations, p.min_healthy_share * (
              own.iterations
            ))
          FROM st_params AS p
        )
      )
      THEN 'run'
      WHEN NOT b.step_us IS NULL
      THEN 'baseline'
    END AS healthy_from
  FROM own
  LEFT JOIN st_baseline AS b
    ON TRUE
)
SELECT
  h.culprit,
  h.healthy_step_us / 1e3 AS healthy_step_ms,
  h.healthy_iterations,
  h.healthy_from,
  COUNT(*) FILTER(WHERE
    t.queued) AS impaired_iterations,
  AVG(t.step_us) FILTER(WHERE
    t.queued) / 1e3 AS mean_step_ms,
  GREATEST(0, SUM(t.step_us - h.healthy_step_us) FILTER(WHERE
    t.queued)) / 1e6 AS time_lost_s,
  COUNT(*) /* how many of its iterations a verdict culprit already impaired (and priced) */ FILTER(WHERE
    t.queued AND t.impaired) / NULLIF(COUNT(*) FILTER(WHERE
    t.queued), 0) AS shared_with_verdict
FROM h
JOIN t
  USING (culprit)
WHERE
  NOT h.healthy_from IS NULL
GROUP BY
  h.culprit,
  h.healthy_step_us,
  h.healthy_iterations,
  h.healthy_from;

/* For a node or `link A - B` blamed for queueing: the delivery rate of its slowest bulk flow, */
/* against the median of the bulk flows that touch neither it nor (for a link) its ends. A slow */
/* link delivers less to its own flows and to no others. Bulk flows carry at least a quarter of */
/* the bytes of the busiest one (a ring's links; not the mesh's barrier connections, whose few */
/* bytes are sent at whatever rate the application offers). */
CREATE OR REPLACE TEMPORARY VIEW st_culprit_delivery AS
WITH c AS (
  SELECT
    culprit
  FROM st_persistent_queueing
  UNION
  SELECT
    culprit
  FROM st_slowdown
  WHERE
    cause = 'queueing'
), e AS (
  SELECT
    culprit,
    (
      CASE
        WHEN (
          culprit
        ) LIKE 'link %'
        THEN SPLIT(SUBSTRING((
          culprit
        ), 6), CONCAT('\\Q', ' - ', '\\E'))
        ELSE ARRAY((
          culprit
        ))
      END
    ) AS ends
  FROM c
), bulk AS (
  SELECT
    *
  FROM st_flow_delivery
  WHERE
    acked_bytes >= 0.25 * (
      SELECT
        MAX(acked_bytes)
      FROM st_flow_delivery
    )
)
SELECT
  e.culprit,
  MIN(f.rate_bps) FILTER(WHERE
    ARRAY_CONTAINS(e.ends, f.node) OR ARRAY_CONTAINS(e.ends, f.remote_node)) AS slowest_bps,
  MEDIAN(f.rate_bps) FILTER(WHERE
    NOT ARRAY_CONTAINS(e.ends, f.node) AND NOT ARRAY_CONTAINS(e.ends, f.remote_node)) AS others_bps
FROM e
CROSS JOIN bulk AS f
GROUP BY
  e.culprit;

/* Each node's busiest interface by name (where the capture has interface names): where an */
/* operator looks first. */
CREATE OR REPLACE TEMPORARY VIEW st_node_iface AS
SELECT
  node,
  MAX_BY(iface, bytes) AS iface
FROM (
  SELECT
    n.node,
    f.local_iface AS iface,
    SUM(COALESCE(f.bytes_sent, 0) + COALESCE(f.bytes_received, 0)) AS bytes
  FROM st_flow AS f
  JOIN st_flow_node AS n
    USING (host, flow_id)
  WHERE
    f.local_iface <> f.local_addr
  GROUP BY ALL
)
GROUP BY
  node;

CREATE OR REPLACE TEMPORARY VIEW st_culprit_when AS
WITH hit AS (
  SELECT
    cause,
    culprit,
    iteration,
    MIN(first_us) AS first_us,
    MAX(last_us) AS last_us,
    SUM(evidence_us) AS evidence_us
  FROM (
    SELECT
      i.cause,
      i.culprit,
      i.iteration,
      i.first_us,
      i.last_us,
      i.evidence_us
    FROM st_culprit_iteration AS i
    JOIN st_culprit AS c
      USING (cause, culprit)
    WHERE
      c.evidenced
    UNION ALL
    /* a slow link from the first step (`st_persistent_queueing`): the steps it queued most in */
    SELECT
      'persistent',
      q.node,
      x.iteration,
      x.first_start_us,
      x.last_end_us,
      x.last_end_us - x.first_start_us
    FROM st_step_queueing AS q
    JOIN st_collective_excess AS x
      USING (source, collective, step), st_params AS p
    WHERE
      q.node_samples >= p.min_step_queued_samples
      AND q.node IN (
        SELECT
          culprit
        FROM st_persistent_queueing
        WHERE
          share_of_steps >= p.min_persistent_share
          AND share_of_queued_steps >= p.min_persistent_share
      )
  )
  GROUP BY
    cause,
    culprit,
    iteration
), its AS (
  SELECT DISTINCT
    iteration
  FROM st_collective_excess
  WHERE
    NOT iteration IS NULL
), grid AS (
  SELECT
    c.cause,
    c.culprit,
    i.iteration,
    NOT h.iteration IS NULL AS held,
    CASE
      WHEN h.iteration IS NULL
      THEN 0.0
      WHEN c.cause = 'straggler'
      THEN COALESCE(LEAST(1.0, h.evidence_us / NULLIF(c.typical_us, 0)), 1.0)
      ELSE 1.0
    END AS weight
  FROM (
    SELECT
      cause,
      culprit,
      MEDIAN(evidence_us) AS typical_us
    FROM hit
    WHERE
      NOT iteration IS NULL
    GROUP BY ALL
  ) AS c
  CROSS JOIN its AS i
  LEFT JOIN hit AS h
    ON h.cause = c.cause AND h.culprit = c.culprit AND h.iteration = i.iteration
), split AS (
  SELECT
    *,
    SUM(weight) OVER later AS held_from,
    COUNT(*) OVER later AS steps_from,
    SUM(weight) OVER (PARTITION BY cause, culprit) AS held_all,
    COUNT(*) OVER (PARTITION BY cause, culprit) AS steps
  FROM grid
  WINDOW later AS (
    PARTITION BY cause, culprit
    ORDER BY iteration DESC
    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
  )
), scored AS (
  SELECT
    *,
    (
      CASE
        WHEN (
          held_from
        ) <= 0 OR (
          held_from
        ) >= (
          steps_from
        )
        THEN 0.0
        ELSE (
          held_from
        ) * LN((
          held_from
        ) / (
          steps_from
        )) + (
          (
            steps_from
          ) - (
            held_from
          )
        ) * LN(1 - (
          held_from
        ) / (
          steps_from
        ))
      END
    ) + (
      CASE
        WHEN (
          held_all - held_from
        ) <= 0
        OR (
          held_all - held_from
        ) >= (
          steps - steps_from
        )
        THEN 0.0
        ELSE (
          held_all - held_from
        ) * LN((
          held_all - held_from
        ) / (
          steps - steps_from
        )) + (
          (
            steps - steps_from
          ) - (
            held_all - held_from
          )
        ) * LN(1 - (
          held_all - held_from
        ) / (
          steps - steps_from
        ))
      END
    ) - (
      CASE
        WHEN (
          held_all
        ) <= 0 OR (
          held_all
        ) >= (
          steps
        )
        THEN 0.0
        ELSE (
          held_all
        ) * LN((
          held_all
        ) / (
          steps
        )) + (
          (
            steps
          ) - (
            held_all
          )
        ) * LN(1 - (
          held_all
        ) / (
          steps
        ))
      END
    ) AS gain,
    held_from /* held up at least as often from it on as before it */ / steps_from >= COALESCE((
      held_all - held_from
    ) / NULLIF(steps - steps_from, 0), 0) AS rising
  FROM split
  WHERE
    held
), ranked AS (
  SELECT
    *,
    MAX(gain) FILTER(WHERE
      rising) OVER (PARTITION BY cause, culprit) AS max_gain
  FROM scored
), onset AS (
  SELECT
    cause,
    culprit,
    CASE
      WHEN MAX(gain) FILTER(WHERE
        rising) > 1.5 * LN(ANY_VALUE(steps, TRUE))
      THEN CASE
        WHEN cause = 'straggler'
        THEN MAX_BY(iteration, (gain, -iteration)) FILTER(WHERE
          rising)
        ELSE MIN(iteration) FILTER(WHERE
          rising AND gain >= max_gain - 1.92)
      END
      ELSE COALESCE(MIN(iteration) FILTER(WHERE
        weight >= 0.5), MIN(iteration))
    END AS onset_iteration,
    COALESCE(MAX(gain) FILTER(WHERE
      rising) > 1.5 * LN(ANY_VALUE(steps, TRUE)), FALSE) AS changed
  FROM ranked
  GROUP BY
    cause,
    culprit
), stepped AS (
  SELECT
    o.cause,
    o.culprit,
    o.onset_iteration,
    o.changed,
    MAX(g.iteration) FILTER(WHERE
      g.held) AS last_iteration,
    COUNT(*) FILTER(WHERE
      g.held AND g.iteration >= o.onset_iteration) AS held_after,
    COUNT(*) FILTER(WHERE
      g.held AND g.iteration < o.onset_iteration) AS held_before,
    COUNT(*) FILTER(WHERE
      g.iteration < o.onset_iteration) AS steps_before
  FROM onset AS o
  JOIN grid AS g
    USING (cause, culprit)
  GROUP BY ALL
), counted AS (
  /* traced steps, counted (a profiler schedule may leave gaps in the numbers) */
  SELECT
    t.*,
    COUNT(*) FILTER(WHERE
      i.iteration BETWEEN t.onset_iteration AND t.last_iteration) AS steps_between,
    COUNT(*) FILTER(WHERE
      i.iteration > t.last_iteration) AS steps_after
  FROM stepped AS t
  CROSS JOIN its AS i
  GROUP BY ALL
), span AS (
  SELECT
    MIN(iteration) AS first_it,
    MAX(iteration) AS last_it
  FROM its
)
SELECT
  h.cause,
  h.culprit,
  COALESCE(MIN(h.first_us) FILTER(WHERE
    h.iteration = t.onset_iteration), MIN(h.first_us)) AS first_us,
  MAX(h.last_us) AS last_us,
  t.onset_iteration AS first_step,
  CASE
    WHEN t.onset_iteration IS NULL
    THEN IF(
      (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                MIN(h.first_us)
              )) IN ('double', 'float'),
              BROUND((
                MIN(h.first_us)
              )),
              ROUND((
                MIN(h.first_us)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL
      OR (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                MAX(h.last_us)
              )) IN ('double', 'float'),
              BROUND((
                MAX(h.last_us)
              )),
              ROUND((
                MAX(h.last_us)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL
      OR (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                ANY_VALUE(j.span_start_us, TRUE)
              )) IN ('double', 'float'),
              BROUND((
                ANY_VALUE(j.span_start_us, TRUE)
              )),
              ROUND((
                ANY_VALUE(j.span_start_us, TRUE)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL
      OR (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                ANY_VALUE(j.span_end_us, TRUE)
              )) IN ('double', 'float'),
              BROUND((
                ANY_VALUE(j.span_end_us, TRUE)
              )),
              ROUND((
                ANY_VALUE(j.span_end_us, TRUE)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL,
      NULL,
      FORMAT_STRING(
        'from %s to %s UTC (traced: %s to %s)',
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  MIN(h.first_us)
                )) IN ('double', 'float'),
                BROUND((
                  MIN(h.first_us)
                )),
                ROUND((
                  MIN(h.first_us)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        ),
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  MAX(h.last_us)
                )) IN ('double', 'float'),
                BROUND((
                  MAX(h.last_us)
                )),
                ROUND((
                  MAX(h.last_us)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        ),
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  ANY_VALUE(j.span_start_us, TRUE)
                )) IN ('double', 'float'),
                BROUND((
                  ANY_VALUE(j.span_start_us, TRUE)
                )),
                ROUND((
                  ANY_VALUE(j.span_start_us, TRUE)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        ),
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  ANY_VALUE(j.span_end_us, TRUE)
                )) IN ('double', 'float'),
                BROUND((
                  ANY_VALUE(j.span_end_us, TRUE)
                )),
                ROUND((
                  ANY_VALUE(j.span_end_us, TRUE)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        )
      )
    )
    ELSE IF(
      CASE
        WHEN t.onset_iteration = ANY_VALUE(sp.first_it, TRUE)
        THEN 'there from the first traced step,'
        WHEN NOT t.changed
        THEN 'there throughout the traced steps (no change point), first at'
        ELSE 'began at'
      END IS NULL
      OR t.onset_iteration IS NULL
      OR (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                MIN(h.first_us) FILTER(WHERE
                  h.iteration = t.onset_iteration)
              )) IN ('double', 'float'),
              BROUND((
                MIN(h.first_us) FILTER(WHERE
                  h.iteration = t.onset_iteration)
              )),
              ROUND((
                MIN(h.first_us) FILTER(WHERE
                  h.iteration = t.onset_iteration)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL
      OR t.held_after IS NULL
      OR (
        IF(
          (
            t.steps_between
          ) IS NULL
          OR (
            'step'
          ) IS NULL
          OR CASE WHEN (
            t.steps_between
          ) = 1 THEN '' ELSE 's' END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              t.steps_between
            ),
            (
              'step'
            ),
            CASE WHEN (
              t.steps_between
            ) = 1 THEN '' ELSE 's' END
          )
        )
      ) IS NULL
      OR t.last_iteration IS NULL
      OR (
        DATE_FORMAT(
          TIMESTAMP_MICROS(
            CAST(IF(
              TYPEOF((
                MAX(h.last_us)
              )) IN ('double', 'float'),
              BROUND((
                MAX(h.last_us)
              )),
              ROUND((
                MAX(h.last_us)
              ))
            ) AS BIGINT)
          ),
          'HH:mm:ss'
        )
      ) IS NULL
      OR CASE
        WHEN t.steps_after = 0
        THEN ', the last traced step: still going when the trace ended'
        ELSE IF(
          (
            IF(
              (
                t.steps_after
              ) IS NULL
              OR (
                'step'
              ) IS NULL
              OR CASE WHEN (
                t.steps_after
              ) = 1 THEN '' ELSE 's' END IS NULL,
              NULL,
              FORMAT_STRING(
                '%d %s%s',
                (
                  t.steps_after
                ),
                (
                  'step'
                ),
                CASE WHEN (
                  t.steps_after
                ) = 1 THEN '' ELSE 's' END
              )
            )
          ) IS NULL
          OR ANY_VALUE(sp.last_it, TRUE) IS NULL,
          NULL,
          FORMAT_STRING(
            '; none in the %s after it (the trace ends at step %d)',
            (
              IF(
                (
                  t.steps_after
                ) IS NULL
                OR (
                  'step'
                ) IS NULL
                OR CASE WHEN (
                  t.steps_after
                ) = 1 THEN '' ELSE 's' END IS NULL,
                NULL,
                FORMAT_STRING(
                  '%d %s%s',
                  (
                    t.steps_after
                  ),
                  (
                    'step'
                  ),
                  CASE WHEN (
                    t.steps_after
                  ) = 1 THEN '' ELSE 's' END
                )
              )
            ),
            ANY_VALUE(sp.last_it, TRUE)
          )
        )
      END IS NULL
      OR CASE
        WHEN t.held_before > 0
        THEN IF(
          t.held_before IS NULL
          OR (
            IF(
              (
                t.steps_before
              ) IS NULL
              OR (
                'step'
              ) IS NULL
              OR CASE WHEN (
                t.steps_before
              ) = 1 THEN '' ELSE 's' END IS NULL,
              NULL,
              FORMAT_STRING(
                '%d %s%s',
                (
                  t.steps_before
                ),
                (
                  'step'
                ),
                CASE WHEN (
                  t.steps_before
                ) = 1 THEN '' ELSE 's' END
              )
            )
          ) IS NULL,
          NULL,
          FORMAT_STRING(
            '; before it, %d of %s',
            t.held_before,
            (
              IF(
                (
                  t.steps_before
                ) IS NULL
                OR (
                  'step'
                ) IS NULL
                OR CASE WHEN (
                  t.steps_before
                ) = 1 THEN '' ELSE 's' END IS NULL,
                NULL,
                FORMAT_STRING(
                  '%d %s%s',
                  (
                    t.steps_before
                  ),
                  (
                    'step'
                  ),
                  CASE WHEN (
                    t.steps_before
                  ) = 1 THEN '' ELSE 's' END
                )
              )
            )
          )
        )
        ELSE ''
      END IS NULL,
      NULL,
      FORMAT_STRING(
        '%s training step %d (%s UTC): held up %d of the %s from there to step %d (%s)%s%s',
        CASE
          WHEN t.onset_iteration = ANY_VALUE(sp.first_it, TRUE)
          THEN 'there from the first traced step,'
          WHEN NOT t.changed
          THEN 'there throughout the traced steps (no change point), first at'
          ELSE 'began at'
        END,
        t.onset_iteration,
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  MIN(h.first_us) FILTER(WHERE
                    h.iteration = t.onset_iteration)
                )) IN ('double', 'float'),
                BROUND((
                  MIN(h.first_us) FILTER(WHERE
                    h.iteration = t.onset_iteration)
                )),
                ROUND((
                  MIN(h.first_us) FILTER(WHERE
                    h.iteration = t.onset_iteration)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        ),
        t.held_after,
        (
          IF(
            (
              t.steps_between
            ) IS NULL
            OR (
              'step'
            ) IS NULL
            OR CASE WHEN (
              t.steps_between
            ) = 1 THEN '' ELSE 's' END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                t.steps_between
              ),
              (
                'step'
              ),
              CASE WHEN (
                t.steps_between
              ) = 1 THEN '' ELSE 's' END
            )
          )
        ),
        t.last_iteration,
        (
          DATE_FORMAT(
            TIMESTAMP_MICROS(
              CAST(IF(
                TYPEOF((
                  MAX(h.last_us)
                )) IN ('double', 'float'),
                BROUND((
                  MAX(h.last_us)
                )),
                ROUND((
                  MAX(h.last_us)
                ))
              ) AS BIGINT)
            ),
            'HH:mm:ss'
          )
        ),
        CASE
          WHEN t.steps_after = 0
          THEN ', the last traced step: still going when the trace ended'
          ELSE IF(
            (
              IF(
                (
                  t.steps_after
                ) IS NULL
                OR (
                  'step'
                ) IS NULL
                OR CASE WHEN (
                  t.steps_after
                ) = 1 THEN '' ELSE 's' END IS NULL,
                NULL,
                FORMAT_STRING(
                  '%d %s%s',
                  (
                    t.steps_after
                  ),
                  (
                    'step'
                  ),
                  CASE WHEN (
                    t.steps_after
                  ) = 1 THEN '' ELSE 's' END
                )
              )
            ) IS NULL
            OR ANY_VALUE(sp.last_it, TRUE) IS NULL,
            NULL,
            FORMAT_STRING(
              '; none in the %s after it (the trace ends at step %d)',
              (
                IF(
                  (
                    t.steps_after
                  ) IS NULL
                  OR (
                    'step'
                  ) IS NULL
                  OR CASE WHEN (
                    t.steps_after
                  ) = 1 THEN '' ELSE 's' END IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%d %s%s',
                    (
                      t.steps_after
                    ),
                    (
                      'step'
                    ),
                    CASE WHEN (
                      t.steps_after
                    ) = 1 THEN '' ELSE 's' END
                  )
                )
              ),
              ANY_VALUE(sp.last_it, TRUE)
            )
          )
        END,
        CASE
          WHEN t.held_before > 0
          THEN IF(
            t.held_before IS NULL
            OR (
              IF(
                (
                  t.steps_before
                ) IS NULL
                OR (
                  'step'
                ) IS NULL
                OR CASE WHEN (
                  t.steps_before
                ) = 1 THEN '' ELSE 's' END IS NULL,
                NULL,
                FORMAT_STRING(
                  '%d %s%s',
                  (
                    t.steps_before
                  ),
                  (
                    'step'
                  ),
                  CASE WHEN (
                    t.steps_before
                  ) = 1 THEN '' ELSE 's' END
                )
              )
            ) IS NULL,
            NULL,
            FORMAT_STRING(
              '; before it, %d of %s',
              t.held_before,
              (
                IF(
                  (
                    t.steps_before
                  ) IS NULL
                  OR (
                    'step'
                  ) IS NULL
                  OR CASE WHEN (
                    t.steps_before
                  ) = 1 THEN '' ELSE 's' END IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%d %s%s',
                    (
                      t.steps_before
                    ),
                    (
                      'step'
                    ),
                    CASE WHEN (
                      t.steps_before
                    ) = 1 THEN '' ELSE 's' END
                  )
                )
              )
            )
          )
          ELSE ''
        END
      )
    )
  END AS seen_when
FROM hit AS h
LEFT JOIN counted AS t
  USING (cause, culprit)
CROSS JOIN span AS sp
CROSS JOIN st_job_span AS j
GROUP BY
  h.cause,
  h.culprit,
  t.onset_iteration,
  t.changed,
  t.last_iteration,
  t.held_after,
  t.held_before,
  t.steps_before,
  t.steps_between,
  t.steps_after;

/* ---------------------------------------------------------------------------------------- */
/* Findings: every diagnosis above that crosses its threshold, ranked within its category */
/* (score: higher is worse; comparable within a category only) */
/* ---------------------------------------------------------------------------------------- */
/* The jobs each host's data flows and RDMA QPs belong to, from the cgroups of their sockets */
/* and processes: the Slurm job (`slurm_job`), else the Kubernetes pod (`pod_uid`). A finding */
/* about a host names them ("job 4121: ..."): on a cluster that runs many jobs, whose slowdown */
/* it is. The three that moved the most bytes, then how many more. Null where nothing carries a */
/* label (a recording made before these columns, processes outside any job). */
CREATE OR REPLACE TEMPORARY VIEW st_host_job AS
WITH labelled AS (
  SELECT
    f.host,
    COALESCE('job ' || f.slurm_job, 'pod ' || f.pod_uid) AS job,
    COALESCE(f.bytes_sent, 0) + COALESCE(f.bytes_received, 0) AS bytes
  FROM flows AS f
  JOIN st_data_flow AS d
    USING (host, flow_id)
  UNION ALL
  SELECT
    host,
    COALESCE('job ' || slurm_job, 'pod ' || pod_uid),
    0
  FROM qps
), per_job AS (
  SELECT
    host,
    job,
    SUM(bytes) AS bytes
  FROM labelled
  WHERE
    NOT job IS NULL
  GROUP BY
    host,
    job
), ranked AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY host ORDER BY bytes DESC, job NULLS LAST) AS n,
    COUNT(*) OVER (PARTITION BY host) AS jobs
  FROM per_job
)
SELECT
  host,
  CASE
    WHEN SIZE(TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT((
      n
    ) AS k0, job AS v))), s -> s.v)) = 0
    THEN NULL
    ELSE ARRAY_JOIN(
      TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT((
        n
      ) AS k0, job AS v))), s -> s.v),
      ', '
    )
  END || CASE
    WHEN MAX(jobs) > 3
    THEN IF(MAX(jobs) - 3 IS NULL, NULL, FORMAT_STRING(' and %d more', MAX(jobs) - 3))
    ELSE ''
  END AS job
FROM ranked
WHERE
  n <= 3
GROUP BY
  host;

/* The job of one flow (`st_flow.flow_label`): a finding about a flow names its own job, not */
/* every job of its host. */
CREATE OR REPLACE TEMPORARY VIEW st_flow_job AS
SELECT
  fl.flow_label,
  ANY_VALUE(COALESCE('job ' || f.slurm_job, 'pod ' || f.pod_uid), TRUE) AS job
FROM st_flow AS fl
JOIN flows AS f
  USING (host, flow_id)
WHERE
  NOT COALESCE(f.slurm_job, f.pod_uid) IS NULL
GROUP BY
  fl.flow_label;

CREATE OR REPLACE TEMPORARY VIEW st_finding AS
/* Ranks that arrived last, each with its own work per training step against the other ranks' */
/* (`st_rank_own_time`). One that did no more of it (less than the verdict asks of a straggler) */
/* was held up by something else, typically its previous transfer on a slow link: under a rate */
/* limit on node0 a rank of node3 arrived last in 193 of 308 steps with 1.6 ms *less* own work. */
/* A rank the verdict names as a straggler is listed whatever its share of the whole trace: a */
/* rank slowed from step 25 of 80 arrived last in 48 % of the steps, under the 2/ranks floor, */
/* and the report said "the other ranks waited for it" above "Straggler ranks: nothing found". */
/* Still only for a collective it arrived last in most often, and in enough steps: not for */
/* each collective where it once was the last (a broadcast at the start). */
WITH late_rank AS (
  SELECT
    'straggler' AS category,
    'rank' AS scope,
    'rank ' || t.rank AS subject,
    t.host AS host,
    t.rank AS rank,
    t.share_last AS score,
    IF(
      t.rank IS NULL
      OR t.host IS NULL
      OR t.steps_last IS NULL
      OR t.steps IS NULL
      OR t.collective IS NULL
      OR (
        CASE (
            t.source
          )
          WHEN 'nccl_kernel'
          THEN 'NCCL kernels'
          WHEN 'comm_kernel'
          THEN 'communication kernels'
          WHEN 'backend'
          THEN 'the backend\'s own annotations, e.g. gloo:all_reduce'
          WHEN 'c10d'
          THEN 'c10d calls'
          WHEN 'param_comms'
          THEN 'record_param_comms'
          WHEN 'nccl_call'
          THEN 'NCCL API calls'
          ELSE (
            t.source
          )
        END
      ) IS NULL
      OR t.median_lateness_us / 1000 IS NULL
      OR 100 * t.fastest_wait_fraction IS NULL
      OR CASE
        WHEN o.extra_own_us IS NULL
        THEN ''
        ELSE IF(
          o.extra_own_us / 1000 IS NULL,
          NULL,
          FORMAT_STRING(
            '; its own work per training step: %s ms against the other ranks\' median',
            IF(o.extra_own_us / 1000 >= 0, '+', '') || FORMAT_NUMBER(o.extra_own_us / 1000, IF((
              1
            ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
          )
        )
      END IS NULL,
      NULL,
      FORMAT_STRING(
        'rank %d (%s) arrived last at %d of %d %s steps (timed by %s), late by %s ms (median); the fastest ranks waited %s%% of those steps%s',
        t.rank,
        t.host,
        t.steps_last,
        t.steps,
        t.collective,
        (
          CASE (
              t.source
            )
            WHEN 'nccl_kernel'
            THEN 'NCCL kernels'
            WHEN 'comm_kernel'
            THEN 'communication kernels'
            WHEN 'backend'
            THEN 'the backend\'s own annotations, e.g. gloo:all_reduce'
            WHEN 'c10d'
            THEN 'c10d calls'
            WHEN 'param_comms'
            THEN 'record_param_comms'
            WHEN 'nccl_call'
            THEN 'NCCL API calls'
            ELSE (
              t.source
            )
          END
        ),
        FORMAT_NUMBER(t.median_lateness_us / 1000, IF((
          2
        ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')),
        FORMAT_NUMBER(100 * t.fastest_wait_fraction, IF((
          0
        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
        CASE
          WHEN o.extra_own_us IS NULL
          THEN ''
          ELSE IF(
            o.extra_own_us / 1000 IS NULL,
            NULL,
            FORMAT_STRING(
              '; its own work per training step: %s ms against the other ranks\' median',
              IF(o.extra_own_us / 1000 >= 0, '+', '') || FORMAT_NUMBER(o.extra_own_us / 1000, IF((
                1
              ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
            )
          )
        END
      )
    ) AS summary,
    COALESCE(o.extra_own_us < GREATEST(p.min_spread_us, 0.5 * t.median_lateness_us), FALSE)
    AND NOT EXISTS(
      SELECT
        1 AS `1`
      FROM st_culprit AS c
      WHERE
        c.cause = 'straggler' AND c.evidenced AND c.host = t.host AND c.rank = t.rank
    ) AS held_up /* a rank the verdict names as a straggler is one here too */
  FROM st_straggler AS t
  CROSS JOIN st_params AS p
  LEFT JOIN st_rank_own_time AS o
    ON o.host = t.host AND o.rank = t.rank
  /* the verdict's stragglers (`s` below: evidenced, above its floors) */
  LEFT JOIN (
    SELECT DISTINCT
      st_slowdown.host AS host,
      st_slowdown.rank AS rank
    FROM st_slowdown AS st_slowdown
    WHERE
      st_slowdown.cause = 'straggler'
      AND st_slowdown.evidenced
      AND (
        (
          SELECT
            (
              st_slowdown.slow_steps
            ) >= p.min_culprit_steps
            AND (
              st_slowdown.time_lost_s
            ) >= p.min_lost_s
            AND (
              st_slowdown.lost_fraction
            ) >= p.min_lost_fraction AS _col_0
          FROM st_params AS p
        )
      )
  ) AS named
    ON named.host = t.host AND named.rank = t.rank
  WHERE
    (
      t.steps_last >= p.min_straggler_steps
      AND t.share_last >= GREATEST(p.min_straggler_share, 2.0 / t.ranks)
    )
    OR (
      NOT named.rank IS NULL
      AND t.steps_last >= p.min_straggler_steps
      AND t.steps_last = t.most_steps_last
    )
), f AS (
  SELECT
    'retransmits' AS category,
    'peer' AS scope,
    st_retrans_peer.remote_addr AS subject,
    CAST(NULL AS STRING) AS host,
    CAST(NULL AS BIGINT) AS rank,
    CAST(st_retrans_peer.retransmits /* ranked by how many segments were lost, not by ratio: a small flow losing a few */ /* segments is a smaller hot spot than a bulk flow losing hundreds */ AS DOUBLE) AS score,
    IF(
      st_retrans_peer.remote_addr IS NULL
      OR COALESCE(
        ' (' || (
          SELECT
            MIN(o.node) AS _col_0
          FROM st_addr_owner AS o
          WHERE
            o.addr = st_retrans_peer.remote_addr
        ) || ')',
        ''
      ) IS NULL
      OR st_retrans_peer.retransmits IS NULL
      OR (
        IF(
          (
            st_retrans_peer.flows_with_retrans
          ) IS NULL
          OR (
            'flow'
          ) IS NULL
          OR CASE WHEN (
            st_retrans_peer.flows_with_retrans
          ) = 1 THEN '' ELSE 's' END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              st_retrans_peer.flows_with_retrans
            ),
            (
              'flow'
            ),
            CASE WHEN (
              st_retrans_peer.flows_with_retrans
            ) = 1 THEN '' ELSE 's' END
          )
        )
      ) IS NULL
      OR (
        IF(
          (
            st_retrans_peer.hosts
          ) IS NULL
          OR (
            'host'
          ) IS NULL
          OR CASE WHEN (
            st_retrans_peer.hosts
          ) = 1 THEN '' ELSE 's' END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              st_retrans_peer.hosts
            ),
            (
              'host'
            ),
            CASE WHEN (
              st_retrans_peer.hosts
            ) = 1 THEN '' ELSE 's' END
          )
        )
      ) IS NULL
      OR (
        COALESCE(
          IF(
            100 * (
              st_retrans_peer.retrans_ratio
            ) IS NULL,
            NULL,
            FORMAT_STRING(
              '%s%% of data segments',
              CASE
                WHEN (
                  100 * (
                    st_retrans_peer.retrans_ratio
                  )
                ) = 0
                THEN '0'
                WHEN (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_peer.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) >= -4
                AND (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_peer.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) < 3
                THEN REGEXP_REPLACE(
                  REGEXP_REPLACE(
                    FORMAT_NUMBER(
                      (
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      ),
                      IF(
                        (
                          2 - (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_peer.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ) > 0,
                        CONCAT(
                          '0.',
                          REPEAT(
                            '0',
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          )
                        ),
                        '0'
                      )
                    ),
                    '(\\.[0-9]*?)0+$',
                    '$1'
                  ),
                  '\\.$',
                  ''
                )
                ELSE CONCAT(
                  REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        ) / POWER(
                          10,
                          (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_peer.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ),
                        IF((
                          2
                        ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  ),
                  'e',
                  IF(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    ) < 0,
                    '-',
                    '+'
                  ),
                  IF(
                    ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) < 10,
                    '0',
                    ''
                  ),
                  CAST(ABS(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    )
                  ) AS STRING)
                )
              END
            )
          ),
          'share of data segments not recorded'
        )
      ) IS NULL
      OR (
        CASE
          WHEN COALESCE((
            st_retrans_peer.dsack_dups
          ), 0) > 0
          THEN IF(
            LEAST((
              st_retrans_peer.dsack_dups
            ), (
              st_retrans_peer.retransmits
            )) IS NULL,
            NULL,
            FORMAT_STRING(
              '; the receivers already had %d of the segments resent (DSACK: late, not lost)',
              LEAST((
                st_retrans_peer.dsack_dups
              ), (
                st_retrans_peer.retransmits
              ))
            )
          )
          ELSE ''
        END
      ) IS NULL
      OR COALESCE(st_retrans_peer.burstiness, 0) IS NULL
      OR (
        IF(
          (
            COALESCE(st_retrans_peer.collapse_windows, 0)
          ) IS NULL
          OR (
            'window'
          ) IS NULL
          OR CASE
            WHEN (
              COALESCE(st_retrans_peer.collapse_windows, 0)
            ) = 1
            THEN ''
            ELSE 's'
          END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              COALESCE(st_retrans_peer.collapse_windows, 0)
            ),
            (
              'window'
            ),
            CASE
              WHEN (
                COALESCE(st_retrans_peer.collapse_windows, 0)
              ) = 1
              THEN ''
              ELSE 's'
            END
          )
        )
      ) IS NULL,
      NULL,
      FORMAT_STRING(
        'peer %s%s: %d retransmits over %s from %s (%s)%s, burstiness %s, %s where throughput collapsed with them',
        st_retrans_peer.remote_addr,
        COALESCE(
          ' (' || (
            SELECT
              MIN(o.node) AS _col_0
            FROM st_addr_owner AS o
            WHERE
              o.addr = st_retrans_peer.remote_addr
          ) || ')',
          ''
        ),
        st_retrans_peer.retransmits,
        (
          IF(
            (
              st_retrans_peer.flows_with_retrans
            ) IS NULL
            OR (
              'flow'
            ) IS NULL
            OR CASE WHEN (
              st_retrans_peer.flows_with_retrans
            ) = 1 THEN '' ELSE 's' END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                st_retrans_peer.flows_with_retrans
              ),
              (
                'flow'
              ),
              CASE WHEN (
                st_retrans_peer.flows_with_retrans
              ) = 1 THEN '' ELSE 's' END
            )
          )
        ),
        (
          IF(
            (
              st_retrans_peer.hosts
            ) IS NULL
            OR (
              'host'
            ) IS NULL
            OR CASE WHEN (
              st_retrans_peer.hosts
            ) = 1 THEN '' ELSE 's' END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                st_retrans_peer.hosts
              ),
              (
                'host'
              ),
              CASE WHEN (
                st_retrans_peer.hosts
              ) = 1 THEN '' ELSE 's' END
            )
          )
        ),
        (
          COALESCE(
            IF(
              100 * (
                st_retrans_peer.retrans_ratio
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                '%s%% of data segments',
                CASE
                  WHEN (
                    100 * (
                      st_retrans_peer.retrans_ratio
                    )
                  ) = 0
                  THEN '0'
                  WHEN (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) >= -4
                  AND (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_peer.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_peer.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) < 3
                  THEN REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        ),
                        IF(
                          (
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ) > 0,
                          CONCAT(
                            '0.',
                            REPEAT(
                              '0',
                              2 - (
                                FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                )))) + IF(
                                  ABS((
                                    100 * (
                                      st_retrans_peer.retrans_ratio
                                    )
                                  )) / POWER(10, FLOOR(LOG(10, ABS((
                                    100 * (
                                      st_retrans_peer.retrans_ratio
                                    )
                                  ))))) >= 9.995,
                                  1,
                                  0
                                )
                              )
                            )
                          ),
                          '0'
                        )
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  )
                  ELSE CONCAT(
                    REGEXP_REPLACE(
                      REGEXP_REPLACE(
                        FORMAT_NUMBER(
                          (
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          ) / POWER(
                            10,
                            (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_peer.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_peer.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ),
                          IF((
                            2
                          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                        ),
                        '(\\.[0-9]*?)0+$',
                        '$1'
                      ),
                      '\\.$',
                      ''
                    ),
                    'e',
                    IF(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      ) < 0,
                      '-',
                      '+'
                    ),
                    IF(
                      ABS(
                        (
                          FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          )))) + IF(
                            ABS((
                              100 * (
                                st_retrans_peer.retrans_ratio
                              )
                            )) / POWER(10, FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_peer.retrans_ratio
                              )
                            ))))) >= 9.995,
                            1,
                            0
                          )
                        )
                      ) < 10,
                      '0',
                      ''
                    ),
                    CAST(ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_peer.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_peer.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) AS STRING)
                  )
                END
              )
            ),
            'share of data segments not recorded'
          )
        ),
        (
          CASE
            WHEN COALESCE((
              st_retrans_peer.dsack_dups
            ), 0) > 0
            THEN IF(
              LEAST((
                st_retrans_peer.dsack_dups
              ), (
                st_retrans_peer.retransmits
              )) IS NULL,
              NULL,
              FORMAT_STRING(
                '; the receivers already had %d of the segments resent (DSACK: late, not lost)',
                LEAST((
                  st_retrans_peer.dsack_dups
                ), (
                  st_retrans_peer.retransmits
                ))
              )
            )
            ELSE ''
          END
        ),
        FORMAT_NUMBER(
          COALESCE(st_retrans_peer.burstiness, 0),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        (
          IF(
            (
              COALESCE(st_retrans_peer.collapse_windows, 0)
            ) IS NULL
            OR (
              'window'
            ) IS NULL
            OR CASE
              WHEN (
                COALESCE(st_retrans_peer.collapse_windows, 0)
              ) = 1
              THEN ''
              ELSE 's'
            END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                COALESCE(st_retrans_peer.collapse_windows, 0)
              ),
              (
                'window'
              ),
              CASE
                WHEN (
                  COALESCE(st_retrans_peer.collapse_windows, 0)
                ) = 1
                THEN ''
                ELSE 's'
              END
            )
          )
        )
      )
    ) AS summary
  FROM st_retrans_peer AS st_retrans_peer, st_params AS p
  WHERE
    st_retrans_peer.retransmits >= p.min_retransmits
    AND (
      st_retrans_peer.retrans_ratio >= p.min_retrans_ratio
      OR st_retrans_peer.collapse_windows > 0
    )
  UNION ALL
  SELECT
    'retransmits' AS retransmits,
    'interface' AS interface,
    st_retrans_interface.host || '/' || st_retrans_interface.local_iface AS _col_2,
    st_retrans_interface.host AS host,
    NULL AS _col_4,
    CAST(st_retrans_interface.retransmits AS DOUBLE) AS retransmits,
    IF(
      st_retrans_interface.host IS NULL
      OR st_retrans_interface.local_iface IS NULL
      OR st_retrans_interface.retransmits IS NULL
      OR (
        IF(
          (
            st_retrans_interface.flows_with_retrans
          ) IS NULL
          OR (
            'flow'
          ) IS NULL
          OR CASE WHEN (
            st_retrans_interface.flows_with_retrans
          ) = 1 THEN '' ELSE 's' END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              st_retrans_interface.flows_with_retrans
            ),
            (
              'flow'
            ),
            CASE WHEN (
              st_retrans_interface.flows_with_retrans
            ) = 1 THEN '' ELSE 's' END
          )
        )
      ) IS NULL
      OR COALESCE(' sent toward ' || st_retrans_interface.toward, '') IS NULL
      OR (
        COALESCE(
          IF(
            100 * (
              st_retrans_interface.retrans_ratio
            ) IS NULL,
            NULL,
            FORMAT_STRING(
              '%s%% of data segments',
              CASE
                WHEN (
                  100 * (
                    st_retrans_interface.retrans_ratio
                  )
                ) = 0
                THEN '0'
                WHEN (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_interface.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) >= -4
                AND (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_interface.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) < 3
                THEN REGEXP_REPLACE(
                  REGEXP_REPLACE(
                    FORMAT_NUMBER(
                      (
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      ),
                      IF(
                        (
                          2 - (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_interface.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ) > 0,
                        CONCAT(
                          '0.',
                          REPEAT(
                            '0',
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          )
                        ),
                        '0'
                      )
                    ),
                    '(\\.[0-9]*?)0+$',
                    '$1'
                  ),
                  '\\.$',
                  ''
                )
                ELSE CONCAT(
                  REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        ) / POWER(
                          10,
                          (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_interface.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ),
                        IF((
                          2
                        ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  ),
                  'e',
                  IF(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    ) < 0,
                    '-',
                    '+'
                  ),
                  IF(
                    ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) < 10,
                    '0',
                    ''
                  ),
                  CAST(ABS(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    )
                  ) AS STRING)
                )
              END
            )
          ),
          'share of data segments not recorded'
        )
      ) IS NULL
      OR (
        CASE
          WHEN COALESCE((
            st_retrans_interface.dsack_dups
          ), 0) > 0
          THEN IF(
            LEAST((
              st_retrans_interface.dsack_dups
            ), (
              st_retrans_interface.retransmits
            )) IS NULL,
            NULL,
            FORMAT_STRING(
              '; the receivers already had %d of the segments resent (DSACK: late, not lost)',
              LEAST((
                st_retrans_interface.dsack_dups
              ), (
                st_retrans_interface.retransmits
              ))
            )
          )
          ELSE ''
        END
      ) IS NULL
      OR COALESCE(st_retrans_interface.burstiness, 0) IS NULL
      OR (
        IF(
          (
            COALESCE(st_retrans_interface.collapse_windows, 0)
          ) IS NULL
          OR (
            'window'
          ) IS NULL
          OR CASE
            WHEN (
              COALESCE(st_retrans_interface.collapse_windows, 0)
            ) = 1
            THEN ''
            ELSE 's'
          END IS NULL,
          NULL,
          FORMAT_STRING(
            '%d %s%s',
            (
              COALESCE(st_retrans_interface.collapse_windows, 0)
            ),
            (
              'window'
            ),
            CASE
              WHEN (
                COALESCE(st_retrans_interface.collapse_windows, 0)
              ) = 1
              THEN ''
              ELSE 's'
            END
          )
        )
      ) IS NULL,
      NULL,
      FORMAT_STRING(
        'interface %s/%s: %d retransmits over %s%s (%s)%s, burstiness %s, %s where throughput collapsed with them',
        st_retrans_interface.host,
        st_retrans_interface.local_iface,
        st_retrans_interface.retransmits,
        (
          IF(
            (
              st_retrans_interface.flows_with_retrans
            ) IS NULL
            OR (
              'flow'
            ) IS NULL
            OR CASE WHEN (
              st_retrans_interface.flows_with_retrans
            ) = 1 THEN '' ELSE 's' END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                st_retrans_interface.flows_with_retrans
              ),
              (
                'flow'
              ),
              CASE WHEN (
                st_retrans_interface.flows_with_retrans
              ) = 1 THEN '' ELSE 's' END
            )
          )
        ),
        COALESCE(' sent toward ' || st_retrans_interface.toward, ''),
        (
          COALESCE(
            IF(
              100 * (
                st_retrans_interface.retrans_ratio
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                '%s%% of data segments',
                CASE
                  WHEN (
                    100 * (
                      st_retrans_interface.retrans_ratio
                    )
                  ) = 0
                  THEN '0'
                  WHEN (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) >= -4
                  AND (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_interface.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_interface.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) < 3
                  THEN REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        ),
                        IF(
                          (
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ) > 0,
                          CONCAT(
                            '0.',
                            REPEAT(
                              '0',
                              2 - (
                                FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                )))) + IF(
                                  ABS((
                                    100 * (
                                      st_retrans_interface.retrans_ratio
                                    )
                                  )) / POWER(10, FLOOR(LOG(10, ABS((
                                    100 * (
                                      st_retrans_interface.retrans_ratio
                                    )
                                  ))))) >= 9.995,
                                  1,
                                  0
                                )
                              )
                            )
                          ),
                          '0'
                        )
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  )
                  ELSE CONCAT(
                    REGEXP_REPLACE(
                      REGEXP_REPLACE(
                        FORMAT_NUMBER(
                          (
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          ) / POWER(
                            10,
                            (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_interface.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_interface.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ),
                          IF((
                            2
                          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                        ),
                        '(\\.[0-9]*?)0+$',
                        '$1'
                      ),
                      '\\.$',
                      ''
                    ),
                    'e',
                    IF(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      ) < 0,
                      '-',
                      '+'
                    ),
                    IF(
                      ABS(
                        (
                          FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          )))) + IF(
                            ABS((
                              100 * (
                                st_retrans_interface.retrans_ratio
                              )
                            )) / POWER(10, FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_interface.retrans_ratio
                              )
                            ))))) >= 9.995,
                            1,
                            0
                          )
                        )
                      ) < 10,
                      '0',
                      ''
                    ),
                    CAST(ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_interface.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_interface.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) AS STRING)
                  )
                END
              )
            ),
            'share of data segments not recorded'
          )
        ),
        (
          CASE
            WHEN COALESCE((
              st_retrans_interface.dsack_dups
            ), 0) > 0
            THEN IF(
              LEAST((
                st_retrans_interface.dsack_dups
              ), (
                st_retrans_interface.retransmits
              )) IS NULL,
              NULL,
              FORMAT_STRING(
                '; the receivers already had %d of the segments resent (DSACK: late, not lost)',
                LEAST((
                  st_retrans_interface.dsack_dups
                ), (
                  st_retrans_interface.retransmits
                ))
              )
            )
            ELSE ''
          END
        ),
        FORMAT_NUMBER(
          COALESCE(st_retrans_interface.burstiness, 0),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        (
          IF(
            (
              COALESCE(st_retrans_interface.collapse_windows, 0)
            ) IS NULL
            OR (
              'window'
            ) IS NULL
            OR CASE
              WHEN (
                COALESCE(st_retrans_interface.collapse_windows, 0)
              ) = 1
              THEN ''
              ELSE 's'
            END IS NULL,
            NULL,
            FORMAT_STRING(
              '%d %s%s',
              (
                COALESCE(st_retrans_interface.collapse_windows, 0)
              ),
              (
                'window'
              ),
              CASE
                WHEN (
                  COALESCE(st_retrans_interface.collapse_windows, 0)
                ) = 1
                THEN ''
                ELSE 's'
              END
            )
          )
        )
      )
    ) AS _col_6
  FROM st_retrans_interface AS st_retrans_interface, st_params AS p
  WHERE
    st_retrans_interface.retransmits >= p.min_retransmits
    AND (
      st_retrans_interface.retrans_ratio >= p.min_retrans_ratio
      OR st_retrans_interface.collapse_windows > 0
    )
  UNION ALL
  SELECT
    'retransmits' AS retransmits,
    'flow' AS flow,
    st_retrans_flow.flow_label AS flow_label,
    st_retrans_flow.host AS host,
    NULL AS _col_4,
    CAST(st_retrans_flow.retransmits AS DOUBLE) AS retransmits,
    IF(
      st_retrans_flow.flow_label IS NULL
      OR st_retrans_flow.retransmits IS NULL
      OR (
        COALESCE(
          IF(
            100 * (
              st_retrans_flow.retrans_ratio
            ) IS NULL,
            NULL,
            FORMAT_STRING(
              '%s%% of data segments',
              CASE
                WHEN (
                  100 * (
                    st_retrans_flow.retrans_ratio
                  )
                ) = 0
                THEN '0'
                WHEN (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_flow.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) >= -4
                AND (
                  FLOOR(LOG(10, ABS((
                    100 * (
                      st_retrans_flow.retrans_ratio
                    )
                  )))) + IF(
                    ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    ))))) >= 9.995,
                    1,
                    0
                  )
                ) < 3
                THEN REGEXP_REPLACE(
                  REGEXP_REPLACE(
                    FORMAT_NUMBER(
                      (
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      ),
                      IF(
                        (
                          2 - (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_flow.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ) > 0,
                        CONCAT(
                          '0.',
                          REPEAT(
                            '0',
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          )
                        ),
                        '0'
                      )
                    ),
                    '(\\.[0-9]*?)0+$',
                    '$1'
                  ),
                  '\\.$',
                  ''
                )
                ELSE CONCAT(
                  REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        ) / POWER(
                          10,
                          (
                            FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_flow.retrans_ratio
                              )
                            )))) + IF(
                              ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              )) / POWER(10, FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              ))))) >= 9.995,
                              1,
                              0
                            )
                          )
                        ),
                        IF((
                          2
                        ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  ),
                  'e',
                  IF(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    ) < 0,
                    '-',
                    '+'
                  ),
                  IF(
                    ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) < 10,
                    '0',
                    ''
                  ),
                  CAST(ABS(
                    (
                      FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      )))) + IF(
                        ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    )
                  ) AS STRING)
                )
              END
            )
          ),
          'share of data segments not recorded'
        )
      ) IS NULL
      OR st_retrans_flow.retrans_per_s IS NULL
      OR CASE
        WHEN COALESCE(st_retrans_flow.dsack_dups, 0) > 0
        THEN IF(
          st_retrans_flow.dsack_dups IS NULL,
          NULL,
          FORMAT_STRING(
            '; the receiver already had %d of the segments resent (DSACK: late, not lost)',
            st_retrans_flow.dsack_dups
          )
        )
        ELSE ''
      END IS NULL
      OR CASE
        WHEN COALESCE(st_retrans_flow.loss_recovery_s, 0) > 0
        THEN IF(
          st_retrans_flow.loss_recovery_s IS NULL,
          NULL,
          FORMAT_STRING(
            '; in loss recovery %s s',
            FORMAT_NUMBER(
              st_retrans_flow.loss_recovery_s,
              IF((
                2
              ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
            )
          )
        )
        ELSE ''
      END IS NULL
      OR CASE
        WHEN COALESCE(st_retrans_flow.rto_count, 0) > 0
        THEN IF(
          st_retrans_flow.rto_count IS NULL OR st_retrans_flow.rto_recovery_s IS NULL,
          NULL,
          FORMAT_STRING(
            '; %d retransmission timeouts, stalled %s s after them',
            st_retrans_flow.rto_count,
            FORMAT_NUMBER(st_retrans_flow.rto_recovery_s, IF((
              2
            ) > 0, CONCAT('0.', REPEAT('0', 2)), '0'))
          )
        )
        ELSE ''
      END IS NULL
      OR COALESCE(st_retrans_flow.burstiness, 0) IS NULL
      OR COALESCE(st_retrans_flow.collapse_windows, 0) IS NULL
      OR COALESCE(st_retrans_flow.windows_with_retrans, 0) IS NULL,
      NULL,
      FORMAT_STRING(
        'flow %s: %d retransmits (%s, %s/s)%s%s%s, burstiness %s, throughput collapsed in %d of %d windows with retransmits',
        st_retrans_flow.flow_label,
        st_retrans_flow.retransmits,
        (
          COALESCE(
            IF(
              100 * (
                st_retrans_flow.retrans_ratio
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                '%s%% of data segments',
                CASE
                  WHEN (
                    100 * (
                      st_retrans_flow.retrans_ratio
                    )
                  ) = 0
                  THEN '0'
                  WHEN (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) >= -4
                  AND (
                    FLOOR(LOG(10, ABS((
                      100 * (
                        st_retrans_flow.retrans_ratio
                      )
                    )))) + IF(
                      ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      )) / POWER(10, FLOOR(LOG(10, ABS((
                        100 * (
                          st_retrans_flow.retrans_ratio
                        )
                      ))))) >= 9.995,
                      1,
                      0
                    )
                  ) < 3
                  THEN REGEXP_REPLACE(
                    REGEXP_REPLACE(
                      FORMAT_NUMBER(
                        (
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        ),
                        IF(
                          (
                            2 - (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ) > 0,
                          CONCAT(
                            '0.',
                            REPEAT(
                              '0',
                              2 - (
                                FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                )))) + IF(
                                  ABS((
                                    100 * (
                                      st_retrans_flow.retrans_ratio
                                    )
                                  )) / POWER(10, FLOOR(LOG(10, ABS((
                                    100 * (
                                      st_retrans_flow.retrans_ratio
                                    )
                                  ))))) >= 9.995,
                                  1,
                                  0
                                )
                              )
                            )
                          ),
                          '0'
                        )
                      ),
                      '(\\.[0-9]*?)0+$',
                      '$1'
                    ),
                    '\\.$',
                    ''
                  )
                  ELSE CONCAT(
                    REGEXP_REPLACE(
                      REGEXP_REPLACE(
                        FORMAT_NUMBER(
                          (
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          ) / POWER(
                            10,
                            (
                              FLOOR(LOG(10, ABS((
                                100 * (
                                  st_retrans_flow.retrans_ratio
                                )
                              )))) + IF(
                                ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                )) / POWER(10, FLOOR(LOG(10, ABS((
                                  100 * (
                                    st_retrans_flow.retrans_ratio
                                  )
                                ))))) >= 9.995,
                                1,
                                0
                              )
                            )
                          ),
                          IF((
                            2
                          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                        ),
                        '(\\.[0-9]*?)0+$',
                        '$1'
                      ),
                      '\\.$',
                      ''
                    ),
                    'e',
                    IF(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      ) < 0,
                      '-',
                      '+'
                    ),
                    IF(
                      ABS(
                        (
                          FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          )))) + IF(
                            ABS((
                              100 * (
                                st_retrans_flow.retrans_ratio
                              )
                            )) / POWER(10, FLOOR(LOG(10, ABS((
                              100 * (
                                st_retrans_flow.retrans_ratio
                              )
                            ))))) >= 9.995,
                            1,
                            0
                          )
                        )
                      ) < 10,
                      '0',
                      ''
                    ),
                    CAST(ABS(
                      (
                        FLOOR(LOG(10, ABS((
                          100 * (
                            st_retrans_flow.retrans_ratio
                          )
                        )))) + IF(
                          ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * (
                              st_retrans_flow.retrans_ratio
                            )
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    ) AS STRING)
                  )
                END
              )
            ),
            'share of data segments not recorded'
          )
        ),
        FORMAT_NUMBER(st_retrans_flow.retrans_per_s, IF((
          1
        ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
        CASE
          WHEN COALESCE(st_retrans_flow.dsack_dups, 0) > 0
          THEN IF(
            st_retrans_flow.dsack_dups IS NULL,
            NULL,
            FORMAT_STRING(
              '; the receiver already had %d of the segments resent (DSACK: late, not lost)',
              st_retrans_flow.dsack_dups
            )
          )
          ELSE ''
        END,
        CASE
          WHEN COALESCE(st_retrans_flow.loss_recovery_s, 0) > 0
          THEN IF(
            st_retrans_flow.loss_recovery_s IS NULL,
            NULL,
            FORMAT_STRING(
              '; in loss recovery %s s',
              FORMAT_NUMBER(
                st_retrans_flow.loss_recovery_s,
                IF((
                  2
                ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
              )
            )
          )
          ELSE ''
        END,
        CASE
          WHEN COALESCE(st_retrans_flow.rto_count, 0) > 0
          THEN IF(
            st_retrans_flow.rto_count IS NULL OR st_retrans_flow.rto_recovery_s IS NULL,
            NULL,
            FORMAT_STRING(
              '; %d retransmission timeouts, stalled %s s after them',
              st_retrans_flow.rto_count,
              FORMAT_NUMBER(st_retrans_flow.rto_recovery_s, IF((
                2
              ) > 0, CONCAT('0.', REPEAT('0', 2)), '0'))
            )
          )
          ELSE ''
        END,
        FORMAT_NUMBER(
          COALESCE(st_retrans_flow.burstiness, 0),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        COALESCE(st_retrans_flow.collapse_windows, 0),
        COALESCE(st_retrans_flow.windows_with_retrans, 0)
      )
    ) AS _col_6
  FROM st_retrans_flow AS st_retrans_flow, st_params AS p
  WHERE
    st_retrans_flow.retransmits >= p.min_retransmits
    AND (
      st_retrans_flow.retrans_ratio >= p.min_retrans_ratio
      OR st_retrans_flow.collapse_windows > 0
    )
  UNION ALL
  SELECT
    'rdma_retransmits' AS rdma_retransmits,
    'device' AS device,
    st_rdma_device.host || '/' || st_rdma_device.device AS _col_2,
    st_rdma_device.host AS host,
    NULL AS _col_4,
    st_rdma_device.loss_ratio AS loss_ratio,
    IF(
      st_rdma_device.host IS NULL
      OR st_rdma_device.device IS NULL
      OR st_rdma_device.port IS NULL
      OR CASE
        WHEN st_rdma_device.netdev IS NULL
        THEN ''
        ELSE ', netdev ' || st_rdma_device.netdev
      END IS NULL
      OR st_rdma_device.loss_events IS NULL
      OR st_rdma_device.retry_events IS NULL
      OR st_rdma_device.packets IS NULL
      OR 100 * st_rdma_device.loss_ratio IS NULL
      OR st_rdma_device.loss_counters IS NULL
      OR CASE
        WHEN st_rdma_device.busiest_qps IS NULL
        THEN ''
        ELSE IF(
          st_rdma_device.busiest_qps IS NULL,
          NULL,
          FORMAT_STRING('; busiest QPs: %s', st_rdma_device.busiest_qps)
        )
      END IS NULL,
      NULL,
      FORMAT_STRING(
        'RDMA device %s/%s (port %d%s): %d sequence gaps (lost packets) and %d retries over %d packets (gaps %s%%; %s): the NIC recovered lost packets in hardware, which TCP never sees%s',
        st_rdma_device.host,
        st_rdma_device.device,
        st_rdma_device.port,
        CASE
          WHEN st_rdma_device.netdev IS NULL
          THEN ''
          ELSE ', netdev ' || st_rdma_device.netdev
        END,
        st_rdma_device.loss_events,
        st_rdma_device.retry_events,
        st_rdma_device.packets,
        CASE
          WHEN (
            100 * st_rdma_device.loss_ratio
          ) = 0
          THEN '0'
          WHEN (
            FLOOR(LOG(10, ABS((
              100 * st_rdma_device.loss_ratio
            )))) + IF(
              ABS((
                100 * st_rdma_device.loss_ratio
              )) / POWER(10, FLOOR(LOG(10, ABS((
                100 * st_rdma_device.loss_ratio
              ))))) >= 9.995,
              1,
              0
            )
          ) >= -4
          AND (
            FLOOR(LOG(10, ABS((
              100 * st_rdma_device.loss_ratio
            )))) + IF(
              ABS((
                100 * st_rdma_device.loss_ratio
              )) / POWER(10, FLOOR(LOG(10, ABS((
                100 * st_rdma_device.loss_ratio
              ))))) >= 9.995,
              1,
              0
            )
          ) < 3
          THEN REGEXP_REPLACE(
            REGEXP_REPLACE(
              FORMAT_NUMBER(
                (
                  100 * st_rdma_device.loss_ratio
                ),
                IF(
                  (
                    2 - (
                      FLOOR(LOG(10, ABS((
                        100 * st_rdma_device.loss_ratio
                      )))) + IF(
                        ABS((
                          100 * st_rdma_device.loss_ratio
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * st_rdma_device.loss_ratio
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    )
                  ) > 0,
                  CONCAT(
                    '0.',
                    REPEAT(
                      '0',
                      2 - (
                        FLOOR(LOG(10, ABS((
                          100 * st_rdma_device.loss_ratio
                        )))) + IF(
                          ABS((
                            100 * st_rdma_device.loss_ratio
                          )) / POWER(10, FLOOR(LOG(10, ABS((
                            100 * st_rdma_device.loss_ratio
                          ))))) >= 9.995,
                          1,
                          0
                        )
                      )
                    )
                  ),
                  '0'
                )
              ),
              '(\\.[0-9]*?)0+$',
              '$1'
            ),
            '\\.$',
            ''
          )
          ELSE CONCAT(
            REGEXP_REPLACE(
              REGEXP_REPLACE(
                FORMAT_NUMBER(
                  (
                    100 * st_rdma_device.loss_ratio
                  ) / POWER(
                    10,
                    (
                      FLOOR(LOG(10, ABS((
                        100 * st_rdma_device.loss_ratio
                      )))) + IF(
                        ABS((
                          100 * st_rdma_device.loss_ratio
                        )) / POWER(10, FLOOR(LOG(10, ABS((
                          100 * st_rdma_device.loss_ratio
                        ))))) >= 9.995,
                        1,
                        0
                      )
                    )
                  ),
                  IF((
                    2
                  ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
                ),
                '(\\.[0-9]*?)0+$',
                '$1'
              ),
              '\\.$',
              ''
            ),
            'e',
            IF(
              (
                FLOOR(LOG(10, ABS((
                  100 * st_rdma_device.loss_ratio
                )))) + IF(
                  ABS((
                    100 * st_rdma_device.loss_ratio
                  )) / POWER(10, FLOOR(LOG(10, ABS((
                    100 * st_rdma_device.loss_ratio
                  ))))) >= 9.995,
                  1,
                  0
                )
              ) < 0,
              '-',
              '+'
            ),
            IF(
              ABS(
                (
                  FLOOR(LOG(10, ABS((
                    100 * st_rdma_device.loss_ratio
                  )))) + IF(
                    ABS((
                      100 * st_rdma_device.loss_ratio
                    )) / POWER(10, FLOOR(LOG(10, ABS((
                      100 * st_rdma_device.loss_ratio
                    ))))) >= 9.995,
                    1,
                    0
                  )
                )
              ) < 10,
              '0',
              ''
            ),
            CAST(ABS(
              (
                FLOOR(LOG(10, ABS((
                  100 * st_rdma_device.loss_ratio
                )))) + IF(
                  ABS((
                    100 * st_rdma_device.loss_ratio
                  )) / POWER(10, FLOOR(LOG(10, ABS((
                    100 * st_rdma_device.loss_ratio
                  ))))) >= 9.995,
                  1,
                  0
                )
              )
            ) AS STRING)
          )
        END,
        st_rdma_device.loss_counters,
        CASE
          WHEN st_rdma_device.busiest_qps IS NULL
          THEN ''
          ELSE IF(
            st_rdma_device.busiest_qps IS NULL,
            NULL,
            FORMAT_STRING('; busiest QPs: %s', st_rdma_device.busiest_qps)
          )
        END
      )
    ) AS _col_6
  FROM st_rdma_device AS st_rdma_device, st_params AS p
  WHERE
    st_rdma_device.loss_events >= p.min_retransmits
    AND st_rdma_device.loss_ratio >= p.min_retrans_ratio
  UNION ALL
  SELECT
    'loss_burst' AS loss_burst,
    'window' AS window,
    st_loss_burst.host || ' @ ' || DATE_FORMAT(st_loss_burst.window_start, 'yyyy-MM-dd HH:mm:ss') AS _col_2,
    st_loss_burst.host AS host,
    NULL AS _col_4,
    st_loss_burst.peak_ratio AS peak_ratio,
    IF(
      st_loss_burst.host IS NULL
      OR st_loss_burst.retransmits IS NULL
      OR DATE_FORMAT(st_loss_burst.window_start, 'HH:mm:ss') IS NULL
      OR COALESCE(st_loss_burst.others_mean, 0) IS NULL
      OR COALESCE(st_loss_burst.peers, '?') IS NULL,
      NULL,
      FORMAT_STRING(
        '%s: %d retransmits in the window starting %s (usual window: %s), peers %s',
        st_loss_burst.host,
        st_loss_burst.retransmits,
        DATE_FORMAT(st_loss_burst.window_start, 'HH:mm:ss'),
        FORMAT_NUMBER(
          COALESCE(st_loss_burst.others_mean, 0),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        COALESCE(st_loss_burst.peers, '?')
      )
    ) AS _col_6
  FROM st_loss_burst AS st_loss_burst, st_params AS p
  WHERE
    st_loss_burst.peak_ratio >= p.burst_peak_ratio
  UNION ALL
  SELECT
    'latency' AS latency,
    'tail_outlier' AS tail_outlier,
    st_latency_flow.flow_label AS flow_label,
    st_latency_flow.host AS host,
    NULL AS _col_4,
    st_latency_flow.p99_vs_fleet AS p99_vs_fleet,
    IF(
      st_latency_flow.flow_label IS NULL
      OR st_latency_flow.srtt_p99_us IS NULL
      OR st_latency_flow.p99_vs_fleet IS NULL
      OR st_latency_flow.fleet_median_p99_us IS NULL
      OR st_latency_flow.srtt_p50_us IS NULL
      OR st_latency_flow.srtt_max_us IS NULL,
      NULL,
      FORMAT_STRING(
        'flow %s: RTT p99 %s µs is %sx the fleet median p99 (%s µs); p50 %s µs, max %d µs',
        st_latency_flow.flow_label,
        FORMAT_NUMBER(st_latency_flow.srtt_p99_us, IF((
          0
        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
        FORMAT_NUMBER(st_latency_flow.p99_vs_fleet, IF((
          1
        ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
        FORMAT_NUMBER(
          st_latency_flow.fleet_median_p99_us,
          IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')
        ),
        FORMAT_NUMBER(st_latency_flow.srtt_p50_us, IF((
          0
        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
        st_latency_flow.srtt_max_us
      )
    ) AS _col_6
  FROM st_latency_flow AS st_latency_flow, st_params AS p
  WHERE
    st_latency_flow.samples >= p.min_rtt_samples
    AND st_latency_flow.p99_vs_fleet >= p.tail_outlier_ratio
    AND st_latency_flow.flow_bytes >= p.min_flow_bytes
    AND st_latency_flow.srtt_p99_us - st_latency_flow.fleet_median_p99_us >= p.min_queueing_us
  UNION ALL
  SELECT
    'latency' AS latency,
    'queueing' AS queueing,
    st_latency_flow.flow_label AS flow_label,
    st_latency_flow.host AS host,
    NULL AS _col_4,
    st_latency_flow.rtt_inflation AS rtt_inflation,
    IF(
      st_latency_flow.flow_label IS NULL
      OR st_latency_flow.srtt_p50_us IS NULL
      OR st_latency_flow.rtt_inflation IS NULL
      OR st_latency_flow.base_rtt_us IS NULL,
      NULL,
      FORMAT_STRING(
        'flow %s: median RTT %s µs is %sx its own base RTT (%s µs): queueing on the path',
        st_latency_flow.flow_label,
        FORMAT_NUMBER(st_latency_flow.srtt_p50_us, IF((
          0
        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
        FORMAT_NUMBER(st_latency_flow.rtt_inflation, IF((
          1
        ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
        FORMAT_NUMBER(st_latency_flow.base_rtt_us, IF((
          0
        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
      )
    ) AS _col_6
  FROM st_latency_flow AS st_latency_flow, st_params AS p, st_healthy_queueing AS q
  WHERE
    st_latency_flow.samples >= p.min_rtt_samples
    AND st_latency_flow.rtt_inflation >= p.degraded_rtt_inflation
    AND st_latency_flow.flow_bytes >= p.min_flow_bytes
    AND st_latency_flow.srtt_p50_us - st_latency_flow.base_rtt_us >= q.threshold_us
  UNION ALL
  SELECT
    'contention' AS contention,
    st_contention.scope AS scope,
    st_contention.subject AS subject,
    NULL AS _col_3,
    NULL AS _col_4,
    st_contention.together_windows / st_contention.windows * st_contention.together_flows AS _col_5,
    IF(
      st_contention.scope IS NULL
      OR st_contention.subject IS NULL
      OR CASE
        WHEN st_contention.scope = 'peer'
        THEN COALESCE(
          ' (' || (
            SELECT
              MIN(o.node) AS _col_0
            FROM st_addr_owner AS o
            WHERE
              o.addr = st_contention.subject
          ) || ')',
          ''
        )
        ELSE ''
      END IS NULL
      OR st_contention.together_windows IS NULL
      OR st_contention.windows IS NULL
      OR CASE
        WHEN st_contention.together_flows = ROUND(st_contention.together_flows)
        THEN IF(
          CAST(IF(
            TYPEOF(st_contention.together_flows) IN ('double', 'float'),
            BROUND(st_contention.together_flows),
            ROUND(st_contention.together_flows)
          ) AS BIGINT) IS NULL,
          NULL,
          FORMAT_STRING(
            '%d',
            CAST(IF(
              TYPEOF(st_contention.together_flows) IN ('double', 'float'),
              BROUND(st_contention.together_flows),
              ROUND(st_contention.together_flows)
            ) AS BIGINT)
          )
        )
        ELSE IF(
          st_contention.together_flows IS NULL,
          NULL,
          FORMAT_STRING(
            '%s',
            FORMAT_NUMBER(st_contention.together_flows, IF((
              1
            ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
          )
        )
      END IS NULL
      OR st_contention.flows IS NULL
      OR COALESCE(st_contention.rtt_inflation, 1) IS NULL
      OR COALESCE(st_contention.throughput_ratio, 1) IS NULL,
      NULL,
      FORMAT_STRING(
        '%s %s%s: its flows degraded together in %d of %d windows (%s of its %d flows at a time on average; RTT x%s, throughput x%s)',
        st_contention.scope,
        st_contention.subject,
        CASE
          WHEN st_contention.scope = 'peer'
          THEN COALESCE(
            ' (' || (
              SELECT
                MIN(o.node) AS _col_0
              FROM st_addr_owner AS o
              WHERE
                o.addr = st_contention.subject
            ) || ')',
            ''
          )
          ELSE ''
        END,
        st_contention.together_windows,
        st_contention.windows,
        CASE
          WHEN st_contention.together_flows = ROUND(st_contention.together_flows)
          THEN IF(
            CAST(IF(
              TYPEOF(st_contention.together_flows) IN ('double', 'float'),
              BROUND(st_contention.together_flows),
              ROUND(st_contention.together_flows)
            ) AS BIGINT) IS NULL,
            NULL,
            FORMAT_STRING(
              '%d',
              CAST(IF(
                TYPEOF(st_contention.together_flows) IN ('double', 'float'),
                BROUND(st_contention.together_flows),
                ROUND(st_contention.together_flows)
              ) AS BIGINT)
            )
          )
          ELSE IF(
            st_contention.together_flows IS NULL,
            NULL,
            FORMAT_STRING(
              '%s',
              FORMAT_NUMBER(st_contention.together_flows, IF((
                1
              ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
            )
          )
        END,
        st_contention.flows,
        FORMAT_NUMBER(
          COALESCE(st_contention.rtt_inflation, 1),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        FORMAT_NUMBER(
          COALESCE(st_contention.throughput_ratio, 1),
          IF((
            2
          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
        )
      )
    ) AS _col_6
  FROM st_contention AS st_contention, st_params AS p
  WHERE
    st_contention.flows >= 2
    AND st_contention.together_windows >= p.min_together_windows
  UNION ALL
  SELECT
    late_rank.category AS category,
    late_rank.scope AS scope,
    late_rank.subject AS subject,
    late_rank.host AS host,
    late_rank.rank AS rank,
    late_rank.score AS score,
    late_rank.summary AS summary
  FROM late_rank AS late_rank
  WHERE
    NOT late_rank.held_up
  UNION ALL
  SELECT
    'sync_amplification' AS sync_amplification,
    'collective' AS collective,
    st_sync_amplification.collective || ' (' || st_sync_amplification.source || ')' AS _col_2,
    NULL AS _col_3,
    NULL AS _col_4,
    st_sync_amplification.fastest_wait_fraction AS fastest_wait_fraction,
    IF(
      st_sync_amplification.collective IS NULL
      OR st_sync_amplification.ranks IS NULL
      OR (
        CASE (
            st_sync_amplification.source
          )
          WHEN 'nccl_kernel'
          THEN 'NCCL kernels'
          WHEN 'comm_kernel'
          THEN 'communication kernels'
          WHEN 'backend'
          THEN 'the backend\'s own annotations, e.g. gloo:all_reduce'
          WHEN 'c10d'
          THEN 'c10d calls'
          WHEN 'param_comms'
          THEN 'record_param_comms'
          WHEN 'nccl_call'
          THEN 'NCCL API calls'
          ELSE (
            st_sync_amplification.source
          )
        END
      ) IS NULL
      OR 100 * st_sync_amplification.fastest_wait_fraction IS NULL
      OR st_sync_amplification.median_arrival_spread_us / 1000 IS NULL
      OR st_sync_amplification.p99_arrival_spread_us / 1000 IS NULL
      OR st_sync_amplification.median_step_us / 1000 IS NULL,
      NULL,
      FORMAT_STRING(
        '%s over %d ranks (timed by %s): the fastest rank waits %s%% of each step on average; arrival spread median %s ms, p99 %s ms; step %s ms',
        st_sync_amplification.collective,
        st_sync_amplification.ranks,
        (
          CASE (
              st_sync_amplification.source
            )
            WHEN 'nccl_kernel'
            THEN 'NCCL kernels'
            WHEN 'comm_kernel'
            THEN 'communication kernels'
            WHEN 'backend'
            THEN 'the backend\'s own annotations, e.g. gloo:all_reduce'
            WHEN 'c10d'
            THEN 'c10d calls'
            WHEN 'param_comms'
            THEN 'record_param_comms'
            WHEN 'nccl_call'
            THEN 'NCCL API calls'
            ELSE (
              st_sync_amplification.source
            )
          END
        ),
        FORMAT_NUMBER(
          100 * st_sync_amplification.fastest_wait_fraction,
          IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')
        ),
        FORMAT_NUMBER(
          st_sync_amplification.median_arrival_spread_us / 1000,
          IF((
            2
          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
        ),
        FORMAT_NUMBER(
          st_sync_amplification.p99_arrival_spread_us / 1000,
          IF((
            2
          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
        ),
        FORMAT_NUMBER(
          st_sync_amplification.median_step_us / 1000,
          IF((
            2
          ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
        )
      )
    ) AS _col_6
  FROM st_sync_amplification AS st_sync_amplification, st_params AS p
  WHERE
    st_sync_amplification.fastest_wait_fraction >= p.sync_wait_fraction
    AND st_sync_amplification.median_arrival_spread_us >= GREATEST(p.min_spread_us, p.min_spread_fraction * st_sync_amplification.median_step_us)
  UNION ALL
  SELECT
    'locality' AS locality,
    'rank' AS rank,
    'rank ' || st_locality.rank AS _col_2,
    st_locality.host AS host,
    st_locality.rank AS rank,
    COALESCE(st_locality.transfer_vs_well_placed, 1) AS _col_5,
    IF(
      st_locality.rank IS NULL
      OR st_locality.host IS NULL
      OR st_locality.device IS NULL
      OR COALESCE(CAST(st_locality.numa_node AS STRING), '?') IS NULL
      OR COALESCE(st_locality.nearest_nic, '?') IS NULL
      OR COALESCE(CAST(st_locality.nic_numa_node AS STRING), '?') IS NULL
      OR COALESCE(st_locality.nic_locality, '?') IS NULL
      OR CASE
        WHEN st_locality.transfer_vs_well_placed IS NULL
        THEN 'not comparable with'
        ELSE IF(
          st_locality.transfer_vs_well_placed IS NULL,
          NULL,
          FORMAT_STRING(
            '%sx',
            FORMAT_NUMBER(
              st_locality.transfer_vs_well_placed,
              IF((
                2
              ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
            )
          )
        )
      END IS NULL,
      NULL,
      FORMAT_STRING(
        'rank %d (%s GPU %d): GPU on NUMA %s, nearest NIC %s on NUMA %s (%s); collective transfer time %s that of well-placed ranks',
        st_locality.rank,
        st_locality.host,
        st_locality.device,
        COALESCE(CAST(st_locality.numa_node AS STRING), '?'),
        COALESCE(st_locality.nearest_nic, '?'),
        COALESCE(CAST(st_locality.nic_numa_node AS STRING), '?'),
        COALESCE(st_locality.nic_locality, '?'),
        CASE
          WHEN st_locality.transfer_vs_well_placed IS NULL
          THEN 'not comparable with'
          ELSE IF(
            st_locality.transfer_vs_well_placed IS NULL,
            NULL,
            FORMAT_STRING(
              '%sx',
              FORMAT_NUMBER(
                st_locality.transfer_vs_well_placed,
                IF((
                  2
                ) > 0, CONCAT('0.', REPEAT('0', 2)), '0')
              )
            )
          )
        END
      )
    ) AS _col_6
  FROM st_locality AS st_locality
  WHERE
    st_locality.mismatched
  UNION ALL
  SELECT
    'gpu_idle' AS gpu_idle,
    'node' AS node,
    st_gpu_idle_host.host AS host,
    st_gpu_idle_host.host AS host,
    CASE WHEN st_gpu_idle_host.idle_ranks = 1 THEN st_gpu_idle_host.ranks[0] END AS _col_4,
    st_gpu_idle_host.idle_windows / st_gpu_idle_host.windows + st_gpu_idle_host.explained_windows / st_gpu_idle_host.windows AS _col_5,
    IF(
      st_gpu_idle_host.host IS NULL
      OR st_gpu_idle_host.idle_ranks IS NULL
      OR st_gpu_idle_host.gpu_ranks IS NULL
      OR CASE WHEN st_gpu_idle_host.idle_ranks = 1 THEN 'rank ' ELSE 'ranks ' END IS NULL
      OR ARRAY_JOIN(SLICE(st_gpu_idle_host.ranks, 1, 8 - 1 + 1), ', ') IS NULL
      OR CASE WHEN st_gpu_idle_host.idle_ranks > 8 THEN ', ...' ELSE '' END IS NULL
      OR st_gpu_idle_host.idle_windows IS NULL
      OR st_gpu_idle_host.windows IS NULL
      OR st_gpu_idle_host.explained_windows IS NULL
      OR st_gpu_idle_host.retransmits IS NULL
      OR COALESCE(st_gpu_idle_host.max_rtt_inflation, 1) IS NULL
      OR COALESCE(st_gpu_idle_host.affected_peers, 'none') IS NULL,
      NULL,
      FORMAT_STRING(
        '%s: compute idle while collectives ran on %d of its %d GPU ranks (%s%s%s) in %d of %d windows; %d of them with network symptoms on the host (%d retransmits, RTT up to x%s, peers %s)',
        st_gpu_idle_host.host,
        st_gpu_idle_host.idle_ranks,
        st_gpu_idle_host.gpu_ranks,
        CASE WHEN st_gpu_idle_host.idle_ranks = 1 THEN 'rank ' ELSE 'ranks ' END,
        ARRAY_JOIN(SLICE(st_gpu_idle_host.ranks, 1, 8 - 1 + 1), ', '),
        CASE WHEN st_gpu_idle_host.idle_ranks > 8 THEN ', ...' ELSE '' END,
        st_gpu_idle_host.idle_windows,
        st_gpu_idle_host.windows,
        st_gpu_idle_host.explained_windows,
        st_gpu_idle_host.retransmits,
        FORMAT_NUMBER(
          COALESCE(st_gpu_idle_host.max_rtt_inflation, 1),
          IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')
        ),
        COALESCE(st_gpu_idle_host.affected_peers, 'none')
      )
    ) AS _col_6
  FROM st_gpu_idle_host AS st_gpu_idle_host
), s /* The verdict: culprits of slow collective steps, by the job time they cost. */ AS (
  SELECT
    'slowdown' AS category,
    CASE
      WHEN COALESCE(d.cause, w.cause) = 'straggler'
      THEN 'rank'
      WHEN COALESCE(d.culprit, w.culprit) LIKE 'link %'
      THEN 'link'
      ELSE 'node'
    END AS scope,
    COALESCE(d.culprit, w.culprit) AS subject,
    d.host AS host,
    d.rank AS rank,
    d.time_lost_s AS score,
    d.time_lost_s AS time_lost_s,
    CASE COALESCE(d.cause, w.cause)
      WHEN 'network'
      THEN IF(
        COALESCE(d.culprit, w.culprit) IS NULL
        OR d.time_lost_s IS NULL
        OR 100 * d.lost_fraction IS NULL
        OR d.traced_s IS NULL
        OR d.priced IS NULL
        OR d.slow_steps IS NULL
        OR d.collectives IS NULL
        OR d.median_excess_ms IS NULL
        OR d.median_base_ms IS NULL
        OR d.retransmits IS NULL
        OR CASE
          WHEN COALESCE(d.culprit, w.culprit) LIKE 'link %'
          THEN 'that link'
          ELSE 'the links of ' || COALESCE(d.culprit, w.culprit)
        END IS NULL
        OR CASE
          WHEN d.reordered
          THEN IF(
            100 * d.spurious_share IS NULL,
            NULL,
            FORMAT_STRING(
              '; the receivers already had %s%% of the segments resent (DSACK): most arrived late or out of order, not lost (reordering or jitter on the path)',
              FORMAT_NUMBER(100 * d.spurious_share, IF((
                0
              ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
            )
          )
          ELSE ''
        END IS NULL,
        NULL,
        FORMAT_STRING(
          '%s: the job lost %s s (%s%% of %s s traced)%s in %d slow %s steps (each transfer a median %s ms longer than a healthy %s ms) with %d retransmits on %s during them%s: every rank waits for the slowest link (synchronization amplification)',
          COALESCE(d.culprit, w.culprit),
          FORMAT_NUMBER(d.time_lost_s, IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
          FORMAT_NUMBER(100 * d.lost_fraction, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(d.traced_s, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          d.priced,
          d.slow_steps,
          d.collectives,
          FORMAT_NUMBER(d.median_excess_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(d.median_base_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          d.retransmits,
          CASE
            WHEN COALESCE(d.culprit, w.culprit) LIKE 'link %'
            THEN 'that link'
            ELSE 'the links of ' || COALESCE(d.culprit, w.culprit)
          END,
          CASE
            WHEN d.reordered
            THEN IF(
              100 * d.spurious_share IS NULL,
              NULL,
              FORMAT_STRING(
                '; the receivers already had %s%% of the segments resent (DSACK): most arrived late or out of order, not lost (reordering or jitter on the path)',
                FORMAT_NUMBER(100 * d.spurious_share, IF((
                  0
                ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
              )
            )
            ELSE ''
          END
        )
      )
      WHEN 'queueing'
      THEN IF(
        COALESCE(d.culprit, w.culprit) IS NULL
        OR d.time_lost_s IS NULL
        OR 100 * d.lost_fraction IS NULL
        OR d.traced_s IS NULL
        OR d.priced IS NULL
        OR d.slow_steps IS NULL
        OR d.collectives IS NULL
        OR d.median_excess_ms IS NULL
        OR d.median_base_ms IS NULL
        OR CASE
          WHEN d.lossy_steps = 0
          THEN 'with no retransmits during them'
          ELSE IF(
            d.lossy_steps IS NULL,
            NULL,
            FORMAT_STRING(
              'with retransmits on its links in %d of them (its queue overflowed)',
              d.lossy_steps
            )
          )
        END IS NULL
        OR d.queued_samples IS NULL
        OR CASE
          WHEN COALESCE(d.culprit, w.culprit) LIKE 'link %'
          THEN 'that link'
          ELSE 'the links of ' || COALESCE(d.culprit, w.culprit)
        END IS NULL
        OR d.delivery IS NULL,
        NULL,
        FORMAT_STRING(
          '%s: the job lost %s s (%s%% of %s s traced)%s in %d slow %s steps (each transfer a median %s ms longer than a healthy %s ms) %s, while %d RTT samples on %s queued above the fleet\'s usual%s: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for',
          COALESCE(d.culprit, w.culprit),
          FORMAT_NUMBER(d.time_lost_s, IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
          FORMAT_NUMBER(100 * d.lost_fraction, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(d.traced_s, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          d.priced,
          d.slow_steps,
          d.collectives,
          FORMAT_NUMBER(d.median_excess_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(d.median_base_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          CASE
            WHEN d.lossy_steps = 0
            THEN 'with no retransmits during them'
            ELSE IF(
              d.lossy_steps IS NULL,
              NULL,
              FORMAT_STRING(
                'with retransmits on its links in %d of them (its queue overflowed)',
                d.lossy_steps
              )
            )
          END,
          d.queued_samples,
          CASE
            WHEN COALESCE(d.culprit, w.culprit) LIKE 'link %'
            THEN 'that link'
            ELSE 'the links of ' || COALESCE(d.culprit, w.culprit)
          END,
          d.delivery
        )
      )
      WHEN 'straggler'
      THEN IF(
        COALESCE(d.culprit, w.culprit) IS NULL
        OR d.time_lost_s IS NULL
        OR 100 * d.lost_fraction IS NULL
        OR d.traced_s IS NULL
        OR d.priced IS NULL
        OR d.slow_steps IS NULL
        OR d.collectives IS NULL
        OR d.median_lateness_ms IS NULL
        OR CASE
          WHEN d.extra_own_ms IS NULL
          THEN ''
          ELSE IF(
            d.extra_own_ms IS NULL,
            NULL,
            FORMAT_STRING(
              '; it spends %s ms more per training step outside collectives than the other ranks (median)',
              FORMAT_NUMBER(d.extra_own_ms, IF((
                0
              ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
            )
          )
        END IS NULL,
        NULL,
        FORMAT_STRING(
          '%s: the job lost %s s (%s%% of %s s traced)%s in %d %s steps it held up, arriving %s ms after the first rank (median): the other ranks waited for it%s',
          COALESCE(d.culprit, w.culprit),
          FORMAT_NUMBER(d.time_lost_s, IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
          FORMAT_NUMBER(100 * d.lost_fraction, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(d.traced_s, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          d.priced,
          d.slow_steps,
          d.collectives,
          FORMAT_NUMBER(d.median_lateness_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          CASE
            WHEN d.extra_own_ms IS NULL
            THEN ''
            ELSE IF(
              d.extra_own_ms IS NULL,
              NULL,
              FORMAT_STRING(
                '; it spends %s ms more per training step outside collectives than the other ranks (median)',
                FORMAT_NUMBER(d.extra_own_ms, IF((
                  0
                ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
              )
            )
          END
        )
      )
    END AS summary,
    (
      DATE_FORMAT(
        TIMESTAMP_MICROS(
          CAST(IF(
            TYPEOF((
              w.first_us
            )) IN ('double', 'float'),
            BROUND((
              w.first_us
            )),
            ROUND((
              w.first_us
            ))
          ) AS BIGINT)
        ),
        'yyyy-MM-dd\'T\'HH:mm:ss.SSSSSS\'Z\''
      )
    ) AS first_seen,
    (
      DATE_FORMAT(
        TIMESTAMP_MICROS(
          CAST(IF(
            TYPEOF((
              w.last_us
            )) IN ('double', 'float'),
            BROUND((
              w.last_us
            )),
            ROUND((
              w.last_us
            ))
          ) AS BIGINT)
        ),
        'yyyy-MM-dd\'T\'HH:mm:ss.SSSSSS\'Z\''
      )
    ) AS last_seen,
    w.first_step AS first_step,
    w.seen_when AS seen_when,
    (
      CASE
        WHEN (
          CASE WHEN d.reordered THEN 'reordering' ELSE COALESCE(d.cause, w.cause) END
        ) = 'straggler'
        THEN IF(
          (
            d.rank
          ) IS NULL
          OR (
            d.host
          ) IS NULL
          OR CASE
            WHEN (
              SELECT
                BOOL_OR(t.device = 'gpu') AS _col_0
              FROM st_rank_trace AS t
              WHERE
                t.host = (
                  t.host
                ) AND t.rank = (
                  t.rank
                )
            )
            THEN ', its GPU\'s clocks and throttling (nvidia-smi -q -d PERFORMANCE)'
            ELSE ''
          END IS NULL,
          NULL,
          FORMAT_STRING(
            'look at what rank %d does outside collectives on %s: its input pipeline (data loading), other processes competing for its CPUs or memory%s',
            (
              d.rank
            ),
            (
              d.host
            ),
            CASE
              WHEN (
                SELECT
                  BOOL_OR(t.device = 'gpu') AS _col_0
                FROM st_rank_trace AS t
                WHERE
                  t.host = (
                    t.host
                  ) AND t.rank = (
                    t.rank
                  )
              )
              THEN ', its GPU\'s clocks and throttling (nvidia-smi -q -d PERFORMANCE)'
              ELSE ''
            END
          )
        )
        WHEN (
          CASE WHEN d.reordered THEN 'reordering' ELSE COALESCE(d.cause, w.cause) END
        ) = 'reordering'
        THEN IF(
          CASE
            WHEN (
              COALESCE(d.culprit, w.culprit)
            ) LIKE 'link %'
            THEN IF(
              (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[0] IS NULL
              OR (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[1] IS NULL,
              NULL,
              FORMAT_STRING(
                'between %s and %s',
                (
                  CASE
                    WHEN (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(
                      SUBSTRING((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ), 6),
                      CONCAT('\\Q', ' - ', '\\E')
                    )
                    ELSE ARRAY((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ))
                  END
                )[0],
                (
                  CASE
                    WHEN (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(
                      SUBSTRING((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ), 6),
                      CONCAT('\\Q', ' - ', '\\E')
                    )
                    ELSE ARRAY((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ))
                  END
                )[1]
              )
            )
            ELSE IF(
              (
                COALESCE(d.culprit, w.culprit)
              ) IS NULL
              OR (
                COALESCE(
                  (
                    SELECT
                      i.iface AS iface
                    FROM st_node_iface AS i
                    WHERE
                      i.node = (
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      )
                  ),
                  '<interface>'
                )
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                'on %s\'s link (%s)',
                (
                  COALESCE(d.culprit, w.culprit)
                ),
                (
                  COALESCE(
                    (
                      SELECT
                        i.iface AS iface
                      FROM st_node_iface AS i
                      WHERE
                        i.node = (
                          (
                            COALESCE(d.culprit, w.culprit)
                          )
                        )
                    ),
                    '<interface>'
                  )
                )
              )
            )
          END IS NULL,
          NULL,
          FORMAT_STRING(
            'look for what reorders or delays packets %s: variable delay or jitter (tc -s qdisc: netem, shapers), packets of one flow spread over paths of different length (bonding or LAG in a per-packet mode, ECMP or adaptive routing in the switches), a link that fails over back and forth; then its error and drop counters, for the segments that were lost',
            CASE
              WHEN (
                COALESCE(d.culprit, w.culprit)
              ) LIKE 'link %'
              THEN IF(
                (
                  CASE
                    WHEN (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(
                      SUBSTRING((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ), 6),
                      CONCAT('\\Q', ' - ', '\\E')
                    )
                    ELSE ARRAY((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ))
                  END
                )[0] IS NULL
                OR (
                  CASE
                    WHEN (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(
                      SUBSTRING((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ), 6),
                      CONCAT('\\Q', ' - ', '\\E')
                    )
                    ELSE ARRAY((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ))
                  END
                )[1] IS NULL,
                NULL,
                FORMAT_STRING(
                  'between %s and %s',
                  (
                    CASE
                      WHEN (
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ) LIKE 'link %'
                      THEN SPLIT(
                        SUBSTRING((
                          (
                            COALESCE(d.culprit, w.culprit)
                          )
                        ), 6),
                        CONCAT('\\Q', ' - ', '\\E')
                      )
                      ELSE ARRAY((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ))
                    END
                  )[0],
                  (
                    CASE
                      WHEN (
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ) LIKE 'link %'
                      THEN SPLIT(
                        SUBSTRING((
                          (
                            COALESCE(d.culprit, w.culprit)
                          )
                        ), 6),
                        CONCAT('\\Q', ' - ', '\\E')
                      )
                      ELSE ARRAY((
                        (
                          COALESCE(d.culprit, w.culprit)
                        )
                      ))
                    END
                  )[1]
                )
              )
              ELSE IF(
                (
                  COALESCE(d.culprit, w.culprit)
                ) IS NULL
                OR (
                  COALESCE(
                    (
                      SELECT
                        i.iface AS iface
                      FROM st_node_iface AS i
                      WHERE
                        i.node = (
                          (
                            COALESCE(d.culprit, w.culprit)
                          )
                        )
                    ),
                    '<interface>'
                  )
                ) IS NULL,
                NULL,
                FORMAT_STRING(
                  'on %s\'s link (%s)',
                  (
                    COALESCE(d.culprit, w.culprit)
                  ),
                  (
                    COALESCE(
                      (
                        SELECT
                          i.iface AS iface
                        FROM st_node_iface AS i
                        WHERE
                          i.node = (
                            (
                              COALESCE(d.culprit, w.culprit)
                            )
                          )
                      ),
                      '<interface>'
                    )
                  )
                )
              )
            END
          )
        )
        WHEN (
          COALESCE(d.culprit, w.culprit)
        ) LIKE 'link %'
        THEN CASE (
            CASE WHEN d.reordered THEN 'reordering' ELSE COALESCE(d.cause, w.cause) END
          )
          WHEN 'network'
          THEN IF(
            (
              CASE
                WHEN (
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ) LIKE 'link %'
                THEN SPLIT(
                  SUBSTRING((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ), 6),
                  CONCAT('\\Q', ' - ', '\\E')
                )
                ELSE ARRAY((
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ))
              END
            )[0] IS NULL
            OR (
              CASE
                WHEN (
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ) LIKE 'link %'
                THEN SPLIT(
                  SUBSTRING((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ), 6),
                  CONCAT('\\Q', ' - ', '\\E')
                )
                ELSE ARRAY((
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ))
              END
            )[1] IS NULL,
            NULL,
            FORMAT_STRING(
              'look for packet loss between %s and %s: both NICs\' error and drop counters (ethtool -S), the switch ports, cables or optics between them',
              (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[0],
              (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[1]
            )
          )
          ELSE IF(
            (
              CASE
                WHEN (
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ) LIKE 'link %'
                THEN SPLIT(
                  SUBSTRING((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ), 6),
                  CONCAT('\\Q', ' - ', '\\E')
                )
                ELSE ARRAY((
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ))
              END
            )[0] IS NULL
            OR (
              CASE
                WHEN (
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ) LIKE 'link %'
                THEN SPLIT(
                  SUBSTRING((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ), 6),
                  CONCAT('\\Q', ' - ', '\\E')
                )
                ELSE ARRAY((
                  (
                    COALESCE(d.culprit, w.culprit)
                  )
                ))
              END
            )[1] IS NULL,
            NULL,
            FORMAT_STRING(
              'look at the path between %s and %s: the speed both NICs negotiated (ethtool), shaping, policing or added delay (tc -s qdisc), other traffic on the switch ports between them, its round trip against the other paths\' (ping)',
              (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[0],
              (
                CASE
                  WHEN (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(
                    SUBSTRING((
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    ), 6),
                    CONCAT('\\Q', ' - ', '\\E')
                  )
                  ELSE ARRAY((
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  ))
                END
              )[1]
            )
          )
        END
        WHEN (
          CASE WHEN d.reordered THEN 'reordering' ELSE COALESCE(d.cause, w.cause) END
        ) = 'network'
        THEN IF(
          (
            COALESCE(d.culprit, w.culprit)
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL
          OR (
            COALESCE(d.culprit, w.culprit)
          ) IS NULL,
          NULL,
          FORMAT_STRING(
            'look for packet loss on %s\'s link: its NIC\'s error and drop counters (ethtool -S %s on %s), the switch port\'s error and discard counters, the cable or optic',
            (
              COALESCE(d.culprit, w.culprit)
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    )
                ),
                '<interface>'
              )
            ),
            (
              COALESCE(d.culprit, w.culprit)
            )
          )
        )
        ELSE IF(
          (
            COALESCE(d.culprit, w.culprit)
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL
          OR (
            COALESCE(d.culprit, w.culprit)
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      COALESCE(d.culprit, w.culprit)
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL,
          NULL,
          FORMAT_STRING(
            'look at %s\'s link: the speed it negotiated (ethtool %s on %s), shaping, policing or added delay on it (tc -s qdisc show dev %s), other traffic on its switch port, its round trip to the other nodes against theirs (ping)',
            (
              COALESCE(d.culprit, w.culprit)
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    )
                ),
                '<interface>'
              )
            ),
            (
              COALESCE(d.culprit, w.culprit)
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        COALESCE(d.culprit, w.culprit)
                      )
                    )
                ),
                '<interface>'
              )
            )
          )
        )
      END
    ) AS next_check
  FROM (
    SELECT
      st_slowdown.cause AS cause,
      st_slowdown.culprit AS culprit,
      st_slowdown.host AS host,
      st_slowdown.rank AS rank,
      st_slowdown.slow_steps AS slow_steps,
      st_slowdown.lossy_steps AS lossy_steps,
      st_slowdown.median_excess_ms AS median_excess_ms,
      st_slowdown.median_lateness_ms AS median_lateness_ms,
      st_slowdown.median_base_ms AS median_base_ms,
      st_slowdown.collectives AS collectives,
      st_slowdown.retransmits AS retransmits,
      st_slowdown.queued_samples AS queued_samples,
      st_slowdown.evidence_s AS evidence_s,
      st_slowdown.share_of_cause AS share_of_cause,
      st_slowdown.extra_own_ms AS extra_own_ms,
      st_slowdown.evidenced AS evidenced,
      st_slowdown.time_lost_s AS time_lost_s,
      st_slowdown.priced_by AS priced_by,
      st_slowdown.impaired_iterations AS impaired_iterations,
      st_slowdown.mean_step_ms AS mean_step_ms,
      st_slowdown.healthy_step_ms AS healthy_step_ms,
      st_slowdown.healthy_from AS healthy_from,
      st_slowdown.quiet_iterations AS quiet_iterations,
      st_slowdown.quiet_mean_step_ms AS quiet_mean_step_ms,
      st_slowdown.traced_s AS traced_s,
      st_slowdown.steps AS steps,
      st_slowdown.lost_fraction AS lost_fraction,
      COALESCE(x.reordered, FALSE) AS reordered,
      x.spurious_share AS spurious_share,
      CASE
        WHEN st_slowdown.priced_by = 'step_time'
        THEN IF(
          st_slowdown.impaired_iterations IS NULL
          OR st_slowdown.mean_step_ms IS NULL
          OR st_slowdown.healthy_step_ms IS NULL
          OR CASE
            WHEN st_slowdown.healthy_from = 'baseline'
            THEN ' (the baseline run\'s)'
            ELSE ''
          END IS NULL
          OR CASE
            WHEN st_slowdown.quiet_iterations > 0
            THEN IF(
              (
                IF(
                  (
                    st_slowdown.quiet_iterations
                  ) IS NULL
                  OR (
                    'training step'
                  ) IS NULL
                  OR CASE WHEN (
                    st_slowdown.quiet_iterations
                  ) = 1 THEN '' ELSE 's' END IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%d %s%s',
                    (
                      st_slowdown.quiet_iterations
                    ),
                    (
                      'training step'
                    ),
                    CASE WHEN (
                      st_slowdown.quiet_iterations
                    ) = 1 THEN '' ELSE 's' END
                  )
                )
              ) IS NULL
              OR st_slowdown.quiet_mean_step_ms IS NULL,
              NULL,
              FORMAT_STRING(
                ' (and %s between them without its evidence, %s ms on average: slower than the healthy ones)',
                (
                  IF(
                    (
                      st_slowdown.quiet_iterations
                    ) IS NULL
                    OR (
                      'training step'
                    ) IS NULL
                    OR CASE WHEN (
                      st_slowdown.quiet_iterations
                    ) = 1 THEN '' ELSE 's' END IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%d %s%s',
                      (
                        st_slowdown.quiet_iterations
                      ),
                      (
                        'training step'
                      ),
                      CASE WHEN (
                        st_slowdown.quiet_iterations
                      ) = 1 THEN '' ELSE 's' END
                    )
                  )
                ),
                FORMAT_NUMBER(st_slowdown.quiet_mean_step_ms, IF((
                  0
                ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
              )
            )
            ELSE ''
          END IS NULL,
          NULL,
          FORMAT_STRING(
            ': %d training steps took %s ms on average instead of a healthy %s ms%s%s',
            st_slowdown.impaired_iterations,
            FORMAT_NUMBER(st_slowdown.mean_step_ms, IF((
              0
            ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
            FORMAT_NUMBER(st_slowdown.healthy_step_ms, IF((
              0
            ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
            CASE
              WHEN st_slowdown.healthy_from = 'baseline'
              THEN ' (the baseline run\'s)'
              ELSE ''
            END,
            CASE
              WHEN st_slowdown.quiet_iterations > 0
              THEN IF(
                (
                  IF(
                    (
                      st_slowdown.quiet_iterations
                    ) IS NULL
                    OR (
                      'training step'
                    ) IS NULL
                    OR CASE WHEN (
                      st_slowdown.quiet_iterations
                    ) = 1 THEN '' ELSE 's' END IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%d %s%s',
                      (
                        st_slowdown.quiet_iterations
                      ),
                      (
                        'training step'
                      ),
                      CASE WHEN (
                        st_slowdown.quiet_iterations
                      ) = 1 THEN '' ELSE 's' END
                    )
                  )
                ) IS NULL
                OR st_slowdown.quiet_mean_step_ms IS NULL,
                NULL,
                FORMAT_STRING(
                  ' (and %s between them without its evidence, %s ms on average: slower than the healthy ones)',
                  (
                    IF(
                      (
                        st_slowdown.quiet_iterations
                      ) IS NULL
                      OR (
                        'training step'
                      ) IS NULL
                      OR CASE WHEN (
                        st_slowdown.quiet_iterations
                      ) = 1 THEN '' ELSE 's' END IS NULL,
                      NULL,
                      FORMAT_STRING(
                        '%d %s%s',
                        (
                          st_slowdown.quiet_iterations
                        ),
                        (
                          'training step'
                        ),
                        CASE WHEN (
                          st_slowdown.quiet_iterations
                        ) = 1 THEN '' ELSE 's' END
                      )
                    )
                  ),
                  FORMAT_NUMBER(st_slowdown.quiet_mean_step_ms, IF((
                    0
                  ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                )
              )
              ELSE ''
            END
          )
        )
        WHEN st_slowdown.priced_by = 'own_time'
        THEN ' (its extra work per step: no healthy step to compare with; --baseline prices it by step time)'
        ELSE ''
      END AS priced,
      COALESCE(
        (
          SELECT
            IF(
              (
                CASE
                  WHEN (
                    d.slowest_bps
                  ) IS NULL
                  THEN '?'
                  WHEN (
                    d.slowest_bps
                  ) >= 1e9
                  THEN IF(
                    (
                      d.slowest_bps
                    ) / 1e9 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Gbit/s',
                      FORMAT_NUMBER((
                        d.slowest_bps
                      ) / 1e9, IF((
                        1
                      ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                    )
                  )
                  ELSE IF(
                    (
                      d.slowest_bps
                    ) / 1e6 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Mbit/s',
                      FORMAT_NUMBER((
                        d.slowest_bps
                      ) / 1e6, IF((
                        0
                      ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                    )
                  )
                END
              ) IS NULL
              OR (
                CASE
                  WHEN (
                    d.others_bps
                  ) IS NULL
                  THEN '?'
                  WHEN (
                    d.others_bps
                  ) >= 1e9
                  THEN IF(
                    (
                      d.others_bps
                    ) / 1e9 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Gbit/s',
                      FORMAT_NUMBER((
                        d.others_bps
                      ) / 1e9, IF((
                        1
                      ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                    )
                  )
                  ELSE IF(
                    (
                      d.others_bps
                    ) / 1e6 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Mbit/s',
                      FORMAT_NUMBER((
                        d.others_bps
                      ) / 1e6, IF((
                        0
                      ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                    )
                  )
                END
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                '; its slowest flow delivered %s, the other flows %s (median)',
                (
                  CASE
                    WHEN (
                      d.slowest_bps
                    ) IS NULL
                    THEN '?'
                    WHEN (
                      d.slowest_bps
                    ) >= 1e9
                    THEN IF(
                      (
                        d.slowest_bps
                      ) / 1e9 IS NULL,
                      NULL,
                      FORMAT_STRING(
                        '%s Gbit/s',
                        FORMAT_NUMBER((
                          d.slowest_bps
                        ) / 1e9, IF((
                          1
                        ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                      )
                    )
                    ELSE IF(
                      (
                        d.slowest_bps
                      ) / 1e6 IS NULL,
                      NULL,
                      FORMAT_STRING(
                        '%s Mbit/s',
                        FORMAT_NUMBER((
                          d.slowest_bps
                        ) / 1e6, IF((
                          0
                        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                      )
                    )
                  END
                ),
                (
                  CASE
                    WHEN (
                      d.others_bps
                    ) IS NULL
                    THEN '?'
                    WHEN (
                      d.others_bps
                    ) >= 1e9
                    THEN IF(
                      (
                        d.others_bps
                      ) / 1e9 IS NULL,
                      NULL,
                      FORMAT_STRING(
                        '%s Gbit/s',
                        FORMAT_NUMBER((
                          d.others_bps
                        ) / 1e9, IF((
                          1
                        ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                      )
                    )
                    ELSE IF(
                      (
                        d.others_bps
                      ) / 1e6 IS NULL,
                      NULL,
                      FORMAT_STRING(
                        '%s Mbit/s',
                        FORMAT_NUMBER((
                          d.others_bps
                        ) / 1e6, IF((
                          0
                        ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                      )
                    )
                  END
                )
              )
            ) AS _col_0
          FROM st_culprit_delivery AS d
          WHERE
            d.culprit = st_slowdown.culprit
            AND NOT d.slowest_bps IS NULL
            AND NOT d.others_bps IS NULL
        ),
        ''
      ) AS delivery
    FROM st_slowdown AS st_slowdown
    LEFT JOIN st_culprit_spurious AS x
      ON st_slowdown.cause = 'network' AND x.culprit = st_slowdown.culprit
  ) AS d
  LEFT JOIN st_culprit_when AS w
    ON d.cause = w.cause AND d.culprit = w.culprit
  CROSS JOIN st_params AS p
  /* Slow steps nobody can be blamed for stay in st_slowdown (cause 'unexplained'): on a busy */
  /* host transfers vary by tens of percent, and a finding without a culprit is not one. */
  WHERE
    d.evidenced
    AND COALESCE(d.cause, w.cause) <> 'unexplained'
    AND (
      (
        SELECT
          (
            d.slow_steps
          ) >= p.min_culprit_steps
          AND (
            d.time_lost_s
          ) >= p.min_lost_s
          AND (
            d.lost_fraction
          ) >= p.min_lost_fraction AS _col_0
        FROM st_params AS p
      )
    )
), pq /* ... and a slow link that was there from the first step, which no step-time comparison shows */ /* (named, not priced), unless the verdict already priced it. */ AS (
  SELECT
    'slowdown' AS category,
    CASE WHEN q.culprit LIKE 'link %' THEN 'link' ELSE 'node' END AS scope,
    q.culprit AS subject,
    q.host AS host,
    CAST(NULL AS BIGINT) AS rank,
    COALESCE(k.time_lost_s, 0.0) AS score, /* unpriced: ranked below every priced culprit of its scope */
    k.time_lost_s AS time_lost_s,
    CASE
      WHEN k.time_lost_s IS NULL
      THEN IF(
        q.culprit IS NULL
        OR q.queued_steps IS NULL
        OR q.steps IS NULL
        OR q.collectives IS NULL
        OR q.queued_samples IS NULL
        OR dl.delivery IS NULL,
        NULL,
        FORMAT_STRING(
          '%s: its links queued packets above the fleet\'s usual in %d of %d %s steps (%d RTT samples)%s, slowing them evenly from the first traced step: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for; time lost not estimated: too few steps ran without it (analyze --baseline RUN prices it against a run without it)',
          q.culprit,
          q.queued_steps,
          q.steps,
          q.collectives,
          q.queued_samples,
          dl.delivery
        )
      )
      ELSE IF(
        q.culprit IS NULL
        OR k.time_lost_s IS NULL
        OR 100 * k.time_lost_s / NULLIF(j.traced_s, 0) IS NULL
        OR j.traced_s IS NULL
        OR k.impaired_iterations IS NULL
        OR k.mean_step_ms IS NULL
        OR k.healthy_step_ms IS NULL
        OR CASE WHEN k.healthy_from = 'baseline' THEN ' (the baseline run\'s)' ELSE '' END IS NULL
        OR q.queued_steps IS NULL
        OR q.steps IS NULL
        OR q.collectives IS NULL
        OR q.queued_samples IS NULL
        OR dl.delivery IS NULL,
        NULL,
        FORMAT_STRING(
          '%s: the job lost %s s (%s%% of %s s traced): %d training steps took %s ms on average instead of a healthy %s ms%s, while its links queued packets above the fleet\'s usual in %d of %d %s steps (%d RTT samples)%s: a slow, congested or delayed link (a rate limit, a lower link speed, a busy port, added latency) that every rank waits for',
          q.culprit,
          FORMAT_NUMBER(k.time_lost_s, IF((
            1
          ) > 0, CONCAT('0.', REPEAT('0', 1)), '0')),
          FORMAT_NUMBER(
            100 * k.time_lost_s / NULLIF(j.traced_s, 0),
            IF((
              0
            ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')
          ),
          FORMAT_NUMBER(j.traced_s, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          k.impaired_iterations,
          FORMAT_NUMBER(k.mean_step_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          FORMAT_NUMBER(k.healthy_step_ms, IF((
            0
          ) > 0, CONCAT('0.', REPEAT('0', 0)), '0')),
          CASE WHEN k.healthy_from = 'baseline' THEN ' (the baseline run\'s)' ELSE '' END,
          q.queued_steps,
          q.steps,
          q.collectives,
          q.queued_samples,
          dl.delivery
        )
      )
    END AS summary,
    (
      DATE_FORMAT(
        TIMESTAMP_MICROS(
          CAST(IF(
            TYPEOF((
              w.first_us
            )) IN ('double', 'float'),
            BROUND((
              w.first_us
            )),
            ROUND((
              w.first_us
            ))
          ) AS BIGINT)
        ),
        'yyyy-MM-dd\'T\'HH:mm:ss.SSSSSS\'Z\''
      )
    ) AS first_seen,
    (
      DATE_FORMAT(
        TIMESTAMP_MICROS(
          CAST(IF(
            TYPEOF((
              w.last_us
            )) IN ('double', 'float'),
            BROUND((
              w.last_us
            )),
            ROUND((
              w.last_us
            ))
          ) AS BIGINT)
        ),
        'yyyy-MM-dd\'T\'HH:mm:ss.SSSSSS\'Z\''
      )
    ) AS last_seen,
    w.first_step AS first_step,
    w.seen_when AS seen_when,
    (
      CASE
        WHEN (
          'queueing'
        ) = 'straggler'
        THEN IF(
          (
            NULL
          ) IS NULL
          OR (
            q.host
          ) IS NULL
          OR CASE
            WHEN (
              SELECT
                BOOL_OR(t.device = 'gpu') AS _col_0
              FROM st_rank_trace AS t
              WHERE
                t.host = (
                  q.host
                ) AND t.rank = (
                  NULL
                )
            )
            THEN ', its GPU\'s clocks and throttling (nvidia-smi -q -d PERFORMANCE)'
            ELSE ''
          END IS NULL,
          NULL,
          FORMAT_STRING(
            'look at what rank %d does outside collectives on %s: its input pipeline (data loading), other processes competing for its CPUs or memory%s',
            (
              NULL
            ),
            (
              q.host
            ),
            CASE
              WHEN (
                SELECT
                  BOOL_OR(t.device = 'gpu') AS _col_0
                FROM st_rank_trace AS t
                WHERE
                  t.host = (
                    q.host
                  ) AND t.rank = (
                    NULL
                  )
              )
              THEN ', its GPU\'s clocks and throttling (nvidia-smi -q -d PERFORMANCE)'
              ELSE ''
            END
          )
        )
        WHEN (
          'queueing'
        ) = 'reordering'
        THEN IF(
          CASE
            WHEN (
              q.culprit
            ) LIKE 'link %'
            THEN IF(
              (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[0] IS NULL
              OR (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[1] IS NULL,
              NULL,
              FORMAT_STRING(
                'between %s and %s',
                (
                  CASE
                    WHEN (
                      (
                        q.culprit
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(SUBSTRING((
                      (
                        q.culprit
                      )
                    ), 6), CONCAT('\\Q', ' - ', '\\E'))
                    ELSE ARRAY((
                      (
                        q.culprit
                      )
                    ))
                  END
                )[0],
                (
                  CASE
                    WHEN (
                      (
                        q.culprit
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(SUBSTRING((
                      (
                        q.culprit
                      )
                    ), 6), CONCAT('\\Q', ' - ', '\\E'))
                    ELSE ARRAY((
                      (
                        q.culprit
                      )
                    ))
                  END
                )[1]
              )
            )
            ELSE IF(
              (
                q.culprit
              ) IS NULL
              OR (
                COALESCE(
                  (
                    SELECT
                      i.iface AS iface
                    FROM st_node_iface AS i
                    WHERE
                      i.node = (
                        (
                          q.culprit
                        )
                      )
                  ),
                  '<interface>'
                )
              ) IS NULL,
              NULL,
              FORMAT_STRING(
                'on %s\'s link (%s)',
                (
                  q.culprit
                ),
                (
                  COALESCE(
                    (
                      SELECT
                        i.iface AS iface
                      FROM st_node_iface AS i
                      WHERE
                        i.node = (
                          (
                            q.culprit
                          )
                        )
                    ),
                    '<interface>'
                  )
                )
              )
            )
          END IS NULL,
          NULL,
          FORMAT_STRING(
            'look for what reorders or delays packets %s: variable delay or jitter (tc -s qdisc: netem, shapers), packets of one flow spread over paths of different length (bonding or LAG in a per-packet mode, ECMP or adaptive routing in the switches), a link that fails over back and forth; then its error and drop counters, for the segments that were lost',
            CASE
              WHEN (
                q.culprit
              ) LIKE 'link %'
              THEN IF(
                (
                  CASE
                    WHEN (
                      (
                        q.culprit
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(SUBSTRING((
                      (
                        q.culprit
                      )
                    ), 6), CONCAT('\\Q', ' - ', '\\E'))
                    ELSE ARRAY((
                      (
                        q.culprit
                      )
                    ))
                  END
                )[0] IS NULL
                OR (
                  CASE
                    WHEN (
                      (
                        q.culprit
                      )
                    ) LIKE 'link %'
                    THEN SPLIT(SUBSTRING((
                      (
                        q.culprit
                      )
                    ), 6), CONCAT('\\Q', ' - ', '\\E'))
                    ELSE ARRAY((
                      (
                        q.culprit
                      )
                    ))
                  END
                )[1] IS NULL,
                NULL,
                FORMAT_STRING(
                  'between %s and %s',
                  (
                    CASE
                      WHEN (
                        (
                          q.culprit
                        )
                      ) LIKE 'link %'
                      THEN SPLIT(SUBSTRING((
                        (
                          q.culprit
                        )
                      ), 6), CONCAT('\\Q', ' - ', '\\E'))
                      ELSE ARRAY((
                        (
                          q.culprit
                        )
                      ))
                    END
                  )[0],
                  (
                    CASE
                      WHEN (
                        (
                          q.culprit
                        )
                      ) LIKE 'link %'
                      THEN SPLIT(SUBSTRING((
                        (
                          q.culprit
                        )
                      ), 6), CONCAT('\\Q', ' - ', '\\E'))
                      ELSE ARRAY((
                        (
                          q.culprit
                        )
                      ))
                    END
                  )[1]
                )
              )
              ELSE IF(
                (
                  q.culprit
                ) IS NULL
                OR (
                  COALESCE(
                    (
                      SELECT
                        i.iface AS iface
                      FROM st_node_iface AS i
                      WHERE
                        i.node = (
                          (
                            q.culprit
                          )
                        )
                    ),
                    '<interface>'
                  )
                ) IS NULL,
                NULL,
                FORMAT_STRING(
                  'on %s\'s link (%s)',
                  (
                    q.culprit
                  ),
                  (
                    COALESCE(
                      (
                        SELECT
                          i.iface AS iface
                        FROM st_node_iface AS i
                        WHERE
                          i.node = (
                            (
                              q.culprit
                            )
                          )
                      ),
                      '<interface>'
                    )
                  )
                )
              )
            END
          )
        )
        WHEN (
          q.culprit
        ) LIKE 'link %'
        THEN CASE (
            'queueing'
          )
          WHEN 'network'
          THEN IF(
            (
              CASE
                WHEN (
                  (
                    q.culprit
                  )
                ) LIKE 'link %'
                THEN SPLIT(SUBSTRING((
                  (
                    q.culprit
                  )
                ), 6), CONCAT('\\Q', ' - ', '\\E'))
                ELSE ARRAY((
                  (
                    q.culprit
                  )
                ))
              END
            )[0] IS NULL
            OR (
              CASE
                WHEN (
                  (
                    q.culprit
                  )
                ) LIKE 'link %'
                THEN SPLIT(SUBSTRING((
                  (
                    q.culprit
                  )
                ), 6), CONCAT('\\Q', ' - ', '\\E'))
                ELSE ARRAY((
                  (
                    q.culprit
                  )
                ))
              END
            )[1] IS NULL,
            NULL,
            FORMAT_STRING(
              'look for packet loss between %s and %s: both NICs\' error and drop counters (ethtool -S), the switch ports, cables or optics between them',
              (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[0],
              (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[1]
            )
          )
          ELSE IF(
            (
              CASE
                WHEN (
                  (
                    q.culprit
                  )
                ) LIKE 'link %'
                THEN SPLIT(SUBSTRING((
                  (
                    q.culprit
                  )
                ), 6), CONCAT('\\Q', ' - ', '\\E'))
                ELSE ARRAY((
                  (
                    q.culprit
                  )
                ))
              END
            )[0] IS NULL
            OR (
              CASE
                WHEN (
                  (
                    q.culprit
                  )
                ) LIKE 'link %'
                THEN SPLIT(SUBSTRING((
                  (
                    q.culprit
                  )
                ), 6), CONCAT('\\Q', ' - ', '\\E'))
                ELSE ARRAY((
                  (
                    q.culprit
                  )
                ))
              END
            )[1] IS NULL,
            NULL,
            FORMAT_STRING(
              'look at the path between %s and %s: the speed both NICs negotiated (ethtool), shaping, policing or added delay (tc -s qdisc), other traffic on the switch ports between them, its round trip against the other paths\' (ping)',
              (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[0],
              (
                CASE
                  WHEN (
                    (
                      q.culprit
                    )
                  ) LIKE 'link %'
                  THEN SPLIT(SUBSTRING((
                    (
                      q.culprit
                    )
                  ), 6), CONCAT('\\Q', ' - ', '\\E'))
                  ELSE ARRAY((
                    (
                      q.culprit
                    )
                  ))
                END
              )[1]
            )
          )
        END
        WHEN (
          'queueing'
        ) = 'network'
        THEN IF(
          (
            q.culprit
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      q.culprit
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL
          OR (
            q.culprit
          ) IS NULL,
          NULL,
          FORMAT_STRING(
            'look for packet loss on %s\'s link: its NIC\'s error and drop counters (ethtool -S %s on %s), the switch port\'s error and discard counters, the cable or optic',
            (
              q.culprit
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        q.culprit
                      )
                    )
                ),
                '<interface>'
              )
            ),
            (
              q.culprit
            )
          )
        )
        ELSE IF(
          (
            q.culprit
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      q.culprit
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL
          OR (
            q.culprit
          ) IS NULL
          OR (
            COALESCE(
              (
                SELECT
                  i.iface AS iface
                FROM st_node_iface AS i
                WHERE
                  i.node = (
                    (
                      q.culprit
                    )
                  )
              ),
              '<interface>'
            )
          ) IS NULL,
          NULL,
          FORMAT_STRING(
            'look at %s\'s link: the speed it negotiated (ethtool %s on %s), shaping, policing or added delay on it (tc -s qdisc show dev %s), other traffic on its switch port, its round trip to the other nodes against theirs (ping)',
            (
              q.culprit
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        q.culprit
                      )
                    )
                ),
                '<interface>'
              )
            ),
            (
              q.culprit
            ),
            (
              COALESCE(
                (
                  SELECT
                    i.iface AS iface
                  FROM st_node_iface AS i
                  WHERE
                    i.node = (
                      (
                        q.culprit
                      )
                    )
                ),
                '<interface>'
              )
            )
          )
        )
      END
    ) AS next_check
  FROM st_persistent_queueing AS q
  CROSS JOIN st_params AS p
  CROSS JOIN st_job_span AS j
  LEFT JOIN st_persistent_cost AS k
    ON q.culprit = k.culprit
  LEFT JOIN st_culprit_when AS w
    ON w.cause = 'persistent' AND w.culprit = q.culprit
  CROSS JOIN LATERAL (
    SELECT
      COALESCE(
        MAX(
          IF(
            (
              CASE
                WHEN (
                  d.slowest_bps
                ) IS NULL
                THEN '?'
                WHEN (
                  d.slowest_bps
                ) >= 1e9
                THEN IF(
                  (
                    d.slowest_bps
                  ) / 1e9 IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%s Gbit/s',
                    FORMAT_NUMBER((
                      d.slowest_bps
                    ) / 1e9, IF((
                      1
                    ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                  )
                )
                ELSE IF(
                  (
                    d.slowest_bps
                  ) / 1e6 IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%s Mbit/s',
                    FORMAT_NUMBER((
                      d.slowest_bps
                    ) / 1e6, IF((
                      0
                    ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                  )
                )
              END
            ) IS NULL
            OR (
              CASE
                WHEN (
                  d.others_bps
                ) IS NULL
                THEN '?'
                WHEN (
                  d.others_bps
                ) >= 1e9
                THEN IF(
                  (
                    d.others_bps
                  ) / 1e9 IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%s Gbit/s',
                    FORMAT_NUMBER((
                      d.others_bps
                    ) / 1e9, IF((
                      1
                    ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                  )
                )
                ELSE IF(
                  (
                    d.others_bps
                  ) / 1e6 IS NULL,
                  NULL,
                  FORMAT_STRING(
                    '%s Mbit/s',
                    FORMAT_NUMBER((
                      d.others_bps
                    ) / 1e6, IF((
                      0
                    ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                  )
                )
              END
            ) IS NULL,
            NULL,
            FORMAT_STRING(
              '; its slowest flow delivered %s, the other flows %s (median)',
              (
                CASE
                  WHEN (
                    d.slowest_bps
                  ) IS NULL
                  THEN '?'
                  WHEN (
                    d.slowest_bps
                  ) >= 1e9
                  THEN IF(
                    (
                      d.slowest_bps
                    ) / 1e9 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Gbit/s',
                      FORMAT_NUMBER((
                        d.slowest_bps
                      ) / 1e9, IF((
                        1
                      ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                    )
                  )
                  ELSE IF(
                    (
                      d.slowest_bps
                    ) / 1e6 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Mbit/s',
                      FORMAT_NUMBER((
                        d.slowest_bps
                      ) / 1e6, IF((
                        0
                      ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                    )
                  )
                END
              ),
              (
                CASE
                  WHEN (
                    d.others_bps
                  ) IS NULL
                  THEN '?'
                  WHEN (
                    d.others_bps
                  ) >= 1e9
                  THEN IF(
                    (
                      d.others_bps
                    ) / 1e9 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Gbit/s',
                      FORMAT_NUMBER((
                        d.others_bps
                      ) / 1e9, IF((
                        1
                      ) > 0, CONCAT('0.', REPEAT('0', 1)), '0'))
                    )
                  )
                  ELSE IF(
                    (
                      d.others_bps
                    ) / 1e6 IS NULL,
                    NULL,
                    FORMAT_STRING(
                      '%s Mbit/s',
                      FORMAT_NUMBER((
                        d.others_bps
                      ) / 1e6, IF((
                        0
                      ) > 0, CONCAT('0.', REPEAT('0', 0)), '0'))
                    )
                  )
                END
              )
            )
          )
        ),
        ''
      ) AS delivery
    FROM st_culprit_delivery AS d
    WHERE
      d.culprit = q.culprit AND NOT d.slowest_bps IS NULL AND NOT d.others_bps IS NULL
  ) AS dl
  WHERE
    q.share_of_steps >= p.min_persistent_share
    AND q.share_of_queued_steps >= p.min_persistent_share
    AND NOT EXISTS(
      SELECT
        1 AS `1`
      FROM s AS s
      WHERE
        s.subject = q.culprit
    )
    AND /* most of its iterations already lost their time to a verdict culprit: it is that */ /* culprit's neighbour, queueing the late or held traffic (under reordering on node2's */ /* link node1 queued in 210 of 308 steps, all of them node2's, and was named beside it */ /* with the same 4.1 s) */ COALESCE(k.shared_with_verdict, 0) < 0.5
    AND /* priced, it must pass the verdict's floors like any culprit */ (
      k.time_lost_s IS NULL
      OR (
        k.time_lost_s >= p.min_lost_s
        AND k.time_lost_s >= p.min_lost_fraction * j.traced_s
      )
    )
), lost /* Slow packets (latency, contention) and ranks waiting for each other (sync_amplification) are */ /* what a busy host shows on any run: a clean 4-rank DDP run had one flow's RTT p99 at 3.2x the */ /* fleet's. When collective timelines say whether the job lost time, such evidence is a finding */ /* only if it did (a culprit in the verdict, or a straggler); otherwise it is `withheld` (with */ /* the reason): listed as standing out, not as a finding. Without timelines it is all the */ /* diagnosis there is. */ /* `timed`: the verdict could have seen lost time — matched steps with end times and enough */ /* occurrences to have a healthy duration (NCCL API calls have entry times only; a profiler */ /* window of 3 steps has no healthy duration to compare with). */ AS (
  SELECT
    EXISTS(
      SELECT
        1 AS `1`
      FROM st_collective_excess AS x, st_params AS p
      WHERE
        NOT x.transfer_us IS NULL AND x.occurrences >= p.min_occurrences
    ) AS timed,
    (
      SELECT
        MIN(st_collective_excess.first_start_us) AS _col_0
      FROM st_collective_excess AS st_collective_excess
    ) AS span_start_us,
    (
      SELECT
        MAX(st_collective_excess.last_end_us) AS _col_0
      FROM st_collective_excess AS st_collective_excess
    ) AS span_end_us,
    EXISTS(
      SELECT
        1 AS `1`
      FROM s AS s
    )
    OR EXISTS(
      SELECT
        1 AS `1`
      FROM pq AS pq
    )
    OR EXISTS(
      SELECT
        1 AS `1`
      FROM f AS f
      WHERE
        f.category = 'straggler'
    ) AS job_lost_time
), flow_in_span /* A flow judged on latency is judged by the timelines only when most of its RTT samples fall */ /* within the traced steps: samples from before or after the profiler ran say nothing about */ /* whether steps got slower. */ /* (The flows are picked before the join: filtered after it, DuckDB built the label of every */ /* RTT sample's flow, 7 of 10 s of the findings on 64 nodes' 2 minutes.) */ AS (
  SELECT
    fl.host AS host,
    fl.flow_label AS flow_label,
    COUNT(*) FILTER(WHERE
      (
        (
          r.ts
        ) DIV 1000
      ) BETWEEN lost.span_start_us AND lost.span_end_us) / COUNT(*) AS share
  FROM (
    SELECT
      st_flow.host AS host,
      st_flow.flow_id AS flow_id,
      st_flow.flow_label AS flow_label
    FROM st_flow AS st_flow
    WHERE
      st_flow.flow_label IN (
        SELECT
          f.subject AS subject
        FROM f AS f
        WHERE
          f.category = 'latency'
      )
  ) AS fl
  JOIN rtt AS r
    ON fl.host = r.host AND fl.flow_id = r.flow_id
  CROSS JOIN lost AS lost
  GROUP BY
    fl.host,
    fl.flow_label
), a AS (
  SELECT
    f.category AS category,
    f.scope AS scope,
    f.subject AS subject,
    f.host AS host,
    f.rank AS rank,
    f.score AS score,
    f.summary AS summary,
    CAST(NULL AS DOUBLE) AS time_lost_s,
    CAST(NULL AS STRING) AS withheld,
    NULL AS first_seen,
    NULL AS last_seen,
    NULL AS first_step,
    NULL AS seen_when,
    NULL AS next_check
  FROM f AS f
  UNION ALL
  SELECT
    s.category AS category,
    s.scope AS scope,
    s.subject AS subject,
    s.host AS host,
    s.rank AS rank,
    s.score AS score,
    s.summary AS summary,
    s.time_lost_s AS time_lost_s,
    NULL AS withheld,
    s.first_seen AS first_seen,
    s.last_seen AS last_seen,
    s.first_step AS first_step,
    s.seen_when AS seen_when,
    s.next_check AS next_check
  FROM s AS s
  UNION ALL
  SELECT
    pq.category AS category,
    pq.scope AS scope,
    pq.subject AS subject,
    pq.host AS host,
    pq.rank AS rank,
    pq.score AS score,
    pq.summary AS summary,
    pq.time_lost_s AS time_lost_s,
    NULL AS withheld,
    pq.first_seen AS first_seen,
    pq.last_seen AS last_seen,
    pq.first_step AS first_step,
    pq.seen_when AS seen_when,
    pq.next_check AS next_check
  FROM pq AS pq
  UNION ALL
  SELECT
    late_rank.category AS category,
    late_rank.scope AS scope,
    late_rank.subject AS subject,
    late_rank.host AS host,
    late_rank.rank AS rank,
    late_rank.score AS score,
    late_rank.summary AS summary,
    NULL AS time_lost_s,
    'arrived last without more work of its own than the other ranks: held up by something else, not a straggler' AS withheld,
    NULL AS first_seen,
    NULL AS last_seen,
    NULL AS first_step,
    NULL AS seen_when,
    NULL AS next_check
  FROM late_rank AS late_rank
  WHERE
    late_rank.held_up
)
/* Scores and costs to 9 decimal places: DuckDB adds a group's doubles (an avg(), a sum of step */
/* times above the healthy median) in whatever order its threads finish, so their last bit */
/* varied between two analyses of the same data (the sync_amplification score, an average */
/* wait fraction: ...3509, ...351, ...3508 in five runs of tests/data/slow-rank-noise-before-onset); */
/* rounded, the same data gives the same findings, to the byte. */
SELECT
  a.category AS category,
  a.scope AS scope,
  ROW_NUMBER() OVER (
    PARTITION BY a.category, a.scope
    ORDER BY NOT a.withheld IS NULL NULLS LAST, ROUND(a.score, 9) DESC, a.subject NULLS LAST
  ) AS rank_in_scope,
  a.subject AS subject,
  a.host AS host,
  COALESCE(fj.job, hj.job) AS job,
  a.rank AS rank,
  ROUND(a.score, 9) AS score,
  ROUND(a.time_lost_s, 9) AS time_lost_s,
  COALESCE(COALESCE(fj.job, hj.job) || ': ', '') || a.summary AS summary,
  a.first_seen AS first_seen,
  a.last_seen AS last_seen,
  a.first_step AS first_step,
  a.seen_when AS seen_when,
  a.next_check AS next_check,
  COALESCE(
    a.withheld,
    CASE
      WHEN a.category IN ('latency', 'contention')
      AND lost.timed
      AND NOT lost.job_lost_time
      AND (
        a.category <> 'latency' OR COALESCE(w.share, 0) >= 0.5
      )
      THEN 'stood out, but the job lost no step time to any culprit above the verdict\'s floors'
    END
  ) AS withheld
FROM a AS a
CROSS JOIN lost AS lost
LEFT JOIN flow_in_span AS w
  ON a.category = 'latency' AND w.host = a.host AND w.flow_label = a.subject
LEFT JOIN st_host_job AS hj
  ON hj.host = a.host
LEFT JOIN st_flow_job AS fj
  ON a.scope IN ('flow', 'tail_outlier') AND fj.flow_label = a.subject
/* ranks waiting for each other is how synchronous training works: without lost time it is not */
/* even worth a line (a clean 6-rank gloo job's fastest rank waits ~30 % of every step) */
WHERE
  NOT (
    a.category = 'sync_amplification' AND lost.timed AND NOT lost.job_lost_time
  )
/* the verdict first (what cost the most time first, then what could not be priced), then the */
/* evidence by category */
ORDER BY
  a.category <> 'slowdown' NULLS LAST,
  a.time_lost_s IS NULL NULLS LAST,
  time_lost_s DESC,
  category NULLS LAST,
  scope NULLS LAST,
  rank_in_scope NULLS LAST;

/* The findings: `st_finding` without what is withheld, in the same order. */
CREATE OR REPLACE TEMPORARY VIEW findings AS
SELECT
  *
  EXCEPT (withheld)
FROM st_finding
WHERE
  withheld IS NULL
ORDER BY
  category <> 'slowdown' NULLS LAST,
  time_lost_s IS NULL NULLS LAST,
  time_lost_s DESC,
  category NULLS LAST,
  scope NULLS LAST,
  rank_in_scope NULLS LAST;
