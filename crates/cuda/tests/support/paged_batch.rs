//! A paged attention batch on the GPU for the timing tests (step256_timing
//! and mixed_attention_timing include this file with `#[path]`): sequences
//! of `(q_len, kv_len)` each on its own blocks of one pool, 16 query / 2 KV
//! heads of 256, bf16, with q, gate, out and the pools filled with constants
//! (speed only); and the helpers both files time with.

use headroom_core::ops::BlockTables;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::attention::{PagedBuffers, PagedShape};
use headroom_cuda::device::CudaDevice;

pub const KV_ROWS: usize = 64;
pub const Q_HEADS: usize = 16;
pub const KV_HEADS: usize = 2;
pub const D: usize = 256;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A bf16 buffer of `elems` filled with the bytes `b` (0x3C: 0.0115 a value).
pub fn filled(dev: &CudaDevice, elems: usize, b: u8) -> DeviceBuffer {
    let buf = dev.alloc(elems * 2).unwrap();
    dev.fill_bytes(&buf, b).unwrap();
    buf
}

/// Sequences on their own blocks of one pool, and the call's buffers.
pub struct PagedBatch {
    pub cu: Vec<usize>,
    pub kv_lens: Vec<usize>,
    pub tables: BlockTables,
    pub q: DeviceBuffer,
    pub gate: DeviceBuffer,
    pub out: DeviceBuffer,
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
}

impl PagedBatch {
    /// `seqs`: each sequence's `(q_len, kv_len)` (history = kv_len − q_len).
    pub fn new(dev: &CudaDevice, seqs: &[(usize, usize)]) -> PagedBatch {
        let mut cu = vec![0];
        let mut tables = Vec::new();
        let mut next = 0u32;
        for &(q, kv) in seqs {
            cu.push(cu.last().unwrap() + q);
            let blocks = kv.div_ceil(KV_ROWS) as u32;
            tables.push((next..next + blocks).collect::<Vec<u32>>());
            next += blocks;
        }
        let rows = *cu.last().unwrap();
        let pool = next as usize * KV_HEADS * KV_ROWS * D;
        PagedBatch {
            cu,
            kv_lens: seqs.iter().map(|s| s.1).collect(),
            tables: BlockTables::from_tables(&tables),
            q: filled(dev, rows * Q_HEADS * D, 0x3C),
            gate: filled(dev, rows * Q_HEADS * D, 0x3F),
            out: filled(dev, rows * Q_HEADS * D, 0xFF),
            k: filled(dev, pool, 0x3C),
            v: filled(dev, pool, 0x3D),
        }
    }

    pub fn shape(&self) -> PagedShape<'_> {
        PagedShape {
            cu_seqlens: &self.cu,
            kv_lens: &self.kv_lens,
            tables: &self.tables,
            q_heads: Q_HEADS,
            kv_heads: KV_HEADS,
            head_dim: D,
        }
    }

    /// The gated call's buffers: q, gate and out hold rows × 16 × 256
    /// elements, the pools every block of the tables.
    pub fn buffers(&self) -> PagedBuffers {
        PagedBuffers {
            q: self.q.ptr(),
            k: self.k.ptr(),
            v: self.v.ptr(),
            out: self.out.ptr(),
            gate: Some(self.gate.ptr()),
        }
    }
}
