//! Progress of a lab run: a bar on a terminal, and always one plain line
//! per step on stderr so logs and CI show where a run is.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    interactive: bool,
    /// Set when the run is asked to stop (Ctrl-C): suites end before their
    /// next step instead of at the end of the suite.
    stop: Option<Arc<AtomicBool>>,
}

impl Progress {
    /// A progress display for `total_steps` steps.
    pub fn new(total_steps: u64) -> Self {
        let interactive = std::io::stderr().is_terminal();
        let bar = if interactive {
            let bar =
                ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Self {
            bar,
            started: Instant::now(),
            interactive,
            stop: None,
        }
    }

    /// Makes [`Progress::stopping`] follow `flag`.
    pub fn stop_on(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Whether the run was asked to stop: start no new step.
    pub fn stopping(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// A line above the bar (or a plain line without a terminal).
    pub fn line(&self, text: &str) {
        let stamped = format!("[{:>6.1}s] {text}", self.started.elapsed().as_secs_f64());
        if self.interactive {
            self.bar.println(stamped);
        } else {
            eprintln!("{stamped}");
        }
    }

    /// Starts a step: shows what is being measured.
    pub fn step(&self, text: &str) {
        self.bar.set_message(text.to_string());
        self.line(text);
    }

    /// Finishes a step.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// Skips `steps` steps that will not run (a system that failed).
    pub fn skip(&self, steps: u64) {
        self.bar.inc(steps);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
