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
/// server's `enable_thinking` unless the request gives one). Under
/// `tool_choice` `required` or a named function the prompt ends with the
/// forced opening of a call (see [`force`]).
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
    let generation_prompt = r.add_generation_prompt.unwrap_or(true);
    let mut text = state
        .template
        .render(&messages, generation_prompt, tools.render.as_ref(), &kwargs)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    // Without a generation prompt the request continues its last message:
    // nothing is forced.
    let forced = match tools.forced {
        Some(f) if generation_prompt => force(&mut text, &f),
        _ => String::new(),
    };
    let reasoning = state.config.reasoning_parser;
    Ok(ChatPrompt {
        ids: encode(state, &text, "messages")?,
        parser: ParserConfig {
            reasoning,
            starts_in_reasoning: reasoning && ParserConfig::prompt_opens_reasoning(&text),
            tools: tools.specs,
            forced,
        },
    })
}

/// Appends `forced` (the opening of a tool call) to the rendered prompt
/// `text` and returns it. A reasoning block the generation prompt left open
/// is closed first, empty, as the family's template writes one with
/// thinking off (`<think>\n\n</think>\n\n`): the call comes after it.
pub fn force(text: &mut String, forced: &str) -> String {
    if ParserConfig::prompt_opens_reasoning(text) {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("\n</think>\n\n");
    }
    text.push_str(forced);
    forced.to_string()
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

#[cfg(test)]
mod tests {
    use super::{chat_prompt, force};
    use crate::fake::{FakeConfig, FakeGenerator};
    use crate::openai::ChatRequest;
    use crate::{AppState, ChatTemplate, ServerConfig};
    use headroom_model::tokenizer::TextCodec;
    use serde_json::json;
    use std::sync::Arc;

    fn state() -> AppState {
        AppState::new(
            Arc::new(FakeGenerator::new(FakeConfig::default())),
            TextCodec::Bytes,
            ChatTemplate::qwen_shaped(),
            ServerConfig::new("fake", 512),
        )
    }

    /// The prompt text of a chat request with one tool and `extra` fields.
    fn prompt(extra: serde_json::Value) -> (String, String) {
        let mut b = json!({"model": "fake", "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r: ChatRequest = serde_json::from_value(b).unwrap();
        let p = chat_prompt(&state(), &r).unwrap();
        (
            TextCodec::Bytes.decode(&p.ids).unwrap(),
            p.parser.forced.clone(),
        )
    }

    #[test]
    fn the_chat_prompt_ends_with_the_forced_opening() {
        let named = json!({"type": "function", "function": {"name": "f"}});
        let (auto, forced) = prompt(json!({}));
        assert!(
            auto.ends_with("<|im_start|>assistant\n<think>\n"),
            "{auto:?}"
        );
        assert_eq!(forced, "");
        let (text, forced) = prompt(json!({"tool_choice": "required"}));
        assert_eq!(text, format!("{auto}\n</think>\n\n<tool_call>\n<function="));
        assert_eq!(forced, "<tool_call>\n<function=");
        let (text, forced) = prompt(json!({"tool_choice": named}));
        assert_eq!(
            text,
            format!("{auto}\n</think>\n\n<tool_call>\n<function=f>\n")
        );
        assert_eq!(forced, "<tool_call>\n<function=f>\n");
        let (text, _) = prompt(json!({"tool_choice": "required", "enable_thinking": false}));
        assert!(
            text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function="),
            "{text:?}"
        );
        // Continuing the last message: nothing is forced.
        let (text, forced) =
            prompt(json!({"tool_choice": "required", "add_generation_prompt": false}));
        assert!(text.ends_with("Hi<|im_end|>\n"), "{text:?}");
        assert_eq!(forced, "");
    }

    #[test]
    fn forcing_closes_an_open_think_block_empty_then_opens_the_call() {
        let call = "<tool_call>\n<function=";
        let mut t = "<|im_start|>assistant\n<think>\n".to_string();
        assert_eq!(force(&mut t, call), call);
        assert_eq!(
            t,
            "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function="
        );
        let mut t = "<|im_start|>assistant\n<think>\n\n</think>\n\n".to_string();
        force(&mut t, call);
        assert_eq!(
            t,
            "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function="
        );
        let mut t = "<|im_start|>assistant\n".to_string();
        force(&mut t, "<tool_call>\n<function=f>\n");
        assert_eq!(t, "<|im_start|>assistant\n<tool_call>\n<function=f>\n");
    }
}
