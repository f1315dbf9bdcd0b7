"""The run-time score features of a problem (no torch needed): window, softcap and sinks as the params
block carries them (flash_params.cuh words P_WINDOW_LEFT=26, P_WINDOW_RIGHT=27, P_SOFTCAP=28 as float bits,
P_SINKS=29 with the sink floats after word 31)."""
import struct
from typing import NamedTuple


class Features(NamedTuple):
    """left / right: the window's sides (-1: that side unbounded); softcap: c of c*tanh(s/c) (0: off);
    sinks: one sink logit per query head.  A tuple, so (left, right, softcap, sinks) compares equal."""
    left: int = -1
    right: int = -1
    softcap: float = 0.0
    sinks: bool = False

    def names(self):
        """The manifest's features column names this problem needs (an entry must list all of them)."""
        return frozenset(n for n, on in (("window", self.left >= 0 or self.right >= 0), ("softcap", bool(self.softcap)),
                                         ("sinks", bool(self.sinks))) if on)

    def tag(self):
        t = []
        if self.left >= 0 or self.right >= 0:
            t.append(f"win({self.left},{self.right})")
        if self.softcap:
            t.append(f"cap{self.softcap:g}")
        if self.sinks:
            t.append("sinks")
        return " ".join(t)


NO_FEATURES = Features()

# Softcap problems run with scale 1 (scores ~ N(0, D)) rather than 1/sqrt(D), so that the cap changes them.
SOFTCAP_SCALE = 1.0


def f32_bits(x):
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]


def feature_tag(feat):
    return Features(*feat).tag()


def feature_words(feat, sinks_values=None):
    """Words P_WINDOW_LEFT..P_SINKS of the params block, and the sink words after P_COUNT (sinks_values: the
    Hq logits, anything with .tolist() or a list)."""
    left, right, cap, sinks = feat
    words = {"P_WINDOW_LEFT": left, "P_WINDOW_RIGHT": right, "P_SOFTCAP": f32_bits(cap) if cap else 0,
             "P_SINKS": 1 if sinks else 0}
    vals = sinks_values.tolist() if hasattr(sinks_values, "tolist") else sinks_values
    tail = [f32_bits(z) for z in vals] if sinks else []
    return words, tail


def scale_for(D, feat):
    """The softmax scale of a problem: 1/sqrt(D), or SOFTCAP_SCALE with a softcap."""
    return SOFTCAP_SCALE if feat[2] else 1.0 / D ** 0.5
