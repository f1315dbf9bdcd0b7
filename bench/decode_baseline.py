#!/usr/bin/env python3
"""PyTorch decode baseline: what a PyTorch engine pays per token with device-resident KV caches.

Per token and layer: write the new token's K and V into the layer's cache at its position (an index
write), then SDPA of the query over the cache slice [0, length] with the FLASH (or CUDNN) backend;
one synchronisation per token. Uniform lengths (SDPA has no per-sequence lengths). Prints one JSON
object per backend: step wall time (median and 95% interval of the median by bootstrap) and the
device time of the token (CUDA events around the whole token, no host synchronisation inside).

Usage: decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context 4096 --layers 32 --steps 64
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
    a = ap.parse_args()
    b, hq, hkv, d, n = a.batch, a.heads, a.kv_heads, a.dim, a.context
    capacity = n + a.warmup + a.steps + 1
    g = torch.Generator(device="cuda").manual_seed(1)
    caches = []
    for _ in range(a.layers):
        k = torch.randn(b, hkv, capacity, d, device="cuda", dtype=torch.float16, generator=g)
        v = torch.randn(b, hkv, capacity, d, device="cuda", dtype=torch.float16, generator=g)
        caches.append((k, v))
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.float16, generator=g)
    new_k = torch.randn(b, hkv, 1, d, device="cuda", dtype=torch.float16, generator=g)
    new_v = torch.randn(b, hkv, 1, d, device="cuda", dtype=torch.float16, generator=g)
    kv_bytes_per_token = 2.0 * b * hkv * d * 2 * a.layers  # per cached token, K and V, all layers
    for name in a.backends.split(","):
        backend = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION}[name]
        length = n
        try:
            with sdpa_kernel(backend):
                def token():
                    nonlocal length
                    pos = torch.tensor([length], device="cuda")
                    for k, v in caches:
                        k.index_copy_(2, pos, new_k)
                        v.index_copy_(2, pos, new_v)
                        F.scaled_dot_product_attention(q, k[:, :, :length + 1], v[:, :, :length + 1], enable_gqa=hq != hkv)
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
            out = {"backend": "torch-sdpa-" + name, "batch": b, "heads": hq, "kv_heads": hkv, "dim": d, "context": n,
                   "layers": a.layers, "steps": a.steps, "median_ms": round(statistics.median(wall), 4),
                   "ci95_low_ms": round(lo, 4), "ci95_high_ms": round(hi, 4),
                   "kernel_median_ms": round(statistics.median(device), 4),
                   "kv_tb_per_s_wall": round(kv_bytes_per_token * ctx / statistics.median(wall) / 1e9, 4),
                   "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        except RuntimeError as e:
            out = {"backend": "torch-sdpa-" + name, "error": str(e).splitlines()[0]}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
