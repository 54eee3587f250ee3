//! Loading a checkpoint folder: single `model.safetensors`, or shards named
//! by `model.safetensors.index.json` (else every `*.safetensors` file),
//! memory-mapped; tensors copied out in their storage dtype, renamed to
//! canonical names, FP8 weights paired with their block scales, experts
//! stacked, `qwen3_next` projections split, and the result checked against
//! the config. A tensor holding NaN or Inf (or an e4m3 NaN byte) is refused
//! at load (one parallel pass over its bits).

use super::fp8::{self, Pending, SCALE_SUFFIX};
use super::{canonical_name, check, experts, fused, CheckpointName, Weights, WeightsError};
use crate::meter::Meter;
use crate::{ModelConfig, Tensor, TensorData};
use half::{bf16, f16};
use headroom_core::fp8::e4m3_is_nan;
use rayon::prelude::*;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

impl Weights {
    /// Loads and validates the text-model weights of the checkpoint in `dir`.
    pub fn load(dir: &Path, cfg: &ModelConfig) -> Result<Weights, WeightsError> {
        let files = checkpoint_files(dir)?;
        let mut raw: BTreeMap<String, Tensor> = BTreeMap::new();
        let mut pending = Pending::default();
        let (mut vision, mut mtp) = (0usize, 0usize);
        let total = files
            .iter()
            .map(|f| crate::files::check_regular(f, MAX_SHARD_BYTES).map(|m| m.len()))
            .sum::<Result<u64, _>>()?;
        let mut meter = Meter::start(
            "checkpoint",
            total,
            "bytes",
            format!("loading {} ({} files)", dir.display(), files.len()),
        );
        for path in &files {
            let n = read_file(path, cfg, &mut raw, &mut pending, &mut meter)?;
            vision += n.0;
            mtp += n.1;
        }
        meter.finish();
        fp8::attach(&mut raw, pending, cfg)?;
        if vision + mtp > 0 {
            tracing::info!(vision, mtp, "skipped vision / MTP tensors");
        }
        if cfg.tie_word_embeddings && raw.remove("lm_head.weight").is_some() {
            // Some tied checkpoints still save the head; the embedding is used.
            tracing::debug!("tie_word_embeddings: ignoring the saved lm_head.weight");
        }
        if cfg.fused_linear_projections {
            fused::split_linear_projections(&mut raw, cfg)?;
        }
        experts::stack_experts(&mut raw, cfg)?;
        check::check(&raw, cfg)?;
        tracing::info!(
            tensors = raw.len(),
            files = files.len(),
            "loaded weights from {}",
            dir.display()
        );
        Ok(Weights { tensors: raw })
    }
}

/// The largest safetensors shard opened (1 TiB).
const MAX_SHARD_BYTES: u64 = 1 << 40;
/// The largest `model.safetensors.index.json` read.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// A safetensors parse error of the `len`-byte file `path`: a file shorter
/// than its header declares is reported as truncated (an interrupted copy
/// or a full disk), not as an invalid format.
fn parse_error(path: &Path, len: usize, e: safetensors::SafeTensorError) -> WeightsError {
    use safetensors::SafeTensorError as E;
    let path = path.display().to_string();
    match e {
        E::HeaderTooSmall | E::InvalidHeaderLength | E::MetadataIncompleteBuffer => {
            WeightsError::Truncated { path, len }
        }
        e => WeightsError::Safetensors {
            path,
            reason: e.to_string(),
        },
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> WeightsError + '_ {
    move |error| WeightsError::Io {
        path: path.display().to_string(),
        error,
    }
}

/// The safetensors files of a checkpoint folder, in a stable order.
fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>, WeightsError> {
    let index = dir.join("model.safetensors.index.json");
    if std::fs::symlink_metadata(&index).is_ok() {
        let text = crate::files::read_regular_text(&index, MAX_INDEX_BYTES)?;
        let bad = |reason: String| WeightsError::Index {
            path: index.display().to_string(),
            reason,
        };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no `weight_map` object".into()))?;
        let mut files: Vec<String> = map
            .values()
            .map(|f| {
                f.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("file name {f} is not a string")))
            })
            .collect::<Result<_, _>>()?;
        files.sort();
        files.dedup();
        if files
            .iter()
            .any(|f| f.contains('/') || f.contains('\\') || f == "..")
        {
            return Err(bad("shard names must be plain file names".into()));
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if std::fs::symlink_metadata(&single).is_ok() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(WeightsError::NoFiles(dir.display().to_string()));
    }
    Ok(files)
}

/// Reads one file's text tensors into `raw` (FP8 weights and block scales
/// into `pending`); returns (vision, mtp) skipped counts.
/// Advances `meter` by the tensor bytes read and, at the end, by the
/// header bytes, so the file's whole size is counted.
fn read_file(
    path: &Path,
    cfg: &ModelConfig,
    raw: &mut BTreeMap<String, Tensor>,
    pending: &mut Pending,
    meter: &mut Meter,
) -> Result<(usize, usize), WeightsError> {
    let (file, _) = crate::files::open_regular(path, MAX_SHARD_BYTES)?;
    // SAFETY: the map is read-only and dropped before this function returns;
    // a concurrent truncation of the file by another process is outside our control
    // (as with every mmap-based loader).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(path))?;
    let st = SafeTensors::deserialize(&map).map_err(|e| parse_error(path, map.len(), e))?;
    let (mut vision, mut mtp) = (0, 0);
    let mut entries = st.tensors();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut counted = 0u64;
    for (name, view) in entries {
        let bytes = view.data().len() as u64;
        counted += bytes;
        meter.advance(bytes);
        let canonical = match canonical_name(&name) {
            CheckpointName::Vision => {
                vision += 1;
                continue;
            }
            CheckpointName::Mtp => {
                mtp += 1;
                continue;
            }
            CheckpointName::Text(c) => c,
        };
        let count = non_finite_count(view.dtype(), view.data());
        if count > 0 {
            return Err(WeightsError::NonFinite { name, count });
        }
        let duplicate = |c: &str| WeightsError::Duplicate(c.to_string());
        if view.dtype() == StDtype::F8_E4M3 {
            let bits = view.data();
            let count = bits.par_iter().filter(|&&b| e4m3_is_nan(b)).count();
            if count > 0 {
                let first = bits.iter().position(|&b| e4m3_is_nan(b)).unwrap_or(0);
                return Err(WeightsError::Fp8Nan { name, count, first });
            }
            let entry = (view.shape().to_vec(), bits.to_vec());
            if pending.weights.insert(canonical.clone(), entry).is_some() {
                return Err(duplicate(&canonical));
            }
            continue;
        }
        let data = convert(view.dtype(), view.data()).ok_or_else(|| WeightsError::Dtype {
            name: name.clone(),
            expected: cfg.dtype.to_string(),
            actual: format!("{:?}", view.dtype()),
        })?;
        let tensor = Tensor::new(view.shape().to_vec(), data);
        if let Some(weight) = canonical.strip_suffix(SCALE_SUFFIX) {
            if pending.scales.insert(weight.to_string(), tensor).is_some() {
                return Err(duplicate(&canonical));
            }
        } else if raw.insert(canonical.clone(), tensor).is_some() {
            return Err(duplicate(&canonical));
        }
    }
    meter.advance((map.len() as u64).saturating_sub(counted));
    Ok((vision, mtp))
}

/// How many elements of little-endian `bytes` are NaN or ±Inf (exponent
/// bits all ones), counted in parallel on the raw bits: one cheap pass over
/// the mapped file. 0 for dtypes other than F32 / F16 / BF16.
fn non_finite_count(dtype: StDtype, bytes: &[u8]) -> usize {
    let (width, exponent_mask): (usize, u32) = match dtype {
        StDtype::F32 => (4, 0x7f80_0000),
        StDtype::F16 => (2, 0x7c00),
        StDtype::BF16 => (2, 0x7f80),
        _ => return 0,
    };
    bytes
        .par_chunks_exact(width)
        .filter(|c| {
            let bits = match c {
                [a, b] => u16::from_le_bytes([*a, *b]) as u32,
                [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]),
                _ => 0,
            };
            bits & exponent_mask == exponent_mask
        })
        .count()
}

/// Copies little-endian safetensors bytes into storage-dtype elements
/// (`None` for dtypes other than F32 / F16 / BF16).
fn convert(dtype: StDtype, bytes: &[u8]) -> Option<TensorData> {
    fn u16s(bytes: &[u8]) -> impl IndexedParallelIterator<Item = u16> + '_ {
        bytes
            .par_chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    }
    Some(match dtype {
        StDtype::F32 => TensorData::F32(
            bytes
                .par_chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        StDtype::F16 => TensorData::F16(u16s(bytes).map(f16::from_bits).collect()),
        StDtype::BF16 => TensorData::Bf16(u16s(bytes).map(bf16::from_bits).collect()),
        _ => return None,
    })
}
