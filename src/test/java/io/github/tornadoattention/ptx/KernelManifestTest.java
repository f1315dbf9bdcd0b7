package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelManifest.Kernel;
import io.github.tornadoattention.ptx.KernelVariant.CacheLayout;
import io.github.tornadoattention.ptx.KernelVariant.Feature;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
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
    /** The modules the jar ships (read once: each lookup decompresses the module). */
    private static final Set<String> SHIPPED_MODULES = SHIPPED.kernels().stream().map(Kernel::module).distinct()
            .filter(KernelManifestTest::isShipped).collect(Collectors.toSet());

    @Test
    void everyHeadDimAndCausalFlagSelectsExactlyOneEntryOfEachKind() {
        for (DType dtype : SHIPPED.dtypes(Kind.PREFILL)) {
            List<Integer> dims = SHIPPED.headDims(KernelVariant.of(Kind.PREFILL, dtype, 0));
            assertEquals(List.of(32, 64, 96, 128, 192, 256), dims);
            for (int d : dims) {
                for (boolean causal : List.of(false, true)) {
                    for (Kind kind : List.of(Kind.PREFILL, Kind.DECODE_SPLIT, Kind.DECODE_COMBINE)) {
                        Kernel k = SHIPPED.select(KernelVariant.of(kind, dtype, d).causal(causal));
                        assertEquals(d, k.headDim(), k.entry());
                        assertTrue(k.threads() > 0 && k.threads() % 32 == 0 && k.rowsPerBlock() > 0, k.toString());
                        // Dynamic shared memory (above 48 KB) only in CUDA-driver entries, within the L4's 99 KB per block.
                        assertTrue(k.dynamicSharedBytes() == 0 || k.headerBytes() == 0 && k.dynamicSharedBytes() <= 99 * 1024,
                                k.entry());
                    }
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
                assertTrue(module.getValue().stream().noneMatch(Kernel::selectable), module.getKey());
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
    void everyShippedEntryIsSelectableAndServesOneVariantAlone() {
        for (Kernel k : SHIPPED.kernels()) {
            if (!SHIPPED_MODULES.contains(k.module())) {
                continue;
            }
            assertTrue(k.selectable(), k.entry() + " ships but no host selects it");
            // The variant this entry serves (either causal flag where it serves both) selects exactly it.
            KernelVariant v = servedBy(k);
            assertEquals(k.entry(), SHIPPED.select(v).entry(), v.toString());
        }
    }

    @Test
    void sinksAloneKeepThePlainEntryWhileAWindowOrSoftcapTakesTheFeatureEntryOfTheSameTile() {
        // Sinks are a prefill tile's softmax starting state or join in the combine, so the shipped tile entries list
        // them (but those whose row leaves them to "_feat"); the window and the softcap change the loop and live in
        // the "_feat" entries only.
        int checked = 0;
        for (Kernel k : SHIPPED.kernels()) {
            if (!SHIPPED_MODULES.contains(k.module()) || k.features().contains(Feature.WINDOW) || k.features().isEmpty()) {
                continue;
            }
            assertEquals(Set.of(Feature.SINKS), k.features(), k.entry());
            KernelVariant plain = servedBy(k).features(Set.of());
            assertEquals(k.entry(), SHIPPED.select(plain.features(Set.of(Feature.SINKS))).entry(), plain.toString());
            for (Feature f : List.of(Feature.WINDOW, Feature.SOFTCAP)) {
                Kernel feat = SHIPPED.select(plain.features(Set.of(f, Feature.SINKS)));
                assertEquals(Set.of(Feature.WINDOW, Feature.SOFTCAP, Feature.SINKS), feat.features(), feat.entry());
                assertTrue(feat.kind() == k.kind() && feat.headDim() == k.headDim() && feat.headerBytes() == k.headerBytes(),
                        feat.entry());
                // A window or softcap keeps the call on the plain entry's tile (its rows and keys per block, its
                // threads): the table picks tiles that fit the features' registers rather than falling back to another
                // shape (the D=128 causal prefill ran the non-causal tile with them, 1.28x the time with a softcap).
                assertEquals(List.of(k.rowsPerBlock(), k.keysPerTile(), k.threads()),
                        List.of(feat.rowsPerBlock(), feat.keysPerTile(), feat.threads()), feat.entry() + " beside " + k.entry());
            }
            checked++;
        }
        assertTrue(checked > 100, "tile entries checked: " + checked);
    }

    /** A variant {@code k} serves (either causal flag where it serves both, a paged cache where it serves any). */
    private static KernelVariant servedBy(Kernel k) {
        return new KernelVariant(k.kind(), k.dtype(), k.headDim() == 0 ? 64 : k.headDim(), k.causal().equals("1"),
                k.layout().equals("any") ? CacheLayout.PAGED : CacheLayout.valueOf(k.layout().toUpperCase(java.util.Locale.ROOT)),
                k.features(), k.headerBytes(), k.arch());
    }

    private static boolean isShipped(String module) {
        try {
            KernelManifest.ptx(module);
            return true;
        } catch (IllegalStateException e) {
            return false;
        }
    }

    private static final String HEADER = "module\tentry\tkind\tdtype\thead_dim\tcausal\tlayout\tfeatures\tabi\theader_bytes"
            + "\tarch\tbr\tbc\twarps\tthreads\tstages\tq_in_smem\topt\tsmem_dynamic\tsmem_static\tregs_sm_89\tregs_sm_90\n";

    private static String row(String entry, String kind, String dtype, int d, String causal, String layout, String features,
                              int header, int br) {
        return String.join("\t", "a.ptx", entry, kind, dtype, String.valueOf(d), causal, layout, features,
                header == 0 ? "cuda" : "tornado", String.valueOf(header), "sm80", String.valueOf(br), "64", "4", "128", "2", "0",
                "-", "0", "32768", "200", "200") + "\n";
    }

    private static final KernelManifest TOY = KernelManifest.parse(HEADER
            + row("full", "prefill", "fp16", 64, "0", "none", "-", 0, 128)
            + row("causal", "prefill", "fp16", 64, "1", "none", "-", 0, 64)
            + row("causal_t", "prefill", "fp16", 64, "1", "none", "-", 16, 64)
            + row("bench", "prefill", "fp16", 64, "-", "none", "-", 0, 128)
            + row("paged_any", "cache-prefill", "fp16", 128, "any", "paged", "window+softcap", 0, 128)
            + row("append", "cache-append", "fp16", 0, "any", "any", "-", 0, 0));

    @Test
    void selectionIsByTheWholeVariant() {
        KernelVariant prefill = KernelVariant.of(Kind.PREFILL, DType.FP16, 64);
        assertEquals("full", TOY.select(prefill).entry());
        assertEquals("causal", TOY.select(prefill.causal(true)).entry());
        assertEquals("causal_t", TOY.select(prefill.causal(true).headerBytes(16)).entry());
        assertEquals(64, TOY.select(prefill.causal(true)).rowsPerBlock());
        KernelVariant cache = KernelVariant.of(Kind.CACHE_PREFILL, DType.FP16, 128).paged(true);
        assertEquals("paged_any", TOY.select(cache.causal(true).features(Set.of(Feature.WINDOW))).entry());
        // head dim 0 and layout "any": the append serves every head dim and both cache layouts, never a dense call.
        KernelVariant append = KernelVariant.of(Kind.CACHE_APPEND, DType.FP16, 96);
        assertEquals("append", TOY.select(append.paged(false)).entry());
        assertEquals("append", TOY.select(append.paged(true)).entry());
        assertEquals("layout", assertThrows(InvalidArgumentException.class, () -> TOY.select(append)).argument());
        assertEquals(List.of(64), TOY.headDims(prefill));
        assertEquals(List.of(16), TOY.headerBytes(Kind.PREFILL));
    }

    @Test
    void aVariantNoEntryServesIsRefusedNamingTheArgumentAndListingWhatIsServed() {
        KernelVariant prefill = KernelVariant.of(Kind.PREFILL, DType.FP16, 64);
        InvalidArgumentException dtype = assertThrows(InvalidArgumentException.class,
                () -> TOY.select(KernelVariant.of(Kind.PREFILL, DType.BF16, 64)));
        assertEquals("dtype", dtype.argument());
        assertTrue(dtype.getMessage().contains("served prefill variants (CUDA driver, sm80): fp16 D=64 non-causal, fp16 D=64 causal"),
                dtype.getMessage());
        assertEquals("headDim", assertThrows(InvalidArgumentException.class,
                () -> TOY.select(KernelVariant.of(Kind.PREFILL, DType.FP16, 96))).argument());
        InvalidArgumentException header = assertThrows(InvalidArgumentException.class, () -> TOY.select(prefill.headerBytes(16)));
        assertEquals("causal", header.argument());
        assertTrue(header.getMessage().contains("(TornadoVM 16-byte header, sm80): fp16 D=64 causal"), header.getMessage());
        KernelVariant cache = KernelVariant.of(Kind.CACHE_PREFILL, DType.FP16, 128).paged(true);
        assertEquals("features", assertThrows(InvalidArgumentException.class,
                () -> TOY.select(cache.features(Set.of(Feature.SINKS)))).argument());
        assertEquals("layout", assertThrows(InvalidArgumentException.class, () -> TOY.select(cache.paged(false))).argument());
        // The shipped table serves the DESIGN's head dims (32, 64, 96, 128, 192, 256) and refuses any other by name.
        InvalidArgumentException d80 = assertThrows(InvalidArgumentException.class,
                () -> SHIPPED.select(KernelVariant.of(Kind.PREFILL, DType.FP16, 80)));
        assertEquals("headDim", d80.argument());
        for (int d : List.of(32, 64, 96, 128, 192, 256)) {
            assertTrue(d80.getMessage().contains("D=" + d), d80.getMessage());
        }
    }

    @Test
    void ofEntriesThatServeAVariantTheOneWithFewestFeaturesRuns() {
        KernelManifest both = KernelManifest.parse(HEADER
                + row("plain", "prefill", "fp16", 64, "any", "none", "-", 0, 64)
                + row("windowed", "prefill", "fp16", 64, "any", "none", "window", 0, 64)
                + row("all", "prefill", "fp16", 64, "any", "none", "window+softcap+sinks", 0, 64)
                + row("twice", "prefill", "fp16", 128, "any", "none", "window", 0, 64)
                + row("again", "prefill", "fp16", 128, "0", "none", "window", 0, 64));
        KernelVariant v = KernelVariant.of(Kind.PREFILL, DType.FP16, 64);
        assertEquals("plain", both.select(v).entry());
        assertEquals("windowed", both.select(v.features(Set.of(KernelVariant.Feature.WINDOW))).entry());
        assertEquals("all", both.select(v.features(Set.of(KernelVariant.Feature.SINKS))).entry());
        // Two with as few features: the table is wrong, said so.
        assertThrows(IllegalStateException.class, () -> both.select(KernelVariant.of(Kind.PREFILL, DType.FP16, 128)
                .features(Set.of(KernelVariant.Feature.WINDOW))));
    }

    @Test
    void aTornadoTwinWithDynamicSharedMemoryIsNeverSelected() {
        String row = row("dyn_t", "prefill", "bf16", 96, "any", "none", "-", 16, 64);
        KernelManifest m = KernelManifest.parse(HEADER + row.replace("\t-\t0\t32768\t", "\t-\t65536\t0\t")
                + row("dyn", "prefill", "bf16", 96, "any", "none", "-", 0, 64).replace("\t-\t0\t32768\t", "\t-\t65536\t0\t"));
        KernelVariant v = KernelVariant.of(Kind.PREFILL, DType.BF16, 96);
        assertEquals(65536, m.select(v).dynamicSharedBytes());   // the CUDA driver sets the attribute and launches with it
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> m.select(v.headerBytes(16)));
        assertTrue(e.getMessage().contains("dyn_t") && e.getMessage().contains("TornadoVM launches with none"), e.getMessage());
    }

    @Test
    void columnsAreFoundByNameAndRaggedRowsRejected() {
        KernelManifest m = KernelManifest.parse("""
                threads\tentry\tnew_column\tmodule\tkind\tdtype\theader_bytes\tcausal\thead_dim\tlayout\tfeatures\tarch\tbr\tbc\tsmem_dynamic
                32\tx\tsomething\tb.ptx\tdecode-split\tfp16\t0\tany\t128\tnone\t-\tsm80\t16\t32\t0
                """);
        Kernel k = m.select(KernelVariant.of(Kind.DECODE_SPLIT, DType.FP16, 128).causal(true));
        assertEquals(List.of("x", "b.ptx", "32", "16"),
                List.of(k.entry(), k.module(), String.valueOf(k.threads()), String.valueOf(k.rowsPerBlock())));
        assertThrows(IllegalStateException.class, () -> KernelManifest.parse(HEADER + "a.ptx\tshort\n"));
    }
}
