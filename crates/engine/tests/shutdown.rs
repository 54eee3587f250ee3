//! `EngineHandle::shutdown_and_wait` joins the loop thread and drops the model
//! before it returns (a tensor-parallel group's NCCL communicators and device
//! memory must not be torn down by a detached thread while the process exits).

mod common;

use common::{ids, tiny};
use headroom_cpu::CpuBackend;
use headroom_engine::{spawn, EngineConfig, GenerateRequest, StreamEvent};
use headroom_model::step_model::{ForwardingStepModel, StepHook};
use headroom_model::ModelError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A step hook that raises `dropped` when it is dropped (after the model it
/// wraps), after a pause that makes a detached teardown observable.
struct Flag {
    dropped: Arc<AtomicBool>,
}

impl Drop for Flag {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl StepHook for Flag {
    fn before_step(&self) -> Result<(), ModelError> {
        Ok(())
    }
}

#[test]
fn shutdown_and_wait_returns_after_the_model_is_dropped() {
    let dropped = Arc::new(AtomicBool::new(false));
    let model = ForwardingStepModel {
        inner: tiny("tiny-d64"),
        hook: Flag {
            dropped: dropped.clone(),
        },
    };
    let h = spawn::<CpuBackend, _>(model, EngineConfig::default()).unwrap();
    let mut s = h
        .submit(GenerateRequest::greedy(ids(20, 512, 3), 4))
        .unwrap();
    let mut tokens = 0;
    while let Some(ev) = s.blocking_next() {
        match ev {
            StreamEvent::Logprobs(_) => {}
            StreamEvent::Token(_) => tokens += 1,
            StreamEvent::Finished { .. } => break,
            StreamEvent::Error(e) => panic!("{e}"),
        }
    }
    assert_eq!(tokens, 4);
    assert!(!h.is_stopped(), "the loop runs until shut down");
    let clone = h.clone();
    h.shutdown_and_wait();
    assert!(
        dropped.load(Ordering::SeqCst),
        "the model was dropped before shutdown_and_wait returned"
    );
    assert!(h.is_stopped() && clone.is_stopped());
    // A second call (from a clone) returns at once; submitting is refused.
    clone.shutdown_and_wait();
    assert!(clone
        .submit(GenerateRequest::greedy(ids(5, 512, 1), 1))
        .is_err());
}
