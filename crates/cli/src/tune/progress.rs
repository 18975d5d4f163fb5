//! What a person sees while a study runs: a live line (indicatif) with
//! trials done/running/pruned/failed, the best value and its parameters, and
//! memory leased; one line per finished trial; and the summary table at the
//! end. Where stderr is not a terminal (CI, pipes) only the per-trial lines
//! are printed.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Trials of the study by outcome, as counted toward `n_trials`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub complete: usize,
    pub pruned: usize,
    /// FAIL trials that were not retried.
    pub failed: usize,
    pub running: usize,
    pub waiting: usize,
    /// Of the PRUNED trials, those that did not fit the device.
    pub infeasible: usize,
    /// Of the PRUNED trials, those a `[[constraint]]` ruled out before
    /// they trained.
    pub over_constraint: usize,
}

impl Counts {
    pub fn finished(&self) -> usize {
        self.complete + self.pruned + self.failed
    }
}

pub struct Progress {
    bar: ProgressBar,
    live: bool,
}

impl Progress {
    pub fn new(n_trials: usize, enabled: bool) -> Self {
        let live = enabled && !crate::logging::quiet() && std::io::stderr().is_terminal();
        let bar = if live {
            ProgressBar::with_draw_target(Some(n_trials as u64), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:20}] {pos}/{len} {msg}")
                .expect("template is valid")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(500));
        Self { bar, live }
    }

    pub fn update(&self, counts: &Counts, best: Option<&str>, memory: &str) {
        self.bar.set_position(counts.finished() as u64);
        self.bar.set_message(format!(
            "{} complete, {} pruned, {} failed, {} running | best {} | {memory}",
            counts.complete,
            counts.pruned,
            counts.failed,
            counts.running,
            best.unwrap_or("-"),
        ));
    }

    /// A line above the live display (or on stderr when there is none);
    /// nothing with `-q`.
    pub fn line(&self, text: &str) {
        if crate::logging::quiet() {
            return;
        }
        if self.live {
            self.bar.println(text);
        } else {
            crate::logging::stderr_line(text);
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
