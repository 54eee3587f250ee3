//! The CUDA graphs setting ([`CudaGraphs`], `--cuda-graphs`) and what it
//! resolves to on an engine ([`GraphsResolution`]). With it on, each decode
//! step (one row a sequence) is captured as a graph and launched as one
//! unit (`Backend::queue_step`; the CUDA backend's `graph` module): the
//! same kernels with the same arguments, so the same bits, but one driver
//! submission instead of ≈ 300. Prefill steps run as they are.

use crate::switch::{AutoSwitch, Resolution};

/// Whether decode steps are recorded and launched as CUDA graphs. `auto`:
/// on where the step overlap is on (the CUDA backend's default), a lone
/// rank's decode. Measured on the H200 (`docs/perf/cuda-graphs.md`,
/// session 26): the same logits to the bit as the eager step on every
/// model and route tested, batch-1 decode +5 % after 2k and +4 % after
/// 32k, serving +4.6 % at 16 running and +1.1 % at 256. Without the
/// overlap the device would wait for each step's capture, so `auto` stays
/// off there.
pub type CudaGraphs = AutoSwitch;

/// What the setting resolved to on an engine, with why.
pub type GraphsResolution = Resolution;

/// `requested` on an engine of `world` ranks whose backend can record
/// steps or says why not (`Backend::step_recording`), with the step
/// overlap on or off.
pub fn resolve(
    requested: CudaGraphs,
    world: usize,
    backend: Result<(), String>,
    overlap_on: bool,
) -> GraphsResolution {
    let (on, why) = match (requested, backend) {
        (AutoSwitch::Off, _) => (false, "off as asked".to_string()),
        (_, Err(why)) => (false, why),
        _ if world > 1 => (
            false,
            "a tensor-parallel group's steps hold NCCL calls, which are not recorded".into(),
        ),
        (AutoSwitch::Auto, Ok(())) if !overlap_on => (
            false,
            "without the step overlap the device would wait for each step's capture".into(),
        ),
        (AutoSwitch::Auto, Ok(())) => (
            true,
            "measured to pay and to give the eager bits on the H200 \
             (docs/perf/cuda-graphs.md, session 26)"
                .into(),
        ),
        (AutoSwitch::On, Ok(())) if !overlap_on => (
            true,
            "on as asked; without the step overlap the device waits for each step's capture".into(),
        ),
        (AutoSwitch::On, Ok(())) => (true, "on as asked".into()),
    };
    Resolution {
        setting: "CUDA graphs",
        requested,
        on,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_and_on_turn_them_on_only_where_the_backend_records() {
        let r = |req, world, be: Result<(), &str>, overlap| {
            resolve(req, world, be.map_err(String::from), overlap)
        };
        assert!(r(CudaGraphs::On, 1, Ok(()), true).on);
        assert_eq!(r(CudaGraphs::On, 1, Ok(()), true).why, "on as asked");
        let serial = r(CudaGraphs::On, 1, Ok(()), false);
        assert!(
            serial.on && serial.why.contains("without the step overlap"),
            "{serial}"
        );
        assert!(!r(CudaGraphs::Off, 1, Ok(()), true).on);
        let auto = r(CudaGraphs::Auto, 1, Ok(()), true);
        assert!(auto.on);
        assert_eq!(
            auto.to_string(),
            "CUDA graphs on (auto: measured to pay and to give the eager bits on the H200 \
             (docs/perf/cuda-graphs.md, session 26))"
        );
        // Off, with the reason, whether asked on or left to auto.
        let cpu = Err("the cpu backend launches no kernels");
        let (auto, on) = (CudaGraphs::Auto, CudaGraphs::On);
        let off_cases = [
            (auto, 1, Ok(()), false, "without the step overlap"),
            (auto, 1, cpu, true, "cpu backend"),
            (on, 1, cpu, true, "cpu backend"),
            (auto, 2, Ok(()), true, "tensor-parallel"),
            (on, 2, Ok(()), true, "tensor-parallel"),
        ];
        for (req, world, be, overlap, why) in off_cases {
            let res = r(req, world, be, overlap);
            assert!(!res.on && res.why.contains(why), "{req:?}: {res}");
        }
        assert_eq!(r(CudaGraphs::Off, 1, Err("x"), true).why, "off as asked");
    }
}
