//! The OpenAI request bodies this server reads (chat and text completions).
//! Unknown fields are ignored, as the OpenAI API and its peers do; the
//! values are checked in [`crate::params`].

use serde::Deserialize;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling and length parameters both endpoints share.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct CommonParams {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    /// `null` is the default (`false`), as for every optional field.
    #[serde(default, deserialize_with = "null_is_false")]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// vLLM's `ignore_eos`: generate until `max_tokens` (or a stop string),
    /// not stopping at the model's end-of-sequence ids. Read as any JSON
    /// value so that a non-boolean is refused naming the field.
    pub ignore_eos: Option<serde_json::Value>,
    /// Chat: `true` for log probabilities (with `top_logprobs`); completions:
    /// the number of alternatives. Read as any JSON value: which form is
    /// allowed depends on the endpoint (`crate::unsupported`).
    pub logprobs: Option<serde_json::Value>,
    /// Chat: alternatives per token (0..=20) with `logprobs: true`.
    pub top_logprobs: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// vLLM's multiplicative penalty over prompt and generated tokens.
    pub repetition_penalty: Option<f64>,
    /// Completions: prepend the prompt to the answer.
    pub echo: Option<bool>,
    /// The caller's end-user id: not used, but it must be a string (a
    /// wrong type is refused naming it like any other field).
    pub user: Option<String>,
}

/// A boolean where `null` means `false`.
fn null_is_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(false))
}

/// A message's `content`: a string or a list of parts (`{"type": "text", "text": ...}`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// A previous assistant turn's reasoning (Qwen templates read it).
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// The same under vLLM's newer name.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// A previous assistant turn's tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<MessageToolCall>>,
    /// A `tool` message: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// One entry of an assistant message's `tool_calls`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MessageToolCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub function: CalledFunction,
}

/// `function` of a tool call: `arguments` is a JSON string (as OpenAI
/// sends it) or an object.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CalledFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ChatRequest {
    /// Read from the same body separately (`crate::body_json`).
    #[serde(skip)]
    pub common: CommonParams,
    pub messages: Vec<ChatMessage>,
    /// Extra variables for the chat template (vLLM's name), e.g. `{"enable_thinking": false}`.
    #[serde(default)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// Shorthand for `chat_template_kwargs.enable_thinking`.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Function definitions, read as template values so that their keys
    /// keep the order the client gave (the template renders them).
    #[serde(default)]
    pub tools: Option<minijinja::Value>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function", "function": {"name": ..}}`.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// Accepted; several calls in one answer are always allowed.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
}

/// A completion's `prompt`: a string, a list of one string, or token ids.
/// Read in one pass by its own visitor (`crate::prompt_de`): an untagged
/// enum would first copy a prompt of tens of thousands of ids into serde's
/// buffer and then try each form on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CompletionRequest {
    /// Read from the same body separately (`crate::body_json`).
    #[serde(skip)]
    pub common: CommonParams,
    pub prompt: Prompt,
}
