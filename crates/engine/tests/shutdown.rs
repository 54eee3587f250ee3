//! `EngineHandle::shutdown_and_wait` joins the loop thread and drops the model
//! before it returns (a tensor-parallel group's NCCL communicators and device
//! memory must not be torn down by a detached thread while the process exits).

mod common;

use common::{ids, tiny};
use headroom_core::ops::{Backend, Batch};
use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_engine::{spawn, EngineConfig, GenerateRequest, StreamEvent};
use headroom_model::{LogitsRows, ModelError, Qwen35Model, StepModel, StepOutput};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A model that raises `dropped` when it is dropped, after a pause that makes
/// a detached teardown observable.
struct Flagged {
    inner: Qwen35Model<CpuBackend>,
    dropped: Arc<AtomicBool>,
}

impl Drop for Flagged {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl StepModel<CpuBackend> for Flagged {
    type State = <Qwen35Model<CpuBackend> as StepModel<CpuBackend>>::State;

    fn lead(&self) -> &Qwen35Model<CpuBackend> {
        &self.inner
    }
    fn world(&self) -> usize {
        1
    }
    fn rank_memory(&self) -> Vec<(usize, usize)> {
        vec![self.inner.backend().memory()]
    }
    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        StepModel::new_state(&self.inner, slots, capacity, kv_blocks)
    }
    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        StepModel::reset_slot(&self.inner, state, slot)
    }
    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        StepModel::copy_state_slot(&self.inner, state, from, to)
    }
    fn step(
        &self,
        state: &mut Self::State,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<CpuBackend>, ModelError> {
        StepModel::step(&self.inner, state, ids, batch, routes, rows)
    }
}

#[test]
fn shutdown_and_wait_returns_after_the_model_is_dropped() {
    let dropped = Arc::new(AtomicBool::new(false));
    let model = Flagged {
        inner: tiny("tiny-d64"),
        dropped: dropped.clone(),
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
