#!/usr/bin/env python3
"""reference_bf16_spread.py [--out FILE.json]: how far transformers itself moves
in bf16 on the repository's fixtures — issue 8's bar applied to the reference.

Issue 8's CUDA bar compares Headroom on CUDA (bf16 weights and activations)
with the CPU backend in f32 on the same bf16-rounded matrices, relative
Frobenius error of the logits <= 2e-2 (bench/gpu/check_model.sh). This script
runs the same comparison with transformers (the reference) on the GPU, per
fixture of crates/model/tests/fixtures and prompt (40, 300 tokens):

  f32           transformers in f32 (TF32 off) on the fixture's weights;
                `f32_vs_fixture` checks it reproduces the fixture's logits.
  f32_bf16w     f32 on the matrices rounded to bf16 (round_bf16.py's rule:
                two-dim tensors except conv1d.weight): the bar's baseline.
  bf16          the whole model cast to bf16 (weights and activations).

`bf16_vs_f32_bf16w` is the bar's error for the reference itself. With MoE
routers, a bf16 perturbation of the hidden states flips top-k choices of
near-tied experts, and each flip moves that token's logits by O(1): the
`routing_flips` field counts, per MoE layer, tokens whose top-k set differs
between `bf16` and `f32_bf16w` (router logits captured by forward hooks).
Needs torch, transformers >= 5 and safetensors (the GPU machine has them).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
import transformers

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "model", "tests", "fixtures")
FIXTURES = ["dense_d64", "moe_d64", "moe_d256", "next_d128"]


def rel(a, b):
    return float(torch.linalg.norm((a - b).double()) / torch.linalg.norm(b.double()))


def round_bf16_matrices(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and not name.endswith("conv1d.weight"):
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


def build(dirname, device):
    cfg = transformers.AutoConfig.from_pretrained(dirname)
    arch = cfg.architectures[0]
    cls = getattr(transformers, arch)
    return cls.from_pretrained(dirname, dtype=torch.float32).to(device).eval()


def gates(model):
    """The MoE router modules (`mlp.gate`), in layer order."""
    out = []
    for name, m in model.named_modules():
        if name.endswith("mlp.gate") and hasattr(m, "weight") and m.weight.dim() == 2:
            out.append((name, m))
    return out


def run(model, ids, top_k):
    captured = []
    hooks = []
    for _, g in gates(model):
        def hook(mod, inp, outp, store=captured):
            x = inp[0].reshape(-1, inp[0].shape[-1])
            logits = torch.nn.functional.linear(x, mod.weight).float()
            store.append(torch.topk(logits, top_k, dim=-1).indices.sort(dim=-1).values.cpu())
        hooks.append(g.register_forward_hook(hook))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().cpu()
    for h in hooks:
        h.remove()
    return logits, captured


def main():
    out_path = None
    if "--out" in sys.argv:
        out_path = sys.argv[sys.argv.index("--out") + 1]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for fx in FIXTURES:
        d = os.path.join(FIX, fx)
        cfg = json.load(open(os.path.join(d, "config.json")))
        top_k = cfg.get("num_experts_per_tok", 0)
        for n in (40, 300):
            ids = torch.tensor([json.load(open(os.path.join(d, f"ids_{n}.json")))], device=device)
            ref = load_file(os.path.join(d, f"logits_{n}.safetensors"))["logits"].float()
            m = build(d, device)
            f32, _ = run(m, ids, max(top_k, 1))
            round_bf16_matrices(m)
            f32w, r32 = run(m, ids, max(top_k, 1))
            m = m.to(torch.bfloat16)
            bf16, r16 = run(m, ids, max(top_k, 1))
            flips = [int((a != b).any(dim=-1).sum()) for a, b in zip(r32, r16)] if top_k else []
            row = {
                "fixture": fx,
                "tokens": n,
                "f32_vs_fixture": rel(f32, ref),
                "f32_bf16w_vs_fixture": rel(f32w, ref),
                "bf16_vs_f32_bf16w": rel(bf16, f32w),
                "bf16_vs_fixture": rel(bf16, ref),
                "routing_flips": flips,
                "bar": 2e-2,
            }
            row["within_bar"] = row["bf16_vs_f32_bf16w"] <= 2e-2
            rows.append(row)
            print(f"{fx:10s} n={n:3d} f32-vs-fixture {row['f32_vs_fixture']:.2e}  "
                  f"bf16w-vs-fixture {row['f32_bf16w_vs_fixture']:.2e}  "
                  f"bar: bf16-vs-f32(bf16w) {row['bf16_vs_f32_bf16w']:.2e} "
                  f"{'PASS' if row['within_bar'] else 'FAIL'}  routing flips per MoE layer {flips}",
                  flush=True)
    doc = {
        "schema": "headroom.reference_bf16_spread/1",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "rows": rows,
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
