//! Decode steps recorded as CUDA graphs (`--cuda-graphs`,
//! `crates/cuda/src/graph.rs`): a recorded step launches the same kernels
//! with the same arguments as a step queued launch by launch, so the
//! logits of every sampled row are the same to the bit with the graphs on
//! and off — on the MoE fixture (near-tied routers: any difference shows)
//! and the next fixture, with prompts that finish prefill at different
//! steps (the decode batch grows and shrinks: several keys, updates and
//! new graphs) — and with the step overlap on too (its embedding reads the
//! drawn tokens: another key). A lone request's decode is one graph
//! updated step after step (after its first decode step, queued as it is
//! to see that it waits for nothing); lone decodes on the two fixtures and
//! the 35B preset on the composed route, the 35B preset and the FP8 preset
//! on the fused one, also with graph updates off and without programmatic
//! dependent launch
//! (on the H200, session 24, the composed ones differed from the first
//! update on; since session 25 a capture whose cuBLAS kernels differ is
//! not updated into another's graph, and session 26 measured them all the
//! same to the bit: `docs/perf/cuda-graphs.md`). Needs a
//! GPU: the binary is run with
//! `--ignored` by `bench/gpu/check_engine.sh` (build: `cargo test
//! --release -p headroom-engine --test cuda_graphs --no-run`).

mod common;

use common::{cuda_fixture as model, fixture_vocab as vocab, ids};
use headroom_core::RouteRequest;
use headroom_cuda::backend::CudaBackend;
use headroom_cuda::graph::GraphStats;
use headroom_engine::{CudaGraphs, EngineConfig, EngineCore, GenerateRequest, StepOverlap};
use headroom_model::{AttentionPlan, ModelConfig, Qwen35Model};

/// Each request's tokens and the logits behind them (none with the
/// overlap on: captured logits turn it off), and what the graphs did.
type Run = (Vec<(Vec<u32>, Vec<Vec<f32>>)>, GraphStats);

fn run(name: &str, graphs: CudaGraphs, overlap: StepOverlap, reqs: &[GenerateRequest]) -> Run {
    let attention = common::mixed_config().attention;
    run_model(model(name), &attention, graphs, overlap, reqs)
}

fn run_model(
    model: Qwen35Model<CudaBackend>,
    attention: &AttentionPlan,
    graphs: CudaGraphs,
    overlap: StepOverlap,
    reqs: &[GenerateRequest],
) -> Run {
    let cfg = EngineConfig {
        capture_logits: overlap == StepOverlap::Off,
        step_overlap: overlap,
        cuda_graphs: graphs,
        attention: attention.clone(),
        ..common::mixed_config()
    };
    let mut core = EngineCore::new(model, cfg).unwrap();
    assert_eq!(
        core.cuda_graphs().on,
        graphs == CudaGraphs::On,
        "{}",
        core.cuda_graphs()
    );
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| core.submit(r.clone()).unwrap())
        .collect();
    let mut out = vec![(Vec::new(), Vec::new()); reqs.len()];
    while let Some(rep) = core.step().unwrap() {
        for s in rep.sampled {
            let i = streams.iter().position(|st| st.id == s.id).unwrap();
            out[i].0.push(s.token);
            if let Some(l) = s.logits {
                out[i].1.push(l);
            }
        }
    }
    let st = core.stats();
    assert_eq!((st.running, st.kv_blocks_used), (0, 0));
    (out, core.model().backend().graph_stats())
}

fn requests(name: &str) -> Vec<GenerateRequest> {
    common::mixed_requests(vocab(name), 5, 60)
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_graph_steps_give_the_same_logits_to_the_bit() {
    for name in ["moe_d256", "next_d128"] {
        let reqs = requests(name);
        let (plain, none) = run(name, CudaGraphs::Off, StepOverlap::Off, &reqs);
        let (graphed, st) = run(name, CudaGraphs::On, StepOverlap::Off, &reqs);
        println!("{name}: {st:?}");
        assert_eq!(
            none,
            GraphStats::default(),
            "{name}: nothing recorded when off"
        );
        for (k, ((ta, la), (tb, lb))) in plain.iter().zip(&graphed).enumerate() {
            assert_eq!(ta.len(), reqs[k].max_tokens);
            assert_eq!(ta, tb, "{name} request {k}: tokens with graphs");
            assert_eq!(bits(la), bits(lb), "{name} request {k}: logits with graphs");
        }
        // Most steps mix prefill chunks with decode rows (queued as they
        // are); the decode-only ones are recorded (H200, session 23: 18),
        // some as updates of a kept graph — or, where cuBLAS picked other
        // kernels, as graphs of their own (`kernels_changed`, session 25).
        assert!(
            st.launched > 10 && st.updated + st.kernels_changed > 0,
            "{name}: {st:?}"
        );
        assert_eq!((st.eager, st.refused_keys), (0, 0), "{name}: {st:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_graph_steps_with_the_overlap_give_the_same_tokens() {
    let name = "moe_d256";
    let reqs = requests(name);
    let (plain, _) = run(name, CudaGraphs::Off, StepOverlap::Off, &reqs);
    let (both, st) = run(name, CudaGraphs::On, StepOverlap::On, &reqs);
    println!("{name} with the overlap: {st:?}");
    for (k, (a, b)) in plain.iter().zip(&both).enumerate() {
        assert_eq!(a.0, b.0, "request {k}: tokens with graphs and the overlap");
    }
    assert!(
        st.launched > 10 && st.updated + st.kernels_changed > 0,
        "{st:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh (and under compute-sanitizer)"]
fn cuda_a_lone_decode_updates_one_graph_step_after_step() {
    let name = "next_d128";
    let attention = common::mixed_config().attention;
    let (differ, st) = lone_decode(|| model(name), &attention, vocab(name), 48);
    println!("lone decode: {st:?}; steps differing: {differ:?}");
    assert!(differ.is_empty(), "steps whose logits differ: {differ:?}");
    assert_eq!(st.probed, 1, "the first decode step as it is: {st:?}");
    assert_eq!(st.launched, 46, "every later decode step: {st:?}");
    // The composed route's cuBLAS calls change their plan bucket as the
    // keys grow (70 → 118: every 16 keys), a new shape each time (H200,
    // session 23: 4 graphs); inside a bucket cuBLAS may pick other kernels
    // as the keys grow, each pick a graph of its own (`kernels_changed`,
    // session 25); every other step updates its graph.
    assert!(st.instantiated - st.kernels_changed <= 5, "{st:?}");
    assert_eq!(st.updated + st.instantiated, 46, "{st:?}");
}

/// The decode steps (indices into `a`) whose logits differ to the bit.
fn differing_steps(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    let bits = |row: &[f32]| row.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (0..a.len())
        .filter(|&i| bits(&a[i]) != bits(&b[i]))
        .collect()
}

/// A lone greedy decode of `model()` on `attention` with graphs off and
/// on: the steps whose logits differ, and what the graphs did.
fn lone_decode(
    model: impl Fn() -> Qwen35Model<CudaBackend>,
    attention: &AttentionPlan,
    vocab: usize,
    steps: usize,
) -> (Vec<usize>, GraphStats) {
    let mut r = GenerateRequest::greedy(ids(70, vocab, 11), steps);
    r.ignore_eos = true;
    let (plain, _) = run_model(
        model(),
        attention,
        CudaGraphs::Off,
        StepOverlap::Off,
        std::slice::from_ref(&r),
    );
    let (graphed, st) = run_model(
        model(),
        attention,
        CudaGraphs::On,
        StepOverlap::Off,
        std::slice::from_ref(&r),
    );
    (differing_steps(&plain[0].1, &graphed[0].1), st)
}

/// A model of the lone-decode tests.
struct LoneModel {
    name: String,
    build: Box<dyn Fn() -> Qwen35Model<CudaBackend>>,
    attention: AttentionPlan,
    vocab: usize,
    /// Tokens to decode.
    steps: usize,
}

/// The models of the lone-decode tests, each built fresh and then set up
/// by `prepare`: the two fixtures (48 steps) and the 35B preset (24) on
/// the composed route (the engine's default plan: the classic cuBLAS
/// handle's batched GEMMs, whose kernels follow the key count), and the
/// 35B preset and its FP8 twin on the fused route (what `serve` and
/// `bench` run on the H200: `--attn-execution auto`).
fn lone_decode_models(prepare: impl Fn(&Qwen35Model<CudaBackend>) + 'static) -> Vec<LoneModel> {
    let prepare = std::rc::Rc::new(prepare);
    let composed = common::mixed_config().attention;
    let mut out: Vec<LoneModel> = Vec::new();
    for name in ["moe_d256", "next_d128"] {
        let p = std::rc::Rc::clone(&prepare);
        let build = move || {
            let m = model(name);
            p(&m);
            m
        };
        out.push(LoneModel {
            name: name.to_string(),
            build: Box::new(build),
            attention: composed.clone(),
            vocab: vocab(name),
            steps: 48,
        });
    }
    // The 35B preset on both routes; the FP8 preset's decode kernels (FP8
    // GEMVs, the tensor-core MoE experts) on the fused one, as `serve` runs it.
    let fused = AttentionPlan::Uniform(RouteRequest::Fused);
    for (name, preset, plan) in [
        ("35B preset, composed", "qwen3.6-35b-a3b", composed),
        ("35B preset, fused", "qwen3.6-35b-a3b", fused.clone()),
        ("35B FP8 preset, fused", "qwen3.6-35b-a3b-fp8", fused),
    ] {
        let cfg = ModelConfig::synthetic(preset).unwrap();
        let p = std::rc::Rc::clone(&prepare);
        out.push(LoneModel {
            name: name.to_string(),
            vocab: cfg.vocab_size,
            build: Box::new(move || {
                let m = Qwen35Model::synthetic(CudaBackend::open(0).unwrap(), &cfg, 7).unwrap();
                p(&m);
                m
            }),
            attention: plan,
            steps: 24,
        });
    }
    out
}

/// Each lone-decode model (see [`lone_decode_models`]) with graphs off and
/// on gives the same logits to the bit; `what` names the setup in the output.
fn lone_decodes_agree(what: &str, prepare: impl Fn(&Qwen35Model<CudaBackend>) + 'static) {
    let mut failures = Vec::new();
    for m in lone_decode_models(prepare) {
        let (name, steps) = (&m.name, m.steps);
        let (differ, st) = lone_decode(&m.build, &m.attention, m.vocab, steps);
        println!("{name} lone decode{what}: {st:?}; steps differing: {differ:?}");
        assert!(st.launched as usize >= steps - 4, "{name}: {st:?}");
        if !differ.is_empty() {
            failures.push(format!("{name}: steps {differ:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "logits differ with graphs: {failures:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU (the 35B preset: ~70 GB): run by bench/gpu/check_engine.sh"]
fn cuda_lone_decodes_give_the_same_logits_with_graphs() {
    lone_decodes_agree("", |_| {});
}

#[test]
#[ignore = "needs a CUDA GPU (the 35B preset: ~70 GB): run by bench/gpu/check_engine.sh"]
fn cuda_lone_decodes_whose_graphs_are_never_updated_give_the_same_logits() {
    lone_decodes_agree(", no updates", |m| m.backend().set_graph_updates(false));
}

#[test]
#[ignore = "needs a CUDA GPU (the 35B preset: ~70 GB): run by bench/gpu/check_engine.sh"]
fn cuda_lone_decodes_without_programmatic_launch_give_the_same_logits() {
    // Both runs without programmatic dependent launch: a kernel that read
    // its inputs before its wait would race only with it.
    lone_decodes_agree(", no PDL", |m| {
        m.backend().device().set_programmatic_launch(false)
    });
}
