#!/usr/bin/env python3
"""Check and time the hand-tuned FlashAttention PTX on a GPU.

Reads the launch table ptx/manifest.tsv (manifest.py), loads the PTX through the CUDA driver API
(cuda_driver.py: ctypes on libcuda.so.1, the calls the Java FFM host makes), then
  1. checks every shipped and ablation entry against a float64 PyTorch reference of the project's
     semantics (correctness.py, on the problems of cases.py: fresh N(0,1) fp16 inputs, output
     poisoned with NaN before every run);
  2. times device-resident kernels with CUDA events beside PyTorch SDPA (FLASH, CUDNN), and the
     ablation entries against their full kernel (timing.py).
Logs and JSON go to $OUT (default ./out); a short table is printed last (report.py).

--tuning instead checks the D=128 candidates of the benchmark-only ptx/flash_fwd_tuning.ptx and the
shipped D=128 entries (the baselines) on a small D=128 suite, and times them beside SDPA on the two
D=128 timing shapes, causal and not (tuning.md/.json).

--features checks only the window / softcap / sinks problems (cases.feature_cases) and a few plain ones.

--list prints what a run would load and check, from the manifest alone (no GPU, no torch).

Usage: python3 ptx-overrides/harness/check_and_time.py [--quick] [--no-time] [--no-check] [--seed N]
       [--tuning] [--features] [--list]
"""
import argparse
import json
import random
import sys
import time

import manifest
import report
from cases import feature_cases, suite, tuning_cases
from report import log


def default_entries(entries):
    """The shipped prefill/decode entries and the ablation variants (the KV-cache kernels have
    cache_check.py)."""
    kinds = (manifest.PREFILL, manifest.SPLIT, manifest.COMBINE, manifest.FUSED)
    modules = manifest.SHIPPED_MODULES + (manifest.ABLATION_MODULE,)
    return [e for e in entries if e.module in modules and e.kind in kinds]


def tuning_entries(entries):
    """The shipped D=128 CUDA-driver entries (non-causal, causal), then the tuning candidates."""
    baselines = [manifest.select_variant(entries, manifest.PREFILL, "fp16", 128, causal) for causal in (False, True)]
    return baselines + [e for e in entries if e.module == manifest.TUNING_MODULE and e.kind == manifest.PREFILL
                        and not e.tornado]


def list_run(args, entries):
    print(f"{'entry':52s} {'module':24s} {'kind':15s} {'D':>4s} {'Br':>4s} {'Bc':>3s} {'thr':>4s} "
          f"{'hdr':>4s} {'dyn smem':>8s} {'regs 89/90':>10s} selects")
    for e in entries:
        print(f"{e.entry:52s} {e.module:24s} {e.kind:15s} {e.head_dim:4d} {e.br:4d} {e.bc:3d} {e.threads:4d} "
              f"{e.header_bytes:4d} {e.smem_dynamic:8d} {e.regs_sm_89:4d}/{e.regs_sm_90:<5d} causal={e.causal}")
    rng = random.Random(args.seed)
    cases = tuning_cases(rng) if args.tuning else features_only(args.quick) if args.features else suite(args.quick, rng)
    print(f"{len(entries)} entries; {len(cases)} correctness problems (seed {args.seed})")


def features_only(quick):
    """--features: the feature problems, beside a few plain ones of the same shapes."""
    plain = [(2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa") for D in (64, 128) for c in (False, True)]
    plain += [(2, 8, 2, 4, 9000, D, c, "bhsd", True, "decode") for D in (64, 128) for c in (False, True)]
    return plain + feature_cases(quick)


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
        cases = tuning_cases(random.Random(args.seed)) if tuning else features_only(args.quick) if args.features else None
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
    ap.add_argument("--tuning", action="store_true", help="check and time the D=128 tuning candidates only")
    ap.add_argument("--features", action="store_true", help="check only the window / softcap / sinks problems")
    ap.add_argument("--list", action="store_true", help="print the entries and the problem count; no GPU needed")
    args = ap.parse_args()
    entries = manifest.load()
    wanted = tuning_entries(entries) if args.tuning else default_entries(entries)
    if args.list:
        list_run(args, wanted)
        return
    sys.exit(0 if run(args, wanted, args.tuning) else 1)


if __name__ == "__main__":
    main()
