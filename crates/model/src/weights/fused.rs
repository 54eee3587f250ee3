//! `qwen3_next` checkpoints fuse the Gated DeltaNet input projections:
//! `in_proj_qkvz` `[2*nk*dk + 2*nv*dv, H]` and `in_proj_ba` `[2*nv, H]`,
//! both grouped per key head. For key head `g` (of `nk`), with `r = nv/nk`:
//! `in_proj_qkvz` holds rows `q_g (dk), k_g (dk), v_g (r*dv), z_g (r*dv)`,
//! and `in_proj_ba` holds `b_g (r), a_g (r)`. This module splits them into
//! the canonical Qwen3.5 layout (`in_proj_qkv` = all q, all k, all v;
//! `in_proj_z`, `in_proj_b`, `in_proj_a`), which is a pure row permutation.

use super::{check::check_one, WeightsError};
use crate::{ModelConfig, Tensor, TensorData};
use headroom_core::AttentionKind;
use std::collections::BTreeMap;
use std::ops::Range;

pub(super) fn split_linear_projections(
    raw: &mut BTreeMap<String, Tensor>,
    cfg: &ModelConfig,
) -> Result<(), WeightsError> {
    let l = &cfg.linear;
    let (nk, dk, dv) = (l.num_key_heads, l.key_head_dim, l.value_head_dim);
    let r = l.num_value_heads / nk;
    let h = cfg.hidden_size;
    for layer in 0..cfg.num_hidden_layers {
        if cfg.layer_types[layer] != AttentionKind::Linear {
            continue;
        }
        let p = format!("layers.{layer}.linear_attn");
        let qkvz_name = format!("{p}.in_proj_qkvz.weight");
        let ba_name = format!("{p}.in_proj_ba.weight");
        let qkvz = raw
            .remove(&qkvz_name)
            .ok_or_else(|| WeightsError::Missing {
                name: qkvz_name.clone(),
                expected: vec![2 * l.key_dim() + 2 * l.value_dim(), h],
            })?;
        check_one(
            &qkvz_name,
            &qkvz,
            &[2 * l.key_dim() + 2 * l.value_dim(), h],
            cfg,
        )?;
        let ba = raw.remove(&ba_name).ok_or_else(|| WeightsError::Missing {
            name: ba_name.clone(),
            expected: vec![2 * l.num_value_heads, h],
        })?;
        check_one(&ba_name, &ba, &[2 * l.num_value_heads, h], cfg)?;

        let group = 2 * dk + 2 * r * dv;
        let part = |offset: usize, len: usize| -> Vec<Range<usize>> {
            (0..nk)
                .map(|g| g * group + offset..g * group + offset + len)
                .collect()
        };
        let mut qkv_rows = part(0, dk);
        qkv_rows.extend(part(dk, dk));
        qkv_rows.extend(part(2 * dk, r * dv));
        raw.insert(
            format!("{p}.in_proj_qkv.weight"),
            select_rows(&qkvz, &qkv_rows),
        );
        raw.insert(
            format!("{p}.in_proj_z.weight"),
            select_rows(&qkvz, &part(2 * dk + r * dv, r * dv)),
        );
        let ba_part = |offset: usize| -> Vec<Range<usize>> {
            (0..nk)
                .map(|g| g * 2 * r + offset..g * 2 * r + offset + r)
                .collect()
        };
        raw.insert(
            format!("{p}.in_proj_b.weight"),
            select_rows(&ba, &ba_part(0)),
        );
        raw.insert(
            format!("{p}.in_proj_a.weight"),
            select_rows(&ba, &ba_part(r)),
        );
    }
    Ok(())
}

/// The rows `ranges` (in order) of a rank-2 tensor, as a new tensor.
pub(super) fn select_rows(t: &Tensor, ranges: &[Range<usize>]) -> Tensor {
    let cols = t.shape[1];
    let rows: usize = ranges.iter().map(|r| r.len()).sum();
    fn gather<T: Copy>(v: &[T], cols: usize, ranges: &[Range<usize>]) -> Vec<T> {
        let mut out = Vec::with_capacity(ranges.iter().map(|r| r.len()).sum::<usize>() * cols);
        for r in ranges {
            out.extend_from_slice(&v[r.start * cols..r.end * cols]);
        }
        out
    }
    let data = match &t.data {
        TensorData::F32(v) => TensorData::F32(gather(v, cols, ranges)),
        TensorData::F16(v) => TensorData::F16(gather(v, cols, ranges)),
        TensorData::Bf16(v) => TensorData::Bf16(gather(v, cols, ranges)),
        // FP8 fused projections are refused before the split (`fp8::may_be_fp8`).
        TensorData::Fp8E4m3(_) => TensorData::F32(gather(&t.to_f32_vec(), cols, ranges)),
    };
    Tensor::new(vec![rows, cols], data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Family;

    /// Builds a fused qkvz whose every row holds a code naming its role, splits it, and
    /// checks each canonical row's code.
    #[test]
    fn splits_grouped_rows_into_canonical_order() {
        let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        cfg.family = Family::Qwen3Next;
        cfg.fused_linear_projections = true;
        cfg.hidden_size = 3;
        let l = cfg.linear;
        let (nk, dk, nv, dv) = (
            l.num_key_heads,
            l.key_head_dim,
            l.num_value_heads,
            l.value_head_dim,
        );
        let r = nv / nk;
        // code = role*1e6 + head*1e3 + row-in-head; role q=1 k=2 v=3 z=4 b=5 a=6
        let code =
            |role: usize, head: usize, row: usize| (role * 1_000_000 + head * 1000 + row) as f32;
        let mut qkvz = Vec::new();
        let mut ba = Vec::new();
        for g in 0..nk {
            let rows = (0..dk)
                .map(|i| code(1, g, i))
                .chain((0..dk).map(|i| code(2, g, i)))
                .chain((0..r * dv).map(|i| code(3, g * r + i / dv, i % dv)))
                .chain((0..r * dv).map(|i| code(4, g * r + i / dv, i % dv)));
            for c in rows {
                qkvz.extend([c; 3]);
            }
            for c in (0..r)
                .map(|j| code(5, g * r + j, 0))
                .chain((0..r).map(|j| code(6, g * r + j, 0)))
            {
                ba.extend([c; 3]);
            }
        }
        let mut raw = BTreeMap::new();
        let n_qkvz = qkvz.len() / 3;
        raw.insert(
            "layers.0.linear_attn.in_proj_qkvz.weight".to_string(),
            Tensor::from_f32(vec![n_qkvz, 3], qkvz),
        );
        raw.insert(
            "layers.0.linear_attn.in_proj_ba.weight".to_string(),
            Tensor::from_f32(vec![2 * nv, 3], ba),
        );
        cfg.num_hidden_layers = 1;
        cfg.layer_types = vec![AttentionKind::Linear];
        split_linear_projections(&mut raw, &cfg).unwrap();

        let col0 =
            |name: &str| -> Vec<f32> { raw[name].to_f32_vec().chunks(3).map(|c| c[0]).collect() };
        let mut want_qkv: Vec<f32> = (0..nk)
            .flat_map(|g| (0..dk).map(move |i| code(1, g, i)))
            .collect();
        want_qkv.extend((0..nk).flat_map(|g| (0..dk).map(move |i| code(2, g, i))));
        want_qkv.extend((0..nv).flat_map(|j| (0..dv).map(move |i| code(3, j, i))));
        assert_eq!(col0("layers.0.linear_attn.in_proj_qkv.weight"), want_qkv);
        let want_z: Vec<f32> = (0..nv)
            .flat_map(|j| (0..dv).map(move |i| code(4, j, i)))
            .collect();
        assert_eq!(col0("layers.0.linear_attn.in_proj_z.weight"), want_z);
        assert_eq!(
            col0("layers.0.linear_attn.in_proj_b.weight"),
            (0..nv).map(|j| code(5, j, 0)).collect::<Vec<_>>()
        );
        assert_eq!(
            col0("layers.0.linear_attn.in_proj_a.weight"),
            (0..nv).map(|j| code(6, j, 0)).collect::<Vec<_>>()
        );
        assert!(!raw.contains_key("layers.0.linear_attn.in_proj_qkvz.weight"));
    }

    #[test]
    fn missing_or_misshapen_fused_tensor_is_named() {
        let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        cfg.fused_linear_projections = true;
        let mut raw = BTreeMap::new();
        let err = split_linear_projections(&mut raw, &cfg).unwrap_err();
        assert!(
            err.to_string()
                .contains("layers.0.linear_attn.in_proj_qkvz.weight"),
            "{err}"
        );
        raw.insert(
            "layers.0.linear_attn.in_proj_qkvz.weight".to_string(),
            Tensor::from_f32(vec![2, 2], vec![0.0; 4]),
        );
        let err = split_linear_projections(&mut raw, &cfg).unwrap_err();
        assert!(matches!(err, WeightsError::Shape { .. }), "{err}");
    }
}
