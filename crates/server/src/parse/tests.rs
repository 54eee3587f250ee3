//! The output parser over whole outputs and over every way of cutting them.

use super::*;
use serde_json::json;

fn tools() -> Vec<ToolSpec> {
    [
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}),
        json!({"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}),
    ]
    .iter()
    .map(|d| ToolSpec::from_definition(d).unwrap())
    .collect()
}

fn cfg(reasoning: bool, starts: bool, with_tools: bool) -> ParserConfig {
    ParserConfig {
        reasoning,
        starts_in_reasoning: starts,
        tools: if with_tools { tools() } else { Vec::new() },
        forced: String::new(),
    }
}

/// `cfg` with the output forced to start with `forced`.
fn forced(reasoning: bool, forced: &str) -> ParserConfig {
    ParserConfig {
        forced: forced.into(),
        ..cfg(reasoning, false, true)
    }
}

/// Feeds `pieces` in order; merged events.
fn run(c: &ParserConfig, pieces: &[&str]) -> Vec<Event> {
    let mut p = OutputParser::new(c.clone());
    let mut out = Vec::new();
    for piece in pieces {
        for e in p.feed(piece) {
            push_event(&mut out, e);
        }
    }
    for e in p.finish() {
        push_event(&mut out, e);
    }
    out
}

fn content(s: &str) -> Event {
    Event::Content(s.into())
}
fn reasoning(s: &str) -> Event {
    Event::Reasoning(s.into())
}
fn call(name: &str, args: &str) -> Event {
    Event::ToolCall(ToolCall {
        name: name.into(),
        arguments: args.into(),
    })
}

const WEATHER: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
const ADD: &str = "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>";

/// (config, output, expected events) of every scenario.
fn scenarios() -> Vec<(ParserConfig, String, Vec<Event>)> {
    let w = call("get_weather", r#"{"city":"Paris","days":3}"#);
    let a = call("add", r#"{"a":1.5,"b":2}"#);
    let bad_fn = "<tool_call>\n<function=nope>\n</function>\n</tool_call>";
    let bad_param =
        "<tool_call>\n<function=add>\n<parameter=c>\n1\n</parameter>\n</function>\n</tool_call>";
    let no_fn_end = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</tool_call>";
    let cut = "<tool_call>\n<function=add>\n<parameter=a>\n1";
    vec![
        (
            forced(true, "<tool_call>\n<function="),
            WEATHER["<tool_call>\n<function=".len()..].into(),
            vec![w.clone()],
        ),
        (
            forced(false, "<tool_call>\n<function=add>\n"),
            ADD["<tool_call>\n<function=add>\n".len()..].into(),
            vec![a.clone()],
        ),
        (
            forced(true, "<tool_call>\n<function="),
            format!("{}\n{}", &WEATHER["<tool_call>\n<function=".len()..], ADD),
            vec![w.clone(), a.clone()],
        ),
        (
            forced(true, "<tool_call>\n<function="),
            "get_wea".into(),
            vec![content("<tool_call>\n<function=get_wea")],
        ),
        (
            cfg(true, false, false),
            "plain text only".into(),
            vec![content("plain text only")],
        ),
        (
            cfg(true, false, false),
            "<think>\nweigh it\n</think>\n\nThe answer.".into(),
            vec![reasoning("\nweigh it\n"), content("The answer.")],
        ),
        (
            cfg(true, true, false),
            "weigh it</think>\n\n  The answer.\n".into(),
            vec![reasoning("weigh it"), content("The answer.\n")],
        ),
        (
            cfg(true, true, true),
            format!("need weather\n</think>\n\n{WEATHER}"),
            vec![reasoning("need weather\n"), w.clone()],
        ),
        (
            cfg(true, true, true),
            format!("need weather, no end tag\n{WEATHER}\n"),
            vec![reasoning("need weather, no end tag\n"), w.clone()],
        ),
        (
            cfg(true, false, true),
            format!("Let me check.\n\n{WEATHER}\n{ADD}"),
            vec![content("Let me check."), w.clone(), a.clone()],
        ),
        (
            cfg(false, false, true),
            format!("<think>x</think>{ADD} done"),
            vec![content("<think>x</think>"), a.clone(), content("done")],
        ),
        (
            cfg(true, false, false),
            WEATHER.to_string(),
            vec![content(WEATHER)],
        ),
        (
            cfg(true, false, false),
            "Text then <think>not reasoning</think>".into(),
            vec![content("Text then <think>not reasoning</think>")],
        ),
        (
            cfg(true, false, true),
            format!("{bad_fn}\n{ADD}"),
            vec![content(bad_fn), a.clone()],
        ),
        (
            cfg(true, false, true),
            format!("{WEATHER}\n{bad_param}"),
            vec![w.clone(), content(bad_param)],
        ),
        (
            cfg(true, false, true),
            format!("x {no_fn_end}"),
            vec![content("x"), content(no_fn_end)],
        ),
        (
            cfg(true, true, true),
            format!("r</think>{ADD}{cut}"),
            vec![reasoning("r"), a.clone(), content(cut)],
        ),
        (
            cfg(true, false, true),
            "a < b <tool <tool_cal <think".into(),
            vec![content("a < b <tool <tool_cal <think")],
        ),
        (
            cfg(true, false, true),
            "  <think>ünïcödé 🙂</think>  🙂 ok  ".into(),
            vec![reasoning("ünïcödé 🙂"), content("🙂 ok  ")],
        ),
    ]
}

fn merged(events: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    for e in events {
        push_event(&mut out, e);
    }
    out
}

#[test]
fn each_scenario_gives_its_events_in_one_piece() {
    for (c, text, want) in scenarios() {
        assert_eq!(run(&c, &[&text]), merged(want), "{text:?}");
    }
}

/// Character boundaries of `text`, shuffled by a seeded generator.
fn random_cuts(text: &str, seed: u64, count: usize) -> Vec<usize> {
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut cuts: Vec<usize> = (0..count)
        .filter_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (!bounds.is_empty()).then(|| bounds[(state % bounds.len() as u64) as usize])
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn pieces<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(&text[from..c]);
        from = c;
    }
    out.push(&text[from..]);
    out
}

#[test]
fn every_split_of_an_output_gives_the_same_events() {
    for (c, text, _) in scenarios() {
        let whole = run(&c, &[&text]);
        // Every single cut, and one piece per character.
        for (at, _) in text.char_indices() {
            assert_eq!(
                run(&c, &pieces(&text, &[at])),
                whole,
                "{text:?} cut at {at}"
            );
        }
        let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        assert_eq!(run(&c, &pieces(&text, &chars)), whole, "{text:?} per char");
        for seed in 0..200 {
            let cuts = random_cuts(&text, seed, 1 + (seed as usize % 12));
            assert_eq!(
                run(&c, &pieces(&text, &cuts)),
                whole,
                "{text:?} cuts {cuts:?}"
            );
        }
    }
}

#[test]
fn no_text_is_lost_outside_dropped_whitespace() {
    for (c, text, _) in scenarios() {
        let mut kept = String::new();
        for e in run(&c, &[&text]) {
            match e {
                Event::Content(t) | Event::Reasoning(t) => kept.push_str(&t),
                Event::ToolCall(call) => kept.push_str(&call.name),
            }
        }
        let squash = |s: &str| -> String {
            s.replace("<think>", "")
                .replace("</think>", "")
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect()
        };
        let kept = squash(&kept);
        let mut rest = squash(&format!("{}{text}", c.forced));
        // Decoded calls keep only their name here; remove their blocks from the source.
        for block in [WEATHER, ADD] {
            let name = if block == WEATHER {
                "get_weather"
            } else {
                "add"
            };
            if c.tools.is_empty() {
                continue;
            }
            rest = rest.replace(&squash(block), name);
        }
        assert_eq!(kept, rest, "{text:?}");
    }
}

#[test]
fn the_prompt_tells_whether_reasoning_is_open() {
    assert!(ParserConfig::prompt_opens_reasoning(
        "<|im_start|>assistant\n<think>\n"
    ));
    assert!(!ParserConfig::prompt_opens_reasoning(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ));
    assert!(!ParserConfig::prompt_opens_reasoning(
        "user: hi\nassistant: "
    ));
    assert!(!ParserConfig::prompt_opens_reasoning(
        "<think>a</think> ... </think>"
    ));
}

#[test]
fn the_parser_counts_decoded_calls() {
    let mut p = OutputParser::new(cfg(true, false, true));
    p.feed(WEATHER);
    p.feed("<tool_call>\n<function=nope>\n</function>\n</tool_call>");
    p.feed(ADD);
    p.finish();
    assert_eq!(p.calls(), 2);
}
