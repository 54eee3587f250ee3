//! The memory model's step transient (`MemoryModel::step_transient`: the
//! activations a row as the engine measures them at start-up
//! (`headroom_engine::calibrate`), the sampled rows' logits, the attention
//! workspace, the fixed bytes) against what a CUDA step really holds at its peak above
//! what was live before it (`Backend::memory`, the allocator's live bytes),
//! for the presets the engine plans on GPUs (a few layers of each, which
//! hold the same bytes a row as the whole model), on both attention routes:
//! a lone prompt of 512 to 16,384 rows, 256 decode rows of 256 sequences,
//! and a mixed step of eight 1,024-token prompts with 248 decode rows. The
//! prediction must bound every step (the pools are sized from it: a step it
//! under-counts can fail with the device out of memory) and stay within
//! 1.5× the measured bytes plus 64 MiB on the fused route (2× on the
//! composed one, whose gathered K/V and the step's activations peak at
//! different times; the sum counts both), since what it over-counts is
//! memory the pools and the solo stripe never get. Needs a GPU: run by
//! bench/gpu/check_all.sh (`cuda_memory`).

use headroom_core::ops::{Backend, Batch};
use headroom_core::RouteRequest;
use headroom_cuda::backend::CudaBackend;
use headroom_engine::calibrate::calibrate;
use headroom_engine::memory::memory_model;
use headroom_model::{AttentionPlan, LogitsRows, ModelConfig, Qwen35Model};

/// A step's shape: its name, each sequence's `(rows, history)`, and the
/// most keys one of them attends to.
type Shape = (String, Vec<(usize, usize)>, usize);

/// One measured step.
struct Case {
    preset: &'static str,
    route: &'static str,
    shape: String,
    rows: usize,
    sampled: usize,
    measured: u64,
    predicted: u64,
}

/// Bytes above the live bytes before the step that the step held at its
/// peak (its logits included), on the second of two runs (the first one's
/// first-use allocations, e.g. a library's workspace, are not the step's).
fn measure(
    model: &Qwen35Model<CudaBackend>,
    seqs: &[(usize, usize)],
    capacity: usize,
    routes: &[Option<RouteRequest>],
) -> u64 {
    let be = model.backend();
    let vocab = model.config().vocab_size as u32;
    let batch = Batch::packed(
        &seqs
            .iter()
            .enumerate()
            .map(|(i, &(len, history))| (i, history, len))
            .collect::<Vec<_>>(),
    );
    let ids: Vec<u32> = (0..batch.rows() as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % vocab)
        .collect();
    let mut held = 0;
    for _ in 0..2 {
        let mut state = model.new_state(seqs.len(), capacity).unwrap();
        fill_histories(model, &mut state, seqs, routes);
        be.synchronize().unwrap();
        let (before, _) = be.memory();
        be.reset_peak_memory();
        let out = model
            .step(&mut state, &ids, &batch, routes, LogitsRows::Last)
            .unwrap();
        be.synchronize().unwrap();
        let (_, peak) = be.memory();
        drop((out, state));
        held = (peak - before) as u64;
    }
    held
}

/// Prefills the histories of `seqs` (`(rows, history)`) into `state`, 16
/// sequences a step, no logits.
fn fill_histories(
    model: &Qwen35Model<CudaBackend>,
    state: &mut headroom_model::ModelState<CudaBackend>,
    seqs: &[(usize, usize)],
    routes: &[Option<RouteRequest>],
) {
    let with: Vec<(usize, usize, usize)> = seqs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(i, s)| (i, 0, s.1))
        .collect();
    for group in with.chunks(16) {
        let batch = Batch::packed(group);
        let ids = vec![1u32; batch.rows()];
        model
            .step(state, &ids, &batch, routes, LogitsRows::None)
            .unwrap();
    }
}

fn cases_of(preset: &'static str, out: &mut Vec<Case>) {
    let cfg = ModelConfig::synthetic(preset).unwrap();
    let model = Qwen35Model::synthetic(CudaBackend::open(0).unwrap(), &cfg, 3).unwrap();
    for (route_name, route) in [
        ("fused", RouteRequest::Fused),
        (
            "composed qL=128",
            RouteRequest::Composed { query_block: 128 },
        ),
    ] {
        let routes = model.routes(&AttentionPlan::Uniform(route)).unwrap();
        let mut memory = memory_model(&model, &routes);
        let c = calibrate(&model, &routes, &memory, 1 << 18).unwrap();
        println!("{preset} {route_name}: {c}");
        memory.activation_bytes_per_row = c.applied_bytes_per_row;
        let mut shapes: Vec<Shape> = [512, 4096, 16384]
            .into_iter()
            .map(|n| (format!("one prompt of {n}"), vec![(n, 0)], n))
            .collect();
        shapes.push(("256 decode rows".into(), vec![(1, 1000); 256], 1001));
        let mut mixed = vec![(1024, 0); 8];
        mixed.extend(std::iter::repeat_n((1, 1000), 248));
        shapes.push(("8 prompts of 1,024 + 248 decode rows".into(), mixed, 1024));
        for (shape, seqs, kv_len) in shapes {
            let rows: usize = seqs.iter().map(|s| s.0).sum();
            let sampled = seqs.len();
            let capacity = seqs.iter().map(|s| s.0 + s.1).max().unwrap_or(1);
            let measured = measure(&model, &seqs, capacity, &routes);
            let predicted = memory.step_transient(rows, sampled, sampled, kv_len);
            out.push(Case {
                preset,
                route: route_name,
                shape,
                rows,
                sampled,
                measured,
                predicted,
            });
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: bench/gpu/check_all.sh"]
fn the_step_transient_bounds_what_a_cuda_step_holds() {
    let mut cases = Vec::new();
    for preset in [
        "qwen3.6-35b-a3b:layers=4",
        "qwen3.6-35b-a3b-fp8:layers=4",
        "qwen3.5-122b-a10b:layers=4",
    ] {
        cases_of(preset, &mut cases);
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut bad = Vec::new();
    for c in &cases {
        let per_row = c.measured as f64 / c.rows as f64;
        println!(
            "{:<30} {:<16} {:<38} rows {:>6} sampled {:>3}: measured {:>9.1} MiB ({per_row:>8.0} B a row), \
             predicted {:>9.1} MiB (x{:.2})",
            c.preset,
            c.route,
            c.shape,
            c.rows,
            c.sampled,
            mib(c.measured),
            mib(c.predicted),
            c.predicted as f64 / c.measured.max(1) as f64
        );
        // The gathered route's K/V workspace and the step's activations
        // peak at different times, which the sum counts together.
        let factor = if c.route == "fused" { 1.5 } else { 2.0 };
        let loose = c.predicted as f64 > factor * c.measured as f64 + (64u64 << 20) as f64;
        if c.predicted < c.measured || loose {
            bad.push(format!("{} {} {}", c.preset, c.route, c.shape));
        }
    }
    assert!(
        bad.is_empty(),
        "the prediction under-counts or over-counts (past 1.5x fused, 2x composed, + 64 MiB): {bad:?}"
    );
}
