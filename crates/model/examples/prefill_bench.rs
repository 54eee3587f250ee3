//! Prefill throughput of the CPU forward on a synthetic model.
//!
//! ```text
//! cargo run -p headroom-model --release --example prefill_bench -- \
//!     [--model qwen3.6-35b-a3b:layers=4] [--tokens 2048] [--chunk N] \
//!     [--route composed:128|fused] [--iters 1] [--seed 7] [--decode N]
//! ```
//!
//! Builds the synthetic weights (seeded, storage dtype of the preset), runs
//! `iters` prefills of `tokens` deterministic token ids from an empty
//! session (LM head on the last row only, as for time-to-first-token), and
//! prints the wall time and tokens/s of each, and the attention routes that
//! ran; with `--decode N`, then decodes N tokens greedily after the last
//! prefill and prints decode tokens/s.

use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, Qwen35Model, Weights,
};
use std::time::Instant;

struct Args {
    model: String,
    tokens: usize,
    chunk: Option<usize>,
    route: RouteRequest,
    iters: usize,
    seed: u64,
    decode: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        model: "qwen3.6-35b-a3b:layers=4".into(),
        tokens: 2048,
        chunk: None,
        route: RouteRequest::Composed { query_block: 128 },
        iters: 1,
        seed: 7,
        decode: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--model" => a.model = value()?,
            "--tokens" => a.tokens = num(value()?)?,
            "--chunk" => a.chunk = Some(num(value()?)?),
            "--route" => a.route = value()?.parse()?,
            "--iters" => a.iters = num(value()?)?,
            "--seed" => a.seed = num(value()?)? as u64,
            "--decode" => a.decode = num(value()?)?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    // RUST_LOG=headroom_model=debug prints each layer's mixer / MLP time.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cfg = ModelConfig::synthetic(&args.model)?;
    let t0 = Instant::now();
    let weights = Weights::synthetic(&cfg, args.seed);
    println!(
        "model {} ({} layers, {}), weights {:.2} GiB built in {:.1} s, {} rayon threads",
        args.model,
        cfg.num_hidden_layers,
        cfg.dtype,
        weights.storage_bytes() as f64 / (1u64 << 30) as f64,
        t0.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, weights.clone())?;
    let ids: Vec<u32> = (0..args.tokens as u64)
        .map(|i| ((i * 2_654_435_761 + 12_345) % cfg.vocab_size as u64) as u32)
        .collect();
    let opts = ForwardOptions {
        attention: AttentionPlan::Uniform(args.route),
        chunk: args.chunk,
        logits: LogitsRows::Last,
    };
    let mut session = model.new_session().unwrap();
    let mut last = Vec::new();
    for iter in 0..args.iters {
        session = model.new_session().unwrap();
        let t = Instant::now();
        let out = model.prefill(&mut session, &ids, &opts)?;
        let secs = t.elapsed().as_secs_f64();
        let finite = out.logits.iter().all(|v| v.is_finite());
        let ran: Vec<String> = out
            .attention
            .iter()
            .map(|r| {
                format!(
                    "layer {} {} qL {:?}",
                    r.layer, r.report.route, r.report.query_block
                )
            })
            .collect();
        println!(
            "iter {iter}: prefill {} tokens, chunk {:?}, route {}: {:.2} s, {:.1} tokens/s (logits finite: {finite}; ran: {})",
            args.tokens,
            args.chunk,
            args.route,
            secs,
            args.tokens as f64 / secs,
            ran.join(", ")
        );
        last = out.logits;
    }
    if args.decode > 0 && !last.is_empty() {
        let t = Instant::now();
        for _ in 0..args.decode {
            let next = argmax(&last);
            last = model.decode(&mut session, next, args.route)?;
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "decode {} tokens after {}: {:.2} s, {:.2} tokens/s",
            args.decode,
            args.tokens,
            secs,
            args.decode as f64 / secs
        );
    }
    Ok(())
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}
