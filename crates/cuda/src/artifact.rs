//! The kernel artifact gate: `build` compiles every embedded kernel source
//! through NVRTC into a folder of cubins plus `manifest.json`; `verify`
//! checks a folder against the sources embedded in this binary (source
//! hashes match), the outputs against their recorded hashes (a changed byte
//! fails) and the entry points actually exported by each cubin's ELF symbol
//! table against the required list.

use crate::cache::sha256_hex;
use crate::config::CudaOptions;
use crate::error::io_err;
use crate::kernels::KernelSource;
use crate::{elf, nvrtc, CudaError};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const MANIFEST: &str = "manifest.json";
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub arch: String,
    pub nvrtc_version: String,
    pub options: Vec<String>,
    pub kernels: Vec<KernelEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KernelEntry {
    pub name: String,
    pub source_file: String,
    pub source_sha256: String,
    pub output_file: String,
    pub output_sha256: String,
    pub entry_points: Vec<String>,
    /// NVRTC's log: ptxas registers, shared memory, spills per entry point.
    pub compile_log: String,
}

/// The architecture a source needs, when it uses instructions only one
/// target has (`wgmma` exists on `sm_90a` alone).
pub fn required_arch(src: &KernelSource) -> Option<&'static str> {
    src.required_arch()
}

/// Checks, before compiling anything, that `arch` is a real `sm_XY[a]`
/// target that every source supports; the error is one line.
pub fn check_arch(arch: &str, sources: &[KernelSource]) -> Result<(), CudaError> {
    let digits = arch
        .strip_prefix("sm_")
        .map(|r| r.strip_suffix('a').unwrap_or(r))
        .filter(|d| (2..=3).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()));
    if digits.is_none() {
        return Err(CudaError::Artifact(format!(
            "--arch `{arch}` is not a real target like sm_90a or sm_80"
        )));
    }
    for src in sources {
        if let Some(need) = required_arch(src).filter(|need| *need != arch) {
            return Err(CudaError::Artifact(format!(
                "--arch {arch}: kernel `{}` uses wgmma, which only {need} supports; the artifact \
                 holds every kernel, so build it for {need}",
                src.name
            )));
        }
        if !src.builds_for(arch) {
            let min = src.min_sm().unwrap_or_default();
            return Err(CudaError::Artifact(format!(
                "--arch {arch}: kernel `{}` uses PTX that needs sm_{min} or newer; build it for \
                 sm_{min} or a newer target",
                src.name
            )));
        }
    }
    Ok(())
}

/// Compiles `sources` for `arch` into `out` (created if needed). Everything
/// is compiled before anything is written: a failure leaves no partial output.
/// The CUDA headers are found as [`CudaOptions::from_env`] says.
pub fn build(out: &Path, arch: &str, sources: &[KernelSource]) -> Result<Manifest, CudaError> {
    build_with(out, arch, sources, &CudaOptions::from_env())
}

/// [`build`] with the CUDA headers found as `opts` says.
pub fn build_with(
    out: &Path,
    arch: &str,
    sources: &[KernelSource],
    opts: &CudaOptions,
) -> Result<Manifest, CudaError> {
    check_arch(arch, sources)?;
    let nvrtc_version = nvrtc::version()?;
    let include = opts.include_dir()?;
    let compiled: Vec<_> = sources
        .iter()
        .map(|src| nvrtc::compile(src.name, src.source, arch, &include).map(|c| (src, c)))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let mut kernels = Vec::new();
    for (src, compiled) in compiled {
        let output_file = format!("{}.{arch}.cubin", src.name);
        let path = out.join(&output_file);
        std::fs::write(&path, &compiled.cubin).map_err(io_err(&path))?;
        let entry_points = elf::function_symbols(&compiled.cubin).map_err(CudaError::Artifact)?;
        kernels.push(KernelEntry {
            name: src.name.to_string(),
            source_file: src.file.to_string(),
            source_sha256: sha256_hex(src.source.as_bytes()),
            output_file,
            output_sha256: sha256_hex(&compiled.cubin),
            entry_points,
            compile_log: compiled.log,
        });
    }
    let manifest = Manifest {
        format: FORMAT,
        arch: arch.to_string(),
        nvrtc_version,
        options: nvrtc::code_options(arch),
        kernels,
    };
    let path = out.join(MANIFEST);
    let json =
        serde_json::to_string_pretty(&manifest).map_err(|e| CudaError::Artifact(e.to_string()))?;
    std::fs::write(&path, json + "\n").map_err(io_err(&path))?;
    Ok(manifest)
}

/// What verification checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub arch: String,
    pub kernels: usize,
    pub entry_points: Vec<String>,
    /// SHA-256 of manifest.json: the artifact's identity for build records.
    pub manifest_sha256: String,
}

/// Verifies the artifact in `dir`. On failure, the error lists every problem.
pub fn verify(
    dir: &Path,
    sources: &[KernelSource],
    required: &[&str],
) -> Result<Verified, CudaError> {
    let mpath = dir.join(MANIFEST);
    let mbytes = std::fs::read(&mpath).map_err(io_err(&mpath))?;
    let manifest: Manifest = serde_json::from_slice(&mbytes)
        .map_err(|e| CudaError::Artifact(format!("{}: {e}", mpath.display())))?;
    let mut problems = Vec::new();
    if manifest.format != FORMAT {
        problems.push(format!(
            "manifest format {} (expected {FORMAT})",
            manifest.format
        ));
    }
    let options = nvrtc::code_options(&manifest.arch);
    if manifest.options != options {
        problems.push(format!(
            "built with NVRTC options {:?}, this binary compiles with {options:?}",
            manifest.options
        ));
    }
    let mut exported = Vec::new();
    for src in sources {
        let Some(entry) = manifest.kernels.iter().find(|k| k.name == src.name) else {
            problems.push(format!("kernel `{}` missing from the manifest", src.name));
            continue;
        };
        let want = sha256_hex(src.source.as_bytes());
        if entry.source_sha256 != want {
            problems.push(format!(
                "kernel `{}`: embedded source hashes to {want}, manifest says {} (artifact built from other sources)",
                src.name, entry.source_sha256
            ));
        }
        let opath = dir.join(&entry.output_file);
        let bytes = match std::fs::read(&opath) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{}: {e}", opath.display()));
                continue;
            }
        };
        let got = sha256_hex(&bytes);
        if got != entry.output_sha256 {
            problems.push(format!(
                "{}: hashes to {got}, manifest says {} (output changed)",
                entry.output_file, entry.output_sha256
            ));
        }
        match elf::function_symbols(&bytes) {
            Ok(syms) => {
                if syms != entry.entry_points {
                    problems.push(format!(
                        "{}: exports {syms:?}, manifest lists {:?}",
                        entry.output_file, entry.entry_points
                    ));
                }
                exported.extend(syms);
            }
            Err(e) => problems.push(format!("{}: {e}", entry.output_file)),
        }
    }
    for r in required {
        if !exported.iter().any(|e| e == r) {
            problems.push(format!(
                "required entry point `{r}` not exported by any compiled kernel"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(CudaError::Artifact(format!(
            "{} verification failed:\n  - {}",
            dir.display(),
            problems.join("\n  - ")
        )));
    }
    exported.sort();
    Ok(Verified {
        arch: manifest.arch,
        kernels: sources.len(),
        entry_points: exported,
        manifest_sha256: sha256_hex(&mbytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{required_entry_points, SOURCES};
    use crate::ops::attention::sources::MASKED_SOFTMAX;
    use crate::ops::gdn::sources::GDN_CHUNKED;

    #[test]
    fn other_arches_are_refused_in_one_line_before_compiling() {
        let out = tempfile::tempdir().unwrap();
        let target = out.path().join("artifact");
        for arch in ["sm_80", "sm_90", "compute_90", "sm_x", ""] {
            let err = build(&target, arch, SOURCES).unwrap_err().to_string();
            assert!(!err.contains('\n'), "one line: {err}");
            assert!(err.contains(arch), "{err}");
            assert!(!target.exists(), "{arch}: no output written");
        }
        assert!(check_arch("sm_90a", SOURCES).is_ok());
        assert!(check_arch("sm_80", &[MASKED_SOFTMAX]).is_ok());
        let err = check_arch("sm_89", &[GDN_CHUNKED]).unwrap_err().to_string();
        assert!(
            err.contains("gdn_chunked") && err.contains("sm_90 or newer") && !err.contains('\n'),
            "{err}"
        );
        assert!(check_arch("sm_90", &[GDN_CHUNKED]).is_ok());
    }

    /// `KernelSource::builds_for` against NVRTC itself on two pre-Hopper
    /// targets: every source it admits compiles there, and every source it
    /// refuses without needing sm_90a (its `min_sm`) does not — so
    /// `CudaBackend::on` neither skips a kernel it could load nor fails on
    /// one it cannot compile.
    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn builds_for_agrees_with_nvrtc_on_sm_80_and_sm_89() {
        require_nvrtc();
        let include = CudaOptions::from_env().include_dir().unwrap();
        for arch in ["sm_80", "sm_89"] {
            for src in SOURCES.iter().filter(|s| s.required_arch().is_none()) {
                let built = nvrtc::compile(src.name, src.source, arch, &include);
                assert_eq!(
                    built.is_ok(),
                    src.builds_for(arch),
                    "{} on {arch}: builds_for says {}, NVRTC {:?}",
                    src.name,
                    src.builds_for(arch),
                    built.err().map(|e| e.to_string())
                );
            }
        }
    }

    /// The NVRTC tests are `#[ignore]`d (a plain `cargo test` has no NVRTC);
    /// `.ci/kernel-gate.sh` installs NVRTC and runs them with `--include-ignored`.
    /// Run without NVRTC, they fail loudly here instead of passing.
    fn require_nvrtc() {
        let opts = CudaOptions::from_env();
        if let Err(e) = crate::libs::probe_nvrtc().and_then(|_| opts.include_dir()) {
            panic!("this test needs NVRTC and the CUDA headers (run .ci/kernel-gate.sh): {e}");
        }
    }

    /// Compiles every kernel once (slow: shared by the gate tests).
    fn built() -> &'static tempfile::TempDir {
        use std::sync::OnceLock;
        static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
        DIR.get_or_init(|| {
            require_nvrtc();
            let dir = tempfile::tempdir().unwrap();
            build(dir.path(), "sm_90a", SOURCES).unwrap();
            dir
        })
    }

    fn copy_dir(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.path().join(e.file_name())).unwrap();
        }
        to
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_kernel_compiles_and_verifies_with_all_required_entry_points() {
        let dir = built();
        let v = verify(dir.path(), SOURCES, &required_entry_points()).unwrap();
        for r in required_entry_points() {
            assert!(v.entry_points.iter().any(|e| e == r), "{r}");
        }
        let m: Manifest =
            serde_json::from_slice(&std::fs::read(dir.path().join(MANIFEST)).unwrap()).unwrap();
        assert_eq!(m.arch, "sm_90a");
        assert!(m.nvrtc_version.starts_with("13."), "{}", m.nvrtc_version);
        // ptxas reports per entry point: the head-dim-256 kernels must not spill
        // (a register-pressure regression shows up here, before any GPU run).
        for (kernel, entries) in [
            (
                "attention_fused",
                [
                    "attn_fused_prefill_d256_bf16",
                    "attn_fused_prefill_d256_f16",
                ],
            ),
            (
                "attention_fused_wgmma",
                [
                    "attn_fused_prefill_wgmma_d256_bf16",
                    "attn_fused_prefill_wgmma_d256_f16",
                ],
            ),
            (
                "attention_paged",
                ["attn_paged_wgmma_d256_bf16", "attn_paged_wgmma_d256_f16"],
            ),
            (
                "attention_paged_pairs",
                ["attn_paged_pairs_d256_bf16", "attn_paged_pairs_d256_f16"],
            ),
        ] {
            let k = m.kernels.iter().find(|k| k.name == kernel).unwrap();
            for e in entries {
                assert_eq!(
                    nvrtc::spill_store_bytes(&k.compile_log, e),
                    Some(0),
                    "{e}:\n{}",
                    k.compile_log
                );
            }
        }
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_cubin_exports_exactly_the_entry_points_its_launchers_use() {
        // kernels::tests checks the launchers name every listed entry point;
        // here the compiled artifact exports those and no other kernel.
        let dir = built();
        for src in SOURCES {
            let cubin =
                std::fs::read(dir.path().join(format!("{}.sm_90a.cubin", src.name))).unwrap();
            let mut exported = elf::function_symbols(&cubin).unwrap();
            exported.sort();
            let mut listed: Vec<String> = src.entry_points.iter().map(|e| e.to_string()).collect();
            listed.sort();
            assert_eq!(exported, listed, "{}", src.name);
        }
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn a_changed_output_byte_fails_verification() {
        let dir = built();
        let copy = copy_dir(dir.path());
        let cubin = copy.path().join("attention_fused.sm_90a.cubin");
        let mut bytes = std::fs::read(&cubin).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&cubin, bytes).unwrap();
        let err = verify(copy.path(), SOURCES, &required_entry_points())
            .unwrap_err()
            .to_string();
        assert!(err.contains("output changed"), "{err}");
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn a_source_change_fails_verification() {
        let dir = built();
        let edited = format!("{}\n// edited\n", MASKED_SOFTMAX.source);
        let changed = KernelSource {
            source: Box::leak(edited.into_boxed_str()),
            ..MASKED_SOFTMAX
        };
        let sources = [SOURCES[0], changed];
        let err = verify(dir.path(), &sources, &required_entry_points())
            .unwrap_err()
            .to_string();
        assert!(err.contains("embedded source hashes"), "{err}");
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn a_build_missing_a_required_symbol_fails_verification() {
        require_nvrtc();
        // A softmax source whose f16 entry point was renamed away.
        let doctored = MASKED_SOFTMAX.source.replace(
            "SOFTMAX_ENTRY(f16, __half)",
            "SOFTMAX_ENTRY(f16_old, __half)",
        );
        let src = KernelSource {
            source: Box::leak(doctored.into_boxed_str()),
            ..MASKED_SOFTMAX
        };
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), "sm_90a", &[src]).unwrap();
        let err = verify(dir.path(), &[src], MASKED_SOFTMAX.entry_points)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`attn_masked_softmax_f16` not exported"),
            "{err}"
        );
        // The same build passes when that symbol is not required: the failure is the symbol.
        verify(dir.path(), &[src], &["attn_masked_softmax_bf16"]).unwrap();
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn an_artifact_built_with_other_options_fails_verification() {
        let dir = built();
        let copy = copy_dir(dir.path());
        let mpath = copy.path().join(MANIFEST);
        let mut m: Manifest = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
        m.options.push("-DEXTRA=1".into());
        std::fs::write(&mpath, serde_json::to_string(&m).unwrap()).unwrap();
        let err = verify(copy.path(), SOURCES, &required_entry_points())
            .unwrap_err()
            .to_string();
        assert!(err.contains("built with NVRTC options"), "{err}");
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn a_manifest_listing_a_symbol_the_cubin_lacks_fails() {
        let dir = built();
        let copy = copy_dir(dir.path());
        let mpath = copy.path().join(MANIFEST);
        let mut m: Manifest = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
        m.kernels[1].entry_points.push("attn_not_compiled".into());
        std::fs::write(&mpath, serde_json::to_string(&m).unwrap()).unwrap();
        let err = verify(copy.path(), SOURCES, &required_entry_points())
            .unwrap_err()
            .to_string();
        assert!(err.contains("manifest lists"), "{err}");
    }
}
