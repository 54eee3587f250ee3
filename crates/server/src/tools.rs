//! A chat request's `tools` and `tool_choice`, checked and turned into what
//! the chat template renders and what the output parser decodes:
//!
//! * `none`: no tools rendered, none parsed (tool-call text is content);
//! * `auto` (the default with tools): all rendered and parsed;
//! * `required`: all rendered and parsed, and the assistant turn forced to
//!   open a call (`<tool_call>\n<function=`: the model picks the name);
//! * a named function: only that tool rendered and parsed, and the turn
//!   forced to open a call of it (`<tool_call>\n<function=NAME>\n`).
//!
//! The forced text ([`ToolPlan::forced`]) is appended to the prompt after
//! the template's generation prompt (see `crate::prompt`) and fed to the
//! output parser before the model's output, so the answer is a normal call.

use crate::error::ApiError;
use crate::parse::ToolSpec;
use minijinja::value::{Value, ValueKind};
use serde_json::Value as Json;

/// The tools of one request.
#[derive(Debug, Clone, Default)]
pub struct ToolPlan {
    /// The `tools` the template sees (`None`: none).
    pub render: Option<Value>,
    /// The functions the output parser accepts (empty: calls are not parsed).
    pub specs: Vec<ToolSpec>,
    /// The text the assistant turn must start with (`required` or a named
    /// function), or `None`.
    pub forced: Option<String>,
}

/// The opening of a tool call in the family's XML form, up to the function name.
pub const CALL_OPEN: &str = "<tool_call>\n<function=";

enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

/// Checks `tools` and `tool_choice`.
pub fn plan(tools: Option<&Value>, choice: Option<&Json>) -> Result<ToolPlan, ApiError> {
    let defs: Vec<Value> = match tools {
        None => Vec::new(),
        Some(v) if v.is_none() => Vec::new(),
        Some(v) if v.kind() == ValueKind::Seq => v
            .try_iter()
            .map_err(|e| ApiError::bad_param("tools", e.to_string()))?
            .collect(),
        Some(_) => return Err(ApiError::bad_param("tools", "tools must be a list")),
    };
    let mut specs = Vec::with_capacity(defs.len());
    for (i, d) in defs.iter().enumerate() {
        let json = serde_json::to_value(d)
            .map_err(|e| ApiError::bad_param("tools", format!("tools[{i}]: {e}")))?;
        let spec = ToolSpec::from_definition(&json)
            .map_err(|e| ApiError::bad_param("tools", format!("tools[{i}]: {e}")))?;
        if specs.iter().any(|s: &ToolSpec| s.name == spec.name) {
            return Err(ApiError::bad_param(
                "tools",
                format!("tools[{i}]: function `{}` is defined twice", spec.name),
            ));
        }
        specs.push(spec);
    }
    let choice = match choice {
        None | Some(Json::Null) if specs.is_empty() => Choice::None,
        None | Some(Json::Null) => Choice::Auto,
        Some(Json::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!(
                        "tool_choice must be none, auto, required or a function (got `{other}`)"
                    ),
                ))
            }
        },
        Some(obj @ Json::Object(_)) => {
            let name = obj
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Json::as_str)
                .filter(|_| obj.get("type").and_then(Json::as_str) == Some("function"))
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "tool_choice",
                        "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
            Choice::Named(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::bad_param(
                "tool_choice",
                "tool_choice must be a string or an object",
            ))
        }
    };
    if specs.is_empty() && matches!(choice, Choice::Required | Choice::Named(_)) {
        return Err(ApiError::bad_param(
            "tool_choice",
            "tool_choice names tools but the request has no tools",
        ));
    }
    Ok(match choice {
        Choice::None => ToolPlan::default(),
        Choice::Auto | Choice::Required if specs.is_empty() => ToolPlan::default(),
        Choice::Auto => ToolPlan {
            render: Some(Value::from(defs)),
            specs,
            forced: None,
        },
        Choice::Required => ToolPlan {
            render: Some(Value::from(defs)),
            specs,
            forced: Some(CALL_OPEN.to_string()),
        },
        Choice::Named(name) => {
            let Some(i) = specs.iter().position(|s| s.name == name) else {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!("tool_choice names `{name}`, which is not one of the tools"),
                ));
            };
            ToolPlan {
                render: Some(Value::from(vec![defs[i].clone()])),
                specs: vec![specs.swap_remove(i)],
                forced: Some(format!("{CALL_OPEN}{name}>\n")),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(names: &[&str]) -> Value {
        let defs: Vec<Json> = names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n}}))
            .collect();
        serde_json::from_value(Json::Array(defs)).unwrap()
    }

    fn names(p: &ToolPlan) -> Vec<String> {
        p.specs.iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn each_choice_renders_and_parses_its_tools() {
        let t = tools(&["a", "b"]);
        let p = plan(Some(&t), None).unwrap();
        assert_eq!(names(&p), ["a", "b"]);
        assert_eq!(p.render.as_ref().map(|r| r.len()), Some(Some(2)));
        assert_eq!(p.forced, None);
        let p = plan(Some(&t), Some(&json!("auto"))).unwrap();
        assert_eq!(p.forced, None);
        let p = plan(Some(&t), Some(&json!("required"))).unwrap();
        assert_eq!(names(&p), ["a", "b"]);
        assert_eq!(p.forced.as_deref(), Some("<tool_call>\n<function="));
        let p = plan(Some(&t), Some(&json!("none"))).unwrap();
        assert!(p.render.is_none() && p.specs.is_empty() && p.forced.is_none());
        let named = json!({"type": "function", "function": {"name": "b"}});
        let p = plan(Some(&t), Some(&named)).unwrap();
        assert_eq!(names(&p), ["b"]);
        assert_eq!(p.forced.as_deref(), Some("<tool_call>\n<function=b>\n"));
        let r = p.render.unwrap();
        assert_eq!(r.len(), Some(1));
        assert_eq!(
            r.get_item_by_index(0)
                .unwrap()
                .get_attr("function")
                .unwrap()
                .get_attr("name")
                .unwrap()
                .as_str(),
            Some("b")
        );
        let p = plan(None, Some(&json!("auto"))).unwrap();
        assert!(p.render.is_none() && p.specs.is_empty());
        let p = plan(Some(&tools(&[])), None).unwrap();
        assert!(p.render.is_none());
    }

    #[test]
    fn bad_tools_and_choices_are_refused_naming_the_parameter() {
        let t = tools(&["a"]);
        let cases: Vec<(Option<Value>, Option<Json>, &str)> = vec![
            (Some(Value::from(3)), None, "tools"),
            (Some(tools(&["a", "a"])), None, "tools"),
            (
                Some(serde_json::from_value(json!([{"type": "function"}])).unwrap()),
                None,
                "tools",
            ),
            (Some(t.clone()), Some(json!("sometimes")), "tool_choice"),
            (Some(t.clone()), Some(json!(7)), "tool_choice"),
            (
                Some(t.clone()),
                Some(json!({"type": "function", "function": {"name": "z"}})),
                "tool_choice",
            ),
            (
                Some(t.clone()),
                Some(json!({"function": {"name": "a"}})),
                "tool_choice",
            ),
            (None, Some(json!("required")), "tool_choice"),
        ];
        for (tools, choice, param) in cases {
            let e = plan(tools.as_ref(), choice.as_ref()).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.param.as_deref()),
                (400, Some(param)),
                "{}",
                e.message
            );
        }
    }
}

#[cfg(test)]
mod order_tests {
    use crate::openai::ChatRequest;

    #[test]
    fn a_request_body_keeps_the_order_of_its_tools_keys() {
        let r: ChatRequest = serde_json::from_str(
            r#"{"model": "m", "messages": [], "tools": [{"type": "function",
                "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]}"#,
        )
        .unwrap();
        let tool = r.tools.unwrap().get_item_by_index(0).unwrap();
        let keys: Vec<String> = tool.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["type", "function"]);
        let f = tool.get_attr("function").unwrap();
        let keys: Vec<String> = f.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["name", "description", "parameters"]);
    }

    #[test]
    fn the_servers_body_parser_keeps_the_order_of_tools_keys_too() {
        let r: ChatRequest = crate::body_json::parse_request(
            br#"{"model": "m", "messages": [], "tools": [{"type": "function",
                "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]}"#,
        )
        .unwrap();
        let tool = r.tools.unwrap().get_item_by_index(0).unwrap();
        let keys: Vec<String> = tool.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["type", "function"]);
        let f = tool.get_attr("function").unwrap();
        let keys: Vec<String> = f.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["name", "description", "parameters"]);
    }
}
