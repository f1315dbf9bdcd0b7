"""Output: the log (stdout and $OUT/log.txt), the one-line timing rows and the markdown tables."""
import os

OUT = os.environ.get("OUT", "./out")
_log_file = None


def log(*a):
    global _log_file
    if _log_file is None:
        os.makedirs(OUT, exist_ok=True)
        _log_file = open(os.path.join(OUT, "log.txt"), "w")
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    _log_file.write(s + "\n")
    _log_file.flush()


def write(name, text):
    """A result file under $OUT."""
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)


def fmt_timing_row(res):
    ks = res["kernels"]
    fl = ks.get("sdpa_flash", {}).get("ms")
    parts = []
    for k, v in ks.items():
        ratio = f" x{fl / v['ms']:.2f}" if fl else ""
        parts.append(f"{k} {v['ms']:.4f}ms {v['tflops']:.0f}TF{ratio}")
    return f"{res['shape']} {'causal' if res['causal'] else 'full'}: " + "; ".join(parts)


def print_correctness(corr, where):
    """The summary lines of a correctness result: runs passed and every failing entry."""
    bad = {n: v for n, v in corr.items() if v["passed"] != v["n"]}
    print(f"correctness: {sum(v['passed'] for v in corr.values())}/{sum(v['n'] for v in corr.values())} runs passed"
          f"{where}; entries failing: {len(bad)}")
    for n, v in bad.items():
        print(f"  FAIL {n}: {v['n'] - v['passed']} of {v['n']}; {v['fails'][:2]}")


def tuning_tables(cands, corr, rows):
    """One tuning_table per head dim of the candidates."""
    dims = sorted({e.D for e in cands})
    return "\n".join(f"## D={D}\n\n" + tuning_table([e for e in cands if e.D == D], corr,
                                                        [r for r in rows if r.get("D", D) == D]) for D in dims)


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


def tuning_markdown(meta, kernels, corr, rows):
    baselines = ", ".join(k.name for k in kernels if k.module != "flash_fwd_tuning.ptx")
    md = [f"# Tuning candidates (flash_fwd_tuning.ptx) beside SDPA and the shipped {baselines}", "",
          f"GPU: {meta['gpu']} ({meta['sms']} SMs), driver CUDA {meta['driver']}, torch {meta['torch']}, "
          f"date {meta['date']}", f"Command: `{meta['cmd']}`", "",
          "Cells: SDPA FLASH time / kernel time (> 1 = faster than SDPA FLASH), then the median of the "
          "round medians in ms. check = correctness runs passed.", "", tuning_tables(kernels, corr, rows)]
    if corr:
        fails = [(n, f) for n, v in corr.items() for f in v["fails"]]
        if fails:
            md += ["Failures (first 5 per entry):", ""] + [f"- {n}: {f}" for n, f in fails]
    return "\n".join(md) + "\n"


def print_tuning_summary(kernels, corr, rows):
    print("\n==== tuning summary ====")
    if corr is not None:
        print_correctness(corr, "")
    print(tuning_tables(kernels, corr, rows))


def print_summary(corr, ncases, timing_rows, abl):
    """The short table printed last."""
    print("\n==== summary ====")
    if corr is not None:
        print_correctness(corr, f" over {ncases} problems")
        print(f"  worst max abs {max(v['max_abs'] for v in corr.values()):.2e}, worst rel "
              f"{max(v['max_rel'] for v in corr.values()):.2e}, worst lse {max(v['max_lse'] for v in corr.values()):.2e}")
    for res in timing_rows:
        print(fmt_timing_row(res))
    for a in abl:
        full = a["t"]["full"]["ms"]
        print(f"ablation {a['base']} {'causal' if a['causal'] else 'full'}: " +
              ", ".join(f"{k} {v['ms']:.3f}ms(x{full / v['ms']:.2f})" for k, v in a["t"].items()))
