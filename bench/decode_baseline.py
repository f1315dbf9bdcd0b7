#!/usr/bin/env python3
"""PyTorch decode baseline: what a PyTorch engine pays per token with device-resident KV caches.

Per token and layer: write the new token's K and V into the layer's cache at its position (an index
write), then SDPA of the query over the cache slice [0, length] with the FLASH (or CUDNN) backend;
one synchronisation per token. Uniform lengths (SDPA has no per-sequence lengths). Prints one JSON
object per backend: step wall time (median and 95% interval of the median by bootstrap) and the
device time of the token (CUDA events around the whole token, no host synchronisation inside).

Layer types as the Java `decode` runs them: --window W (with --window-layers PATTERN of L/G, e.g. LG for
Gemma 2) slices a windowed layer's cache to its last W+1 keys (for one query a window is a slice: no
mask needed); --softcap C and --sinks cannot be expressed through SDPA, so such layers run the eager
formulation an engine falls back to (HF transformers' "eager" attention: matmul, C*tanh(s/C), a sink
column, fp32 softmax, matmul), reported as backend "torch-eager"; the SDPA rows are then what PyTorch
pays without those features (a lower bound, not the same computation).

Usage: decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context 4096 --layers 32 --steps 64
       [--window 4096 --window-layers LG] [--softcap 50] [--sinks] [--dtype bf16]
"""
import argparse
import json
import random
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def bootstrap(samples, rounds=1000):
    medians = sorted(statistics.median(random.choices(samples, k=len(samples))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds)]


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("batch", 8), ("heads", 32), ("kv-heads", 8), ("dim", 128), ("context", 4096),
                          ("layers", 1), ("steps", 64), ("warmup", 8)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--backends", default="FLASH,CUDNN")
    ap.add_argument("--window", type=int, default=-1, help="left window of the windowed layers (-1: none)")
    ap.add_argument("--window-layers", default="L", help="L (windowed) / G (global) pattern repeated over the layers")
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--sinks", action="store_true")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    a = ap.parse_args()
    b, hq, hkv, d, n = a.batch, a.heads, a.kv_heads, a.dim, a.context
    dtype = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    capacity = n + a.warmup + a.steps + 1
    g = torch.Generator(device="cuda").manual_seed(1)
    caches = []
    for _ in range(a.layers):
        k = torch.randn(b, hkv, capacity, d, device="cuda", dtype=dtype, generator=g)
        v = torch.randn(b, hkv, capacity, d, device="cuda", dtype=dtype, generator=g)
        caches.append((k, v))
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=dtype, generator=g)
    new_k = torch.randn(b, hkv, 1, d, device="cuda", dtype=dtype, generator=g)
    new_v = torch.randn(b, hkv, 1, d, device="cuda", dtype=dtype, generator=g)
    sinks = torch.randn(hq, device="cuda", dtype=torch.float32, generator=g) if a.sinks else None
    windowed = [a.window >= 0 and a.window_layers[i % len(a.window_layers)] == "L" for i in range(a.layers)]
    scale = d ** -0.5
    grp = hq // hkv

    def eager(k, v):
        """One query per head over k/v [b, hkv, n, d]: GQA by grouping the query heads, fp32 softmax."""
        qg = q.view(b, hkv, grp, d)
        s = torch.matmul(qg, k.transpose(-1, -2)).float() * scale  # [b, hkv, grp, n]
        if a.softcap > 0:
            s = a.softcap * torch.tanh(s / a.softcap)
        if sinks is not None:
            s = torch.cat([s, sinks.view(1, hkv, grp, 1).expand(b, hkv, grp, 1)], dim=-1)
        p = torch.softmax(s, dim=-1)
        if sinks is not None:
            p = p[..., :-1]
        return torch.matmul(p.to(dtype), v).view(b, hq, 1, d)

    def visible(length, layer):
        first = max(0, length + 1 - (a.window + 1)) if windowed[layer] else 0
        return first, length + 1

    tokens_read = lambda length: sum(e - f for f, e in (visible(length, l) for l in range(a.layers)))
    kv_bytes_per_key = 2.0 * b * hkv * d * 2  # per visible key and layer, K and V
    names = a.backends.split(",")
    if a.softcap > 0 or a.sinks:
        names = ["EAGER"] + names
    for name in names:
        backend = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION,
                   "EAGER": SDPBackend.MATH}[name]
        length = n
        try:
            with sdpa_kernel(backend):
                def token():
                    nonlocal length
                    pos = torch.tensor([length], device="cuda")
                    for layer, (k, v) in enumerate(caches):
                        k.index_copy_(2, pos, new_k)
                        v.index_copy_(2, pos, new_v)
                        f, e = visible(length, layer)
                        if name == "EAGER":
                            eager(k[:, :, f:e], v[:, :, f:e])
                        else:
                            F.scaled_dot_product_attention(q, k[:, :, f:e], v[:, :, f:e], enable_gqa=hq != hkv)
                    length += 1

                for _ in range(a.warmup):
                    token()
                torch.cuda.synchronize()
                wall, device = [], []
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    start.record()
                    token()
                    end.record()
                    torch.cuda.synchronize()
                    wall.append((time.perf_counter() - t0) * 1e3)
                    device.append(start.elapsed_time(end))
            lo, hi = bootstrap(wall)
            ctx = length - a.steps // 2
            label = "torch-eager" if name == "EAGER" else "torch-sdpa-" + name
            out = {"backend": label, "batch": b, "heads": hq, "kv_heads": hkv, "dim": d, "context": n,
                   "layers": a.layers, "steps": a.steps, "dtype": a.dtype, "window": a.window,
                   "window_layers": a.window_layers if a.window >= 0 else None, "softcap": a.softcap, "sinks": a.sinks,
                   "features_computed": name == "EAGER" or not (a.softcap > 0 or a.sinks),
                   "median_ms": round(statistics.median(wall), 4),
                   "ci95_low_ms": round(lo, 4), "ci95_high_ms": round(hi, 4),
                   "kernel_median_ms": round(statistics.median(device), 4),
                   "kv_tb_per_s_wall": round(kv_bytes_per_key * tokens_read(ctx) / statistics.median(wall) / 1e9, 4),
                   "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        except RuntimeError as e:
            out = {"backend": "torch-eager" if name == "EAGER" else "torch-sdpa-" + name, "error": str(e).splitlines()[0]}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
