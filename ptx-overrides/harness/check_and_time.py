#!/usr/bin/env python3
"""Check and time the hand-tuned FlashAttention PTX on a GPU.

Reads the launch table ptx/manifest.tsv (manifest.py), loads the PTX through the CUDA driver API
(cuda_driver.py: ctypes on libcuda.so.1, the calls the Java FFM host makes), then
  1. checks every shipped and ablation entry against a float64 PyTorch reference of the project's
     semantics (correctness.py, on the problems of cases.py: fresh N(0,1) fp16 or bf16 inputs, output
     poisoned with NaN before every run; every head dim of the table, fp16 and bf16, bf16 against the
     reference on its rounded inputs with the bf16 tolerance);
  2. times device-resident kernels with CUDA events beside PyTorch SDPA (FLASH, CUDNN), and the
     ablation entries against their full kernel (timing.py).
Logs and JSON go to $OUT (default ./out); a short table is printed last (report.py).

--tuning instead checks the candidates of the benchmark-only ptx/flash_fwd_tuning.ptx and the
shipped entries of their head dims (the baselines) on a small suite per head dim, and times them beside SDPA
on cases.TUNING_SHAPES at each head dim, causal and not (tuning.md/.json).

The suite includes window / softcap / sinks problems (cases.features_suite: both element types, several
head dims); an entry runs them only where its manifest row lists the features. --features checks only those
problems and a few plain ones of the same shapes.

--list prints what a run would load and check, from the manifest alone (no GPU, no torch).

Usage: python3 ptx-overrides/harness/check_and_time.py [--quick] [--no-time] [--no-check] [--seed N]
       [--dtype fp16|bf16] [--head-dims 32,96,...] [--tuning] [--features] [--list]
"""
import argparse
import json
import random
import sys
import time

import manifest
import report
from cases import Case, features_suite, suite, tuning_cases
from report import log


def default_entries(entries):
    """The shipped prefill/decode entries and the ablation variants (the KV-cache kernels have
    cache_check.py)."""
    kinds = (manifest.PREFILL, manifest.SPLIT, manifest.COMBINE, manifest.FUSED)
    modules = manifest.SHIPPED_MODULES + (manifest.ABLATION_MODULE,)
    return [e for e in entries if e.module in modules and e.kind in kinds]


def tuning_entries(entries, head_dims=None):
    """The tuning candidates (of head_dims, else all), each head dim's shipped CUDA-driver entries (non-causal,
    causal) before them."""
    cands = [e for e in entries if e.module == manifest.TUNING_MODULE and e.kind == manifest.PREFILL
             and not e.tornado and (not head_dims or e.head_dim in head_dims)]
    dims = sorted({e.head_dim for e in cands})
    baselines = [manifest.select_variant(entries, manifest.PREFILL, "fp16", D, causal)
                 for D in dims for causal in (False, True)]
    return list(dict.fromkeys(baselines)) + cands


def head_dims(args):
    """--head-dims as a set of ints (None: all)."""
    return {int(d) for d in args.head_dims.split(",")} if args.head_dims else None


def narrow(entries, args):
    """--dtype / --head-dims: only the entries of that element type / those head dims."""
    if args.dtype:
        entries = [e for e in entries if e.dtype == args.dtype]
    if args.head_dims:
        entries = [e for e in entries if e.head_dim in head_dims(args)]
    return entries


def list_run(args, entries):
    print(f"{'entry':56s} {'module':24s} {'kind':15s} {'type':4s} {'D':>4s} {'Br':>4s} {'Bc':>3s} {'thr':>4s} "
          f"{'hdr':>4s} {'dyn smem':>8s} {'regs 89/90':>10s} selects")
    for e in entries:
        print(f"{e.entry:56s} {e.module:24s} {e.kind:15s} {e.dtype:4s} {e.head_dim:4d} {e.br:4d} {e.bc:3d} {e.threads:4d} "
              f"{e.header_bytes:4d} {e.smem_dynamic:8d} {e.regs_sm_89:4d}/{e.regs_sm_90:<5d} causal={e.causal}")
    cases = problems(args)
    served = {(e.head_dim, e.dtype) for e in entries}
    cases = [c for c in cases if (c.D, c.dtype) in served]
    for dtype in sorted({c.dtype for c in cases}):
        dims = sorted({c.D for c in cases if c.dtype == dtype})
        nf = sum(c.dtype == dtype and bool(c.feat.names()) for c in cases)
        fdims = sorted({c.D for c in cases if c.dtype == dtype and c.feat.names()})
        print(f"{dtype}: head dims {dims}, {sum(c.dtype == dtype for c in cases)} problems "
              f"({nf} with window/softcap/sinks, head dims {fdims})")
    fcases = [c for c in cases if c.feat.names()]
    lacking = [e for e in entries if e.kind != manifest.COMBINE and e.module != manifest.ABLATION_MODULE and any(
        c.D == e.head_dim and c.dtype == e.dtype and not c.feat.names() <= e.features for c in fcases)]
    if lacking:
        print(f"{len(lacking)} entries lack a feature in the manifest's features column and skip those problems "
              f"(e.g. {lacking[0].entry})")
    print(f"{len(entries)} entries; {len(cases)} correctness problems (seed {args.seed})")


def problems(args):
    """The problems a run checks: --tuning's, --features', or the suite."""
    rng = random.Random(args.seed)
    if args.tuning:
        return tuning_cases(rng, sorted({e.head_dim for e in tuning_entries(manifest.load(), head_dims(args))}))
    return features_only(args.quick, rng) if args.features else suite(args.quick, rng)


def features_only(quick, rng):
    """--features: the feature problems, beside a few plain ones of the same shapes, in both element types."""
    plain = [Case(2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa", dtype) for dtype, D in (("fp16", 64), ("fp16", 128),
                                                                                       ("bf16", 128)) for c in (False, True)]
    plain += [Case(2, 8, 2, 4, 9000, D, c, "bhsd", True, "decode", dtype) for dtype, D in (("fp16", 64), ("fp16", 128),
                                                                                          ("bf16", 128)) for c in (False, True)]
    return plain + features_suite(quick, rng)


def run(args, kernels_wanted, tuning):
    import torch
    from correctness import correctness
    from cuda_driver import Driver
    from kernels import Runner, load_kernels
    import timing

    torch.backends.cuda.matmul.allow_tf32 = False
    drv = Driver()
    props = torch.cuda.get_device_properties(0)
    meta = dict(gpu=props.name, sms=props.multi_processor_count, driver=drv.driver_version(), torch=torch.__version__,
                date=time.strftime("%Y-%m-%d %H:%M"), seed=args.seed,
                cmd="python3 ptx-overrides/harness/check_and_time.py " + " ".join(sys.argv[1:]))
    log(json.dumps(meta))
    kernels = load_kernels(drv, kernels_wanted)
    for k in kernels:
        log(f"  {k.name:48s} regs {k.regs:3d} smem {k.static_smem:6d} dyn {k.dyn:6d} local {k.local} CTAs/SM {k.occ}")
    runner = Runner(drv, kernels, props.multi_processor_count)
    corr, ncases = None, 0
    if not args.no_check:
        t0 = time.time()
        cases = problems(args) if tuning or args.features else None
        corr, ncases = correctness(runner, kernels, args.quick, args.seed, cases)
        log(f"correctness: {ncases} problems, {time.time() - t0:.0f}s")
    t0 = time.time()
    if tuning:
        rows = [] if args.no_time else timing.tuning_timing(runner, kernels, rounds=2 if args.quick else 3,
                                                           reps=10 if args.quick else 40)
        log(f"timing: {time.time() - t0:.0f}s")
        report.write("tuning.md", report.tuning_markdown(meta, kernels, corr, rows))
        report.write("tuning.json", json.dumps(dict(meta=meta, entries=[k.row() for k in kernels], correctness=corr,
                                                    timing=rows), indent=1))
        report.print_tuning_summary(kernels, corr, rows)
    else:
        rows, dec, abl = [], [], []
        if not args.no_time:
            rows, dec = timing.timing(runner, kernels, args.quick)
            abl = timing.ablation_timing(runner, kernels, args.quick)
            log(f"timing: {time.time() - t0:.0f}s")
        report.write("results.md", report.markdown(meta, kernels, corr, ncases, rows, dec, abl))
        report.write("results.json", json.dumps(dict(meta=meta, entries=[k.row() for k in kernels], correctness=corr,
                                                     prefill=rows, decode=dec, ablation=abl), indent=1))
        report.print_summary(corr, ncases, rows + dec, abl)
    return corr is None or all(v["passed"] == v["n"] for v in corr.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer problems and repetitions")
    ap.add_argument("--no-time", action="store_true", help="check only")
    ap.add_argument("--no-check", action="store_true", help="time only")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--tuning", action="store_true", help="check and time the tuning candidates only (--head-dims narrows them)")
    ap.add_argument("--features", action="store_true", help="check only the window / softcap / sinks problems")
    ap.add_argument("--list", action="store_true", help="print the entries and the problem count; no GPU needed")
    ap.add_argument("--dtype", choices=manifest.DTYPES, default=None, help="only the entries of this element type")
    ap.add_argument("--head-dims", default=None, help="only these head dims, comma-separated")
    args = ap.parse_args()
    entries = manifest.load()
    wanted = tuning_entries(entries, head_dims(args)) if args.tuning else narrow(default_entries(entries), args)
    if args.list:
        list_run(args, wanted)
        return
    sys.exit(0 if run(args, wanted, args.tuning) else 1)


if __name__ == "__main__":
    main()
