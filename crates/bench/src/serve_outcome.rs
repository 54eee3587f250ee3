//! What one request of a `bench serve` run did ([`One`], [`Ended`]) and the
//! percentile summary the reports give of a sample ([`Percentiles`]).

use serde::Serialize;

/// min / p50 / p90 / p99 / mean / max of a sample, in milliseconds (the
/// min of the TTFTs is the first-served request's: issue 22's W3 bar).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `ms`.
    pub fn of(mut ms: Vec<f64>) -> Percentiles {
        ms.retain(|x| x.is_finite());
        if ms.is_empty() {
            return Percentiles::default();
        }
        ms.sort_by(f64::total_cmp);
        let rank =
            |p: f64| ms[((p / 100.0 * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Percentiles {
            n: ms.len(),
            min: ms[0],
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
            max: ms[ms.len() - 1],
        }
    }
}

/// What one request did, as far as it got.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct One {
    pub ttft: Option<f64>,
    pub itl: Vec<f64>,
    pub e2e: f64,
    /// Usage from the server (completed requests).
    pub usage: Option<(u64, u64)>,
    /// Prompt tokens the server reported as cached
    /// (`usage.prompt_tokens_details.cached_tokens`).
    pub cached: u64,
    /// Content chunks received (one per token).
    pub chunks: u64,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    Completed(One),
    /// The time limit ended the run while it streamed.
    Cut(One),
    Failed(String),
}
