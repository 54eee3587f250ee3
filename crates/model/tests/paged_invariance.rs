//! Batch invariance over the paged KV pool on the CPU (a tiny synthetic
//! model, in CI): every request's greedy tokens and logits are the same
//! (rel. error < 1e-5) run alone and packed among 15 others — staggered
//! arrivals, so steps mix decode rows, prompt chunks after history and fresh
//! prompts — with the identity layout and with shuffled block tables, and
//! when requests are dropped mid-generation and recomputed from their tokens
//! (what preemption does), their blocks going to the others at once.
//!
//! The scheduler here is a small stand-in for the engine's: each step every
//! running request contributes its next prompt chunk or its one decode row;
//! blocks come from a shuffled free list as a sequence grows and return to
//! its front when the sequence ends or is preempted.

mod common;

use common::rel_err;
use headroom_core::ops::{blocks_for, Backend, Batch, BlockTables};
use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_model::{AttentionPlan, LogitsRows, ModelConfig, ModelState, Qwen35Model, Weights};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::VecDeque;

type Model = Qwen35Model<CpuBackend>;

const REQUESTS: usize = 16;
const GENERATE: usize = 6;
const CHUNK: usize = 48;
const CAPACITY: usize = 256;

fn model() -> Model {
    let cfg = ModelConfig::synthetic("tiny-d64:layers=8").unwrap();
    let w = Weights::synthetic(&cfg, 7);
    Qwen35Model::load(CpuBackend::new(), &cfg, w).unwrap()
}

/// Request `j`'s prompt: 3 to 152 tokens.
fn prompt(j: usize, vocab: usize) -> Vec<u32> {
    let n = 3 + (j * 37 + 11) % 150;
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(j as u32 * 97) >> 7) % vocab as u32)
        .collect()
}

/// How a run lays out its KV.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Layout {
    /// No block tables: slot `s` owns its blocks.
    Identity,
    /// Tables from a shuffled pool of this many blocks.
    Paged(usize),
}

/// One request as the run sees it: its tokens (prompt, then generated), how
/// many the state holds, its slot and blocks while it runs.
struct Seq {
    tokens: Vec<u32>,
    prompt: usize,
    done: usize,
    slot: Option<usize>,
    blocks: Vec<u32>,
    /// Logits of each generated token.
    logits: Vec<Vec<f32>>,
}

/// What a run returns: per request, its generated tokens and their logits.
type Outcome = Vec<(Vec<u32>, Vec<Vec<f32>>)>;

struct Run<'m> {
    model: &'m Model,
    layout: Layout,
    state: ModelState<CpuBackend>,
    free_slots: VecDeque<usize>,
    free_blocks: VecDeque<u32>,
    seqs: Vec<Seq>,
    /// Request `j` arrives at step `arrive[j]`.
    arrive: Vec<usize>,
    /// (request, generated): drop that request's state at the start of a
    /// step when it runs with that many tokens generated (0: part of its
    /// prompt done); it comes back two steps later. Each fires once.
    preempt: Vec<(usize, usize)>,
    fired: Vec<bool>,
    routes: Vec<Option<RouteRequest>>,
}

impl<'m> Run<'m> {
    fn new(
        model: &'m Model,
        requests: &[usize],
        slots: usize,
        layout: Layout,
        preempt: Vec<(usize, usize)>,
    ) -> Run<'m> {
        let vocab = model.vocab_size();
        let (state, free_blocks) = match layout {
            Layout::Identity => (model.new_state(slots, CAPACITY).unwrap(), VecDeque::new()),
            Layout::Paged(pool) => {
                let mut ids: Vec<u32> = (0..pool as u32).collect();
                ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(pool as u64));
                let st = model.new_paged_state(slots, CAPACITY, Some(pool)).unwrap();
                (st, ids.into())
            }
        };
        let seqs = requests
            .iter()
            .map(|&j| {
                let tokens = prompt(j, vocab);
                Seq {
                    prompt: tokens.len(),
                    tokens,
                    done: 0,
                    slot: None,
                    blocks: Vec::new(),
                    logits: Vec::new(),
                }
            })
            .collect();
        let arrive = match requests.len() {
            1 => vec![0],
            _ => requests.iter().map(|j| j % 4).collect(),
        };
        let plan = AttentionPlan::Uniform(RouteRequest::Composed { query_block: 16 });
        Run {
            routes: model.routes(&plan).unwrap(),
            model,
            layout,
            state,
            free_slots: (0..slots).collect(),
            free_blocks,
            seqs,
            arrive,
            fired: vec![false; preempt.len()],
            preempt,
        }
    }

    fn finished(&self, i: usize) -> bool {
        self.seqs[i].logits.len() == GENERATE
    }

    /// Frees request `i`'s slot and blocks (its tokens stay).
    fn release(&mut self, i: usize) {
        let be = self.model.backend();
        let s = &mut self.seqs[i];
        let slot = s.slot.take().expect("running");
        self.state.reset_slot(be, slot).unwrap();
        self.free_slots.push_front(slot);
        for b in s.blocks.drain(..).rev() {
            self.free_blocks.push_front(b);
        }
        s.done = 0;
    }

    /// Runs step `step` (nothing when no request is running).
    fn step(&mut self, step: usize) {
        for p in 0..self.preempt.len() {
            let (i, generated) = self.preempt[p];
            let s = &self.seqs[i];
            if !self.fired[p] && s.slot.is_some() && s.done > 0 && s.logits.len() == generated {
                self.fired[p] = true;
                self.release(i);
                self.arrive[i] = step + 2;
            }
        }
        // Admit (again) every arrived request without a slot, in order.
        let mut rows = Vec::new();
        for i in 0..self.seqs.len() {
            if self.arrive[i] > step || self.finished(i) {
                continue;
            }
            if self.seqs[i].slot.is_none() {
                self.seqs[i].slot = Some(self.free_slots.pop_front().expect("a free slot"));
            }
            let s = &mut self.seqs[i];
            let n = (s.tokens.len() - s.done).min(CHUNK);
            if let Layout::Paged(_) = self.layout {
                while s.blocks.len() < blocks_for(s.done + n) {
                    s.blocks.push(self.free_blocks.pop_front().expect("pool"));
                }
            }
            rows.push((i, n));
        }
        if rows.is_empty() {
            return;
        }
        let described: Vec<(usize, usize, usize)> = rows
            .iter()
            .map(|&(i, n)| (self.seqs[i].slot.unwrap(), self.seqs[i].done, n))
            .collect();
        let mut batch = Batch::packed(&described);
        if let Layout::Paged(_) = self.layout {
            let tables: Vec<&[u32]> = rows
                .iter()
                .map(|&(i, _)| &self.seqs[i].blocks[..])
                .collect();
            batch = batch.with_blocks(BlockTables::from_tables(&tables));
        }
        let ids: Vec<u32> = rows
            .iter()
            .flat_map(|&(i, n)| {
                let s = &self.seqs[i];
                s.tokens[s.done..s.done + n].to_vec()
            })
            .collect();
        let out = self
            .model
            .step(
                &mut self.state,
                &ids,
                &batch,
                &self.routes,
                LogitsRows::Last,
            )
            .unwrap();
        let be = self.model.backend();
        let logits = be.act_to_f32(&out.logits.unwrap()).unwrap();
        let vocab = self.model.vocab_size();
        for (r, &(i, n)) in rows.iter().enumerate() {
            let s = &mut self.seqs[i];
            s.done += n;
            // Rows of the prompt's (or the recompute's) last chunk and decode
            // rows predict the next token.
            if s.done == s.tokens.len() && s.done >= s.prompt {
                let row = logits[r * vocab..(r + 1) * vocab].to_vec();
                let next = argmax(&row);
                s.logits.push(row);
                s.tokens.push(next);
            }
            if self.seqs[i].logits.len() == GENERATE {
                self.release(i);
            }
        }
    }

    fn run(mut self) -> Outcome {
        let mut step = 0;
        while !(0..self.seqs.len()).all(|i| self.finished(i)) {
            self.step(step);
            step += 1;
            assert!(step < 1000, "the run does not end");
        }
        assert!(self.fired.iter().all(|&f| f), "every preemption hit");
        self.seqs
            .into_iter()
            .map(|s| (s.tokens[s.prompt..].to_vec(), s.logits))
            .collect()
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        assert!(v.is_finite(), "logit {i} is {v}");
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Every request's tokens equal and logits within 1e-5 of `want`'s.
fn assert_same(what: &str, got: &Outcome, want: &Outcome) {
    assert_eq!(got.len(), want.len());
    for (j, ((gt, gl), (wt, wl))) in got.iter().zip(want).enumerate() {
        assert_eq!(gt, wt, "{what}: request {j}'s tokens");
        assert_eq!(gl.len(), GENERATE);
        for (t, (g, w)) in gl.iter().zip(wl).enumerate() {
            let err = rel_err(g, w);
            assert!(err < 1e-5, "{what}: request {j} token {t}: {err:.2e}");
        }
    }
}

/// The pool the paged runs share: every request's blocks plus a few, so
/// freed blocks are handed on.
fn pool() -> usize {
    (0..REQUESTS)
        .map(|j| blocks_for(prompt(j, 512).len() + GENERATE))
        .sum::<usize>()
        + 3
}

#[test]
fn packed_paged_and_preempted_requests_equal_each_alone() {
    let m = model();
    let all: Vec<usize> = (0..REQUESTS).collect();
    let alone: Outcome = all
        .iter()
        .flat_map(|&j| Run::new(&m, &[j], 1, Layout::Identity, vec![]).run())
        .collect();
    let identity = Run::new(&m, &all, REQUESTS, Layout::Identity, vec![]).run();
    assert_same("packed, identity layout", &identity, &alone);
    let paged = Run::new(&m, &all, REQUESTS, Layout::Paged(pool()), vec![]).run();
    assert_same("packed, shuffled tables", &paged, &alone);
    // The same batches: the layout changes no bit.
    for (j, ((_, a), (_, b))) in identity.iter().zip(&paged).enumerate() {
        let bits =
            |l: &Vec<Vec<f32>>| -> Vec<u32> { l.concat().iter().map(|v| v.to_bits()).collect() };
        assert_eq!(bits(a), bits(b), "request {j}: identity vs paged");
    }
    // Requests dropped mid-prompt and mid-generation, recomputed later
    // (one spare slot, so a recompute can land in another slot).
    let preempt = vec![(1, 0), (1, 0), (6, 3), (9, 4), (9, 5), (14, 3)];
    let preempted = Run::new(&m, &all, REQUESTS + 1, Layout::Paged(pool()), preempt).run();
    assert_same("packed, shuffled tables, preempted", &preempted, &alone);
}
