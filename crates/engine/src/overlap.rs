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
use headroom_core::BackendKind;

/// Whether the engine queues a step before reading the last one's tokens.
/// `auto`: on where it was measured to pay — the CUDA backend (H200,
/// `docs/perf/serving.md` session 23: batch-1 decode +0.4–1.6 %, W1
/// +1.4 %, the same tokens); off on the CPU, which draws each step's tokens
/// at once (nothing runs behind the host).
pub type StepOverlap = AutoSwitch;

/// What the setting resolved to on an engine, with why.
pub type OverlapResolution = Resolution;

/// `requested` on an engine of `world` ranks on `backend`, capturing
/// logits or not.
pub fn resolve(
    requested: StepOverlap,
    world: usize,
    capture_logits: bool,
    backend: BackendKind,
) -> OverlapResolution {
    let (on, why) = match requested {
        AutoSwitch::Off => (false, "off as asked"),
        _ if world > 1 => (
            false,
            "a tensor-parallel group reads each step's tokens before the next",
        ),
        _ if capture_logits => (false, "captured logits are read with each step's tokens"),
        AutoSwitch::Auto if backend == BackendKind::Cpu => (
            false,
            "the cpu backend draws each step's tokens at once: nothing runs behind the host",
        ),
        AutoSwitch::Auto => (
            true,
            "measured to pay on the H200 (docs/perf/serving.md, session 23)",
        ),
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
    fn auto_is_on_for_cuda_only_and_nothing_turns_it_on_where_tokens_cannot_wait() {
        use BackendKind::{Cpu, Cuda};
        assert!(resolve(StepOverlap::On, 1, false, Cuda).on);
        assert!(resolve(StepOverlap::On, 1, false, Cpu).on, "on as asked");
        assert!(resolve(StepOverlap::Auto, 1, false, Cuda).on);
        let cpu = resolve(StepOverlap::Auto, 1, false, Cpu);
        assert!(!cpu.on && cpu.why.contains("cpu backend"), "{cpu}");
        assert!(!resolve(StepOverlap::Off, 1, false, Cuda).on);
        for req in [StepOverlap::On, StepOverlap::Auto] {
            let tp = resolve(req, 2, false, Cuda);
            assert!(!tp.on && tp.why.contains("tensor-parallel"), "{tp}");
            let logits = resolve(req, 1, true, Cuda);
            assert!(!logits.on && logits.why.contains("logits"), "{logits}");
        }
        assert_eq!(
            resolve(StepOverlap::Auto, 1, false, Cuda).to_string(),
            "step overlap on (auto: measured to pay on the H200 (docs/perf/serving.md, session 23))"
        );
    }
}
