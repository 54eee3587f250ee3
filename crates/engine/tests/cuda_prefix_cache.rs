//! Prefix caching on the CUDA backend (bf16 MoE fixture): a second request
//! sharing a 2-block prefix with a finished one, and one whose hit ends
//! mid-way through the source's prompt (interval snapshots every 128
//! tokens), report their cached tokens and give the first token and logits
//! of a cold run with caching off (<= 2e-2 relative, the engine's bf16
//! tolerance in `cuda_engine.rs`) — the GDN snapshot copy and the shared KV
//! blocks on the device. Needs a GPU: the binary is run with `--ignored`
//! (build: `cargo test --release -p headroom-engine --test cuda_prefix_cache
//! --no-run`).

mod common;

use common::{fixture_dir, ids, rel_err};
use headroom_cuda::backend::CudaBackend;
use headroom_engine::{
    EngineConfig, EngineCore, GenerateRequest, PrefixCacheSettings, SchedulerSettings, SoloStripe,
    StreamEvent,
};
use headroom_model::{ModelConfig, Qwen35Model, Weights};

const NAME: &str = "moe_d256";

fn model() -> Qwen35Model<CudaBackend> {
    let dir = fixture_dir(NAME);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let w = Weights::load(&dir, &cfg).unwrap();
    Qwen35Model::load(CudaBackend::open(0).unwrap(), &cfg, w).unwrap()
}

fn vocab() -> usize {
    ModelConfig::from_dir(&fixture_dir(NAME))
        .unwrap()
        .vocab_size
}

fn cfg(prefix: PrefixCacheSettings) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 48,
            step_tokens: 160,
            solo_stripe: SoloStripe::Tokens(2048),
            ..SchedulerSettings::default()
        },
        max_running: 4,
        max_context: 1024,
        capture_logits: true,
        prefix_cache: prefix,
        ..EngineConfig::default()
    }
}

/// Tokens, logits and cached tokens of each request, run one after another
/// in one engine.
fn in_turn(
    core: &mut EngineCore<CudaBackend>,
    reqs: &[GenerateRequest],
) -> Vec<(Vec<u32>, Vec<Vec<f32>>, usize)> {
    let mut out = Vec::new();
    for r in reqs {
        let mut st = core.submit(r.clone()).unwrap();
        let (mut tokens, mut logits) = (Vec::new(), Vec::new());
        while let Some(rep) = core.step().unwrap() {
            for s in rep.sampled {
                tokens.push(s.token);
                logits.push(s.logits.unwrap());
            }
        }
        let mut cached = None;
        while let Some(ev) = st.try_next() {
            if let StreamEvent::Finished { usage, .. } = ev {
                cached = Some(usage.cached_tokens);
            }
        }
        out.push((tokens, logits, cached.expect("finished")));
    }
    out
}

fn cold(r: &GenerateRequest) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut c = EngineCore::new(model(), cfg(PrefixCacheSettings::off())).unwrap();
    let (t, l, _) = in_turn(&mut c, std::slice::from_ref(r)).remove(0);
    (t, l)
}

/// Runs `source` then `second` with caching; `second` resumes from
/// `want_cached` tokens and matches its cold run.
fn check(
    what: &str,
    prefix: PrefixCacheSettings,
    source: GenerateRequest,
    second: GenerateRequest,
    want_cached: usize,
) {
    let mut c = EngineCore::new(model(), cfg(prefix)).unwrap();
    let out = in_turn(&mut c, &[source, second.clone()]);
    let (tokens, logits, cached) = &out[1];
    assert_eq!(*cached, want_cached, "{what}: cached tokens");
    let (cold_tokens, cold_logits) = cold(&second);
    assert_eq!(tokens[0], cold_tokens[0], "{what}: first token");
    let mut worst = 0f64;
    for (s, (a, b)) in logits.iter().zip(&cold_logits).enumerate() {
        let e = rel_err(a, b);
        worst = worst.max(e);
        assert!(e <= 2e-2, "{what} step {s}: {e:.2e}");
        if tokens[s] != cold_tokens[s] {
            break;
        }
    }
    println!("{what}: {cached} cached tokens, worst logits rel err {worst:.2e} vs cold");
}

#[test]
#[ignore = "needs a CUDA GPU: run the cuda_prefix_cache binary with --ignored"]
fn cuda_second_request_sharing_two_blocks_matches_a_cold_run() {
    let v = vocab();
    let prefix = ids(128, v, 1);
    let a = GenerateRequest::greedy([&prefix[..], &ids(40, v, 2)].concat(), 4);
    let b = GenerateRequest::greedy([&prefix[..], &ids(30, v, 3)].concat(), 6);
    let on = PrefixCacheSettings {
        interval_tokens: 0,
        ..PrefixCacheSettings::default()
    };
    check("2-block prefix", on, a, b, 128);
}

#[test]
#[ignore = "needs a CUDA GPU: run the cuda_prefix_cache binary with --ignored"]
fn cuda_hit_ending_mid_prompt_matches_a_cold_run() {
    let v = vocab();
    let a = GenerateRequest::greedy(ids(300, v, 4), 4);
    let b = GenerateRequest::greedy([&a.prompt_ids[..200], &ids(60, v, 5)].concat(), 6);
    let on = PrefixCacheSettings {
        interval_tokens: 128,
        ..PrefixCacheSettings::default()
    };
    check("mid-prompt hit", on, a, b, 128);
}
