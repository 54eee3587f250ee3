//! Reading a request body into its typed form ([`parse_request`]) with
//! errors a client can act on: a type error names the JSON path of the
//! offending value in the message and in `param` (`messages[0].content`),
//! and says what was expected in JSON's words (an integer, a string, a list
//! of token ids), never in Rust's (`i64`, `untagged enum Prompt`).

use crate::error::ApiError;
use crate::openai::{ChatRequest, CommonParams, CompletionRequest};
use crate::unsupported::{refuse_unsupported, Kind};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

/// A request body with the shared parameters read separately (so that
/// their errors keep their path too).
pub trait WithCommon: DeserializeOwned {
    const KIND: Kind;
    fn set_common(&mut self, common: CommonParams);
    /// Whether the body's `prompt` member is this request's prompt, which
    /// a plain list of token ids may then fill ([`Self::set_prompt_ids`]).
    const PROMPT_MEMBER: bool = false;
    /// Takes a `prompt` of token ids read by the byte scanner
    /// ([`crate::prompt_de::token_ids`]); called only where
    /// [`Self::PROMPT_MEMBER`] holds.
    fn set_prompt_ids(&mut self, _ids: Vec<u32>) {}
}

impl WithCommon for ChatRequest {
    const KIND: Kind = Kind::Chat;
    fn set_common(&mut self, common: CommonParams) {
        self.common = common;
    }
}

impl WithCommon for CompletionRequest {
    const KIND: Kind = Kind::Completion;
    fn set_common(&mut self, common: CommonParams) {
        self.common = common;
    }
    const PROMPT_MEMBER: bool = true;
    fn set_prompt_ids(&mut self, ids: Vec<u32>) {
        self.prompt = crate::openai::Prompt::Ids(ids);
    }
}

/// The typed body, or a 400 naming what is wrong and where (an
/// unsupported parameter first: [`refuse_unsupported`]).
pub fn parse_request<T: WithCommon>(bytes: &[u8]) -> Result<T, ApiError> {
    if let Some(req) = parse_well_formed::<T>(bytes)? {
        return Ok(req);
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    refuse_unsupported(&v, T::KIND)?;
    let common: CommonParams = typed(&v)?;
    let mut req: T = typed(&v)?;
    // Once more from the text: a `Value` sorts object keys, and the template
    // values inside a request (`tools`) must keep the client's order.
    if let Ok(ordered) = serde_json::from_slice::<T>(bytes) {
        req = ordered;
    }
    req.set_common(common);
    Ok(req)
}

/// Top-level members that carry the request's content (a prompt of token
/// ids, the messages, the tools): never read by [`refuse_unsupported`], and
/// the large ones, so they are not parsed into a `Value` on the way.
const CONTENT_MEMBERS: [&str; 3] = ["prompt", "messages", "tools"];

/// The typed body from one pass over the bytes (each top-level member's raw
/// text), when the body is a well-typed object (what clients send): the
/// refusal of unsupported parameters reads the small top-level members
/// only, the shared parameters and the request are read from the members'
/// raw texts (the content members once, a plain list of token ids by the
/// byte scanner). `None` when the body has an error of any kind:
/// [`parse_request`]'s slower path, through a `Value`, then names it with
/// its JSON path.
fn parse_well_formed<T: WithCommon>(bytes: &[u8]) -> Result<Option<T>, ApiError> {
    let Ok(members) = serde_json::from_slice::<BTreeMap<String, &RawValue>>(bytes) else {
        return Ok(None);
    };
    let mut small = serde_json::Map::new();
    for (name, raw) in &members {
        if CONTENT_MEMBERS.contains(&name.as_str()) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(raw.get()) else {
            return Ok(None);
        };
        small.insert(name.clone(), v);
    }
    refuse_unsupported(&Value::Object(small), T::KIND)?;
    let common = from_members::<CommonParams>(
        members
            .iter()
            .filter(|(name, _)| !CONTENT_MEMBERS.contains(&name.as_str()))
            .map(|(name, raw)| (name, *raw)),
    );
    // A prompt of plain token ids: scanned, and an empty list in its place
    // for the typed read (set back right after).
    let scanned = match members.get("prompt") {
        Some(raw) if T::PROMPT_MEMBER => crate::prompt_de::token_ids(raw.get()),
        _ => None,
    };
    let placeholder: &RawValue = serde_json::from_str("[]").expect("a JSON list");
    let req = from_members::<T>(members.iter().map(|(name, raw)| {
        let raw = if scanned.is_some() && name == "prompt" {
            placeholder
        } else {
            *raw
        };
        (name, raw)
    }));
    let (Some(common), Some(mut req)) = (common, req) else {
        return Ok(None);
    };
    if let Some(ids) = scanned {
        req.set_prompt_ids(ids);
    }
    req.set_common(common);
    Ok(Some(req))
}

/// `T` read from `(name, raw text)` members as from the object they form.
fn from_members<'a, T: DeserializeOwned>(
    members: impl Iterator<Item = (&'a String, &'a RawValue)>,
) -> Option<T> {
    let map = serde::de::value::MapDeserializer::<_, serde_json::Error>::new(
        members.map(|(name, raw)| (name.as_str(), raw)),
    );
    T::deserialize(map).ok()
}

fn typed<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().to_string();
        let (param, what) = match missing_field(&msg) {
            Some(field) if path == "." => (field.to_string(), format!("`{field}` is required")),
            Some(field) => (format!("{path}.{field}"), format!("`{field}` is required")),
            None => (path, in_json_words(&msg)),
        };
        if param == "." {
            ApiError::bad_request(what)
        } else {
            ApiError::bad_param(&param, format!("{param}: {what}"))
        }
    })
}

fn missing_field(msg: &str) -> Option<&str> {
    msg.strip_prefix("missing field `")?.split('`').next()
}

/// `msg` with Rust's type names replaced by what a JSON client sends.
pub fn in_json_words(msg: &str) -> String {
    const UNTAGGED: &[(&str, &str)] = &[
        (
            "Prompt",
            "a string, a list of one string, or a list of token ids",
        ),
        ("Stop", "a string or a list of strings"),
        ("Content", "a string or a list of content parts"),
    ];
    if let Some(name) = msg
        .strip_prefix("data did not match any variant of untagged enum ")
        .map(str::trim)
    {
        let want = UNTAGGED
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("a value of another type", |(_, w)| w);
        return format!("expected {want}");
    }
    const WORDS: &[(&str, &str)] = &[
        ("expected i64", "expected an integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer below 2^32"),
        ("expected usize", "expected a non-negative integer"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected an object"),
    ];
    let mut out = msg.to_string();
    for (rust, json) in WORDS {
        out = out.replace(rust, json);
    }
    if let Some(i) = out.find("expected struct ") {
        out.replace_range(i.., "expected an object");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> ApiError {
        parse_request::<CompletionRequest>(body.as_bytes()).unwrap_err()
    }

    fn chat_err(body: &str) -> ApiError {
        parse_request::<ChatRequest>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn type_errors_name_the_json_path_in_json_words() {
        let e = err(r#"{"prompt": "hi", "max_tokens": "5"}"#);
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert_eq!(
            e.message,
            "max_tokens: invalid type: string \"5\", expected an integer"
        );
        let e = err(r#"{"prompt": {"a": 1}}"#);
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(e.message.contains("a list of token ids"), "{}", e.message);
        assert!(!e.message.contains("enum"), "{}", e.message);
        let e = chat_err(r#"{"messages": [{"role": "user", "content": 5}]}"#);
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
        assert!(e.message.contains("a string or a list of content parts"));
        let e = chat_err(r#"{"messages": [{"content": "x"}]}"#);
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        assert_eq!(e.message, "messages[0].role: `role` is required");
        let e = err(r#"{"max_tokens": 5}"#);
        assert_eq!(e.param.as_deref(), Some("prompt"));
        let e = err(r#"{"prompt": "x", "stop": 3}"#);
        assert_eq!(e.param.as_deref(), Some("stop"));
        assert!(e.message.contains("a string or a list of strings"));
        let e = err(r#"{"prompt": [1, -2]}"#);
        assert_eq!(e.param.as_deref(), Some("prompt[1]"));
        assert!(e.message.contains("below 2^32"), "{}", e.message);
        let e = err("[1]");
        assert_eq!(e.message, "the request body must be a JSON object");
        let e = err("{");
        assert!(
            e.message.starts_with("malformed JSON body"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_good_body_keeps_its_shared_parameters() {
        let r: CompletionRequest =
            parse_request(br#"{"prompt": "hi", "max_tokens": 5, "stream": true}"#).unwrap();
        assert_eq!(r.common.max_tokens, Some(5));
        assert!(r.common.stream);
    }
}
