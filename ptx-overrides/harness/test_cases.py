"""Tests of the case list and the score features (no GPU): every case carries an element type and features,
feature cases exist in both element types at several head dims, the params words; with torch installed, the
float64 reference (problem.py on the CPU) against a per-row restatement of the definition.

  cd ptx-overrides/harness && python3 -m unittest -q test_cases
"""
import math
import random
import unittest

import manifest
from cases import Case, FEATURE_HEAD_DIMS, feature_cases, features_suite, suite, tuning_cases
from features import NO_FEATURES, Features, f32_bits, feature_words, scale_for

try:
    import torch
except ImportError:  # the reference test needs torch (CPU is enough)
    torch = None


class CasesTest(unittest.TestCase):
    def test_every_case_has_a_type_and_features(self):
        for quick in (False, True):
            for c in suite(quick, random.Random(7)) + tuning_cases(random.Random(7), manifest.HEAD_DIMS):
                self.assertIsInstance(c, Case)
                self.assertIn(c.dtype, manifest.DTYPES)
                self.assertIsInstance(c.feat, Features)
                self.assertIn(c.D, manifest.HEAD_DIMS)
                self.assertEqual(c.Hq % c.Hkv, 0)

    def test_feature_cases_in_both_types_and_several_head_dims(self):
        cases = suite(False, random.Random(3))
        for dtype in manifest.DTYPES:
            dims = {c.D for c in cases if c.dtype == dtype and c.feat != NO_FEATURES}
            self.assertGreaterEqual(len(dims), 3, dtype)
            self.assertTrue(set(FEATURE_HEAD_DIMS[dtype]) <= dims)
            kinds = {tuple(sorted(c.feat.names())) for c in cases if c.dtype == dtype}
            for k in (("window",), ("softcap",), ("sinks",), ("sinks", "softcap", "window")):
                self.assertIn(k, kinds, dtype)
            self.assertTrue(any(c.dtype == dtype and c.feat.names() and c.Sq <= 16 for c in cases))  # decode

    def test_tuning_and_plain_cases_have_none(self):
        self.assertTrue(all(c.feat == NO_FEATURES for c in tuning_cases(random.Random(1), (96, 192))))

    def test_tuning_cases_cover_each_head_dim_asked_for_both_flags(self):
        cases = tuning_cases(random.Random(1), (96, 192))
        for D in (96, 192):
            self.assertEqual({False, True}, {c.causal for c in cases if c.D == D and c.tag != "random"})
        self.assertEqual({96, 192}, {c.D for c in cases})

    def test_short_list_alternates_causal(self):
        full, short = feature_cases(64, "bf16", False), feature_cases(64, "bf16", False, short=True)
        self.assertLess(len(short), len(full) // 4)
        self.assertEqual({c.causal for c in short}, {False, True})
        self.assertTrue(all(c.dtype == "bf16" and c.D == 64 for c in short))

    def test_random_features_are_reproducible(self):
        self.assertEqual(features_suite(True, random.Random(5)), features_suite(True, random.Random(5)))

    def test_feature_words(self):
        P = manifest.param_index()
        self.assertEqual((P["P_WINDOW_LEFT"], P["P_WINDOW_RIGHT"], P["P_SOFTCAP"], P["P_SINKS"]), (26, 27, 28, 29))
        words, tail = feature_words(Features(100, 3, 30.0, True), [0.5, -2.0])
        self.assertEqual(words, {"P_WINDOW_LEFT": 100, "P_WINDOW_RIGHT": 3, "P_SOFTCAP": f32_bits(30.0), "P_SINKS": 1})
        self.assertEqual(tail, [f32_bits(0.5), f32_bits(-2.0)])
        words, tail = feature_words(NO_FEATURES)
        self.assertEqual(words, {"P_WINDOW_LEFT": -1, "P_WINDOW_RIGHT": -1, "P_SOFTCAP": 0, "P_SINKS": 0})
        self.assertEqual(tail, [])
        self.assertEqual(scale_for(64, NO_FEATURES), 0.125)
        self.assertEqual(scale_for(64, (-1, -1, 50.0, False)), 1.0)
        self.assertEqual(Features(5, -1).names(), {"window"})
        self.assertEqual(Features(-1, -1, 0.0, False), (-1, -1, 0.0, False))


@unittest.skipIf(torch is None, "torch not installed")
class ReferenceTest(unittest.TestCase):
    """problem.Problem.reference on the CPU against a row-by-row restatement of CpuReference.softmaxRow."""

    def brute(self, pb):
        left, right, cap, _ = pb.feat
        G = pb.Hq // pb.Hkv
        o = torch.zeros(pb.B, pb.Hq, pb.Sq, pb.D, dtype=torch.float64)
        lse = torch.zeros(pb.B, pb.Hq, pb.Sq, dtype=torch.float64)
        for b in range(pb.B):
            for h in range(pb.Hq):
                z = float(pb.sinks[h]) if pb.sinks is not None else -math.inf
                for i in range(pb.Sq):
                    p = i + pb.Skv - pb.Sq
                    js = [j for j in range(pb.Skv) if (not pb.causal or j <= p) and (left < 0 or j >= p - left)
                          and (right < 0 or j <= p + right)]
                    s = [pb.scale * float(pb.q[b, h, i].double() @ pb.k[b, h // G, j].double()) for j in js]
                    if cap:
                        s = [cap * math.tanh(x / cap) for x in s]
                    m = max(s + [z])
                    if m == -math.inf:
                        lse[b, h, i] = -math.inf
                        continue
                    den = math.exp(z - m) + sum(math.exp(x - m) for x in s)
                    lse[b, h, i] = m + math.log(den)
                    for x, j in zip(s, js):
                        o[b, h, i] += math.exp(x - m) / den * pb.v[b, h // G, j].double()
        return o, lse

    def test_reference_matches_the_definition(self):
        import problem
        problem.DEVICE = "cpu"
        gen = torch.Generator()
        gen.manual_seed(11)
        for dtype, D, causal, layout, Sq, Skv, feat in (
                ("fp16", 32, True, "bhsd", 7, 19, (3, -1, 0.0, False)),
                ("bf16", 64, False, "bshd", 5, 12, (-1, 2, 0.0, True)),
                ("bf16", 32, True, "bhsd", 9, 4, (0, 0, 20.0, True)),   # rows that see no key: lse = the sink
                ("fp16", 64, False, "bhsd", 3, 40, (-1, -1, 5.0, False)),
                ("bf16", 32, False, "bhsd", 4, 6, NO_FEATURES)):
            pb = problem.Problem(1, 4, 2, Sq, Skv, D, causal, layout, gen=gen, dtype=dtype, feat=feat)
            self.assertEqual(pb.q.dtype, problem.torch_dtype(dtype))
            o, lse = pb.reference()
            ob, lb = self.brute(pb)
            self.assertTrue(torch.allclose(o, ob, atol=1e-9), (dtype, feat))
            self.assertTrue(torch.equal(torch.isneginf(lse), torch.isneginf(lb)), (dtype, feat))
            fin = torch.isfinite(lb)
            self.assertTrue(torch.allclose(lse[fin], lb[fin], atol=1e-9), (dtype, feat))
            prm = pb.params(pb.new_out()[0]).tolist()
            self.assertEqual(prm[26:30], [feat[0], feat[1], f32_bits(feat[2]) if feat[2] else 0, int(feat[3])])
            self.assertEqual(len(prm), 32 + (pb.Hq if feat[3] else 0))


if __name__ == "__main__":
    unittest.main()
