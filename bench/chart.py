#!/usr/bin/env python3
"""The report's chart with matplotlib, for GPU hosts where Java finds no fonts (no fontconfig).

Usage: chart.py REPORT_JSON OUT_PNG. Draws the report's "chart_tflops" (shape -> backend -> TFLOP/s,
chosen by the Java report, bench/src/.../Chart.java) as the same horizontal grouped bars.
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    data = json.load(open(sys.argv[1]))["chart_tflops"]
    shapes = list(data)
    backends = []
    for by_backend in data.values():
        backends += [b for b in by_backend if b not in backends]
    bar = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(shapes) * len(backends) / 3 + 2))
    for i, backend in enumerate(backends):
        ys = [s + i * bar for s in range(len(shapes))]
        xs = [data[shape].get(backend, 0.0) for shape in shapes]
        bars = ax.barh(ys, xs, height=bar, label=backend)
        ax.bar_label(bars, labels=[f"{x:.1f}" if x else "" for x in xs], fontsize=7, padding=2)
    ax.set_yticks([s + 0.4 - bar / 2 for s in range(len(shapes))], shapes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s")
    ax.set_title("Attention forward, TFLOP/s (kernel time, data on the device)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
    main()
