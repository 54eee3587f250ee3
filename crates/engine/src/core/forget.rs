//! Forgetting what an engine ran ([`EngineCore::forget_history`]): after a
//! warm-up, the prefix cache, the counters and the request ids go back to
//! where a freshly built engine has them, so real traffic starts from zero.

use super::EngineCore;
use crate::api::EngineStats;
use crate::prefix::BlockPool;
use crate::snapshots::SnapshotPool;
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_model::StepModel;

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// Forgets what ran, while idle: the prefix cache's named blocks and
    /// GDN snapshots, the holds, every counter and the request ids, so the
    /// engine looks as it did when built (a warm-up leaves no trace).
    /// Returns the counters as they were; an error when not idle.
    pub fn forget_history(&mut self) -> Result<EngineStats, EngineError> {
        self.drain_finished()?;
        if !self.is_idle() {
            return Err(EngineError::Config(format!(
                "the engine forgets its history only while idle ({} running, {} waiting)",
                self.running.len(),
                self.waiting.len()
            )));
        }
        let before = self.stats.clone();
        self.clear_holds();
        self.blocks = BlockPool::new(self.blocks.total());
        self.snapshots = SnapshotPool::new(self.pool.slots, self.pool.snapshot_slots);
        self.next_id = 1;
        let st = &mut self.stats;
        (st.admitted, st.refused, st.finished, st.cancelled) = (0, 0, 0, 0);
        (
            st.prompt_tokens,
            st.generated_tokens,
            st.preemptions,
            st.steps,
        ) = (0, 0, 0, 0);
        st.steps_queued_ahead = 0;
        st.prefix_cache_queried_tokens = 0;
        st.prefix_cache_hit_tokens = 0;
        self.refresh_stats();
        Ok(before)
    }
}
