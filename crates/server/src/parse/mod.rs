//! Parsing the model's output as it streams: `<think>…</think>` becomes
//! reasoning, `<tool_call>…</tool_call>` blocks in the Qwen XML form become
//! tool calls (arguments converted by the tool's JSON schema), everything
//! else is content.
//!
//! * [`split`] — the streaming state machine ([`OutputParser`]): fed text
//!   piece by piece, it gives the same events for every split of the same text;
//! * [`call`] — one `<tool_call>` block decoded against the request's tools;
//! * [`convert`] — a parameter's text converted by its JSON schema.

pub mod call;
pub mod convert;
pub mod split;

pub use call::{CallError, ToolCall, ToolSpec};
pub use split::{OutputParser, ParserConfig};

/// One piece of parsed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Text of the model's reasoning (inside `<think>…</think>`).
    Reasoning(String),
    /// Text for the user (`content`), including tool-call blocks that did not decode.
    Content(String),
    /// A decoded tool call.
    ToolCall(ToolCall),
}

/// Appends `e` to `out`, merging text with a preceding event of the same kind
/// and dropping empty text.
pub fn push_event(out: &mut Vec<Event>, e: Event) {
    match (out.last_mut(), e) {
        (_, Event::Reasoning(t) | Event::Content(t)) if t.is_empty() => {}
        (Some(Event::Reasoning(a)), Event::Reasoning(b)) => a.push_str(&b),
        (Some(Event::Content(a)), Event::Content(b)) => a.push_str(&b),
        (_, e) => out.push(e),
    }
}

#[cfg(test)]
mod tests;
