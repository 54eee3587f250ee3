//! Compiling kernel sources to cubins with NVRTC (no GPU needed). NVRTC is
//! found on the ordinary library search path; the folder of the CUDA headers
//! (`cuda_fp16.h`, `cuda_bf16.h`) comes from the caller
//! ([`crate::config::CudaOptions::include_dir`]).

use crate::{libs, CudaError};
use cudarc::nvrtc::{result, sys};
use std::ffi::{c_char, CString};
use std::path::Path;

pub use crate::config::INCLUDE_ENV;

/// Options that change the generated code (the cache key and the manifest
/// record these; the include folder is added separately, as it only locates headers).
pub fn code_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--ptxas-options=-v".to_string(),
    ]
}

/// NVRTC's version as `major.minor`.
pub fn version() -> Result<String, CudaError> {
    libs::probe_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loadable (probed); the out-pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result()?;
    Ok(format!("{major}.{minor}"))
}

/// A compiled program: the cubin and NVRTC's log (ptxas resource usage included).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub log: String,
}

/// Compiles `source` (program name `name`) for `arch` (e.g. `sm_90a`) to a
/// cubin, with the CUDA headers from `include`.
pub fn compile(
    name: &str,
    source: &str,
    arch: &str,
    include: &Path,
) -> Result<Compiled, CudaError> {
    libs::probe_nvrtc()?;
    let mut options = code_options(arch);
    options.push(format!("--include-path={}", include.display()));

    let src = CString::new(source).map_err(|e| CudaError::Nvrtc(e.to_string()))?;
    let cname = CString::new(name).map_err(|e| CudaError::Nvrtc(e.to_string()))?;
    let prog = result::create_program(&src, Some(&cname))?;
    // SAFETY: `prog` is a live program until destroyed below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| c_chars_to_string(&l))
        .unwrap_or_default();
    let outcome = match compiled {
        Err(_) => Err(CudaError::Compile {
            kernel: name.to_string(),
            arch: arch.to_string(),
            log: log.clone(),
        }),
        Ok(()) => unsafe { get_cubin(prog) }.map(|cubin| Compiled {
            cubin,
            log: log.clone(),
        }),
    };
    // SAFETY: `prog` was created above and is destroyed once.
    unsafe { result::destroy_program(prog) }?;
    outcome
}

/// # Safety
/// `prog` must be a successfully compiled, live NVRTC program.
unsafe fn get_cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, CudaError> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
    if size == 0 {
        return Err(CudaError::Nvrtc(
            "no cubin produced (is the architecture a real sm_XX target?)".into(),
        ));
    }
    let mut buf = vec![0u8; size];
    sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char).result()?;
    Ok(buf)
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Spill-store bytes ptxas reported for `entry` in an NVRTC log (`--ptxas-options=-v`).
pub fn spill_store_bytes(log: &str, entry: &str) -> Option<u64> {
    let start = log.find(&format!("Compiling entry function '{entry}'"))?;
    let rest = &log[start..];
    let line = rest.lines().find(|l| l.contains("bytes spill stores"))?;
    let before = line.split("bytes spill stores").next()?;
    before.rsplit(',').next()?.trim().parse().ok()
}

/// Compiles `k` for `sm_90a` with the CUDA headers the options find and
/// asserts ptxas spilled nothing in any of its entry points; the compiled
/// program, for further checks of its log or cubin (the kernel gate's
/// `--include-ignored` tests of each kernel source).
#[cfg(test)]
pub(crate) fn compile_sm90a_without_spills(k: &crate::kernels::source::KernelSource) -> Compiled {
    let include = crate::CudaOptions::from_env().include_dir().unwrap();
    let c = compile(k.name, k.source, "sm_90a", &include).unwrap();
    for e in k.entry_points {
        assert_eq!(spill_store_bytes(&c.log, e), Some(0), "{e}:\n{}", c.log);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_spill_bytes_per_entry_from_a_ptxas_log() {
        let log = "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n\
                   ptxas         .     32 bytes stack frame, 48 bytes spill stores, 36 bytes spill loads\n\
                   ptxas info    : Compiling entry function 'b' for 'sm_90a'\n\
                   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        assert_eq!(spill_store_bytes(log, "a"), Some(48));
        assert_eq!(spill_store_bytes(log, "b"), Some(0));
        assert_eq!(spill_store_bytes(log, "c"), None);
    }
}
