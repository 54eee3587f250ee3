//! OpenAI parameters this server does not implement ([`refuse_unsupported`]):
//! given with a value that would change the answer, each is a 400 naming it
//! rather than silently ignored; its neutral value (`false`, `0`, `null`,
//! `{}`, `"text"`) is accepted. Fields that do not change the answer
//! (`user`, `metadata`, `store`, ...) and unknown fields are ignored. The
//! forms of `logprobs` / `top_logprobs` / `echo` one endpoint does not take
//! are refused here too (their values are checked in [`crate::params`]).

use crate::error::ApiError;
use serde_json::Value;

/// Which endpoint a body is for (some names mean different things).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Chat,
    Completion,
}

/// The first unsupported parameter of `body` given a non-neutral value, as a 400.
pub fn refuse_unsupported(body: &Value, kind: Kind) -> Result<(), ApiError> {
    let common: &[(&str, &str)] = &[
        ("logit_bias", "logit_bias is not implemented"),
        ("best_of", "only best_of = 1 is supported"),
        ("min_p", "min_p sampling is not implemented"),
    ];
    let completion: &[(&str, &str)] = &[
        ("suffix", "suffix (insertion) is not implemented"),
        (
            "top_logprobs",
            "completions take the number of alternatives as logprobs: N (top_logprobs is chat's)",
        ),
    ];
    let chat: &[(&str, &str)] = &[
        (
            "response_format",
            "only response_format {\"type\": \"text\"} is supported",
        ),
        ("modalities", "only text output is supported"),
        ("audio", "audio output is not supported"),
        ("prediction", "predicted outputs are not implemented"),
        (
            "functions",
            "the deprecated functions parameter is not implemented; give tools",
        ),
        (
            "function_call",
            "the deprecated function_call parameter is not implemented; give tool_choice",
        ),
    ];
    let extra = match kind {
        Kind::Chat => chat,
        Kind::Completion => completion,
    };
    for (name, why) in common.iter().chain(extra) {
        if let Some(v) = body.get(*name) {
            if !neutral(name, v) {
                return Err(ApiError::bad_param(
                    name,
                    format!("{name}: {why} (got {v}); leave it out"),
                ));
            }
        }
    }
    logprobs_form(body, kind)
}

/// Chat's `logprobs` is a boolean, a completion's an integer; a completion
/// cannot echo with log probabilities (the prompt's are not computed).
fn logprobs_form(body: &Value, kind: Kind) -> Result<(), ApiError> {
    let logprobs = body.get("logprobs").filter(|v| !v.is_null());
    match (kind, logprobs) {
        (Kind::Chat, Some(v)) if !v.is_boolean() => Err(ApiError::bad_param(
            "logprobs",
            format!(
                "logprobs: chat takes true or false, with top_logprobs for alternatives (got {v})"
            ),
        )),
        (Kind::Completion, Some(v)) if v.is_boolean() => Err(ApiError::bad_param(
            "logprobs",
            format!("logprobs: completions take the number of alternatives 0..=5 (got {v})"),
        )),
        (Kind::Completion, Some(_)) if body.get("echo") == Some(&Value::Bool(true)) => {
            Err(ApiError::bad_param(
                "echo",
                "echo: echoing the prompt with logprobs is not implemented (the prompt's log \
                 probabilities are not computed); leave out echo or logprobs",
            ))
        }
        _ => Ok(()),
    }
}

/// Whether `v` asks for nothing beyond the default.
fn neutral(name: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => match name {
            "best_of" => n.as_f64() == Some(1.0),
            _ => n.as_f64() == Some(0.0),
        },
        Value::String(s) => s.is_empty() || (name == "modalities" && s == "text"),
        Value::Object(o) => {
            o.is_empty() || (name == "response_format" && o.get("type") == Some(&"text".into()))
        }
        Value::Array(a) => a.is_empty() || (name == "modalities" && a == &[Value::from("text")]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(body: Value, kind: Kind) -> Option<String> {
        refuse_unsupported(&body, kind).err().and_then(|e| e.param)
    }

    #[test]
    fn answer_changing_values_are_refused_naming_the_parameter() {
        let c = Kind::Completion;
        assert_eq!(
            refused(json!({"logit_bias": {"5": 10}}), c).as_deref(),
            Some("logit_bias")
        );
        assert_eq!(
            refused(json!({"best_of": 2}), c).as_deref(),
            Some("best_of")
        );
        assert_eq!(
            refused(json!({"min_p": 0.1}), Kind::Chat).as_deref(),
            Some("min_p")
        );
        assert_eq!(
            refused(
                json!({"response_format": {"type": "json_object"}}),
                Kind::Chat
            )
            .as_deref(),
            Some("response_format")
        );
        assert_eq!(
            refused(json!({"functions": [{"name": "f"}]}), Kind::Chat).as_deref(),
            Some("functions")
        );
        assert_eq!(
            refused(json!({"function_call": "auto"}), Kind::Chat).as_deref(),
            Some("function_call")
        );
        let e = refuse_unsupported(&json!({"suffix": "x"}), c).unwrap_err();
        assert!(e.message.starts_with("suffix: "), "{}", e.message);
    }

    #[test]
    fn each_endpoint_takes_its_own_logprobs_form() {
        let c = Kind::Completion;
        assert_eq!(
            refused(json!({"logprobs": 2}), Kind::Chat).as_deref(),
            Some("logprobs")
        );
        assert_eq!(
            refused(json!({"logprobs": true}), c).as_deref(),
            Some("logprobs")
        );
        assert_eq!(
            refused(json!({"top_logprobs": 2}), c).as_deref(),
            Some("top_logprobs")
        );
        assert_eq!(
            refused(json!({"echo": true, "logprobs": 1}), c).as_deref(),
            Some("echo")
        );
        for ok in [
            json!({"logprobs": true, "top_logprobs": 5}),
            json!({"logprobs": false}),
        ] {
            assert!(refuse_unsupported(&ok, Kind::Chat).is_ok(), "{ok}");
        }
        for ok in [
            json!({"logprobs": 3, "echo": false}),
            json!({"logprobs": null, "echo": true}),
            json!({"presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.1}),
        ] {
            assert!(refuse_unsupported(&ok, c).is_ok(), "{ok}");
        }
    }

    #[test]
    fn neutral_values_and_other_endpoints_names_pass() {
        let ok = json!({"top_logprobs": 0, "logit_bias": {}, "best_of": 1, "min_p": 0,
            "suffix": null, "response_format": {"type": "text"}, "user": "u"});
        assert!(refuse_unsupported(&ok, Kind::Chat).is_ok());
        assert!(refuse_unsupported(&ok, Kind::Completion).is_ok());
        // `echo` means nothing to chat; it is ignored there like any unknown field.
        assert!(refuse_unsupported(&json!({"echo": true, "logprobs": true}), Kind::Chat).is_ok());
    }
}
