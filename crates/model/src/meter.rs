//! A progress meter over `headroom_core::progress`: counts work done towards
//! a known total and reports it at most about a hundred times (each time
//! another percent is done), always at the start and with `done == total`
//! at the end, so a long loop over many small items stays cheap to report.

use headroom_core::progress;

/// One task's progress (see the module doc).
pub(crate) struct Meter {
    task: &'static str,
    unit: &'static str,
    message: String,
    total: u64,
    done: u64,
    /// `done` at the last report.
    reported: u64,
}

impl Meter {
    /// Starts `task` of `total` `unit`s (reports `0 / total`).
    pub(crate) fn start(
        task: &'static str,
        total: u64,
        unit: &'static str,
        message: impl Into<String>,
    ) -> Meter {
        let m = Meter {
            task,
            unit,
            message: message.into(),
            total,
            done: 0,
            reported: 0,
        };
        progress::report(task, 0, total, unit, &m.message);
        m
    }

    /// Adds `n` done (never past the total); reports when another percent is done.
    pub(crate) fn advance(&mut self, n: u64) {
        self.done = self.done.saturating_add(n).min(self.total);
        let step = (self.total / 100).max(1);
        if self.done - self.reported >= step && self.done < self.total {
            self.report();
        }
    }

    /// Reports `total / total`: the task is done.
    pub(crate) fn finish(mut self) {
        self.done = self.total;
        self.report();
    }

    fn report(&mut self) {
        self.reported = self.done;
        progress::report(self.task, self.done, self.total, self.unit, &self.message);
    }
}

#[cfg(test)]
mod tests {
    use crate::weights::write_safetensors;
    use crate::{ModelConfig, Qwen35Model, Weights};
    use headroom_core::progress::TARGET;
    use headroom_cpu::CpuBackend;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    /// One captured progress event.
    #[derive(Debug, Default, Clone, PartialEq)]
    struct Event {
        task: String,
        done: u64,
        total: u64,
        unit: String,
    }

    impl Visit for Event {
        fn record_u64(&mut self, field: &Field, value: u64) {
            match field.name() {
                "done" => self.done = value,
                "total" => self.total = value,
                _ => {}
            }
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            match field.name() {
                "task" => self.task = value.into(),
                "unit" => self.unit = value.into(),
                _ => {}
            }
        }
        fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
    }

    /// Records every event of the progress target.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<Event>>>);

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if event.metadata().target() == TARGET {
                let mut e = Event::default();
                event.record(&mut e);
                self.0.lock().unwrap().push(e);
            }
        }
    }

    /// The progress events `f` emits on this thread, of task `task`.
    fn events_of(task: &str, f: impl FnOnce()) -> Vec<Event> {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        headroom_core::progress::with_scoped_subscriber(subscriber, f);
        let all = capture.0.lock().unwrap().clone();
        all.into_iter().filter(|e| e.task == task).collect()
    }

    /// Starts at 0, never goes back, ends with `done == total`, one total and unit.
    fn check_run(events: &[Event], unit: &str) {
        assert!(events.len() >= 2, "{events:?}");
        assert_eq!(events[0].done, 0);
        let last = events.last().unwrap();
        assert!(last.total > 0 && last.done == last.total, "{last:?}");
        assert!(events.windows(2).all(|w| w[0].done <= w[1].done));
        assert!(events
            .iter()
            .all(|e| e.total == last.total && e.unit == unit));
    }

    #[test]
    fn drawing_synthetic_weights_reports_every_tensor() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let mut n = 0;
        let events = events_of("synthetic", || n = Weights::synthetic(&cfg, 3).len());
        check_run(&events, "tensors");
        assert_eq!(events.last().unwrap().total, n as u64);
    }

    #[test]
    fn loading_a_checkpoint_reports_its_bytes() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let w = Weights::synthetic(&cfg, 3);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let tensors: Vec<(&str, &crate::Tensor)> = w.iter().collect();
        write_safetensors(&path, &tensors).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let events = events_of("checkpoint", || {
            Weights::load(dir.path(), &cfg).unwrap();
        });
        check_run(&events, "bytes");
        assert_eq!(events.last().unwrap().total, size);
        assert!(events.len() > 2, "progress inside the file: {events:?}");
    }

    #[test]
    fn building_a_model_reports_each_layer() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let events = events_of("draw", || {
            Qwen35Model::synthetic(CpuBackend::new(), &cfg, 5).unwrap();
        });
        check_run(&events, "layers");
        assert_eq!(events.len(), cfg.num_hidden_layers + 1);
        let w = Weights::synthetic(&cfg, 5);
        let events = events_of("upload", || {
            Qwen35Model::load(CpuBackend::new(), &cfg, w).unwrap();
        });
        check_run(&events, "layers");
    }
}
