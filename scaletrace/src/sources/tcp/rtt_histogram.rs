//! Reading a flow's RTT histogram window (`FlowWindow`, counted in the kernel at every RTT
//! update): percentiles from its log-linear buckets, within a known error.
use scaletrace_common::{rtt_bucket_lower_us, FlowWindow, RTT_HIST_BUCKETS};

/// The value that stands for bucket `i`: itself below 4 µs (one value per bucket), else the
/// middle of the bucket. A bucket `[lo, hi)` is a quarter of a power of two wide, at most
/// `lo / 4`, so its middle is within `lo / 8` of any value in it: 12.5 %.
fn bucket_value_us(i: usize) -> f64 {
    if i < 4 {
        return i as f64;
    }
    let (lo, hi) = (rtt_bucket_lower_us(i), rtt_bucket_lower_us(i + 1));
    (lo as f64 + hi as f64) / 2.0
}

/// The `q` quantile (0 < q ≤ 1) of the window's RTTs, µs: the smallest value with at least
/// `q` of the updates at or below it (nearest rank), read as the value of its bucket and kept
/// within the window's exact minimum and maximum. The last bucket has no upper bound: a rank
/// there reads as the maximum. `None` for an empty window.
pub fn quantile_us(w: &FlowWindow, q: f64) -> Option<f64> {
    if w.count == 0 {
        return None;
    }
    let rank = ((q * w.count as f64).ceil() as u64).max(1);
    let mut seen = 0u64;
    for (i, &n) in w.buckets.iter().enumerate() {
        seen += n as u64;
        if seen >= rank {
            if i == RTT_HIST_BUCKETS - 1 {
                return Some(w.max_us as f64);
            }
            return Some(bucket_value_us(i).clamp(w.min_us as f64, w.max_us as f64));
        }
    }
    // the buckets hold fewer updates than the count (a torn read of a window being written)
    Some(w.max_us as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use scaletrace_common::rtt_bucket;

    #[test]
    fn every_value_falls_into_the_bucket_whose_bounds_hold_it() {
        // exhaustive up to 2^22 µs (4.2 s), where the last bucket begins its open end
        for us in 0..(1u32 << 22) {
            let i = rtt_bucket(us);
            assert!(rtt_bucket_lower_us(i) <= us, "{us} µs below bucket {i}");
            if i + 1 < RTT_HIST_BUCKETS {
                assert!(us < rtt_bucket_lower_us(i + 1), "{us} µs above bucket {i}");
            }
        }
        assert_eq!(rtt_bucket(u32::MAX), RTT_HIST_BUCKETS - 1);
        assert_eq!(rtt_bucket_lower_us(RTT_HIST_BUCKETS - 1), 3_670_016);
        // the buckets are contiguous: each one's lower bound is the previous one's upper
        for i in 1..RTT_HIST_BUCKETS {
            assert!(rtt_bucket_lower_us(i) > rtt_bucket_lower_us(i - 1));
            assert_eq!(rtt_bucket(rtt_bucket_lower_us(i)), i);
            assert_eq!(rtt_bucket(rtt_bucket_lower_us(i) - 1), i - 1);
        }
    }

    fn window_of(values: &[u32]) -> FlowWindow {
        let mut w = FlowWindow {
            min_us: u32::MAX,
            ..Default::default()
        };
        for &v in values {
            w.count += 1;
            w.sum_us += v as u64;
            w.min_us = w.min_us.min(v);
            w.max_us = w.max_us.max(v);
            w.buckets[rtt_bucket(v)] += 1;
        }
        w
    }

    fn exact_quantile(values: &[u32], q: f64) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1] as f64
    }

    #[test]
    fn percentiles_are_within_an_eighth_of_the_exact_ones() {
        // RTT-like spreads: a tight datacenter path, a queue that builds, and heavy tails,
        // from a fixed-seed generator (xorshift) so a failure repeats
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut worst: f64 = 0.0;
        // (all below 3.67 s, where the last bucket's open end begins: tested below)
        for (base, spread) in [(30u32, 10u32), (200, 5_000), (1_000, 150_000), (5, 3)] {
            for _ in 0..50 {
                let values: Vec<u32> = (0..1 + next() % 2_000)
                    .map(|_| {
                        let r = next();
                        // a tail: one in 50 updates up to 20 times further out
                        let tail = if r % 50 == 0 { 20 } else { 1 };
                        base + ((r >> 8) % spread as u64) as u32 * tail
                    })
                    .collect();
                let w = window_of(&values);
                for q in [0.5, 0.9, 0.99, 1.0] {
                    let exact = exact_quantile(&values, q);
                    let estimate = quantile_us(&w, q).unwrap();
                    let error = (estimate - exact).abs() / exact.max(1.0);
                    worst = worst.max(error);
                    assert!(error <= 0.125, "q {q}: {estimate} for {exact}");
                }
            }
        }
        assert!(
            worst > 0.0,
            "every estimate exact: the test does not exercise the buckets"
        );
    }

    #[test]
    fn an_empty_window_has_no_percentile_and_the_open_end_reads_as_the_maximum() {
        assert_eq!(quantile_us(&FlowWindow::default(), 0.5), None);
        let w = window_of(&[100, 5_000_000, 6_000_000]);
        assert_eq!(quantile_us(&w, 1.0), Some(6_000_000.0));
        // 100 µs is in [96, 112): read as 104
        assert_eq!(quantile_us(&w, 0.3), Some(104.0));
        // a window of one value reads as that value, the bucket's middle clamped to it
        assert_eq!(quantile_us(&window_of(&[97]), 0.5), Some(97.0));
    }
}
