//! Multi-turn conversations for `bench serve --turns K`: each of the run's
//! `requests` is a conversation of `turns` requests sent one after another
//! by one client (the concurrency is over conversations). Turn 1 is the
//! conversation's prompt of `prompt_len` ids
//! ([`crate::serve_workload::workload_prompt`]); turn `t + 1` resends turn
//! `t`'s prompt followed by `turn_len` fresh ids ([`turn_prompt`]). The
//! completions response carries the generated text, not its token ids, so
//! the generated tokens are not resent: each turn extends the previous
//! turn's *prompt*, the prefix a server's cache can hold.
//!
//! Per turn index the report gives the TTFT percentiles, the prompt tokens
//! and the cached prompt tokens the server reported ([`TurnReport`]).

use crate::serve_outcome::{Ended, Percentiles};
use crate::serve_workload::{workload_prompt, LoadConfig};
use serde::Serialize;

/// Most turns of one conversation.
pub const MAX_TURNS: usize = 1000;

/// What the requests of one turn index measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TurnReport {
    /// The turn, from 1.
    pub turn: usize,
    /// Requests of this turn that streamed to their end.
    pub completed: usize,
    /// Prompt tokens of those requests.
    pub prompt_tokens: u64,
    /// Of them, those the server's prefix cache supplied.
    pub cached_tokens: u64,
    /// Time to first token of every request of this turn that got one.
    pub ttft_ms: Percentiles,
}

/// The prompt length of turn `t` (from 0): `prompt_len + t × turn_len`;
/// `None` on overflow.
pub fn turn_prompt_len(cfg: &LoadConfig, t: usize) -> Option<usize> {
    t.checked_mul(cfg.turn_len)?.checked_add(cfg.prompt_len)
}

/// `len` fresh ids of conversation `i`'s turn `t` (printable ASCII, varied
/// by both).
fn fresh_ids(len: usize, i: usize, t: usize) -> impl Iterator<Item = u32> {
    (0..len).map(move |k| 33 + ((k * 5 + i * 17 + t * 31 + 7) % 94) as u32)
}

/// The prompt of conversation `i`'s turn `t` (from 0): its first prompt,
/// then `turn_len` fresh ids for each later turn up to `t`.
pub fn turn_prompt(cfg: &LoadConfig, i: usize, t: usize) -> Vec<u32> {
    let mut ids = workload_prompt(cfg, i);
    for u in 1..=t {
        ids.extend(fresh_ids(cfg.turn_len, i, u));
    }
    ids
}

/// `--turns` and `--turn-len` against the limits (the last turn's prompt
/// at most `max_prompt`).
pub fn check_turns(cfg: &LoadConfig, max_prompt: usize) -> Result<(), String> {
    if cfg.turns == 0 || cfg.turns > MAX_TURNS {
        return Err(format!(
            "--turns must be in 1..={MAX_TURNS} (got {})",
            cfg.turns
        ));
    }
    match turn_prompt_len(cfg, cfg.turns - 1) {
        Some(n) if n <= max_prompt => Ok(()),
        _ => Err(format!(
            "--turn-len {}: the last of {} turns would send more than {max_prompt} prompt tokens \
             (--prompt-len {} + {} × --turn-len)",
            cfg.turn_len,
            cfg.turns,
            cfg.prompt_len,
            cfg.turns - 1
        )),
    }
}

/// Per-turn accumulation of the requests' outcomes.
#[derive(Debug, Default)]
pub struct TurnTally {
    /// Per turn index: TTFTs, prompt tokens, cached tokens, completed.
    turns: Vec<(Vec<f64>, u64, u64, usize)>,
}

impl TurnTally {
    /// Adds the outcome of a request of turn `t` (from 0).
    pub fn add(&mut self, t: usize, ended: &Ended) {
        if self.turns.len() <= t {
            self.turns.resize_with(t + 1, Default::default);
        }
        let e = &mut self.turns[t];
        match ended {
            Ended::Completed(one) => {
                e.0.extend(one.ttft);
                e.1 += one.usage.map_or(0, |u| u.0);
                e.2 += one.cached;
                e.3 += 1;
            }
            Ended::Cut(one) => e.0.extend(one.ttft),
            Ended::Failed(_) => {}
        }
    }

    /// One entry per turn of `turns`.
    pub fn report(self, turns: usize) -> Vec<TurnReport> {
        let mut per = self.turns;
        per.resize_with(turns.max(per.len()), Default::default);
        per.into_iter()
            .enumerate()
            .map(|(t, (ttft, prompt, cached, completed))| TurnReport {
                turn: t + 1,
                completed,
                prompt_tokens: prompt,
                cached_tokens: cached,
                ttft_ms: Percentiles::of(ttft),
            })
            .collect()
    }
}

/// The per-turn table (empty for one turn).
pub fn table(turns: &[TurnReport]) -> String {
    if turns.len() < 2 {
        return String::new();
    }
    let mut out = format!(
        "{:>5} {:>9} {:>10} {:>10} {:>14} {:>14} {:>8}\n",
        "turn", "completed", "ttft p50", "ttft p90", "prompt tokens", "cached tokens", "cached"
    );
    for t in turns {
        let share = if t.prompt_tokens > 0 {
            100.0 * t.cached_tokens as f64 / t.prompt_tokens as f64
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:>5} {:>9} {:>10.2} {:>10.2} {:>14} {:>14} {:>7.1}%\n",
            t.turn,
            t.completed,
            t.ttft_ms.p50,
            t.ttft_ms.p90,
            t.prompt_tokens,
            t.cached_tokens,
            share
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve_outcome::One;
    use std::time::Duration;

    fn cfg() -> LoadConfig {
        LoadConfig {
            addr: "127.0.0.1:9".parse().unwrap(),
            model: None,
            concurrency: 2,
            requests: 3,
            prompt_len: 10,
            shared_prefix_len: 0,
            max_tokens: 4,
            ignore_eos: true,
            time_limit: Duration::from_secs(1),
            sample_every: None,
            turns: 3,
            turn_len: 4,
        }
    }

    #[test]
    fn each_turn_resends_the_previous_prompt_and_adds_turn_len_ids() {
        let c = cfg();
        let (t0, t1, t2) = (
            turn_prompt(&c, 1, 0),
            turn_prompt(&c, 1, 1),
            turn_prompt(&c, 1, 2),
        );
        assert_eq!(t0, workload_prompt(&c, 1));
        assert_eq!((t0.len(), t1.len(), t2.len()), (10, 14, 18));
        assert_eq!(t1[..10], t0[..]);
        assert_eq!(t2[..14], t1[..]);
        assert_ne!(t2[14..], t1[10..], "fresh ids per turn");
        assert_ne!(
            turn_prompt(&c, 2, 1)[10..],
            t1[10..],
            "and per conversation"
        );
        assert!(t2.iter().all(|&x| (33..127).contains(&x)));
        assert_eq!(turn_prompt_len(&c, 2), Some(18));
        assert!(check_turns(&c, 18).is_ok());
        assert!(check_turns(&c, 17).unwrap_err().contains("--turn-len"));
        let e = check_turns(
            &LoadConfig {
                turns: 0,
                ..c.clone()
            },
            100,
        )
        .unwrap_err();
        assert!(e.contains("--turns"), "{e}");
        let huge = LoadConfig {
            turn_len: usize::MAX,
            ..c
        };
        assert!(check_turns(&huge, 100).unwrap_err().contains("--turn-len"));
    }

    #[test]
    fn turns_tally_ttft_and_cached_tokens_per_index() {
        let done = |ttft, prompt, cached| {
            Ended::Completed(One {
                ttft: Some(ttft),
                usage: Some((prompt, 4)),
                cached,
                ..One::default()
            })
        };
        let mut t = TurnTally::default();
        t.add(0, &done(100.0, 10, 0));
        t.add(0, &done(120.0, 10, 0));
        t.add(1, &done(10.0, 14, 0));
        t.add(1, &done(12.0, 14, 8));
        t.add(1, &Ended::Failed("x".into()));
        let r = t.report(3);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (
                r[0].turn,
                r[0].completed,
                r[0].prompt_tokens,
                r[0].cached_tokens
            ),
            (1, 2, 20, 0)
        );
        assert_eq!(
            (r[1].completed, r[1].prompt_tokens, r[1].cached_tokens),
            (2, 28, 8)
        );
        assert_eq!((r[0].ttft_ms.p50, r[1].ttft_ms.p50), (100.0, 10.0));
        assert_eq!((r[2].turn, r[2].completed, r[2].ttft_ms.n), (3, 0, 0));
        let text = table(&r);
        assert!(text.contains("cached tokens"), "{text}");
        assert!(text.lines().nth(2).unwrap().contains("28.6%"), "{text}");
        assert_eq!(table(&r[..1]), "", "one turn: no table");
    }
}
