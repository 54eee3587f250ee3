//! The largest `--max-context` a configuration fits ([`largest_fitting_context`]):
//! when not even one sequence of the asked context fits (a 262,144-token
//! model on a card whose weights leave a few GiB, say), the start-up error
//! names the context that would, as a number the user can pass back.

use crate::kv::{blocks_for, KV_BLOCK_ROWS};
use crate::pool::{size_pool, PoolInputs};

/// The largest context below `asked` tokens, a whole number of KV blocks,
/// for which `inputs_for(context)` (the same settings at that context: its
/// step transient too) sizes a pool; `None` when not even one block's
/// context does. A shorter context never needs more memory, so the answer
/// is found by bisection over the block count.
pub fn largest_fitting_context(
    asked: usize,
    inputs_for: impl Fn(usize) -> PoolInputs,
) -> Option<usize> {
    let fits = |blocks: usize| size_pool(&inputs_for(blocks * KV_BLOCK_ROWS)).is_ok();
    // Contexts of fewer blocks than `asked` needs.
    let (mut lo, mut hi) = (1usize, blocks_for(asked).saturating_sub(1));
    if hi == 0 || !fits(1) {
        return None;
    }
    // Invariant: `lo` blocks fit; more than `hi` do not (or are not asked).
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
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
    use crate::pool::RunningSlots;

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
        let fit = largest_fitting_context(asked, &inputs).unwrap();
        assert_eq!(fit, 460 * KV_BLOCK_ROWS);
        assert!(size_pool(&inputs(fit)).is_ok());
        assert!(size_pool(&inputs(fit + KV_BLOCK_ROWS)).is_err());
    }

    #[test]
    fn nothing_when_not_even_one_block_fits_or_only_one_is_asked() {
        // 80 MiB of GDN alone fills 81 MiB: one block's KV and transient do not fit.
        assert_eq!(largest_fitting_context(262_144, at(81 * MIB)), None);
        assert_eq!(largest_fitting_context(KV_BLOCK_ROWS, at(1000 * MIB)), None);
    }

    #[test]
    fn below_the_asked_context_whatever_memory_allows() {
        // Everything fits: the answer stays below what was asked (the
        // caller asks only after the asked context failed).
        let fit = largest_fitting_context(4096, at(1 << 40)).unwrap();
        assert_eq!(fit, 4096 - KV_BLOCK_ROWS);
    }
}
