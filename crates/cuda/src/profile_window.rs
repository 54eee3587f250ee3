//! The profiler window ([`crate::config::CudaOptions::profile_step`] = N):
//! opens the CUDA profiler's window
//! (`cuProfilerStart`) after the N-th sampled step's read-back and closes it
//! after the next one, so that a profiler started with collection off
//! (`ncu --profile-from-start off`) sees the kernels of exactly one engine
//! step (the (N+1)-th: a decode step once N ≥ 1). Unset: off.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sampled steps seen so far.
static STEPS: AtomicU64 = AtomicU64::new(0);

/// What a finished step does to the window: open it, close it, or nothing.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Open,
    Close,
    None,
}

fn action(step: u64, target: Option<u64>) -> Action {
    match target {
        Some(t) if step == t => Action::Open,
        Some(t) if step == t + 1 => Action::Close,
        _ => Action::None,
    }
}

/// Called after each sampled step's read-back (the step's one
/// synchronisation), with the options' target step.
pub(crate) fn step_done(target: Option<u64>) {
    let Some(t) = target else { return };
    let step = STEPS.fetch_add(1, Ordering::Relaxed) + 1;
    // SAFETY: plain driver calls on the current context; a failure (no
    // profiler attached) is harmless and ignored.
    match action(step, Some(t)) {
        Action::Open => unsafe {
            let _ = cudarc::driver::sys::cuProfilerStart();
        },
        Action::Close => unsafe {
            let _ = cudarc::driver::sys::cuProfilerStop();
        },
        Action::None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_spans_exactly_the_step_after_the_target() {
        let t = Some(5);
        let acts: Vec<Action> = (1..=7).map(|s| action(s, t)).collect();
        assert_eq!(acts[3], Action::None);
        assert_eq!(acts[4], Action::Open);
        assert_eq!(acts[5], Action::Close);
        assert_eq!(acts[6], Action::None);
    }

    #[test]
    fn unset_keeps_it_off() {
        assert_eq!(action(1, None), Action::None);
    }
}
