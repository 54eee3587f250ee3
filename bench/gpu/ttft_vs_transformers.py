#!/usr/bin/env python3
"""TTFT of the Qwen3.6-35B-A3B text shape (40 layers, random N(0, 0.02) bf16
weights) on one GPU: Headroom (`headroom bench ttft`: each prompt a fresh
request through the engine, the path `generate` and `serve` run —
`"path": "engine"` in its JSON — with the engine's solo stripe as resolved
(default `auto`: the whole prompt in one step on the GPU, up to 65,536 tokens
and the memory left; `engine.solo_stripe` in the JSON says what it resolved
to and why); both attention arms: fused and composed qL=512) side by side
with the transformers peer (Qwen3_5MoeForCausalLM, sdpa attention,
grouped_mm experts, the Gated DeltaNet on flash-linear-attention's Triton
kernels when the fla wheels are on PYTHONPATH; one forward with
logits_to_keep=1, median of N after a warm-up).

Prints TTFT, tokens/s, peak transient memory, engine steps to the first
token and the ratio; writes $OUT/ttft.json (both sides) and
$OUT/headroom-<arm>.json (Headroom's own headroom.bench.ttft/2 files, with
the per-part breakdown and the engine's settings).

Usage: ttft_vs_transformers.py [--bin target/release/headroom] [--lengths 2048,8192,32768]
       [--headroom-only-lengths 131072] [--iterations 3] [--skip-peer]
       [--solo-stripe N|auto]   (passed to `bench ttft`; default: the engine's `auto`)
The shape is the one of `--synthetic qwen3.6-35b-a3b`
(crates/model/src/config.rs, fn qwen36_35b_a3b).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIG = dict(
    vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
    num_attention_heads=16, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=32,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
    shared_expert_intermediate_size=512, norm_topk_prob=True,
    rms_norm_eps=1e-6, tie_word_embeddings=False, full_attention_interval=4,
    max_position_embeddings=262144,
)


def peer(lengths, iterations):
    import torch
    from transformers import Qwen3_5MoeForCausalLM
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig

    cfg = Qwen3_5MoeTextConfig(
        **CONFIG,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(40)],
        rope_parameters=dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25,
                             mrope_section=[11, 11, 10], mrope_interleaved=True),
    )
    cfg._attn_implementation = "sdpa"
    try:
        cfg._experts_implementation = "grouped_mm"
    except Exception:
        pass
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3_5MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02)
    fla = "fla" in sys.modules or any("fla" in m for m in sys.modules)
    out = {}
    for n in lengths:
        ids = torch.randint(0, CONFIG["vocab_size"], (1, n), device="cuda")
        times = []
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            for it in range(iterations + 1):
                torch.cuda.synchronize()
                t = time.perf_counter()
                model(input_ids=ids, logits_to_keep=1, use_cache=False)
                torch.cuda.synchronize()
                if it > 0:
                    times.append((time.perf_counter() - t) * 1e3)
        peak = torch.cuda.max_memory_allocated() - base
        out[n] = dict(ttft_ms=times, median_ttft_ms=statistics.median(times), peak_transient_bytes=peak)
        print(f"peer {n:>7} tokens  TTFT {statistics.median(times):9.1f} ms  peak +{peak / 2**30:.2f} GiB", flush=True)
    del model
    torch.cuda.empty_cache()
    return out, fla


def headroom(binary, lengths, iterations, arm, out_dir, solo_stripe=None):
    arm_flags = {"fused": ["--attn-execution", "fused"],
                 "composed512": ["--attn-execution", "fallback", "--attn-query-block", "512"]}[arm]
    path = os.path.join(out_dir, f"headroom-{arm}.json")
    cmd = [binary, *arm_flags, "bench", "ttft", "--backend", "cuda", "--synthetic", "qwen3.6-35b-a3b",
           "--lengths", ",".join(map(str, lengths)), "--iterations", str(iterations), "--warmup", "1",
           "--json", path]
    if arm == "fused":
        cmd += ["--breakdown", "--decode", "32"]
    if solo_stripe:
        cmd += ["--solo-stripe", solo_stripe]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/headroom")
    ap.add_argument("--lengths", default="2048,8192,32768")
    ap.add_argument("--headroom-only-lengths", default="")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--arms", default="fused,composed512")
    ap.add_argument("--solo-stripe", default=None)
    a = ap.parse_args()
    out_dir = os.environ.get("OUT", "gpu-out")
    os.makedirs(out_dir, exist_ok=True)
    lengths = [int(x) for x in a.lengths.split(",") if x]
    extra = [int(x) for x in a.headroom_only_lengths.split(",") if x]
    result = dict(lengths=lengths, headroom={}, peer=None)
    for arm in a.arms.split(","):
        try:
            result["headroom"][arm] = headroom(a.bin, lengths + extra, a.iterations, arm, out_dir,
                                               a.solo_stripe)
        except subprocess.CalledProcessError as e:
            print(f"headroom {arm} failed: {e}", flush=True)
    if not a.skip_peer:
        peer_res, fla = peer(lengths, a.iterations)
        result["peer"] = peer_res
        result["peer_fla"] = fla
    for arm, rep in result["headroom"].items():
        stripe = (rep.get("engine") or {}).get("solo_stripe") or {}
        print(f"headroom {arm}: path {rep.get('path', 'model')}, solo stripe "
              f"{stripe.get('tokens', '-')} ({stripe.get('requested', '-')}: {stripe.get('reason', '-')})")
    print("\n| prompt | arm | Headroom TTFT | tokens/s | peak transient | steps | peer TTFT | peer peak | speed-up |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for arm, rep in result["headroom"].items():
        for r in rep["results"]:
            n = r["tokens"]
            p = (result["peer"] or {}).get(n)
            ratio = f"{p['median_ttft_ms'] / r['median_ttft_ms']:.2f}x" if p else "-"
            print(f"| {n} | {arm} | {r['median_ttft_ms']:.1f} ms | {r['tokens_per_s']:.0f} | "
                  f"{r['peak_transient_bytes'] / 2**30:.2f} GiB | {r.get('steps_to_first_token', 1)} | "
                  f"{(str(round(p['median_ttft_ms'], 1)) + ' ms') if p else '-'} | "
                  f"{(str(round(p['peak_transient_bytes'] / 2**30, 2)) + ' GiB') if p else '-'} | {ratio} |")
    with open(os.path.join(out_dir, "ttft.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
