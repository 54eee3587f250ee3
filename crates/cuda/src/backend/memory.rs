//! Moving data on and off the device: weights (matrices converted to bf16 on
//! the host in pieces, so a large tensor never needs a second full host
//! copy; block-scaled FP8 matrices with 128 × 128 blocks uploaded as they
//! are, e4m3 bytes and f32 scales; vectors as f32), synthetic weights drawn
//! on the device, and
//! activations to and from host f32; and [`CudaWorkspace`], the backend's
//! account of the workspace its attention allocates.

use super::launch::{alloc, dev_err, launch, mul, stride_grid, Args};
use super::types::{CudaAct, CudaWeight, Fp8Scales};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
pub(crate) use crate::tensor::new_act;
use cudarc::driver::result;
use half::bf16;
use headroom_core::fp8::Fp8Block;
use headroom_core::ops::{AttentionCall, OpError, OpResult, WeightInit, WorkspaceModel};
use headroom_core::{AttentionShape, Dtype, RouteRequest, Tensor, TensorData};
use rayon::prelude::*;

/// Elements converted and copied per piece of a large upload (32 MiB of bf16).
const PIECE: usize = 16 << 20;

/// Copies `data` to `buf` at element offset `at` (of `T`), synchronously.
fn write_at<T: Copy>(dev: &CudaDevice, buf: &DeviceBuffer, at: usize, data: &[T]) -> OpResult<()> {
    let es = std::mem::size_of::<T>();
    let end = (at + data.len()) * es;
    if end > buf.len_bytes() {
        return Err(OpError::Device(format!(
            "write of {end} bytes past a {}-byte buffer",
            buf.len_bytes()
        )));
    }
    dev.synchronize().map_err(dev_err)?;
    // SAFETY: the range [at, at + len) lies inside the buffer (checked above).
    unsafe { result::memcpy_htod_sync(buf.ptr() + (at * es) as u64, data) }
        .map_err(|e| dev_err(e.into()))
}

/// Host elements `start .. start + out.len()` of `t` as bf16 (parallel).
fn to_bf16(t: &Tensor, start: usize, out: &mut [bf16]) {
    let n = out.len();
    match &t.data {
        TensorData::Bf16(v) => out.copy_from_slice(&v[start..start + n]),
        TensorData::F16(v) => out
            .par_iter_mut()
            .zip(&v[start..start + n])
            .for_each(|(o, x)| *o = bf16::from_f32(x.to_f32())),
        TensorData::F32(v) => out
            .par_iter_mut()
            .zip(&v[start..start + n])
            .for_each(|(o, x)| *o = bf16::from_f32(*x)),
        // FP8 is dequantized to bf16 on the host (w = e4m3 * scale_inv in f32, then rounded).
        TensorData::Fp8E4m3(q) => {
            const CHUNK: usize = 1 << 14;
            out.par_chunks_mut(CHUNK).enumerate().for_each(|(j, o)| {
                let mut f = [0.0f32; CHUNK];
                let f = &mut f[..o.len()];
                q.read_f32(start + j * CHUNK, f);
                for (b, x) in o.iter_mut().zip(f.iter()) {
                    *b = bf16::from_f32(*x);
                }
            });
        }
    }
}

/// Uploads a matrix as bf16 (leading dims flattened into rows), in pieces.
pub(crate) fn upload_matrix(dev: &CudaDevice, t: Tensor) -> OpResult<CudaWeight> {
    let cols = *t.shape.last().unwrap_or(&0);
    let numel = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if t.shape.is_empty() || cols == 0 || numel != Some(t.numel()) {
        return Err(OpError::shape(
            "upload_matrix",
            format!("bad shape {:?} for {} values", t.shape, t.numel()),
        ));
    }
    let n = t.numel();
    if let TensorData::Fp8E4m3(q) = &t.data {
        if keeps_fp8(q) {
            return upload_fp8(dev, q, n / cols, cols);
        }
    }
    let buf = alloc(dev, mul("upload_matrix", n, 2)?)?;
    let mut piece = vec![bf16::ZERO; n.min(PIECE)];
    let mut at = 0;
    while at < n {
        let len = PIECE.min(n - at);
        to_bf16(&t, at, &mut piece[..len]);
        write_at(dev, &buf, at, &piece[..len])?;
        at += len;
    }
    Ok(CudaWeight {
        buf,
        rows: n / cols,
        cols,
        dtype: Dtype::Bf16,
        fp8: None,
    })
}

/// Whether an FP8 tensor stays FP8 on the device: blocks of 128 × 128 (the
/// kernels' `BLOCK`); other block sizes are dequantized to bf16 on the host.
pub(crate) fn keeps_fp8(q: &Fp8Block) -> bool {
    q.block == [crate::ops::fp8::BLOCK; 2]
}

/// Uploads an FP8 matrix `[rows][cols]` as it is: the e4m3 bytes and the
/// f32 block scales, in pieces.
fn upload_fp8(dev: &CudaDevice, q: &Fp8Block, rows: usize, cols: usize) -> OpResult<CudaWeight> {
    if q.cols != cols || q.rows == 0 || !rows.is_multiple_of(q.rows) || q.len() != rows * cols {
        return Err(OpError::shape(
            "upload_matrix",
            format!(
                "fp8 grid of [{}][{}] matrices for a [{rows}][{cols}] weight",
                q.rows, q.cols
            ),
        ));
    }
    let buf = alloc(dev, q.len())?;
    for (i, piece) in q.bits.chunks(2 * PIECE).enumerate() {
        write_at(dev, &buf, i * 2 * PIECE, piece)?;
    }
    let scale_inv = alloc(dev, mul("upload_matrix", q.scale_inv.len(), 4)?)?;
    write_at(dev, &scale_inv, 0, &q.scale_inv)?;
    Ok(CudaWeight {
        buf,
        rows,
        cols,
        dtype: Dtype::Bf16,
        fp8: Some(Fp8Scales {
            scale_inv,
            grid_rows: q.rows,
        }),
    })
}

/// Uploads any tensor as a flat f32 vector.
pub(crate) fn upload_vector(dev: &CudaDevice, t: Tensor) -> OpResult<CudaWeight> {
    if t.numel() == 0 {
        return Err(OpError::shape("upload_vector", "empty tensor"));
    }
    let v = t.to_f32_vec();
    let buf = alloc(dev, mul("upload_vector", v.len(), 4)?)?;
    write_at(dev, &buf, 0, &v)?;
    Ok(CudaWeight {
        buf,
        rows: 1,
        cols: v.len(),
        dtype: Dtype::F32,
        fp8: None,
    })
}

/// A bf16 `[rows][cols]` matrix with element `i` = `mean + std · rng::normal(seed, init.counter(i, cols))`.
pub(crate) fn init_matrix(
    dev: &CudaDevice,
    rows: usize,
    cols: usize,
    init: WeightInit,
) -> OpResult<CudaWeight> {
    let n = mul("init_matrix", rows, cols)?;
    if n == 0 {
        return Err(OpError::shape(
            "init_matrix",
            format!("[{rows}][{cols}] is empty"),
        ));
    }
    let buf = alloc(dev, mul("init_matrix", n, 2)?)?;
    let args = Args::new()
        .ptr(buf.ptr())
        .u64(n as u64)
        .u64(init.seed)
        .f32(init.mean)
        .f32(init.std)
        .u64(cols as u64)
        .u64(init.window.map_or(0, |w| w.first_row))
        .u64(init.window.map_or(0, |w| w.first_col))
        .u64(init.window.map_or(0, |w| w.full_cols.max(1)));
    // SAFETY: the kernel writes n bf16 elements of `buf`.
    unsafe { launch(dev, "init_normal_bf16", stride_grid(n, 256), 256, args)? };
    Ok(CudaWeight {
        buf,
        rows,
        cols,
        dtype: Dtype::Bf16,
        fp8: None,
    })
}

/// A bf16 activation from host f32 values.
pub(crate) fn act_from_f32(
    dev: &CudaDevice,
    rows: usize,
    cols: usize,
    data: &[f32],
) -> OpResult<CudaAct> {
    if rows.checked_mul(cols) != Some(data.len()) {
        return Err(OpError::shape(
            "act_from_f32",
            format!("{} values for [{rows}][{cols}]", data.len()),
        ));
    }
    let act = new_act(dev, "act_from_f32", rows, cols, Dtype::Bf16)?;
    let host: Vec<bf16> = data.par_iter().map(|&x| bf16::from_f32(x)).collect();
    write_at(dev, &act.buf, 0, &host)?;
    Ok(act)
}

/// An activation (bf16 or f32) copied to the host as f32.
pub(crate) fn act_to_f32(dev: &CudaDevice, x: &CudaAct) -> OpResult<Vec<f32>> {
    let n = x.elems();
    match x.dtype {
        Dtype::F32 => {
            let mut out = vec![0f32; n];
            dev.read(&x.buf, &mut out).map_err(dev_err)?;
            Ok(out)
        }
        Dtype::Bf16 => {
            let mut raw = vec![bf16::ZERO; n];
            dev.read(&x.buf, &mut raw).map_err(dev_err)?;
            Ok(raw.par_iter().map(|v| v.to_f32()).collect())
        }
        Dtype::F16 => Err(OpError::shape(
            "act_to_f32",
            "f16 activations are not used on CUDA",
        )),
    }
}

/// The CUDA backend's [`WorkspaceModel`] for one sequence's attention over
/// the KV block pool. On the paged kernel (the fused route on Hopper) the
/// only workspace is the split partials: f32 rows of `head_dim` + 1 for each
/// split of each output row, where the plan splits only while the CTAs leave
/// the GPU's slots empty (bounded here by [`PARTIAL_ROWS_BOUND`]). Every
/// other call gathers the sequence's K and V out of the pool
/// (`gather_bytes`), and the composed route adds one KV head's score and
/// probability block (`crate::attention::composed_workspace_bytes`: f32
/// scores and bf16 probabilities for `group × qb × kv_len`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CudaWorkspace {
    /// The fused route runs the paged kernel (sm_90a).
    pub paged: bool,
    /// The device's architecture (`sm_90a`, ...): whether FP8 experts run
    /// on the native grouped GEMMs or are dequantized into scratch.
    pub arch: String,
}

/// Most split partial rows one paged launch writes: splits only fill empty
/// CTA slots, so splits × 64-row tiles stay under the slots of the largest
/// GPU this bound allows (512 SMs × 2 CTAs).
pub(crate) const PARTIAL_ROWS_BOUND: usize = 1024 * crate::attention::WGMMA_BLOCK_M;

impl WorkspaceModel for CudaWorkspace {
    fn fp8_expert_scratch_bytes(&self, local: usize, hidden: usize, intermediate: usize) -> u64 {
        let native = crate::ops::moe::fp8::native_takes(&self.arch, hidden, intermediate)
            && super::external::moe_fast_path(hidden, intermediate);
        if native {
            0
        } else {
            crate::ops::fp8::moe::fp8_expert_scratch_bytes(local, hidden, intermediate)
        }
    }

    fn attention_bytes(&self, c: &AttentionCall) -> u64 {
        let l = c.layer;
        let q = c.q_len.max(1);
        if self.paged && c.route == RouteRequest::Fused {
            let rows = q
                .saturating_mul(l.q_heads)
                .saturating_mul(crate::attention::MAX_SPLITS)
                .min(PARTIAL_ROWS_BOUND);
            return (rows * (l.head_dim + 1) * 4) as u64;
        }
        // The gathered route: the sequences' K/V gathered into a workspace
        // of at most `GATHER_LIMIT_BYTES`, or the longest sequence alone
        // where that is larger, and q and the output head-major (the longest
        // sequence's rows, at most the call's).
        let gather_of = |keys: usize| crate::ops::kv::gather_bytes(l.kv_heads, l.head_dim, keys);
        let gather = gather_of(c.kv_len).max(
            gather_of(c.total_kv_len.max(c.kv_len)).min(crate::ops::attention::GATHER_LIMIT_BYTES),
        ) as u64;
        let head_major = 2 * (q * l.q_heads * l.head_dim * 2) as u64;
        match c.route {
            RouteRequest::Fused => gather + head_major,
            RouteRequest::Composed { query_block } => {
                let qb = if query_block == 0 {
                    q
                } else {
                    query_block.min(q)
                };
                let head = AttentionShape {
                    q_len: q,
                    kv_len: c.kv_len,
                    q_heads: (l.q_heads / l.kv_heads.max(1)).max(1),
                    kv_heads: 1,
                    head_dim: l.head_dim,
                    scale: None,
                };
                gather
                    + head_major
                    + crate::attention::composed_workspace_bytes(&head, Dtype::Bf16, qb) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::{AttentionKind, LayerKind};

    /// FP8 with the kernels' 128 × 128 blocks stays FP8; other block sizes
    /// are dequantized on the host.
    #[test]
    fn only_128_blocks_stay_fp8() {
        let v = vec![0.25f32; 256 * 256];
        for (block, keeps) in [([128, 128], true), ([64, 64], false), ([128, 64], false)] {
            let q = Fp8Block::quantize(&v, block, 256, 256).unwrap();
            assert_eq!(keeps_fp8(&q), keeps, "{block:?}");
        }
    }

    /// The host side of an FP8 upload that does not stay FP8: every piece
    /// (any offset, spanning the parallel chunks) is the f32 dequantization
    /// rounded to bf16.
    #[test]
    fn fp8_uploads_dequantize_to_bf16_on_the_host() {
        let (rows, cols) = (300, 200);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1001) as f32 - 500.0) * 10f32.powi((i / cols) as i32 % 7 - 3))
            .collect();
        let q = Fp8Block::quantize(&v, [128, 128], rows, cols).unwrap();
        let t = Tensor::new(vec![rows, cols], TensorData::Fp8E4m3(q));
        let want: Vec<bf16> = t.to_f32_vec().into_iter().map(bf16::from_f32).collect();
        for (start, len) in [(0, rows * cols), (5, 40_000), (16_383, 3)] {
            let mut out = vec![bf16::NAN; len];
            to_bf16(&t, start, &mut out);
            assert_eq!(out, want[start..start + len], "{start}+{len}");
        }
    }

    #[test]
    fn the_gathered_routes_count_the_gather_and_the_paged_kernel_its_partials() {
        let call = |route, q_len, total_kv_len| AttentionCall {
            layer: LayerKind {
                attention: AttentionKind::Full,
                head_dim: 256,
                q_heads: 16,
                kv_heads: 2,
                dtype: Dtype::Bf16,
            },
            route,
            q_len,
            kv_len: 300,
            total_kv_len,
        };
        let gathered = CudaWorkspace {
            paged: false,
            arch: "sm_90a".into(),
        };
        // K and V of 300 rows × 2 heads × 256, bf16.
        let gather = 300 * 2 * 256 * 2 * 2;
        // q and the output head-major: 100 rows × 16 heads × 256, bf16.
        let head_major = 2 * 100 * 16 * 256 * 2;
        // group 8, qb = q_len = 100: f32 scores + bf16 probabilities.
        let composed = RouteRequest::Composed { query_block: 0 };
        assert_eq!(
            gathered.attention_bytes(&call(composed, 100, 300)),
            gather + head_major + 8 * 100 * 300 * 6
        );
        let blocked = RouteRequest::Composed { query_block: 64 };
        assert_eq!(
            gathered.attention_bytes(&call(blocked, 100, 300)),
            gather + head_major + 8 * 64 * 300 * 6
        );
        assert_eq!(
            gathered.attention_bytes(&call(RouteRequest::Fused, 100, 300)),
            gather + head_major
        );
        // Many sequences: every one's K/V gathered, up to the workspace's
        // limit (256 sequences of 300 keys fit; a million keys do not).
        assert_eq!(
            gathered.attention_bytes(&call(RouteRequest::Fused, 100, 256 * 300)),
            256 * gather + head_major
        );
        let limit = crate::ops::attention::GATHER_LIMIT_BYTES as u64;
        assert_eq!(
            gathered.attention_bytes(&call(RouteRequest::Fused, 100, 1 << 20)),
            limit + head_major
        );
        let paged = CudaWorkspace {
            paged: true,
            arch: "sm_90a".into(),
        };
        // One decode row: 16 heads × up to MAX_SPLITS partial rows of 257 f32.
        let decode = 16 * crate::attention::MAX_SPLITS as u64 * 257 * 4;
        assert_eq!(
            paged.attention_bytes(&call(RouteRequest::Fused, 1, 1 << 20)),
            decode
        );
        // A long chunk is bounded by the GPU's slots, not by its rows.
        let bound = (PARTIAL_ROWS_BOUND * 257 * 4) as u64;
        assert_eq!(
            paged.attention_bytes(&call(RouteRequest::Fused, 4096, 4096)),
            bound
        );
        // The composed route gathers even where the fused one would not.
        assert_eq!(
            paged.attention_bytes(&call(composed, 100, 300)),
            gathered.attention_bytes(&call(composed, 100, 300))
        );
    }

    #[test]
    fn fp8_expert_scratch_only_where_the_native_gemms_refuse_the_shape() {
        let on = |arch: &str| CudaWorkspace {
            paged: true,
            arch: arch.into(),
        };
        // The 35B-A3B experts on Hopper: native, no scratch.
        assert_eq!(on("sm_90a").fp8_expert_scratch_bytes(256, 2048, 512), 0);
        // Elsewhere, or a shape off the 128-blocks: the layer's bf16 copy.
        assert_eq!(
            on("sm_89").fp8_expert_scratch_bytes(256, 2048, 512),
            3 << 29
        );
        assert_eq!(
            on("sm_90a").fp8_expert_scratch_bytes(8, 192, 256),
            8 * 3 * 192 * 256 * 2
        );
    }
}
