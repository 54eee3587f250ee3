//! The largest `--max-context` a configuration fits ([`largest_fitting_context`]):
//! when not even one sequence of the asked context fits (a 262,144-token
//! model on a card whose weights leave a few GiB, say), the start-up error
//! names the context that would, as a number the user can pass back — or,
//! where the configuration takes its context as a ceiling
//! ([`ContextFit::AtMost`]: `serve` without `--max-context`), the engine
//! runs that context and says so ([`plan_pool_fitting_context`]).

use crate::config::{ContextFit, EngineConfig};
use crate::kv::{blocks_for, KV_BLOCK_ROWS};
use crate::memory::MemoryModel;
use crate::pool::{plan_pool, PoolError, PoolPlan};
use headroom_core::ops::Backend;
use headroom_model::StepModel;

/// [`plan_pool`]; where the asked context does not fit, the error also
/// names the largest that does with the same settings (its own largest
/// step too).
pub(crate) fn plan_pool_naming_fit<B: Backend, M: StepModel<B>>(
    model: &M,
    cfg: &EngineConfig,
    memory: &MemoryModel,
) -> Result<PoolPlan, PoolError> {
    plan_pool(model, cfg, memory).map_err(|cause| {
        let fits = |context: usize| {
            let mut at = cfg.clone();
            at.max_context = context;
            plan_pool(model, &at, memory).is_ok()
        };
        match largest_fitting_context(cfg.max_context, fits) {
            Some(fits) => PoolError::ContextTooLong {
                cause: Box::new(cause),
                fits,
            },
            None => cause,
        }
    })
}

/// The pools of `cfg` under its [`ContextFit`]: [`plan_pool_naming_fit`];
/// with [`ContextFit::AtMost`], a context that does not fit is lowered to
/// the largest that does — `cfg.max_context` set to it (so everything the
/// engine sizes from `cfg` after the plan runs it) and the plan's
/// `lowered_from` the asked one — with a warning naming both.
pub(crate) fn plan_pool_fitting_context<B: Backend, M: StepModel<B>>(
    model: &M,
    cfg: &mut EngineConfig,
    memory: &MemoryModel,
) -> Result<PoolPlan, PoolError> {
    match plan_pool_naming_fit(model, cfg, memory) {
        Err(PoolError::ContextTooLong { cause, fits }) if cfg.context_fit == ContextFit::AtMost => {
            let asked = cfg.max_context;
            cfg.max_context = fits;
            let mut plan = plan_pool(model, cfg, memory)?;
            plan.lowered_from = Some(asked);
            tracing::warn!(
                "max_context lowered from {asked} to {fits} tokens, the largest that fits the \
                 memory with these settings (at {asked}: {cause}); pass --max-context to choose"
            );
            Ok(plan)
        }
        planned => planned,
    }
}

/// The largest context below `asked` tokens, a whole number of KV blocks,
/// that `fits`; `None` when not even one block's context does. A shorter
/// context never needs more memory, so it is found by bisection over the
/// block count.
pub fn largest_fitting_context(asked: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
    let fits_blocks = |blocks: usize| fits(blocks * KV_BLOCK_ROWS);
    // Contexts of fewer blocks than `asked` needs.
    let (mut lo, mut hi) = (1usize, blocks_for(asked).saturating_sub(1));
    if hi == 0 || !fits_blocks(1) {
        return None;
    }
    // Invariant: `lo` blocks fit; more than `hi` do not (or are not asked).
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits_blocks(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo * KV_BLOCK_ROWS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{size_pool, PoolInputs, RunningSlots};
    use crate::settings::SnapshotSlots;

    const MIB: u64 = 1 << 20;

    /// 1 MiB blocks of 64 rows, 10 MiB of GDN state a slot, 8 slots, and a
    /// step transient that grows with the context (1 MiB a block).
    fn at(available: u64) -> impl Fn(usize) -> PoolInputs {
        move |context| PoolInputs {
            available_bytes: Some(available),
            block_bytes: MIB,
            gdn_bytes_per_slot: 10 * MIB,
            sampled_bytes_per_slot: 0,
            step_transient_bytes: blocks_for(context) as u64 * MIB,
            running: RunningSlots::Fixed(8),
            max_context: context,
            snapshots: SnapshotSlots::Fixed(0),
        }
    }

    #[test]
    fn the_answer_fits_and_one_block_more_does_not() {
        // 1000 MiB: 80 MiB of GDN; a context of b blocks needs b (KV) + b
        // (transient) MiB: 460 blocks = 29,440 tokens fit, 461 do not.
        let inputs = at(1000 * MIB);
        let asked = 262_144;
        assert!(size_pool(&inputs(asked)).is_err());
        let fit = largest_fitting_context(asked, |c| size_pool(&inputs(c)).is_ok()).unwrap();
        assert_eq!(fit, 460 * KV_BLOCK_ROWS);
        assert!(size_pool(&inputs(fit)).is_ok());
        assert!(size_pool(&inputs(fit + KV_BLOCK_ROWS)).is_err());
    }

    #[test]
    fn nothing_when_not_even_one_block_fits_or_only_one_is_asked() {
        // 80 MiB of GDN alone fills 81 MiB: one block's KV and transient do not fit.
        let fits = |available: u64| move |c| size_pool(&at(available)(c)).is_ok();
        assert_eq!(largest_fitting_context(262_144, fits(81 * MIB)), None);
        assert_eq!(
            largest_fitting_context(KV_BLOCK_ROWS, fits(1000 * MIB)),
            None
        );
    }

    #[test]
    fn below_the_asked_context_whatever_memory_allows() {
        // Everything fits: the answer stays below what was asked (the
        // caller asks only after the asked context failed).
        let fit = largest_fitting_context(4096, |c| size_pool(&at(1 << 40)(c)).is_ok()).unwrap();
        assert_eq!(fit, 4096 - KV_BLOCK_ROWS);
    }
}

/// [`plan_pool_fitting_context`] through [`crate::EngineCore::new`] on the CPU.
#[cfg(test)]
mod engine_tests {
    use crate::config::{ContextFit, EngineConfig};
    use crate::{EngineCore, EngineError, GenerateRequest, SubmitError};
    use headroom_cpu::CpuBackend;
    use headroom_model::{ModelConfig, Qwen35Model, Weights};

    /// tiny-d256 (a 32,768-token model) with one state slot in 200 MiB:
    /// the largest step's transients at its full context do not fit.
    fn engine(context_fit: ContextFit) -> Result<EngineCore<CpuBackend>, EngineError> {
        let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
        let model =
            Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
        EngineCore::new(
            model,
            EngineConfig {
                memory_budget_bytes: Some(200 << 20),
                max_running: 1,
                max_context: cfg.max_position_embeddings,
                context_fit,
                ..EngineConfig::default()
            },
        )
    }

    /// The context the exact mode's error names as the largest that fits.
    fn named_fit() -> usize {
        let Err(EngineError::Config(e)) = engine(ContextFit::Exact) else {
            panic!("an exact 32,768-token context fits 200 MiB");
        };
        e.split("the largest --max-context that fits is ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no fitting context named: {e}"))
    }

    #[test]
    fn a_ceiling_that_does_not_fit_runs_the_largest_context_that_does() {
        let fits = named_fit();
        assert!(fits > 0 && fits < 32_768, "{fits}");
        let mut core = engine(ContextFit::AtMost).unwrap();
        // One value everywhere the engine sizes or reports its context.
        assert_eq!(core.config().max_context, fits);
        assert_eq!(core.limits().max_context, fits);
        assert_eq!(core.pool().max_context, fits);
        assert_eq!(core.pool().lowered_from, Some(32_768));
        assert_eq!(core.stats().pool, *core.pool());
        let plan = core.pool().to_string();
        assert!(
            plan.contains(&format!("({fits} tokens, lowered from 32768 to fit)")),
            "{plan}"
        );
        // A request of the lowered context is taken; one token more is refused, naming it.
        assert!(core
            .submit(GenerateRequest::greedy(vec![1; fits - 1], 1))
            .is_ok());
        let Err(e) = core.submit(GenerateRequest::greedy(vec![1; fits], 1)) else {
            panic!("a request past the lowered context was taken");
        };
        assert_eq!(
            e,
            SubmitError::TooLong {
                tokens: fits + 1,
                limit: fits
            }
        );
        assert!(e.to_string().contains(&fits.to_string()), "{e}");
    }

    #[test]
    fn an_exact_context_still_fails_and_a_ceiling_that_fits_is_kept() {
        assert!(named_fit() < 32_768);
        let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
        let model =
            Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
        let core = EngineCore::new(
            model,
            EngineConfig {
                memory_budget_bytes: Some(200 << 20),
                max_running: 1,
                max_context: 1024,
                context_fit: ContextFit::AtMost,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        assert_eq!(core.limits().max_context, 1024);
        assert_eq!(core.pool().lowered_from, None);
        assert!(!core.pool().to_string().contains("lowered"));
    }
}
