"""The problems the harness runs (no GPU needed to list them): the correctness suite, the D=128
suite of the tuning candidates, the timing shapes, and the decode split count.

A case is (B, Hq, Hkv, Sq, Skv, D, causal, layout, want_lse, tag[, features]), features = (window left,
window right, softcap, sinks?) as problem.Problem takes them (-1: unbounded side; softcap 0: off); a
case without it has none."""
import math

import split_policy

# Prefill timing shapes (B, H, S, D), causal and not; decode timing: B=8, Hq=32, Hkv=8, D=128.
TIMING_SHAPES = [(16, 8, 512, 64), (4, 16, 2048, 128), (4, 16, 2048, 64), (1, 32, 4096, 128)]
DECODE_TIMING_KV = (4096, 8192, 16384, 32768)
ABLATION_SHAPE = (4, 16, 2048)  # (B, H, S) at the variant's head dim, causal and not
TUNING_SHAPES = [(4, 16, 2048, 128), (1, 32, 4096, 128)]  # (B, H, S, D), causal and not


def num_splits_for(B, Hkv, G, Sq, Skv, rows_per_block, num_sms):
    """The split count the hosts choose for split-KV decode (LaunchTable.decodeSplits in Java): the grid of
    B x Hkv x packed row blocks is fixed by the shape (split_policy.grid_splits).
    rows_per_block: the split entry's packed rows per block (its Br in the manifest)."""
    return split_policy.grid_splits(Skv, B * Hkv * math.ceil(G * Sq / rows_per_block), num_sms)


def feature_cases(quick):
    """Window, softcap and sinks, alone and together, through the prefill and the decode entries:
    windows left only and left + right, causal and not, smaller than a key tile and not a tile
    multiple, right only, Sq != Skv both ways; softcap 30 and 50 (on scores scaled up so that the cap
    bites); sinks (rows that see no key then give lse = the sink); all three together."""
    cases = []
    for D in (64, 128):
        for c in (False, True):
            cases += [
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
            for (Sq, Skv) in ((1, 4097), (4, 9000), (16, 1000), (1, 100)) if not quick else ((1, 4097), (4, 9000)):
                cases += [
                    (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode win", (1000, -1, 0.0, False)),
                    (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode win small", (20, 2, 0.0, False)),
                    (1, 8, 1, Sq, Skv, D, c, "bshd", True, "decode cap+sinks", (-1, -1, 30.0, True)),
                    (2, 8, 2, Sq, Skv, D, c, "bhsd", True, "decode all", (511, 3, 50.0, True)),
                ]
    return cases


# Softcap cases run with scale 1 (scores ~ N(0, D)) rather than 1/sqrt(D), so that the cap changes them.
SOFTCAP_SCALE = 1.0


def suite(quick, rng):
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
    cases += feature_cases(quick)
    for _ in range(n_rand // 2):  # random features on random shapes
        Hkv, G, D = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([64, 128])
        Sq = rng.randint(1, 1500) if rng.random() < 0.7 else rng.randint(1, 16)
        Skv = rng.randint(1, 3000)
        feat = (rng.choice([-1, 0, 1, 17, 64, 300]), rng.choice([-1, -1, 0, 5, 100]), rng.choice([0.0, 0.0, 20.0, 50.0]),
                rng.random() < 0.5)
        cases.append((rng.randint(1, 2), Hkv * G, Hkv, Sq, Skv, D, rng.random() < 0.5, rng.choice(["bhsd", "bshd"]),
                      rng.random() < 0.8, "random features", feat))
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
    return cases
