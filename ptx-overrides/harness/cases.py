"""The problems the harness runs (no GPU needed to list them): the correctness suite, the suite of
the tuning candidates (per head dim), the timing shapes, and the decode split count.

A case is a Case: the shape, causal, layout, want_lse, a tag, its element type and its score features
(features.Features: window, softcap, sinks; NO_FEATURES for none).  The generators below write the shape part
as (B, Hq, Hkv, Sq, Skv, D, causal, layout, want_lse, tag) tuples and name the rest (_cases)."""
import math
from dataclasses import dataclass, field

import split_policy
from features import NO_FEATURES, Features
from manifest import DTYPES, HEAD_DIMS

# Prefill timing shapes (B, H, S, D), causal and not, in each element type: (4,16,2048,D) and
# (16,8,512,D) for every head dim, plus the long D=128 one; decode timing: B=8, Hq=32, Hkv=8, D=128.
TIMING_SHAPES = ([(16, 8, 512, D) for D in HEAD_DIMS] + [(4, 16, 2048, D) for D in HEAD_DIMS]
                 + [(1, 32, 4096, 128)])
DECODE_TIMING_KV = (4096, 8192, 16384, 32768)
ABLATION_SHAPE = (4, 16, 2048)  # (B, H, S) at the variant's head dim, causal and not
TUNING_SHAPES = [(4, 16, 2048), (16, 8, 512)]  # (B, H, S) at each candidate's head dim, causal and not


@dataclass(frozen=True)
class Case:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Skv: int
    D: int
    causal: bool
    layout: str
    want_lse: bool
    tag: str
    dtype: str = "fp16"
    feat: Features = field(default=NO_FEATURES)

    def __post_init__(self):
        object.__setattr__(self, "feat", Features(*self.feat))

    def describe(self):
        f = self.feat.tag()
        return (f"{self.tag} {self.dtype} B{self.B} Hq{self.Hq} Hkv{self.Hkv} Sq{self.Sq} Skv{self.Skv} D{self.D} "
                f"{'causal' if self.causal else 'full'} {self.layout}" + (f" {f}" if f else ""))


def _cases(tuples, dtype, feat=NO_FEATURES):
    """Cases of (B, Hq, Hkv, Sq, Skv, D, causal, layout, want_lse, tag[, features]) tuples in one element type."""
    return [Case(*t[:10], dtype=dtype, feat=t[10] if len(t) > 10 else feat) for t in tuples]


def num_splits_for(B, Hkv, G, Sq, Skv, rows_per_block, num_sms):
    """The split count the hosts choose for split-KV decode (LaunchTable.decodeSplits in Java): the grid of
    B x Hkv x packed row blocks is fixed by the shape (split_policy.grid_splits).
    rows_per_block: the split entry's packed rows per block (its Br in the manifest)."""
    return split_policy.grid_splits(Skv, B * Hkv * math.ceil(G * Sq / rows_per_block), num_sms)


# The feature problems' head dims per element type: every shape of feature_cases at these ...
FEATURE_HEAD_DIMS = {"fp16": (64, 128), "bf16": (128,)}
# ... and a short list (feature_cases(..., short=True)) at these: the smallest, odd-chunk and largest dims.
FEATURE_SHORT_HEAD_DIMS = {"fp16": (32, 96, 256), "bf16": (64, 192)}


def suite(quick, rng):
    """The fp16 D=64/128 suite of the seeds, then every head dim in both element types (_head_dim_cases),
    then the window / softcap / sinks problems (features_suite)."""
    cases = _cases(_fp16_suite(quick, rng), "fp16")
    for dtype in DTYPES:
        for D in HEAD_DIMS:
            if dtype == "fp16" and D in (64, 128):
                continue  # the suite above
            cases += _cases(_head_dim_cases(D, quick, rng), dtype)
    return cases + features_suite(quick, rng)


def features_suite(quick, rng):
    """Window, softcap and sinks in both element types and several head dims (FEATURE_HEAD_DIMS,
    FEATURE_SHORT_HEAD_DIMS), then random features on random shapes (fp16 D=64/128, bf16 D=128/256)."""
    cases = []
    for dtype in DTYPES:
        for D in FEATURE_HEAD_DIMS[dtype]:
            cases += feature_cases(D, dtype, quick)
        for D in FEATURE_SHORT_HEAD_DIMS[dtype]:
            cases += feature_cases(D, dtype, quick, short=True)
    for i in range(5 if quick else 25):  # random features on random shapes
        dtype = "bf16" if i % 3 == 2 else "fp16"
        Hkv, G = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
        D = rng.choice([64, 128] if dtype == "fp16" else [128, 256])
        Sq = rng.randint(1, 1500) if rng.random() < 0.7 else rng.randint(1, 16)
        Skv = rng.randint(1, 3000)
        feat = Features(rng.choice([-1, 0, 1, 17, 64, 300]), rng.choice([-1, -1, 0, 5, 100]),
                        rng.choice([0.0, 0.0, 20.0, 50.0]), rng.random() < 0.5)
        cases.append(Case(rng.randint(1, 2), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                          rng.random() < 0.8, "random features", dtype, feat))
    return cases


def feature_cases(D, dtype, quick, short=False):
    """Window, softcap and sinks, alone and together, through the prefill and the decode entries at one head
    dim and element type: windows left only and left + right, causal and not, smaller than a key tile and
    not a tile multiple, right only, Sq != Skv both ways; softcap 30 and 50 (on scores scaled up so that the
    cap bites: features.SOFTCAP_SCALE); sinks (rows that see no key then give lse = the sink); all three
    together.  short: one causal flag per shape and fewer shapes (the extra head dims)."""
    t = []
    for c in ((False, True) if not short else (None,)):
        prefill = [
            (2, 4, 2, 300, 517, D, c, "bhsd", True, "win left", (100, -1, 0.0, False)),
            (1, 4, 4, 600, 600, D, c, "bhsd", True, "win left+right", (128, 64, 0.0, False)),
            (1, 4, 4, 257, 1000, D, c, "bshd", True, "win < tile", (5, 3, 0.0, False)),
            (1, 2, 2, 200, 300, D, c, "bhsd", True, "win right", (-1, 7, 0.0, False)),
            (1, 4, 1, 1000, 77, D, c, "bhsd", True, "win sq>skv", (30, -1, 0.0, False)),
            (1, 2, 2, 129, 2049, D, c, "bhsd", True, "win 0,0", (0, 0, 0.0, False)),
            (2, 4, 2, 259, 1031, D, c, "bshd", True, "softcap30", (-1, -1, 30.0, False)),
            (1, 4, 4, 333, 333, D, c, "bhsd", True, "softcap50", (-1, -1, 50.0, False)),
            (2, 4, 2, 130, 300, D, c, "bhsd", True, "sinks", (-1, -1, 0.0, True)),
            (1, 2, 2, 130, 3, D, c, "bhsd", True, "sinks sq>>skv", (-1, -1, 0.0, True)),
            (2, 8, 2, 333, 700, D, c, "bhsd", True, "win+cap+sinks", (64, 16, 50.0, True)),
            (1, 4, 4, 64, 200, D, c, "bshd", False, "win+cap+sinks nolse", (40, -1, 30.0, True)),
        ]
        # decode shapes: the splits cover the window's span only
        decode = []
        for (Sq, Skv) in ((1, 4097), (4, 9000), (16, 1000), (1, 100)) if not (quick or short) else ((1, 4097), (4, 9000)):
            decode += [
                (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode win", (1000, -1, 0.0, False)),
                (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode win small", (20, 2, 0.0, False)),
                (1, 8, 1, Sq, Skv, D, c, "bshd", True, "decode cap+sinks", (-1, -1, 30.0, True)),
                (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode all", (511, 3, 50.0, True)),
            ]
        if short:  # every other shape, alternating causal
            prefill, decode = prefill[::2], decode[::2]
            prefill = [p[:6] + (i % 2 == 1,) + p[7:] for i, p in enumerate(prefill)]
            decode = [p[:6] + (i % 2 == 0,) + p[7:] for i, p in enumerate(decode)]
        t += prefill + decode
    return _cases(t, dtype)


def _head_dim_cases(D, quick, rng):
    """One head dim in one element type: ragged ends, Sq != Skv, GQA/MQA, BSHD, no lse, decode shapes."""
    cases = []
    for c in (False, True):
        cases += [(2, 8, 8, 512, 512, D, c, "bhsd", True, "seed"),
                  (2, 4, 4, 77, 1000, D, c, "bhsd", True, "sq<skv odd"),
                  (2, 4, 4, 1000, 77, D, c, "bhsd", True, "sq>skv odd"),
                  (1, 3, 3, 7, 7, D, c, "bhsd", True, "7x7"),
                  (2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa"),
                  (2, 8, 1, 333, 333, D, c, "bhsd", True, "mqa"),
                  (2, 6, 3, 259, 1031, D, c, "bshd", True, "bshd gqa"),
                  (1, 4, 4, 64, 200, D, c, "bshd", False, "bshd nolse")]
        if not quick:
            cases += [(1, 2, 2, 2049, 2049, D, c, "bhsd", True, "2049"),
                      (1, 2, 2, 130, 3, D, c, "bhsd", True, "sq>>skv")]
    for Sq in ((1, 16) if quick else (1, 5, 16)):
        for Skv in (1, 100, 4097):
            cases.append((2, 8, 2, Sq, Skv, D, Sq > 1 and Skv % 2 == 1, "bhsd", True, "decode"))
    cases.append((1, 32, 8, 1, 32768, D, False, "bhsd", True, "decode 32K"))
    for _ in range(2 if quick else 6):
        Hkv, G = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
        Sq = rng.randint(1, 1500)
        Skv = rng.randint(1, 1500) if rng.random() < 0.7 else Sq
        cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.7, "random"))
    return cases


def _fp16_suite(quick, rng):
    cases = []  # (B, Hq, Hkv, Sq, Skv, D, causal, layout, lse, tag)
    seeds = [(1, 8, 512, 64), (8, 8, 128, 64), (16, 8, 512, 64), (4, 16, 2048, 64), (2, 8, 1024, 64), (1, 4, 2048, 64),
             (4, 8, 256, 64)]
    for (B, H, S, D) in seeds:
        for c in (False, True):
            cases.append((B, H, H, S, S, D, c, "bhsd", True, "seed"))
            if not quick:
                cases.append((B, H, H, S, S, 128, c, "bhsd", True, "seed-d128"))
    for c in (False, True):
        for D in (64, 128):
            cases += _edge_cases(D, c) + [(1, 2, 2, 1, 1, D, c, "bhsd", True, "1x1")]
    # decode shapes (also run through the prefill entries)
    for D in (128, 64):
        for Sq in (1, 2, 5, 8, 16):
            for Skv in (1, 100, 4097, 32768):
                c = Sq > 1 and Skv % 2 == 1
                cases.append((2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode"))
        cases += [(1, 32, 8, 1, 131072, D, False, "bhsd", True, "decode 128K"),
                  (1, 8, 1, 16, 131072, D, True, "bshd", True, "decode 128K mqa causal"),
                  (2, 16, 16, 4, 9000, D, True, "bhsd", True, "decode mha causal"),
                  (1, 4, 4, 16, 5, D, True, "bhsd", True, "decode sq>skv")]
    n_rand = 10 if quick else 50
    for _ in range(n_rand):
        Hkv = rng.choice([1, 2, 4])
        G = rng.choice([1, 2, 4])
        D = rng.choice([64, 128])
        Sq = rng.randint(1, 2100)
        Skv = rng.randint(1, 2100) if rng.random() < 0.7 else Sq
        cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.7, "random"))
    return cases


def _edge_cases(D, c):
    """The edge shapes both the suite and the tuning suite run at head dim D, causal flag c: ragged ends, Sq != Skv
    both ways, tiny and long, GQA/MQA, BSHD, no lse (suite() format)."""
    return [(2, 4, 4, 77, 1000, D, c, "bhsd", True, "sq<skv odd"),
            (2, 4, 4, 1000, 77, D, c, "bhsd", True, "sq>skv odd"),
            (1, 3, 3, 7, 7, D, c, "bhsd", True, "7x7"),
            (1, 2, 2, 2049, 2049, D, c, "bhsd", True, "2049"),
            (2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa"),
            (2, 8, 1, 333, 333, D, c, "bhsd", True, "mqa"),
            (2, 6, 3, 259, 1031, D, c, "bshd", True, "bshd gqa"),
            (1, 4, 4, 64, 200, D, c, "bshd", False, "bshd nolse"),
            (1, 2, 2, 130, 3, D, c, "bhsd", True, "sq>>skv")]


def tuning_cases(rng, head_dims):
    """Problems for the candidates at each of their head dims: ragged ends, Sq != Skv, GQA/MQA, BSHD,
    no lse, tiny and long-key problems, causal and not, plus a few random ones (suite() format)."""
    cases = []
    for D in head_dims:
        for c in (False, True):
            cases += ([(2, 8, 8, 1024, 1024, D, c, "bhsd", True, f"seed-d{D}")] + _edge_cases(D, c)
                      + [(2, 4, 4, 5, 9000, D, c, "bhsd", True, "short q long kv")])
        for _ in range(6):
            Hkv, G = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
            Sq = rng.randint(1, 2100)
            Skv = rng.randint(1, 2100) if rng.random() < 0.7 else Sq
            cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5,
                          rng.choice(["bhsd", "bshd"]), rng.random() < 0.7, "random"))
    return _cases(cases, "fp16")
