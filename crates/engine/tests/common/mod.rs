//! Helpers shared by the engine's tests: tiny synthetic models and the
//! transformers fixtures on the CPU backend, prompt ids, and driving an
//! [`EngineCore`] by hand until it is idle, collecting every request's
//! tokens, logits and final event.
#![allow(dead_code)] // each test file uses its own subset

use headroom_cpu::CpuBackend;
use headroom_engine::{
    EngineConfig, EngineCore, FinishReason, GenerateRequest, RequestStream, StreamEvent, Usage,
};
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use std::collections::HashMap;
use std::path::PathBuf;

pub fn tiny(name: &str) -> Qwen35Model<CpuBackend> {
    let cfg = ModelConfig::synthetic(name).unwrap();
    Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap()
}

pub fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../model/tests/fixtures")
        .join(name)
}

/// The transformers fixture `name` on CUDA device 0 (the GPU tests).
pub fn cuda_fixture(name: &str) -> Qwen35Model<headroom_cuda::backend::CudaBackend> {
    let dir = fixture_dir(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let w = Weights::load(&dir, &cfg).unwrap();
    Qwen35Model::load(
        headroom_cuda::backend::CudaBackend::open(0).unwrap(),
        &cfg,
        w,
    )
    .unwrap()
}

/// The vocabulary of fixture `name`.
pub fn fixture_vocab(name: &str) -> usize {
    ModelConfig::from_dir(&fixture_dir(name))
        .unwrap()
        .vocab_size
}

pub fn fixture(name: &str) -> Qwen35Model<CpuBackend> {
    let dir = fixture_dir(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let w = Weights::load(&dir, &cfg).unwrap();
    Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap()
}

/// `n` pseudo-random ids below `vocab`.
pub fn ids(n: usize, vocab: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            (i.wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(97))
                >> 7)
                % vocab as u32
        })
        .collect()
}

/// The engine the GPU tests of the step overlap and the CUDA graphs run
/// [`mixed_requests`] on: chunks of 37 rows mixed with decode in steps of
/// 200, paged KV, up to 16 running, 1,024 tokens of context.
pub fn mixed_config() -> EngineConfig {
    EngineConfig {
        scheduler: headroom_engine::SchedulerSettings {
            prefill_chunk: 37,
            step_tokens: 200,
            solo_stripe: headroom_engine::SoloStripe::Tokens(2048),
            ..Default::default()
        },
        kv_backend: headroom_engine::KvBackendKind::Paged,
        max_running: 16,
        max_context: 1024,
        ..EngineConfig::default()
    }
}

/// Six requests of mixed prompt lengths (3 to 300) and `max_tokens`, EOS
/// ignored, every other one sampled with a seed from `seed_base` (the rest
/// greedy); prompt ids from `ids(len, vocab, k + id_salt)`. The GPU tests
/// of the step overlap and the CUDA graphs run them on and off.
pub fn mixed_requests(vocab: usize, id_salt: u32, seed_base: u64) -> Vec<GenerateRequest> {
    [(3, 20), (40, 12), (300, 9), (90, 30), (17, 25), (150, 16)]
        .into_iter()
        .enumerate()
        .map(|(k, (len, max))| {
            let mut r = GenerateRequest::greedy(ids(len, vocab, k as u32 + id_salt), max);
            r.ignore_eos = true;
            if k % 2 == 1 {
                r.sampling = headroom_core::ops::SamplingParams {
                    temperature: 0.9,
                    top_p: 0.95,
                    top_k: 0,
                    seed: seed_base + k as u64,
                };
            }
            r
        })
        .collect()
}

/// Everything one request produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
    pub streamed: Vec<u32>,
    pub reason: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub error: Option<String>,
}

/// Steps `core` until idle; returns each stream's outcome (same order).
pub fn drive(core: &mut EngineCore<CpuBackend>, streams: Vec<RequestStream>) -> Vec<Outcome> {
    drive_with(core, streams, &mut |_| {})
}

/// As [`drive`], showing every step's report to `on_step`.
pub fn drive_with(
    core: &mut EngineCore<CpuBackend>,
    streams: Vec<RequestStream>,
    on_step: &mut dyn FnMut(&headroom_engine::StepReport),
) -> Vec<Outcome> {
    drive_hooked(core, streams, &mut |_, _| {}, on_step)
}

/// Runs before each step with the step's number and the streams.
pub type BeforeStep<'a> = &'a mut dyn FnMut(usize, &mut Vec<RequestStream>);

/// As [`drive_with`], calling `before_step` before each step.
pub fn drive_hooked(
    core: &mut EngineCore<CpuBackend>,
    mut streams: Vec<RequestStream>,
    before_step: BeforeStep<'_>,
    on_step: &mut dyn FnMut(&headroom_engine::StepReport),
) -> Vec<Outcome> {
    let mut by_id: HashMap<u64, Outcome> = HashMap::new();
    let mut steps = 0;
    loop {
        before_step(steps, &mut streams);
        let Some(rep) = core.step().unwrap() else {
            break;
        };
        on_step(&rep);
        for s in rep.sampled {
            let o = by_id.entry(s.id).or_default();
            o.tokens.push(s.token);
            if let Some(l) = s.logits {
                o.logits.push(l);
            }
        }
        steps += 1;
        assert!(steps < 100_000, "the engine never went idle");
    }
    streams
        .iter_mut()
        .map(|st| {
            let mut o = by_id.remove(&st.id).unwrap_or_default();
            collect_events(st, &mut o);
            o
        })
        .collect()
}

/// Moves a stream's ready events into `o`.
pub fn collect_events(st: &mut RequestStream, o: &mut Outcome) {
    while let Some(e) = st.try_next() {
        match e {
            StreamEvent::Logprobs(_) => {}
            StreamEvent::Token(t) => o.streamed.push(t),
            StreamEvent::Finished { reason, usage, .. } => {
                o.reason = Some(reason);
                o.usage = Some(usage);
            }
            StreamEvent::Error(e) => o.error = Some(e),
        }
    }
}

/// A core with logits captured.
pub fn core(model: Qwen35Model<CpuBackend>, cfg: EngineConfig) -> EngineCore<CpuBackend> {
    EngineCore::new(
        model,
        EngineConfig {
            capture_logits: true,
            ..cfg
        },
    )
    .unwrap()
}

/// One request alone in a fresh engine built by `make`.
pub fn alone(
    make: &dyn Fn() -> Qwen35Model<CpuBackend>,
    cfg: &EngineConfig,
    r: GenerateRequest,
) -> Outcome {
    let mut c = core(make(), cfg.clone());
    let s = c.submit(r).unwrap();
    drive(&mut c, vec![s]).remove(0)
}

/// Largest relative difference of two logit rows: max |a - b| / max |b|.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs() as f64)).max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max)
        / scale
}
