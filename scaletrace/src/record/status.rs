//! The live one-line status of a recording: a spinner line on a terminal, a plain line every
//! 10 s otherwise (logs of a service), nothing with --quiet.
use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{sinks::Sinks, KernelCounters};

pub struct StatusLine {
    bar: Option<ProgressBar>,
    plain: bool,
    last_plain: Instant,
    last_events: u64,
    last_at: Instant,
}

impl StatusLine {
    pub fn new(quiet: bool) -> Self {
        let tty = std::io::stderr().is_terminal();
        let bar = (!quiet && tty).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                    .expect("valid template"),
            );
            bar
        });
        StatusLine {
            bar,
            plain: !quiet && !tty,
            last_plain: Instant::now(),
            last_events: 0,
            last_at: Instant::now(),
        }
    }

    pub fn update(
        &mut self,
        elapsed: Duration,
        sinks: &Sinks,
        open_flows: impl FnOnce() -> usize,
        k: &KernelCounters,
    ) {
        let now = Instant::now();
        // counting the open flows walks the kernel table: only for a line that is shown
        let shown = self.bar.is_some()
            || (self.plain && now.duration_since(self.last_plain) >= Duration::from_secs(10));
        let dt = now.duration_since(self.last_at).as_secs_f64().max(1e-3);
        let rate = (sinks.accounting.events - self.last_events) as f64 / dt;
        self.last_events = sinks.accounting.events;
        self.last_at = now;
        if !shown {
            return;
        }
        let open_flows = open_flows();
        let mut msg = format!(
            "{rate:.0} events/s | flows {open_flows} open, {} closed | rtt {} | retrans {} | drops {}",
            sinks.flows_written(),
            sinks.rtt_written(),
            sinks.retransmits_written(),
            k.ring_drops(),
        );
        if k.untracked_flows() > 0 {
            msg.push_str(&format!(
                " | untracked {} (table full)",
                k.untracked_flows()
            ));
        }
        if let Some(bar) = &self.bar {
            bar.set_message(msg);
            bar.tick();
        } else {
            self.last_plain = now;
            eprintln!("scaletrace: {:.0}s {msg}", elapsed.as_secs_f64());
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
