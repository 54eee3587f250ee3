//! Text ↔ token ids.
//!
//! * [`Tokenizer`]: a checkpoint's `tokenizer.json` through the Hugging Face
//!   `tokenizers` crate (pure Rust, `fancy-regex`). Encoding adds no special
//!   tokens (Qwen models use no BOS); decoding skips special tokens.
//! * [`TextCodec::Bytes`]: the fallback for synthetic models, which have no
//!   tokenizer: each UTF-8 byte of the text is one token id (0..=255);
//!   decoding turns ids below 256 back into bytes (invalid UTF-8 is replaced
//!   by U+FFFD) and writes any other id as `<|ID|>`. It needs a vocabulary
//!   of at least 256 ids.
//! * [`TextCodec::BytesWithSpecials`]: the byte fallback plus a family's
//!   special tokens at their real ids (a synthetic model of the family's
//!   vocabulary size, see `crate::synthetic::codec_for`): their text encodes
//!   to their id, and decoding skips the ones the family's tokenizer marks
//!   special and writes the others (`<think>`, `<tool_call>`) as text.

use std::path::Path;

/// Why a tokenizer could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot load tokenizer {path}: {reason}")]
    Load { path: String, reason: String },
    #[error("tokenizer: {0}")]
    Codec(String),
}

/// A Hugging Face `tokenizer.json` tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

/// The largest `tokenizer.json` read (Qwen's is about 11 MiB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

impl Tokenizer {
    /// Loads `DIR/tokenizer.json`.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_file(&dir.join("tokenizer.json"))
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let load = |reason: String| TokenizerError::Load {
            path: path.display().to_string(),
            reason,
        };
        // A regular file of bounded size only: a FIFO is refused unopened.
        let bytes = crate::files::read_regular(path, MAX_TOKENIZER_BYTES).map_err(|e| match e {
            crate::files::FileError::Refused { reason, .. } => load(reason),
            crate::files::FileError::Io { op, error, .. } => load(format!("{op} failed: {error}")),
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| load(e.to_string()))?;
        Ok(Tokenizer { inner })
    }

    /// Token ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Codec(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids` (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string (e.g. `<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// An added token of a vocabulary: its text, its id, and whether a decode
/// that skips special tokens drops it (`<|im_end|>`) or keeps it (`<think>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialToken {
    pub text: &'static str,
    pub id: u32,
    pub skipped: bool,
}

/// How a command turns text into ids and back.
#[derive(Debug)]
pub enum TextCodec {
    /// A checkpoint's tokenizer.
    Hf(Box<Tokenizer>),
    /// The byte-level fallback for synthetic models (see the module documentation).
    Bytes,
    /// The byte-level fallback plus these added tokens (see the module documentation).
    BytesWithSpecials(&'static [SpecialToken]),
}

impl TextCodec {
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            TextCodec::Hf(t) => t.encode(text),
            TextCodec::Bytes => Ok(text.bytes().map(u32::from).collect()),
            TextCodec::BytesWithSpecials(s) => Ok(encode_with_specials(text, s)),
        }
    }

    /// The id of an added token's text (`None` for the plain byte fallback,
    /// or a text the vocabulary does not have as one token).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            TextCodec::Hf(t) => t.token_id(token),
            TextCodec::Bytes => None,
            TextCodec::BytesWithSpecials(s) => s.iter().find(|t| t.text == token).map(|t| t.id),
        }
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match self {
            TextCodec::Hf(t) => t.decode(ids),
            TextCodec::Bytes => Ok(decode_bytes(ids, &[])),
            TextCodec::BytesWithSpecials(s) => Ok(decode_bytes(ids, s)),
        }
    }
}

/// Bytes as ids, each added token's text (the longest at a position) as its id.
fn encode_with_specials(text: &str, specials: &[SpecialToken]) -> Vec<u32> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hit = specials
            .iter()
            .filter(|t| bytes[i..].starts_with(t.text.as_bytes()))
            .max_by_key(|t| t.text.len());
        match hit {
            Some(t) => {
                out.push(t.id);
                i += t.text.len();
            }
            None => {
                out.push(u32::from(bytes[i]));
                i += 1;
            }
        }
    }
    out
}

fn decode_bytes(ids: &[u32], specials: &[SpecialToken]) -> String {
    let mut out = String::new();
    let mut pending: Vec<u8> = Vec::new();
    for &id in ids {
        if id < 256 {
            pending.push(id as u8);
        } else if let Some(t) = specials.iter().find(|t| t.id == id) {
            out.push_str(&String::from_utf8_lossy(&pending));
            pending.clear();
            if !t.skipped {
                out.push_str(t.text);
            }
        } else {
            out.push_str(&String::from_utf8_lossy(&pending));
            pending.clear();
            out.push_str(&format!("<|{id}|>"));
        }
    }
    out.push_str(&String::from_utf8_lossy(&pending));
    out
}

/// Incremental decoding for streaming: feed ids one at a time and get the
/// newly completed text (held back while the text ends in an incomplete
/// UTF-8 sequence, shown as U+FFFD).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    emitted: usize,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds `id`; returns the text that became final.
    pub fn push(&mut self, codec: &TextCodec, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        let text = codec.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') || text.len() < self.emitted {
            return Ok(String::new());
        }
        let new = text.get(self.emitted..).unwrap_or_default().to_string();
        self.emitted = text.len();
        Ok(new)
    }

    /// Whatever is still held back at the end.
    pub fn finish(&mut self, codec: &TextCodec) -> Result<String, TokenizerError> {
        let text = codec.decode(&self.ids)?;
        let new = text.get(self.emitted..).unwrap_or_default().to_string();
        self.emitted = text.len();
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// GPT-2's byte → printable char table (the ByteLevel alphabet).
    fn byte_chars() -> Vec<char> {
        let direct: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
        let mut chars = vec!['\0'; 256];
        let mut extra = 0;
        for b in 0..256u32 {
            if direct.contains(&b) {
                chars[b as usize] = char::from_u32(b).unwrap();
            } else {
                chars[b as usize] = char::from_u32(256 + extra).unwrap();
                extra += 1;
            }
        }
        chars
    }

    /// A small byte-level BPE tokenizer.json (the kind Qwen uses), with a few merges
    /// and one special token.
    fn write_tokenizer(dir: &Path) {
        write_tokenizer_with(dir, false)
    }

    /// `qwen_style`: the pre-tokenizer Qwen checkpoints use — NFC, then a
    /// `Split` on Qwen2's regex (with a `(?!\S)` look-ahead, which needs
    /// fancy-regex), then a ByteLevel without its own regex.
    fn write_tokenizer_with(dir: &Path, qwen_style: bool) {
        let chars = byte_chars();
        let mut vocab = serde_json::Map::new();
        for (i, c) in chars.iter().enumerate() {
            vocab.insert(c.to_string(), i.into());
        }
        let g = chars[b' ' as usize];
        let merges = ["l l", "h e", "he ll", "hell o", &format!("{g} w"), "o r"];
        for (i, m) in merges.iter().enumerate() {
            vocab.insert(m.replace(' ', ""), (256 + i).into());
        }
        let special = 256 + merges.len();
        let tok = json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [{"id": special, "content": "<|endoftext|>", "single_word": false,
                              "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                      "vocab": vocab, "merges": merges}
        });
        let mut tok = tok;
        if qwen_style {
            let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
            tok["normalizer"] = json!({"type": "NFC"});
            tok["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
            ]});
        }
        std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    }

    #[test]
    fn byte_level_bpe_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        write_tokenizer(dir.path());
        let t = Tokenizer::from_dir(dir.path()).unwrap();
        assert_eq!(t.vocab_size(), 256 + 6 + 1);
        let ids = t.encode("hello world").unwrap();
        // "hello" merges to one token, " w" to one, "or" to one: h-e-l-l-o → 1, then Ġw, o r → or, l, d
        assert_eq!(ids, vec![259, 260, 261, b'l' as u32, b'd' as u32]);
        for text in ["hello world", "Grüße, 世界! 🙂\n\ttabs  and  spaces", ""] {
            let ids = t.encode(text).unwrap();
            assert_eq!(t.decode(&ids).unwrap(), text);
        }
        let eot = t.token_id("<|endoftext|>").unwrap();
        let mut ids = t.encode("hello").unwrap();
        ids.push(eot);
        assert_eq!(
            t.decode(&ids).unwrap(),
            "hello",
            "special tokens are skipped"
        );
    }

    #[test]
    fn qwen_style_regex_pre_tokenizer_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        write_tokenizer_with(dir.path(), true);
        let t = Tokenizer::from_dir(dir.path()).unwrap();
        // The split isolates "hello" so its merges apply; digits are split one by one.
        assert_eq!(t.encode("hello").unwrap(), vec![259]);
        assert_eq!(t.encode("42").unwrap(), vec![b'4' as u32, b'2' as u32]);
        for text in [
            "We're  here:\n\n  x = 42;\t// ok ",
            "Ünïcode — 世界 🙂",
            "trailing   ",
        ] {
            let ids = t.encode(text).unwrap();
            assert_eq!(t.decode(&ids).unwrap(), text);
        }
    }

    #[test]
    fn a_fifo_or_folder_tokenizer_is_refused_by_what_it_is_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        let err = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("tokenizer.json") && err.contains("FIFO"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let err = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a folder"), "{err}");
    }

    #[test]
    fn missing_or_malformed_tokenizer_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Tokenizer::from_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
        std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 1").unwrap();
        assert!(matches!(
            Tokenizer::from_dir(dir.path()),
            Err(TokenizerError::Load { .. })
        ));
    }

    #[test]
    fn byte_fallback_round_trips_and_marks_large_ids() {
        let c = TextCodec::Bytes;
        let text = "naïve 🙂";
        let ids = c.encode(text).unwrap();
        assert_eq!(ids.len(), text.len());
        assert!(ids.iter().all(|&i| i < 256));
        assert_eq!(c.decode(&ids).unwrap(), text);
        assert_eq!(c.decode(&[104, 300, 105]).unwrap(), "h<|300|>i");
    }

    #[test]
    fn stream_decoder_holds_back_partial_utf8() {
        let c = TextCodec::Bytes;
        let mut s = StreamDecoder::new();
        let mut out = String::new();
        let mut pieces = Vec::new();
        for id in c.encode("aé🙂b").unwrap() {
            let p = s.push(&c, id).unwrap();
            assert!(!p.contains('\u{FFFD}'));
            pieces.push(p.clone());
            out.push_str(&p);
        }
        out.push_str(&s.finish(&c).unwrap());
        assert_eq!(out, "aé🙂b");
        assert_eq!(pieces.iter().filter(|p| !p.is_empty()).count(), 4);
    }
}
