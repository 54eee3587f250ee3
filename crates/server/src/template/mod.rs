//! Chat templates: a checkpoint's `chat_template` (from `chat_template.jinja`
//! or `tokenizer_config.json`) rendered with minijinja as transformers
//! renders it (`trim_blocks`, `lstrip_blocks`, Python-style string methods
//! such as `startswith` / `split` / `strip`, Python's `tojson`, keys in the
//! order given), the built-in plain template, or the built-in template of
//! Qwen3.5's shape ([`ChatTemplate::qwen_shaped`], `qwen3_5.jinja`) for
//! synthetic models. Variables: `messages` (with `tool_calls`,
//! `tool_call_id`, `reasoning_content`), `tools`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, `enable_thinking` and any extra
//! `chat_template_kwargs`.

pub mod limits;

use limits::Bounded;
pub use limits::{Limit, TemplateLimits};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::path::Path;

/// The plain template of models without one: `role: content` lines, then `assistant: `.
pub const PLAIN_TEMPLATE: &str =
    "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
{%- if add_generation_prompt %}assistant: {% endif %}";

/// Why a template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("chat template from {source_name}: {reason}")]
    Load { source_name: String, reason: String },
    #[error("the chat template failed: {0}")]
    Render(String),
    /// Stopped by one of its [`TemplateLimits`] (the message names it).
    #[error("{0}")]
    Limit(String),
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    limits: TemplateLimits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

/// The built-in template of Qwen3.5's shape (tools, tool calls, tool
/// responses, `<think>` and `enable_thinking`), for synthetic models.
pub const QWEN_SHAPED_TEMPLATE: &str = include_str!("qwen3_5.jinja");

/// One message as the template sees it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// An assistant turn's calls: `{"id", "type": "function", "function":
    /// {"name", "arguments": {..}}}`, arguments as a mapping (as
    /// transformers' templates expect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` message's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatTemplate {
    /// Compiles `source`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_filter("tojson", crate::pyjson::tojson);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        let limits = TemplateLimits::default();
        env.set_fuel(Some(limits.fuel));
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TemplateError::Load {
                source_name: "template".into(),
                reason: e.to_string(),
            })?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            limits,
        })
    }

    /// Bounds every later render by `limits`.
    /// (minijinja counts fuel in an `isize`: more than `i64::MAX` is `i64::MAX`).
    pub fn set_limits(&mut self, limits: TemplateLimits) {
        self.env.set_fuel(Some(limits.fuel.min(i64::MAX as u64)));
        self.limits = limits;
    }

    pub fn limits(&self) -> &TemplateLimits {
        &self.limits
    }

    /// The built-in plain template.
    pub fn plain() -> ChatTemplate {
        match ChatTemplate::new(PLAIN_TEMPLATE, "", "") {
            Ok(t) => t,
            Err(e) => unreachable!("the built-in template compiles: {e}"),
        }
    }

    /// The built-in template of Qwen3.5's shape (`<|im_end|>` ends a turn).
    pub fn qwen_shaped() -> ChatTemplate {
        match ChatTemplate::new(QWEN_SHAPED_TEMPLATE, "", "<|im_end|>") {
            Ok(t) => t,
            Err(e) => unreachable!("the built-in template compiles: {e}"),
        }
    }

    /// The checkpoint's template: `DIR/chat_template.jinja`, else the
    /// `chat_template` of `DIR/tokenizer_config.json` (a string, or a list of
    /// named templates of which `default` is taken); `None` when it has neither.
    pub fn from_dir(dir: &Path) -> Result<Option<ChatTemplate>, TemplateError> {
        let config = read_tokenizer_config(dir)?;
        let special = |key: &str| -> String {
            match config.get(key) {
                Some(Json::String(s)) => s.clone(),
                Some(Json::Object(o)) => o
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_string(),
                _ => String::new(),
            }
        };
        let (bos, eos) = (special("bos_token"), special("eos_token"));
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            let src = std::fs::read_to_string(&jinja).map_err(|e| TemplateError::Load {
                source_name: jinja.display().to_string(),
                reason: e.to_string(),
            })?;
            return ChatTemplate::new(&src, &bos, &eos).map(Some);
        }
        let src = match config.get("chat_template") {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::String(s)) => s.clone(),
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .ok_or_else(|| TemplateError::Load {
                    source_name: "tokenizer_config.json".into(),
                    reason: "chat_template is a list without a `default` entry".into(),
                })?
                .to_string(),
            Some(_) => {
                return Err(TemplateError::Load {
                    source_name: "tokenizer_config.json".into(),
                    reason: "chat_template is neither a string nor a list".into(),
                })
            }
        };
        ChatTemplate::new(&src, &bos, &eos).map(Some)
    }

    /// Renders `messages` with `tools` (a list of tool definitions, `None`:
    /// the template sees no `tools`); `kwargs` are extra template variables
    /// (`enable_thinking`, ...), which cannot replace the others.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        add_generation_prompt: bool,
        tools: Option<&Value>,
        kwargs: &Map<String, Json>,
    ) -> Result<String, TemplateError> {
        let mut ctx: BTreeMap<String, Value> = kwargs
            .iter()
            .map(|(k, v)| (k.clone(), Value::from_serialize(v)))
            .collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("tools".into(), tools.cloned().unwrap_or(Value::from(())));
        ctx.insert("add_generation_prompt".into(), add_generation_prompt.into());
        ctx.insert("bos_token".into(), self.bos.clone().into());
        ctx.insert("eos_token".into(), self.eos.clone().into());
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        let mut out = Bounded::new(&self.limits);
        match tmpl.render_captured_to(Value::from_serialize(&ctx), &mut out) {
            Ok(_) => String::from_utf8(out.buf)
                .map_err(|e| TemplateError::Render(format!("the output is not UTF-8: {e}"))),
            Err(e) => Err(match (out.stopped, e.kind()) {
                (Some(limit), _) => TemplateError::Limit(self.limits.exceeded(limit)),
                (None, ErrorKind::OutOfFuel) => {
                    TemplateError::Limit(self.limits.exceeded(Limit::Fuel))
                }
                _ => TemplateError::Render(e.to_string()),
            }),
        }
    }
}

fn read_tokenizer_config(dir: &Path) -> Result<Map<String, Json>, TemplateError> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(Map::new());
    }
    let load = |reason: String| TemplateError::Load {
        source_name: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| load(e.to_string()))?;
    match serde_json::from_str(&text).map_err(|e| load(e.to_string()))? {
        Json::Object(m) => Ok(m),
        _ => Err(load("not a JSON object".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(pairs: &[(&str, &str)]) -> Vec<TemplateMessage> {
        pairs
            .iter()
            .map(|(r, c)| TemplateMessage {
                role: r.to_string(),
                content: c.to_string(),
                ..TemplateMessage::default()
            })
            .collect()
    }

    /// A template in the style of Qwen3.5's: reverse iteration with a
    /// namespace, Python string methods, `enable_thinking`, `raise_exception`.
    const QWEN_STYLE: &str = r#"{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}
{%- set ns = namespace(last_user=messages|length - 1) %}
{%- for m in messages[::-1] %}{%- if m.role == 'user' and ns.last_user == messages|length - 1 and not m.content.startswith('<tool_response>') %}{%- set ns.last_user = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}
{%- for m in messages %}
{%- if m.role == 'system' and loop.first %}
{%- elif m.role == 'user' or m.role == 'system' %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- elif m.role == 'assistant' %}{%- set content = m.content %}{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}{{- '<|im_start|>assistant\n' + content.strip() + '<|im_end|>\n' }}
{%- else %}{{- raise_exception('unknown role ' + m.role) }}{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}"#;

    #[test]
    fn a_qwen_style_template_renders_turns_thinking_and_generation_prompt() {
        let t = ChatTemplate::new(QWEN_STYLE, "", "<|im_end|>").unwrap();
        let m = msgs(&[
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "<think>\nhmm\n</think>\n\n Hello "),
            ("user", "Again"),
        ]);
        let out = t.render(&m, true, None, &Map::new()).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        let mut kw = Map::new();
        kw.insert("enable_thinking".into(), json!(false));
        let out = t.render(&m[1..2], true, None, &kw).unwrap();
        assert!(
            out.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            "{out}"
        );
        let out = t.render(&m[1..2], false, None, &kw).unwrap();
        assert!(out.ends_with("Hi<|im_end|>\n"), "{out}");
        let err = t
            .render(&msgs(&[("robot", "x")]), true, None, &Map::new())
            .unwrap_err();
        assert!(err.to_string().contains("unknown role robot"), "{err}");
    }

    #[test]
    fn the_plain_template_lists_turns() {
        let out = ChatTemplate::plain()
            .render(
                &msgs(&[("system", "S"), ("user", "U")]),
                true,
                None,
                &Map::new(),
            )
            .unwrap();
        assert_eq!(out, "system: S\nuser: U\nassistant: ");
    }

    #[test]
    fn templates_load_from_jinja_file_or_tokenizer_config() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ChatTemplate::from_dir(dir.path()).unwrap().is_none());
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            json!({"chat_template": [{"name": "default", "template": "D{{ eos_token }}"}],
                   "eos_token": {"content": "<e>"}})
            .to_string(),
        )
        .unwrap();
        let t = ChatTemplate::from_dir(dir.path()).unwrap().unwrap();
        assert_eq!(t.render(&[], true, None, &Map::new()).unwrap(), "D<e>");
        std::fs::write(
            dir.path().join("chat_template.jinja"),
            "J{{ messages|length }}",
        )
        .unwrap();
        let t = ChatTemplate::from_dir(dir.path()).unwrap().unwrap();
        assert_eq!(
            t.render(&msgs(&[("user", "x")]), true, None, &Map::new())
                .unwrap(),
            "J1"
        );
        std::fs::write(dir.path().join("chat_template.jinja"), "{% if %}").unwrap();
        assert!(ChatTemplate::from_dir(dir.path()).is_err());
    }
}

#[cfg(test)]
mod qwen_tests;
