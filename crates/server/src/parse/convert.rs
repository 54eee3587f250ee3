//! A tool parameter's text converted by its JSON schema: `integer`,
//! `number`, `boolean`, `null`, `object` and `array` are parsed; `string`
//! (and any schema without a type) keeps the text. A schema may list several
//! types (`"type": [..]`, `anyOf`, `oneOf`): each non-string type is tried in
//! order. Text that fits none of them stays a string, so nothing is lost.

use serde_json::{Number, Value as Json};

/// `text` as the JSON value `schema` asks for (a string when it fits no type).
pub fn convert(text: &str, schema: Option<&Json>) -> Json {
    let types = schema.map(schema_types).unwrap_or_default();
    for ty in &types {
        if let Some(v) = as_type(text, ty) {
            return v;
        }
    }
    Json::String(text.to_string())
}

/// The type names `schema` allows, in order.
fn schema_types(schema: &Json) -> Vec<String> {
    let mut out = Vec::new();
    match schema.get("type") {
        Some(Json::String(t)) => out.push(t.clone()),
        Some(Json::Array(ts)) => out.extend(ts.iter().filter_map(|t| t.as_str().map(String::from))),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Json::Array(alts)) = schema.get(key) {
            for alt in alts {
                out.extend(schema_types(alt));
            }
        }
    }
    if out.is_empty() {
        if schema.get("properties").is_some() {
            out.push("object".into());
        } else if schema.get("items").is_some() {
            out.push("array".into());
        }
    }
    out
}

fn as_type(text: &str, ty: &str) -> Option<Json> {
    let t = text.trim();
    match ty {
        "integer" => t.parse::<i64>().ok().map(Json::from),
        "number" => serde_json::from_str::<Number>(t).ok().map(Json::Number),
        "boolean" => match t.to_ascii_lowercase().as_str() {
            "true" => Some(Json::Bool(true)),
            "false" => Some(Json::Bool(false)),
            _ => None,
        },
        "null" => matches!(t, "null" | "None").then_some(Json::Null),
        "object" => serde_json::from_str::<Json>(t).ok().filter(Json::is_object),
        "array" => serde_json::from_str::<Json>(t).ok().filter(Json::is_array),
        "string" => Some(Json::String(text.to_string())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_schema_type_converts_its_text() {
        let c = |text: &str, schema: Json| convert(text, Some(&schema));
        assert_eq!(c(" 42 ", json!({"type": "integer"})), json!(42));
        assert_eq!(c("-3.5", json!({"type": "number"})), json!(-3.5));
        assert_eq!(c("7", json!({"type": "number"})), json!(7));
        assert_eq!(c("True", json!({"type": "boolean"})), json!(true));
        assert_eq!(c("false", json!({"type": "boolean"})), json!(false));
        assert_eq!(c("null", json!({"type": "null"})), json!(null));
        assert_eq!(
            c(r#"{"a": [1, "x"]}"#, json!({"type": "object"})),
            json!({"a": [1, "x"]})
        );
        assert_eq!(c("[1, 2]", json!({"type": "array"})), json!([1, 2]));
        assert_eq!(c(" Paris ", json!({"type": "string"})), json!(" Paris "));
        assert_eq!(c("[1]", json!({"items": {}})), json!([1]));
        assert_eq!(c(r#"{"k": 1}"#, json!({"properties": {}})), json!({"k": 1}));
    }

    #[test]
    fn type_lists_try_each_type_and_misfits_stay_strings() {
        let s = json!({"type": ["integer", "null"]});
        assert_eq!(convert("5", Some(&s)), json!(5));
        assert_eq!(convert("null", Some(&s)), json!(null));
        assert_eq!(convert("five", Some(&s)), json!("five"));
        let any = json!({"anyOf": [{"type": "boolean"}, {"type": "string"}]});
        assert_eq!(convert("true", Some(&any)), json!(true));
        assert_eq!(convert("maybe", Some(&any)), json!("maybe"));
        assert_eq!(convert("12", Some(&json!({"type": "integer"}))), json!(12));
        assert_eq!(
            convert("1.5", Some(&json!({"type": "integer"}))),
            json!("1.5")
        );
        assert_eq!(convert("[1", Some(&json!({"type": "array"}))), json!("[1"));
        assert_eq!(convert("3", None), json!("3"));
        assert_eq!(convert("3", Some(&json!({}))), json!("3"));
    }
}
