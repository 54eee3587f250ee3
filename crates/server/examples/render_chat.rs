//! Prints the prompt text Headroom renders for chat requests, exactly as the
//! server builds it (history conversion, `tools` by `tool_choice`,
//! `chat_template_kwargs`, the forced opening of a required call), for the
//! template parity check against transformers
//! (`bench/tokenizer/template_parity.py`).
//!
//! ```text
//! render_chat [--template FILE | --model-dir DIR] CASES.json
//! ```
//!
//! `CASES.json` is a JSON list of strings, each a chat request body's JSON
//! text (read by the server's own body parser, so the keys of `tools` keep
//! their order); the output (stdout) is a JSON list with, per case,
//! `{"text": PROMPT}` or `{"error": MESSAGE}`.
//! Without `--template` / `--model-dir` the built-in template of Qwen3.5's
//! shape is used.

use headroom_model::tokenizer::TextCodec;
use headroom_server::body_json::parse_request;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::openai::ChatRequest;
use headroom_server::prompt::chat_prompt;
use headroom_server::{AppState, ChatTemplate, ServerConfig};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

fn main() {
    if let Err(e) = run() {
        eprintln!("render_chat: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (template, cases) = match args.as_slice() {
        [cases] => (ChatTemplate::qwen_shaped(), cases),
        [flag, file, cases] if flag == "--template" => {
            let src = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let t = ChatTemplate::new(&src, "", "").map_err(|e| e.to_string())?;
            (t, cases)
        }
        [flag, dir, cases] if flag == "--model-dir" => {
            let t = ChatTemplate::from_dir(Path::new(dir))
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{dir} has no chat template"))?;
            (t, cases)
        }
        _ => {
            return Err("usage: render_chat [--template FILE | --model-dir DIR] CASES.json".into())
        }
    };
    let text = std::fs::read_to_string(cases).map_err(|e| format!("{cases}: {e}"))?;
    let bodies: Vec<String> = serde_json::from_str(&text).map_err(|e| format!("{cases}: {e}"))?;
    // The byte codec: the prompt's ids are its bytes, so decoding gives the text back exactly.
    let state = AppState::new(
        Arc::new(FakeGenerator::new(FakeConfig::default())),
        TextCodec::Bytes,
        template,
        ServerConfig::new("parity", 256),
    );
    let out: Vec<Value> = bodies
        .into_iter()
        .map(|b| {
            let rendered = parse_request::<ChatRequest>(b.as_bytes())
                .and_then(|r| chat_prompt(&state, &r))
                .map_err(|e| e.message)
                .and_then(|p| TextCodec::Bytes.decode(&p.ids).map_err(|e| e.to_string()));
            match rendered {
                Ok(text) => json!({ "text": text }),
                Err(e) => json!({ "error": e }),
            }
        })
        .collect();
    println!("{}", Value::Array(out));
    Ok(())
}
