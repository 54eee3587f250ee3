//! Tests of paged.rs: the block and its kernels' constants, the combine
//! choice, the pairs kernel's fit and both kernels' launch parameters.

use super::super::sources::ATTENTION_PAGED;
use super::super::{MAX_SPLITS, WGMMA_BLOCK_M};
use super::*;
use crate::kernels::source_constant;

#[test]
fn the_block_is_the_kernels_key_tile() {
    let s = ATTENTION_PAGED.source;
    assert_eq!(source_constant(s, "KV_ROWS"), KV_BLOCK_ROWS);
    assert_eq!(source_constant(s, "BLOCK_N"), KV_BLOCK_ROWS);
    assert_eq!(source_constant(s, "WG_ROWS"), WGMMA_BLOCK_M);
    assert_eq!(source_constant(s, "COMBINE_ROW_WARPS"), COMBINE_ROW_WARPS);
}

#[test]
fn few_splits_combine_by_rows_and_many_by_quads_for_every_compiled_kernel() {
    assert_eq!(combine_form(2), CombineForm::Rows);
    assert_eq!(combine_form(ROWS_COMBINE_MAX_SPLITS), CombineForm::Rows);
    assert_eq!(
        combine_form(ROWS_COMBINE_MAX_SPLITS + 1),
        CombineForm::Quads
    );
    assert_eq!(combine_form(MAX_SPLITS), CombineForm::Quads);
    let entries = ATTENTION_PAGED.entry_points;
    for d in [64, 128, 256] {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for form in [CombineForm::Rows, CombineForm::Quads] {
                let e = combine_entry(form, d, dtype).unwrap();
                assert!(entries.contains(&e), "{e}");
            }
        }
    }
    assert_eq!(combine_entry(CombineForm::Rows, 96, Dtype::Bf16), None);
    assert_eq!(combine_entry(CombineForm::Quads, 256, Dtype::F32), None);
    // The 256-row follow-up over 32k of history: 4 splits, combined by rows.
    let p = paged_plan(&[256], &[33_024], 16, 2, 132, None, ItemOrder::default());
    assert_eq!((p.items.len(), p.splits), (32, 4));
    assert_eq!(combine_form(p.splits), CombineForm::Rows);
}

/// The parameter names of the entry macro's kernel `prefix` in `src`.
fn entry_params(src: &str, prefix: &str) -> Vec<String> {
    let at = src
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix} not in source"))
        + prefix.len();
    let end = at + src[at..].find(')').unwrap();
    src[at..end]
        .replace('\\', " ")
        .split(',')
        .map(|p| {
            p.split_whitespace()
                .last()
                .unwrap()
                .trim_start_matches('*')
                .to_string()
        })
        .collect()
}

#[test]
fn the_launch_args_are_both_kernels_parameters_in_order() {
    use super::super::sources::{ATTENTION_PAGED, ATTENTION_PAGED_PAIRS};
    let heads = entry_params(ATTENTION_PAGED.source, "attn_paged_wgmma_d##D##_##NAME(");
    let pairs = entry_params(
        ATTENTION_PAGED_PAIRS.source,
        "attn_paged_pairs_d##D##_##NAME(",
    );
    let mut args = LaunchArgs {
        ptrs: [0; 8],
        ints: [0; 3],
        scale: 0.0,
        splits: 0,
        parts: [0; 2],
    };
    assert_eq!(heads.len(), args.params().len(), "{heads:?}");
    assert_eq!(pairs.len(), PAIRS_PARAMS, "{pairs:?}");
    assert_eq!(heads[..PAIRS_PARAMS], pairs[..]);
    assert_eq!(
        heads,
        [
            "q",
            "kc",
            "vc",
            "out",
            "gate",
            "items",
            "seq",
            "bt",
            "n",
            "q_heads",
            "kv_heads",
            "scale_log2",
            "splits",
            "part_o",
            "part_lse"
        ]
    );
}

#[test]
fn pairs_fit_unsplit_whole_head_launches_of_an_even_group_at_head_dim_256() {
    use super::super::sources::ATTENTION_PAGED_PAIRS;
    let tables = BlockTables::from_tables(&[vec![0u32; 64], vec![0u32; 64]]);
    let shape = |q_heads, kv_heads, head_dim, q: &'static [usize], kv: &'static [usize]| {
        (
            PagedShape {
                cu_seqlens: q,
                kv_lens: kv,
                tables: &tables,
                q_heads,
                kv_heads,
                head_dim,
            },
            q.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
        )
    };
    let fit = |(s, q_lens): (PagedShape<'_>, Vec<usize>), splits: Option<usize>| {
        let plan = paged_plan(
            &q_lens,
            s.kv_lens,
            s.q_heads,
            s.kv_heads,
            132,
            splits,
            ItemOrder::default(),
        );
        pairs_fit(&plan, &s, Dtype::Bf16)
    };
    // Two prompts of whole-head tiles (tails included).
    assert!(fit(
        shape(16, 2, 256, &[0, 4000, 4100], &[4000, 4000]),
        None
    ));
    // A key split, a packed decode row, an odd group, another head dim: heads.
    assert!(!fit(shape(16, 2, 256, &[0, 100], &[4000]), Some(2)));
    assert!(!fit(
        shape(16, 2, 256, &[0, 4000, 4001], &[4000, 4000]),
        Some(1)
    ));
    assert!(!fit(shape(6, 2, 256, &[0, 4000], &[4000]), Some(1)));
    assert!(!fit(shape(16, 2, 128, &[0, 4000], &[4000]), Some(1)));
    // Both entries compiled; the ring fits the 227 KiB a CTA may use.
    for dtype in [Dtype::Bf16, Dtype::F16] {
        let e = pairs_entry(256, dtype).unwrap();
        assert!(ATTENTION_PAGED_PAIRS.entry_points.contains(&e), "{e}");
    }
    assert_eq!(pairs_smem_bytes(256), 6 * 32 * 1024 + 64 + 1024);
    assert!(pairs_smem_bytes(256) <= 227 * 1024);
    let s = ATTENTION_PAGED_PAIRS.source;
    assert_eq!(source_constant(s, "PAIR_THREADS"), PAIRS_THREADS as usize);
    assert_eq!(source_constant(s, "STAGES"), 2);
}

#[test]
fn the_shape_check_refuses_short_tables_and_bad_heads() {
    let tables = BlockTables::from_tables(&[vec![3u32], vec![0, 1]]);
    let ok = PagedShape {
        cu_seqlens: &[0, 1, 11],
        kv_lens: &[64, 70],
        tables: &tables,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 128,
    };
    assert_eq!(ok.check(Dtype::Bf16).unwrap(), 2);
    let short = PagedShape {
        kv_lens: &[65, 70],
        ..ok
    };
    assert!(short.check(Dtype::Bf16).is_err());
    let fewer_keys_than_rows = PagedShape {
        kv_lens: &[64, 9],
        ..ok
    };
    assert!(fewer_keys_than_rows.check(Dtype::Bf16).is_err());
    let heads = PagedShape { q_heads: 5, ..ok };
    assert!(heads.check(Dtype::Bf16).is_err());
    let dim = PagedShape { head_dim: 96, ..ok };
    assert!(dim.check(Dtype::F16).is_err());
    assert!(ok.check(Dtype::F32).is_err());
}
