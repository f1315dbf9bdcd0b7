"""The decode split policy of every host, as the harness runs it: a line-for-line mirror of
src/main/java/io/github/tornadoattention/ptx/DecodeSplitPolicy.java (its javadoc says why), which
DecodeSplitPolicyTest compares with this file over a grid of inputs. Java's Math.round rounds half up;
Python's round() rounds half to even, hence _round_half_up.
"""
import math
import sys

GRANULE = 256
MAX_SPLITS = 128
BLOCKS_PER_SM = 4
SPAN_ALIGN = 64


def _round_half_up(x):
    return math.floor(x + 0.5)


def _ceil_div(a, b):
    return -(-a // b)


def key_span(length, queries, causal, left, right):
    """Keys the queries at the end of a sequence see together (DecodeSplitPolicy.keySpan): from the first
    query's first visible key to the last query's last; the window's span, not the context."""
    if length <= 0:
        return 0
    first_pos = length - max(1, queries)
    first = 0 if left < 0 else min(length, max(0, first_pos - left))
    pos = length - 1
    last = length - 1
    if causal:
        last = min(last, pos)
    if right >= 0:
        last = min(last, pos + right)
    last = max(-1, last)
    return max(0, min(length, last - first + 1))


def cache_span_start(length, new_tokens, window_left):
    """A cache split pass's first key (DecodeSplitPolicy.cacheSpanStart, flash_params.cuh cache_span_start): the first
    query's first visible key, rounded down to a multiple of SPAN_ALIGN; 0 without a left window side."""
    return max(0, length - new_tokens - window_left) // SPAN_ALIGN * SPAN_ALIGN if window_left >= 0 else 0


def grid_splits(keys, blocks_per_split, sms):
    """Splits of a grid fixed at plan time (DecodeSplitPolicy.gridSplits)."""
    wanted = _round_half_up(BLOCKS_PER_SM * sms / max(1, blocks_per_split))
    by_length = _ceil_div(max(0, keys), GRANULE)
    return max(1, min(wanted, by_length, MAX_SPLITS))


def max_splits(capacity):
    return max(1, min(MAX_SPLITS, _ceil_div(max(0, capacity), GRANULE)))


def fixed_for_capacity(capacity):
    """(keys per split, splits), both fixed for the capacity (DecodeSplitPolicy.fixedForCapacity)."""
    granules = max(1, _ceil_div(capacity, GRANULE))
    kps = _ceil_div(granules, max_splits(capacity)) * GRANULE
    return kps, max(1, _ceil_div(capacity, kps))


def for_lengths(lens, news, blocks_per_granule, sms, capacity):
    """(keys per split, splits) from the lengths of the sequences with queries (DecodeSplitPolicy.forLengths)."""
    granules = sum(_ceil_div(max(0, L), GRANULE) for L, n in zip(lens, news) if n > 0)
    max_len = max([L for L, n in zip(lens, news) if n > 0], default=0)
    per = max(1, _round_half_up(granules * blocks_per_granule / (BLOCKS_PER_SM * sms)))
    by_cap = _ceil_div(max_len, max_splits(capacity) * GRANULE)
    kps = max(per, by_cap, 1) * GRANULE
    return kps, max(1, _ceil_div(max_len, kps))


def derived_keys_per_split(max_len, splits, key_tile):
    """The device's keys per split for a fixed grid (params[P_KEYS_PER_SPLIT] = 0)."""
    return _ceil_div(_ceil_div(max_len, splits), key_tile) * key_tile


if __name__ == "__main__":
    # Evaluates one call per line of stdin, "name arg arg ...", lists as comma-separated ints; prints one
    # result per line (for DecodeSplitPolicyTest).
    for line in sys.stdin:
        name, *args = line.split()
        vals = [[int(x) for x in a.split(",") if x] if "," in a else int(a) for a in args]
        out = globals()[name](*vals)
        print(" ".join(map(str, out)) if isinstance(out, tuple) else out)
