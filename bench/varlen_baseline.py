#!/usr/bin/env python3
"""PyTorch varlen prefill baseline: causal attention of a batch of prompts of different lengths, packed.

Two ways a PyTorch engine without flash-attn's varlen kernel does it: one SDPA (FLASH) call per prompt, and SDPA on
nested jagged tensors (one call, where PyTorch supports it). Whole call + synchronize, median of 30 after warm-up,
plus the device time (CUDA events). Prints one JSON line per method.

Usage: varlen_baseline.py --heads 32 --kv-heads 8 --dim 128 --lengths 256,768,...
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, n=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    wall, dev = [], []
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(n):
        t0 = time.perf_counter()
        st.record()
        fn()
        en.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        dev.append(st.elapsed_time(en))
    return statistics.median(wall), statistics.median(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--lengths", required=True)
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    hq, hkv, d = a.heads, a.kv_heads, a.dim
    qs = [torch.randn(1, hq, n, d, device="cuda", dtype=torch.float16) for n in lengths]
    ks = [torch.randn(1, hkv, n, d, device="cuda", dtype=torch.float16) for n in lengths]
    vs = [torch.randn(1, hkv, n, d, device="cuda", dtype=torch.float16) for n in lengths]
    base = {"heads": hq, "kv_heads": hkv, "dim": d, "lengths": lengths, "gpu": torch.cuda.get_device_name()}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        def per_prompt():
            for q, k, v in zip(qs, ks, vs):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hkv)
        wall, dev = timed(per_prompt)
        print(json.dumps({**base, "method": "torch-sdpa-FLASH per prompt", "call_ms": round(wall, 4),
                          "device_ms": round(dev, 4)}), flush=True)
    try:
        # Nested jagged tensors: [B, n_b, H, D] -> transpose to [B, H, n_b, D]; SDPA needs equal q/kv heads here.
        def nested(ts, heads):
            return torch.nested.nested_tensor([t[0].transpose(0, 1) for t in ts], layout=torch.jagged).transpose(1, 2)
        kr = [k.repeat_interleave(hq // hkv, dim=1) for k in ks]
        vr = [v.repeat_interleave(hq // hkv, dim=1) for v in vs]
        nq, nk, nv = nested(qs, hq), nested(kr, hq), nested(vr, hq)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            wall, dev = timed(lambda: F.scaled_dot_product_attention(nq, nk, nv, is_causal=True))
        print(json.dumps({**base, "method": "torch-sdpa-FLASH nested jagged (K/V heads repeated)", "call_ms": round(wall, 4),
                          "device_ms": round(dev, 4)}), flush=True)
    except Exception as e:  # noqa: BLE001 - report what PyTorch refused
        print(json.dumps({**base, "method": "torch-sdpa-FLASH nested jagged", "error": str(e).splitlines()[0][:200]}))


if __name__ == "__main__":
    main()
