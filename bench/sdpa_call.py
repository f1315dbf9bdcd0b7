#!/usr/bin/env python3
"""PyTorch's whole call for one attention on device-resident tensors: SDPA (FLASH) + synchronize, wall time per
call (median of 200 after warm-up), beside the kernel time of back-to-back calls: the host cost an engine pays per
call in PyTorch, to set beside `run --backend ptx-cuda`'s "device call" line.

Usage: sdpa_call.py B H S D [causal]
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

b, h, s, d = (int(x) for x in sys.argv[1:5])
causal = len(sys.argv) > 5
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(20):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    wall = []
    for _ in range(200):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(200):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    en.record()
    en.synchronize()
kernel = st.elapsed_time(en) / 200
call = statistics.median(wall)
print(f"SDPA-FLASH ({b},{h},{s},{d}{',causal' if causal else ''}): call + synchronize {call:.4f} ms, kernel {kernel:.4f} ms,"
      f" {call / kernel:.2f}x the kernel, {1e3 * (call - kernel):.1f} us of host time per call")
