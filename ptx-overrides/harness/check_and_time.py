#!/usr/bin/env python3
"""Check and time the hand-tuned FlashAttention PTX on a GPU.

Loads the committed PTX (ptx-overrides/ptx/*.ptx) through the CUDA driver API (ctypes on
libcuda.so.1, the same calls the Java FFM host makes), then
  1. checks every entry against a float64 PyTorch reference of the project's semantics
     (fresh N(0,1) fp16 inputs, output poisoned with NaN before every run);
  2. times device-resident kernels with CUDA events beside PyTorch SDPA (FLASH, CUDNN);
  3. times the ablation entries against their full kernel.
Logs and JSON go to $OUT (default ./out); a short table is printed last.

--tuning instead loads only ptx/flash_fwd.ptx and the benchmark-only ptx/flash_fwd_tuning.ptx,
checks every tuning entry (and the shipped D=128 entry, the baseline) on a small D=128 suite and
times them beside SDPA on the two D=128 timing shapes, causal and not (tuning.md/.json).

Usage: python3 ptx-overrides/harness/check_and_time.py [--quick] [--no-time] [--seed N] [--tuning]
"""
import argparse
import ctypes
import json
import math
import os
import re
import struct
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PTX_DIR = os.path.join(os.path.dirname(HERE), "ptx")
OUT = os.environ.get("OUT", "./out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "log.txt"), "w")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


# --------------------------------------------------------------------------- CUDA driver
class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # primary context, made current by PyTorch
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        assert ctx.value, "no current CUDA context"

    def check(self, err, what):
        if err != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(err, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {err} {s.value.decode() if s.value else ''}")

    def load(self, ptx_path):
        # each loading thread needs the context current
        ctx = ctypes.c_void_p()
        self.cu.cuCtxGetCurrent(ctypes.byref(ctx))
        if not ctx.value:
            dev = ctypes.c_int()
            self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
            pctx = ctypes.c_void_p()
            self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(pctx), dev), "cuDevicePrimaryCtxRetain")
            self.check(self.cu.cuCtxSetCurrent(pctx), "cuCtxSetCurrent")
        data = open(ptx_path, "rb").read() + b"\0"
        mod = ctypes.c_void_p()
        logbuf = ctypes.create_string_buffer(1 << 16)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER(_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(logbuf, ctypes.c_void_p), ctypes.c_void_p(len(logbuf)))
        err = self.cu.cuModuleLoadDataEx(ctypes.byref(mod), data, 2, opts, vals)
        if err != 0:
            log("JIT error log:", logbuf.value.decode(errors="replace"))
        self.check(err, f"cuModuleLoadDataEx({ptx_path})")
        return mod

    def function(self, mod, name):
        f = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), f"cuModuleGetFunction({name})")
        return f

    def attr(self, f, a):
        v = ctypes.c_int()
        self.check(self.cu.cuFuncGetAttribute(ctypes.byref(v), a, f), "cuFuncGetAttribute")
        return v.value

    def set_max_dyn_smem(self, f, nbytes):
        self.check(self.cu.cuFuncSetAttribute(f, 8, nbytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED)")

    def occupancy(self, f, threads, dyn):
        n = ctypes.c_int()
        self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), f, threads, ctypes.c_size_t(dyn)),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def launch(self, f, grid, block, smem, args):
        vals = [ctypes.c_uint64(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(f, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, ptrs, None),
                   "cuLaunchKernel")


# --------------------------------------------------------------------------- entries
# Names encode the configuration (see README.md):
#   flash_fwd_d{D}_m{Br}n{Bc}w{warps}s{stages}[_qs][_dyn][_v2|_h2][_ablation][_tornado|_tornado_h128]
#   (_v2/_h2: tuning candidates with the same layout as the name without them, Opt::kLean)
#   flash_decode_split_d{D}_n{Bc}s{stages}[_dyn][_tornado], flash_decode_combine_d{D}[_tornado],
#   flash_decode_fused_d{D}_n{Bc}s{stages}[_tornado|_tornado_h128] (split + combine in one launch)
# _tornado entries read arrays behind a 16-byte header, _tornado_h128 behind a 128-byte one.
FWD_RE = re.compile(r"^flash_fwd_d(\d+)_m(\d+)n(\d+)w(\d+)s(\d+)(.*?)(_tornado(?:_h128)?)?$")
DEC_RE = re.compile(r"^flash_decode_split_d(\d+)_n(\d+)s(\d+)(_dyn)?(_tornado)?$")
COMB_RE = re.compile(r"^flash_decode_combine_d(\d+)(_tornado)?$")
FUSED_RE = re.compile(r"^flash_decode_fused_d(\d+)_n(\d+)s(\d+)(_tornado(?:_h128)?)?$")
ABLATIONS = ["no_cpasync", "no_ldmatrix", "no_swizzle", "p_smem", "no_causal_skip"]


def smem_bytes(D, Br, Bc, W, S, q_in_regs, p_smem):
    """Mirror of FwdTraits::kSmemBytes (kernel_traits.cuh)."""
    stage = 2 * Bc * D * 2
    ring = S * stage
    qoff = stage if q_in_regs else ring
    main = max(ring, qoff + Br * D * 2)
    if p_smem:
        main += W * (Br // (16 * W)) * 16 * (Bc * 2 + 16)
    return main


class Entry:
    def __init__(self, drv, mod, name, fname):
        self.name, self.file, self.f = name, fname, drv.function(mod, name)
        self.tornado = name.endswith("_tornado") or name.endswith("_tornado_h128")
        self.header = 128 if name.endswith("_h128") else 16 if self.tornado else 0
        self.regs = drv.attr(self.f, 4)
        self.static_smem = drv.attr(self.f, 1)
        self.local = drv.attr(self.f, 3)
        self.kind = None
        self.dyn = 0
        m = FWD_RE.match(name)
        if m:
            D, Br, Bc, W, S = map(int, m.groups()[:5])
            flags = m.group(6) or ""
            self.kind, self.D, self.Br, self.Bc, self.W, self.S = "fwd", D, Br, Bc, W, S
            self.ablation = next((a for a in ABLATIONS if flags.endswith("_" + a)), None)
            S_eff = 1 if self.ablation == "no_cpasync" else S
            need = smem_bytes(D, Br, Bc, W, S_eff, "_qs" not in flags, self.ablation == "p_smem")
            self.threads = 32 * W
            self.dynamic = self.static_smem == 0  # _dyn entries and the ablation entries
            self.base = name[: -len("_" + self.ablation)] if self.ablation else name
        m2 = DEC_RE.match(name)
        if m2:
            D, Bc, S = map(int, m2.groups()[:3])
            self.kind, self.D, self.Br, self.Bc, self.W, self.S = "split", D, 16, Bc, 1, S
            need = smem_bytes(D, 16, Bc, 1, S, True, False)
            self.threads = 32
            self.dynamic = self.static_smem == 0
            self.ablation = None
        m4 = FUSED_RE.match(name)
        if m4:
            D, Bc, S = map(int, m4.groups()[:3])
            self.kind, self.D, self.Br, self.Bc, self.W, self.S = "fused", D, 16, Bc, 1, S
            need = smem_bytes(D, 16, Bc, 1, S, True, False)
            self.threads, self.dynamic, self.ablation = 32, False, None
        m3 = COMB_RE.match(name)
        if m3:
            self.kind, self.D, self.threads, self.dynamic, self.ablation = "combine", int(m3.group(1)), 128, False, None
            need = 0
        if self.kind is None:
            raise RuntimeError(f"unrecognised entry name {name}")
        if self.dynamic:
            self.dyn = need
            drv.set_max_dyn_smem(self.f, need)
        elif self.kind not in ("combine", "fused") and self.static_smem != need:
            raise RuntimeError(f"{name}: static smem {self.static_smem} != expected {need}")
        self.occ = drv.occupancy(self.f, self.threads, self.dyn)

    def row(self):
        return dict(name=self.name, file=self.file, regs=self.regs, static_smem=self.static_smem,
                    dyn_smem=self.dyn, local=self.local, ctas_per_sm=self.occ)


TUNING_FILE = "flash_fwd_tuning.ptx"
TUNING_BASELINE = "flash_fwd_d128_m64n48w4s2"  # the shipped D=128 entry


def load_entries(drv, files=None):
    """JIT the PTX files (default: all but the tuning candidates; in parallel threads: ctypes
    drops the GIL) and wrap their entries."""
    from concurrent.futures import ThreadPoolExecutor
    if files is None:
        files = [fn for fn in sorted(os.listdir(PTX_DIR)) if fn.endswith(".ptx") and fn != TUNING_FILE]
    t0 = time.time()
    with ThreadPoolExecutor(len(files)) as ex:
        mods = list(ex.map(lambda fn: drv.load(os.path.join(PTX_DIR, fn)), files))
    entries = []
    for fn, mod in zip(files, mods):
        names = re.findall(r"\.entry\s+(\w+)\s*\(", open(os.path.join(PTX_DIR, fn)).read())
        for n in names:
            entries.append(Entry(drv, mod, n, fn))
        log(f"loaded {fn}: {len(names)} entries")
    log(f"JIT of {len(files)} files: {time.time() - t0:.1f}s")
    return entries


# --------------------------------------------------------------------------- problem set-up
LOG2E = 1.4426950408889634


def f32_bits(x):
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]


def num_splits_for(B, Hkv, G, Sq, Skv, Bc, num_sms, waves=4.0, min_keys=256, max_splits=128):
    """The host's choice of num_splits for flash_decode (documented in README.md)."""
    ctas = B * Hkv * math.ceil(G * Sq / 16)
    want = max(1, round(waves * num_sms / ctas))
    return max(1, min(want, math.ceil(Skv / min_keys), max_splits))


class Problem:
    """Q, K, V (fp16, N(0,1)) as logical [B, H, S, D] views of BHSD or BSHD storage."""

    def __init__(self, B, Hq, Hkv, Sq, Skv, D, causal, layout="bhsd", scale=None, lse=True, gen=None):
        self.B, self.Hq, self.Hkv, self.Sq, self.Skv, self.D = B, Hq, Hkv, Sq, Skv, D
        self.causal, self.layout, self.want_lse = causal, layout, lse
        self.scale = scale if scale is not None else 1.0 / math.sqrt(D)
        self.q = self._rand(B, Hq, Sq, D, gen)
        self.k = self._rand(B, Hkv, Skv, D, gen)
        self.v = self._rand(B, Hkv, Skv, D, gen)

    def _rand(self, B, H, S, D, gen):
        if self.layout == "bhsd":
            return torch.randn(B, H, S, D, device="cuda", dtype=torch.float32, generator=gen).half()
        return torch.randn(B, S, H, D, device="cuda", dtype=torch.float32, generator=gen).half().permute(0, 2, 1, 3)

    def new_out(self):
        o = torch.empty(self.B, self.Hq, self.Sq, self.D, device="cuda", dtype=torch.half) if self.layout == "bhsd" else \
            torch.empty(self.B, self.Sq, self.Hq, self.D, device="cuda", dtype=torch.half).permute(0, 2, 1, 3)
        o.fill_(float("nan"))
        lse = torch.full((self.B, self.Hq, self.Sq), float("nan"), device="cuda", dtype=torch.float32)
        return o, lse

    def params(self, o, splits=0, header=0):
        p = [0] * 32
        p[0:7] = [self.B, self.Hq, self.Hkv, self.Sq, self.Skv, self.D, int(self.causal)]
        p[7] = f32_bits(self.scale * LOG2E)
        p[8] = int(self.want_lse)
        for i, t in ((9, self.q), (12, self.k), (15, self.v), (18, o)):
            p[i:i + 3] = [t.stride(0), t.stride(1), t.stride(2)]
        p[21] = splits
        p[22] = f32_bits(self.scale)
        if header:
            p = [0] * (header // 4) + p
        return torch.tensor(p, dtype=torch.int32, device="cuda")

    def flops(self):
        f = 4.0 * self.B * self.Hq * self.Sq * self.Skv * self.D
        return f / 2 if (self.causal and self.Sq == self.Skv) else f

    def reference(self):
        """float64 reference; rows that see no key give O = 0, lse = -inf."""
        G = self.Hq // self.Hkv
        os_, lses = [], []
        hstep = max(1, min(self.Hq, int(2e8 // max(1, self.Sq * self.Skv * self.B))))
        for h0 in range(0, self.Hq, hstep):
            h1 = min(self.Hq, h0 + hstep)
            q = self.q[:, h0:h1].double()
            kv_idx = torch.arange(h0, h1, device="cuda") // G
            k = self.k[:, kv_idx].double()
            v = self.v[:, kv_idx].double()
            s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            if self.causal:
                i = torch.arange(self.Sq, device="cuda")[:, None]
                j = torch.arange(self.Skv, device="cuda")[None, :]
                s = s.masked_fill(~(j <= i + (self.Skv - self.Sq)), float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - lse[..., None])
            p = torch.nan_to_num(p, nan=0.0)
            os_.append(torch.matmul(p, v))
            lses.append(lse)
        return torch.cat(os_, 1), torch.cat(lses, 1)


def with_header(t, header=16):
    """Copy a tensor's storage behind a TornadoVM-style header; returns (buffer, view)."""
    n = t.numel()
    el = t.element_size()
    buf = torch.empty(n + header // el, device="cuda", dtype=t.dtype)
    body = buf[header // el:]
    # keep the same (contiguous) storage order as t
    base = t.permute(0, 2, 1, 3).contiguous() if not t.is_contiguous() else t.contiguous()
    body.copy_(base.reshape(-1))
    view = body.view(base.shape)
    if not t.is_contiguous():
        view = view.permute(0, 2, 1, 3)
    return buf, view


# --------------------------------------------------------------------------- running entries
class Runner:
    def __init__(self, drv, entries, num_sms):
        self.drv, self.num_sms = drv, num_sms
        self.by_name = {e.name: e for e in entries}

    def run_fwd(self, e, pb, o, lse):
        grid = (math.ceil(pb.Sq / e.Br), pb.B * pb.Hq, 1)
        if e.tornado:
            qb, _ = with_header(pb.q, e.header)
            kb, _ = with_header(pb.k, e.header)
            vb, _ = with_header(pb.v, e.header)
            ob, ov = with_header(o, e.header)
            lb, lv = with_header(lse, e.header)
            prm = pb.params(ov, header=e.header)
            self.drv.launch(e.f, grid, e.threads, e.dyn, [0, qb.data_ptr(), kb.data_ptr(), vb.data_ptr(), ob.data_ptr(),
                                                          lb.data_ptr(), prm.data_ptr()])
            torch.cuda.synchronize()
            o.copy_(ov)
            lse.copy_(lv)
        else:
            prm = pb.params(o)
            self.drv.launch(e.f, grid, e.threads, e.dyn,
                            [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()])
            return prm

    def decode_launcher(self, es, ec, pb, o, lse, splits):
        """Returns a closure launching split + combine (device-resident) and the buffers."""
        G = pb.Hq // pb.Hkv
        rows = pb.B * pb.Hq * pb.Sq
        op = torch.full((splits * rows * pb.D,), float("nan"), device="cuda", dtype=torch.float32)
        lp = torch.full((splits * rows,), float("nan"), device="cuda", dtype=torch.float32)
        prm = pb.params(o, splits=splits)
        g1 = (splits, math.ceil(G * pb.Sq / 16), pb.B * pb.Hkv)
        g2 = (math.ceil(rows / (128 // (pb.D // 8))), 1, 1)
        a1 = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), op.data_ptr(), lp.data_ptr(), prm.data_ptr()]
        a2 = [op.data_ptr(), lp.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
        if es.tornado:
            hb = [with_header(t)[0] for t in (pb.q, pb.k, pb.v)]
            opb, lpb = with_header(op.view(1, 1, 1, -1))[0], with_header(lp.view(1, 1, 1, -1))[0]
            ob, ov = with_header(o)
            lb, lv = with_header(lse)
            prm = pb.params(ov, splits=splits, header=es.header)
            a1 = [0] + [t.data_ptr() for t in hb] + [opb.data_ptr(), lpb.data_ptr(), prm.data_ptr()]
            a2 = [0, opb.data_ptr(), lpb.data_ptr(), ob.data_ptr(), lb.data_ptr(), prm.data_ptr()]

            def go():
                self.drv.launch(es.f, g1, es.threads, es.dyn, a1)
                self.drv.launch(ec.f, g2, ec.threads, 0, a2)
                torch.cuda.synchronize()
                o.copy_(ov)
                lse.copy_(lv)
            return go, (hb, opb, lpb, ob, lb, prm)

        def go():
            self.drv.launch(es.f, g1, es.threads, es.dyn, a1)
            self.drv.launch(ec.f, g2, ec.threads, 0, a2)
        return go, (op, lp, prm)

    def fused_launcher(self, e, pb, o, lse, splits):
        """Returns a closure launching the fused split-KV decode kernel, and its buffers. The zeroed
        tickets are kept across launches: the kernel must leave them zero."""
        G = pb.Hq // pb.Hkv
        rows = pb.B * pb.Hq * pb.Sq
        grid = (splits, math.ceil(G * pb.Sq / 16), pb.B * pb.Hkv)
        op = torch.full((1, 1, 1, splits * rows * pb.D), float("nan"), device="cuda", dtype=torch.float32)
        lp = torch.full((1, 1, 1, splits * rows), float("nan"), device="cuda", dtype=torch.float32)
        tickets = torch.zeros((1, 1, 1, grid[1] * grid[2]), device="cuda", dtype=torch.int32)
        if not e.tornado:
            prm = pb.params(o, splits=splits)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                    op.data_ptr(), lp.data_ptr(), tickets.data_ptr(), prm.data_ptr()]

            def go():
                self.drv.launch(e.f, grid, e.threads, 0, args)
            return go, (op, lp, tickets, prm)
        bufs = [with_header(t, e.header) for t in (pb.q, pb.k, pb.v, o, lse, op, lp, tickets)]
        ov, lv = bufs[3][1], bufs[4][1]
        prm = pb.params(ov, splits=splits, header=e.header)
        args = [0] + [b.data_ptr() for b, _ in bufs] + [prm.data_ptr()]

        def go():
            ov.fill_(float("nan"))  # poisoned on the device too, before every launch
            lv.fill_(float("nan"))
            self.drv.launch(e.f, grid, e.threads, 0, args)
            torch.cuda.synchronize()
            o.copy_(ov)
            lse.copy_(lv)
        return go, (bufs, prm)


def compare(pb, o, lse, oref, lref):
    od = o.double()
    if torch.isnan(o).any():
        return dict(ok=False, why="NaN in O", max_abs=float("nan"), rel=float("nan"), lse_err=float("nan"))
    err = od - oref
    max_abs = err.abs().max().item() if err.numel() else 0.0
    nref = oref.norm().item()
    rel = err.norm().item() / nref if nref > 0 else (0.0 if max_abs == 0 else float("inf"))
    ok = max_abs <= 1e-2 and rel <= 2e-3
    why = "" if ok else f"O err max {max_abs:.3g} rel {rel:.3g}"
    lse_err = 0.0
    if pb.want_lse:
        fin = torch.isfinite(lref)
        if torch.isnan(lse).any():
            ok, why = False, why + " NaN in lse"
        elif not torch.equal(torch.isneginf(lse), torch.isneginf(lref)):
            ok, why = False, why + " lse -inf mismatch"
        else:
            lse_err = (lse.double()[fin] - lref[fin]).abs().max().item() if fin.any() else 0.0
            if lse_err > 1e-3:
                ok, why = False, why + f" lse err {lse_err:.3g}"
    return dict(ok=ok, why=why.strip(), max_abs=max_abs, rel=rel, lse_err=lse_err)


# --------------------------------------------------------------------------- test suite
def suite(quick, rng):
    cases = []  # (B, Hq, Hkv, Sq, Skv, D, causal, layout, lse, tag)
    seeds = [(1, 8, 512, 64), (8, 8, 128, 64), (16, 8, 512, 64), (4, 16, 2048, 64), (2, 8, 1024, 64), (1, 4, 2048, 64),
             (4, 8, 256, 64)]
    for (B, H, S, D) in seeds:
        for c in (False, True):
            cases.append((B, H, H, S, S, D, c, "bhsd", True, "seed"))
            if not quick:
                cases.append((B, H, H, S, S, 128, c, "bhsd", True, "seed-d128"))
    for c in (False, True):
        for D in (64, 128):
            cases += [
                (2, 4, 4, 77, 1000, D, c, "bhsd", True, "sq<skv odd"),
                (2, 4, 4, 1000, 77, D, c, "bhsd", True, "sq>skv odd"),
                (1, 2, 2, 1, 1, D, c, "bhsd", True, "1x1"),
                (1, 3, 3, 7, 7, D, c, "bhsd", True, "7x7"),
                (1, 2, 2, 2049, 2049, D, c, "bhsd", True, "2049"),
                (2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa"),
                (2, 8, 1, 333, 333, D, c, "bhsd", True, "mqa"),
                (2, 6, 3, 259, 1031, D, c, "bshd", True, "bshd gqa"),
                (1, 4, 4, 64, 200, D, c, "bshd", False, "bshd nolse"),
                (1, 2, 2, 130, 3, D, c, "bhsd", True, "sq>>skv"),
            ]
    # decode shapes (also run through the prefill entries)
    for D in (128, 64):
        for Sq in (1, 2, 5, 8, 16):
            for Skv in (1, 100, 4097, 32768):
                c = Sq > 1 and Skv % 2 == 1
                cases.append((2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode"))
        cases += [(1, 32, 8, 1, 131072, D, False, "bhsd", True, "decode 128K"),
                  (1, 8, 1, 16, 131072, D, True, "bshd", True, "decode 128K mqa causal"),
                  (2, 16, 16, 4, 9000, D, True, "bhsd", True, "decode mha causal"),
                  (1, 4, 4, 16, 5, D, True, "bhsd", True, "decode sq>skv")]
    n_rand = 10 if quick else 50
    for _ in range(n_rand):
        Hkv = rng.choice([1, 2, 4])
        G = rng.choice([1, 2, 4])
        D = rng.choice([64, 128])
        Sq = rng.randint(1, 2100)
        Skv = rng.randint(1, 2100) if rng.random() < 0.7 else Sq
        cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.7, "random"))
    return cases


def correctness(runner, entries, quick, seed, cases=None):
    import random
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    fwd = [e for e in entries if e.kind == "fwd"]
    splits_e = [e for e in entries if e.kind == "split"]
    comb = {(e.D, e.tornado): e for e in entries if e.kind == "combine"}
    fused_e = [e for e in entries if e.kind == "fused"]
    results = {}  # entry -> [n, pass, worst_abs, worst_rel, worst_lse, failures]

    def record(name, case, r):
        st = results.setdefault(name, dict(n=0, passed=0, max_abs=0.0, max_rel=0.0, max_lse=0.0, fails=[]))
        st["n"] += 1
        if r["ok"]:
            st["passed"] += 1
        elif len(st["fails"]) < 5:
            st["fails"].append(f"{case}: {r['why']}")
        for k1, k2 in (("max_abs", "max_abs"), ("max_rel", "rel"), ("max_lse", "lse_err")):
            if not math.isnan(r[k2]):
                st[k1] = max(st[k1], r[k2])

    if cases is None:
        cases = suite(quick, rng)
    t0 = time.time()
    for ci, (B, Hq, Hkv, Sq, Skv, D, causal, layout, want_lse, tag) in enumerate(cases):
        pb = Problem(B, Hq, Hkv, Sq, Skv, D, causal, layout, lse=want_lse, gen=gen)
        if tag == "random" and rng.random() < 0.2:
            pb.scale = rng.uniform(0.01, 0.5)
        oref, lref = pb.reference()
        case = f"{tag} B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Skv{Skv} D{D} {'causal' if causal else 'full'} {layout}"
        big = Sq * Skv * B * Hq > 3e8
        for e in fwd:
            if e.D != D:
                continue
            if e.ablation and tag not in ("seed", "seed-d128", "sq>skv odd", "gqa", "2049") :
                continue
            if e.tornado and tag in ("random",) and rng.random() < 0.7:
                continue
            if big and (e.tornado or e.ablation):
                continue
            o, lse = pb.new_out()
            runner.run_fwd(e, pb, o, lse)
            torch.cuda.synchronize()
            record(e.name, case, compare(pb, o, lse, oref, lref))
        if tag == "decode" or tag.startswith("decode") or (tag == "random" and Sq <= 16) or Sq <= 16:
            G = Hq // Hkv
            for e in splits_e:
                if e.D != D:
                    continue
                ec = comb[(D, e.tornado)]
                ns = num_splits_for(B, Hkv, G, Sq, Skv, e.Bc, runner.num_sms)
                for splits in sorted({ns, min(ns * 3 + 1, 200)}):  # also exercise empty splits
                    o, lse = pb.new_out()
                    go, keep = runner.decode_launcher(e, ec, pb, o, lse, splits)
                    go()
                    torch.cuda.synchronize()
                    r = compare(pb, o, lse, oref, lref)
                    record(e.name, case + f" splits{splits}", r)
                    record(ec.name, case + f" splits{splits}", r)
            for e in fused_e:
                if e.D != D:
                    continue
                ns = num_splits_for(B, Hkv, G, Sq, Skv, e.Bc, runner.num_sms)
                for splits in sorted({ns, min(ns * 3 + 1, 200)}):
                    o, lse = pb.new_out()
                    go, keep = runner.fused_launcher(e, pb, o, lse, splits)
                    for _ in range(2):  # the second launch needs the tickets the first left at zero
                        o.fill_(float("nan"))
                        lse.fill_(float("nan"))
                        go()
                        torch.cuda.synchronize()
                    record(e.name, case + f" splits{splits}", compare(pb, o, lse, oref, lref))
        del oref, lref, pb
        if ci % 20 == 0:
            log(f"  case {ci + 1}/{len(cases)} ({time.time() - t0:.0f}s)")
    return results, len(cases)


def print_correctness(corr, where):
    """The summary lines of a correctness result: runs passed and every failing entry."""
    bad = {n: v for n, v in corr.items() if v["passed"] != v["n"]}
    print(f"correctness: {sum(v['passed'] for v in corr.values())}/{sum(v['n'] for v in corr.values())} runs passed"
          f"{where}; entries failing: {len(bad)}")
    for n, v in bad.items():
        print(f"  FAIL {n}: {v['n'] - v['passed']} of {v['n']}; {v['fails'][:2]}")


# --------------------------------------------------------------------------- timing
def time_fn(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        torch.cuda._sleep(20000)  # keep the queue ahead of the GPU so launch latency is not timed
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in evs)
    med = ts[len(ts) // 2]
    # bootstrap 95% interval of the median
    import random
    r = random.Random(0)
    meds = sorted(sorted(r.choice(ts) for _ in ts)[len(ts) // 2] for _ in range(200))
    return med, meds[5], meds[194]


def sdpa_fn(pb, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    q, k, v = pb.q, pb.k, pb.v
    kw = dict(is_causal=pb.causal, scale=pb.scale)
    if pb.Hq != pb.Hkv:
        kw["enable_gqa"] = True

    def fn():
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, **kw)
    try:
        fn()
        torch.cuda.synchronize()
        return fn
    except Exception as ex:  # noqa
        if "enable_gqa" in kw:
            G = pb.Hq // pb.Hkv
            k2, v2 = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
            kw.pop("enable_gqa")

            def fn2():
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k2, v2, **kw)
            try:
                fn2()
                torch.cuda.synchronize()
                fn2.note = "K/V expanded (no native GQA)"
                return fn2
            except Exception as ex2:  # noqa
                log(f"  sdpa {backend} unavailable: {str(ex2)[:120]}")
                return None
        log(f"  sdpa {backend} unavailable: {str(ex)[:120]}")
        return None


def timing(runner, entries, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    fwd = [e for e in entries if e.kind == "fwd" and not e.tornado and not e.ablation]
    rows = []
    shapes = [(16, 8, 512, 64), (4, 16, 2048, 128), (4, 16, 2048, 64), (1, 32, 4096, 128)]
    reps = 10 if quick else 100
    for (B, H, S, D) in shapes:
        for causal in (False, True):
            pb = Problem(B, H, H, S, S, D, causal, "bhsd", lse=True, gen=gen)
            fl = pb.flops()
            res = dict(shape=f"({B},{H},{S},{D})", causal=causal, flops=fl, kernels={})
            for be in ("flash", "cudnn"):
                fn = sdpa_fn(pb, be)
                if fn:
                    m, lo, hi = time_fn(fn, reps)
                    res["kernels"]["sdpa_" + be] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9)
            o, lse = pb.new_out()
            for e in fwd:
                if e.D != D:
                    continue
                prm = pb.params(o)
                args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
                grid = (math.ceil(S / e.Br), B * H, 1)
                m, lo, hi = time_fn(lambda: runner.drv.launch(e.f, grid, e.threads, e.dyn, args), reps)
                res["kernels"][e.name] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9)
            rows.append(res)
            log(fmt_timing_row(res))
            del pb
    # decode
    dec = []
    splits_e = [e for e in entries if e.kind == "split" and not e.tornado and e.D == 128]
    comb = {e.D: e for e in entries if e.kind == "combine" and not e.tornado}
    for Skv in (4096, 8192, 16384, 32768):
        pb = Problem(8, 32, 8, 1, Skv, 128, False, "bhsd", lse=True, gen=gen)
        fl = pb.flops()
        kv_bytes = 2 * 8 * 8 * Skv * 128 * 2
        res = dict(shape=f"decode B8 Hq32 Hkv8 Sq1 Skv{Skv} D128", causal=False, flops=fl, kv_bytes=kv_bytes, kernels={})
        for be in ("flash", "cudnn"):
            fn = sdpa_fn(pb, be)
            if fn:
                m, lo, hi = time_fn(fn, reps)
                res["kernels"]["sdpa_" + be] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9, gbs=kv_bytes / m / 1e6,
                                                    note=getattr(fn, "note", ""))
        o, lse = pb.new_out()
        for e in splits_e:
            ns = num_splits_for(8, 8, 4, 1, Skv, e.Bc, runner.num_sms)
            for waves, splits in (("auto", ns), ("x0.5", max(1, ns // 2)), ("x2", ns * 2)):
                go, keep = runner.decode_launcher(e, comb[128], pb, o, lse, splits)
                m, lo, hi = time_fn(go, reps)
                res["kernels"][f"{e.name}[{waves}:{splits}]"] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9,
                                                                      gbs=kv_bytes / m / 1e6)
        dec.append(res)
        log(fmt_timing_row(res))
        del pb
    return rows, dec


def ablation_timing(runner, entries, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99)
    abl = [e for e in entries if e.kind == "fwd" and e.ablation and not e.tornado]
    bases = sorted({e.base for e in abl})
    reps = 10 if quick else 100
    out = []
    for base in bases:
        be = runner.by_name[base]
        shape = (4, 16, 2048, be.D)
        for causal in (False, True):
            pb = Problem(*shape[:2], shape[1], shape[2], shape[2], shape[3], causal, "bhsd", lse=False, gen=gen)
            o, lse = pb.new_out()
            prm = pb.params(o)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
            t = {}
            for e in [be] + [x for x in abl if x.base == base]:
                if e.ablation == "no_causal_skip" and not causal:
                    continue
                grid = (math.ceil(pb.Sq / e.Br), pb.B * pb.Hq, 1)
                m, lo, hi = time_fn(lambda: runner.drv.launch(e.f, grid, e.threads, e.dyn, args), reps)
                t[e.ablation or "full"] = dict(ms=m, tflops=pb.flops() / m / 1e9)
            out.append(dict(base=base, shape=str(shape), causal=causal, t=t))
            log(f"  ablation {base} causal={causal}: " + ", ".join(f"{k} {v['ms']:.3f}ms" for k, v in t.items()))
    return out


# --------------------------------------------------------------------------- tuning (--tuning)
TUNING_SHAPES = [(4, 16, 2048, 128), (1, 32, 4096, 128)]  # (B, H, S, D), causal and not


def tuning_cases(rng):
    """D=128 problems for the candidates: ragged ends, Sq != Skv, GQA/MQA, BSHD, no lse, tiny
    and long-key problems, causal and not, plus a few random ones (suite() format)."""
    cases = []
    for c in (False, True):
        cases += [(2, 8, 8, 1024, 1024, 128, c, "bhsd", True, "seed-d128"),
                  (2, 4, 4, 77, 1000, 128, c, "bhsd", True, "sq<skv odd"),
                  (2, 4, 4, 1000, 77, 128, c, "bhsd", True, "sq>skv odd"),
                  (1, 3, 3, 7, 7, 128, c, "bhsd", True, "7x7"),
                  (1, 2, 2, 2049, 2049, 128, c, "bhsd", True, "2049"),
                  (2, 8, 2, 300, 517, 128, c, "bhsd", True, "gqa"),
                  (2, 8, 1, 333, 333, 128, c, "bhsd", True, "mqa"),
                  (2, 6, 3, 259, 1031, 128, c, "bshd", True, "bshd gqa"),
                  (1, 4, 4, 64, 200, 128, c, "bshd", False, "bshd nolse"),
                  (1, 2, 2, 130, 3, 128, c, "bhsd", True, "sq>>skv"),
                  (2, 4, 4, 5, 9000, 128, c, "bhsd", True, "short q long kv")]
    for _ in range(6):
        Hkv, G = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
        Sq = rng.randint(1, 2100)
        Skv = rng.randint(1, 2100) if rng.random() < 0.7 else Sq
        cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, 128, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.7, "random"))
    return cases


def tuning_timing(runner, cands, rounds, reps):
    """Each candidate beside SDPA FLASH/CUDNN on TUNING_SHAPES.  Kernels are timed round-robin
    (`rounds` rounds of `reps` launches) so that clock drift hits all alike; ms = median of the
    round medians, lo/hi = their range."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    rows = []
    for (B, H, S, D) in TUNING_SHAPES:
        for causal in (False, True):
            pb = Problem(B, H, H, S, S, D, causal, "bhsd", lse=True, gen=gen)
            fl = pb.flops()
            o, lse = pb.new_out()
            prm = pb.params(o)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
            fns = {}
            for be in ("flash", "cudnn"):
                fn = sdpa_fn(pb, be)
                if fn:
                    fns["sdpa_" + be] = fn
            for e in cands:
                grid = (math.ceil(S / e.Br), B * H, 1)
                fns[e.name] = (lambda e=e, grid=grid: runner.drv.launch(e.f, grid, e.threads, e.dyn, args))
            meds = {k: [] for k in fns}
            for _ in range(rounds):
                for k, fn in fns.items():
                    meds[k].append(time_fn(fn, reps)[0])
            res = dict(shape=f"({B},{H},{S},{D})", causal=causal, flops=fl, kernels={})
            for k, ms in meds.items():
                m = sorted(ms)[len(ms) // 2]
                res["kernels"][k] = dict(ms=m, lo=min(ms), hi=max(ms), tflops=fl / m / 1e9)
            rows.append(res)
            log(fmt_timing_row(res))
            del pb, o, lse
    return rows


def tuning_table(cands, corr, rows):
    """Markdown: one row per kernel, one column per (shape, causal): SDPA FLASH time / kernel
    time (> 1 is faster than SDPA FLASH), then its median ms."""
    cols = [f"{r['shape']} {'causal' if r['causal'] else 'full'}" for r in rows]
    L = ["| kernel | regs | smem (static+dyn) | CTAs/SM | check | " + " | ".join(cols) + " |",
         "|---|---|---|---|---|" + "---|" * len(cols)]
    names = ["sdpa_flash", "sdpa_cudnn"] + [e.name for e in cands]
    info = {e.name: e for e in cands}
    for n in names:
        e = info.get(n)
        if e:
            c = (corr or {}).get(n)
            chk = f"{c['passed']}/{c['n']}" if c else "-"
            head = f"| {n} | {e.regs} | {e.static_smem + e.dyn} | {e.occ} | {chk} |"
        else:
            head = f"| {n} | | | | |"
        cells = []
        for r in rows:
            k = r["kernels"].get(n)
            fl = r["kernels"].get("sdpa_flash", {}).get("ms")
            cells.append(f"x{fl / k['ms']:.3f} ({k['ms']:.4f} ms)" if k and fl else (f"{k['ms']:.4f} ms" if k else "-"))
        L.append(head + " " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


def run_tuning(drv, props, meta, args):
    entries = load_entries(drv, ["flash_fwd.ptx", TUNING_FILE])
    cands = [e for e in entries if e.name == TUNING_BASELINE] + \
            [e for e in entries if e.file == TUNING_FILE and e.kind == "fwd" and not e.tornado]
    for e in cands:
        log(f"  {e.name:40s} regs {e.regs:3d} smem {e.static_smem:6d} dyn {e.dyn:6d} local {e.local} CTAs/SM {e.occ}")
    runner = Runner(drv, cands, props.multi_processor_count)
    corr = None
    if not args.no_check:
        import random
        t0 = time.time()
        corr, ncases = correctness(runner, cands, args.quick, args.seed, tuning_cases(random.Random(args.seed)))
        log(f"correctness: {ncases} problems, {time.time() - t0:.0f}s")
    rows = []
    if not args.no_time:
        t0 = time.time()
        rows = tuning_timing(runner, cands, rounds=2 if args.quick else 3, reps=10 if args.quick else 40)
        log(f"timing: {time.time() - t0:.0f}s")
    table = tuning_table(cands, corr, rows)
    md = [f"# D=128 tuning candidates ({TUNING_FILE}) beside SDPA and {TUNING_BASELINE}", "",
          f"GPU: {meta['gpu']} ({meta['sms']} SMs), driver CUDA {meta['driver']}, torch {meta['torch']}, "
          f"date {meta['date']}", f"Command: `{meta['cmd']}`", "",
          "Cells: SDPA FLASH time / kernel time (> 1 = faster than SDPA FLASH), then the median of the "
          "round medians in ms. check = correctness runs passed.", "", table]
    if corr:
        fails = [(n, f) for n, v in corr.items() for f in v["fails"]]
        if fails:
            md += ["Failures (first 5 per entry):", ""] + [f"- {n}: {f}" for n, f in fails]
    open(os.path.join(OUT, "tuning.md"), "w").write("\n".join(md) + "\n")
    json.dump(dict(meta=meta, entries=[e.row() for e in cands], correctness=corr, timing=rows),
              open(os.path.join(OUT, "tuning.json"), "w"), indent=1)
    print("\n==== tuning summary ====")
    if corr is not None:
        print_correctness(corr, "")
    print(table)
    return corr is None or all(v["passed"] == v["n"] for v in corr.values())


# --------------------------------------------------------------------------- report
def fmt_timing_row(res):
    ks = res["kernels"]
    fl = ks.get("sdpa_flash", {}).get("ms")
    parts = []
    for k, v in ks.items():
        ratio = f" x{fl / v['ms']:.2f}" if fl else ""
        parts.append(f"{k} {v['ms']:.4f}ms {v['tflops']:.0f}TF{ratio}")
    return f"{res['shape']} {'causal' if res['causal'] else 'full'}: " + "; ".join(parts)


def markdown(meta, entries, corr, ncases, rows, dec, abl):
    L = [f"# Hand-tuned FlashAttention PTX: check and timing", "",
         f"GPU: {meta['gpu']} ({meta['sms']} SMs), driver CUDA {meta['driver']}, torch {meta['torch']}, "
         f"date {meta['date']}", f"Command: `{meta['cmd']}`", ""]
    L += ["## Entries (as JIT-compiled by the driver on this GPU)", "",
          "| entry | regs | static smem | dyn smem | local | CTAs/SM |", "|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e.name} | {e.regs} | {e.static_smem} | {e.dyn} | {e.local} | {e.occ} |")
    if corr is not None:
        tot = sum(v["n"] for v in corr.values())
        ok = sum(v["passed"] for v in corr.values())
        L += ["", f"## Correctness ({ncases} problems, {tot} entry runs, {ok} passed)", "",
              "| entry | runs | passed | max abs err | max rel err | max lse err |", "|---|---|---|---|---|---|"]
        for n, v in sorted(corr.items()):
            L.append(f"| {n} | {v['n']} | {v['passed']} | {v['max_abs']:.2e} | {v['max_rel']:.2e} | {v['max_lse']:.2e} |")
        fails = [(n, f) for n, v in corr.items() for f in v["fails"]]
        if fails:
            L += ["", "Failures (first 5 per entry):", ""] + [f"- {n}: {f}" for n, f in fails]
    if rows:
        L += ["", "## Prefill timing (median of events, ms; TFLOP/s; ratio = SDPA FLASH time / this time)", ""]
        for res in rows:
            L += [f"### {res['shape']} {'causal' if res['causal'] else 'non-causal'}", "",
                  "| kernel | ms | 95% CI | TFLOP/s | vs FLASH |", "|---|---|---|---|---|"]
            fl = res["kernels"].get("sdpa_flash", {}).get("ms")
            for k, v in res["kernels"].items():
                L.append(f"| {k} | {v['ms']:.4f} | {v['lo']:.4f}-{v['hi']:.4f} | {v['tflops']:.1f} | "
                         f"{(fl / v['ms']) if fl else float('nan'):.2f} |")
            L.append("")
    if dec:
        L += ["## Decode timing (split + combine; GB/s counts K and V bytes once)", ""]
        for res in dec:
            L += [f"### {res['shape']}", "", "| kernel | ms | TFLOP/s | GB/s | vs FLASH |", "|---|---|---|---|---|"]
            fl = res["kernels"].get("sdpa_flash", {}).get("ms")
            for k, v in res["kernels"].items():
                L.append(f"| {k} {v.get('note', '')} | {v['ms']:.4f} | {v['tflops']:.2f} | {v['gbs']:.0f} | "
                         f"{(fl / v['ms']) if fl else float('nan'):.2f} |")
            L.append("")
    if abl:
        L += ["## Ablation (each optimisation off, same shape; ratio = full time / variant time)", "",
              "| base | shape | causal | variant | ms | TFLOP/s | vs full |", "|---|---|---|---|---|---|---|"]
        for a in abl:
            full = a["t"]["full"]["ms"]
            for k, v in a["t"].items():
                L.append(f"| {a['base']} | {a['shape']} | {a['causal']} | {k} | {v['ms']:.4f} | {v['tflops']:.1f} | "
                         f"{full / v['ms']:.2f} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--tuning", action="store_true", help="check and time the D=128 tuning candidates only")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    drv = Driver()
    props = torch.cuda.get_device_properties(0)
    drv_ver = ctypes.c_int()
    drv.cu.cuDriverGetVersion(ctypes.byref(drv_ver))
    meta = dict(gpu=props.name, sms=props.multi_processor_count, driver=drv_ver.value, torch=torch.__version__,
                date=time.strftime("%Y-%m-%d %H:%M"), seed=args.seed,
                cmd="python3 ptx-overrides/harness/check_and_time.py " + " ".join(sys.argv[1:]))
    log(json.dumps(meta))
    if args.tuning:
        sys.exit(0 if run_tuning(drv, props, meta, args) else 1)
    entries = load_entries(drv)
    for e in entries:
        log(f"  {e.name:48s} regs {e.regs:3d} smem {e.static_smem:6d} dyn {e.dyn:6d} local {e.local} CTAs/SM {e.occ}")
    runner = Runner(drv, entries, props.multi_processor_count)
    corr, ncases = None, 0
    if not args.no_check:
        t0 = time.time()
        corr, ncases = correctness(runner, entries, args.quick, args.seed)
        log(f"correctness: {time.time() - t0:.0f}s")
    rows, dec, abl = [], [], []
    if not args.no_time:
        t0 = time.time()
        rows, dec = timing(runner, entries, args.quick)
        abl = ablation_timing(runner, entries, args.quick)
        log(f"timing: {time.time() - t0:.0f}s")
    md = markdown(meta, entries, corr, ncases, rows, dec, abl)
    open(os.path.join(OUT, "results.md"), "w").write(md)
    json.dump(dict(meta=meta, entries=[e.row() for e in entries], correctness=corr, prefill=rows, decode=dec, ablation=abl),
              open(os.path.join(OUT, "results.json"), "w"), indent=1)
    # short table last
    print("\n==== summary ====")
    if corr is not None:
        print_correctness(corr, f" over {ncases} problems")
        print(f"  worst max abs {max(v['max_abs'] for v in corr.values()):.2e}, worst rel "
              f"{max(v['max_rel'] for v in corr.values()):.2e}, worst lse {max(v['max_lse'] for v in corr.values()):.2e}")
    for res in rows + dec:
        print(fmt_timing_row(res))
    for a in abl:
        full = a["t"]["full"]["ms"]
        print(f"ablation {a['base']} {'causal' if a['causal'] else 'full'}: " +
              ", ".join(f"{k} {v['ms']:.3f}ms(x{full / v['ms']:.2f})" for k, v in a["t"].items()))
    ok = corr is None or all(v["passed"] == v["n"] for v in corr.values())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
