//! Reading a completion's `prompt` ([`Prompt`]) in one pass: a string, a
//! list of strings, or a list of token ids, told apart by the first element;
//! and [`token_ids`], a byte scanner for the common case of a plain list of
//! ids (what clients with their own tokenizer send: 33k ids in ~200 KB),
//! which serde reads element by element.

use crate::openai::Prompt;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use std::fmt;

/// What a `prompt` may be, in JSON's words (the error message's "expected").
pub const PROMPT_EXPECTED: &str = "a string, a list of one string, or a list of token ids";

/// Most ids reserved up front from a list's size hint.
const RESERVE_MAX: usize = 1 << 20;

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptVisitor)
    }
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Prompt;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(PROMPT_EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Prompt, E> {
        Ok(Prompt::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Prompt, E> {
        Ok(Prompt::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
        match seq.next_element::<Item>()? {
            None => Ok(Prompt::Texts(Vec::new())),
            Some(Item::Text(first)) => {
                let mut texts = vec![first];
                while let Some(t) = seq.next_element::<String>()? {
                    texts.push(t);
                }
                Ok(Prompt::Texts(texts))
            }
            Some(Item::Id(first)) => {
                let hint = seq.size_hint().unwrap_or(0).min(RESERVE_MAX);
                let mut ids = Vec::with_capacity(hint + 1);
                ids.push(first);
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                Ok(Prompt::Ids(ids))
            }
        }
    }
}

/// A list's first element: it decides the list's form.
enum Item {
    Text(String),
    Id(u32),
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a token id (a non-negative integer below 2^32)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Item, E> {
        Ok(Item::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Item, E> {
        Ok(Item::Text(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Item, E> {
        u32::try_from(v)
            .map(Item::Id)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Item, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
        }
    }
}

/// The ids of `raw` when it is a JSON list of one or more token ids written
/// plainly (decimal digits without a sign, fraction, exponent or leading
/// zero, each below 2^32, JSON whitespace anywhere between tokens); `None`
/// for anything else, which the serde path then reads (or refuses with its
/// message): the same ids serde would read, or nothing.
pub fn token_ids(raw: &str) -> Option<Vec<u32>> {
    let b = raw.as_bytes();
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let mut i = 0;
    let skip = |i: &mut usize| {
        while *i < b.len() && ws(b[*i]) {
            *i += 1;
        }
    };
    skip(&mut i);
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i += 1;
    // A size guess from the text: ids of 1-6 digits and ", ".
    let mut ids = Vec::with_capacity((b.len() / 4).min(RESERVE_MAX));
    loop {
        skip(&mut i);
        let start = i;
        let mut v: u64 = 0;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            v = v * 10 + u64::from(c - b'0');
            if v > u64::from(u32::MAX) {
                return None;
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || (digits > 1 && b[start] == b'0') {
            return None;
        }
        ids.push(v as u32);
        skip(&mut i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b']') => {
                i += 1;
                skip(&mut i);
                return (i == b.len()).then_some(ids);
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Prompt, String> {
        serde_json::from_str::<Prompt>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_form_reads_as_itself() {
        assert_eq!(read(r#""hi""#), Ok(Prompt::Text("hi".into())));
        assert_eq!(
            read(r#"["a", "b"]"#),
            Ok(Prompt::Texts(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            read("[1, 2, 4294967295]"),
            Ok(Prompt::Ids(vec![1, 2, u32::MAX]))
        );
        assert_eq!(read("[]"), Ok(Prompt::Texts(Vec::new())));
    }

    #[test]
    fn wrong_forms_say_what_was_expected() {
        let e = read("5").unwrap_err();
        assert!(e.contains(PROMPT_EXPECTED), "{e}");
        let e = read("[4294967296]").unwrap_err();
        assert!(e.contains("below 2^32"), "{e}");
        let e = read("[-1]").unwrap_err();
        assert!(e.contains("below 2^32"), "{e}");
        assert!(read(r#"[1, "a"]"#).is_err());
        assert!(read(r#"["a", 1]"#).is_err());
        assert!(read("[1.5]").is_err());
        assert!(read("{}").is_err());
    }

    #[test]
    fn the_id_scanner_reads_what_serde_reads_or_nothing() {
        // Plain lists, with JSON whitespace in every place it may go.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for len in [1usize, 2, 17, 1000] {
            let ids: Vec<u32> = (0..len)
                .map(|k| match k % 4 {
                    0 => 0,
                    1 => u32::MAX,
                    _ => (next() % 300_000) as u32,
                })
                .collect();
            let pad = |n: u64| [" ", "\n", "\t\r", ""][(n % 4) as usize];
            let mut text = format!("{}[", pad(next()));
            for (k, id) in ids.iter().enumerate() {
                if k > 0 {
                    text.push_str(pad(next()));
                    text.push(',');
                }
                text.push_str(pad(next()));
                text.push_str(&id.to_string());
            }
            text.push_str(pad(next()));
            text.push(']');
            text.push_str(pad(next()));
            assert_eq!(token_ids(&text), Some(ids.clone()), "{text:?}");
            assert_eq!(read(&text), Ok(Prompt::Ids(ids)), "{text:?}");
        }
        // Anything else is left to serde, which reads or refuses it.
        for text in [
            "[]",
            "[ ]",
            "[4294967296]",
            "[-1]",
            "[1.5]",
            "[1e3]",
            "[01]",
            "[00]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1]]",
            "[1] x",
            "[[1]]",
            r#"[1, "a"]"#,
            r#"["a"]"#,
            "\"1\"",
            "5",
            "{}",
            "[1",
            "",
            "[+1]",
            "[1,,2]",
        ] {
            assert_eq!(token_ids(text), None, "{text:?}");
        }
    }
}
