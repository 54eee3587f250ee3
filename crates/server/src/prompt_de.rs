//! Reading a completion's `prompt` ([`Prompt`]) in one pass: a string, a
//! list of strings, or a list of token ids, told apart by the first element.

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
}
