//! Shows the progress events of long work (`headroom_core::progress`: target
//! `headroom::progress`, fields `task`, `done`, `total`, `unit`, `message`)
//! as one indicatif progress line per task while stderr is a terminal, and
//! drops them otherwise: a pipe or a log file gets no bars and no lines.
//!
//! Whether stderr is a terminal is decided by the caller ([`ProgressLayer::new`]),
//! so a test can force either side; [`ProgressLayer::with_draw_target`] draws
//! into any indicatif target (a test captures what a terminal would show).

use headroom_core::progress::TARGET;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The fields of one progress event.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProgressEvent {
    pub task: String,
    pub done: u64,
    pub total: u64,
    pub unit: String,
    pub message: String,
}

impl Visit for ProgressEvent {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "done" => self.done = value,
            "total" => self.total = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, value.max(0) as u64);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "task" => self.task = value.to_string(),
            "unit" => self.unit = value.to_string(),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `message` arrives through `record_debug` when given as a format string.
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// Renders progress events as progress lines (or drops them).
pub struct ProgressLayer {
    /// `None`: stderr is not a terminal; every event is dropped.
    multi: Option<MultiProgress>,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl ProgressLayer {
    /// Lines on stderr when `stderr_is_terminal`, nothing otherwise.
    pub fn new(stderr_is_terminal: bool) -> ProgressLayer {
        ProgressLayer::choose(stderr_is_terminal, ProgressDrawTarget::stderr)
    }

    /// Lines drawn into `target()` when `terminal`; otherwise a layer that
    /// drops every event (`target` is not called).
    pub fn choose(terminal: bool, target: impl FnOnce() -> ProgressDrawTarget) -> ProgressLayer {
        if terminal {
            ProgressLayer::with_draw_target(target())
        } else {
            ProgressLayer {
                multi: None,
                bars: Mutex::default(),
            }
        }
    }

    /// Lines drawn into `target`.
    pub fn with_draw_target(target: ProgressDrawTarget) -> ProgressLayer {
        ProgressLayer {
            multi: Some(MultiProgress::with_draw_target(target)),
            bars: Mutex::default(),
        }
    }

    /// Shows one event: creates the task's line on its first event, updates
    /// it, and clears it once `done >= total`.
    pub fn show(&self, e: &ProgressEvent) {
        let Some(multi) = &self.multi else { return };
        let mut bars = self.bars.lock().unwrap_or_else(|p| p.into_inner());
        let bar = bars.entry(e.task.clone()).or_insert_with(|| {
            let bar = ProgressBar::new(e.total)
                .with_style(style(&e.unit))
                .with_message(e.message.clone());
            let bar = multi.add(bar);
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        bar.set_length(e.total);
        bar.set_position(e.done.min(e.total));
        bar.set_message(e.message.clone());
        if e.done >= e.total {
            bar.finish_and_clear();
            multi.remove(bar);
            bars.remove(&e.task);
        }
    }
}

/// `message [bar] 3/10 kernels`, or in bytes for byte counts.
fn style(unit: &str) -> ProgressStyle {
    let counts = if unit == "bytes" {
        "{bytes}/{total_bytes}".to_string()
    } else {
        format!("{{pos}}/{{len}} {}", unit.replace(['{', '}'], ""))
    };
    ProgressStyle::with_template(&format!(
        "{{spinner}} {{msg}} [{{bar:30}}] {counts} ({{elapsed}})"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl<S: Subscriber> Layer<S> for ProgressLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET || self.multi.is_none() {
            return;
        }
        let mut e = ProgressEvent::default();
        event.record(&mut e);
        self.show(&e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::TermLike;
    use std::sync::Arc;
    use tracing_subscriber::layer::SubscriberExt;

    /// A terminal that records what is written to it.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<String>>);

    impl Screen {
        fn text(&self) -> String {
            self.0.lock().unwrap().clone()
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(&format!("{s}\n"));
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Emits a kernel-compilation sequence through the real reporting function.
    fn compile_three() {
        let msg = "compiling 3 kernels for sm_90a (first run on this machine)";
        for done in 0..=3 {
            headroom_core::progress::report("kernels", done, 3, "kernels", msg);
            // indicatif draws at most every few ms: give each state a chance.
            std::thread::sleep(Duration::from_millis(60));
        }
    }

    /// The layer `choose` builds for `terminal`, drawing into a recorded screen.
    fn layer_on(terminal: bool) -> (ProgressLayer, Screen) {
        let screen = Screen::default();
        let target = screen.clone();
        let layer = ProgressLayer::choose(terminal, move || {
            ProgressDrawTarget::term_like(Box::new(target))
        });
        (layer, screen)
    }

    #[test]
    fn a_terminal_shows_the_task_line_with_counts() {
        let (layer, screen) = layer_on(true);
        let subscriber = tracing_subscriber::registry().with(layer);
        headroom_core::progress::with_scoped_subscriber(subscriber, compile_three);
        let text = screen.text();
        assert!(text.contains("compiling 3 kernels for sm_90a"), "{text:?}");
        assert!(text.contains("/3 kernels"), "{text:?}");
    }

    #[test]
    fn not_a_terminal_shows_nothing() {
        let (layer, screen) = layer_on(false);
        let subscriber = tracing_subscriber::registry().with(layer);
        headroom_core::progress::with_scoped_subscriber(subscriber, compile_three);
        assert_eq!(screen.text(), "");
    }

    #[test]
    fn a_finished_task_is_cleared_and_other_events_are_ignored() {
        let (layer, screen) = layer_on(true);
        let mut e = ProgressEvent {
            task: "weights".into(),
            done: 5,
            total: 10,
            unit: "bytes".into(),
            message: "loading".into(),
        };
        layer.show(&e);
        assert_eq!(layer.bars.lock().unwrap().len(), 1);
        e.done = 10;
        layer.show(&e);
        assert!(layer.bars.lock().unwrap().is_empty());
        let subscriber = tracing_subscriber::registry().with(layer);
        headroom_core::progress::with_scoped_subscriber(subscriber, || {
            tracing::info!(task = "x", done = 1u64, total = 2u64, "not progress");
            std::thread::sleep(Duration::from_millis(60));
        });
        assert!(!screen.text().contains("not progress"), "{}", screen.text());
    }

    #[test]
    fn fields_are_read_from_the_event() {
        #[derive(Clone, Default)]
        struct Seen(Arc<Mutex<Vec<ProgressEvent>>>);
        impl<S: Subscriber> Layer<S> for Seen {
            fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
                let mut e = ProgressEvent::default();
                event.record(&mut e);
                self.0.lock().unwrap().push(e);
            }
        }
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry().with(seen.clone());
        headroom_core::progress::with_scoped_subscriber(subscriber, || {
            headroom_core::progress::report("weights", 7, 9, "tensors", "loading model");
        });
        assert_eq!(
            seen.0.lock().unwrap()[0],
            ProgressEvent {
                task: "weights".into(),
                done: 7,
                total: 9,
                unit: "tensors".into(),
                message: "loading model".into(),
            }
        );
    }
}
