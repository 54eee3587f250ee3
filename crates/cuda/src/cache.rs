//! On-disk cache of compiled cubins, keyed by SHA-256 of the source, the
//! target architecture, the code options and the NVRTC version, in the folder
//! [`crate::config::CudaOptions::kernel_cache`] names. A cache that cannot be
//! written is skipped with a warning: compiling again is always correct.
//! Compiling reports progress (`headroom_core::progress`, task `kernels`):
//! one event before the first compilation, one per compiled kernel.

use crate::config::CudaOptions;
use crate::kernels::KernelSource;
use crate::nvrtc::{self, Compiled};
use crate::CudaError;
use headroom_core::progress;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};

/// SHA-256 (hex) of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The cache key of one compilation.
pub fn key(source: &str, arch: &str, nvrtc_version: &str) -> String {
    let mut h = Sha256::new();
    h.update(sha256_hex(source.as_bytes()));
    h.update([0]);
    h.update(arch);
    h.update([0]);
    for o in nvrtc::code_options(arch) {
        h.update(o);
        h.update([0]);
    }
    h.update(nvrtc_version);
    hex::encode(h.finalize())
}

/// The cache file of `src` on `arch` in `dir`.
fn file_in(dir: &Path, src: &KernelSource, arch: &str, version: &str) -> PathBuf {
    dir.join(format!(
        "{}-{}.cubin",
        src.name,
        key(src.source, arch, version)
    ))
}

/// What compiles one source (NVRTC in [`cubins`], a stand-in in tests);
/// called from several threads at once.
pub type Compile<'a> = dyn Fn(&KernelSource) -> Result<Compiled, CudaError> + Sync + 'a;

/// The cubins of `sources` on `arch` (in order): from `dir` where cached,
/// else built by `compile` (the missing sources on as many threads as the
/// machine has cores) and stored. Before the first compilation one progress
/// event says how many kernels compile and where they are cached; each
/// compiled kernel reports one more, in the order they finish.
pub fn cubins_with(
    dir: Option<&Path>,
    sources: &[KernelSource],
    arch: &str,
    version: &str,
    compile: &Compile<'_>,
) -> Result<Vec<Vec<u8>>, CudaError> {
    let mut out: Vec<Option<Vec<u8>>> = sources
        .iter()
        .map(|src| {
            let f = file_in(dir?, src, arch, version);
            let bytes = std::fs::read(&f).ok()?;
            tracing::debug!(kernel = src.name, path = %f.display(), "kernel cache hit");
            Some(bytes)
        })
        .collect();
    let missing: Vec<usize> = (0..sources.len()).filter(|&i| out[i].is_none()).collect();
    let total = missing.len() as u64;
    if total > 0 {
        let noun = if total == 1 { "kernel" } else { "kernels" };
        let whereto = match dir {
            Some(d) => format!("cached in {}", d.display()),
            None => "not cached (no cache folder)".to_string(),
        };
        progress::report(
            "kernels",
            0,
            total,
            "kernels",
            &format!("compiling {total} {noun} for {arch} (first run on this machine), {whereto}"),
        );
    }
    let mut done = 0;
    compile_all(sources, &missing, compile, |i, compiled| {
        let src = &sources[i];
        tracing::debug!(kernel = src.name, arch, log = %compiled.log, "compiled kernel");
        if let Some(d) = dir {
            let f = file_in(d, src, arch, version);
            if let Err(e) = store(&f, &compiled.cubin) {
                tracing::warn!(path = %f.display(), error = %e, "kernel cache not written");
            }
        }
        done += 1;
        progress::report(
            "kernels",
            done,
            total,
            "kernels",
            &format!("compiled {}", src.name),
        );
        out[i] = Some(compiled.cubin);
    })?;
    Ok(out.into_iter().flatten().collect())
}

/// Compiles `sources[i]` for each `i` of `which` on worker threads and hands
/// each result to `finished` on the calling thread as it arrives; the first
/// error stops the hand-over (workers finish what they hold) and is returned.
fn compile_all(
    sources: &[KernelSource],
    which: &[usize],
    compile: &Compile<'_>,
    mut finished: impl FnMut(usize, Compiled),
) -> Result<(), CudaError> {
    if which.is_empty() {
        return Ok(());
    }
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(which.len());
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..workers {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || {
                while let Some(&i) = which.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if tx.send((i, compile(&sources[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            finished(i, result?);
        }
        Ok(())
    })
}

/// [`cubins_with`] on NVRTC in the cache folder of `opts`, the CUDA headers
/// found as `opts` says (only when something compiles).
pub fn cubins(
    sources: &[KernelSource],
    arch: &str,
    opts: &CudaOptions,
) -> Result<Vec<Vec<u8>>, CudaError> {
    let version = nvrtc::version()?;
    let include: OnceLock<PathBuf> = OnceLock::new();
    let compile = |src: &KernelSource| {
        let dir = match include.get() {
            Some(d) => d,
            None => {
                let d = opts.include_dir()?;
                include.get_or_init(|| d)
            }
        };
        nvrtc::compile(src.name, src.source, arch, dir)
    };
    cubins_with(opts.kernel_cache(), sources, arch, &version, &compile)
}

fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Write then rename, so a reader never sees half a cubin.
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_source_arch_and_version() {
        let k = key("a", "sm_90a", "13.0");
        assert_ne!(k, key("b", "sm_90a", "13.0"));
        assert_ne!(k, key("a", "sm_80", "13.0"));
        assert_ne!(k, key("a", "sm_90a", "13.1"));
        assert_eq!(k, key("a", "sm_90a", "13.0"));
    }

    /// The progress events of `f`: (done, total, message).
    fn progress_of<T>(f: impl FnOnce() -> T) -> (T, Vec<(u64, u64, String)>) {
        use std::sync::{Arc, Mutex};
        use tracing::field::{Field, Visit};
        use tracing_subscriber::layer::{Context, SubscriberExt};

        #[derive(Default)]
        struct Event(u64, u64, String);
        impl Visit for Event {
            fn record_u64(&mut self, f: &Field, v: u64) {
                match f.name() {
                    "done" => self.0 = v,
                    "total" => self.1 = v,
                    _ => {}
                }
            }
            fn record_str(&mut self, f: &Field, v: &str) {
                if f.name() == "message" {
                    self.2 = v.to_string();
                }
            }
            fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" && self.2.is_empty() {
                    self.2 = format!("{v:?}");
                }
            }
        }
        struct Capture(Arc<Mutex<Vec<(u64, u64, String)>>>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
            fn on_event(&self, e: &tracing::Event<'_>, _: Context<'_, S>) {
                if e.metadata().target() == progress::TARGET {
                    let mut v = Event::default();
                    e.record(&mut v);
                    self.0.lock().unwrap().push((v.0, v.1, v.2));
                }
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sub = tracing_subscriber::registry().with(Capture(Arc::clone(&seen)));
        let out = headroom_core::progress::with_scoped_subscriber(sub, f);
        let events = seen.lock().unwrap().clone();
        (out, events)
    }

    fn fake(src: &KernelSource) -> Result<Compiled, CudaError> {
        Ok(Compiled {
            cubin: src.name.as_bytes().to_vec(),
            log: String::new(),
        })
    }

    #[test]
    fn a_first_run_reports_what_it_compiles_and_a_second_is_silent() {
        use crate::kernels::SOURCES;
        let dir = tempfile::tempdir().unwrap();
        let srcs = &SOURCES[..3];
        let calls = AtomicUsize::new(0);
        let counted = |s: &KernelSource| {
            calls.fetch_add(1, Ordering::Relaxed);
            fake(s)
        };
        let (cubins, events) = progress_of(|| {
            cubins_with(Some(dir.path()), srcs, "sm_90a", "13.0", &counted).unwrap()
        });
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert_eq!(cubins[1], srcs[1].name.as_bytes());
        assert_eq!(events.len(), 4, "{events:?}");
        let (done, total, msg) = &events[0];
        assert_eq!((*done, *total), (0, 3));
        assert!(msg.contains("compiling 3 kernels for sm_90a"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        let counts: Vec<_> = events.iter().map(|e| (e.0, e.1)).collect();
        assert_eq!(counts, [(0, 3), (1, 3), (2, 3), (3, 3)]);
        for s in srcs {
            let named = events
                .iter()
                .filter(|e| e.2 == format!("compiled {}", s.name));
            assert_eq!(named.count(), 1, "{events:?}");
        }

        // Everything is cached now: no compilation, no event, the same bytes.
        let (again, events) = progress_of(|| {
            let never = |_: &KernelSource| -> Result<Compiled, CudaError> {
                panic!("compiled a cached kernel")
            };
            cubins_with(Some(dir.path()), srcs, "sm_90a", "13.0", &never).unwrap()
        });
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(again, cubins);

        // One stale entry (another NVRTC version): only that kernel compiles.
        std::fs::remove_file(file_in(dir.path(), &srcs[2], "sm_90a", "13.0")).unwrap();
        let (_, events) =
            progress_of(|| cubins_with(Some(dir.path()), srcs, "sm_90a", "13.0", &fake).unwrap());
        assert_eq!(events.len(), 2);
        assert!(events[0].2.contains("compiling 1 kernel for"), "{events:?}");
    }

    #[test]
    fn a_failed_compilation_is_the_error_and_nothing_of_it_is_cached() {
        let _one = headroom_core::progress::one_at_a_time();
        let srcs = &crate::kernels::SOURCES[..4];
        let dir = tempfile::tempdir().unwrap();
        let bad = srcs[2].name;
        let failing = |s: &KernelSource| {
            if s.name == bad {
                Err(CudaError::Nvrtc(format!("{} failed", s.name)))
            } else {
                fake(s)
            }
        };
        let err = cubins_with(Some(dir.path()), srcs, "sm_90a", "13.0", &failing).unwrap_err();
        assert!(err.to_string().contains(bad), "{err}");
        assert!(!file_in(dir.path(), &srcs[2], "sm_90a", "13.0").exists());
    }

    #[test]
    fn without_a_cache_folder_every_kernel_compiles_and_says_so() {
        let srcs = &crate::kernels::SOURCES[..2];
        let (_, events) = progress_of(|| cubins_with(None, srcs, "sm_80", "13.0", &fake).unwrap());
        assert_eq!(events.len(), 3);
        assert!(events[0].2.contains("not cached"), "{events:?}");
        assert_eq!((events[2].0, events[2].1), (2, 2));
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn compiling_on_several_threads_gives_the_cubins_of_one_at_a_time() {
        let opts = CudaOptions::from_env();
        let include = opts.include_dir().unwrap();
        let srcs: Vec<KernelSource> = crate::kernels::SOURCES
            .iter()
            .filter(|s| s.required_arch().is_none())
            .copied()
            .collect();
        let opts = CudaOptions {
            kernel_cache: None,
            ..opts
        };
        let parallel = cubins(&srcs, "sm_90a", &opts).unwrap();
        for (src, cubin) in srcs.iter().zip(&parallel) {
            let alone = nvrtc::compile(src.name, src.source, "sm_90a", &include).unwrap();
            assert_eq!(*cubin, alone.cubin, "{}", src.name);
        }
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn second_lookup_is_served_from_the_cache() {
        let opts = CudaOptions::from_env();
        if let Err(e) = crate::libs::probe_nvrtc().and_then(|_| opts.include_dir()) {
            panic!("this test needs NVRTC and the CUDA headers (run .ci/kernel-gate.sh): {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let opts = CudaOptions {
            kernel_cache: Some(dir.path().into()),
            ..opts
        };
        let src = [crate::ops::attention::sources::MASKED_SOFTMAX];
        let first = cubins(&src, "sm_90a", &opts).unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1);
        // Overwrite the cached file: a hit must return the cached bytes, not recompile.
        let path = files[0].as_ref().unwrap().path();
        std::fs::write(&path, b"cached").unwrap();
        assert_eq!(cubins(&src, "sm_90a", &opts).unwrap(), [b"cached"]);
        assert!(first[0].starts_with(b"\x7fELF"));
    }
}
