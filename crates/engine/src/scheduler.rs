//! The token budget of one engine step (vLLM v1 style): decode tokens of
//! running sequences are taken first (one row each), then prefill chunks in
//! admission order, each at most the prefill chunk within `step_tokens` rows
//! — or, for a request alone in the engine, its resolved solo stripe, which
//! is then the whole step's budget — and never more than the rows left. The
//! step after a second request arrives is back to the shared budget, with
//! one exception ([`StepBudget::head_of_line`]): a step with no decode row
//! lets the oldest prefill take up to the solo stripe, so a burst of long
//! prompts arriving together gets its first answer as fast as a lone one
//! (nobody's decode waits behind that step).

use crate::settings::SchedulerSettings;

/// Rows left in the step being planned.
#[derive(Debug, Clone, Copy)]
pub struct StepBudget {
    left: usize,
    chunk: usize,
    /// The first prefill's chunk when it differs ([`Self::head_of_line`]).
    head_chunk: Option<usize>,
}

impl StepBudget {
    /// A fresh step; `solo` when exactly one request is in the engine,
    /// `solo_tokens` the resolved solo stripe ([`crate::stripe`]).
    pub fn new(settings: &SchedulerSettings, solo: bool, solo_tokens: usize) -> StepBudget {
        StepBudget {
            left: settings.step_rows(solo, solo_tokens),
            chunk: settings.max_chunk(solo, solo_tokens),
            head_chunk: None,
        }
    }

    /// A step with no decode row whose oldest prefill has `head_remaining`
    /// prompt tokens: that prefill may take up to the solo stripe (never
    /// less than the shared chunk), the step's rows are at least that, and
    /// the prefills after it take the shared chunk from what is left.
    pub fn head_of_line(
        settings: &SchedulerSettings,
        head_remaining: usize,
        solo_tokens: usize,
    ) -> StepBudget {
        let shared = StepBudget::new(settings, false, solo_tokens);
        let head = head_remaining.min(settings.max_chunk(true, solo_tokens));
        if head <= shared.chunk {
            return shared;
        }
        StepBudget {
            left: shared.left.max(head),
            chunk: shared.chunk,
            head_chunk: Some(head),
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

    /// The length [`Self::prefill`] would take for `remaining` prompt
    /// tokens, without taking it.
    pub fn peek_prefill(&self, remaining: usize) -> usize {
        remaining
            .min(self.head_chunk.unwrap_or(self.chunk))
            .min(self.left)
    }

    /// Returns `rows` taken by a chunk that was cut shorter after planning.
    pub fn give_back(&mut self, rows: usize) {
        self.left += rows;
    }

    /// Takes the next prefill chunk of a sequence with `remaining` prompt
    /// tokens; returns its length (0 when the step is full).
    pub fn prefill(&mut self, remaining: usize) -> usize {
        let n = self.peek_prefill(remaining);
        self.left -= n;
        self.head_chunk = None;
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
            ..SchedulerSettings::default()
        };
        let mut b = StepBudget::new(&s, false, 2048);
        assert!(b.decode() && b.decode());
        assert_eq!(b.peek_prefill(700), 512);
        assert_eq!(b.left(), 998, "a peek takes nothing");
        assert_eq!(b.prefill(700), 512);
        assert_eq!(b.prefill(700), 486, "the rest of the budget");
        assert_eq!(b.prefill(5), 0);
        assert!(!b.decode());
        b.give_back(30);
        assert_eq!((b.left(), b.prefill(700)), (30, 30), "rows given back");
        let mut solo = StepBudget::new(&s, true, 2048);
        assert_eq!(
            solo.prefill(5000),
            2048,
            "a solo step is its stripe, past step_tokens"
        );
        assert_eq!(solo.left(), 0);
        let mut whole = StepBudget::new(&s, true, 65_536);
        assert_eq!(
            whole.prefill(32_768),
            32_768,
            "the whole prompt in one step"
        );
        let mut head = StepBudget::head_of_line(&s, 32_768, 65_536);
        assert_eq!(head.prefill(32_768), 32_768, "the oldest prefill: whole");
        assert_eq!(head.prefill(700), 0, "nothing left after it");
        let mut head = StepBudget::head_of_line(&s, 1500, 65_536);
        assert_eq!(head.left(), 1500);
        assert_eq!(head.prefill(5000), 1500, "at most its remaining prompt");
        let mut short = StepBudget::head_of_line(&s, 300, 65_536);
        assert_eq!(
            (short.prefill(300), short.prefill(700), short.left()),
            (300, 512, 188),
            "a head within the shared chunk: the shared budget"
        );
        let mut capped = StepBudget::head_of_line(&s, 32_768, 4096);
        assert_eq!(capped.prefill(32_768), 4096, "at most the solo stripe");
        let mut small = StepBudget::new(&s, true, 100);
        assert_eq!(
            small.prefill(5000),
            512,
            "the solo stripe never shrinks the chunk"
        );
    }
}
