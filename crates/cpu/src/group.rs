//! The ranks of one in-process tensor-parallel group on the CPU: `world`
//! backends joined by one [`CpuComm`], and the communicator's abort, ready
//! for the model's `TpGroup::build`.

use crate::comm::CpuComm;
use crate::precision::Precision;
use crate::CpuBackend;
use std::sync::Arc;

/// Fails the group's waiting collectives (every rank's error path calls it).
pub type GroupAbort = Arc<dyn Fn() + Send + Sync>;

/// `world` CPU backends (none for a world of 0), rank `r` at index `r`, and their group's abort.
pub struct CpuGroup {
    pub backends: Vec<CpuBackend>,
    pub abort: GroupAbort,
}

/// A group of `world` ranks computing in `precision` (with a bf16
/// emulation: the CUDA group's numerics, f32 partials summed then rounded once).
pub fn cpu_group(world: usize, precision: Precision) -> CpuGroup {
    let comm = CpuComm::new(world);
    let backends = comm
        .ranks()
        .into_iter()
        .take(world)
        .map(|r| CpuBackend::in_group_with_precision(r, precision))
        .collect();
    CpuGroup {
        backends,
        abort: Arc::new(move || comm.abort()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::ops::Backend;

    #[test]
    fn every_rank_is_in_the_group_and_abort_fails_its_collectives() {
        let g = cpu_group(3, Precision::default());
        assert_eq!(g.backends.len(), 3);
        assert!(g.backends.iter().all(|b| b.world_size() == 3));
        (g.abort)();
        let mut x = crate::CpuAct::new(1, 2, vec![1.0, 2.0]);
        assert!(g.backends[0].all_reduce_sum(&mut x).is_err());
    }
}
