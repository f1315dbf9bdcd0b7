#!/usr/bin/env python3
"""Check and time the KV-cache kernels (ptx/flash_cache.ptx; --tornado-twins: ptx/flash_cache_tornado.ptx;
--dtype bf16: their _bf16 modules) on a GPU.

Loads ptx/flash_cache.ptx with the CUDA driver (ctypes on libcuda.so.1, the calls the Java host
makes) and checks every entry against a float64 PyTorch reference built from the logical cache
contents (never through the kernels' own indexing): decode split + combine and varlen prefill
over contiguous and paged caches (shuffled page tables, page sizes 16, 64 and 1), ragged lengths
(0, 1, non-multiples of every tile), GQA and MHA, every head dim of the table (--head-dims narrows
it), causal and not; the append
(dense and packed sources, then attention over the appended cache); attention_merge_states.
Fresh N(0,1) inputs of the run's element type (--dtype fp16, the default, or bf16: checked against the
reference on the bf16-rounded inputs with the bf16 tolerance), outputs poisoned with NaN; cache rows past each length, pages no
sequence owns and absent query rows hold NaN, so a read out of bounds shows.  Then times the
decode step (split + combine) at B=8, Hq=32, Hkv=8, D=128: GB/s of K/V read against the GPU's
peak and beside SDPA FLASH over the same cache slice.  A short table is printed last.

  python3 ptx-overrides/harness/cache_check.py [--seed N] [--no-time] [--emulate] [--dtype bf16] [--head-dims 32,96]
  python3 ptx-overrides/harness/cache_check.py --tornado-twins [--seed N] [--dtype bf16] [--head-dims ...]

--tornado-twins: only the TornadoVM twins, from their own module (flash_cache_decode_fused[_paged]_d{64,128}_tornado[_h128],
flash_cache_append_decode_fused[_paged]_d{64,128}_tornado[_h128],
flash_cache_staged_decode_fused[_paged]_d{64,128}_tornado[_h128],
flash_cache_fwd[_paged]_d{64,128}[_causal]_tornado[_h128]), every
array allocated behind a fake header of 16 (128) bytes and passed as a pointer to that header,
against the same references (GPU only; no timing).  The fused decode also runs as an engine's
TaskGraph would: one params block with params[25] = 0 (keys per split derived on the device) and
one fixed grid, stepped through ragged, all-zero and long lengths in the same buffers; the append +
decode twins run an engine's decode loop (each step appends 0, 1 or 3 rows per slot through the fused
kernel alone; O/lse and the whole K/V cache checked against the model after every step); the prefill
twins read lens and the packed offsets from one KvCache step array [3*B + 1].

Window, softcap and sinks (params words 26-29, the sinks after word 31) run through every path: the
decode split + combine (the host's keys per split from the visible span of each sequence, split s
covering [span_start + s*kps, ...), span_start = the first query's first visible key rounded down to
64), the varlen prefill and the TornadoVM twins (keys per split given and derived on the device),
against the same float64 definition (problem.py: CpuReference.softmaxRow at each sequence's position
L_b - n_b + j, on the inputs rounded to the run's element type); absent query rows stay O = 0, lse = -inf
with sinks too.  They run at a few head dims per element type (FEATURE_DIMS; --head-dims narrowed to none of
them: at those given), and only where the manifest lists window+softcap+sinks for the module's attention
entries (else they are skipped and counted in the summary; --emulate always runs them).

--emulate: no GPU; every launch runs a Python model of the ABI instead (checks this script's
plumbing, references and the split ranges on the CPU, score features included; timings then mean
nothing).
"""
import argparse
import ctypes
import json
import math
import os
import random
import re
import struct
import sys
import time
import traceback

import torch

import manifest
import split_policy
from features import Features
from problem import NO_FEATURES, feature_tag, feature_words, scores_to_probs, visible_keys

OUT = os.environ.get("OUT", "./out")
LOG2E = 1.4426950408889634
NAN = float("nan")
NEG_INF = float("-inf")

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
ap.add_argument("--no-time", action="store_true")
ap.add_argument("--emulate", action="store_true")
ap.add_argument("--no-check", action="store_true")
ap.add_argument("--tornado-twins", action="store_true", help="check only the TornadoVM twins (no timing)")
ap.add_argument("--ptx", default=None, help="another build of flash_cache.cu (or, with --tornado-twins, of "
                                            "flash_cache_tornado.cu; with --dtype bf16 their _bf16.cu) to check")
ap.add_argument("--dtype", choices=manifest.DTYPES, default="fp16", help="the element type checked (one module per type)")
ap.add_argument("--head-dims", default=",".join(str(d) for d in manifest.HEAD_DIMS),
                help="the head dims checked, comma-separated (default: every one of the table)")
ARGS = ap.parse_args()
# The manifest's module this run checks (one per element type); --ptx is another build of that module, with its
# entries (plain PTX text or .gz).
MODULE = manifest.module_of("flash_cache_tornado.ptx" if ARGS.tornado_twins else "flash_cache.ptx", ARGS.dtype)
PTX = ARGS.ptx or os.path.join(manifest.PTX_DIR, MODULE)
# torch type of q, k, v, o and the caches; head dims of the correctness checks (timing: D=128).
TDT = {"fp16": torch.half, "bf16": torch.bfloat16}[ARGS.dtype]
HEAD_DIMS_RUN = tuple(int(d) for d in ARGS.head_dims.split(","))
MANIFEST = manifest.load()
if ARGS.tornado_twins and ARGS.emulate:
    sys.exit("--tornado-twins needs a GPU (the twins have no Python model)")
DEV = "cpu" if ARGS.emulate else "cuda"
# Window / softcap / sinks cases run at these head dims of the run (each element type its own few; a run
# narrowed by --head-dims to none of them runs them at its own), and only where the module's attention
# entries list the features in the manifest (a table generated without them skips the cases, counted in the
# summary); --emulate always runs them (the Python models implement the features).
_FEATURE_DIMS = {"fp16": (64, 128, 256), "bf16": (32, 128, 192)}[ARGS.dtype]
FEATURE_DIMS = tuple(D for D in HEAD_DIMS_RUN if D in _FEATURE_DIMS) or HEAD_DIMS_RUN
# Every attention kind of the module has an entry with all three (its "_feat" entries beside the plain ones).
FEATURES_SERVED = ARGS.emulate or all(
    any({"window", "softcap", "sinks"} <= e.features for e in MANIFEST if e.module == MODULE and e.kind == kind)
    for kind in {e.kind for e in MANIFEST if e.module == MODULE} - {manifest.CACHE_APPEND, manifest.MERGE_STATES})
FEATURE_SKIPS = [0]


def skip_features(D, feat):
    """True for a feature case this run leaves out (not a FEATURE_DIMS head dim, or the table lacks the features)."""
    if tuple(feat) == tuple(NO_FEATURES):
        return False
    if D not in FEATURE_DIMS:
        return True
    if not FEATURES_SERVED:
        FEATURE_SKIPS[0] += 1
        return True
    return False
os.makedirs(OUT, exist_ok=True)


def log(*a):
    print(" ".join(str(x) for x in a), flush=True)


def layout_of(ps):
    """The cache layout of a page size (0: a contiguous cache)."""
    return "paged" if ps else "contiguous"


def select(kind, D, causal, layout="none", hdr=0, feat=NO_FEATURES):
    """The manifest entry a host runs for this variant in the run's element type (hdr 0: the CUDA driver's ABI,
    else a TornadoVM twin's header) and score features (a plain entry without any, a "_feat" one with them); the
    harness never names an entry by its parts."""
    return manifest.select_variant(MANIFEST, kind, ARGS.dtype, D, causal, layout, hdr, Features(*feat).names())


def f32_bits(x):
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]


def bits_f32(i):
    return struct.unpack("<f", struct.pack("<i", int(i)))[0]


# --------------------------------------------------------------------------- CUDA driver
class Driver:
    """The few libcuda calls this script needs (as in check_and_time.py, kept separate)."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # primary context, current through PyTorch
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        assert ctx.value, "no current CUDA context"

    def check(self, err, what):
        if err != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(err, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {err} {s.value.decode() if s.value else ''}")

    def load(self, path):
        data = manifest.read_ptx(path) + b"\0"  # ptx/<module>.gz as shipped, or a plain .ptx
        mod = ctypes.c_void_p()
        logbuf = ctypes.create_string_buffer(1 << 16)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER(_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(logbuf, ctypes.c_void_p), ctypes.c_void_p(len(logbuf)))
        err = self.cu.cuModuleLoadDataEx(ctypes.byref(mod), data, 2, opts, vals)
        if err != 0:
            log("JIT error log:", logbuf.value.decode(errors="replace"))
        self.check(err, f"cuModuleLoadDataEx({path})")
        return mod

    def function(self, mod, name):
        f = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), f"cuModuleGetFunction({name})")
        return f

    def attr(self, f, a):
        v = ctypes.c_int()
        self.check(self.cu.cuFuncGetAttribute(ctypes.byref(v), a, f), "cuFuncGetAttribute")
        return v.value

    def occupancy(self, f, threads):
        n = ctypes.c_int()
        self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), f, threads, ctypes.c_size_t(0)),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def prepare(self, args):
        """Kernel arguments -> (void** array, keep-alive): pointers 8 bytes, I 4, L 8."""
        vals = []
        for a in args:
            if isinstance(a, I):
                vals.append(ctypes.c_int32(a.v))
            elif isinstance(a, L):
                vals.append(ctypes.c_int64(a.v))
            elif a is None:
                vals.append(ctypes.c_uint64(0))
            else:
                vals.append(ctypes.c_uint64(a.data_ptr()))
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        return ptrs, vals

    def launch_prepared(self, f, grid, block, prepared):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(f, grid[0], grid[1], grid[2], block, 1, 1, 0, stream, prepared[0], None),
                   "cuLaunchKernel")


class I:
    """An int32 kernel argument."""

    def __init__(self, v):
        self.v = int(v)


class L:
    """An int64 kernel argument."""

    def __init__(self, v):
        self.v = int(v)


# --------------------------------------------------------------------------- the ABI in Python (--emulate)
def _strided(buf, size, stride, offset=0):
    return torch.as_strided(buf.reshape(-1), size, stride, int(offset))


def _prm(prm):
    p = [int(x) for x in prm.tolist()]
    sinks = [bits_f32(w) for w in p[32:32 + p[1]]] if p[29] else None
    return dict(B=p[0], Hq=p[1], Hkv=p[2], Sq=p[3], cap=p[4], D=p[5], causal=p[6] != 0, wlse=p[8] != 0,
                q=p[9:12], k=p[12:15], v=p[15:18], o=p[18:21], scale=bits_f32(p[22]), ps=p[23], pps=p[24],
                feat=(p[26], p[27], bits_f32(p[28]) if p[28] else 0.0, p[29] != 0), sinks=sinks)


def _emu_keys(buf, st, P, b, Lb, bt):
    """K or V of sequence b, [Hkv, Lb, D] float64, through the strides / block table."""
    j = torch.arange(Lb)
    if P["ps"] == 0:
        base = b * st[0] + j * st[2]
    else:
        btl = bt.reshape(-1).long().cpu()
        base = btl[b * P["pps"] + j // P["ps"]] * st[0] + (j % P["ps"]) * st[2]
    idx = base[None, :, None] + torch.arange(P["Hkv"])[:, None, None] * st[1] + torch.arange(P["D"])[None, None, :]
    return buf.reshape(-1)[idx.to(buf.device)].double()


def _emu_rows(qd, kd, vd, key0, causal, scale, Lb, n, G, feat=NO_FEATURES, sinks=None):
    """Softmax of queries qd [Hq, n, D] (query j, at position Lb - n + j) over keys key0.. (kd [Hkv, m, D])
    with the ABI's mask, window and softcap, and the sinks when given (the combine's: None in a split);
    returns normalised O [Hq, n, D] and lse [Hq, n] (O = 0 and the sink, or -inf, for no key)."""
    k = kd.repeat_interleave(G, 0)
    v = vd.repeat_interleave(G, 0)
    s = torch.matmul(qd, k.transpose(-1, -2)) * scale
    m = k.shape[1]
    vis = visible_keys(torch.arange(n) + (Lb - n - key0), m, causal, feat[0], feat[1]).to(s.device)
    sink = torch.tensor(sinks, dtype=s.dtype)[:, None] if sinks is not None else torch.tensor(NEG_INF, dtype=s.dtype)
    p, lse = scores_to_probs(s, vis, feat[2], sink)
    return torch.matmul(p, v), lse


ABSENT = struct.unpack("<f", struct.pack("<i", 0x7fa65e00))[0]  # kAbsentLseBits (flash_params.cuh)


def emu_decode_split(grid, a, br):
    q, k, v, op, lp, prm, lens, bt, kps = a
    P = _prm(prm)
    B, Hq, Hkv, Sq, D = P["B"], P["Hq"], P["Hkv"], P["Sq"], P["D"]
    G = Hq // Hkv
    S = grid[0]
    assert grid[1] == math.ceil(G * Sq / br) and grid[2] == B * Hkv
    opv = op.view(S, B, Hq, Sq, D)
    lpv = lp.view(S, B, Hq, Sq)
    ln = lens.tolist()
    for b in range(B):
        Lb, n = ln[b], ln[B + b]
        qd = _strided(q, (Hq, n, D), (P["q"][1], P["q"][2], 1), b * P["q"][0]).double()
        for s in range(S):
            k0 = split_policy.cache_span_start(Lb, n, P["feat"][0]) + s * kps.v
            k1 = min(Lb, k0 + kps.v)
            opv[s, b] = 0
            lpv[s, b] = NEG_INF
            lpv[s, b, :, n:] = ABSENT  # absent queries: the marker
            if k1 <= k0 or n == 0:
                continue
            kd = _emu_keys(k, P["k"], P, b, k1, bt)[:, k0:]
            vd = _emu_keys(v, P["v"], P, b, k1, bt)[:, k0:]
            o_, l_ = _emu_rows(qd, kd, vd, k0, P["causal"], P["scale"], Lb, n, G, P["feat"])
            opv[s, b, :, :n] = o_.float()
            lpv[s, b, :, :n] = l_.float()


def emu_decode_combine(grid, a):
    op, lp, o, lse, prm, ns = a
    P = _prm(prm)
    B, Hq, Sq, D = P["B"], P["Hq"], P["Sq"], P["D"]
    S = ns.v
    opv = op.reshape(-1)[: S * B * Hq * Sq * D].view(S, B, Hq, Sq, D).double()
    lpv = lp.reshape(-1)[: S * B * Hq * Sq].view(S, B, Hq, Sq).double()
    absent = torch.isnan(lpv[0])  # the split pass's marker
    lpv = torch.where(torch.isnan(lpv), torch.full_like(lpv, NEG_INF), lpv)
    if P["sinks"] is not None:  # the sink joins once, here, as a term with no value
        z = torch.tensor(P["sinks"], dtype=lpv.dtype)[None, :, None].expand(B, Hq, Sq)
        z = torch.where(absent, torch.full_like(z, NEG_INF), z)
        lpv = torch.cat([lpv, z[None]], 0)
        opv = torch.cat([opv, torch.zeros_like(opv[:1])], 0)
    lt = torch.logsumexp(lpv, 0)
    w = torch.nan_to_num(torch.exp(lpv - lt[None]), nan=0.0)
    ov = (w[..., None] * torch.where(torch.isneginf(lpv)[..., None], torch.zeros_like(opv), opv)).sum(0)
    dst = _strided(o, (B, Hq, Sq, D), (P["o"][0], P["o"][1], P["o"][2], 1))
    dst.copy_(ov.to(TDT))
    if P["wlse"] and lse is not None:
        lse.view(B, Hq, Sq).copy_(lt.float())


def emu_fwd(grid, a, br):
    q, k, v, o, lse, prm, qoff, lens, bt = a
    P = _prm(prm)
    B, Hq, Hkv, D = P["B"], P["Hq"], P["Hkv"], P["D"]
    G = Hq // Hkv
    assert grid[1] == B * Hq
    qo, ln = qoff.tolist(), lens.tolist()
    for b in range(B):
        n, Lb = qo[b + 1] - qo[b], ln[b]
        assert n <= grid[0] * br, "grid.x too small for this prompt"
        if n == 0:
            continue
        qd = _strided(q, (Hq, n, D), (P["q"][1], P["q"][2], 1), qo[b] * P["q"][2]).double()
        kd = _emu_keys(k, P["k"], P, b, Lb, bt)
        vd = _emu_keys(v, P["v"], P, b, Lb, bt)
        o_, l_ = _emu_rows(qd, kd, vd, 0, P["causal"], P["scale"], Lb, n, G, P["feat"], P["sinks"])
        _strided(o, (Hq, n, D), (P["o"][1], P["o"][2], 1), qo[b] * P["o"][2]).copy_(o_.to(TDT))
        if P["wlse"] and lse is not None:
            _strided(lse, (Hq, n), (P["Sq"], 1), qo[b]).copy_(l_.float())


def emu_append(grid, a, threads):
    (kc, vc, nk, nv, lens, bt, noff, B, Hkv, D, max_new, nsb, nsh, nsr, csb, csh, csr, ps, pps) = a
    B, Hkv, D, ps, pps = B.v, Hkv.v, D.v, ps.v, pps.v
    ln = lens.tolist()
    assert grid[1] == Hkv and grid[2] == B and grid[0] * (threads // (D // 8)) >= max_new.v
    for b in range(B):
        n = ln[B + b]
        for j in range(n):
            pos = ln[b] - n + j
            for h in range(Hkv):
                src = ((noff[b].item() + j) * nsr.v + h * nsh.v) if noff is not None else (b * nsb.v + h * nsh.v + j * nsr.v)
                if ps > 0:
                    page = bt.reshape(-1)[b * pps + pos // ps].item()
                    dst = page * csb.v + h * csh.v + (pos % ps) * csr.v
                else:
                    dst = b * csb.v + h * csh.v + pos * csr.v
                kc.reshape(-1)[dst:dst + D] = nk.reshape(-1)[src:src + D]
                vc.reshape(-1)[dst:dst + D] = nv.reshape(-1)[src:src + D]


def emu_merge(grid, a):
    op, lp, o, lse, parts, rows, D = a
    parts, rows, D = parts.v, rows.v, D.v
    ov = op.reshape(-1)[: parts * rows * D].view(parts, rows, D).double()
    lv = lp.reshape(-1)[: parts * rows].view(parts, rows).double()
    lt = torch.logsumexp(lv, 0)
    w = torch.nan_to_num(torch.exp(lv - lt[None]), nan=0.0)
    o.reshape(-1)[: rows * D].view(rows, D).copy_((w[..., None] * ov).sum(0).to(TDT))
    if lse is not None:
        lse.reshape(-1)[:rows].copy_(lt.float())


# --------------------------------------------------------------------------- kernels
class Kernels:
    """The manifest's entries of MODULE that the PTX holds; launches take a manifest entry (its threads
    from the manifest)."""

    def __init__(self):
        self.entries = {}
        self.names = re.findall(r"\.entry\s+(\w+)\s*\(", manifest.read_ptx(PTX).decode("ascii"))
        rows = {e.entry: e for e in MANIFEST if e.module == MODULE}
        unlisted = [n for n in self.names if n not in rows]
        if unlisted:
            log(f"  note: {os.path.basename(PTX)} entries the manifest does not list (not checked): {unlisted}")
        if ARGS.emulate:
            self.drv = None
            return
        self.drv = Driver()
        t0 = time.time()
        mod = self.drv.load(PTX)
        log(f"JIT of {os.path.basename(PTX)} ({len(self.names)} entries): {time.time() - t0:.1f}s")
        for n in self.names:
            if n not in rows:
                continue
            f = self.drv.function(mod, n)
            thr = rows[n].threads
            self.entries[n] = dict(f=f, threads=thr, regs=self.drv.attr(f, 4), smem=self.drv.attr(f, 1),
                                   local=self.drv.attr(f, 3), occ=self.drv.occupancy(f, thr))

    def launch(self, e, grid, args):
        """Launches manifest entry e (--emulate: the Python model of its kind)."""
        assert e.module == MODULE and e.entry in self.names, f"no entry {e.entry} in {os.path.basename(PTX)}"
        if ARGS.emulate:
            if e.kind == manifest.CACHE_SPLIT:
                emu_decode_split(grid, args, e.br)
            elif e.kind == manifest.CACHE_COMBINE:
                emu_decode_combine(grid, args)
            elif e.kind == manifest.CACHE_PREFILL:
                emu_fwd(grid, args, e.br)
            elif e.kind == manifest.CACHE_APPEND:
                emu_append(grid, args, e.threads)
            elif e.kind == manifest.MERGE_STATES:
                emu_merge(grid, args)
            else:
                raise NotImplementedError(f"{e.entry}: no Python model of {e.kind}")
            return
        k = self.entries[e.entry]
        self.drv.launch_prepared(k["f"], grid, k["threads"], self.drv.prepare(args))

    def launcher(self, e, grid, args):
        """A closure that launches manifest entry e with pre-built arguments (for timing)."""
        if ARGS.emulate:
            return lambda: self.launch(e, grid, args)
        k = self.entries[e.entry]
        prep = self.drv.prepare(args)
        return lambda: self.drv.launch_prepared(k["f"], grid, k["threads"], prep)


# --------------------------------------------------------------------------- problem set-up
def params(B, Hq, Hkv, Sq, cap, D, causal, scale, qs, ks, os_, ps, pps, write_lse=1, feat=NO_FEATURES, sinks=None):
    """The params block; feat = (window left, right, softcap, sinks?) as problem.Problem, sinks [Hq] the logits
    (then the block is 32 + Hq words)."""
    p = [0] * 32
    p[0:7] = [B, Hq, Hkv, Sq, cap, D, int(causal)]
    p[7] = f32_bits(scale * LOG2E)
    p[8] = write_lse
    p[9:12] = list(qs)
    p[12:15] = list(ks)
    p[15:18] = list(ks)
    p[18:21] = list(os_)
    p[22] = f32_bits(scale)
    p[23] = ps
    p[24] = pps
    words, tail = feature_words(feat, sinks)
    for name, value in words.items():
        p[PIDX[name]] = value
    return torch.tensor(p + tail, dtype=torch.int32, device=DEV)


PIDX = manifest.param_index()
# Softcap cases run with scale 1 (scores ~ N(0, D)), so that the cap changes them.
SOFTCAP_SCALE = 1.0
# Feature sets the checks run (beside none): left window not a tile multiple, a window smaller than a tile
# with a right side, softcap 30 / 50, sinks, and all three.
FEATURES = [(100, -1, 0.0, False), (5, 3, 0.0, False), (-1, -1, 30.0, False), (-1, -1, 0.0, True),
            (64, 16, 50.0, True), (700, -1, 50.0, True)]


def spans(lens, news, feat):
    """Each sequence's visible span length from its span start to L_b, what the host sizes splits from."""
    return [L - split_policy.cache_span_start(L, n, feat[0]) for L, n in zip(lens, news)]


def make_sinks(Hq, feat, gen):
    return (torch.randn(Hq, device=DEV, dtype=torch.float32, generator=gen) * 2) if feat[3] else None


def scale_for(D, feat):
    return SOFTCAP_SCALE if feat[2] else 1.0 / math.sqrt(D)


def randn(*shape, gen):
    return torch.randn(*shape, device=DEV, dtype=torch.float32, generator=gen).to(TDT)


class Cache:
    """A contiguous cache [B, Hkv, cap, D] (ps = 0) or a pool [pages, Hkv, ps, D] with a shuffled
    block table; `truth` holds each sequence's logical K/V ([Hkv, L, D] fp16), the reference's input."""

    def __init__(self, B, Hkv, cap, D, ps, gen, fill=NAN):
        self.B, self.Hkv, self.cap, self.D, self.ps = B, Hkv, cap, D, ps
        if ps == 0:
            self.pps, self.bt = 0, None
            shape = (B, Hkv, cap, D)
            self.strides = (Hkv * cap * D, cap * D, D)
        else:
            self.pps = math.ceil(cap / ps)
            npages = B * self.pps + 7
            perm = torch.randperm(npages, generator=gen, device=DEV)  # pages in random order
            self.bt = perm[: B * self.pps].to(torch.int32).contiguous()
            shape = (npages, Hkv, ps, D)
            self.strides = (Hkv * ps * D, ps * D, D)
        if fill is None:
            self.k = randn(*shape, gen=gen)
            self.v = randn(*shape, gen=gen)
        else:
            self.k = torch.full(shape, fill, device=DEV, dtype=TDT)
            self.v = torch.full(shape, fill, device=DEV, dtype=TDT)
        self.truth = [(torch.empty(Hkv, 0, D, device=DEV, dtype=TDT),) * 2 for _ in range(B)]

    def _loc(self, b, pos):
        if self.ps == 0:
            return torch.full_like(pos, b), pos
        return self.bt.view(self.B, self.pps)[b, pos // self.ps].long(), pos % self.ps

    def write(self, b, start, kk, vv):
        """Rows start.. of sequence b = kk, vv [Hkv, n, D] (set-up: by torch indexing, not the kernels)."""
        pos = torch.arange(start, start + kk.shape[1], device=DEV)
        i0, i1 = self._loc(b, pos)
        self.k[i0, :, i1] = kk.transpose(0, 1)
        self.v[i0, :, i1] = vv.transpose(0, 1)

    def fill(self, lens, gen):
        for b, Lb in enumerate(lens):
            kk, vv = randn(self.Hkv, Lb, self.D, gen=gen), randn(self.Hkv, Lb, self.D, gen=gen)
            self.write(b, 0, kk, vv)
            self.truth[b] = (kk, vv)

    def bt_arg(self):
        return self.bt


def reference(q_list, cache, lens, news, causal, scale, Hq, feat=NO_FEATURES, sinks=None):
    """float64 reference per sequence: q_list[b] = [Hq, n_b, D]; -> list of (O [Hq, n, D], lse [Hq, n]).
    Query j of sequence b sits at position L_b - n_b + j (window, causal); softcap and sinks as the dense
    definition (problem.scores_to_probs)."""
    G = Hq // cache.Hkv
    out = []
    for b in range(len(lens)):
        Lb, n = lens[b], news[b]
        kk, vv = cache.truth[b]
        assert kk.shape[1] >= Lb
        k = kk[:, :Lb].double().repeat_interleave(G, 0)
        v = vv[:, :Lb].double().repeat_interleave(G, 0)
        qd = q_list[b].double()
        s = torch.matmul(qd, k.transpose(-1, -2)) * scale
        vis = visible_keys(torch.arange(n, device=DEV) + (Lb - n), Lb, causal, feat[0], feat[1])
        sink = (sinks.double()[:, None] if sinks is not None
                else torch.tensor(NEG_INF, dtype=torch.float64, device=DEV))
        p, lse = scores_to_probs(s, vis, feat[2], sink)
        out.append((torch.matmul(p, v), lse))
    return out


def compare(o, lse, oref, lref):
    """O against float64 (fp16: max abs <= 1e-2, rel L2 <= 2e-3; bf16: 6e-2, 1.6e-2; no NaN); lse: same -inf rows,
    |err| <= 1e-3."""
    r = dict(ok=True, why="", max_abs=0.0, rel=0.0, lse_err=0.0)
    if torch.isnan(o).any():
        r.update(ok=False, why=f"NaN in O ({int(torch.isnan(o).sum())} values)", max_abs=NAN, rel=NAN)
        return r
    err = o.double() - oref
    r["max_abs"] = err.abs().max().item() if err.numel() else 0.0
    nref = oref.norm().item()
    r["rel"] = err.norm().item() / nref if nref > 0 else (0.0 if r["max_abs"] == 0 else math.inf)
    tol_abs, tol_rel = manifest.TOLERANCE[ARGS.dtype]
    if not (r["max_abs"] <= tol_abs and r["rel"] <= tol_rel):
        r.update(ok=False, why=f"O err max {r['max_abs']:.3g} rel {r['rel']:.3g}")
    if lse is not None:
        if torch.isnan(lse).any():
            r.update(ok=False, why=r["why"] + f" NaN in lse ({int(torch.isnan(lse).sum())})")
        elif not torch.equal(torch.isneginf(lse), torch.isneginf(lref)):
            r.update(ok=False, why=r["why"] + " lse -inf rows differ")
        else:
            fin = torch.isfinite(lref)
            r["lse_err"] = (lse.double()[fin] - lref[fin]).abs().max().item() if fin.any() else 0.0
            if r["lse_err"] > manifest.LSE_TOLERANCE:
                r.update(ok=False, why=r["why"] + f" lse err {r['lse_err']:.3g}")
    return r


class Results:
    def __init__(self):
        self.groups = {}

    def add(self, group, case, r):
        g = self.groups.setdefault(group, dict(n=0, passed=0, max_abs=0.0, max_rel=0.0, max_lse=0.0, fails=[]))
        g["n"] += 1
        if r["ok"]:
            g["passed"] += 1
        else:
            if len(g["fails"]) < 6:
                g["fails"].append(f"{case}: {r['why']}")
            log(f"  FAIL {group} {case}: {r['why']}")
        for k1, k2 in (("max_abs", "max_abs"), ("max_rel", "rel"), ("max_lse", "lse_err")):
            if not math.isnan(r.get(k2, 0.0)):
                g[k1] = max(g[k1], r.get(k2, 0.0))

    def error(self, group, case, ex):
        g = self.groups.setdefault(group, dict(n=0, passed=0, max_abs=0.0, max_rel=0.0, max_lse=0.0, fails=[]))
        g["n"] += 1
        g["fails"].append(f"{case}: exception {ex}")
        log(f"  ERROR {group} {case}: {ex}")
        traceback.print_exc()


# --------------------------------------------------------------------------- decode / prefill runs
class Decode:
    """One dense decode call over a cache: q [B, Hq, Sq, D] (BHSD or BSHD storage), o the same."""

    def __init__(self, K, cache, lens, news, Hq, Sq, causal, gen, layout="bhsd", kps=None, sms=132, write_lse=True,
                 lse_null=False, q=None, feat=NO_FEATURES):
        B, Hkv, D = cache.B, cache.Hkv, cache.D
        self.K, self.cache, self.lens, self.news = K, cache, list(lens), list(news)
        self.B, self.Hq, self.Sq, self.D, self.causal, self.layout = B, Hq, Sq, D, causal, layout
        self.feat, self.sinks = tuple(feat), make_sinks(Hq, feat, gen)
        self.scale = scale_for(D, feat)
        G = Hq // Hkv
        self.split = select(manifest.CACHE_SPLIT, D, causal, layout_of(cache.ps), feat=feat)
        self.comb = select(manifest.CACHE_COMBINE, D, causal, layout_of(cache.ps), feat=feat)
        self.row_blocks = math.ceil(G * Sq / self.split.br)
        # storage: BHSD [B, Hq, Sq, D] or BSHD [B, Sq, Hq, D]; absent queries hold NaN
        if layout == "bhsd":
            self.qs = (Hq * Sq * D, Sq * D, D)
            shape = (B, Hq, Sq, D)
        else:
            self.qs = (Sq * Hq * D, D, Hq * D)
            shape = (B, Sq, Hq, D)
        self.q = q if q is not None else randn(*shape, gen=gen)
        self.qv = self.q if layout == "bhsd" else self.q.permute(0, 2, 1, 3)  # logical [B, Hq, Sq, D]
        for b, n in enumerate(news):
            self.qv[b, :, n:] = NAN
        self.o = torch.empty(shape, device=DEV, dtype=TDT)
        self.ov = self.o if layout == "bhsd" else self.o.permute(0, 2, 1, 3)
        self.lse = None if lse_null else torch.empty(B, Hq, Sq, device=DEV, dtype=torch.float32)
        self.lens_t = torch.tensor(self.lens + self.news, dtype=torch.int32, device=DEV)
        # The ptx-cuda host's keys per split (CudaCachePlan.splits), from each sequence's visible span. The
        # splits cover every span, where the host's cover those with queries: at most a few more, empty ones.
        self.spans = spans(self.lens, self.news, self.feat)
        self.kps = kps if kps is not None else \
            split_policy.for_lengths(self.spans, news, Hkv * self.row_blocks, sms, cache.cap)[0]
        self.splits = max(1, math.ceil(max(self.spans) / self.kps))
        self.prm = params(B, Hq, Hkv, Sq, cache.cap, D, causal, self.scale, self.qs, cache.strides, self.qs, cache.ps,
                          cache.pps, int(write_lse), self.feat, self.sinks)
        rows = B * Hq * Sq
        self.op = torch.empty(self.splits * rows * D, device=DEV, dtype=torch.float32)
        self.lp = torch.empty(self.splits * rows, device=DEV, dtype=torch.float32)
        self.g1 = (self.splits, self.row_blocks, B * Hkv)
        self.g2 = (math.ceil(rows / self.comb.br), 1, 1)
        self.a1 = [self.q, cache.k, cache.v, self.op, self.lp, self.prm, self.lens_t, cache.bt_arg(), I(self.kps)]
        self.a2 = [self.op, self.lp, self.o, self.lse, self.prm, I(self.splits)]

    def poison(self):
        for t in (self.o, self.lse, self.op, self.lp):
            if t is not None:
                t.fill_(NAN)

    def run(self):
        self.K.launch(self.split, self.g1, self.a1)
        self.K.launch(self.comb, self.g2, self.a2)

    def launcher(self):
        f1 = self.K.launcher(self.split, self.g1, self.a1)
        f2 = self.K.launcher(self.comb, self.g2, self.a2)

        def go():
            f1()
            f2()
        return go

    def check(self):
        self.poison()
        self.run()
        if DEV == "cuda":
            torch.cuda.synchronize()
        refs = reference([self.qv[b, :, :n] for b, n in enumerate(self.news)], self.cache, self.lens, self.news,
                         self.causal, self.scale, self.Hq, self.feat, self.sinks)
        oref = torch.zeros(self.B, self.Hq, self.Sq, self.D, device=DEV, dtype=torch.float64)
        lref = torch.full((self.B, self.Hq, self.Sq), NEG_INF, device=DEV, dtype=torch.float64)
        for b, (o_, l_) in enumerate(refs):
            n = self.news[b]
            oref[b, :, :n] = o_
            lref[b, :, :n] = l_
        return compare(self.ov, self.lse, oref, lref)


class Prefill:
    """A varlen prefill over a cache: q packed [totalQ, Hq, D], lse [Hq, Sq_plan]. entry: the manifest entry to run,
    by default the one the host selects for this call (a check may run another entry of the cache's layout)."""

    def __init__(self, K, cache, lens, news, Hq, causal, gen, entry=None, write_lse=True, extra_rows=3, q=None,
                 feat=NO_FEATURES):
        B, Hkv, D = cache.B, cache.Hkv, cache.D
        self.K, self.cache, self.lens, self.news = K, cache, list(lens), list(news)
        self.B, self.Hq, self.D, self.causal = B, Hq, D, causal
        self.feat, self.sinks = tuple(feat), make_sinks(Hq, feat, gen)
        self.scale = scale_for(D, feat)
        self.offs = [0]
        for n in news:
            self.offs.append(self.offs[-1] + n)
        total = self.offs[-1]
        self.sq_plan = total + extra_rows
        self.q = q if q is not None else randn(max(total, 1), Hq, D, gen=gen)
        self.o = torch.empty(max(total, 1), Hq, D, device=DEV, dtype=TDT)
        self.lse = torch.empty(Hq, self.sq_plan, device=DEV, dtype=torch.float32) if write_lse else None
        self.want_lse = write_lse
        self.qoff_t = torch.tensor(self.offs, dtype=torch.int32, device=DEV)
        self.lens_t = torch.tensor(self.lens + self.news, dtype=torch.int32, device=DEV)
        qs = (self.sq_plan * Hq * D, D, Hq * D)  # the host's packed params: batch stride unused
        self.prm = params(B, Hq, Hkv, self.sq_plan, cache.cap, D, causal, self.scale, qs, cache.strides, qs, cache.ps,
                          cache.pps, int(write_lse), self.feat, self.sinks)
        self.entry = entry or select(manifest.CACHE_PREFILL, D, causal, layout_of(cache.ps), feat=feat)
        self.grid = (max(1, math.ceil(max(news) / self.entry.br)), B * Hq, 1)
        self.args = [self.q, cache.k, cache.v, self.o, self.lse, self.prm, self.qoff_t, self.lens_t, cache.bt_arg()]

    def check(self):
        self.o.fill_(NAN)
        if self.lse is not None:
            self.lse.fill_(NAN)
        self.K.launch(self.entry, self.grid, self.args)
        if DEV == "cuda":
            torch.cuda.synchronize()
        refs = reference([self.q[self.offs[b]:self.offs[b + 1]].transpose(0, 1) for b in range(self.B)], self.cache,
                         self.lens, self.news, self.causal, self.scale, self.Hq, self.feat, self.sinks)
        total = self.offs[-1]
        if total == 0:
            return dict(ok=True, why="", max_abs=0.0, rel=0.0, lse_err=0.0)
        oref = torch.cat([o_.transpose(0, 1) for o_, _ in refs], 0)
        lref = torch.cat([l_ for _, l_ in refs], 1)
        r = compare(self.o[:total], self.lse[:, :total] if self.lse is not None else None, oref, lref)
        if self.lse is not None and not torch.isnan(self.lse[:, total:]).all():
            r.update(ok=False, why=r["why"] + " lse written past the packed rows")
        return r


# --------------------------------------------------------------------------- correctness
def ragged(rng, n, hi, specials=(0, 1, 63, 64, 65, 97)):
    return [rng.choice(specials) if rng.random() < 0.35 else rng.randint(2, hi) for _ in range(n)]


def check_decode(K, res, rng, gen, sms):
    cases = []
    for D in HEAD_DIMS_RUN:
        for (Hq, Hkv) in ((32, 8), (8, 8)):
            for causal in (False, True):
                for ps in (0, 16, 64, 1):
                    for Sq in (1, 4):
                        if ps == 1 and (Sq == 4 or Hq == 8):
                            continue
                        cases.append((D, Hq, Hkv, causal, ps, Sq, 6, 3000))
    # long sequences (many tiles per split, the host's split count), one each
    for D in HEAD_DIMS_RUN:
        for ps in (0, 16):
            cases.append((D, 32, 8, True, ps, 1, 3, 20000))
    # Window, softcap and sinks: every feature set over a smaller grid (each case its own set, in turn),
    # and long sequences with windows (the splits then cover the span only).
    fcases = []
    for D in FEATURE_DIMS:
        for causal in (False, True):
            for ps in (0, 16):
                for Sq in (1, 4):
                    fcases.append((D, 32, 8, causal, ps, Sq, 5, 3000))
        for ps in (0, 16):
            fcases.append((D, 32, 8, True, ps, 1, 3, 20000, (700, -1, 0.0, False)))
            fcases.append((D, 32, 8, False, ps, 4, 3, 20000, (4096, 0, 30.0, True)))
    cases += [c if len(c) > 8 else c + (FEATURES[i % len(FEATURES)],) for i, c in enumerate(fcases)]
    for ci, c in enumerate(cases):
        (D, Hq, Hkv, causal, ps, Sq, B, hi), feat = c[:8], (c[8] if len(c) > 8 else NO_FEATURES)
        if skip_features(D, feat):
            continue
        lens = ragged(rng, B, hi)
        if hi > 5000:
            lens = [hi - rng.randint(0, 77), rng.randint(1, 300), 0][:B]
        news = [0 if Lb == 0 and rng.random() < 0.5 else rng.choice([n for n in (0, 1, 4) if n <= Sq]) for Lb in lens]
        news = [min(n, max(Lb, 1)) for n, Lb in zip(news, lens)]  # n_b <= L_b, but L_b = 0 with n_b = 1 stays
        if all(n == 0 for n in news):
            news[0] = min(Sq, max(1, lens[0]))
        cap = max(lens) + rng.randint(0, 40)
        cache = Cache(B, Hkv, cap, D, ps, gen)
        cache.fill(lens, gen)
        layout = "bshd" if ci % 3 == 2 else "bhsd"
        tag = (f"D{D} Hq{Hq}/{Hkv} {'causal' if causal else 'full'} {'page' + str(ps) if ps else 'contig'} Sq{Sq} "
               f"{layout} L={lens} n={news}" + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
        group = f"decode d{D} {'paged' if ps else 'contig'}" + (" features" if feat != NO_FEATURES else "")
        for kps_mode in ("host", 64):
            try:
                dec = Decode(K, cache, lens, news, Hq, Sq, causal, gen, layout,
                             kps=None if kps_mode == "host" else 64, sms=sms, lse_null=(ci % 7 == 3), feat=feat)
                r = dec.check()
                res.add(group, f"{tag} kps={dec.kps} splits={dec.splits}", r)
            except Exception as ex:  # noqa
                res.error(group, tag, ex)


def runs_on(e, feat):
    """Whether a configuration's entry e takes a case with features feat: whether a host would run it there, i.e.
    manifest.select_variant picks e for e's variant with those features (the plain entry takes the cases without a
    window or softcap, where it serves their sinks)."""
    try:
        return manifest.select_variant(MANIFEST, e.kind, e.dtype, e.head_dim, e.causal == "1", e.layout, e.header_bytes,
                                       Features(*feat).names()).entry == e.entry
    except manifest.Refused:
        return False


def prefill_configs(hdr):
    """The cache-prefill configurations of one ABI as {layout: entry} (manifest.layout_configs). The checks run
    each under both causal flags, not only the flag the host selects it for: a configuration is correct for
    either."""
    return [c for c in manifest.layout_configs(MANIFEST, manifest.CACHE_PREFILL, hdr)
            if c["contiguous"].dtype == ARGS.dtype and c["contiguous"].head_dim in HEAD_DIMS_RUN]


def check_prefill(K, res, rng, gen):
    for cfg in prefill_configs(0):
        D = cfg["contiguous"].head_dim
        for (Hq, Hkv) in ((32, 8), (8, 8)):
            for causal in (False, True):
                for ps, feat in ((0, NO_FEATURES), (16, NO_FEATURES), (64, NO_FEATURES)) + tuple(
                        (ps_, FEATURES[(i + 2 * causal + ps_) % len(FEATURES)]) for i, ps_ in enumerate((0, 16, 0))):
                    e = cfg[layout_of(ps)]
                    if skip_features(D, feat) or not runs_on(e, feat):
                        continue
                    B = 5
                    news = [rng.choice([0, 1, 77, 129, 300, 513]) if rng.random() < 0.5 else rng.randint(2, 700)
                            for _ in range(B)]
                    if max(news) == 0:
                        news[0] = 33
                    ctx = [rng.choice([0, 0, 5, 200, 1031]) for _ in range(B)]
                    lens = [c + n for c, n in zip(ctx, news)]
                    cap = max(lens) + rng.randint(0, 40)
                    cache = Cache(B, Hkv, cap, D, ps, gen)
                    cache.fill(lens, gen)
                    tag = (f"Hq{Hq}/{Hkv} {'causal' if causal else 'full'} {'page' + str(ps) if ps else 'contig'} "
                           f"L={lens} n={news}" + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
                    try:
                        pf = Prefill(K, cache, lens, news, Hq, causal, gen, e, write_lse=(rng.random() < 0.85), feat=feat)
                        res.add(f"prefill {e.entry}", tag, pf.check())
                    except Exception as ex:  # noqa
                        res.error(f"prefill {e.entry}", tag, ex)


def check_append(K, res, rng, gen, sms):
    """kv_cache_append (dense or packed source) into a contiguous or paged cache, bit-exact against
    torch indexing; then decode (n_b <= 4) or varlen prefill over the appended cache."""
    for D in HEAD_DIMS_RUN:
        for ps in (0, 16, 64):
            for packed in (False, True):
                for then in ("decode", "prefill"):
                    B, Hkv, Hq = 5, 8, 32
                    ctx = ragged(rng, B, 900)
                    if then == "decode":
                        news = [rng.choice([0, 1, 4]) for _ in range(B)]
                    else:
                        news = [rng.choice([0, 1, 37, 200, 333]) for _ in range(B)]
                    if max(news) == 0:
                        news[0] = 1
                    lens = [c + n for c, n in zip(ctx, news)]
                    cap = max(lens) + rng.randint(0, 30)
                    cache = Cache(B, Hkv, cap, D, ps, gen)
                    cache.fill(ctx, gen)
                    max_new = max(news)
                    tag = f"D{D} {'page' + str(ps) if ps else 'contig'} {'packed' if packed else 'dense'} ctx={ctx} n={news}"
                    try:
                        if packed:
                            offs = [0]
                            for n in news:
                                offs.append(offs[-1] + n)
                            nk = randn(max(offs[-1], 1), Hkv, D, gen=gen)
                            nv = randn(max(offs[-1], 1), Hkv, D, gen=gen)
                            new_k = [nk[offs[b]:offs[b + 1]].transpose(0, 1) for b in range(B)]
                            new_v = [nv[offs[b]:offs[b + 1]].transpose(0, 1) for b in range(B)]
                            nstr = (0, D, Hkv * D)
                            noff = torch.tensor(offs, dtype=torch.int32, device=DEV)
                        else:
                            nk = randn(B, Hkv, max_new, D, gen=gen)
                            nv = randn(B, Hkv, max_new, D, gen=gen)
                            new_k = [nk[b, :, :news[b]] for b in range(B)]
                            new_v = [nv[b, :, :news[b]] for b in range(B)]
                            nstr = (Hkv * max_new * D, max_new * D, D)
                            noff = None
                        # expected cache: the same writes by torch indexing on a copy
                        exp_k, exp_v = cache.k.clone(), cache.v.clone()
                        saved = cache.k, cache.v
                        cache.k, cache.v = exp_k, exp_v
                        for b in range(B):
                            if news[b]:
                                cache.write(b, ctx[b], new_k[b], new_v[b])
                        cache.k, cache.v = saved
                        lens_t = torch.tensor(lens + news, dtype=torch.int32, device=DEV)
                        append = select(manifest.CACHE_APPEND, D, False, layout_of(ps))
                        rows_per_block = append.threads // (D // 8)  # one 16-byte chunk per thread
                        grid = (max(1, math.ceil(max_new / rows_per_block)), Hkv, B)
                        K.launch(append, grid,
                                 [cache.k, cache.v, nk, nv, lens_t, cache.bt_arg(), noff, I(B), I(Hkv), I(D), I(max_new),
                                  I(nstr[0]), I(nstr[1]), I(nstr[2]), I(cache.strides[0]), I(cache.strides[1]),
                                  I(cache.strides[2]), I(ps), I(cache.pps)])
                        if DEV == "cuda":
                            torch.cuda.synchronize()
                        same = torch.equal(cache.k.view(torch.int16), exp_k.view(torch.int16)) and \
                            torch.equal(cache.v.view(torch.int16), exp_v.view(torch.int16))
                        res.add("append", tag, dict(ok=same, why="" if same else "cache differs from torch indexing",
                                                    max_abs=0.0, rel=0.0, lse_err=0.0))
                        for b in range(B):
                            cache.truth[b] = (torch.cat([cache.truth[b][0], new_k[b]], 1),
                                              torch.cat([cache.truth[b][1], new_v[b]], 1))
                        causal = rng.random() < 0.7
                        if then == "decode":
                            dec = Decode(K, cache, lens, news, Hq, 4, causal, gen, sms=sms)
                            res.add("append+decode", tag, dec.check())
                        else:
                            pf = Prefill(K, cache, lens, news, Hq, causal, gen)
                            res.add("append+prefill", tag, pf.check())
                    except Exception as ex:  # noqa
                        res.error("append", tag, ex)


def check_merge(K, res, rng, gen):
    for D in HEAD_DIMS_RUN + (80,):
        for parts in (1, 2, 3, 5):
            rows = rng.randint(900, 1300)
            tag = f"D{D} parts{parts} rows{rows}"
            try:
                op = randn(parts, rows, D, gen=gen)
                lp = (torch.randn(parts, rows, device=DEV, generator=gen) * 3).float()
                lp[torch.rand(parts, rows, device=DEV, generator=gen) < 0.2] = NEG_INF  # empty parts
                lp[:, :7] = NEG_INF  # rows with every part empty
                if parts > 1:
                    lp[0, 7:12] = 80.0  # one dominant part
                o = torch.full((rows, D), NAN, device=DEV, dtype=TDT)
                lse = torch.full((rows,), NAN, device=DEV, dtype=torch.float32) if parts != 3 else None
                merge = select(manifest.MERGE_STATES, D, False)
                grid = (math.ceil(rows / (merge.threads // (D // 8))), 1, 1)  # one 16-byte chunk per thread
                K.launch(merge, grid, [op, lp, o, lse, I(parts), L(rows), I(D)])
                if DEV == "cuda":
                    torch.cuda.synchronize()
                l64 = lp.double()
                lt = torch.logsumexp(l64, 0)
                w = torch.nan_to_num(torch.exp(l64 - lt[None]), nan=0.0)
                oref = (w[..., None] * op.double()).sum(0)
                res.add("merge_states", tag, compare(o, lse, oref, lt))
            except Exception as ex:  # noqa
                res.error("merge_states", tag, ex)


# --------------------------------------------------------------------------- timing
def time_fn(fn, reps, warmup=5):
    if DEV != "cuda":
        t0 = time.time()
        fn()
        return (time.time() - t0) * 1e3, 0, 0
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        torch.cuda._sleep(100000)  # keep the queue ahead of the GPU: launch latency is not timed
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in evs)
    return ts[len(ts) // 2], ts[len(ts) // 10], ts[(len(ts) * 9) // 10]


def sdpa_flash(q, k, v, causal):
    import torch.nn.functional as F
    kw = dict(is_causal=causal)
    G = q.shape[1] // k.shape[1]
    if DEV != "cuda":
        return lambda: F.scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), **kw)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=G > 1, **kw)
    try:
        fn()
        torch.cuda.synchronize()
        return fn
    except Exception as ex:  # noqa
        log(f"  sdpa flash with enable_gqa failed ({str(ex)[:100]}); K/V expanded")
        k2, v2 = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)

        def fn2():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k2, v2, **kw)
        fn2()
        return fn2


def peak_bw(name):
    n = name.upper()
    if "H200" in n:
        return 4.8e12, "H200 datasheet 4.8 TB/s"
    if "H100" in n and "PCIE" in n:
        return 2.0e12, "H100 PCIe datasheet 2.0 TB/s"
    if "H100" in n:
        return 3.35e12, "H100 SXM datasheet 3.35 TB/s"
    if "L4" in n:
        return 0.3e12, "L4 datasheet 300 GB/s"
    return None, "unknown"


def timing(K, gen, sms, peak):
    rows = []
    B, Hq, Hkv, D = 8, 32, 8, 128
    cap = 32768 if DEV == "cuda" else 1024
    scale_l = 1 if DEV == "cuda" else 1 / 32
    reps = 100 if DEV == "cuda" else 1
    contig = Cache(B, Hkv, cap, D, 0, gen, fill=None)
    paged = Cache(B, Hkv, cap, D, 16, gen, fill=None)
    # the same logical content is not needed for timing; both hold random fp16
    q = randn(B, Hq, 1, D, gen=gen)
    rr = random.Random(7)
    ragged_lens = [rr.randint(int(2048 * scale_l), int(32768 * scale_l)) for _ in range(B)]
    mean_len = sum(ragged_lens) // B
    cases = [("uniform 4K", [int(4096 * scale_l)] * B), ("uniform 32K", [int(32768 * scale_l)] * B),
             ("ragged 2K..32K", ragged_lens), (f"uniform {mean_len} (= ragged bytes)", [mean_len] * B)]
    if DEV == "cuda":
        x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
        y = torch.empty_like(x)
        ms, _, _ = time_fn(lambda: y.copy_(x), 20)
        copy_bw = 2 * x.numel() / ms / 1e6
        del x, y
        log(f"device-to-device copy: {copy_bw:.0f} GB/s (read + write)")
    else:
        copy_bw = NAN
    for label, lens in cases:
        kv_bytes = sum(lens) * Hkv * D * 2 * 2
        for cache, kind in ((contig, "contig"), (paged, "paged16")):
            dec = Decode(K, cache, lens, [1] * B, Hq, 1, False, gen, q=q.clone(), sms=sms)
            go = dec.launcher()
            ms, lo, hi = time_fn(go, reps)
            row = dict(case=label, cache=kind, kps=dec.kps, splits=dec.splits, ms=ms, p10=lo, p90=hi,
                       gbs=kv_bytes / ms / 1e6, pct_peak=(kv_bytes / ms / 1e9 / peak * 1e12 * 100) if peak else NAN)
            if kind == "contig" and label in ("uniform 32K",):
                for mult in (0.5, 2):
                    g = split_policy.GRANULE
                    kps2 = max(g, int(dec.kps * mult) // g * g)
                    d2 = Decode(K, cache, lens, [1] * B, Hq, 1, False, gen, q=q.clone(), kps=kps2)
                    m2, _, _ = time_fn(d2.launcher(), reps)
                    row[f"kps{kps2}"] = m2
            if kind == "contig" and len(set(lens)) == 1:
                Lb = lens[0]
                fn = sdpa_flash(q, contig.k[:, :, :Lb], contig.v[:, :, :Lb], False)
                sm, _, _ = time_fn(fn, reps)
                row["sdpa_ms"] = sm
                row["sdpa_gbs"] = kv_bytes / sm / 1e6
            rows.append(row)
            log(f"  decode {label:32s} {kind:8s} kps {dec.kps:5d} splits {dec.splits:3d}: {ms:.4f} ms "
                f"{row['gbs']:.0f} GB/s ({row['pct_peak']:.1f}% of peak)"
                + (f"  SDPA FLASH {row['sdpa_ms']:.4f} ms {row['sdpa_gbs']:.0f} GB/s" if "sdpa_ms" in row else ""))
    del contig, paged
    # varlen prefill over a cache (uniform prompts, so SDPA FLASH on dense tensors is the same work)
    pre = []
    Bp, Hp, n = (4, 16, 2048) if DEV == "cuda" else (2, 4, 128)
    for causal in (False, True):
        for ps in (0, 16):
            cache = Cache(Bp, Hp, n, 128, ps, gen, fill=None)
            cache.truth = [None] * Bp
            pf = Prefill(K, cache, [n] * Bp, [n] * Bp, Hp, causal, gen)
            ms, _, _ = time_fn(lambda: K.launch(pf.entry, pf.grid, pf.args), 20 if DEV == "cuda" else 1)
            fl = 4.0 * Bp * Hp * n * n * 128 / (2 if causal else 1)
            row = dict(cfg=pf.entry.entry, causal=causal, ms=ms, tflops=fl / ms / 1e9)
            if ps == 0:
                qd = pf.q.view(Bp, n, Hp, 128).transpose(1, 2)
                kd = cache.k  # [B, H, n, D]
                fn = sdpa_flash(qd, kd, cache.v, causal)
                sm, _, _ = time_fn(fn, 20 if DEV == "cuda" else 1)
                row["sdpa_ms"] = sm
            pre.append(row)
            log(f"  prefill {pf.entry.entry:36s} {'causal' if causal else 'full':6s}: {ms:.4f} ms {row['tflops']:.0f} TFLOP/s"
                + (f"  SDPA FLASH (dense BSHD q) {row['sdpa_ms']:.4f} ms" if "sdpa_ms" in row else ""))
            del cache, pf
    return rows, pre, copy_bw


# --------------------------------------------------------------------------- TornadoVM twins (--tornado-twins)
def behind_header(t, hdr):
    """(header buffer, view): a copy of t whose data starts hdr bytes into a fresh buffer whose header bytes
    hold garbage (0xA5); the kernel gets the buffer (the header pointer), the check reads the view."""
    t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    buf = torch.full((hdr + max(nbytes, 16),), 0xA5, dtype=torch.uint8, device=DEV)
    view = buf[hdr:hdr + nbytes].view(t.dtype).view(t.shape)
    view.copy_(t)
    return buf, view


def check_tornado_decode(K, res, rng, gen, sms, hdr):
    """flash_cache_decode_fused[_paged]_d{D} twins: contiguous and paged, ragged lengths incl. 0, n_b in {0, 1}
    (and a few n_b = 4 plans), launched twice (the second launch sees the tickets the first left)."""
    cases = []
    for D in HEAD_DIMS_RUN:
        for ps in (0, 16, 1):
            for (Hq, Hkv, causal, Sq) in ((32, 8, False, 1), (32, 8, True, 4), (8, 8, True, 1)):
                cases.append((D, Hq, Hkv, causal, ps, Sq, 5, 900))
        for ps in (0, 16):
            cases.append((D, 32, 8, True, ps, 1, 3, 20000))
            # window, softcap, sinks
            for i, (causal, Sq) in enumerate(((False, 1), (True, 4), (True, 1))):
                cases.append((D, 32, 8, causal, ps, Sq, 5, 900, FEATURES[(i + ps + D // 64) % len(FEATURES)]))
            cases.append((D, 32, 8, True, ps, 1, 3, 20000, (1000, -1, 30.0, True)))
    for ci, c in enumerate(cases):
        (D, Hq, Hkv, causal, ps, Sq, B, hi), feat = c[:8], (c[8] if len(c) > 8 else NO_FEATURES)
        if skip_features(D, feat):
            continue
        lens = ragged(rng, B, hi)
        if hi > 5000:
            lens = [hi - rng.randint(0, 77), rng.randint(1, 300), 0][:B]
        news = [rng.choice([n for n in (0, 1, 1, 4) if n <= Sq]) for _ in lens]
        news = [min(n, max(Lb, 1)) for n, Lb in zip(news, lens)]
        news[ci % B] = 0  # every plan has an n_b = 0 sequence ...
        if all(n == 0 for n in news):
            news[(ci + 1) % B] = 1  # ... and a real one
        cap = max(lens) + rng.randint(0, 40)
        cache = Cache(B, Hkv, cap, D, ps, gen)
        cache.fill(lens, gen)
        twin = select(manifest.CACHE_FUSED, D, causal, layout_of(ps), hdr, feat)
        row_blocks = math.ceil(Hq // Hkv * Sq / twin.br)
        group = f"fused twin h{hdr} d{D} {'paged' if ps else 'contig'}"
        tag = (f"D{D} Hq{Hq}/{Hkv} {'causal' if causal else 'full'} {'page' + str(ps) if ps else 'contig'} Sq{Sq} "
               f"L={lens} n={news}" + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
        for kps_mode in ("host", 64):
            try:
                dec = Decode(K, cache, lens, news, Hq, Sq, causal, gen, kps=None if kps_mode == "host" else 64, sms=sms,
                             feat=feat)
                prm = dec.prm.clone()
                prm[25] = dec.kps  # P_KEYS_PER_SPLIT
                rows = B * Hq * Sq
                hq, qv = behind_header(dec.q, hdr)
                hk, _ = behind_header(cache.k, hdr)
                hv, _ = behind_header(cache.v, hdr)
                ho, ov = behind_header(torch.full_like(dec.o, NAN), hdr)
                hl, lv = behind_header(torch.full((B, Hq, Sq), NAN, device=DEV), hdr)
                hp, _ = behind_header(prm, hdr)
                hn, _ = behind_header(dec.lens_t, hdr)
                bt = cache.bt_arg() if ps else torch.full((4,), -1, dtype=torch.int32, device=DEV)
                hb, _ = behind_header(bt, hdr)
                hw, _ = behind_header(torch.full((dec.splits * rows * (D + 1),), NAN, device=DEV), hdr)
                nt = row_blocks * B * Hkv
                ht, tv = behind_header(torch.zeros(nt, dtype=torch.int32, device=DEV), hdr)
                args = [None, hq, hk, hv, ho, hl, hp, hn, hb, hw, ht]
                for launch in range(2):
                    ov.fill_(NAN)
                    lv.fill_(NAN)
                    K.launch(twin, (dec.splits, row_blocks, B * Hkv), args)
                    torch.cuda.synchronize()
                    dec.o.copy_(ov)
                    dec.lse.copy_(lv)
                    refs = reference([dec.qv[b, :, :n] for b, n in enumerate(news)], cache, lens, news, causal,
                                     dec.scale, Hq, dec.feat, dec.sinks)
                    oref = torch.zeros(B, Hq, Sq, D, device=DEV, dtype=torch.float64)
                    lref = torch.full((B, Hq, Sq), NEG_INF, device=DEV, dtype=torch.float64)
                    for b, (o_, l_) in enumerate(refs):
                        oref[b, :, :news[b]] = o_
                        lref[b, :, :news[b]] = l_
                    r = compare(dec.o, dec.lse, oref, lref)
                    if int(tv.abs().sum()) != 0:
                        r.update(ok=False, why=r["why"] + " tickets not reset")
                    if not (hq[:hdr] == 0xA5).all() or not (ho[:hdr] == 0xA5).all() or not (hw[:hdr] == 0xA5).all():
                        r.update(ok=False, why=r["why"] + " a header was written")
                    res.add(group, f"{tag} kps={dec.kps} splits={dec.splits} launch{launch}", r)
            except Exception as ex:  # noqa
                res.error(group, tag, ex)


def decode_reference(dec, cache, lens, news):
    """(oref [B, Hq, Sq, D], lref [B, Hq, Sq]) of a dense decode: absent query rows O = 0, lse = -inf."""
    refs = reference([dec.qv[b, :, :n] for b, n in enumerate(news)], cache, lens, news, dec.causal, dec.scale, dec.Hq,
                     dec.feat, dec.sinks)
    oref = torch.zeros(dec.B, dec.Hq, dec.Sq, dec.D, device=DEV, dtype=torch.float64)
    lref = torch.full((dec.B, dec.Hq, dec.Sq), NEG_INF, device=DEV, dtype=torch.float64)
    for b, (o_, l_) in enumerate(refs):
        oref[b, :, :news[b]] = o_
        lref[b, :, :news[b]] = l_
    return oref, lref


def derived_kps(lens, news, splits, bc, feat=NO_FEATURES):
    """The device's keys per split for params[25] = 0 (flash_cache_tornado.cu, ABI 6), from the longest span
    (from its span start to L_b) of the sequences with queries."""
    m = max([s for s, n in zip(spans(lens, news, feat), news) if n > 0], default=0)
    return split_policy.derived_keys_per_split(m, splits, bc)


def check_tornado_decode_derived(K, res, rng, gen, hdr):
    """The fused decode twins as an engine's TaskGraph runs them: params[25] = 0 and a grid fixed when the
    graph is built (split counts 1, 5 and the capacity's), the same header buffers for every step, only their
    contents rewritten; steps with ragged lengths, all lengths 0, long uniform lengths, idle slots (n_b = 0)
    longer than every active one, and a length at the capacity."""
    B, cap = 5, 2100
    for D in HEAD_DIMS_RUN:
        for ps in (0, 16, 1):
            for (Hq, Hkv, causal, Sq, feat) in ((32, 8, False, 1, NO_FEATURES), (32, 8, True, 4, NO_FEATURES),
                                                (8, 8, True, 1, NO_FEATURES), (32, 8, True, 1, (300, -1, 30.0, True)),
                                                (32, 8, False, 4, (64, 16, 50.0, True))):
                if ps == 1 and Sq == 4 or skip_features(D, feat):
                    continue
                twin = select(manifest.CACHE_FUSED, D, causal, layout_of(ps), hdr, feat)
                row_blocks = math.ceil(Hq // Hkv * Sq / twin.br)
                for S in sorted({1, 5, split_policy.max_splits(cap)}):
                    group = f"fused twin kps=0 h{hdr} d{D} {'paged' if ps else 'contig'}"
                    group += " features" if feat != NO_FEATURES else ""
                    steps = [
                        ("ragged", ragged(rng, B, cap)),
                        ("zero", [0] * B),
                        ("long", [cap - rng.randint(0, 40) for _ in range(B)]),
                        ("idle-long", [cap, rng.randint(1, 90), rng.randint(100, 700), cap - 1, 0]),
                        ("cap+short", [cap, 1, 0, 64, 65]),
                    ]
                    bufs = None
                    for si, (label, lens) in enumerate(steps):
                        if label == "zero":
                            news = [rng.choice([0, 1]) for _ in range(B)]
                            news[0] = 1  # queries that see no key
                        elif label == "idle-long":
                            news = [0, 1, min(Sq, 4), 0, 1]
                        else:
                            news = [rng.choice([n for n in (0, 1, 1, 4) if n <= Sq]) for _ in lens]
                            news = [min(n, max(Lb, 1)) for n, Lb in zip(news, lens)]
                            if all(n == 0 for n in news):
                                news[0] = 1
                        tag = (f"D{D} Hq{Hq}/{Hkv} {'causal' if causal else 'full'} "
                               f"{'page' + str(ps) if ps else 'contig'} Sq{Sq} splits={S} step{si} {label} "
                               f"L={lens} n={news}" + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
                        try:
                            cache = Cache(B, Hkv, cap, D, ps, gen)
                            cache.fill(lens, gen)
                            dec = Decode(K, cache, lens, news, Hq, Sq, causal, gen, kps=64, feat=feat)
                            prm = dec.prm.clone()
                            prm[25] = 0  # P_KEYS_PER_SPLIT: derive on the device
                            rows = B * Hq * Sq
                            bt = cache.bt_arg() if ps else torch.full((4,), -1, dtype=torch.int32, device=DEV)
                            step = torch.tensor(lens + news + [0] * (B + 1), dtype=torch.int32, device=DEV)
                            contents = dict(q=dec.q, k=cache.k, v=cache.v, p=prm, n=step, b=bt)
                            if bufs is None:  # the graph's arrays, allocated once
                                bufs = {key: behind_header(t, hdr) for key, t in contents.items()}
                                bufs["o"] = behind_header(torch.full_like(dec.o, NAN), hdr)
                                bufs["l"] = behind_header(torch.full((B, Hq, Sq), NAN, device=DEV), hdr)
                                bufs["w"] = behind_header(torch.full((S * rows * (D + 1),), NAN, device=DEV), hdr)
                                bufs["t"] = behind_header(torch.zeros(row_blocks * B * Hkv, dtype=torch.int32,
                                                                      device=DEV), hdr)
                            else:  # a step: new contents in the same buffers
                                for key, t in contents.items():
                                    bufs[key][1].copy_(t)
                            bufs["o"][1].fill_(NAN)
                            bufs["l"][1].fill_(NAN)
                            args = [None] + [bufs[key][0] for key in ("q", "k", "v", "o", "l", "p", "n", "b", "w", "t")]
                            K.launch(twin, (S, row_blocks, B * Hkv), args)
                            torch.cuda.synchronize()
                            dec.o.copy_(bufs["o"][1])
                            dec.lse.copy_(bufs["l"][1])
                            oref, lref = decode_reference(dec, cache, lens, news)
                            r = compare(dec.ov, dec.lse, oref, lref)
                            if int(bufs["t"][1].abs().sum()) != 0:
                                r.update(ok=False, why=r["why"] + " tickets not reset")
                            if not all(bool((bufs[key][0][:hdr] == 0xA5).all()) for key in ("o", "l", "w", "t")):
                                r.update(ok=False, why=r["why"] + " a header was written")
                            res.add(group, f"{tag} kps={derived_kps(lens, news, S, twin.bc, feat)}", r)
                        except Exception as ex:  # noqa
                            res.error(group, tag, ex)


def check_tornado_prefill(K, res, rng, gen, hdr):
    """The cache-prefill twins (prefill_configs): packed prompts (ragged, some 0, a few past one query tile), lens
    and offsets from one step array [3*B + 1], causal and not, contiguous and paged, D 64/128, a grid fixed for
    the largest prompt planned (more tiles than any prompt needs), launched twice."""
    for cfg in prefill_configs(hdr):
        D = cfg["contiguous"].head_dim
        for causal in (False, True):
            for ps in (0, 16, 64):
                twin = cfg[layout_of(ps)]
                for (Hq, Hkv), feat in (((32, 8), NO_FEATURES), ((8, 8), NO_FEATURES),
                                        ((8, 4), FEATURES[(D // 64 + 2 * causal + ps) % len(FEATURES)]),
                                        ((8, 2), (200, -1, 50.0, True))):
                    if Hq == 8 and Hkv == 8 and ps == 64 or skip_features(D, feat) or not runs_on(twin, feat):
                        continue
                    B = 5
                    news = [rng.choice([0, 1, 77, 129, 300]) if rng.random() < 0.5 else rng.randint(2, 520)
                            for _ in range(B)]
                    if max(news) == 0:
                        news[0] = 33
                    ctx = [rng.choice([0, 0, 5, 200, 1031]) for _ in range(B)]
                    lens = [c + n for c, n in zip(ctx, news)]
                    cap = max(lens) + rng.randint(0, 40)
                    wlse = rng.random() < 0.85
                    group = f"prefill twin {twin.entry}"
                    tag = (f"Hq{Hq}/{Hkv} {'causal' if causal else 'full'} {'page' + str(ps) if ps else 'contig'} "
                           f"lse={int(wlse)} L={lens} n={news}" + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
                    try:
                        cache = Cache(B, Hkv, cap, D, ps, gen)
                        cache.fill(lens, gen)
                        pf = Prefill(K, cache, lens, news, Hq, causal, gen, twin, write_lse=wlse, feat=feat)  # its inputs
                        total = pf.offs[-1]
                        max_q = 640  # the engine's planned largest prompt: grid.x fixed by it, not by this step
                        grid = (math.ceil(max_q / twin.br), B * Hq, 1)
                        step = torch.tensor(lens + news + pf.offs, dtype=torch.int32, device=DEV)
                        bt = cache.bt_arg() if ps else torch.full((4,), -1, dtype=torch.int32, device=DEV)
                        hq, _ = behind_header(pf.q, hdr)
                        hk, _ = behind_header(cache.k, hdr)
                        hv, _ = behind_header(cache.v, hdr)
                        ho, ov = behind_header(torch.full_like(pf.o, NAN), hdr)
                        hl, lv = behind_header(torch.full((Hq, pf.sq_plan), NAN, device=DEV), hdr)
                        hp, _ = behind_header(pf.prm, hdr)
                        hs, _ = behind_header(step, hdr)
                        hb, _ = behind_header(bt, hdr)
                        refs = reference([pf.q[pf.offs[b]:pf.offs[b + 1]].transpose(0, 1) for b in range(B)], cache,
                                         lens, news, causal, pf.scale, Hq, pf.feat, pf.sinks)
                        oref = torch.cat([o_.transpose(0, 1) for o_, _ in refs], 0)
                        lref = torch.cat([l_ for _, l_ in refs], 1)
                        for launch in range(2):
                            ov.fill_(NAN)
                            lv.fill_(NAN)
                            K.launch(twin, grid, [None, hq, hk, hv, ho, hl, hp, hs, hb])
                            torch.cuda.synchronize()
                            r = compare(ov[:total], lv[:, :total] if wlse else None, oref, lref)
                            if wlse and not torch.isnan(lv[:, total:]).all():
                                r.update(ok=False, why=r["why"] + " lse written past the packed rows")
                            if not wlse and not torch.isnan(lv).all():
                                r.update(ok=False, why=r["why"] + " lse written with write_lse = 0")
                            if not (ho[:hdr] == 0xA5).all() or not (hl[:hdr] == 0xA5).all():
                                r.update(ok=False, why=r["why"] + " a header was written")
                            res.add(group, f"{tag} launch{launch}", r)
                    except Exception as ex:  # noqa
                        res.error(group, tag, ex)


def _write_rows(cache, kbuf, vbuf, b, start, kk, vv):
    """cache.write into other buffers of the cache's layout (the kernel's views)."""
    saved = cache.k, cache.v
    cache.k, cache.v = kbuf, vbuf
    try:
        cache.write(b, start, kk, vv)
    finally:
        cache.k, cache.v = saved


def stage_layout(B, Hq, Hkv, Sq, D):
    """The staged twins' one input array (ABI item 9), in halves: the step words [3B + 1] (int32) first, then
    q [B, Hq, Sq, D], new_k and new_v [B, Hkv, Sq, D], each starting on a 16-byte boundary.
    Returns (q offset, new_k offset, new_v offset, total halves)."""
    q0 = -(-2 * (3 * B + 1) // 8) * 8
    k0 = q0 + B * Hq * Sq * D
    v0 = k0 + B * Hkv * Sq * D
    return q0, k0, v0, v0 + B * Hkv * Sq * D


def check_tornado_append_decode(K, res, rng, gen, hdr, staged=False):
    """flash_cache_append_decode_fused[_paged]_d{64,128} twins (staged: flash_cache_staged_decode_fused*, the
    step array, q, new_k and new_v in one stage array at the offsets append_params[13..15], with NaN in the
    padding) as an engine's decode loop runs them: one set of
    header buffers for the whole loop (q, K/V cache, o, lse, params, the KvCache step array [3B + 1], block
    table, workspace, tickets, new_k/new_v dense [B, Hkv, Sq, D], append_params), a grid fixed when the graph
    is built (1, 5 or 9 splits with params[25] = 0, and one loop with params[25] = 64 given), and steps in
    which each slot appends n_b in {0, 1, 3} (<= Sq) rows through the fused kernel only: ragged, idle slots,
    G*Sq > 16 (several row-block CTAs write the same rows), a slot re-seated by the host (a prefill outside the
    loop) so that its new rows straddle a split boundary.  Each step: O/lse against the float64 reference over
    the model's cache, the kernel's whole K/V buffers bit-equal to the model's (every appended row where
    torch indexing puts it, nothing else written), tickets back to 0, headers intact.  new_k/new_v rows past
    n_b hold NaN (must not be read); words of append_params other than 4..6 are poisoned in every other
    loop (only the new-row strides are read)."""
    B, cap, steps = 5, 600, 6
    loop = 0
    kind = manifest.CACHE_STAGED_FUSED if staged else manifest.CACHE_APPEND_FUSED
    for D in HEAD_DIMS_RUN:
        for ps in (0, 16, 1):
            for (Hq, Hkv, causal, Sq, feat) in ((32, 8, False, 1, NO_FEATURES), (32, 4, True, 4, NO_FEATURES),
                                                (16, 2, False, 3, NO_FEATURES), (8, 8, True, 1, NO_FEATURES),
                                                (32, 8, True, 1, (100, -1, 30.0, True)),
                                                (16, 2, False, 3, (64, 16, 50.0, True))):
                if skip_features(D, feat):
                    continue
                twin = select(kind, D, causal, layout_of(ps), hdr, feat)
                bc = twin.bc
                G = Hq // Hkv
                row_blocks = math.ceil(G * Sq / twin.br)
                for S, kps_given in ((1, 0), (5, 0), (9, 0), (math.ceil(cap / 64), 64)):
                    loop += 1
                    group = f"{'staged' if staged else 'append+decode'} twin h{hdr} d{D} {'paged' if ps else 'contig'}"
                    base = (f"D{D} Hq{Hq}/{Hkv} {'causal' if causal else 'full'} "
                            f"{'page' + str(ps) if ps else 'contig'} Sq{Sq} splits={S} kps={kps_given or 'derived'}"
                            + (f" {feature_tag(feat)}" if feat != NO_FEATURES else ""))
                    try:
                        cache = Cache(B, Hkv, cap, D, ps, gen)  # the model (torch indexing); NaN past every length
                        ctx = [rng.randint(0, 300) for _ in range(B)]
                        ctx[loop % B] = 0  # an empty slot
                        cache.fill(ctx, gen)
                        bt = cache.bt_arg() if ps else torch.full((4,), -1, dtype=torch.int32, device=DEV)
                        ap_ = [0] * 16
                        ap_[0:4] = [B, Hkv, D, Sq]
                        ap_[4:7] = [Hkv * Sq * D, Sq * D, D]
                        ap_[7:10] = list(cache.strides)
                        ap_[10:13] = [ps, cache.pps, 0]
                        q0, k0, v0, halves = stage_layout(B, Hq, Hkv, Sq, D)
                        if staged:
                            ap_[13:16] = [q0, k0, v0]
                        read = range(4, 7) if not staged else [4, 5, 6, 13, 14, 15]
                        if loop % 2 == 0:
                            ap_ = [w if i in read else (1 << 30) + 7 for i, w in enumerate(ap_)]
                        rows = B * Hq * Sq
                        bufs = dict(
                            q=behind_header(torch.full((B, Hq, Sq, D), NAN, device=DEV, dtype=TDT), hdr),
                            k=behind_header(cache.k, hdr), v=behind_header(cache.v, hdr),
                            o=behind_header(torch.full((B, Hq, Sq, D), NAN, device=DEV, dtype=TDT), hdr),
                            l=behind_header(torch.full((B, Hq, Sq), NAN, device=DEV), hdr),
                            p=behind_header(torch.zeros(32 + (Hq if feat[3] else 0), dtype=torch.int32, device=DEV), hdr),
                            n=behind_header(torch.zeros(3 * B + 1, dtype=torch.int32, device=DEV), hdr),
                            b=behind_header(bt, hdr),
                            w=behind_header(torch.full((S * rows * (D + 1),), NAN, device=DEV), hdr),
                            t=behind_header(torch.zeros(row_blocks * B * Hkv, dtype=torch.int32, device=DEV), hdr),
                            nk=behind_header(torch.full((B, Hkv, Sq, D), NAN, device=DEV, dtype=TDT), hdr),
                            nv=behind_header(torch.full((B, Hkv, Sq, D), NAN, device=DEV, dtype=TDT), hdr),
                            ap=behind_header(torch.tensor(ap_, dtype=torch.int32, device=DEV), hdr))
                        if staged:
                            sbuf, sview = behind_header(torch.full((halves,), NAN, device=DEV, dtype=TDT), hdr)
                            bufs.update(
                                s=(sbuf, sview), n=(sbuf, sview[:2 * (3 * B + 1)].view(torch.int32)),
                                q=(sbuf, sview[q0:k0].view(B, Hq, Sq, D)),
                                nk=(sbuf, sview[k0:v0].view(B, Hkv, Sq, D)), nv=(sbuf, sview[v0:].view(B, Hkv, Sq, D)))
                            order = ("s", "k", "v", "o", "l", "p", "b", "w", "t", "ap")
                        else:
                            order = ("q", "k", "v", "o", "l", "p", "n", "b", "w", "t", "nk", "nv", "ap")
                        args = [None] + [bufs[key][0] for key in order]
                        prev = list(ctx)
                    except Exception as ex:  # noqa
                        res.error(group, base, ex)
                        continue
                    for si in range(steps):
                        tag = f"{base} step{si}"
                        try:
                            news = [rng.choice([n for n in (0, 1, 3) if n <= Sq]) for _ in range(B)]
                            if si % 3 == 2:
                                news[rng.randrange(B)] = 0  # an idle slot ...
                            if all(n == 0 for n in news):
                                news[si % B] = min(Sq, 3)  # ... but a real query somewhere
                            lens = [c + n for c, n in zip(prev, news)]
                            kps = kps_given or derived_kps(lens, news, S, bc, feat)
                            m = max([Lb for Lb, n in zip(lens, news) if n > 0], default=0)
                            # The host re-seats a slot (its prompt written outside the loop) so that its new
                            # rows straddle a split boundary.
                            cand = [b for b in range(B) if news[b] >= 2 and lens[b] < m]
                            if S > 1 and kps > 0 and cand and m >= kps + 3 and si % 2 == 1:
                                b = rng.choice(cand)
                                kb = rng.randint(1, (m - 3) // kps) * kps
                                c_new = kb - rng.randint(1, news[b] - 1)
                                kk, vv = randn(Hkv, c_new, D, gen=gen), randn(Hkv, c_new, D, gen=gen)
                                cache.write(b, 0, kk, vv)
                                _write_rows(cache, bufs["k"][1], bufs["v"][1], b, 0, kk, vv)
                                cache.truth[b] = (kk, vv)
                                prev[b] = c_new
                                lens = [c + n for c, n in zip(prev, news)]
                                kps = kps_given or derived_kps(lens, news, S, bc, feat)
                            assert max(lens) <= cap, "capacity"
                            straddle = sum(1 for b in range(B) if news[b] > 0 and kps > 0 and
                                           (lens[b] - news[b]) // kps != (lens[b] - 1) // kps)
                            tag += f" L={lens} n={news} kps={kps} straddling={straddle}"
                            # this step's new rows (NaN past n_b) and the model's append
                            nk = torch.full((B, Hkv, Sq, D), NAN, device=DEV, dtype=TDT)
                            nv = torch.full((B, Hkv, Sq, D), NAN, device=DEV, dtype=TDT)
                            for b in range(B):
                                n = news[b]
                                if n:
                                    nk[b, :, :n] = randn(Hkv, n, D, gen=gen)
                                    nv[b, :, :n] = randn(Hkv, n, D, gen=gen)
                                    cache.write(b, prev[b], nk[b, :, :n], nv[b, :, :n])
                                    tk, tv_ = cache.truth[b]
                                    cache.truth[b] = (torch.cat([tk[:, :prev[b]], nk[b, :, :n]], 1),
                                                      torch.cat([tv_[:, :prev[b]], nv[b, :, :n]], 1))
                            dec = Decode(K, cache, lens, news, Hq, Sq, causal, gen, kps=64, feat=feat)
                            prm = dec.prm.clone()
                            prm[25] = kps_given  # P_KEYS_PER_SPLIT (0: derived on the device)
                            step = torch.tensor(lens + news + [0] * (B + 1), dtype=torch.int32, device=DEV)
                            for key, t in (("q", dec.q), ("p", prm), ("n", step), ("nk", nk), ("nv", nv)):
                                bufs[key][1].copy_(t)
                            bufs["o"][1].fill_(NAN)
                            bufs["l"][1].fill_(NAN)
                            K.launch(twin, (S, row_blocks, B * Hkv), args)
                            torch.cuda.synchronize()
                            prev = lens
                            dec.o.copy_(bufs["o"][1])
                            dec.lse.copy_(bufs["l"][1])
                            oref, lref = decode_reference(dec, cache, lens, news)
                            r = compare(dec.ov, dec.lse, oref, lref)
                            for key, model in (("k", cache.k), ("v", cache.v)):
                                got = bufs[key][1].view(torch.int16)
                                want = model.view(torch.int16)
                                if not torch.equal(got, want):
                                    r.update(ok=False, why=r["why"] + f" {key} cache differs from the model in "
                                                                      f"{int((got != want).sum())} halves")
                            if int(bufs["t"][1].abs().sum()) != 0:
                                r.update(ok=False, why=r["why"] + " tickets not reset")
                            if not all(bool((bufs[key][0][:hdr] == 0xA5).all()) for key in ("k", "v", "o", "l", "w", "t", "q")):
                                r.update(ok=False, why=r["why"] + " a header was written")
                            res.add(group, tag, r)
                            APPEND_DECODE_STATS["steps"] += 1
                            APPEND_DECODE_STATS["straddling"] += straddle
                            APPEND_DECODE_STATS["multi_block_rows"] += sum(news) if row_blocks > 1 else 0
                        except Exception as ex:  # noqa
                            res.error(group, tag, ex)
                            break  # the buffers no longer follow the model


APPEND_DECODE_STATS = dict(steps=0, straddling=0, multi_block_rows=0)


def check_tornado_twins(K, res, rng, gen, sms):
    for hdr in (16, 128):
        check_tornado_decode(K, res, rng, gen, sms, hdr)
        check_tornado_decode_derived(K, res, rng, gen, hdr)
        check_tornado_append_decode(K, res, rng, gen, hdr)
        check_tornado_append_decode(K, res, rng, gen, hdr, staged=True)
        check_tornado_prefill(K, res, rng, gen, hdr)
    log(f"append+decode twins: {APPEND_DECODE_STATS['steps']} steps, {APPEND_DECODE_STATS['straddling']} slot-steps "
        f"whose new rows straddle a split boundary, {APPEND_DECODE_STATS['multi_block_rows']} new rows written by "
        f"several row-block CTAs")


# --------------------------------------------------------------------------- main
def main():
    torch.manual_seed(ARGS.seed)
    rng = random.Random(ARGS.seed)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(ARGS.seed)
    if DEV == "cuda":
        props = torch.cuda.get_device_properties(0)
        gpu, sms = props.name, props.multi_processor_count
    else:
        gpu, sms = "emulated (CPU)", 132
    peak, peak_src = peak_bw(gpu)
    meta = dict(gpu=gpu, sms=sms, ptx=os.path.relpath(PTX), torch=torch.__version__, seed=ARGS.seed, date=time.strftime("%Y-%m-%d %H:%M"),
                cmd="python3 ptx-overrides/harness/cache_check.py " + " ".join(sys.argv[1:]))
    log(json.dumps(meta))
    K = Kernels()
    for n, e in K.entries.items():
        log(f"  {n:40s} regs {e['regs']:3d} smem {e['smem']:6d} local {e['local']} threads {e['threads']} "
            f"CTAs/SM {e['occ']}")
    res = Results()
    t0 = time.time()
    checks = (check_tornado_twins,) if ARGS.tornado_twins else (check_decode, check_prefill, check_append, check_merge)
    for fn in () if ARGS.no_check else checks:
        t1 = time.time()
        try:
            if fn in (check_decode, check_append, check_tornado_twins):
                fn(K, res, rng, gen, sms)
            else:
                fn(K, res, rng, gen)
        except Exception as ex:  # noqa
            res.error(fn.__name__, "-", ex)
        log(f"{fn.__name__}: {time.time() - t1:.0f}s")
    log(f"correctness: {time.time() - t0:.0f}s")
    dec, pre, copy_bw = [], [], NAN
    if not ARGS.no_time and not ARGS.tornado_twins:
        try:
            dec, pre, copy_bw = timing(K, gen, sms, peak)
        except Exception as ex:  # noqa
            log(f"timing failed: {ex}")
            traceback.print_exc()
    json.dump(dict(meta=meta, entries={n: {k: v for k, v in e.items() if k != "f"} for n, e in K.entries.items()},
                   correctness=res.groups, decode=dec, prefill=pre, copy_gbs=copy_bw,
                   feature_cases_skipped=FEATURE_SKIPS[0]),
              open(os.path.join(OUT, f"cache_check_{os.path.basename(PTX)}.json"), "w"), indent=1, default=str)

    print("\n==== summary ====")
    print(f"{os.path.relpath(PTX)} on {gpu}, {sms} SMs; peak {peak_src}; device copy {copy_bw:.0f} GB/s (read + write); seed {ARGS.seed}")
    print("\n| group | passed | worst max abs | worst rel L2 | worst lse err |\n|---|---|---|---|---|")
    ok = True
    for gname, g in res.groups.items():
        ok &= g["passed"] == g["n"]
        print(f"| {gname} | {g['passed']}/{g['n']} | {g['max_abs']:.2e} | {g['max_rel']:.2e} | {g['max_lse']:.2e} |")
    for gname, g in res.groups.items():
        for f in g["fails"][:3]:
            print(f"  FAIL {gname}: {f}")
    if dec:
        print("\n| decode B8 Hq32 Hkv8 D128 Sq1 | cache | keys/split | splits | ms | GB/s K+V | % of peak | SDPA FLASH ms | vs SDPA |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in dec:
            vs = f"{r['sdpa_ms'] / r['ms']:.2f}x" if "sdpa_ms" in r else "-"
            sd = f"{r['sdpa_ms']:.4f}" if "sdpa_ms" in r else "-"
            print(f"| {r['case']} | {r['cache']} | {r['kps']} | {r['splits']} | {r['ms']:.4f} | {r['gbs']:.0f} | "
                  f"{r['pct_peak']:.1f} | {sd} | {vs} |")
        extra = [(r["case"], k, v) for r in dec for k, v in r.items() if k.startswith("kps") and k != "kps"]
        if extra:
            print("keys/split sensitivity (contig): " + ", ".join(f"{c} {k}: {v:.4f} ms" for c, k, v in extra))
        by = {(r["case"], r["cache"]): r for r in dec}
        for c in {r["case"] for r in dec}:
            if (c, "contig") in by and (c, "paged16") in by:
                print(f"paged16 / contig time, {c}: {by[(c, 'paged16')]['ms'] / by[(c, 'contig')]['ms']:.3f}")
    if pre:
        print("\n| varlen prefill (4 x 2048, Hq=Hkv=16, D128) | causal | ms | TFLOP/s | SDPA FLASH ms | vs SDPA |\n|---|---|---|---|---|---|")
        for r in pre:
            vs = f"{r['sdpa_ms'] / r['ms']:.2f}x" if "sdpa_ms" in r else "-"
            print(f"| {r['cfg']} | {r['causal']} | {r['ms']:.4f} | {r['tflops']:.0f} | "
                  f"{r.get('sdpa_ms', float('nan')):.4f} | {vs} |")
    if FEATURE_SKIPS[0]:
        print(f"\nfeature cases skipped: {FEATURE_SKIPS[0]} (the manifest lists no window+softcap+sinks for {MODULE}: "
              f"regenerate the table to check them)")
    print(f"\ncache_check: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
