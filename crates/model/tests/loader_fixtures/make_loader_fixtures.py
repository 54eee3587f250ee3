#!/usr/bin/env python3
"""Checkpoints in the layouts the weights loader must handle, written by
transformers itself, with transformers' logits for one prompt.

* `next_d64`  — `Qwen3NextForCausalLM` (model_type `qwen3_next`): fused
  Gated DeltaNet projections `in_proj_qkvz` / `in_proj_ba`.
* `vl_moe_d128` — `Qwen3_5MoeForConditionalGeneration`: the text model under
  `text_config`, tensors under `model.language_model.`, a (tiny) vision tower
  under `model.visual.` that the loader skips; logits of a text-only prompt.

Each folder: config.json, model.safetensors, ids.json (a JSON array of token
ids), logits.safetensors (one f32 tensor `logits`, [n, vocab]).

Usage: python make_loader_fixtures.py OUT_DIR  (torch, transformers >= 5,
safetensors). Deterministic. Weights are re-drawn at unit-ish scale so that
every layer matters in the comparison.
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures"))
from make_fixtures import redraw_parameter  # noqa: E402  (crates/model/fixtures)

PROMPT = 48


def redraw(model, gen):
    """The parity fixtures' unit-ish scales; the vision tower N(0, 0.02^2)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
            else:
                redraw_parameter(name, p, gen)


TEXT = dict(
    vocab_size=300,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    num_experts=6,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=24,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)


def next_model():
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = Qwen3NextConfig(
        **TEXT,
        head_dim=64,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        intermediate_size=32,
        partial_rotary_factor=0.25,
        rope_theta=10000.0,
    )
    return cfg, Qwen3NextForCausalLM


def vl_model():
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    text = dict(
        TEXT,
        head_dim=128,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.25,
                         "mrope_section": [6, 5, 5], "mrope_interleaved": True},
    )
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=64, num_position_embeddings=16, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2)
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=vision,
                           image_token_id=299, video_token_id=298,
                           vision_start_token_id=297, vision_end_token_id=296)
    return cfg, Qwen3_5MoeForConditionalGeneration


def main(out_dir):
    for index, (name, make) in enumerate([("next_d64", next_model), ("vl_moe_d128", vl_model)]):
        gen = torch.Generator().manual_seed(4321 + index)
        cfg, cls = make()
        cfg._attn_implementation = "eager"
        try:
            cfg._experts_implementation = "eager"
        except Exception:
            pass
        model = cls(cfg).to(torch.float32).eval()
        redraw(model, gen)
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        model.save_pretrained(path, safe_serialization=True)
        ids = torch.randint(0, 290, (1, PROMPT), generator=gen)
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0].float().contiguous()
        with open(os.path.join(path, "ids.json"), "w") as f:
            json.dump(ids[0].tolist(), f)
        save_file({"logits": logits}, os.path.join(path, "logits.safetensors"))
        for junk in ("generation_config.json",):
            p = os.path.join(path, junk)
            if os.path.exists(p):
                os.remove(p)
        from safetensors import safe_open
        with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
            keys = sorted(f.keys())
        print(name, "tensors:", len(keys), "logits", tuple(logits.shape), "norm", float(logits.norm()))
        for k in keys:
            if ".layers.0." in k or "visual" in k[:20] or not ".layers." in k:
                print("  ", k)


if __name__ == "__main__":
    main(sys.argv[1])
