//! Bounds on rendering one chat template ([`TemplateLimits`]): minijinja's
//! fuel (instructions executed), a wall-clock deadline and a cap on the
//! rendered text, both checked by the writer the template renders into
//! ([`Bounded`]). The server also renders off the async workers and stops
//! waiting at the deadline (`crate::app`).

use std::time::{Duration, Instant};

/// How much one render may do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TemplateLimits {
    /// Most template instructions (minijinja fuel).
    pub fuel: u64,
    /// Most wall-clock time.
    pub time: Duration,
    /// Most bytes of rendered text.
    pub max_output_bytes: usize,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        TemplateLimits {
            fuel: 20_000_000,
            time: Duration::from_secs(5),
            max_output_bytes: 32 << 20,
        }
    }
}

impl TemplateLimits {
    /// The message of a render stopped by `limit`.
    pub fn exceeded(&self, limit: Limit) -> String {
        match limit {
            Limit::Fuel => format!(
                "the chat template exceeded its fuel limit of {} instructions",
                self.fuel
            ),
            Limit::Time => format!(
                "the chat template exceeded its time limit of {} s",
                self.time.as_secs_f64()
            ),
            Limit::Output => format!(
                "the chat template exceeded its output limit of {} bytes",
                self.max_output_bytes
            ),
        }
    }
}

/// Which bound stopped a render.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Fuel,
    Time,
    Output,
}

/// The rendered text, refusing writes past the deadline or the size cap.
pub struct Bounded {
    pub buf: Vec<u8>,
    deadline: Instant,
    max_bytes: usize,
    pub stopped: Option<Limit>,
}

impl Bounded {
    pub fn new(limits: &TemplateLimits) -> Bounded {
        Bounded {
            buf: Vec::new(),
            deadline: Instant::now() + limits.time,
            max_bytes: limits.max_output_bytes,
            stopped: None,
        }
    }
}

impl std::io::Write for Bounded {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.max_bytes {
            self.stopped = Some(Limit::Output);
        } else if Instant::now() > self.deadline {
            self.stopped = Some(Limit::Time);
        }
        if self.stopped.is_some() {
            return Err(std::io::Error::other("template limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
