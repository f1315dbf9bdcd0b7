"""The harness's selection of kernels by variant (manifest.select_variant), without a GPU or torch:

  cd ptx-overrides/harness && python3 -m unittest test_manifest

A toy manifest shows the rules KernelManifestTest shows for the Java lookup (the two must agree); the shipped
manifest shows that every variant the harness asks for resolves to one entry, the entry it named by hand
before it selected by variant.
"""
import unittest

import manifest
from manifest import (CACHE_APPEND, CACHE_APPEND_FUSED, CACHE_COMBINE, CACHE_FUSED, CACHE_PREFILL, CACHE_SPLIT,
                      CACHE_STAGED_FUSED, DTYPES, HEAD_DIMS, MERGE_STATES, PREFILL, Refused, module_of, select_variant)

HEADER = ("module\tentry\tkind\tdtype\thead_dim\tcausal\tlayout\tfeatures\tabi\theader_bytes\tarch\tbr\tbc\twarps"
          "\tthreads\tstages\tq_in_smem\topt\tsmem_dynamic\tsmem_static\tregs_sm_89\tregs_sm_90")


def row(entry, kind, dtype, head_dim, causal, layout, features, header, br):
    abi = "cuda" if header == 0 else "tornado"
    return (f"a.ptx\t{entry}\t{kind}\t{dtype}\t{head_dim}\t{causal}\t{layout}\t{features}\t{abi}\t{header}\tsm80"
            f"\t{br}\t64\t4\t128\t2\t0\t-\t0\t0\t0\t0")


# The toy table of KernelManifestTest.
TOY = manifest.parse("\n".join([
    HEADER,
    row("full", "prefill", "fp16", 64, "0", "none", "-", 0, 128),
    row("causal", "prefill", "fp16", 64, "1", "none", "-", 0, 64),
    row("causal_t", "prefill", "fp16", 64, "1", "none", "-", 16, 64),
    row("bench", "prefill", "fp16", 64, "-", "none", "-", 0, 128),
    row("paged_any", "cache-prefill", "fp16", 128, "any", "paged", "window+softcap", 0, 128),
    row("append", "cache-append", "fp16", 0, "any", "any", "-", 0, 0),
]))
SHIPPED = manifest.load()


class ToyManifestTest(unittest.TestCase):
    def test_selection_is_by_the_whole_variant(self):
        self.assertEqual("full", select_variant(TOY, "prefill", "fp16", 64, False).entry)
        self.assertEqual("causal", select_variant(TOY, "prefill", "fp16", 64, True).entry)
        self.assertEqual("causal_t", select_variant(TOY, "prefill", "fp16", 64, True, header_bytes=16).entry)
        self.assertEqual(64, select_variant(TOY, "prefill", "fp16", 64, True).br)
        self.assertEqual("paged_any", select_variant(TOY, "cache-prefill", "fp16", 128, True, "paged",
                                                     features=("window",)).entry)
        # head dim 0 and layout "any": the append serves every head dim and both cache layouts, never a dense call.
        self.assertEqual("append", select_variant(TOY, "cache-append", "fp16", 96, False, "contiguous").entry)
        self.assertEqual("append", select_variant(TOY, "cache-append", "fp16", 96, False, "paged").entry)
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "cache-append", "fp16", 96, False)
        self.assertEqual("layout", r.exception.argument)

    def test_a_variant_no_entry_serves_is_refused_naming_the_argument_and_listing_what_is_served(self):
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "prefill", "bf16", 64, False)
        self.assertEqual("dtype", r.exception.argument)
        self.assertIn("served prefill variants (CUDA driver, sm80): fp16 D=64 non-causal, fp16 D=64 causal",
                      str(r.exception))
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "prefill", "fp16", 96, False)
        self.assertEqual("headDim", r.exception.argument)
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "prefill", "fp16", 64, False, header_bytes=16)
        self.assertEqual("causal", r.exception.argument)
        self.assertIn("(TornadoVM 16-byte header, sm80): fp16 D=64 causal", str(r.exception))
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "cache-prefill", "fp16", 128, False, "paged", features=("sinks",))
        self.assertEqual("features", r.exception.argument)
        with self.assertRaises(Refused) as r:
            select_variant(TOY, "cache-prefill", "fp16", 128, False, "contiguous")
        self.assertEqual("layout", r.exception.argument)

    def test_of_entries_that_serve_a_variant_the_one_with_fewest_features_runs(self):
        both = manifest.parse("\n".join([HEADER, row("plain", "prefill", "fp16", 64, "any", "none", "-", 0, 64),
                                          row("windowed", "prefill", "fp16", 64, "any", "none", "window", 0, 64),
                                          row("all", "prefill", "fp16", 64, "any", "none", "window+softcap+sinks", 0, 64)]))
        self.assertEqual("plain", select_variant(both, "prefill", "fp16", 64, False).entry)
        self.assertEqual("windowed", select_variant(both, "prefill", "fp16", 64, False, features=("window",)).entry)
        self.assertEqual("all", select_variant(both, "prefill", "fp16", 64, False, features=("sinks",)).entry)

    def test_two_entries_for_one_variant_are_an_error(self):
        twice = manifest.parse("\n".join([HEADER, row("a", "prefill", "fp16", 64, "any", "none", "-", 0, 64),
                                          row("b", "prefill", "fp16", 64, "0", "none", "-", 0, 64)]))
        with self.assertRaisesRegex(RuntimeError, r"2 entries .*\['a', 'b'\]"):
            select_variant(twice, "prefill", "fp16", 64, False)


def _twin(base, hdr):
    return base + ("_tornado" if hdr == 16 else "_tornado_h128")


def name_built_by_hand(kind, D, causal, layout, hdr, dtype="fp16", feat=False):
    """The entry name cache_check.py built from the variant's parts before it selected by variant (bf16 names
    carry the tag before the head dim; D=128 is the one head dim with a causal cache-prefill configuration; a
    cache-prefill entry with the score features ends in _feat before a twin's tail)."""
    paged = layout == "paged"
    dt = f"d{D}" if dtype == "fp16" else f"{dtype}_d{D}"
    tag = "" if dtype == "fp16" else "_" + dtype
    if kind == CACHE_SPLIT:
        return f"flash_cache_decode_split{'_paged' if paged else ''}_{dt}"
    if kind == CACHE_COMBINE:
        return f"flash_cache_decode_combine_{dt}"
    if kind == CACHE_PREFILL:
        cfg = dt + ("_causal" if D == 128 and causal else "") + ("_feat" if feat else "")
        base = f"flash_cache_fwd_{'paged_' if paged else ''}{cfg}"
        return base if hdr == 0 else _twin(base, hdr)
    if kind == CACHE_APPEND:
        return "kv_cache_append" + tag
    if kind == MERGE_STATES:
        return "attention_merge_states" + tag
    fused = {CACHE_FUSED: "decode_fused", CACHE_APPEND_FUSED: "append_decode_fused",
             CACHE_STAGED_FUSED: "staged_decode_fused"}[kind]
    return _twin(f"flash_cache_{fused}{'_paged' if paged else ''}_{dt}", hdr)


# The tiles of the table per head dim (generate_kernels.py): decode Bc, cache-prefill Br (D=128: non-causal, causal).
DECODE_BC = {32: 64, 64: 64, 96: 32, 128: 32, 192: 16, 256: 16}
CACHE_PREFILL_BR = {32: (128, 128), 64: (128, 128), 96: (64, 64), 128: (128, 64), 192: (64, 64), 256: (64, 64)}
# The module order of the manifest: the cache modules' configurations come fp16 first, then bf16; within one, the
# head dims in this order.
CACHE_PREFILL_ORDER = (64, 128, 32, 96, 192, 256)


class ShippedManifestTest(unittest.TestCase):
    def assert_selects(self, kind, D, causal, layout, hdr, module, dtype="fp16"):
        e = select_variant(SHIPPED, kind, dtype, D, causal, layout, hdr)
        self.assertEqual(name_built_by_hand(kind, D, causal, layout, hdr, dtype), e.entry)
        self.assertEqual(dtype, e.dtype, e.entry)
        # cache_check.py loads one module per run: the CUDA-driver entries', or the twins'.
        self.assertEqual(module, e.module, e.entry)
        return e

    def test_every_cache_variant_the_harness_asks_for_is_the_entry_it_named(self):
        for dtype in DTYPES:
            cuda, twins = module_of("flash_cache.ptx", dtype), module_of("flash_cache_tornado.ptx", dtype)
            for D in HEAD_DIMS:
                for causal in (False, True):
                    for layout in ("contiguous", "paged"):
                        with self.subTest(dtype=dtype, D=D, causal=causal, layout=layout):
                            for kind in (CACHE_SPLIT, CACHE_COMBINE, CACHE_PREFILL, CACHE_APPEND):
                                self.assert_selects(kind, D, causal, layout, 0, cuda, dtype)
                            for hdr in (16, 128):
                                for kind in (CACHE_FUSED, CACHE_APPEND_FUSED, CACHE_STAGED_FUSED, CACHE_PREFILL):
                                    e = self.assert_selects(kind, D, causal, layout, hdr, twins, dtype)
                                    self.assertTrue(e.tornado)
            for D in HEAD_DIMS + (80,):  # the merge serves any head dim
                self.assert_selects(MERGE_STATES, D, False, "none", 0, cuda, dtype)

    def test_the_tiles_the_harness_hard_coded_are_the_manifests(self):
        for dtype in DTYPES:
            for D in HEAD_DIMS:
                for layout in ("contiguous", "paged"):
                    split = select_variant(SHIPPED, CACHE_SPLIT, dtype, D, False, layout)
                    self.assertEqual((16, DECODE_BC[D], 32), (split.br, split.bc, split.threads))
                    # D/8 threads per row; D = 96, 192 leave 128 % (D/8) threads of the block idle.
                    combine = select_variant(SHIPPED, CACHE_COMBINE, dtype, D, False, layout)
                    self.assertEqual((128 // (D // 8), 128), (combine.br, combine.threads))
                    self.assertEqual(128, select_variant(SHIPPED, CACHE_APPEND, dtype, D, False, layout).threads)
                    for hdr in (16, 128):
                        for kind in (CACHE_FUSED, CACHE_APPEND_FUSED, CACHE_STAGED_FUSED):
                            twin = select_variant(SHIPPED, kind, dtype, D, True, layout, hdr)
                            self.assertEqual((16, DECODE_BC[D], 32), (twin.br, twin.bc, twin.threads))
                    for hdr in (0, 16, 128):
                        for causal in (False, True):
                            fwd = select_variant(SHIPPED, CACHE_PREFILL, dtype, D, causal, layout, hdr)
                            self.assertEqual(CACHE_PREFILL_BR[D][causal], fwd.br)
                            self.assertEqual(128, fwd.threads)
                            self.assertEqual(0, fwd.smem_dynamic)  # cache entries: static shared memory
            self.assertEqual(128, select_variant(SHIPPED, MERGE_STATES, dtype, 80, False).threads)

    def test_prefill_configurations_are_those_the_harness_named(self):
        for hdr in (0, 16, 128):
            configs = manifest.layout_configs(SHIPPED, CACHE_PREFILL, hdr)
            for layout in ("contiguous", "paged"):
                names = [c[layout].entry for c in configs]
                built = [name_built_by_hand(CACHE_PREFILL, D, causal, layout, hdr, dtype, feat)
                         for dtype in DTYPES for D in CACHE_PREFILL_ORDER
                         for causal in ((False, True) if D == 128 else (False,)) for feat in (False, True)]
                self.assertEqual(built, names, f"header {hdr} {layout}")

    def test_every_ablation_is_measured_against_one_plain_shipped_entry(self):
        ablations = [e for e in SHIPPED if e.module.startswith("flash_fwd_ablation")]
        self.assertTrue(ablations)
        for e in ablations:
            base = manifest.ablation_base(e, SHIPPED)
            self.assertEqual(frozenset({"sinks"}), base.features, e.entry)
            self.assertEqual((e.head_dim, e.br, e.bc), (base.head_dim, base.br, base.bc), e.entry)

    def test_the_dense_tuning_baselines(self):
        self.assertEqual(["flash_fwd_d128_m128n48w4s1_dyn", "flash_fwd_d128_m64n64w4s1"],
                         [select_variant(SHIPPED, PREFILL, "fp16", 128, c).entry for c in (False, True)])

    def test_tuning_runs_each_candidates_head_dim_beside_its_shipped_entries(self):
        import check_and_time
        every = manifest.load()
        wanted = check_and_time.tuning_entries(every, {96})
        cands = [e for e in wanted if e.module == manifest.TUNING_MODULE]
        self.assertTrue(cands)
        self.assertEqual({96}, {e.head_dim for e in wanted})
        shipped = [e for e in wanted if e.module != manifest.TUNING_MODULE]
        self.assertEqual(list(dict.fromkeys(select_variant(every, PREFILL, "fp16", 96, c) for c in (False, True))),
                         shipped)

    def test_every_selectable_entry_is_what_its_own_variant_selects(self):
        for e in SHIPPED:
            if not e.selectable:
                continue
            layouts = ("contiguous", "paged") if e.layout == "any" else (e.layout,)
            flags = (False, True) if e.causal == "any" else (e.causal == "1",)
            for layout in layouts:
                for causal in flags:
                    with self.subTest(entry=e.entry, layout=layout, causal=causal):
                        got = select_variant(SHIPPED, e.kind, e.dtype, e.head_dim or 64, causal, layout,
                                             e.header_bytes, e.features, e.arch)
                        self.assertEqual(e.entry, got.entry)

    def test_every_head_dim_and_type_is_served_by_every_shipped_kind_and_abi(self):
        """The table's coverage: each kind in each of its ABIs, both element types, every head dim."""
        kinds = {(e.kind, e.header_bytes) for e in SHIPPED if e.selectable}
        for kind, hdr in sorted(kinds):
            layouts = ("contiguous", "paged") if kind.startswith("cache") else ("none",)
            for dtype in DTYPES:
                for D in HEAD_DIMS:
                    for causal in (False, True):
                        for layout in layouts:
                            with self.subTest(kind=kind, hdr=hdr, dtype=dtype, D=D, causal=causal, layout=layout):
                                e = select_variant(SHIPPED, kind, dtype, D, causal, layout, hdr)
                                if hdr:
                                    self.assertEqual(0, e.smem_dynamic, "TornadoVM: static shared memory only")
                                    self.assertLessEqual(e.smem_static, 48 * 1024)

    def test_the_shipped_table_refuses_what_it_does_not_serve_by_name(self):
        with self.assertRaises(Refused) as r:
            select_variant(SHIPPED, CACHE_PREFILL, "fp16", 80, True, "paged")
        self.assertEqual("headDim", r.exception.argument)
        for D in HEAD_DIMS:
            self.assertIn(f"D={D}", str(r.exception))
        with self.assertRaises(Refused) as r:
            select_variant(SHIPPED, CACHE_FUSED, "fp32", 128, False, "contiguous", 16)
        self.assertEqual("dtype", r.exception.argument)
        with self.assertRaises(Refused) as r:  # the twins are TornadoVM entries only
            select_variant(SHIPPED, CACHE_FUSED, "fp16", 128, False, "contiguous")
        self.assertIn("served cache-decode-fused variants (CUDA driver, sm80): none", str(r.exception))


if __name__ == "__main__":
    unittest.main()
