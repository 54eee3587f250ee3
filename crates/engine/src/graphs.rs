//! The CUDA graphs setting ([`CudaGraphs`], `--cuda-graphs`) and what it
//! resolves to on an engine ([`GraphsResolution`]). With it on, each decode
//! step (one row a sequence) is captured as a graph and launched as one
//! unit (`Backend::queue_step`; the CUDA backend's `graph` module): the
//! same kernels with the same arguments, so the same bits, but one driver
//! submission instead of ≈ 300. Prefill steps run as they are.

use serde::{Deserialize, Serialize};

/// Whether decode steps are recorded and launched as CUDA graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaGraphs {
    /// On where it was measured to pay: nowhere yet (the H200 measurement
    /// is pending, `docs/perf/cuda-graphs.md`), so off.
    #[default]
    Auto,
    On,
    Off,
}

impl std::fmt::Display for CudaGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CudaGraphs::Auto => "auto",
            CudaGraphs::On => "on",
            CudaGraphs::Off => "off",
        })
    }
}

impl std::str::FromStr for CudaGraphs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(CudaGraphs::Auto),
            "on" => Ok(CudaGraphs::On),
            "off" => Ok(CudaGraphs::Off),
            other => Err(format!("CUDA graphs {other:?}: expected auto, on or off")),
        }
    }
}

/// What the setting resolved to on an engine, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphsResolution {
    pub requested: CudaGraphs,
    pub on: bool,
    pub why: String,
}

impl GraphsResolution {
    /// `requested` on an engine of `world` ranks whose backend can record
    /// steps or says why not (`Backend::step_recording`), with the step
    /// overlap on or off.
    pub fn resolve(
        requested: CudaGraphs,
        world: usize,
        backend: Result<(), String>,
        overlap_on: bool,
    ) -> Self {
        let (on, why) = match (requested, backend) {
            (CudaGraphs::Off, _) => (false, "off as asked".to_string()),
            (_, Err(why)) => (false, why),
            _ if world > 1 => (
                false,
                "a tensor-parallel group's steps hold NCCL calls, which are not recorded".into(),
            ),
            (CudaGraphs::Auto, Ok(())) => (
                false,
                "not yet measured to pay (docs/perf/cuda-graphs.md)".into(),
            ),
            (CudaGraphs::On, Ok(())) if !overlap_on => (
                true,
                "on as asked; without the step overlap the device waits for each step's capture"
                    .into(),
            ),
            (CudaGraphs::On, Ok(())) => (true, "on as asked".into()),
        };
        GraphsResolution { requested, on, why }
    }
}

impl std::fmt::Display for GraphsResolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CUDA graphs {} ({}: {})",
            if self.on { "on" } else { "off" },
            self.requested,
            self.why
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_prints_its_three_values() {
        for v in [CudaGraphs::Auto, CudaGraphs::On, CudaGraphs::Off] {
            assert_eq!(v.to_string().parse::<CudaGraphs>(), Ok(v));
        }
        let err = "yes".parse::<CudaGraphs>().unwrap_err();
        assert!(
            err.contains("\"yes\"") && err.contains("auto, on or off"),
            "{err}"
        );
    }

    #[test]
    fn only_on_turns_them_on_and_only_where_the_backend_records() {
        let r = |req, world, be: Result<(), &str>, overlap| {
            GraphsResolution::resolve(req, world, be.map_err(String::from), overlap)
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
        assert!(!auto.on);
        assert_eq!(
            auto.to_string(),
            "CUDA graphs off (auto: not yet measured to pay (docs/perf/cuda-graphs.md))"
        );
        let cpu = r(
            CudaGraphs::On,
            1,
            Err("the cpu backend launches no kernels"),
            true,
        );
        assert!(!cpu.on && cpu.why.contains("cpu backend"), "{cpu}");
        let tp = r(CudaGraphs::On, 2, Ok(()), true);
        assert!(!tp.on && tp.why.contains("tensor-parallel"), "{tp}");
        assert_eq!(r(CudaGraphs::Off, 1, Err("x"), true).why, "off as asked");
    }
}
