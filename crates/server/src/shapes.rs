//! The JSON shapes of responses and stream chunks for both endpoints.

use serde_json::{json, Value};

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

pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt.saturating_add(completion)})
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
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => json!({"index": 0, "text": text.unwrap_or(""),
                                           "logprobs": null, "finish_reason": finish}),
        };
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
