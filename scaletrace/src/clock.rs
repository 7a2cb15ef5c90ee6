//! Kernel monotonic time (what `bpf_ktime_get_ns` returns) to UTC wall-clock nanoseconds.
//!
//! Method: read CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_MONOTONIC back to back several times and
//! keep the triple with the narrowest monotonic bracket. The offset is
//! `realtime - midpoint(monotonic)`, its error bound half the bracket width. The offset measured
//! at start converts every event of a run; the offset measured again at the end is stored too,
//! and their difference (NTP slew or a clock step during the run) is part of the reported error.

/// Reads a clock in nanoseconds.
pub fn now_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; these clock ids always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Offset from kernel monotonic to UTC, with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// UTC ns = monotonic ns + offset_ns.
    pub offset_ns: i64,
    /// Half-width of the narrowest bracket seen: the offset is exact to within this.
    pub error_ns: i64,
}

impl ClockOffset {
    /// Picks the best of `(mono_before, realtime, mono_after)` samples.
    pub fn from_samples(samples: &[(i64, i64, i64)]) -> Option<Self> {
        samples
            .iter()
            .filter(|(a, _, b)| b >= a)
            .min_by_key(|(a, _, b)| b - a)
            .map(|&(a, real, b)| ClockOffset {
                offset_ns: real - (a + (b - a) / 2),
                error_ns: (b - a + 1) / 2,
            })
    }

    /// Measures the current offset on this machine.
    pub fn measure() -> Self {
        let samples: Vec<_> = (0..32)
            .map(|_| {
                let a = now_ns(libc::CLOCK_MONOTONIC);
                let r = now_ns(libc::CLOCK_REALTIME);
                let b = now_ns(libc::CLOCK_MONOTONIC);
                (a, r, b)
            })
            .collect();
        Self::from_samples(&samples).expect("CLOCK_MONOTONIC went backwards in every sample")
    }

    /// Converts a kernel monotonic timestamp to UTC ns.
    pub fn to_utc_ns(self, mono_ns: u64) -> i64 {
        mono_ns as i64 + self.offset_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowest_bracket_wins() {
        let samples = [(100, 10_000_150, 300), (1000, 10_001_010, 1010), (5, 0, 3)];
        let off = ClockOffset::from_samples(&samples).unwrap();
        // midpoint of 1000..1010 is 1005; realtime 10_001_010 -> offset 10_000_005
        assert_eq!(off.offset_ns, 10_000_005);
        assert_eq!(off.error_ns, 5);
        assert_eq!(off.to_utc_ns(2005), 10_002_010);
    }

    #[test]
    fn only_backwards_samples_give_none() {
        assert_eq!(ClockOffset::from_samples(&[(10, 0, 5)]), None);
        assert_eq!(ClockOffset::from_samples(&[]), None);
    }

    #[test]
    fn measured_offset_matches_the_system_clocks() {
        let off = ClockOffset::measure();
        let mono = now_ns(libc::CLOCK_MONOTONIC);
        let real = now_ns(libc::CLOCK_REALTIME);
        // Converting "now" must land near the real clock; the margin only absorbs a preemption
        // between the two reads on a loaded machine, a wrong offset would be off by far more.
        assert!((off.to_utc_ns(mono as u64) - real).abs() < 50_000_000);
        assert!(off.error_ns >= 0 && off.error_ns < 50_000_000);
    }
}
