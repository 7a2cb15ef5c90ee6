//! `analyze --baseline`: the step time of a run of the same job without the problem (last week's
//! run, a run before an upgrade). A fault present from the job's first step leaves no healthy
//! iteration in the run itself, so what it cost can only be priced against another run; the
//! baseline is reduced to one row (`st_baseline`) that the verdict's pricing reads.
use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use super::DuckDb;

/// A baseline run as the summary query reads it (no step time when it has no iterations).
#[derive(Deserialize)]
struct Summary {
    step_us: Option<f64>,
    iterations: i64,
    ranks: i64,
    culprits: i64,
}

/// What the verdict needs from a baseline run.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Its healthy step time (the median iteration without a culprit's evidence), else its
    /// median iteration.
    pub step_us: f64,
    pub iterations: i64,
    pub ranks: i64,
    /// Culprits in the baseline's own verdict: a baseline that was itself slowed.
    pub culprits: i64,
    pub label: String,
}

/// The ranks of a job's traced training steps: a baseline of another job has other ones.
const RANKS: &str = "(SELECT count(DISTINCT rank) FROM st_profiler_step) AS ranks";

#[derive(Deserialize)]
struct Ranks {
    ranks: i64,
}

impl Baseline {
    pub fn read(db: &DuckDb, label: &str) -> Result<Self> {
        let summary = format!(
            "SELECT coalesce((SELECT healthy_step_us FROM st_healthy_step WHERE usable),
                             (SELECT median(step_us) FROM st_iteration)) AS step_us,
                    (SELECT count(*) FROM st_iteration) AS iterations, {RANKS},
                    (SELECT count(*) FROM findings WHERE category = 'slowdown') AS culprits"
        );
        let s: Summary = db
            .rows(&summary)
            .with_context(|| format!("--baseline {label}: analyzing it"))?
            .into_iter()
            .next()
            .context("empty baseline summary")?;
        match s.step_us {
            Some(step_us) if s.iterations > 0 => Ok(Baseline {
                step_us,
                iterations: s.iterations,
                ranks: s.ranks,
                culprits: s.culprits,
                label: label.to_string(),
            }),
            _ => bail!("--baseline {label}: no training steps (ProfilerStep#N) in its timelines: import the ranks' PyTorch profiler traces of that run too"),
        }
    }

    /// The job analyzed in `db` must be the same job: as many ranks.
    pub fn check_same_job(&self, db: &DuckDb) -> Result<()> {
        let ranks = db
            .rows::<Ranks>(&format!("SELECT {RANKS}"))
            .context("counting the ranks")?
            .first()
            .map_or(0, |r| r.ranks);
        self.check_ranks(ranks)
    }

    /// As `check_same_job`, with the ranks counted elsewhere (a triaged store's, whose exact
    /// analysis reads some of them).
    pub fn check_ranks(&self, ranks: i64) -> Result<()> {
        if ranks > 0 && ranks != self.ranks {
            bail!(
                "--baseline {}: its job has {} ranks, this one {ranks}: not a run of the same job",
                self.label,
                self.ranks
            );
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        format!(
            "baseline {}: {} training steps on {} ranks, healthy step {:.1} ms{}",
            self.label,
            self.iterations,
            self.ranks,
            self.step_us / 1e3,
            if self.culprits > 0 {
                format!(
                    " (its own verdict names {} culprit(s): it was slowed too)",
                    self.culprits
                )
            } else {
                String::new()
            }
        )
    }
}

/// The `st_baseline` view: one row with the baseline, or none.
/// `quote` writes a string literal of the script's dialect; the types are both DuckDB's and Spark's.
pub fn sql(baseline: Option<&Baseline>, quote: fn(&str) -> String) -> String {
    let head =
        "-- The step time of a run of the same job without the problem (analyze --baseline)\n\
                CREATE OR REPLACE VIEW st_baseline AS ";
    match baseline {
        Some(b) => format!(
            "{head}SELECT {:?}::DOUBLE AS step_us, {}::BIGINT AS iterations, {}::BIGINT AS ranks, {}::STRING AS label;\n",
            b.step_us,
            b.iterations,
            b.ranks,
            quote(&b.label)
        ),
        None => format!(
            "{head}SELECT NULL::DOUBLE AS step_us, NULL::BIGINT AS iterations, NULL::BIGINT AS ranks, NULL::STRING AS label WHERE false;\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::sources;

    #[test]
    fn one_row_or_none_and_same_job() {
        assert!(sql(None, sources::quote).contains("WHERE false"));
        let b = Baseline {
            step_us: 114_000.5,
            iterations: 77,
            ranks: 4,
            culprits: 0,
            label: "runs/it's clean".into(),
        };
        let s = sql(Some(&b), sources::quote);
        assert!(s.contains("114000.5::DOUBLE AS step_us"), "{s}");
        assert!(s.contains("'runs/it''s clean'"), "{s}");
        assert!(b.check_ranks(4).is_ok());
        let e = b.check_ranks(5).unwrap_err().to_string();
        assert!(e.contains("4 ranks, this one 5"), "{e}");
        assert!(!b.describe().contains("slowed too"));
    }
}
