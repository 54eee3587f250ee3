//! JSON text as Python's `json.dumps(value, ensure_ascii=False)` writes it,
//! for the chat templates' `tojson` filter (transformers renders templates
//! with that filter): `", "` and `": "` separators (`","` with an indent),
//! keys in the order they were given, non-ASCII characters unescaped, `<`
//! `>` `&` `'` written as themselves (minijinja's own filter escapes them).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write;

/// The `tojson` filter: `value | tojson` or `value | tojson(indent=N)`.
pub fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(i) => Some(i),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    // Python's other arguments change nothing the templates rely on.
    for key in ["ensure_ascii", "sort_keys", "separators"] {
        let _ = kwargs.get::<Option<Value>>(key)?;
    }
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v).map_err(|_| {
            Error::new(
                ErrorKind::InvalidOperation,
                "tojson: indent must be a count",
            )
        })?),
    };
    let mut out = String::new();
    dump(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// Writes `v` at nesting `level`.
pub fn dump(v: &Value, indent: Option<usize>, level: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match v.as_i64().filter(|_| v.is_integer()) {
            Some(i) => {
                let _ = write!(out, "{i}");
            }
            None => {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                match serde_json::Number::from_f64(f) {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None if f.is_nan() => out.push_str("NaN"),
                    None if f > 0.0 => out.push_str("Infinity"),
                    None => out.push_str("-Infinity"),
                }
            }
        },
        ValueKind::String => string(v.as_str().unwrap_or_default(), out),
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            let mut items = Vec::with_capacity(keys.len());
            for k in keys {
                let val = v.get_item(&k)?;
                items.push((k, val));
            }
            container(out, '{', '}', indent, level, items.len(), |i, out| {
                let (k, val) = &items[i];
                match k.as_str() {
                    Some(s) => string(s, out),
                    None => string(&k.to_string(), out),
                }
                out.push_str(": ");
                dump(val, indent, level + 1, out)
            })?;
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(out, '[', ']', indent, level, items.len(), |i, out| {
                dump(&items[i], indent, level + 1, out)
            })?;
        }
        _ => string(&v.to_string(), out),
    }
    Ok(())
}

fn container(
    out: &mut String,
    open: char,
    close: char,
    indent: Option<usize>,
    level: usize,
    len: usize,
    mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        match indent {
            Some(n) => {
                if i > 0 {
                    out.push(',');
                }
                out.push('\n');
                out.push_str(&" ".repeat(n * (level + 1)));
            }
            None if i > 0 => out.push_str(", "),
            None => {}
        }
        item(i, out)?;
    }
    if let Some(n) = indent {
        out.push('\n');
        out.push_str(&" ".repeat(n * level));
    }
    out.push(close);
    Ok(())
}

/// A JSON string literal as Python writes it with `ensure_ascii=False`.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: Value) -> String {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(src, ctx).unwrap()
    }

    #[test]
    fn output_matches_python_json_dumps() {
        let v: Value = serde_json::from_str(
            r#"{"type": "function", "function": {"name": "f<x>", "description": "Ünï \"q\"\n\u0001",
               "parameters": {"b": [1, 2.5, true, null], "a": {}, "c": []}}}"#,
        )
        .unwrap();
        // Python: json.dumps(v, ensure_ascii=False) keeps key order.
        assert_eq!(
            render("{{ v | tojson }}", minijinja::context! { v => v.clone() }),
            r#"{"type": "function", "function": {"name": "f<x>", "description": "Ünï \"q\"\n\u0001", "parameters": {"b": [1, 2.5, true, null], "a": {}, "c": []}}}"#
        );
        assert_eq!(
            render(
                "{{ v | tojson(indent=2) }}",
                minijinja::context! { v => vec![1, 2] }
            ),
            "[\n  1,\n  2\n]"
        );
        assert_eq!(
            render("{{ {'k': [1]} | tojson(2) }}", minijinja::context! {}),
            "{\n  \"k\": [\n    1\n  ]\n}"
        );
        assert_eq!(render("{{ 1.0 | tojson }}", minijinja::context! {}), "1.0");
        assert_eq!(
            render("{{ 'x' | tojson }}", minijinja::context! {}),
            "\"x\""
        );
    }
}
