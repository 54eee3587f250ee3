//! Recording a step for replay ([`Backend::queue_step`](super::Backend::queue_step)):
//! the key a recorded step is kept under. A backend that launches kernels
//! (CUDA) may record one step's launches as a graph and launch that graph
//! as one unit; a step whose key matches a kept recording updates it in
//! place (the launches' arguments change from step to step, their number
//! and order do not) instead of building a new one.

/// What decides a step's sequence of launches besides the values they
/// read: steps with equal keys queue the same kernels in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepKey {
    /// Rows of the step's batch.
    pub rows: usize,
    /// Sequences of the step's batch.
    pub sequences: usize,
    /// Whether some input tokens are read where a previous step drew them
    /// (another embedding kernel).
    pub drawn_ids: bool,
}

impl std::fmt::Display for StepKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} rows of {} sequences{}",
            self.rows,
            self.sequences,
            if self.drawn_ids { ", drawn ids" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_prints_what_it_keys_on() {
        let k = StepKey {
            rows: 4,
            sequences: 4,
            drawn_ids: true,
        };
        assert_eq!(k.to_string(), "4 rows of 4 sequences, drawn ids");
        let plain = StepKey {
            drawn_ids: false,
            ..k
        };
        assert_eq!(plain.to_string(), "4 rows of 4 sequences");
        assert_ne!(k, plain);
    }
}
