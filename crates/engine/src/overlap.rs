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

use serde::{Deserialize, Serialize};

/// Whether the engine queues a step before reading the last one's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepOverlap {
    /// On where it was measured to pay: nowhere yet (the H200 measurement
    /// is pending, `docs/perf/serving.md` session 22), so off.
    #[default]
    Auto,
    On,
    Off,
}

impl std::fmt::Display for StepOverlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StepOverlap::Auto => "auto",
            StepOverlap::On => "on",
            StepOverlap::Off => "off",
        })
    }
}

impl std::str::FromStr for StepOverlap {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(StepOverlap::Auto),
            "on" => Ok(StepOverlap::On),
            "off" => Ok(StepOverlap::Off),
            other => Err(format!("step overlap {other:?}: expected auto, on or off")),
        }
    }
}

/// What the setting resolved to on an engine, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverlapResolution {
    pub requested: StepOverlap,
    pub on: bool,
    pub why: &'static str,
}

impl OverlapResolution {
    /// `requested` on an engine of `world` ranks, capturing logits or not.
    pub fn resolve(requested: StepOverlap, world: usize, capture_logits: bool) -> Self {
        let (on, why) = match requested {
            StepOverlap::Off => (false, "off as asked"),
            StepOverlap::Auto => (false, "not yet measured to pay on any backend"),
            StepOverlap::On if world > 1 => (
                false,
                "a tensor-parallel group reads each step's tokens before the next",
            ),
            StepOverlap::On if capture_logits => {
                (false, "captured logits are read with each step's tokens")
            }
            StepOverlap::On => (true, "on as asked"),
        };
        OverlapResolution { requested, on, why }
    }
}

impl std::fmt::Display for OverlapResolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step overlap {} ({}: {})",
            if self.on { "on" } else { "off" },
            self.requested,
            self.why
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_prints_its_three_values() {
        for v in [StepOverlap::Auto, StepOverlap::On, StepOverlap::Off] {
            assert_eq!(v.to_string().parse::<StepOverlap>(), Ok(v));
        }
        let err = "yes".parse::<StepOverlap>().unwrap_err();
        assert!(
            err.contains("\"yes\"") && err.contains("auto, on or off"),
            "{err}"
        );
    }

    #[test]
    fn only_on_turns_it_on_and_only_where_the_tokens_can_wait() {
        assert!(OverlapResolution::resolve(StepOverlap::On, 1, false).on);
        assert!(!OverlapResolution::resolve(StepOverlap::Auto, 1, false).on);
        assert!(!OverlapResolution::resolve(StepOverlap::Off, 1, false).on);
        let tp = OverlapResolution::resolve(StepOverlap::On, 2, false);
        assert!(!tp.on && tp.why.contains("tensor-parallel"), "{tp}");
        let logits = OverlapResolution::resolve(StepOverlap::On, 1, true);
        assert!(!logits.on && logits.why.contains("logits"), "{logits}");
        assert_eq!(
            OverlapResolution::resolve(StepOverlap::Auto, 1, false).to_string(),
            "step overlap off (auto: not yet measured to pay on any backend)"
        );
    }
}
