//! The largest `--max-context` a configuration fits ([`largest_fitting_context`]):
//! when not even one sequence of the asked context fits (a 262,144-token
//! model on a card whose weights leave a few GiB, say), the start-up error
//! names the context that would, as a number the user can pass back.

use crate::config::EngineConfig;
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

    const MIB: u64 = 1 << 20;

    /// 1 MiB blocks of 64 rows, 10 MiB of GDN state a slot, 8 slots, and a
    /// step transient that grows with the context (1 MiB a block).
    fn at(available: u64) -> impl Fn(usize) -> PoolInputs {
        move |context| PoolInputs {
            available_bytes: Some(available),
            block_bytes: MIB,
            gdn_bytes_per_slot: 10 * MIB,
            step_transient_bytes: blocks_for(context) as u64 * MIB,
            running: RunningSlots::Fixed(8),
            max_context: context,
            snapshot_slots: 0,
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
