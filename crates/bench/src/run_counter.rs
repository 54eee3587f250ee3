//! A bench's runs counted as progress events (`headroom_core::progress`):
//! the binary shows them as a progress line on a terminal, nothing on a pipe.

use headroom_core::progress;

/// Counts `done` of `total` runs of one task.
pub struct RunCounter {
    task: &'static str,
    unit: &'static str,
    done: u64,
    total: u64,
}

impl RunCounter {
    /// Starts the count (reports 0 of `total`).
    pub fn new(task: &'static str, total: usize, unit: &'static str, message: &str) -> RunCounter {
        let c = RunCounter {
            task,
            unit,
            done: 0,
            total: total as u64,
        };
        progress::report(task, 0, c.total, unit, message);
        c
    }

    /// One more run done.
    pub fn inc(&mut self, message: &str) {
        self.done = (self.done + 1).min(self.total);
        progress::report(self.task, self.done, self.total, self.unit, message);
    }

    /// Ends the task (reports `total` of `total`), however many runs were counted.
    pub fn finish(&mut self, message: &str) {
        self.done = self.total;
        progress::report(self.task, self.total, self.total, self.unit, message);
    }
}
