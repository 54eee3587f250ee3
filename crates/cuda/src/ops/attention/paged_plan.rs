//! The work list of a paged attention launch (`paged.rs` runs it): one item
//! per 64-row tile of a sequence's query rows and query head, or of its whole
//! GQA group when the chunk is shorter than a tile; the order the CTAs take
//! them in ([`ItemOrder`]); and one key-split count for the launch. Host
//! logic only, tested on the CPU.

use super::fused::{splits_for, WGMMA_CTAS_PER_SM};
use super::{MAX_SPLITS, WGMMA_BLOCK_M};
use headroom_core::ops::KV_BLOCK_ROWS;

/// One CTA row of the launch (for every KV head and split): a 64-row tile
/// of a sequence's virtual rows — `heads` query heads of a KV head's group
/// stacked, each the sequence's `q_len` rows, from query head `first_head`
/// of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkItem {
    pub seq: usize,
    pub first_head: usize,
    pub heads: usize,
    pub m0: usize,
    /// Valid virtual rows of the tile (64 but for a sequence's last tile).
    pub rows: usize,
    /// Key tiles the tile's rows see (its causal limit).
    pub key_tiles: usize,
}

/// The order of a launch's work items (CTAs start in grid order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemOrder {
    /// Longest first (key tiles seen), so the short items fill the tail
    /// (the baseline the timing test compares with).
    LongestFirst,
    /// Longest first within each kind, the thin items (at most a quarter of
    /// the tile's rows valid: packed decode rows, whose CTAs wait on K/V
    /// loads) spread evenly over the first three quarters of the full ones,
    /// so an SM's two CTAs are more often one of each kind:
    /// W1's mixed step (8 × 1,024 prompt rows + 345 decode rows) 449.4 →
    /// 413.6 µs a layer (docs/perf/cuda-paged-attention.md, session 15).
    #[default]
    Mixed,
}

/// Whether an item of `rows` valid rows counts as thin for [`ItemOrder::Mixed`].
fn is_thin(rows: usize) -> bool {
    rows * 4 <= WGMMA_BLOCK_M
}

/// `items` (longest first) reordered as `order` says.
fn order_items(items: Vec<WorkItem>, order: ItemOrder) -> Vec<WorkItem> {
    if order == ItemOrder::LongestFirst {
        return items;
    }
    let (thin, full): (Vec<WorkItem>, Vec<WorkItem>) =
        items.into_iter().partition(|i| is_thin(i.rows));
    // Before full item f, the thin items up to ceil((f + 1) · T / span); one
    // kind alone comes out as it went in.
    let (total, span) = (thin.len(), (full.len() * 3 / 4).max(1));
    let mut out = Vec::with_capacity(total + full.len());
    let mut thin = thin.into_iter();
    let mut emitted = 0;
    for (f, item) in full.into_iter().enumerate() {
        let target = ((f + 1) * total).div_ceil(span).min(total);
        out.extend(thin.by_ref().take(target - emitted));
        emitted = target;
        out.push(item);
    }
    out.extend(thin);
    out
}

/// What one launch runs: its work items (in [`ItemOrder::default`]) and key splits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedPlan {
    pub items: Vec<WorkItem>,
    pub splits: usize,
}

/// Key tiles seen by virtual rows `[m0, m0 + 64)` (of `vrows`) of a
/// sequence of `q_len` rows after `kv_len - q_len` of history (the kernel's
/// causal limit).
fn key_tiles(m0: usize, vrows: usize, q_len: usize, kv_len: usize) -> usize {
    let last = (m0 + WGMMA_BLOCK_M).min(vrows) - 1;
    let history = kv_len - q_len;
    let last_pos = if m0 / q_len != last / q_len {
        history + q_len - 1
    } else {
        history + last % q_len
    };
    kv_len.min(last_pos + 1).div_ceil(KV_BLOCK_ROWS)
}

/// The launch of sequences of `q_lens` query rows holding `kv_lens` keys
/// (history + new rows) with `q_heads` over `kv_heads`, on a GPU of
/// `sm_count` SMs: a chunk shorter than a tile packs its GQA group into the
/// tile's rows, longer ones get one item per query head and tile; items run
/// in `order`; the splits fill one wave as [`splits_for`] decides for the
/// longest item (`forced`: that many, clamped to `1..=MAX_SPLITS`).
pub fn paged_plan(
    q_lens: &[usize],
    kv_lens: &[usize],
    q_heads: usize,
    kv_heads: usize,
    sm_count: usize,
    forced: Option<usize>,
    order: ItemOrder,
) -> PagedPlan {
    let group = (q_heads / kv_heads.max(1)).max(1);
    let mut items = Vec::new();
    for (seq, (&t, &kv)) in q_lens.iter().zip(kv_lens).enumerate() {
        if t == 0 {
            continue;
        }
        let packed = group > 1 && t < WGMMA_BLOCK_M;
        let (heads, firsts) = if packed { (group, 1) } else { (1, group) };
        let vrows = heads * t;
        for first_head in 0..firsts {
            for m0 in (0..vrows).step_by(WGMMA_BLOCK_M) {
                items.push(WorkItem {
                    seq,
                    first_head,
                    heads,
                    m0,
                    rows: (vrows - m0).min(WGMMA_BLOCK_M),
                    key_tiles: key_tiles(m0, vrows, t, kv),
                });
            }
        }
    }
    items.sort_by_key(|i| std::cmp::Reverse(i.key_tiles));
    let longest = items.first().map_or(0, |i| i.key_tiles);
    let items = order_items(items, order);
    let splits = match forced {
        Some(s) => s.clamp(1, MAX_SPLITS),
        None => splits_for(
            items.len().saturating_mul(kv_heads),
            longest,
            sm_count.saturating_mul(WGMMA_CTAS_PER_SM),
        ),
    };
    PagedPlan { items, splits }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rows_pack_their_group_and_chunks_get_an_item_per_head_and_tile() {
        // GQA 16/2: two decode rows, a 100-row chunk after 1,000, a fresh 64-row prompt.
        let p = paged_plan(
            &[1, 1, 100, 64],
            &[4097, 10, 1100, 64],
            16,
            2,
            132,
            None,
            ItemOrder::LongestFirst,
        );
        let per_seq = |s| p.items.iter().filter(|i| i.seq == s).count();
        assert_eq!((per_seq(0), per_seq(1)), (1, 1), "decode: one packed tile");
        let d = p.items.iter().find(|i| i.seq == 0).unwrap();
        assert_eq!((d.heads, d.first_head, d.m0), (8, 0, 0));
        assert_eq!(d.key_tiles, 4097usize.div_ceil(64));
        assert_eq!(per_seq(2), 8 * 2, "8 query heads × 2 tiles");
        assert_eq!(per_seq(3), 8, "a 64-row chunk is one tile a head");
        assert!(p.items.iter().filter(|i| i.seq >= 2).all(|i| i.heads == 1));
        // Longest first.
        assert!(p.items.windows(2).all(|w| w[0].key_tiles >= w[1].key_tiles));
        assert_eq!(p.items[0].seq, 0);
        // The chunk's first tile sees history + 64 keys, its second all.
        let first = p.items.iter().find(|i| i.seq == 2 && i.m0 == 0).unwrap();
        assert_eq!(first.key_tiles, 1064usize.div_ceil(64));
        let second = p.items.iter().find(|i| i.seq == 2 && i.m0 == 64).unwrap();
        assert_eq!(second.key_tiles, 1100usize.div_ceil(64));
    }

    #[test]
    fn the_mixed_order_spreads_decode_items_over_the_first_three_quarters() {
        // W1's mixed step: 8 fresh prompts of 1,024 and 40 decode rows after ~1.1k.
        let mut q = vec![1024; 8];
        let mut kv = vec![1024; 8];
        q.extend([1; 40]);
        kv.extend((0..40).map(|i| 1025 + 3 * i));
        let longest = paged_plan(&q, &kv, 16, 2, 132, None, ItemOrder::LongestFirst);
        let mixed = paged_plan(&q, &kv, 16, 2, 132, None, ItemOrder::Mixed);
        assert_eq!(longest.splits, mixed.splits);
        // The same items, a permutation.
        let key = |i: &WorkItem| (i.seq, i.first_head, i.m0);
        let mut a: Vec<_> = longest.items.iter().map(key).collect();
        let mut b: Vec<_> = mixed.items.iter().map(key).collect();
        assert_ne!(a, b);
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        // Decode items are thin (8 of 64 rows), prompt tiles full.
        let thin: Vec<usize> = (0..mixed.items.len())
            .filter(|&p| is_thin(mixed.items[p].rows))
            .collect();
        assert_eq!(thin.len(), 40);
        assert!(mixed.items.iter().all(|i| is_thin(i.rows) == (i.seq >= 8)));
        // A thin item first; 1,024 full items → one thin every ≈ 19; the last
        // thin one before three quarters of the full ones have started.
        assert_eq!(thin[0], 0);
        assert!(thin.windows(2).all(|w| (17..=21).contains(&(w[1] - w[0]))));
        assert!(*thin.last().unwrap() <= 1024 * 3 / 4 + 40);
        // Each kind stays longest first.
        for kind in [true, false] {
            let tiles: Vec<usize> = mixed
                .items
                .iter()
                .filter(|i| is_thin(i.rows) == kind)
                .map(|i| i.key_tiles)
                .collect();
            assert!(tiles.windows(2).all(|w| w[0] >= w[1]));
        }
        // One kind alone keeps its longest-first order.
        let decode_only = paged_plan(
            &[1; 5],
            &[100, 900, 300, 2000, 64],
            16,
            2,
            132,
            Some(1),
            ItemOrder::LongestFirst,
        );
        assert_eq!(
            decode_only,
            paged_plan(
                &[1; 5],
                &[100, 900, 300, 2000, 64],
                16,
                2,
                132,
                Some(1),
                ItemOrder::default()
            )
        );
    }

    #[test]
    fn a_packed_tile_that_wraps_sees_the_last_rows_keys() {
        // 40 rows × group 4 = 160 virtual rows; tile 64..128 covers rows 24..39 and 0..23.
        let p = paged_plan(&[40], &[540], 4, 1, 132, Some(1), ItemOrder::default());
        let wrap = p.items.iter().find(|i| i.m0 == 64).unwrap();
        assert_eq!(wrap.key_tiles, 540usize.div_ceil(64));
        assert_eq!(p.items.len(), 3);
    }

    #[test]
    fn splits_fill_one_wave_for_few_long_sequences_and_none_for_many() {
        // One decode sequence over 32k: 2 CTAs of 264 slots → the most splits.
        let one = paged_plan(&[1], &[32_768], 16, 2, 132, None, ItemOrder::default());
        assert_eq!(one.splits, MAX_SPLITS);
        // 2k keys: each split keeps at least MIN_SPLIT_TILES tiles.
        let short = paged_plan(&[1], &[2048], 16, 2, 132, None, ItemOrder::default());
        assert_eq!(short.splits, 32 / super::super::fused::MIN_SPLIT_TILES);
        // 256 decode sequences already fill the GPU.
        let many = paged_plan(
            &[1; 256],
            &[4096; 256],
            16,
            2,
            132,
            None,
            ItemOrder::default(),
        );
        assert_eq!((many.items.len(), many.splits), (256, 1));
        // Short keys are never split; forced splits are clamped.
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, None, ItemOrder::default()).splits,
            1
        );
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, Some(0), ItemOrder::default()).splits,
            1
        );
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, Some(9999), ItemOrder::default()).splits,
            MAX_SPLITS
        );
    }
}
