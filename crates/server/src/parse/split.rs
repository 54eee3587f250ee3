//! The streaming output parser. Text arrives in pieces cut anywhere (token
//! boundaries); text that could still be the start of a tag is held back
//! until the next piece decides it, so every split of the same text gives
//! the same events (once adjacent text events are merged).
//!
//! * Reasoning: from `<think>` (or from the start, when the prompt left a
//!   `<think>` open) to `</think>`, or to a `<tool_call>`, which also ends it.
//!   `<think>` is a tag only before any content or tool call.
//! * Tool calls (only when the request has tools): `<tool_call>` to
//!   `</tool_call>`, decoded by [`super::call::decode`]; a block that does
//!   not decode, or is still open at the end, is returned whole as content.
//! * Content: the rest. Whitespace between a content run and a tag
//!   (`</think>`, `<tool_call>`, `</tool_call>`) is dropped, so `</think>\n\n`
//!   leaves no blank content; whitespace at the very start and end is kept.

use super::call::{decode, ToolSpec};
use super::{push_event, Event};

const THINK: &str = "<think>";
const THINK_END: &str = "</think>";
const CALL: &str = "<tool_call>";
const CALL_END: &str = "</tool_call>";

/// What one request's parser recognises.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParserConfig {
    /// Separate `<think>…</think>` into reasoning.
    pub reasoning: bool,
    /// The output starts inside reasoning (the prompt ends with an open `<think>`).
    pub starts_in_reasoning: bool,
    /// The functions the model may call; empty: tool calls are not parsed.
    pub tools: Vec<ToolSpec>,
    /// Text the prompt forced as the start of the output (a tool call's
    /// opening under `tool_choice` `required` or a named function): parsed
    /// before the model's output, as if the model had written it.
    pub forced: String,
}

impl ParserConfig {
    /// Whether `prompt` leaves a `<think>` open (its last `<think>` is after its last `</think>`).
    pub fn prompt_opens_reasoning(prompt: &str) -> bool {
        match (prompt.rfind(THINK), prompt.rfind(THINK_END)) {
            (Some(open), Some(close)) => open > close,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Reasoning,
    Call,
}

/// Splits one request's output into [`Event`]s.
#[derive(Debug, Clone)]
pub struct OutputParser {
    cfg: ParserConfig,
    mode: Mode,
    /// Text not yet decided.
    pending: String,
    /// `<think>` may still open reasoning.
    think_allowed: bool,
    /// The next content follows a tag: its leading whitespace is dropped.
    after_tag: bool,
    /// Tool calls decoded so far.
    calls: usize,
}

impl OutputParser {
    pub fn new(cfg: ParserConfig) -> OutputParser {
        let reasoning = cfg.reasoning && cfg.starts_in_reasoning;
        OutputParser {
            mode: if reasoning {
                Mode::Reasoning
            } else {
                Mode::Content
            },
            think_allowed: cfg.reasoning && !reasoning,
            pending: cfg.forced.clone(),
            cfg,
            after_tag: false,
            calls: 0,
        }
    }

    /// Tool calls decoded so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Adds `text`; returns the events it decided.
    pub fn feed(&mut self, text: &str) -> Vec<Event> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        self.run(false, &mut out);
        out
    }

    /// The end of the output: everything still held back.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        self.run(true, &mut out);
        out
    }

    fn tools_on(&self) -> bool {
        !self.cfg.tools.is_empty()
    }

    fn run(&mut self, end: bool, out: &mut Vec<Event>) {
        loop {
            let progressed = match self.mode {
                Mode::Reasoning => self.reasoning(end, out),
                Mode::Content => self.content(end, out),
                Mode::Call => self.call(end, out),
            };
            if !progressed {
                return;
            }
        }
    }

    /// Drains `n` bytes of `pending`, returning them.
    fn take(&mut self, n: usize) -> String {
        let rest = self.pending.split_off(n);
        std::mem::replace(&mut self.pending, rest)
    }

    /// Returns true when it changed mode (the loop goes on).
    fn reasoning(&mut self, end: bool, out: &mut Vec<Event>) -> bool {
        let mut tags = vec![THINK_END];
        if self.tools_on() {
            tags.push(CALL);
        }
        if let Some((at, tag)) = earliest(&self.pending, &tags) {
            let text = self.take(at);
            push_event(out, Event::Reasoning(text));
            self.take(tag.len());
            self.mode = if tag == CALL {
                Mode::Call
            } else {
                Mode::Content
            };
            self.after_tag = true;
            return true;
        }
        let hold = if end { 0 } else { held(&self.pending, &tags) };
        let text = self.take(self.pending.len() - hold);
        push_event(out, Event::Reasoning(text));
        false
    }

    fn content(&mut self, end: bool, out: &mut Vec<Event>) -> bool {
        let mut tags = Vec::new();
        if self.tools_on() {
            tags.push(CALL);
        }
        if self.think_allowed {
            tags.push(THINK);
        }
        let found = earliest(&self.pending, &tags)
            .filter(|&(at, tag)| tag != THINK || self.pending[..at].trim().is_empty());
        // A `<think>` after content is text; look again for a call alone.
        let found =
            found.or_else(|| earliest(&self.pending, &tags[..usize::from(self.tools_on())]));
        if let Some((at, tag)) = found {
            let text = self.take(at);
            self.emit_content(text.trim_end(), out);
            self.take(tag.len());
            self.think_allowed = false;
            self.mode = if tag == CALL {
                Mode::Call
            } else {
                Mode::Reasoning
            };
            self.after_tag = true;
            return true;
        }
        let cut = if end {
            self.pending.len()
        } else {
            let hold = held(&self.pending, &tags);
            let keep = self.pending.len() - hold;
            self.pending[..keep].trim_end().len()
        };
        let text = self.take(cut);
        self.emit_content(&text, out);
        false
    }

    /// Content text: leading whitespace after a tag dropped; any other
    /// text closes the window in which `<think>` opens reasoning.
    fn emit_content(&mut self, text: &str, out: &mut Vec<Event>) {
        let text = if self.after_tag {
            text.trim_start()
        } else {
            text
        };
        if !text.trim().is_empty() {
            self.think_allowed = false;
        }
        if !text.is_empty() {
            self.after_tag = false;
            push_event(out, Event::Content(text.to_string()));
        }
    }

    fn call(&mut self, end: bool, out: &mut Vec<Event>) -> bool {
        if let Some(at) = self.pending.find(CALL_END) {
            let block = self.take(at);
            self.take(CALL_END.len());
            match decode(&block, &self.cfg.tools) {
                Ok(call) => {
                    self.calls += 1;
                    push_event(out, Event::ToolCall(call));
                }
                Err(e) => {
                    tracing::debug!("a tool call did not decode ({e}); returned as content");
                    let raw = format!("{CALL}{block}{CALL_END}");
                    push_event(out, Event::Content(raw));
                }
            }
            self.mode = Mode::Content;
            self.after_tag = true;
            return true;
        }
        if end {
            let block = self.take(self.pending.len());
            tracing::debug!("a tool call was still open at the end; returned as content");
            push_event(out, Event::Content(format!("{CALL}{block}")));
        }
        false
    }
}

/// The first of `tags` in `text` (the earliest position; ties to the first listed).
fn earliest<'t>(text: &str, tags: &[&'t str]) -> Option<(usize, &'t str)> {
    tags.iter()
        .filter_map(|&t| text.find(t).map(|at| (at, t)))
        .min_by_key(|&(at, _)| at)
}

/// Bytes at the end of `text` that could be the start of one of `tags`.
fn held(text: &str, tags: &[&str]) -> usize {
    tags.iter()
        .map(|tag| {
            (1..tag.len())
                .rev()
                .find(|&k| k <= text.len() && text.ends_with(&tag[..k]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}
