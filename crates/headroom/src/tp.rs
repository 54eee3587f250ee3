//! `--tensor-parallel N` (or `HEADROOM_TP`): the model split over N ranks of
//! one process — N CPU threads joined by the in-process communicator, or
//! GPUs 0..N joined by NCCL — as `headroom_model::TpGroup`. Given (any N,
//! 1 included), `logits`, `bench ttft`, `generate` and `serve` run through
//! the group (the last two: the engine on the group, see docs/parallel.md).
//!
//! Each full-attention layer's route is resolved by the policy for the shape
//! a rank runs (its share of the heads), never the unsplit shape: a route
//! qualified for 16/2 heads is not applied to 8/1 unmeasured.

use crate::attention_setup::attention_plan;
use crate::backend_select::WeightsInit;
use crate::describe::routes_that_ran;
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_model::parallel::RankShard;
use headroom_model::weights::write_safetensors;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, ShardPlan, Tensor, TpGroup, TpWeights,
    Weights,
};
use std::path::PathBuf;
use std::time::Instant;

/// The flag, flattened into the commands that take it.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct TpArgs {
    /// Split the model over N ranks: N threads on cpu, GPUs 0..N-1 on cuda
    /// (NCCL). N must divide the attention heads, GDN heads, experts, ...
    #[arg(long = "tensor-parallel", env = "HEADROOM_TP", value_name = "N")]
    pub tensor_parallel: Option<usize>,
}

impl TpArgs {
    /// Whether the group path was asked for.
    pub fn active(&self) -> bool {
        self.tensor_parallel.is_some()
    }

    pub fn world(&self) -> usize {
        self.tensor_parallel.unwrap_or(1)
    }
}

/// `cfg` as one rank runs it: its share of the full-attention heads (what
/// the attention policy must see).
pub fn rank_config(cfg: &ModelConfig, shard: &RankShard) -> ModelConfig {
    let mut c = cfg.clone();
    c.num_attention_heads = shard.attention.heads.len();
    c.num_key_value_heads = shard.attention.kv_heads.len();
    c
}

/// The plan of `cfg` over `world` ranks and the attention routes for a rank's shape.
pub fn plan_and_routes(
    g: &GlobalArgs,
    backend: BackendKind,
    cfg: &ModelConfig,
    world: usize,
) -> anyhow::Result<(ShardPlan, AttentionPlan)> {
    let plan = ShardPlan::new(cfg, world)?;
    let routes = attention_plan(g, backend, &rank_config(cfg, &plan.ranks[0]))?;
    Ok((plan, routes))
}

/// What building the group took.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub backend: BackendKind,
    pub world: usize,
    pub load_seconds: f64,
    /// Backend bytes each rank holds after loading.
    pub weight_bytes: Vec<usize>,
}

/// Work to run on a group, whatever backend it was built on.
pub trait GroupJob {
    type Output;
    fn run<B: Backend + 'static>(
        self,
        group: TpGroup<B>,
        info: &GroupInfo,
    ) -> anyhow::Result<Self::Output>;
}

/// Builds the group of `world` ranks of `source` on `backend` and runs `job`.
pub fn run_on_group<J: GroupJob>(
    backend: BackendKind,
    world: usize,
    source: &ModelSource,
    cfg: &ModelConfig,
    seed: u64,
    init: Option<WeightsInit>,
    job: J,
) -> anyhow::Result<J::Output> {
    ShardPlan::new(cfg, world)?;
    let started = Instant::now();
    // The same default as one model (`backend_select`): host on cpu, device
    // on cuda, so a group draws the weights the unsplit model draws.
    let init = init.unwrap_or(match backend {
        BackendKind::Cpu => WeightsInit::Host,
        BackendKind::Cuda => WeightsInit::Device,
    });
    let host: Option<Weights> = match (&source.synthetic, &source.model, init) {
        (Some(_), None, WeightsInit::Host) => Some(Weights::synthetic(cfg, seed)),
        (Some(_), None, _) => None,
        (None, Some(dir), _) => {
            Some(Weights::load(dir, cfg).with_context(|| format!("weights of {}", dir.display()))?)
        }
        _ => bail!("name a model with --synthetic NAME or --model DIR"),
    };
    let weights = match &host {
        Some(w) => TpWeights::Checkpoint(w),
        None => TpWeights::Synthetic { seed },
    };
    match backend {
        BackendKind::Cpu => {
            let ranks = headroom_cpu::cpu_group(world, headroom_cpu::Precision::default());
            let group = TpGroup::build(ranks.backends, cfg, weights, Some(ranks.abort))
                .context("building the ranks")?;
            drop(host);
            finish(group, backend, started, job)
        }
        BackendKind::Cuda => {
            let visible = headroom_cuda::nccl::visible_devices()
                .map_err(|e| anyhow::anyhow!("the cuda backend is unavailable: {e}"))?;
            ShardPlan::check_devices(world, visible)?;
            let ordinals: Vec<usize> = (0..world).collect();
            let backends = headroom_cuda::backend::open_group(&ordinals)
                .map_err(|e| anyhow::anyhow!("opening {world} GPUs: {e}"))?;
            let group =
                TpGroup::build(backends, cfg, weights, None).context("building the ranks")?;
            drop(host);
            finish(group, backend, started, job)
        }
    }
}

fn finish<B: Backend + 'static, J: GroupJob>(
    group: TpGroup<B>,
    backend: BackendKind,
    started: Instant,
    job: J,
) -> anyhow::Result<J::Output> {
    group.synchronize().context("waiting for the weights")?;
    let info = GroupInfo {
        backend,
        world: group.world(),
        load_seconds: started.elapsed().as_secs_f64(),
        weight_bytes: group.memory().iter().map(|m| m.0).collect(),
    };
    eprintln!(
        "tensor parallel {} on {}: loaded in {:.1} s, weights per rank {}",
        info.world,
        backend,
        info.load_seconds,
        size_list(&info.weight_bytes)
    );
    job.run(group, &info)
}

/// `1.23 GiB, 812.0 MiB`: each size in the unit that shows it
/// ([`crate::describe::size`]), so a small model's ranks do not read 0.00.
pub fn size_list(bytes: &[usize]) -> String {
    bytes
        .iter()
        .map(|&b| crate::describe::size(b as u64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `headroom logits --tensor-parallel N`: every position's logits of `ids`.
pub struct LogitsJob {
    pub ids: Vec<u32>,
    pub attention: AttentionPlan,
    pub chunk: Option<usize>,
    pub out: PathBuf,
}

impl GroupJob for LogitsJob {
    type Output = ();

    fn run<B: Backend + 'static>(self, group: TpGroup<B>, info: &GroupInfo) -> anyhow::Result<()> {
        let opts = ForwardOptions {
            attention: self.attention,
            chunk: self.chunk,
            logits: LogitsRows::All,
        };
        let mut session = group.new_session_with_capacity(self.ids.len())?;
        group.reset_peak_memory();
        let started = Instant::now();
        let out = group
            .prefill(&mut session, &self.ids, &opts)
            .context("forward")?;
        let secs = started.elapsed().as_secs_f64();
        let non_finite = out.logits.iter().filter(|x| !x.is_finite()).count();
        if non_finite > 0 {
            bail!(
                "the forward produced {non_finite} non-finite logits of {}; nothing written to {}",
                out.logits.len(),
                self.out.display()
            );
        }
        let logits = Tensor::from_f32(vec![out.rows, out.vocab], out.logits);
        write_safetensors(&self.out, &[("logits", &logits)])
            .with_context(|| format!("writing {}", self.out.display()))?;
        let peaks: Vec<usize> = group.memory().iter().map(|m| m.1).collect();
        eprintln!(
            "{} tokens in {:.3} s on {} × {}; logits [{}, {}] written to {}; peak per rank {}",
            self.ids.len(),
            secs,
            info.world,
            info.backend,
            out.rows,
            out.vocab,
            self.out.display(),
            size_list(&peaks)
        );
        eprintln!("attention that ran: {}", routes_that_ran(&out.attention));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_config_has_the_rank_heads() {
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        let plan = ShardPlan::new(&cfg, 2).unwrap();
        let c = rank_config(&cfg, &plan.ranks[1]);
        assert_eq!((c.num_attention_heads, c.num_key_value_heads), (8, 1));
        let plan = ShardPlan::new(&cfg, 4).unwrap();
        let c = rank_config(&cfg, &plan.ranks[3]);
        assert_eq!((c.num_attention_heads, c.num_key_value_heads), (4, 1));
    }

    #[test]
    fn world_defaults_to_one_and_active_only_when_given() {
        assert!(!TpArgs::default().active());
        assert_eq!(TpArgs::default().world(), 1);
        let two = TpArgs {
            tensor_parallel: Some(2),
        };
        assert!(two.active() && two.world() == 2);
    }
}
