//! The built-in template of Qwen3.5's shape: tools, calls, tool responses, thinking.

use super::*;
use serde_json::json;

fn user(text: &str) -> TemplateMessage {
    TemplateMessage {
        role: "user".into(),
        content: text.into(),
        ..TemplateMessage::default()
    }
}

/// A template value of `v` (keys sorted, as `json!` keeps them).
fn value(v: serde_json::Value) -> Value {
    serde_json::from_str(&v.to_string()).unwrap()
}

#[test]
fn tools_are_listed_as_python_json_in_the_order_given() {
    let t = ChatTemplate::qwen_shaped();
    let tools: Value = serde_json::from_str(
        r#"[{"type": "function", "function": {"name": "get_weather",
        "description": "Weather <now>", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#,
    )
    .unwrap();
    let out = t
        .render(&[user("Hi")], true, Some(&tools), &Map::new())
        .unwrap();
    assert!(out.starts_with("<|im_start|>system\n# Tools\n"), "{out}");
    assert!(
        out.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather <now>\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>"),
        "{out}"
    );
    assert!(
        out.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"),
        "{out}"
    );
    let plain = t.render(&[user("Hi")], true, None, &Map::new()).unwrap();
    assert_eq!(
        plain,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    );
    let mut kw = Map::new();
    kw.insert("enable_thinking".into(), json!(false));
    let off = t.render(&[user("Hi")], true, None, &kw).unwrap();
    assert!(
        off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "{off}"
    );
}

#[test]
fn calls_and_tool_responses_render_in_the_xml_form() {
    let t = ChatTemplate::qwen_shaped();
    let call = |name: &str, args: serde_json::Value| {
        value(json!({"id": "c", "type": "function", "function": {"name": name, "arguments": args}}))
    };
    let messages = vec![
        TemplateMessage {
            role: "system".into(),
            content: "Be brief.".into(),
            ..TemplateMessage::default()
        },
        user("Weather?"),
        TemplateMessage {
            role: "assistant".into(),
            content: "Checking.".into(),
            reasoning_content: Some("need tools".into()),
            tool_calls: Some(vec![
                call("get_weather", json!({"city": "Paris", "days": 3})),
                call("where", json!({"at": {"lat": 1.5}, "tags": ["a"]})),
            ]),
            ..TemplateMessage::default()
        },
        TemplateMessage {
            role: "tool".into(),
            content: "sunny".into(),
            tool_call_id: Some("c".into()),
            ..TemplateMessage::default()
        },
        TemplateMessage {
            role: "tool".into(),
            content: "here".into(),
            ..TemplateMessage::default()
        },
    ];
    let out = t.render(&messages, true, None, &Map::new()).unwrap();
    let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n\
<|im_start|>assistant\n<think>\nneed tools\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n\
<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n\
<tool_call>\n<function=where>\n<parameter=at>\n{\"lat\": 1.5}\n</parameter>\n<parameter=tags>\n[\"a\"]\n\
</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n\
<tool_response>\nhere\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n";
    assert_eq!(out, want);
}
