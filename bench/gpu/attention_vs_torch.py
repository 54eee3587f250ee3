#!/usr/bin/env python3
"""Headroom's CUDA attention routes vs PyTorch SDPA, in one GPU call.

Runs Headroom's bench (`headroom bench attention --backend cuda`: fused,
composed:128, composed:512; or `headroom kernels time` with --timer kernels) and PyTorch
scaled_dot_product_attention (flash and cuDNN backends, enable_gqa=True) on
identical shapes: B=1, q_heads/kv_heads, head_dim, causal, no history. Prints
one table per length and dtype: ms (median of CUDA-event timings), TFLOP/s
with causal FLOPs = 4 * q_heads * head_dim * sum(attended keys), transient
MiB, and the ratio to the best peer and to cuDNN. Writes everything as JSON.

Usage (repo root, GPU machine):
  python3 bench/gpu/attention_vs_torch.py --headroom target/release/headroom \
      --lengths 8192,32768 --dtypes bf16,f16 --json OUT/attention_vs_torch.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def causal_flops(q_heads, head_dim, length):
    return 4.0 * q_heads * head_dim * (length * (length + 1) / 2)


def torch_rows(args):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    rows = []
    for length in args.lengths:
        for dtype_name in args.dtypes:
            dt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
            g = torch.Generator(device="cuda").manual_seed(length)
            q = torch.rand(1, args.q_heads, length, args.head_dim, device="cuda", dtype=dt, generator=g) * 2 - 1
            k = torch.rand(1, args.kv_heads, length, args.head_dim, device="cuda", dtype=dt, generator=g) * 2 - 1
            v = torch.rand(1, args.kv_heads, length, args.head_dim, device="cuda", dtype=dt, generator=g) * 2 - 1
            for name, be in backends.items():
                try:
                    with sdpa_kernel([be]):
                        run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                        for _ in range(args.warmup):
                            run()
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        times = []
                        for _ in range(args.iters):
                            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            s.record()
                            out = run()
                            e.record()
                            e.synchronize()
                            times.append(s.elapsed_time(e))
                            del out
                        out_bytes = q.numel() * q.element_size()
                        transient = max(0, torch.cuda.max_memory_allocated() - base - out_bytes)
                except Exception as ex:  # a backend that does not run this shape
                    print(f"torch {name} {dtype_name} L={length}: {ex}", file=sys.stderr)
                    continue
                ms = statistics.median(times)
                rows.append({
                    "impl": f"torch:{name}", "length": length, "dtype": dtype_name, "median_ms": ms,
                    "times_ms": times, "tflops": causal_flops(args.q_heads, args.head_dim, length) / (ms * 1e-3) / 1e12,
                    "transient_bytes": transient,
                })
            del q, k, v
            torch.cuda.empty_cache()
    return rows


def headroom_rows_bench(args, tmp):
    """`headroom bench attention --backend cuda` (the bench's JSON schema), one call per dtype."""
    rows = []
    for dt in args.dtypes:
        path = os.path.join(tmp, f"bench-{dt}.json")
        cmd = [args.headroom, "bench", "attention", "--backend", "cuda", "--dtype", dt,
               "--lengths", ",".join(map(str, args.lengths)), "--routes", args.routes,
               "--q-heads", str(args.q_heads), "--kv-heads", str(args.kv_heads),
               "--head-dim", str(args.head_dim), "--warmup", str(args.warmup),
               "--iterations", str(args.iters), "--json", path]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(path) as f:
            data = json.load(f)
        if args.keep_json:
            with open(f"{args.keep_json}-{dt}.json", "w") as f:
                json.dump(data, f, indent=1)
        for r in data["samples"]:
            route = r["route"] if r["route"] != "composed" else f"composed:{r['query_block']}"
            rows.append({
                "impl": f"headroom:{route}", "length": r["length"], "dtype": r["dtype"],
                "median_ms": r["median_ms"], "min_ms": r.get("min_ms"), "rel_err": r.get("rel_err"),
                "tflops": causal_flops(args.q_heads, args.head_dim, r["length"]) / (r["median_ms"] * 1e-3) / 1e12,
                "transient_bytes": r["transient_bytes"],
            })
    return rows


def headroom_rows_kernels_time(args, tmp):
    """`headroom kernels time` (the CUDA crate's own timing loop)."""
    path = os.path.join(tmp, "headroom.json")
    cmd = [args.headroom, "kernels", "time", "--lengths", ",".join(map(str, args.lengths)),
           "--dtypes", ",".join(args.dtypes), "--routes", args.routes,
           "--q-heads", str(args.q_heads), "--kv-heads", str(args.kv_heads),
           "--head-dim", str(args.head_dim), "--warmup", str(args.warmup), "--iters", str(args.iters),
           "--json", path]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(path) as f:
        data = json.load(f)
    return [{
        "impl": f"headroom:{r['route']}", "length": r["length"], "dtype": r["dtype"], "median_ms": r["median_ms"],
        "times_ms": r["times_ms"], "tflops": r["tflops"], "transient_bytes": r["report"]["transient_bytes"],
    } for r in data]


def headroom_rows(args):
    with tempfile.TemporaryDirectory() as tmp:
        if args.timer == "bench":
            try:
                return headroom_rows_bench(args, tmp)
            except (subprocess.CalledProcessError, KeyError, json.JSONDecodeError) as ex:
                print(f"headroom bench attention failed ({ex}); falling back to kernels time", file=sys.stderr)
        return headroom_rows_kernels_time(args, tmp)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--headroom", default="target/release/headroom")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[8192, 32768])
    p.add_argument("--dtypes", type=lambda s: s.split(","), default=["bf16", "f16"])
    p.add_argument("--routes", default="fused,composed:128,composed:512")
    p.add_argument("--q-heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=256)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--json")
    p.add_argument("--skip-headroom", action="store_true")
    p.add_argument("--timer", choices=["bench", "kernels"], default="bench",
                   help="Headroom side: `bench attention --backend cuda` (default) or `kernels time`")
    p.add_argument("--keep-json", help="Also save the bench JSON files under this path prefix")
    args = p.parse_args()

    rows = [] if args.skip_headroom else headroom_rows(args)
    rows += torch_rows(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)

    print()
    print(f"B=1, {args.q_heads} q heads, {args.kv_heads} kv heads, D={args.head_dim}, causal, no history")
    hdr = f"{'L':>6} {'dtype':>5} {'impl':<22} {'ms':>9} {'TFLOP/s':>8} {'transient MiB':>13} {'/best peer':>10} {'/cudnn':>7}"
    print(hdr)
    print("-" * len(hdr))
    for length in args.lengths:
        for dt in args.dtypes:
            sel = [r for r in rows if r["length"] == length and r["dtype"] == dt]
            peers = [r for r in sel if r["impl"].startswith("torch:")]
            best = min((r["median_ms"] for r in peers), default=None)
            cudnn = next((r["median_ms"] for r in peers if r["impl"] == "torch:cudnn"), None)
            for r in sel:
                rb = f"{best / r['median_ms']:.2f}" if best else "-"
                rc = f"{cudnn / r['median_ms']:.2f}" if cudnn else "-"
                print(f"{length:>6} {dt:>5} {r['impl']:<22} {r['median_ms']:>9.3f} {r['tflops']:>8.1f} "
                      f"{r['transient_bytes'] / 2**20:>13.1f} {rb:>10} {rc:>7}")
    print("ratios > 1 mean faster than the peer")


if __name__ == "__main__":
    main()
