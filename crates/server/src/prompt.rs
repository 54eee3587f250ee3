//! A request's prompt ids: a chat request's messages and tools through the
//! chat template then the tokenizer (with how its output is parsed); a completion's text through the tokenizer,
//! or its token ids checked against the vocabulary.

use crate::error::ApiError;
use crate::history::template_messages;
use crate::openai::{ChatRequest, Prompt};
use crate::parse::ParserConfig;
use crate::state::AppState;
use crate::tools;

/// A chat request's prompt ids and how its output is parsed.
#[derive(Debug)]
pub struct ChatPrompt {
    pub ids: Vec<u32>,
    pub parser: ParserConfig,
}

/// Renders and encodes a chat request (its tools by `tool_choice`, the
/// server's `enable_thinking` unless the request gives one).
pub fn chat_prompt(state: &AppState, r: &ChatRequest) -> Result<ChatPrompt, ApiError> {
    let messages = template_messages(&r.messages)?;
    let tools = tools::plan(r.tools.as_ref(), r.tool_choice.as_ref())?;
    let mut kwargs = r.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(t) = r.enable_thinking {
        kwargs.insert("enable_thinking".into(), t.into());
    }
    if let Some(t) = state.config.enable_thinking {
        kwargs.entry("enable_thinking").or_insert(t.into());
    }
    let text = state
        .template
        .render(
            &messages,
            r.add_generation_prompt.unwrap_or(true),
            tools.render.as_ref(),
            &kwargs,
        )
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    let reasoning = state.config.reasoning_parser;
    Ok(ChatPrompt {
        ids: encode(state, &text, "messages")?,
        parser: ParserConfig {
            reasoning,
            starts_in_reasoning: reasoning && ParserConfig::prompt_opens_reasoning(&text),
            tools: tools.specs,
        },
    })
}

/// Encodes or checks a completion's prompt.
pub fn completion_prompt(state: &AppState, p: &Prompt) -> Result<Vec<u32>, ApiError> {
    match p {
        Prompt::Text(t) => encode(state, t, "prompt"),
        Prompt::Texts(v) if v.len() == 1 => encode(state, &v[0], "prompt"),
        Prompt::Texts(v) => Err(ApiError::bad_param(
            "prompt",
            format!("one prompt per request is supported (got {})", v.len()),
        )),
        Prompt::Ids(ids) => {
            let vocab = state.config.vocab_size;
            if let Some(pos) = ids.iter().position(|&id| id as usize >= vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!(
                        "token id {} at position {pos} is out of range (vocab_size {vocab})",
                        ids[pos]
                    ),
                ));
            }
            non_empty(ids.clone())
        }
    }
}

/// Encodes `text` (the request's `param`); an id the tokenizer gives outside
/// the model's vocabulary (tokenizer and model disagree) is a 400, never
/// sent to the engine.
fn encode(state: &AppState, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    let ids = state
        .codec
        .encode(text)
        .map_err(|e| ApiError::bad_param(param, e.to_string()))?;
    let vocab = state.config.vocab_size;
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::bad_param(
            param,
            format!(
                "the text encodes to token id {id}, outside the model's vocabulary of {vocab} \
                 (the tokenizer knows more tokens than the model)"
            ),
        ));
    }
    non_empty(ids)
}

fn non_empty(ids: Vec<u32>) -> Result<Vec<u32>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::bad_param(
            "prompt",
            "the prompt encodes to no tokens",
        ));
    }
    Ok(ids)
}
