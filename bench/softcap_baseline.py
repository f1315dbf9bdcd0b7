#!/usr/bin/env python3
"""What a softcap costs PyTorch's own prefill: FlexAttention (torch.compile'd, causal block mask) without and with
a softcap score_mod (c * tanh(s / c)), beside SDPA FLASH without one (SDPA has no softcap), at (B, H, S, D) causal.
The Java side's counterpart: `run --softcap C` against `run` (bench/coverage-report.sh, features phase).

Prints one JSON object per variant: the median of CUDA-event times over --iters calls, ms, and the ratio to the same
backend without the softcap.
Usage: softcap_baseline.py --batch 4 --heads 16 --seq 2048 --dim 128 [--softcap 50] [--dtype fp16|bf16]"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("batch", 4), ("heads", 16), ("seq", 2048), ("dim", 128), ("warmup", 10), ("iters", 30)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--softcap", type=float, default=50.0)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    a = ap.parse_args()
    dt = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(a.batch, a.heads, a.seq, a.dim, device="cuda", dtype=dt, generator=g) for _ in range(3))
    shape = f"({a.batch},{a.heads},{a.seq},{a.dim})"
    out = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.warmup, a.iters)
    out.append(dict(backend="sdpa-flash", shape=shape, causal=True, softcap=0, ms=ms))
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, a.seq, a.seq, device="cuda")
        c = a.softcap

        def capped(score, b, h, qi, ki):
            return c * torch.tanh(score / c)

        base = None
        for cap in (0, c):
            mod = capped if cap else None
            ms = timed(lambda: flex(q, k, v, score_mod=mod, block_mask=mask), a.warmup, a.iters)
            base = base or ms
            out.append(dict(backend="flex-attention", shape=shape, causal=True, softcap=cap, ms=ms, ratio=ms / base))
    except Exception as e:  # no Triton / compiler on this machine: say so, keep the SDPA row
        out.append(dict(backend="flex-attention", error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
    for o in out:
        print(json.dumps(o))


if __name__ == "__main__":
    main()
