"""The problems the harness runs (no GPU needed to list them): the correctness suite, the D=128
suite of the tuning candidates, the timing shapes, and the decode split count.

A case is (B, Hq, Hkv, Sq, Skv, D, causal, layout, want_lse, tag, dtype)."""
import math

import split_policy
from manifest import DTYPES, HEAD_DIMS

# Prefill timing shapes (B, H, S, D), causal and not, in each element type: (4,16,2048,D) and
# (16,8,512,D) for every head dim, plus the long D=128 one; decode timing: B=8, Hq=32, Hkv=8, D=128.
TIMING_SHAPES = ([(16, 8, 512, D) for D in HEAD_DIMS] + [(4, 16, 2048, D) for D in HEAD_DIMS]
                 + [(1, 32, 4096, 128)])
DECODE_TIMING_KV = (4096, 8192, 16384, 32768)
ABLATION_SHAPE = (4, 16, 2048)  # (B, H, S) at the variant's head dim, causal and not
TUNING_SHAPES = [(4, 16, 2048, 128), (1, 32, 4096, 128)]  # (B, H, S, D), causal and not


def num_splits_for(B, Hkv, G, Sq, Skv, rows_per_block, num_sms):
    """The split count the hosts choose for split-KV decode (LaunchTable.decodeSplits in Java): the grid of
    B x Hkv x packed row blocks is fixed by the shape (split_policy.grid_splits).
    rows_per_block: the split entry's packed rows per block (its Br in the manifest)."""
    return split_policy.grid_splits(Skv, B * Hkv * math.ceil(G * Sq / rows_per_block), num_sms)


def suite(quick, rng):
    """The fp16 D=64/128 suite of the seeds, then every head dim in both element types (_head_dim_cases)."""
    cases = [c + ("fp16",) for c in _fp16_suite(quick, rng)]
    for dtype in DTYPES:
        for D in HEAD_DIMS:
            if dtype == "fp16" and D in (64, 128):
                continue  # the suite above
            cases += [c + (dtype,) for c in _head_dim_cases(D, quick, rng)]
    return cases


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
            cases += [
                (2, 4, 4, 77, 1000, D, c, "bhsd", True, "sq<skv odd"),
                (2, 4, 4, 1000, 77, D, c, "bhsd", True, "sq>skv odd"),
                (1, 2, 2, 1, 1, D, c, "bhsd", True, "1x1"),
                (1, 3, 3, 7, 7, D, c, "bhsd", True, "7x7"),
                (1, 2, 2, 2049, 2049, D, c, "bhsd", True, "2049"),
                (2, 8, 2, 300, 517, D, c, "bhsd", True, "gqa"),
                (2, 8, 1, 333, 333, D, c, "bhsd", True, "mqa"),
                (2, 6, 3, 259, 1031, D, c, "bshd", True, "bshd gqa"),
                (1, 4, 4, 64, 200, D, c, "bshd", False, "bshd nolse"),
                (1, 2, 2, 130, 3, D, c, "bhsd", True, "sq>>skv"),
            ]
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


def tuning_cases(rng):
    """D=128 problems for the candidates: ragged ends, Sq != Skv, GQA/MQA, BSHD, no lse, tiny
    and long-key problems, causal and not, plus a few random ones (suite() format)."""
    cases = []
    for c in (False, True):
        cases += [(2, 8, 8, 1024, 1024, 128, c, "bhsd", True, "seed-d128"),
                  (2, 4, 4, 77, 1000, 128, c, "bhsd", True, "sq<skv odd"),
                  (2, 4, 4, 1000, 77, 128, c, "bhsd", True, "sq>skv odd"),
                  (1, 3, 3, 7, 7, 128, c, "bhsd", True, "7x7"),
                  (1, 2, 2, 2049, 2049, 128, c, "bhsd", True, "2049"),
                  (2, 8, 2, 300, 517, 128, c, "bhsd", True, "gqa"),
                  (2, 8, 1, 333, 333, 128, c, "bhsd", True, "mqa"),
                  (2, 6, 3, 259, 1031, 128, c, "bshd", True, "bshd gqa"),
                  (1, 4, 4, 64, 200, 128, c, "bshd", False, "bshd nolse"),
                  (1, 2, 2, 130, 3, 128, c, "bhsd", True, "sq>>skv"),
                  (2, 4, 4, 5, 9000, 128, c, "bhsd", True, "short q long kv")]
    for _ in range(6):
        Hkv, G = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
        Sq = rng.randint(1, 2100)
        Skv = rng.randint(1, 2100) if rng.random() < 0.7 else Sq
        cases.append((rng.randint(1, 3), Hkv * G, Hkv, Sq, Skv, 128, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.7, "random"))
    return [c + ("fp16",) for c in cases]
