package io.github.tornadoattention.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import org.junit.jupiter.api.Test;

/** What the ptx-cuda cache host launches, checked without a GPU against the kernel manifest and the params ABI. */
class CacheLaunchTest {

    @Test
    void everyVariantTheHostCanAskForIsServedByOneShippedEntry() {
        KernelManifest manifest = KernelManifest.shipped();
        for (int d : new int[] {64, 128}) {
            for (boolean paged : new boolean[] {false, true}) {
                for (boolean causal : new boolean[] {false, true}) {
                    CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(2).heads(8).kvHeads(2).headDim(d)
                            .maxQueryLength(4).maxTotalQueries(64).maxLength(1024).causal(causal).build();
                    KvCacheSpec cache = paged ? KvCacheSpec.paged(2, 2, 1024, d, 16) : KvCacheSpec.contiguous(2, 2, 1024, d);
                    KernelVariant v = CudaCachePlan.variant(spec, cache);
                    for (Kind kind : new Kind[] {Kind.CACHE_DECODE_SPLIT, Kind.CACHE_DECODE_COMBINE, Kind.CACHE_PREFILL}) {
                        KernelManifest.Kernel k = manifest.select(v.kind(kind));
                        assertEquals(kind, k.kind());
                        assertEquals(d, k.headDim(), k.entry());
                        assertEquals("flash_cache.ptx", k.module(), k.entry());
                        assertEquals(0, k.headerBytes(), k.entry());
                    }
                    // The combine kernel gives each row D/8 threads of its block.
                    KernelManifest.Kernel combine = manifest.select(v.kind(Kind.CACHE_DECODE_COMBINE));
                    assertEquals(combine.threads() / (d / 8), combine.rowsPerBlock());
                }
            }
            assertTrue(manifest.select(KernelVariant.of(Kind.CACHE_APPEND, DType.FP16, d).paged(true)).threads() > 0);
        }
    }

    @Test
    void aHeadDimOrDtypeTheManifestLacksIsRefusedWithWhatIsServed() {
        // No kernel table has head dim 40.
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(2).heads(8).kvHeads(2).headDim(40)
                .maxQueryLength(1).maxTotalQueries(8).maxLength(256).build();
        KernelVariant v = CudaCachePlan.variant(spec, KvCacheSpec.contiguous(2, 2, 256, 40)).kind(Kind.CACHE_DECODE_SPLIT);
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> KernelManifest.shipped().select(v));
        assertEquals("headDim", e.argument());
        assertTrue(e.getMessage().contains("fp16 D=64 contiguous cache") && e.getMessage().contains("fp16 D=128"), e.getMessage());
    }

    @Test
    void paramsDescribeThePagedPoolAndThePackedQueries() {
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(4).heads(32).kvHeads(8).headDim(128)
                .maxQueryLength(1).maxTotalQueries(1000).maxLength(4096).layout(Layout.BHSD).build();
        KvCacheSpec paged = KvCacheSpec.paged(4, 8, 4096, 128, 16);
        int[] dense = io.github.tornadoattention.ptx.KernelParams.forCache(spec, paged, false);
        assertEquals(4, dense[0]);
        assertEquals(1, dense[3]);                       // Sq: new tokens per sequence
        assertEquals(8 * 16 * 128, dense[12]);           // K page stride
        assertEquals(16 * 128, dense[13]);               // K head stride within a page
        assertEquals(128, dense[14]);
        assertEquals(16, dense[io.github.tornadoattention.ptx.KernelParams.P_PAGE_SIZE]);
        assertEquals(256, dense[io.github.tornadoattention.ptx.KernelParams.P_PAGES_PER_SEQ]);
        int[] packed = io.github.tornadoattention.ptx.KernelParams.forCache(spec, paged, true);
        assertEquals(4, packed[0]);
        assertEquals(1000, packed[3]);                   // the lse row length [heads, maxTotalQueries]
        assertEquals(128, packed[10]);                   // q head stride
        assertEquals(32 * 128, packed[11]);              // q row stride: packed rows
    }

    @Test
    void windowSoftcapAndSinksAreAcceptedWhereTheManifestServesThemElseRefusedByName() {
        CacheAttentionSpec plain = CacheAttentionSpec.builder().batch(2).heads(4).kvHeads(2).headDim(64).maxQueryLength(1)
                .maxLength(256).causal(true).build();
        KernelManifest shipped = KernelManifest.shipped();
        for (KvCacheSpec cache : new KvCacheSpec[] {KvCacheSpec.contiguous(2, 2, 256, 64), KvCacheSpec.paged(2, 2, 256, 64, 16)}) {
            for (Kind kind : new Kind[] {Kind.CACHE_DECODE_SPLIT, Kind.CACHE_PREFILL}) {
                CudaCachePlan.select("ptx-cuda", shipped, kind, plain, cache);
            }
            for (CacheAttentionSpec spec : new CacheAttentionSpec[] {plain.toBuilder().window(128, -1).build(),
                    plain.toBuilder().softcap(50f).build(), plain.toBuilder().sinks(new float[] {1, 2, 3, 4}).build(),
                    plain.toBuilder().window(8, 0).softcap(50f).build()}) {
                KernelVariant wanted = CudaCachePlan.variant(spec, cache).kind(Kind.CACHE_DECODE_SPLIT)
                        .features(io.github.tornadoattention.ptx.LaunchTable.features(spec.features()));
                if (shipped.serves(wanted)) {
                    assertEquals(shipped.select(wanted),
                            CudaCachePlan.select("ptx-cuda", shipped, Kind.CACHE_DECODE_SPLIT, spec, cache));
                    continue;
                }
                String feature = spec.features().stream()
                        .filter(f -> !shipped.serves(wanted.features(java.util.Set.of(KernelVariant.Feature.valueOf(f.toUpperCase())))))
                        .findFirst().orElseThrow();
                InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                        () -> CudaCachePlan.select("ptx-cuda", shipped, Kind.CACHE_DECODE_SPLIT, spec, cache));
                assertEquals(feature, e.argument(), e.getMessage());
                assertEquals(spec.featureValue(feature), e.value());
                assertTrue(e.allowed().startsWith("ptx-cuda has no kernel with " + feature), e.getMessage());
                assertTrue(e.allowed().contains("cpu-reference serves it"), e.getMessage());
            }
        }
    }
}
