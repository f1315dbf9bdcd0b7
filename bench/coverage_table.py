#!/usr/bin/env python3
"""The table of bench/coverage-report.sh, from its results.jsonl (one tagged JSON line per run).

Prints markdown: per head dim the prefill kernel times (ptx-tornado / ptx-cuda, bf16 / fp16), the feature costs
(window at 32K against 4K, softcap + sinks against none) and the model-shaped decode tokens against PyTorch.
Usage: coverage_table.py results.jsonl
"""
import json
import sys


def kernel_ms(r):
    return r.get("kernel_median_ms") or r.get("median_ms")


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by_tag = {r.get("tag"): r for r in rows}

    prefill = [r for r in rows if str(r.get("tag", "")).startswith("prefill ptx-")]
    if prefill:
        print("## Prefill kernel time (ms) per head dim\n")
        print("| shape | D | causal | ptx-cuda fp16 | ptx-cuda bf16 | bf16/fp16 | ptx-tornado fp16 | tornado/cuda |")
        print("|---|---:|---|---:|---:|---:|---:|---:|")
        keys = sorted({(r["batch"], r["heads"], r["seq"], r["dim"], r["causal"]) for r in prefill})
        for b, h, s, d, c in keys:
            def ms(backend, dt):
                for r in prefill:
                    if (r["backend"], r.get("dtype", "fp16"), r["batch"], r["heads"], r["seq"], r["dim"], r["causal"]) \
                            == (backend, dt, b, h, s, d, c):
                        return kernel_ms(r)
                return None
            f, bf, t = ms("ptx-cuda", "fp16"), ms("ptx-cuda", "bf16"), ms("ptx-tornado", "fp16")
            fmt = lambda x: "-" if x is None else "%.4g" % x
            ratio = lambda a, z: "-" if a is None or z is None else "%.3f" % (a / z)
            print("| (%d,%d,%d) | %d | %s | %s | %s | %s | %s | %s |" % (b, h, s, d, "yes" if c else "no", fmt(f), fmt(bf),
                                                                    ratio(bf, f), fmt(t), ratio(t, f)))
        print()

    def pair(label, a, b):
        """One row: the kernels' device time where both runs have it, else the step (wall) time."""
        ra, rb = by_tag.get(a), by_tag.get(b)
        if not ra or not rb:
            return
        what = "kernel_median_ms" if ra.get("kernel_median_ms") and rb.get("kernel_median_ms") else "median_ms"
        if not ra.get(what) or not rb.get(what):
            return
        unit = "kernels" if what == "kernel_median_ms" else "wall"
        print("| %s | %s: %.4g ms (%s) | %s: %.4g ms | %.3f |" % (label, a, ra[what], unit, b, rb[what], ra[what] / rb[what]))

    print("## Features\n")
    print("| comparison | run | baseline | ratio |")
    print("|---|---|---|---:|")
    pair("window follows the window (decode token)", "decode 32K window 4095", "decode 4K")
    pair("window against the whole 32K (decode token)", "decode 32K window 4095", "decode 32K")
    pair("window follows the window (prefill chunk)", "prefill 4096x32768 causal window 4095", "prefill 4096x4096")
    pair("softcap 50 + sinks (decode token)", "decode 32K softcap 50 sinks", "decode 32K")
    for D in (128, 256):
        base = f"prefill (4,16,2048,{D}) causal "
        for extra in ("--sinks", "--softcap 50", "--softcap 50 --sinks"):
            pair(f"{extra[2:].replace(' --', ' + ')} (prefill, D={D})", base + extra, base)
        flex = [r for r in rows if r.get("tag") == f"torch softcap d{D}" and r.get("backend") == "flex-attention"]
        capped = [r for r in flex if r.get("softcap")]
        plain = [r for r in flex if r.get("softcap") == 0]
        if capped and plain:
            print("| softcap 50, PyTorch FlexAttention (prefill, D=%d) | %.4g ms | without: %.4g ms | %.3f |"
                  % (D, capped[0]["ms"], plain[0]["ms"], capped[0]["ms"] / plain[0]["ms"]))
    torch_w = by_tag.get("torch decode 32K window 4095")
    ours_w = by_tag.get("decode 32K window 4095")
    if torch_w and ours_w and torch_w.get("median_ms"):
        print("| windowed decode token against PyTorch (step wall) | ptx-cuda: %.4g ms | PyTorch SDPA: %.4g ms | %.3f |"
              % (ours_w["median_ms"], torch_w["median_ms"], ours_w["median_ms"] / torch_w["median_ms"]))
    print()

    print("## Model-shaped decode tokens (step wall time, ms)\n")
    print("| model | dtype | backend | ours | PyTorch (what it computes) | ours / PyTorch | K/V TB/s (kernels) | check |")
    print("|---|---|---|---:|---|---:|---:|---|")
    for model in ("gemma2", "phi3"):
        for dt in ("fp16", "bf16"):
            torch_rows = [r for r in rows if r.get("tag") == "%s %s torch" % (model, dt) and r.get("median_ms")]
            best = min((r for r in torch_rows if r.get("features_computed")), key=lambda r: r["median_ms"], default=None)
            for backend in ("ptx-cuda", "ptx-tornado"):
                r = by_tag.get("%s %s %s" % (model, dt, backend))
                if not r:
                    continue
                t = "-" if best is None else "%.4g (%s)" % (best["median_ms"], best["backend"])
                ratio = "-" if best is None else "%.3f" % (r["median_ms"] / best["median_ms"])
                print("| %s | %s | %s | %.4g | %s | %s | %s | %s |" % (model, dt, backend, r["median_ms"], t, ratio,
                                                                     r.get("kernel_kv_tb_per_s"), r.get("check_passed")))
    print()


if __name__ == "__main__":
    main(sys.argv[1])
