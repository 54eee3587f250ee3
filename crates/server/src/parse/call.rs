//! One tool-call block, the text between `<tool_call>` and `</tool_call>`:
//!
//! ```text
//! <function=NAME>
//! <parameter=P>
//! value
//! </parameter>
//! </function>
//! ```
//!
//! decoded against the request's tools: the function must be one of them,
//! each parameter one of its schema's `properties` (any name when the schema
//! lists none or allows `additionalProperties`), given once, closed by
//! `</parameter>`, the function closed by `</function>` with only whitespace
//! around. One newline after `<parameter=P>` and one before `</parameter>`
//! belong to the format, not the value. Arguments are a compact JSON object,
//! parameters in the order the model wrote them.

use super::convert::convert;
use serde_json::{Map, Value as Json};

/// A function the model may call, from a request's `tools` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// The parameters' schemas (`parameters.properties`).
    pub properties: Map<String, Json>,
    /// Parameters outside `properties` are accepted.
    pub open: bool,
}

impl ToolSpec {
    /// Reads `{"type": "function", "function": {"name", "parameters"?, ...}}`.
    pub fn from_definition(def: &Json) -> Result<ToolSpec, String> {
        if def.get("type").and_then(Json::as_str) != Some("function") {
            return Err("each tool must have \"type\": \"function\"".into());
        }
        let f = def
            .get("function")
            .filter(|f| f.is_object())
            .ok_or("each tool must have a `function` object")?;
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("each tool's function must have a non-empty `name`")?;
        let params = match f.get("parameters") {
            None | Some(Json::Null) => Json::Object(Map::new()),
            Some(p @ Json::Object(_)) => p.clone(),
            Some(_) => return Err(format!("tool `{name}`: `parameters` must be an object")),
        };
        let properties = match params.get("properties") {
            Some(Json::Object(p)) => Some(p.clone()),
            None | Some(Json::Null) => None,
            Some(_) => {
                return Err(format!(
                    "tool `{name}`: `parameters.properties` must be an object"
                ))
            }
        };
        let additional = match params.get("additionalProperties") {
            Some(Json::Bool(b)) => *b,
            Some(Json::Object(_)) => true,
            _ => false,
        };
        Ok(ToolSpec {
            name: name.to_string(),
            open: properties.is_none() || additional,
            properties: properties.unwrap_or_default(),
        })
    }
}

/// A decoded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// A JSON object as a string.
    pub arguments: String,
}

/// Why a block is not a call (it is then returned as content).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("the block does not start with <function=NAME>")]
    NoFunction,
    #[error("function `{0}` is not one of the request's tools")]
    UnknownFunction(String),
    #[error("parameter `{param}` is not in the schema of `{function}`")]
    UnknownParameter { function: String, param: String },
    #[error("parameter `{0}` is given twice")]
    Duplicate(String),
    #[error("{0} is not closed")]
    Unclosed(&'static str),
    #[error("unexpected text in the call: {0:?}")]
    Stray(String),
}

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

/// Decodes `block` (the text inside `<tool_call>…</tool_call>`) against `tools`.
pub fn decode(block: &str, tools: &[ToolSpec]) -> Result<ToolCall, CallError> {
    let rest = block
        .trim_start()
        .strip_prefix(FUNCTION)
        .ok_or(CallError::NoFunction)?;
    let (name, mut rest) = rest.split_once('>').ok_or(CallError::NoFunction)?;
    let name = name.trim();
    let tool = tools
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| CallError::UnknownFunction(name.to_string()))?;
    let mut args: Vec<(String, Json)> = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(FUNCTION_END) {
            if !after.trim().is_empty() {
                return Err(CallError::Stray(after.trim().to_string()));
            }
            break;
        }
        let Some(p) = rest.strip_prefix(PARAMETER) else {
            if rest.is_empty() {
                return Err(CallError::Unclosed("<function=...>"));
            }
            return Err(CallError::Stray(rest.chars().take(40).collect()));
        };
        let (param, body) = p
            .split_once('>')
            .ok_or(CallError::Unclosed("<parameter=..."))?;
        let param = param.trim();
        let (value, after) = body
            .split_once(PARAMETER_END)
            .ok_or(CallError::Unclosed("<parameter=...>"))?;
        let schema = tool.properties.get(param);
        if schema.is_none() && !tool.open {
            return Err(CallError::UnknownParameter {
                function: tool.name.clone(),
                param: param.to_string(),
            });
        }
        if args.iter().any(|(k, _)| k == param) {
            return Err(CallError::Duplicate(param.to_string()));
        }
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        args.push((param.to_string(), convert(value, schema)));
        rest = after;
    }
    Ok(ToolCall {
        name: tool.name.clone(),
        arguments: object_text(&args),
    })
}

/// A compact JSON object with the keys in the given order.
fn object_text(args: &[(String, Json)]) -> String {
    let fields: Vec<String> = args
        .iter()
        .map(|(k, v)| format!("{}:{}", Json::String(k.clone()), v))
        .collect();
    format!("{{{}}}", fields.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        let defs = [
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {
                    "city": {"type": "string"}, "days": {"type": "integer"},
                    "metric": {"type": "boolean"}, "where": {"type": "object"}}}}}),
            json!({"type": "function", "function": {"name": "anything"}}),
        ];
        defs.iter()
            .map(|d| ToolSpec::from_definition(d).unwrap())
            .collect()
    }

    #[test]
    fn a_call_decodes_with_values_converted_in_written_order() {
        let block = "\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n\
                     <parameter=city>\nNew\nYork\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n\
                     <parameter=where>\n{\"lat\": 1.5}\n</parameter>\n</function>\n";
        let call = decode(block, &tools()).unwrap();
        assert_eq!(call.name, "get_weather");
        assert_eq!(
            call.arguments,
            r#"{"days":3,"city":"New\nYork","metric":true,"where":{"lat":1.5}}"#
        );
        let call = decode(
            "<function=anything><parameter=x>1</parameter></function>",
            &tools(),
        )
        .unwrap();
        assert_eq!(call.arguments, r#"{"x":"1"}"#);
        let call = decode("<function=anything>\n</function>", &tools()).unwrap();
        assert_eq!(call.arguments, "{}");
    }

    #[test]
    fn malformed_blocks_say_why() {
        let t = tools();
        let p = "<parameter=city>\nParis\n</parameter>\n";
        assert_eq!(decode(p, &t), Err(CallError::NoFunction));
        assert_eq!(
            decode(&format!("<function=nope>\n{p}</function>"), &t),
            Err(CallError::UnknownFunction("nope".into()))
        );
        assert!(matches!(
            decode(
                "<function=get_weather>\n<parameter=town>\nX\n</parameter>\n</function>",
                &t
            ),
            Err(CallError::UnknownParameter { .. })
        ));
        assert_eq!(
            decode(&format!("<function=get_weather>\n{p}"), &t),
            Err(CallError::Unclosed("<function=...>"))
        );
        assert_eq!(
            decode(
                "<function=get_weather>\n<parameter=city>\nParis\n</function>",
                &t
            ),
            Err(CallError::Unclosed("<parameter=...>"))
        );
        assert_eq!(
            decode(&format!("<function=get_weather>\n{p}{p}</function>"), &t),
            Err(CallError::Duplicate("city".into()))
        );
        assert!(matches!(
            decode(&format!("<function=get_weather>\n{p}</function> tail"), &t),
            Err(CallError::Stray(_))
        ));
        assert!(matches!(
            decode(&format!("<function=get_weather>\nhi {p}</function>"), &t),
            Err(CallError::Stray(_))
        ));
    }

    #[test]
    fn tool_definitions_are_checked() {
        for bad in [
            json!({"function": {"name": "x"}}),
            json!({"type": "function"}),
            json!({"type": "function", "function": {"name": ""}}),
            json!({"type": "function", "function": {"name": "x", "parameters": 3}}),
            json!({"type": "function", "function": {"name": "x", "parameters": {"properties": []}}}),
        ] {
            assert!(ToolSpec::from_definition(&bad).is_err(), "{bad}");
        }
        let open = ToolSpec::from_definition(&json!({"type": "function", "function": {
            "name": "x", "parameters": {"properties": {"a": {}}, "additionalProperties": true}}}))
        .unwrap();
        assert!(open.open);
        assert!(!tools()[0].open);
    }
}
