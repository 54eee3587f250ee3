//! Progress of long work (kernel compilation, checkpoint loading, synthetic
//! weight drawing), reported as `tracing` events with one target so that
//! libraries stay free of terminal code. The binary decides how to show them:
//! a progress line on a terminal, nothing on a pipe.
//!
//! Contract: every event has target [`TARGET`] and the fields `task` (a stable
//! short name such as `"kernels"`), `done`, `total` (`u64`, same unit), `unit`
//! (`"kernels"`, `"bytes"`, `"tensors"`, ...) and a human `message`.
//! `done == total` ends the task.

/// The `tracing` target of every progress event.
pub const TARGET: &str = "headroom::progress";

/// Report that `task` has reached `done` of `total` (`unit`), with a human message.
pub fn report(task: &'static str, done: u64, total: u64, unit: &'static str, message: &str) {
    tracing::info!(target: TARGET, task, done, total, unit, message);
}

/// Runs `f` with `subscriber` as this thread's default, one such scope at a
/// time in the process, with tracing's callsite cache rebuilt inside it: for
/// tests that capture progress events. tracing caches each callsite's
/// interest and the maximum level process-wide, so scopes that open and
/// close on parallel test threads can otherwise hide one another's events.
pub fn with_scoped_subscriber<S, T>(subscriber: S, f: impl FnOnce() -> T) -> T
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    let _one = one_at_a_time();
    tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        f()
    })
}

/// The guard that tests emitting progress events without a subscriber of
/// their own hold, so that they never run beside a capturing scope of
/// [`with_scoped_subscriber`] (which takes it too; never nest the two).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}
