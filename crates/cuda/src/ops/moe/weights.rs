//! The shapes of an MoE block's weights against its spec (every path of the
//! op checks them before any launch). Each weight may be bf16 or FP8 (the
//! paths that read one raw check its form themselves). And the bf16 expert
//! weights' TMA tensor maps, encoded once per weight buffer ([`weight_map`]).

use crate::alloc::DeviceBuffer;
use crate::tensor::CudaWeight;
use crate::tensor_map::{Sw128Map, TensorMap};
use crate::CudaError;
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Checks the expert weights against the spec and `hidden`.
pub(crate) fn check_weights(
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    hidden: usize,
) -> OpResult<()> {
    let (e, i) = (spec.num_experts, spec.intermediate);
    spec.check_local()
        .map_err(|detail| OpError::shape("moe", detail))?;
    // The experts whose weights this backend holds (expert parallelism).
    let local = spec.local_experts;
    if spec.top_k == 0 || spec.top_k > e {
        return Err(OpError::shape(
            "moe",
            format!("top_k {} must be in 1..={e}", spec.top_k),
        ));
    }
    let expect = |name: &str, wt: &CudaWeight, rows: Option<usize>, cols: usize| -> OpResult<()> {
        wt.any_matrix("moe")?;
        if rows.is_some_and(|r| r != wt.rows) || wt.cols != cols {
            return Err(OpError::shape(
                "moe",
                format!(
                    "{name} is [{}][{}], expected [{rows:?}][{cols}]",
                    wt.rows, wt.cols
                ),
            ));
        }
        Ok(())
    };
    expect("router", &w.router, Some(e), hidden)?;
    expect("gate_up", &w.gate_up, local.checked_mul(2 * i), hidden)?;
    expect("down", &w.down, local.checked_mul(hidden), i)?;
    expect("shared_gate", &w.shared_gate, Some(1), hidden)?;
    expect("shared_gate_proj", &w.shared_gate_proj, None, hidden)?;
    expect(
        "shared_up_proj",
        &w.shared_up_proj,
        Some(w.shared_gate_proj.rows),
        hidden,
    )?;
    expect(
        "shared_down_proj",
        &w.shared_down_proj,
        Some(hidden),
        w.shared_gate_proj.rows,
    )
}

/// A tensor map's key: the weights' device address and the [`Sw128Map`]'s
/// rows, columns and box rows (with the bf16 element and the SW128 layout
/// that every [`Sw128Map`] has, all that `cuTensorMapEncodeTiled` is given).
type MapKey = (u64, usize, usize, usize);

/// Tensor maps encoded so far, by [`MapKey`].
type MapCache = Mutex<BTreeMap<MapKey, TensorMap>>;

/// Most maps [`MAPS`] holds; one more empties it first. The 35B-A3B model
/// needs 80 (gate+up and down of 40 MoE layers) per rank of the process.
const MAX_MAPS: usize = 4096;

/// The process's expert-weight tensor maps.
static MAPS: MapCache = Mutex::new(BTreeMap::new());

/// The tensor map `m` (`m.rows` rows of `m.cols` bf16, boxes of
/// `m.box_rows` rows) of the weights `w`: encoded by the driver on the first
/// call for `w`'s address and `m`, taken from a process-wide cache after
/// (the Ws grouped GEMMs ask for their weights' maps every pass of every
/// layer).
///
/// Tied to the buffer's lifetime by its key: a map is what
/// [`Sw128Map::encode`] gives for the key's address and shape, a function of
/// them alone, so a cached map is the map a new encoding of the same key
/// would give, never a stale one; and it is only handed out for a buffer
/// the caller lends, live, at that address and large enough for `m`. A
/// freed buffer's entry is never read through that buffer again: a later
/// buffer at the same address (the allocator reuses blocks) with the same
/// shape has the same map, with another shape another key.
pub(super) fn weight_map(w: &DeviceBuffer, m: Sw128Map) -> Result<TensorMap, CudaError> {
    let bytes = m.rows.checked_mul(m.cols).and_then(|e| e.checked_mul(2));
    if bytes.is_none_or(|b| b > w.len_bytes()) {
        return Err(CudaError::InvalidLaunch(format!(
            "tensor map of {} x {} bf16 past the {} bytes of its buffer",
            m.rows,
            m.cols,
            w.len_bytes()
        )));
    }
    cached_map(&MAPS, (w.ptr(), m.rows, m.cols, m.box_rows), || {
        m.encode(w.ptr())
    })
}

/// The map of `key` in `cache`, or `encode`'s (cached when it succeeds;
/// a full cache is emptied first).
fn cached_map(
    cache: &MapCache,
    key: MapKey,
    encode: impl FnOnce() -> Result<TensorMap, CudaError>,
) -> Result<TensorMap, CudaError> {
    let mut maps = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = maps.get(&key) {
        return Ok(*m);
    }
    let m = encode()?;
    if maps.len() >= MAX_MAPS {
        maps.clear();
    }
    maps.insert(key, m);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fake_map as map, fake_memory};
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_map_is_encoded_once_per_address_and_shape() {
        let cache = MapCache::default();
        let encodes = Cell::new(0);
        let get = |key: MapKey| {
            cached_map(&cache, key, || {
                encodes.set(encodes.get() + 1);
                Ok(map(encodes.get()))
            })
            .map(|m| m.0.opaque[0])
        };
        // The 35B-A3B gate+up weights: 256 experts x 1024 rows of 2048.
        let gate_up = (0x7000_0000, 256 * 1024, 2048, 128);
        assert_eq!(get(gate_up).unwrap(), 1);
        for _ in 0..40 {
            assert_eq!(get(gate_up).unwrap(), 1, "every later pass");
        }
        assert_eq!(encodes.get(), 1);
        // Another address, another shape, another box: each its own map.
        assert_eq!(get((0x7100_0000, 256 * 1024, 2048, 128)).unwrap(), 2);
        assert_eq!(get((0x7000_0000, 256 * 2048, 512, 128)).unwrap(), 3);
        assert_eq!(get((0x7000_0000, 256 * 1024, 2048, 64)).unwrap(), 4);
        assert_eq!(get(gate_up).unwrap(), 1);
        assert_eq!(encodes.get(), 4);
    }

    #[test]
    fn a_failed_encoding_is_the_error_and_is_not_cached() {
        let cache = MapCache::default();
        let key = (0x7000_0000, 1024, 512, 128);
        let failed = cached_map(&cache, key, || {
            Err(CudaError::InvalidLaunch("driver says no".into()))
        });
        assert!(failed.is_err());
        let m = cached_map(&cache, key, || Ok(map(5))).unwrap();
        assert_eq!(m.0.opaque[0], 5);
    }

    #[test]
    fn a_full_cache_is_emptied_before_the_next_map() {
        let cache = MapCache::default();
        for p in 0..MAX_MAPS as u64 {
            cached_map(&cache, (p * 16, 128, 64, 128), || Ok(map(p))).unwrap();
        }
        assert_eq!(cache.lock().unwrap().len(), MAX_MAPS);
        cached_map(&cache, (1 << 40, 128, 64, 128), || Ok(map(0))).unwrap();
        assert_eq!(cache.lock().unwrap().len(), 1);
        // The first key again: encoded anew.
        let m = cached_map(&cache, (0, 128, 64, 128), || Ok(map(77))).unwrap();
        assert_eq!(m.0.opaque[0], 77);
    }

    #[test]
    fn a_map_past_its_buffer_is_refused_before_the_driver() {
        let mem = fake_memory();
        let w = mem.alloc(128 * 64 * 2 - 2).unwrap();
        let m = Sw128Map {
            rows: 128,
            cols: 64,
            box_rows: 128,
        };
        assert!(matches!(
            weight_map(&w, m),
            Err(CudaError::InvalidLaunch(why)) if why.contains("past the")
        ));
        let huge = Sw128Map {
            rows: usize::MAX,
            ..m
        };
        assert!(weight_map(&w, huge).is_err());
    }
}
