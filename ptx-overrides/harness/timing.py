"""Timing with CUDA events: device-resident kernels beside PyTorch SDPA (FLASH, CUDNN) in the same
run, the decode pair, the ablation variants and the tuning candidates."""
import random

import torch

import manifest
from cases import ABLATION_SHAPE, DECODE_TIMING_KV, TIMING_SHAPES, TUNING_SHAPES, num_splits_for
from problem import Problem
from report import fmt_timing_row, log


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


def timing(runner, kernels, quick):
    """Prefill beside SDPA FLASH/CUDNN on TIMING_SHAPES in each element type with loaded entries, then the fp16
    decode pair at three split counts."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    fwd = [e for e in kernels if e.kind == manifest.PREFILL and not e.tornado and not e.ablation]
    rows = []
    reps = 10 if quick else 100
    for (B, H, S, D), dtype, causal in ((s, t, c) for s in TIMING_SHAPES for t in manifest.DTYPES for c in (False, True)):
        if not any(e.D == D and e.m.dtype == dtype for e in fwd):
            continue
        pb = Problem(B, H, H, S, S, D, causal, "bhsd", lse=True, gen=gen, dtype=dtype)
        fl = pb.flops()
        res = dict(shape=f"({B},{H},{S},{D}) {dtype}", causal=causal, flops=fl, kernels={})
        for be in ("flash", "cudnn"):
            fn = sdpa_fn(pb, be)
            if fn:
                m, lo, hi = time_fn(fn, reps)
                res["kernels"]["sdpa_" + be] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9)
        o, lse = pb.new_out()
        for e in fwd:
            if e.D != D or e.m.dtype != dtype:
                continue
            prm = pb.params(o)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
            grid = runner.prefill_grid(e, pb)
            m, lo, hi = time_fn(lambda: runner.launch(e, grid, args), reps)
            res["kernels"][e.name] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9)
        rows.append(res)
        log(fmt_timing_row(res))
        del pb
    # decode
    dec = []
    splits_e = [e for e in kernels if e.kind == manifest.SPLIT and e.D == 128 and e.m.dtype == "fp16"]
    comb = {e.D: e for e in kernels if e.kind == manifest.COMBINE and e.m.dtype == "fp16"}
    for Skv in DECODE_TIMING_KV:
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
            ns = num_splits_for(8, 8, 4, 1, Skv, e.Br, runner.num_sms)
            for waves, splits in (("auto", ns), ("x0.5", max(1, ns // 2)), ("x2", ns * 2)):
                go, keep = runner.decode_launcher(e, comb[128], pb, o, lse, splits)
                m, lo, hi = time_fn(go, reps)
                res["kernels"][f"{e.name}[{waves}:{splits}]"] = dict(ms=m, lo=lo, hi=hi, tflops=fl / m / 1e9,
                                                                      gbs=kv_bytes / m / 1e6)
        dec.append(res)
        log(fmt_timing_row(res))
        del pb
    return rows, dec


def ablation_timing(runner, kernels, quick):
    """Each ablation variant beside the shipped entry with its tile (ABLATION_SHAPE), causal and not."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99)
    abl = [e for e in kernels if e.kind == manifest.PREFILL and e.ablation and not e.tornado]
    entries = [k.m for k in runner.by_name.values()]
    base_of = {e.name: manifest.ablation_base(e.m, entries).entry for e in abl}
    bases = sorted(set(base_of.values()))
    reps = 10 if quick else 100
    out = []
    for base in bases:
        be = runner.by_name[base]
        shape = ABLATION_SHAPE + (be.D,)
        for causal in (False, True):
            pb = Problem(*shape[:2], shape[1], shape[2], shape[2], shape[3], causal, "bhsd", lse=False, gen=gen)
            o, lse = pb.new_out()
            prm = pb.params(o)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]
            t = {}
            for e in [be] + [x for x in abl if base_of[x.name] == base]:
                if e.ablation == "no_causal_skip" and not causal:
                    continue
                grid = runner.prefill_grid(e, pb)
                m, lo, hi = time_fn(lambda: runner.launch(e, grid, args), reps)
                t[e.ablation or "full"] = dict(ms=m, tflops=pb.flops() / m / 1e9)
            out.append(dict(base=base, shape=str(shape), causal=causal, t=t))
            log(f"  ablation {base} causal={causal}: " + ", ".join(f"{k} {v['ms']:.3f}ms" for k, v in t.items()))
    return out


def tuning_timing(runner, cands, rounds, reps):
    """Each candidate beside SDPA FLASH/CUDNN on TUNING_SHAPES at its head dim.  Kernels are timed round-robin
    (`rounds` rounds of `reps` launches) so that clock drift hits all alike; ms = median of the
    round medians, lo/hi = their range."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    rows = []
    for (B, H, S, D) in [(B, H, S, D) for D in sorted({e.D for e in cands}) for (B, H, S) in TUNING_SHAPES]:
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
            for e in (e for e in cands if e.D == D):
                grid = runner.prefill_grid(e, pb)
                fns[e.name] = (lambda e=e, grid=grid: runner.launch(e, grid, args))
            meds = {k: [] for k in fns}
            for _ in range(rounds):
                for k, fn in fns.items():
                    meds[k].append(time_fn(fn, reps)[0])
            res = dict(shape=f"({B},{H},{S},{D})", D=D, causal=causal, flops=fl, kernels={})
            for k, ms in meds.items():
                m = sorted(ms)[len(ms) // 2]
                res["kernels"][k] = dict(ms=m, lo=min(ms), hi=max(ms), tflops=fl / m / 1e9)
            rows.append(res)
            log(fmt_timing_row(res))
            del pb, o, lse
    return rows
