//! The JSON shapes of responses and stream chunks for both endpoints: a
//! chat message with `content`, `reasoning_content` (also as `reasoning`)
//! and `tool_calls`; stream chunks with one `delta` each.

use crate::parse::{Event, ToolCall};
use serde_json::{json, Map, Value};

/// Which endpoint a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completion => "completion",
        }
    }
}

/// What every response of one request carries.
#[derive(Debug, Clone)]
pub struct Head {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// A chat answer collected from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatReply {
    pub content: String,
    pub reasoning: String,
    /// `{"id", "type": "function", "function": {"name", "arguments"}}` each.
    pub tool_calls: Vec<Value>,
}

/// A tool call as OpenAI returns it.
pub fn tool_call_json(id: &str, call: &ToolCall) -> Value {
    json!({"id": id, "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}})
}

/// OpenAI's usage object; `cached` prompt tokens came from the prefix cache.
pub fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt.saturating_add(completion),
           "prompt_tokens_details": {"cached_tokens": cached}})
}

impl Head {
    fn object(&self, stream: bool) -> &'static str {
        match (self.endpoint, stream) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    /// The whole (non-streamed) response.
    pub fn response(&self, text: &str, finish: &str, usage: Value) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                                     "logprobs": null, "finish_reason": finish}),
            Endpoint::Completion => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
        };
        json!({"id": self.id, "object": self.object(false), "created": self.created,
               "model": self.model, "choices": [choice], "usage": usage})
    }

    /// The whole chat response: `content` is null when empty beside
    /// reasoning or tool calls; `reasoning_content` / `reasoning` and
    /// `tool_calls` appear when there are some.
    pub fn chat_response(&self, reply: &ChatReply, finish: &str, usage: Value) -> Value {
        let mut msg = Map::new();
        msg.insert("role".into(), "assistant".into());
        let bare = reply.content.is_empty()
            && (!reply.reasoning.is_empty() || !reply.tool_calls.is_empty());
        msg.insert(
            "content".into(),
            if bare {
                Value::Null
            } else {
                reply.content.clone().into()
            },
        );
        if !reply.reasoning.is_empty() {
            msg.insert("reasoning_content".into(), reply.reasoning.clone().into());
            msg.insert("reasoning".into(), reply.reasoning.clone().into());
        }
        if !reply.tool_calls.is_empty() {
            msg.insert("tool_calls".into(), reply.tool_calls.clone().into());
        }
        let choice = json!({"index": 0, "message": msg, "logprobs": null, "finish_reason": finish});
        json!({"id": self.id, "object": self.object(false), "created": self.created,
               "model": self.model, "choices": [choice], "usage": usage})
    }

    /// The whole response of several choices (each with its `index`).
    pub fn combine(&self, choices: Vec<Value>, usage: Value) -> Value {
        json!({"id": self.id, "object": self.object(false), "created": self.created,
               "model": self.model, "choices": choices, "usage": usage})
    }

    /// The id of the request's `index`-th tool call (unique to the request).
    pub fn tool_call_id(&self, index: usize) -> String {
        let n = self.id.rsplit('-').next().unwrap_or_default();
        format!("call_{:x}{n}x{index}", self.created)
    }

    /// The chat delta of one parsed event; `calls` counts the tool calls
    /// sent before it (the call's `index`).
    pub fn event_delta(&self, e: &Event, calls: usize) -> Map<String, Value> {
        let mut delta = Map::new();
        match e {
            Event::Content(t) => {
                delta.insert("content".into(), t.clone().into());
            }
            Event::Reasoning(t) => {
                delta.insert("reasoning_content".into(), t.clone().into());
                delta.insert("reasoning".into(), t.clone().into());
            }
            Event::ToolCall(c) => {
                let mut call = tool_call_json(&self.tool_call_id(calls), c);
                call["index"] = calls.into();
                delta.insert("tool_calls".into(), json!([call]));
            }
        }
        delta
    }

    /// One chat stream chunk of `delta` (`role` added to the first).
    pub fn delta_chunk(
        &self,
        mut delta: Map<String, Value>,
        first: bool,
        finish: Option<&str>,
        with_usage: bool,
    ) -> Value {
        if first {
            delta.insert("role".into(), "assistant".into());
        }
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        self.wrap_chunk(choice, with_usage)
    }

    /// One stream chunk: `text` (for chat, `role` is sent in the first
    /// chunk), and the finish reason on the last.
    pub fn chunk(
        &self,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        with_usage: bool,
    ) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let mut delta = Map::new();
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                return self.delta_chunk(delta, first, finish, with_usage);
            }
            Endpoint::Completion => json!({"index": 0, "text": text.unwrap_or(""),
                                           "logprobs": null, "finish_reason": finish}),
        };
        self.wrap_chunk(choice, with_usage)
    }

    fn wrap_chunk(&self, choice: Value, with_usage: bool) -> Value {
        let mut v = json!({"id": self.id, "object": self.object(true), "created": self.created,
                           "model": self.model, "choices": [choice]});
        if with_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The final usage chunk of `stream_options.include_usage` (no choices).
    pub fn usage_chunk(&self, usage: Value) -> Value {
        json!({"id": self.id, "object": self.object(true), "created": self.created,
               "model": self.model, "choices": [], "usage": usage})
    }
}
