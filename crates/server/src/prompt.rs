//! A request's prompt ids: a chat request's messages through the chat
//! template then the tokenizer; a completion's text through the tokenizer,
//! or its token ids checked against the vocabulary.

use crate::error::ApiError;
use crate::openai::{ChatRequest, Content, Prompt};
use crate::state::AppState;
use crate::template::TemplateMessage;

/// Renders and encodes a chat request.
pub fn chat_prompt(state: &AppState, r: &ChatRequest) -> Result<Vec<u32>, ApiError> {
    if r.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    let mut messages = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.iter().enumerate() {
        if !matches!(
            m.role.as_str(),
            "system" | "developer" | "user" | "assistant" | "tool"
        ) {
            return Err(ApiError::bad_param(
                "messages",
                format!("messages[{i}].role `{}` is not one of system, developer, user, assistant, tool", m.role),
            ));
        }
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::bad_param(
                                "messages",
                                format!(
                                "messages[{i}]: only text content parts are supported (got `{}`)",
                                p.kind
                            ),
                            ))
                        }
                    }
                }
                text
            }
        };
        let role = if m.role == "developer" {
            "system"
        } else {
            m.role.as_str()
        };
        messages.push(TemplateMessage {
            role: role.to_string(),
            content,
            reasoning_content: m.reasoning_content.clone(),
        });
    }
    let mut kwargs = r.chat_template_kwargs.clone().unwrap_or_default();
    kwargs.remove("messages");
    if let Some(t) = r.enable_thinking {
        kwargs.insert("enable_thinking".into(), t.into());
    }
    let text = state
        .template
        .render(&messages, r.add_generation_prompt.unwrap_or(true), &kwargs)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    encode(state, &text)
}

/// Encodes or checks a completion's prompt.
pub fn completion_prompt(state: &AppState, p: &Prompt) -> Result<Vec<u32>, ApiError> {
    match p {
        Prompt::Text(t) => encode(state, t),
        Prompt::Texts(v) if v.len() == 1 => encode(state, &v[0]),
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

fn encode(state: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
    let ids = state
        .codec
        .encode(text)
        .map_err(|e| ApiError::bad_param("prompt", e.to_string()))?;
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
