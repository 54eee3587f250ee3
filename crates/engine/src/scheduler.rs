//! The token budget of one engine step (vLLM v1 style): decode tokens of
//! running sequences are taken first (one row each), then prefill chunks in
//! admission order, each at most the prefill chunk — or, for a request alone
//! in the engine, the solo stripe — and never more than the rows left.

use crate::settings::SchedulerSettings;

/// Rows left in the step being planned.
#[derive(Debug, Clone, Copy)]
pub struct StepBudget {
    left: usize,
    chunk: usize,
}

impl StepBudget {
    /// A fresh step; `solo` when exactly one request is in the engine.
    pub fn new(settings: &SchedulerSettings, solo: bool) -> StepBudget {
        StepBudget {
            left: settings.step_tokens,
            chunk: settings.max_chunk(solo),
        }
    }

    pub fn left(&self) -> usize {
        self.left
    }

    /// Takes one decode row; false when the step is full.
    pub fn decode(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Takes the next prefill chunk of a sequence with `remaining` prompt
    /// tokens; returns its length (0 when the step is full).
    pub fn prefill(&mut self, remaining: usize) -> usize {
        let n = remaining.min(self.chunk).min(self.left);
        self.left -= n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_first_then_chunks_under_the_budget() {
        let s = SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 1000,
            solo_stripe: 2048,
        };
        let mut b = StepBudget::new(&s, false);
        assert!(b.decode() && b.decode());
        assert_eq!(b.prefill(700), 512);
        assert_eq!(b.prefill(700), 486, "the rest of the budget");
        assert_eq!(b.prefill(5), 0);
        assert!(!b.decode());
        let mut solo = StepBudget::new(&s, true);
        assert_eq!(solo.prefill(5000), 1000, "solo stripe capped by the step budget");
        let mut small = StepBudget::new(&SchedulerSettings { solo_stripe: 100, ..s }, true);
        assert_eq!(small.prefill(5000), 512, "the solo stripe never shrinks the chunk");
    }
}
