//! Progress of a lab run: a bar on a terminal, and always one plain line
//! per step on stderr so logs and CI show where a run is.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
        // Hidden, the bar still counts the steps for the plain lines.
        let bar = if interactive {
            let bar =
                ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len}, about {eta} left: {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::hidden())
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

    /// Starts a step: shows what is being measured. The plain line also
    /// says which step of how many, and how long the rest may take.
    pub fn step(&self, text: &str) {
        self.bar.set_message(text.to_string());
        if self.interactive {
            self.line(text);
            return;
        }
        let done = self.bar.position();
        let total = self.bar.length().unwrap_or(done);
        let position = format!("{}/{total}", (done + 1).min(total));
        match remaining_estimate(self.started.elapsed(), done, total) {
            Some(left) => self.line(&format!("{position}, about {} left: {text}", minutes(left))),
            None => self.line(&format!("{position}: {text}")),
        }
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

/// The time the steps left may take at the pace of those done: `None`
/// before the first is done (no pace yet). Steps differ in length, so
/// this is a rough figure, said as "about".
fn remaining_estimate(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    if done == 0 {
        return None;
    }
    let left = total.saturating_sub(done);
    Some(elapsed.mul_f64(left as f64 / done as f64))
}

/// A duration in whole minutes ("1 h 05 min", "12 min", "< 1 min").
fn minutes(duration: Duration) -> String {
    let minutes = (duration.as_secs() + 30) / 60;
    match minutes {
        0 => "< 1 min".to_string(),
        1..60 => format!("{minutes} min"),
        _ => format!("{} h {:02} min", minutes / 60, minutes % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_the_pace_of_the_steps_done() {
        let minute = Duration::from_secs(60);
        assert_eq!(remaining_estimate(minute, 0, 10), None);
        assert_eq!(remaining_estimate(2 * minute, 4, 10), Some(3 * minute));
        assert_eq!(remaining_estimate(minute, 10, 10), Some(Duration::ZERO));
        assert_eq!(remaining_estimate(minute, 12, 10), Some(Duration::ZERO));
    }

    #[test]
    fn durations_are_said_in_minutes() {
        assert_eq!(minutes(Duration::from_secs(20)), "< 1 min");
        assert_eq!(minutes(Duration::from_secs(12 * 60 + 10)), "12 min");
        assert_eq!(minutes(Duration::from_secs(65 * 60)), "1 h 05 min");
        assert_eq!(minutes(Duration::from_secs(5 * 3600 + 29)), "5 h 00 min");
    }
}
