//! Prefill attention: the shape of a call, the route it runs, what it reports.
//!
//! # Semantics shared by every backend
//!
//! * Layout is head-major and contiguous: `q` and `out` are
//!   `[q_heads][q_len][head_dim]`, `k` and `v` are `[kv_heads][kv_len][head_dim]`.
//! * The queries are the **last** `q_len` rows of a KV sequence of length
//!   `kv_len >= q_len`; the `kv_len - q_len` rows before them are history
//!   from earlier chunks.
//! * The causal mask is lower-right aligned: query row `i` attends to KV
//!   positions `0 ..= kv_len - q_len + i`.
//! * GQA: `q_heads` is an integer multiple of `kv_heads`; query head `h` reads
//!   KV head `h / (q_heads / kv_heads)`.
//! * `scale` defaults to `1 / sqrt(head_dim)`.
//! * Accumulation and softmax are f32 whatever the storage dtype; a NaN in an
//!   input yields NaN in every output row that reads it, never a silent number.

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// The route an attention call runs (or `None` for layers without softmax attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Query-blocked: per block of `qL` rows, scores = Q·Kᵀ, masked softmax, · V.
    Composed,
    /// One flash-attention style pass with online softmax.
    Fused,
    /// No softmax attention (linear-attention layers).
    None,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Route::Composed => "composed",
            Route::Fused => "fused",
            Route::None => "none",
        })
    }
}

/// What the caller asks an attention call to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "lowercase")]
pub enum RouteRequest {
    /// `query_block == 0` means one block of all `q_len` rows.
    Composed {
        query_block: usize,
    },
    Fused,
}

impl fmt::Display for RouteRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteRequest::Composed { query_block } => write!(f, "composed:{query_block}"),
            RouteRequest::Fused => f.write_str("fused"),
        }
    }
}

impl std::str::FromStr for RouteRequest {
    type Err = String;
    /// Parses `fused`, `composed` (block 128) or `composed:N`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        if s == "fused" {
            return Ok(RouteRequest::Fused);
        }
        if s == "composed" {
            return Ok(RouteRequest::Composed { query_block: 128 });
        }
        if let Some(n) = s.strip_prefix("composed:") {
            return n
                .parse::<usize>()
                .map(|query_block| RouteRequest::Composed { query_block })
                .map_err(|_| {
                    format!("bad query block `{n}` in route `{s}` (expected an integer >= 0)")
                });
        }
        Err(format!(
            "unknown route `{s}` (expected fused, composed or composed:N)"
        ))
    }
}

/// What an attention call actually ran, read back from the kernel call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionReport {
    pub route: Route,
    /// The query block that ran (composed only; `q_len` when the request was 0).
    pub query_block: Option<usize>,
    /// Peak workspace bytes the call allocated beyond its inputs and output.
    pub transient_bytes: u64,
}

/// The shape of one prefill attention call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttentionShape {
    pub q_len: usize,
    pub kv_len: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Softmax scale; `None` means `1 / sqrt(head_dim)`.
    pub scale: Option<f32>,
}

/// A typed error naming the offending dimension.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttentionError {
    #[error("dimension `{dim}` must be > 0")]
    ZeroDimension { dim: &'static str },
    #[error("q_len {q_len} > kv_len {kv_len}: queries must be the last rows of the KV sequence")]
    QueryLongerThanKv { q_len: usize, kv_len: usize },
    #[error("q_heads {q_heads} is not a multiple of kv_heads {kv_heads}")]
    HeadsNotDivisible { q_heads: usize, kv_heads: usize },
    #[error("buffer `{buffer}` has {actual} elements, the shape needs {expected}")]
    BufferLength {
        buffer: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("head_dim {head_dim} is not supported by the {route} route on {backend} (supported: {supported:?})")]
    UnsupportedHeadDim {
        head_dim: usize,
        route: &'static str,
        backend: &'static str,
        supported: Vec<usize>,
    },
    #[error("dtype {dtype} is not supported by the {route} route on {backend}")]
    UnsupportedDtype {
        dtype: crate::Dtype,
        route: &'static str,
        backend: &'static str,
    },
    #[error("scale {0} is not finite and positive")]
    BadScale(f32),
    #[error("backend error: {0}")]
    Backend(String),
}

impl AttentionShape {
    /// Checks dimensions only (not buffers). Every backend calls this first.
    pub fn validate(&self) -> Result<(), AttentionError> {
        for (dim, v) in [
            ("q_len", self.q_len),
            ("kv_len", self.kv_len),
            ("q_heads", self.q_heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return Err(AttentionError::ZeroDimension { dim });
            }
        }
        if self.q_len > self.kv_len {
            return Err(AttentionError::QueryLongerThanKv {
                q_len: self.q_len,
                kv_len: self.kv_len,
            });
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(AttentionError::HeadsNotDivisible {
                q_heads: self.q_heads,
                kv_heads: self.kv_heads,
            });
        }
        if let Some(s) = self.scale {
            if !(s.is_finite() && s > 0.0) {
                return Err(AttentionError::BadScale(s));
            }
        }
        Ok(())
    }

    /// Validates the shape and the lengths of the four buffers.
    pub fn validate_buffers(
        &self,
        q: usize,
        k: usize,
        v: usize,
        out: usize,
    ) -> Result<(), AttentionError> {
        self.validate()?;
        for (buffer, expected, actual) in [
            ("q", self.q_elems(), q),
            ("k", self.kv_elems(), k),
            ("v", self.kv_elems(), v),
            ("out", self.q_elems(), out),
        ] {
            if expected != actual {
                return Err(AttentionError::BufferLength {
                    buffer,
                    expected,
                    actual,
                });
            }
        }
        Ok(())
    }

    pub fn q_elems(&self) -> usize {
        self.q_heads * self.q_len * self.head_dim
    }

    pub fn kv_elems(&self) -> usize {
        self.kv_heads * self.kv_len * self.head_dim
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.q_heads / self.kv_heads
    }

    /// History rows before the queries.
    pub fn history(&self) -> usize {
        self.kv_len - self.q_len
    }

    pub fn scale_or_default(&self) -> f32 {
        self.scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// Σ over query rows of the number of keys each attends to (causal, lower-right).
    pub fn attended_keys(&self) -> u64 {
        let h = self.history() as u64;
        let n = self.q_len as u64;
        n * h + n * (n + 1) / 2
    }

    /// Causal FLOPs: `4 · q_heads · head_dim · Σ attended keys`
    /// (two GEMMs, QKᵀ and PV, of 2 FLOPs per multiply-add).
    pub fn causal_flops(&self) -> f64 {
        4.0 * self.q_heads as f64 * self.head_dim as f64 * self.attended_keys() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(q_len: usize, kv_len: usize, q_heads: usize, kv_heads: usize) -> AttentionShape {
        AttentionShape {
            q_len,
            kv_len,
            q_heads,
            kv_heads,
            head_dim: 64,
            scale: None,
        }
    }

    #[test]
    fn rejects_bad_dimensions_by_name() {
        assert_eq!(
            shape(9, 8, 4, 2).validate(),
            Err(AttentionError::QueryLongerThanKv {
                q_len: 9,
                kv_len: 8
            })
        );
        assert_eq!(
            shape(8, 8, 6, 4).validate(),
            Err(AttentionError::HeadsNotDivisible {
                q_heads: 6,
                kv_heads: 4
            })
        );
        assert_eq!(
            shape(8, 8, 4, 0).validate(),
            Err(AttentionError::ZeroDimension { dim: "kv_heads" })
        );
        let s = shape(8, 8, 4, 2);
        assert!(matches!(
            s.validate_buffers(s.q_elems(), s.kv_elems() - 1, s.kv_elems(), s.q_elems()),
            Err(AttentionError::BufferLength { buffer: "k", .. })
        ));
    }

    #[test]
    fn attended_keys_counts_history_and_triangle() {
        // 3 queries after 2 history rows attend to 3, 4, 5 keys.
        assert_eq!(shape(3, 5, 1, 1).attended_keys(), 12);
        assert_eq!(shape(4, 4, 1, 1).attended_keys(), 10);
    }

    #[test]
    fn parses_route_requests() {
        assert_eq!("fused".parse(), Ok(RouteRequest::Fused));
        assert_eq!(
            "composed:512".parse(),
            Ok(RouteRequest::Composed { query_block: 512 })
        );
        assert!("composed:-1".parse::<RouteRequest>().is_err());
    }
}
