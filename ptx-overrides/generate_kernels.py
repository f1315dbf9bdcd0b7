#!/usr/bin/env python3
"""The kernel table: every entry of the hand-tuned kernels, as data.

Each row below is one configuration of one kind of kernel in one module (src/<module>.cu ->
ptx/<module>.ptx): its element types, head dim, tile (Br, Bc, warps, K/V stages, CTAs per SM, Q
in registers or shared memory, static or dynamic shared memory, Opt switches), K/V layout,
which causal flag selects it, and its ABIs (CUDA driver; TornadoVM with 16- and 128-byte array
headers).  This script writes, from the table:

  src/generated/<module>.inc   the module's traits types, entry instantiations (entry names
                               made here) and FLASH_SELECT lines; src/<module>.cu includes it
  src/generated/modules.tsv    per module: nvcc -arch, the manifest's arch family, bench-only

generate.sh runs it first (`--check`: fail if a generated file is stale).  Adding an element
type or a head dim is a table edit: give a row another dtype (or add a row with the head dim and
a tile that fits it), then run ./generate.sh.  The manifest's columns come from the compiled
traits (src/flash_manifest.cuh), not from here.  Python 3 standard library only.

  ./generate_kernels.py           write src/generated/
  ./generate_kernels.py --check   exit 1 if src/generated/ differs from what the table gives
  ./generate_kernels.py --list    print the entries, one per line (module, entry, kind, dtype, header bytes)
"""
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "src", "generated")


# ---- modules ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Module:
    name: str
    nvcc_arch: str    # nvcc -arch
    arch: str         # the manifest's arch column: the family the PTX is for
    bench_only: bool  # benchmark-only: not in the jar, no launch selection, spills reported not failed


# compute_80 PTX: one file JIT-compiles on sm_80, sm_89 (L4) and sm_90 (H100/H200).  The shipped
# modules come once per element type (a row's bf16 entries go to <module>_bf16, src/<module>_bf16.cu),
# which keeps each module's PTX and a host's JIT of it about the size of one type's table.
MODULES = (
    Module("flash_cache", "compute_80", "sm80", False),
    Module("flash_cache_bf16", "compute_80", "sm80", False),
    Module("flash_cache_tornado", "compute_80", "sm80", False),
    Module("flash_cache_tornado_bf16", "compute_80", "sm80", False),
    Module("flash_decode", "compute_80", "sm80", False),
    Module("flash_decode_bf16", "compute_80", "sm80", False),
    Module("flash_fwd", "compute_80", "sm80", False),
    Module("flash_fwd_bf16", "compute_80", "sm80", False),
    Module("flash_fwd_ablation", "compute_80", "sm80", True),
    Module("flash_fwd_tuning", "compute_80", "sm80", True),
)


def module_of(row, dtype):
    """The module an entry of the row in element type dtype goes to (fp16: the row's module)."""
    return row.module if dtype == "fp16" else "%s_%s" % (row.module, DTYPES[dtype][1])


# ---- element types (src/element_type.cuh) ------------------------------------------------------
# dtype -> (C++ type, name tag; fp16 names carry none)
DTYPES = {"fp16": ("flash::Fp16", ""), "bf16": ("flash::Bf16", "bf16")}


# ---- tiles (src/kernel_traits.cuh, FwdTraits) --------------------------------------------------
# The Opt switches a tile turns away from the shipped kernel body, as the manifest's opt column
# spells them, in Opt's parameter order (the first five are on by default, lazy_rescale off).
OPT_SWITCHES = ("no_cpasync", "no_ldmatrix", "no_swizzle", "p_smem", "no_causal_skip", "lazy_rescale")
ABLATIONS = OPT_SWITCHES[:5]
LAZY = ("lazy_rescale",)


@dataclasses.dataclass(frozen=True)
class Tile:
    d: int                   # head dim
    br: int                  # query rows per CTA (decode: 16 packed rows)
    bc: int                  # keys per K/V tile
    warps: int
    stages: int              # K/V ring stages; 1 with the pipeline on = one K and one V buffer loaded apart
    min_ctas: int            # __launch_bounds__ minimum CTAs per SM
    q_in_regs: bool = True   # False: Q stays in shared memory and is re-read every tile
    dyn_smem: bool = False   # dynamic shared memory (CUDA-driver host only)
    opt: tuple = ()          # OPT_SWITCHES
    lean: int = 0            # Opt::kLean bits (register-saving bodies of the tuning candidates)
    plain_sinks: bool = True  # the plain entry serves sinks too (OptPlain's kSinks); False: only its "_feat" twin

    def traits(self, dtype, features):
        for o in self.opt:
            assert o in OPT_SWITCHES, o
        flags = [o not in self.opt for o in OPT_SWITCHES[:5]] + ["lazy_rescale" in self.opt]
        opt = "flash::Opt<%s>" % ", ".join("true" if f else "false" for f in flags)
        if self.lean:
            opt = "flash::OptLean<%s, %d>" % (opt, self.lean)
        if not features:
            opt = "flash::OptPlain<%s>" % opt if self.plain_sinks else "flash::OptPlain<%s, false>" % opt
        t = "flash::FwdTraits<%d, %d, %d, %d, %d, %d, %s, %s, %s>" % (
            self.d, self.br, self.bc, self.warps, self.stages, self.min_ctas,
            "true" if self.q_in_regs else "false", "true" if self.dyn_smem else "false", opt)
        if dtype != "fp16":
            t = "flash::WithElement<%s, %s>" % (t, DTYPES[dtype][0])
        return t


def ablation(tile, switch):
    """The tile with one optimisation switched off (dynamic shared memory: the P round trip needs more than 48 KB)."""
    return dataclasses.replace(tile, dyn_smem=True, opt=(switch,) + tile.opt)


# ---- kinds -----------------------------------------------------------------------------------
# kind -> (entry macro per ABI, name pattern).  {dt}: "d{D}" with the dtype tag before it
# ("bf16_d64"); {paged}: "_paged" for a paged-cache entry; {tile}: "_m{Br}n{Bc}w{W}s{S}";
# {dec}: "_n{Bc}s{S}"; {causal}: "_causal" for an entry selected by causal = 1; {sfx}: the row's
# suffix.  Names are for people: hosts select entries by the manifest's columns.
KINDS = {
    "prefill": ({"cuda": "FLASH_FWD_ENTRY", "tornado": "FLASH_FWD_TORNADO_ENTRY"},
                "flash_fwd_{dt}{tile}{sfx}"),
    "decode-split": ({"cuda": "FLASH_DECODE_SPLIT_ENTRY"}, "flash_decode_split_{dt}{dec}"),
    "decode-combine": ({"cuda": "FLASH_DECODE_COMBINE_ENTRY"}, "flash_decode_combine_{dt}"),
    "decode-fused": ({"tornado": "FLASH_DECODE_FUSED_ENTRY"}, "flash_decode_fused_{dt}{dec}"),
    "cache-decode-split": ({"cuda": "FLASH_CACHE_SPLIT_ENTRY"}, "flash_cache_decode_split{paged}_{dt}"),
    "cache-decode-combine": ({"cuda": "FLASH_CACHE_COMBINE_ENTRY"}, "flash_cache_decode_combine_{dt}"),
    "cache-prefill": ({"cuda": "FLASH_CACHE_FWD_ENTRY", "tornado": "FLASH_CACHE_FWD_TORNADO_ENTRY"},
                      "flash_cache_fwd{paged}_{dt}{causal}"),
    "cache-decode-fused": ({"tornado": "FLASH_CACHE_FUSED_ENTRY"}, "flash_cache_decode_fused{paged}_{dt}"),
    "cache-append-decode-fused": ({"tornado": "FLASH_CACHE_APPEND_FUSED_ENTRY"},
                                  "flash_cache_append_decode_fused{paged}_{dt}"),
    "cache-staged-decode-fused": ({"tornado": "FLASH_CACHE_STAGED_FUSED_ENTRY"},
                                  "flash_cache_staged_decode_fused{paged}_{dt}"),
    "cache-append": ({"cuda": "FLASH_KV_APPEND_ENTRY"}, "kv_cache_append{tag}"),
    "merge-states": ({"cuda": "FLASH_MERGE_STATES_ENTRY"}, "attention_merge_states{tag}"),
}
# Kinds without a tile (their macros take the element type and the head dim).
PLAIN_KINDS = ("decode-combine", "cache-decode-combine", "cache-append", "merge-states")
# Kinds whose entries read a KV cache in the row's layout (contiguous or paged).
CACHE_LAYOUT_KINDS = ("cache-decode-split", "cache-prefill", "cache-decode-fused", "cache-append-decode-fused",
                      "cache-staged-decode-fused")
# ABI -> (array header bytes, entry-name tail) of each entry it gets.
ABIS = {"cuda": ((0, ""),), "tornado": ((16, "_tornado"), (128, "_tornado_h128"))}
CUDA, TORNADO, BOTH = ("cuda",), ("tornado",), ("cuda", "tornado")
MODES = {"contiguous": "flash::kCacheContig", "paged": "flash::kCachePaged"}


@dataclasses.dataclass(frozen=True)
class Row:
    module: str
    kind: str
    tile: Tile = None         # None for PLAIN_KINDS
    d: int = 0                # head dim of a plain kind (0 = any)
    causal: str = None        # which causal flag selects it: "0", "1", "any"; None = not selected (bench-only)
    layout: str = "none"      # cache kinds: "contiguous" or "paged"
    abis: tuple = CUDA
    dtypes: tuple = ("fp16",)
    suffix: str = ""          # prefill names: what the tile numbers do not say (_qs, _dyn, an ablation)
    why: str = ""             # one line for people: why this configuration

    def head_dim(self):
        return self.tile.d if self.tile else self.d


# ---- the table ------------------------------------------------------------------------------
# Head dims 32, 64, 96, 128, 192, 256, every shipped kind, fp16 and bf16 (SHIPPED_DTYPES: one row
# serves both; the bf16 entries go to the _bf16 modules).  The D=64 and D=128 tiles were picked on
# an H200 with harness/run_gpu.sh --tuning; the others start from FlashAttention-2's choices, kept
# where they fit the register file without spills, and were timed beside SDPA FLASH on an H200
# (harness/check_and_time.py, the rows' comments).  The CUDA-driver host's dense prefill at D=96,
# 192 and 256 runs a 96 KB dynamic-shared-memory tile (Tile dyn_smem; the manifest's smem_dynamic
# tells the host); every other entry, and every TornadoVM twin (TornadoVM launches with static shared
# memory only), uses a tile that fits 48 KB of static shared memory, so ptx-tornado refuses no
# (kind, head dim, dtype) of the table: at D=96/192/256 its prefill runs the 48 KB tile, slower
# than the CUDA driver's.  The KV-cache prefill (both hosts) uses the static tiles too.
SHIPPED_DTYPES = ("fp16", "bf16")
HEAD_DIMS = (32, 64, 96, 128, 192, 256)
FWD_D64 = Tile(64, 128, 64, 4, 2, 2)
CACHE_D128_CAUSAL = Tile(128, 64, 48, 4, 2, 3, opt=LAZY)  # the KV-cache prefill's D=128 causal tile
# The dense prefill's D=128 causal tile: FA2's sm86/sm89 64 x 64, one K and one V buffer with Q in registers staged
# over the V buffer (32 KB), eager rescale, 2 CTAs/SM by registers (226 plain, 203-212 with the score features: one
# tile serves both, no spill).
FWD_D128_CAUSAL = Tile(128, 64, 64, 4, 1, 2)
FWD_D128 = Tile(128, 128, 32, 4, 1, 2, q_in_regs=False)
FWD_D128_LAZY = dataclasses.replace(FWD_D128, opt=LAZY)
# The CUDA driver's D=128 non-causal prefill: FWD_D128's layout with 48-key K and V buffers, 56 KB dynamic, lazy
# rescale (the eager one spills 88-104 bytes), 255 registers, no spill, plain and with the features.
FWD_D128_DYN = dataclasses.replace(FWD_D128, bc=48, dyn_smem=True, opt=LAZY)
DEC_D128 = Tile(128, 16, 32, 1, 2, 6)
DEC_D64 = Tile(64, 16, 64, 1, 2, 6)
# New head dims (one tile for both causal flags).
FWD_D32 = Tile(32, 128, 128, 4, 2, 2)      # FA2's hdim32; 2 row groups per warp, 32 KB, ~235 registers
FWD_D96 = Tile(96, 64, 64, 4, 2, 2)        # FA2's sm8x hdim96 causal tile (the KV-cache prefill's at D=96)
# ptx-tornado's D=96 prefill: FWD_D96_DYN's 2 row groups per warp with Q in shared memory, in 48 KB static (one K
# and one V buffer loaded apart: 24 + 24 KB); spill-free at 255 registers only with the lazy rescale and the
# Q K^T k-step loop unrolled by 4 (lean 4), plain and with the features, on sm_89 and sm_90.
FWD_D96_STATIC = Tile(96, 128, 64, 4, 1, 2, q_in_regs=False, opt=LAZY, lean=4)
# ptx-tornado's D=96 causal prefill: 4 warps x 1 row group, one K and one V buffer of 128 keys, Q in registers over the
# V buffer (48 KB static), 234-242 registers plain and with the features, no spill.
FWD_D96_CAUSAL_STATIC = Tile(96, 64, 128, 4, 1, 2)
FWD_D192 = Tile(192, 64, 32, 4, 2, 2)      # Q in registers overlapping ring stage 1: 48 KB, ~250 registers (the
                                           # KV-cache prefill's at D=192)
# ptx-tornado's D=192 prefill: the dynamic tile's 64 x 64 with one K and one V buffer, Q in registers overlapping the
# V buffer (kernel_traits.cuh, kQOffset): 48 KB static; spill-free with K read in the Q/V lane roles (lean 1).
FWD_D192_STATIC = Tile(192, 64, 64, 4, 1, 2, lean=1)
FWD_D96_DYN = Tile(96, 128, 64, 4, 2, 2, q_in_regs=False, dyn_smem=True)  # 2 row groups per warp, Q in shared
                                           # memory, 72 KB dynamic, 255 registers
FWD_D192_DYN = Tile(192, 64, 64, 4, 2, 2, dyn_smem=True)  # 2 stages of 64 keys, 96 KB dynamic, 255 registers, 2 CTAs/SM
FWD_D256 = Tile(256, 64, 16, 4, 2, 1, plain_sinks=False)  # Q in registers (staged over ring stage 1), 2 stages of 16
                                           # keys: 48 KB static, 252 registers; its plain TornadoVM twin read the sinks
                                           # at 255 registers, 11% slower on an H200 (sinks: the "_feat" entry)
FWD_D256_DYN = Tile(256, 64, 64, 4, 1, 1, q_in_regs=False, dyn_smem=True)  # FA2's sm86/89 64x64, 96 KB
DEC_D32 = Tile(32, 16, 64, 1, 2, 6)
DEC_D96 = Tile(96, 16, 32, 1, 2, 6)
DEC_D192 = Tile(192, 16, 16, 1, 2, 6)
DEC_D256 = Tile(256, 16, 16, 1, 2, 6, q_in_regs=False)  # Q in registers spills 12 bytes on sm_89
# Decode tiles: Bc such that 2 stages take 16-32 KB (4+ CTAs per SM on an L4), a divisor of 64
# (keys_per_split is a multiple of every decode tile's Bc).
DEC = {32: DEC_D32, 64: DEC_D64, 96: DEC_D96, 128: DEC_D128, 192: DEC_D192, 256: DEC_D256}
# Prefill: head dim -> ((tile, causal selection, ABIs, why), ...); the cache prefill uses the
# static tiles (its entries have static shared memory).
FWD = {
    32: ((FWD_D32, "any", BOTH,
          "FA2's hdim32 tile: 4 warps x 2 row groups, 128 keys per tile, 32 KB: 1.08x / 1.11x SDPA FLASH at "
          "(4,16,2048,32) on an H200"),),
    64: ((FWD_D64, "any", BOTH, "4 warps x 2 row groups, Q in registers, 2 K/V stages, 32 KB; eager rescale measured faster"),),
    96: ((FWD_D96_DYN, "any", CUDA,
          "4 warps x 2 row groups (every K/V fragment feeds two mmas), Q in shared memory, 2 stages of 64 keys, 72 KB "
          "dynamic: 1.03-1.47x SDPA FLASH at (4,16,2048,96) and (16,8,512,96), both flags, on an H200, where 64x128 "
          "gave 0.93-1.31x and 8 warps x 1 row group 0.79-1.26x (harness --tuning)"),
         (FWD_D96_STATIC, "0", TORNADO,
          "the 48 KB static tile, non-causal: the dynamic tile's 4 warps x 2 row groups and Q in shared memory, with "
          "one K and one V buffer of 64 keys: 0.337 ms at (4,16,2048,96) through ptx-tornado on an H200 where the "
          "64 x 64 tile gave 0.366-0.371"),
         (FWD_D96_CAUSAL_STATIC, "1", TORNADO,
          "the 48 KB static tile, causal: 4 warps x 1 row group, one K and one V buffer of 128 keys, Q in registers: "
          "0.98-1.01x the dynamic tile's time at (4,16,2048,96), (16,8,512,96) and (1,32,4096,96) causal as CUDA-driver "
          "kernels on an H200, where 2 stages of 64 keys (the tile before) gave 0.99-1.07x")),
    128: ((FWD_D128_CAUSAL, "1", BOTH,
           "64 x 64, one K and one V buffer, Q in registers, eager rescale, 2 CTAs/SM: 1.04x / 1.79x SDPA FLASH at "
           "(4,16,2048,128) / (16,8,512,128) causal on an H200, where the 64 x 48 tile at 3 CTAs/SM gave 0.99x / "
           "1.65x and, with a softcap, ran 1.28-1.30x slower in the non-causal tile it needs for registers"),
          (FWD_D128_DYN, "0", CUDA,
           "2 row groups per warp, Q in shared memory, one K and one V buffer of 48 keys loaded apart, 56 KB dynamic: "
           "0.99-1.00x SDPA FLASH at (4,16,2048,128) and 1.31x at (16,8,512,128) on an H200, where the 48 KB tile "
           "(32 keys) gave 0.95x and 1.30x in the same runs (2026-11-21 and 2026-11-26, harness --tuning)"),
          (FWD_D128, "0", TORNADO,
           "the 48 KB static tile: 2 row groups per warp (every K/V fragment feeds two mmas), Q in shared memory, one "
           "K and one V buffer of 32 keys loaded apart, eager rescale, 255 registers, 2 CTAs/SM: 0.95-0.96x SDPA FLASH "
           "where Br=64 gave 0.84-0.91x")),
    192: ((FWD_D192_DYN, "any", CUDA,
           "4 warps x 1 row group, 2 stages of 64 keys, 96 KB dynamic, 2 CTAs/SM: 1.07-1.17x SDPA FLASH at "
           "(4,16,2048,192) and (16,8,512,192), both flags, on an H200, where FA2's sm80 tile (8 warps, 128 x 64) gave "
           "0.95-0.98x with the lazy rescale and 1.00-1.04x with the eager one (which spills 8 bytes on sm_90)"),
          (FWD_D192_STATIC, "any", TORNADO,
           "the 48 KB static tile: 4 warps x 1 row group, one K and one V buffer of 64 keys, Q in registers over the V "
           "buffer; as a 72 KB tile with Q apart it ran 1.00-1.11x SDPA FLASH, where 2 stages of 32 keys (the tile it "
           "replaced) left ptx-tornado at 1.07-1.15x ptx-cuda's time")),
    256: ((FWD_D256_DYN, "any", CUDA,
           "FA2's sm86/89 hdim256 tile: split K/V of 64 keys, Q in shared memory, 96 KB dynamic: 1.04x SDPA FLASH at "
           "(4,16,2048,256) on an H200 (both flags)"),
          (FWD_D256, "any", TORNADO,
           "the 48 KB static tile for TornadoVM: Q in registers, 2 stages of 16 keys: 0.77-0.81x SDPA FLASH where the "
           "dynamic tile gives 0.97-1.03x (Q in shared memory with split K/V of 16 keys: 0.67-0.74x)")),
}
# The KV-cache prefill's tiles: the dense prefill's static ones, but at D=96 and 192 the tiles ptx-tornado ran before
# (the cache's pointers and step words do not fit beside FWD_D96_STATIC's and FWD_D192_STATIC's 253-255 registers)
# and at D=128 causal the 64 x 48 tile (the dense prefill's 64 x 64 over a cache, spill-free, took 0.80-1.05x its time
# through `prefill` on an H200, contiguous and paged, one round: not conclusive, so not adopted).
CACHE_ONLY_TILES = {96: ((FWD_D96, "any"),), 128: ((CACHE_D128_CAUSAL, "1"), (FWD_D128, "0")),
                    192: ((FWD_D192, "any"),)}
CACHE_FWD = {d: CACHE_ONLY_TILES.get(d) or tuple((t, c) for t, c, _, _ in FWD[d] if not t.dyn_smem) for d in HEAD_DIMS}
# The "_feat" entries' tile where the score features' code needs more registers than the plain tile's
# launch bounds leave: the 168-register D=128 causal cache tile spills 8-12 bytes with them; 2 CTAs/SM fits.
CACHE_D128_CAUSAL_2 = dataclasses.replace(CACHE_D128_CAUSAL, min_ctas=2)
# The "_feat" entries' tile, by (kind, the row's tile), where the plain tile does not suit the score features: the
# 168-register D=128 causal cache tile (2 CTAs/SM); the dynamic D=96 and 192 tiles spill 12-52 bytes with them unless
# they take the lazy rescale.  D=256's dynamic tile takes them eager (255 registers, no spill; 1.08-1.10x its plain
# time on an H200 where the lazy rescale took 1.13-1.16x: bench/results/h200-2026-11-26-softcap-feat-tiles.md).
# The tiles below hold no registers to spare for the softcap's multiplier and the window's left side across the tile
# loop, which the other "_feat" entries hold (a read per tile stalls it): they re-read them per tile (lean bit 32,
# kLeanRereadWords), else they spill 4-44 bytes on sm_89 or sm_90.
REREAD_WORDS = 32
FEAT_TILES = {
    ("cache-prefill", CACHE_D128_CAUSAL): CACHE_D128_CAUSAL_2,
    ("prefill", FWD_D96_DYN): dataclasses.replace(FWD_D96_DYN, opt=LAZY, lean=REREAD_WORDS),
    ("prefill", FWD_D192_DYN): dataclasses.replace(FWD_D192_DYN, opt=LAZY),
    ("prefill", FWD_D32): dataclasses.replace(FWD_D32, lean=REREAD_WORDS),
    ("cache-prefill", FWD_D32): dataclasses.replace(FWD_D32, lean=REREAD_WORDS),
    ("prefill", FWD_D128_DYN): dataclasses.replace(FWD_D128_DYN, lean=REREAD_WORDS),
    ("prefill", FWD_D128): dataclasses.replace(FWD_D128, lean=REREAD_WORDS),
    ("prefill", FWD_D192_STATIC): dataclasses.replace(FWD_D192_STATIC, lean=FWD_D192_STATIC.lean | REREAD_WORDS),
}


def cache_prefill_tile(tile, layout, abi):
    """The KV-cache prefill's tile for a dense prefill tile: the contiguous cache's entries hold the step array's
    pointers on top of the dense tile's registers, and at D=128 two tiles spill there on sm_90 (8-20 bytes): the
    non-causal one takes the lazy rescale (249 registers), the causal TornadoVM twin 2 CTAs/SM."""
    if layout == "contiguous" and tile is FWD_D128:
        return FWD_D128_LAZY
    if layout == "contiguous" and abi == "tornado" and tile is CACHE_D128_CAUSAL:
        return CACHE_D128_CAUSAL_2
    return tile

ROWS = []


def rows(*rs):
    ROWS.extend(rs)


def _suffix(tile):
    return "_qs_eager" if tile is FWD_D128 else ("_dyn" if tile.dyn_smem else ("_qs" if not tile.q_in_regs else ""))


# flash_fwd: dense prefill.
for _d in HEAD_DIMS:
    for _t, _c, _abis, _why in FWD[_d]:
        rows(Row("flash_fwd", "prefill", _t, causal=_c, abis=_abis, dtypes=SHIPPED_DTYPES, suffix=_suffix(_t), why=_why))

# flash_decode: split-KV decode (one warp per CTA, 16 packed rows = query heads of one KV head x
# Sq), its combine (CUDA driver), and the two in one launch (TornadoVM).
for _kind, _abis in (("decode-split", CUDA), ("decode-combine", CUDA), ("decode-fused", TORNADO)):
    for _d in (128, 64) + tuple(d for d in HEAD_DIMS if d not in (64, 128)):
        if _kind == "decode-combine":
            rows(Row("flash_decode", _kind, d=_d, causal="any", dtypes=SHIPPED_DTYPES))
        else:
            rows(Row("flash_decode", _kind, DEC[_d], causal="any", abis=_abis, dtypes=SHIPPED_DTYPES))

# flash_cache: attention over a contiguous or paged KV cache (CUDA driver): the shipped tiles in
# their cache modes, the combine (split count by value), append and merge.
_NEW = tuple(d for d in HEAD_DIMS if d not in (64, 128))
for _layout in ("contiguous", "paged"):
    for _d in (128, 64) + _NEW:
        rows(Row("flash_cache", "cache-decode-split", DEC[_d], causal="any", layout=_layout, dtypes=SHIPPED_DTYPES))
for _d in (128, 64) + _NEW:
    rows(Row("flash_cache", "cache-decode-combine", d=_d, causal="any", dtypes=SHIPPED_DTYPES))
for _layout in ("contiguous", "paged"):
    for _d in (64, 128) + _NEW:
        for _t, _c in (CACHE_FWD[_d][::-1] if _d == 128 else CACHE_FWD[_d]):
            rows(Row("flash_cache", "cache-prefill", cache_prefill_tile(_t, _layout, "cuda"), causal=_c, layout=_layout,
                     dtypes=SHIPPED_DTYPES))
rows(
    Row("flash_cache", "cache-append", causal="any", dtypes=SHIPPED_DTYPES),
    Row("flash_cache", "merge-states", causal="any", dtypes=SHIPPED_DTYPES),
)

# flash_cache_tornado: the TornadoVM twins of the cache kernels (a module of their own: the
# CUDA-driver host JITs the whole module it loads).
_CT = "flash_cache_tornado"
for _layout in ("contiguous", "paged"):
    for _d in (128, 64) + _NEW:
        rows(Row(_CT, "cache-decode-fused", DEC[_d], causal="any", layout=_layout, abis=TORNADO, dtypes=SHIPPED_DTYPES))
for _layout in ("contiguous", "paged"):
    for _d in (64, 128) + _NEW:
        for _t, _c in (CACHE_FWD[_d][::-1] if _d == 128 else CACHE_FWD[_d]):
            rows(Row(_CT, "cache-prefill", cache_prefill_tile(_t, _layout, "tornado"), causal=_c, layout=_layout,
                     abis=TORNADO, dtypes=SHIPPED_DTYPES))
for _kind in ("cache-append-decode-fused", "cache-staged-decode-fused"):
    for _layout in ("contiguous", "paged"):
        for _d in (128, 64) + _NEW:
            rows(Row(_CT, _kind, DEC[_d], causal="any", layout=_layout, abis=TORNADO, dtypes=SHIPPED_DTYPES))

# flash_fwd_ablation (benchmark only): each shipped dense prefill tile with exactly one
# optimisation switched off (the lazy rescale follows the shipped tile).
for _tile in (FWD_D64, FWD_D128_CAUSAL):
    for _switch in ABLATIONS:
        rows(Row("flash_fwd_ablation", "prefill", ablation(_tile, _switch), suffix="_" + _switch))

# flash_fwd_tuning (benchmark only): D=128 candidates beside the shipped D=128 entries (Bc=48 dynamic ships)
# (harness/check_and_time.py --tuning; the reasons: harness/tuning-results.md).  Launch bounds:
# 128 threads x 2 CTAs/SM leave 255 registers per thread, 256 x 1 the same; Bc=48/64 with two row
# groups sit at 255 and may spill a few bytes.
_T = Tile(128, 128, 32, 4, 1, 2, q_in_regs=False, opt=LAZY)
rows(
    Row("flash_fwd_tuning", "prefill", _T, suffix="_qs",
        why="2 row groups, Q in shared memory, split K/V pipeline, 48 KB static (its eager twin ships for TornadoVM, "
            "its Bc=48 dynamic twin for the CUDA driver)"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, bc=64, dyn_smem=True), suffix="_qs_dyn",
        why="split pipeline, Bc=64 (FA2 sm80/sm90): 64 KB"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, stages=2, dyn_smem=True), suffix="_qs_dyn",
        why="2-stage ring, Bc=32: 64 KB"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, bc=64, stages=2, dyn_smem=True), suffix="_qs_dyn",
        why="2-stage ring, Bc=64: 96 KB"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(FWD_D128_CAUSAL, opt=LAZY), suffix="_lazy",
        why="the shipped causal tile with the lazy rescale"),
    Row("flash_fwd_tuning", "prefill", Tile(128, 128, 32, 8, 2, 1, opt=LAZY),
        why="8 warps x 1 row group, Q in registers overlapping ring stage 1, 48 KB"),
    Row("flash_fwd_tuning", "prefill", Tile(128, 128, 48, 8, 2, 1, dyn_smem=True, opt=LAZY), suffix="_dyn",
        why="8 warps x 1 row group, Bc=48: 56 KB"),
    # Spill-free rebuilds of the Q-in-shared-memory candidates (Opt::kLean, kernel_traits.cuh): same
    # tiles and layout, only the code inside a K/V tile differs.  lean 5 = kLeanKsLoop | kLeanKRoles
    # (S = Q K^T k-step loop unrolled by 4, K read with the Q/V lane roles), 2 = kLeanHalves (each
    # 64-key tile as two chunks of 32), 16 = kLeanKsLoop2 (k-step loop unrolled by 2).
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, bc=64, stages=2, dyn_smem=True, lean=5),
        suffix="_qs_dyn_v2"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, bc=64, stages=2, dyn_smem=True, lean=2),
        suffix="_qs_dyn_h2"),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(_T, bc=48, dyn_smem=True, lean=16), suffix="_qs_dyn_v2"),
)
# D=96 and D=192 candidates beside their shipped dynamic tiles (FWD_D96_DYN, FWD_D192_DYN), whose
# non-causal prefill is below 0.95x SDPA FLASH; all with 96 KB of dynamic shared memory at most, spill-free
# on sm_89/sm_90 unless said.
_D96 = dict(suffix="_dyn", causal=None)
rows(
    Row("flash_fwd_tuning", "prefill", Tile(96, 128, 64, 8, 2, 1, dyn_smem=True), why="8 warps x 1 row group", **_D96),
    Row("flash_fwd_tuning", "prefill", Tile(96, 128, 128, 8, 2, 1, dyn_smem=True), why="8 warps, 128 keys", **_D96),
    Row("flash_fwd_tuning", "prefill", Tile(96, 128, 64, 8, 1, 1, dyn_smem=True), why="8 warps, split K/V", **_D96),
    Row("flash_fwd_tuning", "prefill", Tile(96, 128, 64, 4, 1, 2, q_in_regs=False, dyn_smem=True),
        why="4 warps x 2 row groups, Q in shared memory, split K/V", suffix="_qs_dyn"),
    Row("flash_fwd_tuning", "prefill", Tile(96, 64, 128, 4, 2, 2, dyn_smem=True), suffix="_dyn",
        why="4 warps x 1 row group, 2 stages of 128 keys (shipped before the 128 x 64 tile)"),
    Row("flash_fwd_tuning", "prefill", Tile(192, 64, 64, 4, 1, 2, dyn_smem=True), why="4 warps, split K/V", **_D96),
    Row("flash_fwd_tuning", "prefill", Tile(192, 128, 64, 8, 1, 1, dyn_smem=True, opt=LAZY), suffix="_dyn_lazy",
        why="8 warps, split K/V"),
    Row("flash_fwd_tuning", "prefill", Tile(192, 128, 64, 8, 2, 1, dyn_smem=True), suffix="_dyn_eager",
        why="FA2's sm80 tile, eager rescale (spills 8 bytes on sm_90)"),
    Row("flash_fwd_tuning", "prefill", Tile(192, 128, 64, 8, 2, 1, dyn_smem=True, opt=LAZY), suffix="_dyn_lazy",
        why="FA2's sm80 tile, lazy rescale (shipped before the 64 x 64 tile)"),
    Row("flash_fwd_tuning", "prefill", Tile(192, 128, 32, 8, 2, 1, dyn_smem=True), why="8 warps, 32 keys", **_D96),
)
# ptx-tornado's D=96 and D=192 48 KB static tiles timed through the CUDA-driver ABI beside the dynamic ones
# (ptx-tornado against ptx-cuda), with their alternatives.
_ST = dict(causal=None)
rows(
    Row("flash_fwd_tuning", "prefill", FWD_D96, suffix="_static", why="ptx-tornado's tile before FWD_D96_STATIC", **_ST),
    Row("flash_fwd_tuning", "prefill", FWD_D96_STATIC, suffix="_qs_static", why="ptx-tornado's shipped tile", **_ST),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(FWD_D96_STATIC, opt=(), lean=16), suffix="_qs_static_eager",
        why="eager rescale, k-step loop unrolled by 2", **_ST),
    Row("flash_fwd_tuning", "prefill", dataclasses.replace(FWD_D96_STATIC, lean=16), suffix="_qs_static_l16",
        why="lazy rescale, k-step loop unrolled by 2", **_ST),
    Row("flash_fwd_tuning", "prefill", FWD_D192, suffix="_static", why="ptx-tornado's tile before FWD_D192_STATIC", **_ST),
    Row("flash_fwd_tuning", "prefill", FWD_D192_STATIC, suffix="_static_qv", why="ptx-tornado's shipped tile", **_ST),
    Row("flash_fwd_tuning", "prefill", Tile(192, 64, 32, 4, 1, 2), suffix="_static",
        why="one K and one V buffer of 32 keys, Q in registers", **_ST),
    Row("flash_fwd_tuning", "prefill", Tile(192, 64, 32, 4, 1, 2, q_in_regs=False), suffix="_qs_static",
        why="one K and one V buffer of 32 keys, Q in shared memory (212-238 registers)", **_ST),
)
# D=256: ptx-tornado's 48 KB static tile (FWD_D256) timed through the CUDA-driver ABI beside the shipped dynamic
# one, and the Q-in-shared-memory tile it replaced.  Q in registers fits 48 KB only with 16-key stages (Q's 32 KB
# staged over stages 1..); Bc=32 would need 64 KB.
rows(
    Row("flash_fwd_tuning", "prefill", FWD_D256, suffix="_static", why="ptx-tornado's shipped tile"),
    Row("flash_fwd_tuning", "prefill", Tile(256, 64, 16, 4, 1, 2, q_in_regs=False), suffix="_qs_static",
        why="split K/V of 16 keys, Q in shared memory (ptx-tornado's tile before)"),
)


# ---- generation ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Instance:
    """One (row, dtype, features): a configuration, its traits and its entries."""
    row: Row
    dtype: str
    features: bool  # tile rows: the score features compiled in (the "_feat" entries); plain kinds: None
    tile: Tile      # the entry's tile (the row's, or its feat_tile for a "_feat" entry); None for plain kinds
    module: str    # module_of(row, dtype)
    config: str    # the configuration's name (its CUDA-driver entry's name, without an ABI tail)
    entries: tuple  # (entry name, abi, header bytes)


def base_name(row, dtype, t):
    """The configuration's name: the kind's pattern filled from the row and the entry's tile t."""
    tag = DTYPES[dtype][1]
    fields = {
        "dt": (tag + "_" if tag else "") + "d%d" % row.head_dim(),
        "tag": "_" + tag if tag else "",
        "paged": "_paged" if row.layout == "paged" else "",
        "tile": "_m%dn%dw%ds%d" % (t.br, t.bc, t.warps, t.stages) if t else "",
        "dec": "_n%ds%d" % (t.bc, t.stages) if t else "",
        "causal": "_causal" if row.causal == "1" else "",
        "sfx": row.suffix,
    }
    return KINDS[row.kind][1].format(**fields)


def feature_builds(row, module):
    """(features, tile) of each entry of a row: a shipped tile row gives an entry without the score features
    (window, softcap, sinks: the plain body, what a call without them runs) and one with them ("_feat", on
    FEAT_TILES' tile where the row's has one there); benchmark-only rows, compared with the plain entries, only the first;
    kinds without a tile (None, None) (their features are fixed in their macros)."""
    if not row.tile:
        return ((None, None),)
    plain = ((False, row.tile),)
    return plain if module.bench_only else plain + ((True, FEAT_TILES.get((row.kind, row.tile), row.tile)),)


def instances():
    modules = {m.name: m for m in MODULES}
    out = []
    for row in ROWS:
        module = modules[row.module]
        assert row.kind in KINDS, row.kind
        assert (row.tile is None) == (row.kind in PLAIN_KINDS), row
        assert module.bench_only or row.causal in ("0", "1", "any"), "shipped entries need a causal selection: %s" % (row,)
        assert row.causal in (None, "0", "1", "any"), row
        assert (row.layout in MODES) == (row.kind in CACHE_LAYOUT_KINDS), row
        for abi in row.abis:
            assert abi in KINDS[row.kind][0], "%s has no %s entry" % (row.kind, abi)
            assert abi != "tornado" or not row.tile.dyn_smem, "TornadoVM launches with static shared memory only"
        for dtype in row.dtypes:
            assert module_of(row, dtype) in modules, "no module %s" % module_of(row, dtype)
            for features, tile in feature_builds(row, module):
                config = base_name(row, dtype, tile) + ("_feat" if features else "")
                entries = tuple((config + tail, abi, hdr) for abi in row.abis for hdr, tail in ABIS[abi])
                out.append(Instance(row, dtype, features, tile, module_of(row, dtype), config, entries))
    names = [e[0] for i in out for e in i.entries]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, "two entries named %s" % sorted(dup)
    for m in MODULES:
        configs = [i.config for i in out if i.module == m.name]
        assert len(configs) == len(set(configs)), "two configurations of one name in %s" % m.name
    return out


def manifest_layout(row):
    """The manifest's layout column of the row's entries (src/flash_manifest.cuh computes the same)."""
    if row.kind in CACHE_LAYOUT_KINDS:
        return row.layout
    return "any" if row.kind in ("cache-decode-combine", "cache-append") else "none"


def row_text(row, dtype, features, t):
    """The entry's row as one comment line (what the module's stamp hashes besides the code)."""
    tile = ("d=%d br=%d bc=%d warps=%d stages=%d min_ctas=%d q=%s smem=%s opt=%s%s" % (
        t.d, t.br, t.bc, t.warps, t.stages, t.min_ctas, "regs" if t.q_in_regs else "smem",
        "dynamic" if t.dyn_smem else "static", "+".join(t.opt) or "-", " lean=%d" % t.lean if t.lean else "")
        if t else "d=%d" % row.d)
    feat = "" if features is None else " features=%s" % ("window+softcap+sinks" if features else "-")
    return "%s %s %s layout=%s causal=%s abi=%s%s" % (row.kind, dtype, tile, manifest_layout(row), row.causal or "-",
                                                       "+".join(row.abis), feat)


def module_inc(module, insts):
    lines = [
        "// Generated by generate_kernels.py from its table: do not edit (edit the table, run ./generate.sh).",
        "// %s: nvcc -arch=%s, arch family %s%s." % (module.name, module.nvcc_arch, module.arch,
                                                    ", benchmark-only" if module.bench_only else ""),
        "",
        "FLASH_MODULE_ARCH(%s)" % module.arch,
    ]
    for inst in insts:
        row, dtype = inst.row, inst.dtype
        lines.append("")
        lines.append("// " + row_text(row, dtype, inst.features, inst.tile))
        if row.why:
            lines.append("//   " + row.why)
        elem = DTYPES[dtype][0]
        if row.tile:
            kt = "Kt_" + inst.config
            lines.append("using %s = %s;" % (kt, inst.tile.traits(dtype, inst.features)))
            args = [kt] + ([MODES[row.layout]] if row.layout in MODES else [])
        elif row.kind in ("decode-combine", "cache-decode-combine"):
            args = [elem, str(row.d)]
        else:
            args = [elem]
        for entry, abi, hdr in inst.entries:
            macro = KINDS[row.kind][0][abi]
            lines.append("%s(%s)" % (macro, ", ".join([entry, inst.config] + args + ([str(hdr)] if hdr else []))))
        if row.causal is not None:
            lines.append("FLASH_SELECT(%s, %s)" % (inst.config, row.causal))
    return "\n".join(lines) + "\n"


def modules_tsv():
    lines = ["module\tnvcc_arch\tarch\tbench_only"]
    for m in MODULES:
        lines.append("%s\t%s\t%s\t%d" % (m.name, m.nvcc_arch, m.arch, 1 if m.bench_only else 0))
    return "\n".join(lines) + "\n"


def outputs():
    insts = instances()
    files = {"modules.tsv": modules_tsv()}
    for m in MODULES:
        files[m.name + ".inc"] = module_inc(m, [i for i in insts if i.module == m.name])
    return files


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("", "--check", "--list"):
        print(__doc__, file=sys.stderr)
        return 2
    if mode == "--list":
        for i in instances():
            for entry, abi, hdr in i.entries:
                print("%s\t%s\t%s\t%s\t%d" % (i.module, entry, i.row.kind, i.dtype, hdr))
        return 0
    files = outputs()
    present = set(os.listdir(OUT)) if os.path.isdir(OUT) else set()
    stale = []
    for name, text in files.items():
        path = os.path.join(OUT, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(name)
            if mode == "":
                os.makedirs(OUT, exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    extra = sorted(present - set(files))
    for name in extra:
        stale.append(name)
        if mode == "":
            os.remove(os.path.join(OUT, name))
    if mode == "--check":
        for name in stale:
            print("STALE: src/generated/%s differs from what generate_kernels.py writes (run ./generate.sh)" % name)
        return 1 if stale else 0
    if stale:
        print("generate_kernels.py: wrote src/generated/ (%s)" % ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
