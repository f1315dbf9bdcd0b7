"""What the harness knows about the kernels, read from where it is defined (no GPU, no torch):

- ptx/manifest.tsv, the launch table generate.sh writes from the kernel traits and ptxas: one row
  per entry (the variant it serves: kind, dtype, head dim, which causal flag selects it, cache
  layout, features, ABI and array header, architecture family; then Br, Bc, warps, threads, stages,
  the ablation/tuning switches, dynamic and static shared memory, registers);
- src/flash_params.cuh's ParamIndex: where each field of the params block goes;
- the PTX modules themselves (ptx/<module>.gz: the manifest's module column names the PTX text, which
  ships gzip-compressed; read_ptx).
"""
import dataclasses
import gzip
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ptx-overrides/
PTX_DIR = os.path.join(ROOT, "ptx")
MANIFEST = os.path.join(PTX_DIR, "manifest.tsv")
PARAMS_HEADER = os.path.join(ROOT, "src", "flash_params.cuh")

# The dense prefill/decode modules, one per element type (generate_kernels.py, module_of).
SHIPPED_MODULES = ("flash_fwd.ptx", "flash_decode.ptx", "flash_fwd_bf16.ptx", "flash_decode_bf16.ptx")
# The element types and head dims of the shipped table (generate_kernels.py: SHIPPED_DTYPES, HEAD_DIMS).
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (32, 64, 96, 128, 192, 256)
# O against the float64 reference of the (rounded) inputs: (max abs, relative L2), as verify/Tolerance.java.
TOLERANCE = {"fp16": (1e-2, 2e-3), "bf16": (6e-2, 1.6e-2)}
# lse (fp32 from fp32 scores, whatever the element type) against the reference.
LSE_TOLERANCE = 1e-3
ABLATION_MODULE = "flash_fwd_ablation.ptx"
TUNING_MODULE = "flash_fwd_tuning.ptx"
# The kinds this harness launches (the KV-cache kernels have their own: cache_check.py).
PREFILL, SPLIT, COMBINE, FUSED = "prefill", "decode-split", "decode-combine", "decode-fused"
# The KV-cache kinds (cache_check.py).
CACHE_PREFILL, CACHE_SPLIT, CACHE_COMBINE = "cache-prefill", "cache-decode-split", "cache-decode-combine"
CACHE_FUSED, CACHE_APPEND_FUSED, CACHE_STAGED_FUSED = ("cache-decode-fused", "cache-append-decode-fused",
                                                      "cache-staged-decode-fused")
CACHE_APPEND, MERGE_STATES = "cache-append", "merge-states"
SM80 = "sm80"
# The ablation switches as the manifest's opt column spells them (kernel_traits.cuh, Opt).
ABLATIONS = ("no_cpasync", "no_ldmatrix", "no_swizzle", "p_smem", "no_causal_skip")


@dataclasses.dataclass(frozen=True)
class Variant:
    """What a host asks of a kernel (KernelVariant in Java): kind, dtype ("fp16"), head dim, causal flag,
    cache layout ("none", "contiguous", "paged"), run-time features, array header bytes (0: the CUDA
    driver's ABI, else a TornadoVM twin's) and architecture family."""
    kind: str
    dtype: str
    head_dim: int
    causal: bool
    layout: str = "none"
    features: frozenset = frozenset()
    header_bytes: int = 0
    arch: str = SM80

    def __str__(self):
        return (f"{self.kind} {self.dtype} D={self.head_dim} {'causal' if self.causal else 'non-causal'}"
                + ("" if self.layout == "none" else f" {self.layout} cache")
                + (f" [{', '.join(sorted(self.features))}]" if self.features else "")
                + (" (CUDA driver" if self.header_bytes == 0 else f" (TornadoVM, {self.header_bytes}-byte header")
                + f", {self.arch})")


class Refused(ValueError):
    """No entry serves a variant (InvalidArgumentException in Java): names the first field that rules it
    out, its value, and what the manifest serves for the variant's kind and ABI."""

    def __init__(self, argument, value, served):
        super().__init__(f"{argument} = {value}: {served}")
        self.argument = argument


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of ptx/manifest.tsv (columns: ptx-overrides/README.md). head_dim 0: any head dim;
    causal "0", "1", "any", or "-" (no host selects it: a benchmark-only entry); layout "none",
    "contiguous", "paged" or "any" (either cache layout); features: the names of the features column."""
    module: str
    entry: str
    kind: str
    dtype: str
    head_dim: int
    causal: str
    layout: str
    features: frozenset
    abi: str
    header_bytes: int
    arch: str
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

    @property
    def selectable(self):
        """Selected by some host (benchmark-only entries are not)."""
        return self.causal != "-"

    def serves(self, v):
        """True when a host asking for Variant v may run this entry (KernelManifest.Kernel.serves)."""
        return (self.kind == v.kind and self.dtype == v.dtype and self.head_dim in (0, v.head_dim)
                and self.causal in ("any", "1" if v.causal else "0") and self.serves_layout(v.layout)
                and self.features >= frozenset(v.features) and self.header_bytes == v.header_bytes
                and self.arch == v.arch)

    def serves_layout(self, layout):
        return self.layout == layout or self.layout == "any" and layout != "none"

    def describe(self):
        """What the entry serves, as a refusal lists it."""
        return (f"{self.dtype} D={self.head_dim or 'any'}"
                + ("" if self.causal == "any" else " causal" if self.causal == "1" else " non-causal")
                + ("" if self.layout == "none" else f" {self.layout} cache")
                + (f" [{', '.join(sorted(self.features))}]" if self.features else ""))


def _features(cell):
    return frozenset() if cell == "-" else frozenset(cell.split("+"))


def parse(text, where="manifest"):
    """Rows from a manifest's text, in its order; columns are found by name, so new ones do not break this reader."""
    lines = text.strip().split("\n")
    header = lines[0].split("\t")
    fields = dataclasses.fields(Entry)
    missing = [fl.name for fl in fields if fl.name not in header]
    if missing:
        raise RuntimeError(f"{where}: no column {missing}")
    convert = {int: int, str: str, frozenset: _features}
    rows = []
    for n, line in enumerate(lines[1:], 2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise RuntimeError(f"{where}:{n}: {len(cells)} cells, header has {len(header)}")
        row = dict(zip(header, cells))
        rows.append(Entry(**{fl.name: convert[fl.type](row[fl.name]) for fl in fields}))
    return rows


def load(path=MANIFEST):
    with open(path) as f:
        return parse(f.read(), path)


def module_of(base, dtype):
    """The shipped module of element type dtype of the kinds of module `base` (e.g. flash_cache.ptx, bf16 ->
    flash_cache_bf16.ptx), as generate_kernels.py's module_of names it."""
    return base if dtype == "fp16" else base[:-len(".ptx")] + "_" + dtype + ".ptx"


def read_ptx(path):
    """The PTX text (bytes) of a module path: <path>.gz (what ships, gzip) where present or the path ends in .gz,
    else the uncompressed file (another build passed by hand)."""
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def ptx_text(module):
    """The PTX text of a module the manifest names (its module column, e.g. flash_fwd.ptx)."""
    return read_ptx(os.path.join(PTX_DIR, module)).decode("ascii")


def select_variant(entries, kind, dtype, head_dim, causal, layout="none", header_bytes=0, features=(), arch=SM80):
    """The entry that serves the variant (KernelManifest.select): the harness names no entry by its parts. An entry
    serves its features and any subset; of several, the one with the fewest features runs.
    None: Refused, naming the first field that rules the variant out and listing what is served."""
    v = Variant(kind, dtype, head_dim, bool(causal), layout, frozenset(features), header_bytes, arch)
    found = [e for e in entries if e.serves(v)]
    if not found:
        raise _refusal(entries, v)
    fewest = min(len(e.features) for e in found)
    best = [e for e in found if len(e.features) == fewest]
    if len(best) > 1:
        raise RuntimeError(f"the kernel manifest has {len(best)} entries for {v}: {[e.entry for e in best]}")
    return best[0]


def _refusal(entries, v):
    abi = [e for e in entries if e.selectable and e.kind == v.kind and e.header_bytes == v.header_bytes
           and e.arch == v.arch]
    served = (f"served {v.kind} variants"
              + (" (CUDA driver, " if v.header_bytes == 0 else f" (TornadoVM {v.header_bytes}-byte header, ") + v.arch
              + "): " + (", ".join(dict.fromkeys(e.describe() for e in abi)) or "none"))
    typed = [e for e in abi if e.dtype == v.dtype]
    sized = [e for e in typed if e.head_dim in (0, v.head_dim)]
    laid = [e for e in sized if e.serves_layout(v.layout)]
    if not typed:
        return Refused("dtype", v.dtype, served)
    if not sized:
        return Refused("headDim", v.head_dim, served)
    if not laid:
        return Refused("layout", v.layout, served)
    if not any(e.features >= v.features for e in laid):
        return Refused("features", sorted(v.features), served)
    return Refused("causal", str(v.causal).lower(), served)


def layout_configs(entries, kind, header_bytes):
    """The configurations of a cache kind under one ABI: each selectable contiguous-cache entry, in manifest order,
    with the entry that serves the same variant over a paged cache, as {layout: entry}."""
    configs = []
    for e in entries:
        if e.kind == kind and e.header_bytes == header_bytes and e.serves_layout("contiguous") and e.selectable:
            # The flag that selects e, or either one where e serves both.
            paged = select_variant(entries, kind, e.dtype, e.head_dim, e.causal == "1", "paged", header_bytes,
                                   e.features, e.arch)
            configs.append({"contiguous": e, "paged": paged})
    return configs


def ablation_base(e, entries):
    """The shipped CUDA-driver entry an ablation variant is measured against: the same tile, without the score
    features but the sinks every tile takes (the ablations are built plain)."""
    found = [b for b in entries if b.module in SHIPPED_MODULES and b.kind == PREFILL and not b.tornado and b.dtype == e.dtype
             and b.features == e.features
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
