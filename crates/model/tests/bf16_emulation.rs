//! The CUDA backend's bf16 storage emulated on the CPU backend
//! (`headroom_cpu::Precision`): on the transformers fixtures, the logits of
//! the emulation against the CPU backend in f32 on the same bf16-rounded
//! matrices — the baseline of issue 8's CUDA bar (relative Frobenius error
//! ≤ 2e-2, prompts of 40 and 300 tokens, one pass and chunks of 64 and 37,
//! token-by-token decode). The CI test holds the emulation of what the CUDA
//! backend stores now ([`CUDA_STORAGE`]) to that bar, except on the
//! (fixture, prompt) pairs listed in [`ILL_CONDITIONED`], held to a looser
//! ceiling: there a 2^-9 perturbation anywhere flips near-tied top-k routing
//! decisions and moves the logits by more than the bar (shown by
//! `moe_fixtures_are_ill_conditioned`). The ignored `study` prints the error
//! of every rounding site on and off
//! (`cargo test --release -p headroom-model --test bf16_emulation -- --ignored --nocapture`;
//! results in docs/perf/cuda-model.md).

mod common;

use common::{fixture, read_ids, rel_err};
use headroom_core::{RouteRequest, Tensor, TensorData};
use headroom_cpu::{ActRounding, CpuBackend, Precision};
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, Qwen35Model, Weights,
};

/// Issue 8's bar.
const BAR: f64 = 2e-2;

/// The activation sites the CUDA backend rounds to bf16 today
/// (`crates/cuda/src/backend`: the residual stream is f32, every op output bf16).
const CUDA_STORAGE: ActRounding = ActRounding::ALL.without(ActRounding::RESIDUAL);

const FIXTURES: [&str; 4] = ["dense_d64", "moe_d64", "moe_d256", "next_d128"];

/// (fixture, prompt length) pairs whose emulated error exceeds the bar with
/// the f32 residual stream (2.4e-2, 5.3e-2, 5.9e-2, 7.7e-2): MoE routing
/// near-ties. moe_d64 at 40 tokens is a lottery: 1.0e-2 without the bf16
/// attention probabilities, 2.4e-2 with them, 1.7e-2 with a bf16 residual.
const ILL_CONDITIONED: [(&str, usize); 4] = [
    ("moe_d64", 40),
    ("moe_d64", 300),
    ("moe_d256", 40),
    ("moe_d256", 300),
];

/// The ceiling of the [`ILL_CONDITIONED`] pairs.
const CEILING: f64 = 1e-1;

/// Logits of `ids` with prefill chunks of `chunk` (`Some(1)`: decode one token at a time).
fn logits(
    cfg: &ModelConfig,
    w: &Weights,
    precision: Precision,
    ids: &[u32],
    chunk: Option<usize>,
) -> Vec<f32> {
    let model = Qwen35Model::load(CpuBackend::with_precision(precision), cfg, w.clone()).unwrap();
    let opts = ForwardOptions {
        attention: AttentionPlan::Uniform(RouteRequest::Composed { query_block: 16 }),
        chunk,
        logits: LogitsRows::All,
    };
    let out = model
        .prefill(&mut model.new_session().unwrap(), ids, &opts)
        .unwrap();
    assert_eq!(out.rows, ids.len());
    out.logits
}

/// Every f32 tensor rounded to bf16, vectors included (what
/// `bench/gpu/round_bf16.py` did before: more than the CUDA backend rounds).
fn all_rounded(w: &Weights) -> Weights {
    Weights::from_tensors(w.iter().map(|(name, t)| {
        let data = t
            .to_f32_vec()
            .into_iter()
            .map(half::bf16::from_f32)
            .collect();
        (
            name.to_string(),
            Tensor::new(t.shape.clone(), TensorData::Bf16(data)),
        )
    }))
}

#[test]
fn emulated_cuda_bf16_is_within_the_bar_of_f32_on_bf16_weights() {
    let mut worst = (0.0f64, String::new());
    for name in FIXTURES {
        let (cfg, w, dir) = fixture(name);
        for n in [40usize, 300] {
            let ids = read_ids(&dir, n);
            let want = logits(&cfg, &w, Precision::BF16_WEIGHTS, &ids, None);
            let limit = if ILL_CONDITIONED.contains(&(name, n)) {
                CEILING
            } else {
                BAR
            };
            for chunk in [None, Some(64), Some(37), Some(1)] {
                let got = logits(&cfg, &w, Precision::bf16(CUDA_STORAGE), &ids, chunk);
                let err = rel_err(&got, &want);
                println!("{name} n={n} chunk={chunk:?}: {err:.3e} (limit {limit:e})");
                assert!(got.iter().all(|v| v.is_finite()));
                // The emulation must round something: equal logits would mean no site ran.
                assert!(err > 1e-5, "{name} n={n}: {err:.3e} (no rounding?)");
                assert!(err <= limit, "{name} n={n} chunk={chunk:?}: {err:.3e}");
                if limit == BAR && err > worst.0 {
                    worst = (err, format!("{name} n={n} chunk={chunk:?}"));
                }
            }
        }
    }
    println!("worst within the bar: {:.3e} ({})", worst.0, worst.1);
}

/// Why [`ILL_CONDITIONED`] exists: with f32 activations, rounding only the
/// vectors (norm weights, `A_log`, `dt_bias`, the conv weight: about 1 % of
/// the parameters, by at most 2^-9 relative) already moves the MoE
/// fixtures' logits at 300 tokens by more than the bar, while the dense
/// fixture stays well inside it.
#[test]
fn moe_fixtures_are_ill_conditioned() {
    for (name, more_than_bar) in [("moe_d64", true), ("moe_d256", true), ("dense_d64", false)] {
        let (cfg, w, dir) = fixture(name);
        let ids = read_ids(&dir, 300);
        let want = logits(&cfg, &w, Precision::BF16_WEIGHTS, &ids, None);
        let got = logits(&cfg, &all_rounded(&w), Precision::F32, &ids, None);
        let err = rel_err(&got, &want);
        println!("{name}: vectors rounded, f32 activations: {err:.3e}");
        assert_eq!(err > BAR, more_than_bar, "{name}: {err:.3e}");
    }
}

#[test]
fn bf16_matrices_round_the_weights_and_nothing_else() {
    let (cfg, w, dir) = fixture("dense_d64");
    let ids = read_ids(&dir, 40);
    let f32_run = logits(&cfg, &w, Precision::F32, &ids, None);
    let bf16w = logits(&cfg, &w, Precision::BF16_WEIGHTS, &ids, None);
    // The matrices rounded on the host give the same logits as rounded on upload.
    let matrices_rounded = Weights::from_tensors(w.iter().map(|(name, t)| {
        let t = if t.shape.len() >= 2 && !name.ends_with("conv1d.weight") {
            let data = t
                .to_f32_vec()
                .into_iter()
                .map(half::bf16::from_f32)
                .collect();
            Tensor::new(t.shape.clone(), TensorData::Bf16(data))
        } else {
            t.clone()
        };
        (name.to_string(), t)
    }));
    let host = logits(&cfg, &matrices_rounded, Precision::F32, &ids, None);
    assert_eq!(bf16w, host);
    assert!(rel_err(&bf16w, &f32_run) > 1e-4);
}

/// What a study arm is compared with.
#[derive(Clone, Copy, PartialEq)]
enum Baseline {
    /// f32 on bf16-rounded matrices (the bar's baseline).
    Bf16Matrices,
    /// f32 on every tensor rounded (the old GPU script's baseline).
    AllRounded,
    /// The fixture's transformers f32 logits.
    Transformers,
}

/// One configuration of the study.
struct Arm {
    name: String,
    precision: Precision,
    /// Run on every tensor rounded (vectors too) instead of the fixture's weights.
    all_rounded_weights: bool,
    baseline: Baseline,
}

impl Arm {
    fn new(name: impl Into<String>, precision: Precision) -> Arm {
        Arm {
            name: name.into(),
            precision,
            all_rounded_weights: false,
            baseline: Baseline::Bf16Matrices,
        }
    }
}

#[test]
#[ignore = "a study (prints tables): run with --ignored --nocapture"]
fn study() {
    let before = Precision::bf16(ActRounding::ALL);
    let now = Precision::bf16(CUDA_STORAGE);
    let mut arms = vec![
        Arm::new("cuda-before (all sites)", before),
        Arm {
            baseline: Baseline::AllRounded,
            ..Arm::new("cuda-before vs all-rounded w", before)
        },
        Arm {
            baseline: Baseline::Transformers,
            ..Arm::new("cuda-before vs transformers", before)
        },
        Arm {
            all_rounded_weights: true,
            ..Arm::new("f32 on all-rounded w", Precision::F32)
        },
        Arm::new("cuda-now (f32 residual)", now),
        Arm {
            baseline: Baseline::Transformers,
            ..Arm::new("cuda-now vs transformers", now)
        },
        Arm::new(
            "now + router on f32 rows",
            Precision::bf16(CUDA_STORAGE.without(ActRounding::ROUTER_INPUT)),
        ),
    ];
    for (site, s) in ActRounding::SITES {
        arms.push(Arm::new(format!("only {site}"), Precision::bf16(s)));
        arms.push(Arm::new(
            format!("all but {site}"),
            Precision::bf16(ActRounding::ALL.without(s)),
        ));
        arms.push(Arm::new(
            format!("f32 residual, {site} f32"),
            Precision::bf16(CUDA_STORAGE.without(s)),
        ));
    }
    for name in FIXTURES {
        let (cfg, w, dir) = fixture(name);
        let w_all = all_rounded(&w);
        for n in [40usize, 300] {
            let ids = read_ids(&dir, n);
            let bf16w = logits(&cfg, &w, Precision::BF16_WEIGHTS, &ids, None);
            let all_w = logits(&cfg, &w_all, Precision::F32, &ids, None);
            let tf =
                common::read_f32_tensor(&dir.join(format!("logits_{n}.safetensors")), "logits").1;
            for arm in &arms {
                let weights = if arm.all_rounded_weights { &w_all } else { &w };
                let base = match arm.baseline {
                    Baseline::Bf16Matrices => &bf16w,
                    Baseline::AllRounded => &all_w,
                    Baseline::Transformers => &tf,
                };
                let errs: Vec<String> = [None, Some(64), Some(37), Some(1)]
                    .into_iter()
                    .map(|c| {
                        let got = logits(&cfg, weights, arm.precision, &ids, c);
                        format!("{:.2e}", rel_err(&got, base))
                    })
                    .collect();
                println!("{name} n={n} {:<32} {}", arm.name, errs.join(" "));
            }
        }
    }
}
