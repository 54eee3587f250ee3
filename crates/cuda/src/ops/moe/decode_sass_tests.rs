//! The decode kernels under NVRTC: every entry compiles for sm_90a without
//! spills, and the bf16 entries' SASS is the SASS that ran on the H200.

// Test code only (decode.rs declares the module under #[cfg(test)]); the
// attribute below also marks it so for the crate's scans of its sources
// (config.rs), which read a file's code before its first such attribute.
#[cfg(test)]
use crate::ops::moe::sources::MOE_DECODE;

#[test]
#[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
fn every_entry_compiles_for_sm_90a_without_spills() {
    crate::nvrtc::compile_sm90a_without_spills(&MOE_DECODE);
}

/// SHA-256 of each `.text.<entry>` section (the entry's SASS) of a cubin.
fn text_sha256(cubin: &[u8], entry: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    let u16_at = |o: usize| u16::from_le_bytes([cubin[o], cubin[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(cubin[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(cubin[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let sh = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(sh(shstrndx) + 0x18);
    let want = format!(".text.{entry}");
    (0..shnum).find_map(|i| {
        let name_at = strtab + u32_at(sh(i));
        let end = name_at + cubin[name_at..].iter().position(|&b| b == 0)?;
        (cubin[name_at..end] == *want.as_bytes()).then(|| {
            let (off, size) = (u64_at(sh(i) + 0x18), u64_at(sh(i) + 0x20));
            format!("{:x}", Sha256::digest(&cubin[off..off + size]))
        })
    })
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
fn the_bf16_entries_compile_to_their_recorded_sass() {
    // SHA-256 of each bf16 entry's SASS from NVRTC 13.0 (the gate's pinned
    // wheels) for sm_90a: a change to the bf16 path's code shows here and
    // must be one that ran on the H200. First recorded from moe_decode.cu
    // before it was templated on the weight format (commit 178633b);
    // re-recorded when the down kernel came to wait for gate_up's published
    // experts before its griddepcontrol.wait (the route kernel marks them,
    // gate_up publishes them: the same products in the same order, session
    // 19, docs/perf/cuda-decode.md); gate_up re-recorded when the routing
    // ranked its candidates in parallel (the same ranks, session 40).
    const BEFORE: [(&str, &str); 3] = [
        (
            "moe_decode_route",
            "55ea2d5751a8b4bddc3926e9ef87b112f7653867b3f57018b40cbbd83b3b8f27",
        ),
        (
            "moe_decode_gate_up",
            "35b2e35b807b410a388f24310c2313e38c30d34bd9df6f4f58398e0f99a4fb67",
        ),
        (
            "moe_decode_down",
            "c855ae82f3fd600a31bc36285f25c1ef4d8dfc759c89977ab6d860ce92db287c",
        ),
    ];
    let version = crate::nvrtc::version().unwrap();
    if version != "13.0" {
        println!("NVRTC {version}: the recorded SASS is NVRTC 13.0's; not compared");
        return;
    }
    let include = crate::CudaOptions::from_env().include_dir().unwrap();
    let c = crate::nvrtc::compile(MOE_DECODE.name, MOE_DECODE.source, "sm_90a", &include).unwrap();
    for (entry, sha) in BEFORE {
        assert_eq!(
            text_sha256(&c.cubin, entry).as_deref(),
            Some(sha),
            "{entry}"
        );
    }
    // The FP8 entries are there too, and differ.
    let fp8 = text_sha256(&c.cubin, "moe_decode_gate_up_fp8").unwrap();
    assert_ne!(fp8, BEFORE[1].1);
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
fn the_program_compiles_for_ampere_and_ada_too() {
    // The decode kernels run on any sm_80+ GPU; the tensor-core FP8 ones
    // need sm_89's e4m3 conversion and are compiled out below it.
    let include = crate::CudaOptions::from_env().include_dir().unwrap();
    for arch in ["sm_80", "sm_86", "sm_89"] {
        crate::nvrtc::compile(MOE_DECODE.name, MOE_DECODE.source, arch, &include)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
    }
}
