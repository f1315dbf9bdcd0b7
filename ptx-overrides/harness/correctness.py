"""The correctness check: every loaded entry against the float64 reference on fresh inputs, with
its output poisoned before each run. Returns {entry: runs, passed, worst errors, first failures}.

A problem with score features (window, softcap, sinks) runs on the entries whose manifest row lists
them (the features column); the others skip it, and the number of such skips is logged."""
import math
import random
import time

import torch

import manifest
from cases import num_splits_for, suite
from problem import Problem, compare
from report import log


def correctness(runner, kernels, quick, seed, cases=None):
    """Checks `kernels` on `cases` (default: the suite); returns (results, number of problems)."""
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    fwd = [e for e in kernels if e.kind == manifest.PREFILL]
    splits_e = [e for e in kernels if e.kind == manifest.SPLIT]
    comb = {(e.D, e.header, e.m.dtype): e for e in kernels if e.kind == manifest.COMBINE}
    fused_e = [e for e in kernels if e.kind == manifest.FUSED]
    results = {}  # entry -> runs, passed, worst errors, first failures

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
    skipped = {}  # entry -> feature problems skipped (its manifest row lacks a feature)
    for ci, c in enumerate(cases):
        B, Hq, Hkv, Sq, Skv, D, causal, tag, dtype, feat = c.B, c.Hq, c.Hkv, c.Sq, c.Skv, c.D, c.causal, c.tag, c.dtype, c.feat
        need = feat.names()

        def serves(e):
            if e.D != D or e.m.dtype != dtype:
                return False
            if not need <= e.m.features:
                skipped[e.name] = skipped.get(e.name, 0) + 1
                return False
            return True

        if not any(e.D == D and e.m.dtype == dtype and need <= e.m.features for e in kernels):
            for e in kernels:
                if e.D == D and e.m.dtype == dtype:
                    serves(e)  # counts the skip
            continue  # no loaded entry of this head dim and type (e.g. --dtype), or none with these features
        pb = Problem(B, Hq, Hkv, Sq, Skv, D, causal, c.layout, lse=c.want_lse, gen=gen, dtype=dtype, feat=feat)
        if tag == "random" and rng.random() < 0.2:
            pb.scale = rng.uniform(0.01, 0.5)
        oref, lref = pb.reference()
        case = c.describe()
        big = Sq * Skv * B * Hq > 3e8
        for e in fwd:
            if not serves(e):
                continue
            if e.ablation and tag not in ("seed", "seed-d128", "sq>skv odd", "gqa", "2049"):
                continue
            if e.tornado and tag in ("random",) and rng.random() < 0.7:
                continue
            if big and (e.tornado or e.ablation):
                continue
            o, lse = pb.new_out()
            runner.run_fwd(e, pb, o, lse)
            torch.cuda.synchronize()
            record(e.name, case, compare(pb, o, lse, oref, lref))
        if Sq <= 16:  # the decode kernels' range (LaunchTable.DECODE_MAX_QUERIES)
            G = Hq // Hkv
            for e in splits_e:
                if not serves(e):
                    continue
                ec = comb[(D, e.header, dtype)]
                if not need <= ec.m.features:
                    skipped[ec.name] = skipped.get(ec.name, 0) + 1
                    continue
                # The hosts size the split count from the window's visible span.
                ns = num_splits_for(B, Hkv, G, Sq, pb.visible_span(), e.Br, runner.num_sms)
                for splits in sorted({ns, min(ns * 3 + 1, 200)}):  # also exercise empty splits
                    o, lse = pb.new_out()
                    go, keep = runner.decode_launcher(e, ec, pb, o, lse, splits)
                    go()
                    torch.cuda.synchronize()
                    r = compare(pb, o, lse, oref, lref)
                    record(e.name, case + f" splits{splits}", r)
                    record(ec.name, case + f" splits{splits}", r)
            for e in fused_e:
                if not serves(e):
                    continue
                ns = num_splits_for(B, Hkv, G, Sq, pb.visible_span(), e.Br, runner.num_sms)
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
    if skipped:
        log(f"  feature problems skipped by entries whose manifest row lacks the features: "
            f"{sum(skipped.values())} runs over {len(skipped)} entries (e.g. {next(iter(skipped))})")
    return results, len(cases)
