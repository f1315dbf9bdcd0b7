package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.ptx.KernelManifest.Kernel;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

class KernelManifestTest {
    private static final KernelManifest SHIPPED = KernelManifest.shipped();

    @Test
    void everyHeadDimAndCausalFlagSelectsExactlyOneEntryOfEachKind() {
        for (int d : LaunchTable.HEAD_DIMS) {
            for (boolean causal : List.of(false, true)) {
                for (String kind : List.of(KernelManifest.PREFILL, KernelManifest.DECODE_SPLIT, KernelManifest.DECODE_COMBINE)) {
                    Kernel k = SHIPPED.select(kind, d, causal, 0);
                    assertEquals(d, k.headDim(), k.entry());
                    assertTrue(k.threads() > 0 && k.threads() % 32 == 0 && k.rowsPerBlock() > 0, k.toString());
                    // The library's hosts launch with static shared memory only.
                    assertEquals(0, k.dynamicSharedBytes(), k.entry());
                }
            }
        }
    }

    @Test
    void theJarsModulesAndTheManifestListTheSameEntries() {
        Map<String, List<Kernel>> byModule = SHIPPED.kernels().stream().collect(Collectors.groupingBy(Kernel::module));
        int checked = 0;
        for (Map.Entry<String, List<Kernel>> module : byModule.entrySet()) {
            String ptx;
            try {
                ptx = KernelManifest.ptx(module.getKey());
            } catch (IllegalStateException benchmarkOnly) { // the harness's modules are not in the jar
                assertTrue(module.getValue().stream().allMatch(k -> k.causal().equals("-")), module.getKey());
                continue;
            }
            Set<String> entries = new TreeSet<>();
            Matcher m = Pattern.compile("\\.entry\\s+(\\w+)\\(").matcher(ptx);
            while (m.find()) {
                entries.add(m.group(1));
            }
            assertEquals(entries, module.getValue().stream().map(Kernel::entry).collect(Collectors.toCollection(TreeSet::new)),
                    module.getKey());
            checked++;
        }
        assertTrue(checked >= 2, "the prefill and decode modules ship");
    }

    @Test
    void everyShippedPrefillAndDecodeEntryIsLaunchedBySomeHost() {
        List<String> kinds = List.of(KernelManifest.PREFILL, KernelManifest.DECODE_SPLIT, KernelManifest.DECODE_COMBINE);
        for (Kernel k : SHIPPED.kernels()) {
            if (kinds.contains(k.kind()) && isShipped(k.module())) {
                assertFalse(k.causal().equals("-"), k.entry() + " ships but no launch selects it");
            }
        }
    }

    private static boolean isShipped(String module) {
        try {
            KernelManifest.ptx(module);
            return true;
        } catch (IllegalStateException e) {
            return false;
        }
    }

    private static final String HEADER = "module\tentry\tkind\tabi\theader_bytes\tcausal\thead_dim\tbr\tbc\twarps\tthreads"
            + "\tstages\tq_in_smem\topt\tsmem_dynamic\tsmem_static\tregs_sm_89\tregs_sm_90\n";

    @Test
    void selectionIsByKindHeadDimCausalFlagAndHeader() {
        KernelManifest m = KernelManifest.parse(HEADER
                + "a.ptx\tfull\tprefill\tcuda\t0\t0\t64\t128\t64\t4\t128\t2\t0\t-\t0\t32768\t200\t200\n"
                + "a.ptx\tcausal\tprefill\tcuda\t0\t1\t64\t64\t64\t4\t128\t2\t0\t-\t0\t32768\t200\t200\n"
                + "a.ptx\tcausal_t\tprefill\ttornado\t16\t1\t64\t64\t64\t4\t128\t2\t0\t-\t0\t32768\t200\t200\n"
                + "a.ptx\tbench\tprefill\tcuda\t0\t-\t64\t128\t32\t4\t128\t2\t0\tp_smem\t40000\t0\t200\t200\n");
        assertEquals("full", m.select("prefill", 64, false, 0).entry());
        assertEquals("causal", m.select("prefill", 64, true, 0).entry());
        assertEquals("causal_t", m.select("prefill", 64, true, 16).entry());
        assertEquals(64, m.select("prefill", 64, true, 0).rowsPerBlock());
        assertEquals(List.of(64), m.headDims("prefill"));
        assertEquals(List.of(16), m.headerBytes("prefill"));
        IllegalArgumentException none = assertThrows(IllegalArgumentException.class, () -> m.select("prefill", 64, false, 16));
        assertTrue(none.getMessage().contains("0 prefill entries for head dim 64, causal false, 16 header bytes"),
                none.getMessage());
    }

    @Test
    void columnsAreFoundByNameAndRaggedRowsRejected() {
        KernelManifest m = KernelManifest.parse("""
                threads\tentry\tnew_column\tmodule\tkind\theader_bytes\tcausal\thead_dim\tbr\tbc\tsmem_dynamic
                32\tx\tsomething\tb.ptx\tdecode-split\t0\tany\t128\t16\t32\t0
                """);
        Kernel k = m.select("decode-split", 128, true, 0);
        assertEquals(List.of("x", "b.ptx", "32", "16"),
                List.of(k.entry(), k.module(), String.valueOf(k.threads()), String.valueOf(k.rowsPerBlock())));
        assertThrows(IllegalStateException.class, () -> KernelManifest.parse(HEADER + "a.ptx\tshort\n"));
    }
}
