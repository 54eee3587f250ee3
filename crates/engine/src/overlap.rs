//! The step overlap setting ([`StepOverlap`]) and what it resolves to on an
//! engine ([`OverlapResolution`]). With the overlap on, the engine queues
//! step k + 1 before it reads step k's tokens: the decode rows of step
//! k + 1 take those tokens where the backend drew them
//! (`Backend::embed_drawn`), and the host's work between two steps (reading
//! the tokens, streaming them, retiring and admitting requests, planning,
//! building the batch) runs while the device computes the next step
//! instead of in the device's idle time between steps. A sequence that
//! ends at step k (a stop token) has one more row in step k + 1, whose
//! output is dropped; a `max_tokens` end is known ahead and takes no row.
//! The mechanics are `crate::core`'s (`core/overlap.rs`).

use crate::switch::{AutoSwitch, Resolution};

/// Whether the engine queues a step before reading the last one's tokens.
/// `auto`: on where it was measured to pay — nowhere yet (the H200
/// measurement is pending, `docs/perf/serving.md` sessions 22–23), so off.
pub type StepOverlap = AutoSwitch;

/// What the setting resolved to on an engine, with why.
pub type OverlapResolution = Resolution;

/// `requested` on an engine of `world` ranks, capturing logits or not.
pub fn resolve(requested: StepOverlap, world: usize, capture_logits: bool) -> OverlapResolution {
    let (on, why) = match requested {
        AutoSwitch::Off => (false, "off as asked"),
        AutoSwitch::Auto => (false, "not yet measured to pay on any backend"),
        AutoSwitch::On if world > 1 => (
            false,
            "a tensor-parallel group reads each step's tokens before the next",
        ),
        AutoSwitch::On if capture_logits => {
            (false, "captured logits are read with each step's tokens")
        }
        AutoSwitch::On => (true, "on as asked"),
    };
    Resolution {
        setting: "step overlap",
        requested,
        on,
        why: why.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_on_turns_it_on_and_only_where_the_tokens_can_wait() {
        assert!(resolve(StepOverlap::On, 1, false).on);
        assert!(!resolve(StepOverlap::Auto, 1, false).on);
        assert!(!resolve(StepOverlap::Off, 1, false).on);
        let tp = resolve(StepOverlap::On, 2, false);
        assert!(!tp.on && tp.why.contains("tensor-parallel"), "{tp}");
        let logits = resolve(StepOverlap::On, 1, true);
        assert!(!logits.on && logits.why.contains("logits"), "{logits}");
        assert_eq!(
            resolve(StepOverlap::Auto, 1, false).to_string(),
            "step overlap off (auto: not yet measured to pay on any backend)"
        );
    }
}
