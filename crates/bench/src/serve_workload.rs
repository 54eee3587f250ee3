//! What one `bench serve` run asks for ([`LoadConfig`]) and the prompts it
//! sends: exact token counts as ids ([`prompt_ids`]), with a prefix every
//! request shares when asked ([`workload_prompt`]).

use std::net::SocketAddr;
use std::time::Duration;

/// One run at one concurrency (`crate::serve_load::run`).
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub addr: SocketAddr,
    pub model: Option<String>,
    pub concurrency: usize,
    pub requests: usize,
    pub prompt_len: usize,
    /// Leading prompt tokens every request shares (a shared system prompt;
    /// 0: none), at most `prompt_len`.
    pub shared_prefix_len: usize,
    pub max_tokens: usize,
    /// Ask the server to ignore EOS (`ignore_eos`), so every request generates `max_tokens`.
    pub ignore_eos: bool,
    /// Whole-run limit: requests not started by then are skipped, running ones are cut.
    pub time_limit: Duration,
    /// Sample the server's pool gauges (`/metrics`) this often; `None`: no samples.
    pub sample_every: Option<Duration>,
    /// Turns per conversation (1: single requests; see [`crate::serve_turns`]).
    pub turns: usize,
    /// Fresh prompt tokens each later turn adds.
    pub turn_len: usize,
}

/// Exactly `len` printable-ASCII ids (present in any vocabulary of 128 or
/// more; sent as ids, so no tokenizer changes the count), varied per request:
/// the first three are `i` in base 94, so no two of the first 830,584
/// requests share even their first KV block (a server's prefix cache finds
/// nothing to reuse between them), then a pattern shifted by `i`.
pub fn prompt_ids(len: usize, i: usize) -> Vec<u32> {
    let digit = |d: u32| 33 + ((i / 94usize.pow(d)) % 94) as u32;
    (0..len)
        .map(|k| match k {
            0..=2 => digit(k as u32),
            _ => 33 + ((k * 7 + i * 13) % 94) as u32,
        })
        .collect()
}

/// Request `i`'s prompt: `shared_prefix_len` ids every request shares (a
/// sequence no request's own part starts with), then its own
/// [`prompt_ids`] for the rest.
pub fn workload_prompt(cfg: &LoadConfig, i: usize) -> Vec<u32> {
    let shared = cfg.shared_prefix_len.min(cfg.prompt_len);
    let mut ids: Vec<u32> = (0..shared)
        .map(|k| 33 + ((k * 11 + 5) % 94) as u32)
        .collect();
    ids.extend(prompt_ids(cfg.prompt_len - shared, i));
    ids
}
