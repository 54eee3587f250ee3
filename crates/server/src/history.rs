//! A chat request's messages as the chat template sees them: roles checked
//! (`developer` read as `system`), text parts joined, an assistant turn's
//! `tool_calls` with their JSON-string `arguments` parsed into mappings
//! (keys in the order written, as transformers' templates expect), `tool`
//! messages with their `tool_call_id`, reasoning under `reasoning_content`.

use crate::error::ApiError;
use crate::openai::{ChatMessage, Content, MessageToolCall};
use crate::template::TemplateMessage;
use minijinja::value::{Value, ValueKind};
use std::collections::BTreeMap;

/// The template's view of `messages`.
pub fn template_messages(messages: &[ChatMessage]) -> Result<Vec<TemplateMessage>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect()
}

fn message(i: usize, m: &ChatMessage) -> Result<TemplateMessage, ApiError> {
    if !matches!(
        m.role.as_str(),
        "system" | "developer" | "user" | "assistant" | "tool"
    ) {
        return Err(ApiError::bad_param(
            "messages",
            format!(
                "messages[{i}].role `{}` is not one of system, developer, user, assistant, tool",
                m.role
            ),
        ));
    }
    let content = match &m.content {
        // Only an assistant turn may leave its content out (it made tool calls).
        None if m.role != "assistant" => {
            return Err(ApiError::bad_param(
                "messages",
                format!("messages[{i}].content: a {} message needs content", m.role),
            ))
        }
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
    let tool_calls = match &m.tool_calls {
        Some(calls) if m.role == "assistant" && !calls.is_empty() => Some(
            calls
                .iter()
                .enumerate()
                .map(|(j, c)| tool_call(i, j, c))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(calls) if !calls.is_empty() => {
            return Err(ApiError::bad_param(
                "messages",
                format!("messages[{i}]: only assistant messages carry tool_calls"),
            ))
        }
        _ => None,
    };
    let role = if m.role == "developer" {
        "system"
    } else {
        m.role.as_str()
    };
    Ok(TemplateMessage {
        role: role.to_string(),
        content,
        reasoning_content: m.reasoning_content.clone().or_else(|| m.reasoning.clone()),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
    })
}

/// `{"id", "type": "function", "function": {"name", "arguments": mapping}}`.
fn tool_call(i: usize, j: usize, c: &MessageToolCall) -> Result<Value, ApiError> {
    let bad = |why: String| {
        ApiError::bad_param("messages", format!("messages[{i}].tool_calls[{j}]: {why}"))
    };
    if c.kind.as_deref().is_some_and(|k| k != "function") {
        return Err(bad("type must be \"function\"".into()));
    }
    let arguments: Value = match &c.function.arguments {
        None | Some(serde_json::Value::Null) => Value::from(BTreeMap::<String, Value>::new()),
        Some(serde_json::Value::String(s)) if s.trim().is_empty() => {
            Value::from(BTreeMap::<String, Value>::new())
        }
        Some(serde_json::Value::String(s)) => {
            serde_json::from_str(s).map_err(|e| bad(format!("arguments are not JSON ({e})")))?
        }
        Some(other) => {
            serde_json::from_value(other.clone()).map_err(|e| bad(format!("arguments: {e}")))?
        }
    };
    if arguments.kind() != ValueKind::Map {
        return Err(bad("arguments must be a JSON object".into()));
    }
    let mut function = BTreeMap::new();
    function.insert("name", Value::from(c.function.name.clone()));
    function.insert("arguments", arguments);
    let mut call = BTreeMap::new();
    call.insert("id", Value::from(c.id.clone().unwrap_or_default()));
    call.insert("type", Value::from("function"));
    call.insert("function", Value::from(function));
    Ok(Value::from(call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Vec<ChatMessage> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tool_calls_and_tool_messages_reach_the_template() {
        let m = template_messages(&parse(json!([
            {"role": "developer", "content": "S"},
            {"role": "assistant", "content": null, "reasoning": "r", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [true]}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "42"}]}
        ])))
        .unwrap();
        assert_eq!(m[0].role, "system");
        assert_eq!(m[1].reasoning_content.as_deref(), Some("r"));
        assert_eq!(m[1].content, "");
        let call = &m[1].tool_calls.as_ref().unwrap()[0];
        assert_eq!(
            call.get_attr("function")
                .unwrap()
                .get_attr("name")
                .unwrap()
                .as_str(),
            Some("f")
        );
        let args = call
            .get_attr("function")
            .unwrap()
            .get_attr("arguments")
            .unwrap();
        let keys: Vec<String> = args.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["z", "a"], "the order written is kept");
        assert_eq!((m[2].role.as_str(), m[2].content.as_str()), ("tool", "42"));
        assert_eq!(m[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn bad_messages_are_refused() {
        for bad in [
            json!([]),
            json!([{"role": "robot", "content": "x"}]),
            json!([{"role": "user", "content": [{"type": "image_url"}]}]),
            json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]),
            json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]),
            json!([{"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f"}}]}]),
            json!([{"role": "user", "tool_calls": [{"function": {"name": "f"}}]}]),
            json!([{"role": "user"}]),
            json!([{"role": "system", "content": null}, {"role": "user", "content": "x"}]),
        ] {
            let e = template_messages(&parse(bad.clone())).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("messages"), "{bad}");
        }
    }
}
