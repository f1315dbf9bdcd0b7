"""What the harness knows about the kernels, read from where it is defined (no GPU, no torch):

- ptx/manifest.tsv, the launch table generate.sh writes from the kernel traits and ptxas: one row
  per entry (kind, ABI and array header, which causal flag selects it, Br, Bc, warps, threads,
  stages, the ablation/tuning switches, dynamic and static shared memory, registers);
- src/flash_params.cuh's ParamIndex: where each field of the params block goes.
"""
import dataclasses
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ptx-overrides/
PTX_DIR = os.path.join(ROOT, "ptx")
MANIFEST = os.path.join(PTX_DIR, "manifest.tsv")
PARAMS_HEADER = os.path.join(ROOT, "src", "flash_params.cuh")

SHIPPED_MODULES = ("flash_fwd.ptx", "flash_decode.ptx")
ABLATION_MODULE = "flash_fwd_ablation.ptx"
TUNING_MODULE = "flash_fwd_tuning.ptx"
# The kinds this harness launches (the KV-cache kernels have their own: cache_check.py).
PREFILL, SPLIT, COMBINE, FUSED = "prefill", "decode-split", "decode-combine", "decode-fused"
# The ablation switches as the manifest's opt column spells them (kernel_traits.cuh, Opt).
ABLATIONS = ("no_cpasync", "no_ldmatrix", "no_swizzle", "p_smem", "no_causal_skip")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of ptx/manifest.tsv (columns: ptx-overrides/README.md)."""
    module: str
    entry: str
    kind: str
    abi: str
    header_bytes: int
    causal: str
    head_dim: int
    br: int
    bc: int
    warps: int
    threads: int
    stages: int
    q_in_smem: int
    opt: str
    smem_dynamic: int
    smem_static: int
    regs_sm_89: int
    regs_sm_90: int

    @property
    def tornado(self):
        """TornadoVM ABI: a kernel-context word first, every array behind header_bytes."""
        return self.abi == "tornado"

    @property
    def ablation(self):
        """The optimisation this benchmark entry switches off, or None."""
        return next((a for a in self.opt.split("+") if a in ABLATIONS), None)

    def selected_for(self, causal):
        return self.causal == "any" or self.causal == ("1" if causal else "0")


def load(path=MANIFEST):
    """The manifest's rows, in its order; columns are found by name."""
    with open(path) as f:
        lines = f.read().strip().split("\n")
    header = lines[0].split("\t")
    fields = dataclasses.fields(Entry)
    missing = [fl.name for fl in fields if fl.name not in header]
    if missing:
        raise RuntimeError(f"{path}: no column {missing}")
    rows = []
    for n, line in enumerate(lines[1:], 2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise RuntimeError(f"{path}:{n}: {len(cells)} cells, header has {len(header)}")
        row = dict(zip(header, cells))
        rows.append(Entry(**{fl.name: fl.type(row[fl.name]) if fl.type is int else row[fl.name] for fl in fields}))
    return rows


def select(entries, kind, head_dim, causal, header_bytes=0):
    """The entry a host runs for this kind, head dim and causal flag (exactly one)."""
    found = [e for e in entries if e.kind == kind and e.head_dim == head_dim and e.header_bytes == header_bytes
             and e.selected_for(causal)]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} {kind} entries for D={head_dim} causal={causal} header={header_bytes}: "
                           f"{[e.entry for e in found]}")
    return found[0]


def ablation_base(e, entries):
    """The shipped CUDA-driver entry an ablation variant is measured against: the same tile."""
    found = [b for b in entries if b.module in SHIPPED_MODULES and b.kind == PREFILL and not b.tornado
             and (b.head_dim, b.br, b.bc, b.warps) == (e.head_dim, e.br, e.bc, e.warps)]
    if len(found) != 1:
        raise RuntimeError(f"{e.entry}: {len(found)} shipped entries with its tile: {[b.entry for b in found]}")
    return found[0]


def param_index(path=PARAMS_HEADER):
    """{name: index} of `enum ParamIndex` in flash_params.cuh (P_B, P_HQ, ..., P_COUNT)."""
    with open(path) as f:
        text = f.read()
    body = re.search(r"enum\s+ParamIndex\s*\{(.*?)\}", text, re.S)
    if not body:
        raise RuntimeError(f"{path}: no enum ParamIndex")
    items = re.sub(r"//[^\n]*", "", body.group(1))
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(\w+)\s*=\s*(\d+)", items)}
