//! A checked request ready to run ([`Job`]): what `crate::app` built from
//! the body and the chat template, read by `crate::completion` (which submits
//! it) and `crate::choice` (each of its choices).

use crate::params::Plan;
use crate::parse::ParserConfig;
use crate::shapes::Head;
use std::time::Instant;

/// A request ready to run.
pub struct Job {
    pub head: Head,
    pub prompt_ids: Vec<u32>,
    pub plan: Plan,
    pub max_tokens: usize,
    pub arrived: Instant,
    /// How a chat request's output is parsed (`None`: all text is content).
    pub parser: Option<ParserConfig>,
}
