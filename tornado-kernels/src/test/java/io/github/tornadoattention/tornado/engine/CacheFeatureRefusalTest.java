package io.github.tornadoattention.tornado.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Window, softcap and sinks over a cache, as {@link CacheAttentionTasks#check} (which the engine facade and the
 * inference device's cache plans both run at plan time) decides them with no device: the Java cache kernels
 * (tornado-simt, tornado-mma) serve them, ptx-tornado's prebuilt twins refuse each by its own name; both cache layouts.
 */
class CacheFeatureRefusalTest {
    // ptx-tornado refuses a feature only where the shipped manifest lacks its twins (accepted once they ship).
    private static final CacheAttentionSpec SPEC = CacheAttentionSpec.builder().batch(2).heads(4).kvHeads(2).headDim(64)
            .maxQueryLength(1).maxLength(128).causal(true).build();

    /** ptx-tornado's cache twins serve no window, softcap or sinks: it refuses each by its own name. */
    @Test
    void ptxTornadoRefusesEachFeatureByName() {
        for (KvCacheSpec cache : List.of(KvCacheSpec.contiguous(2, 2, 128, 64), KvCacheSpec.paged(2, 2, 128, 64, 16))) {
            String backend = "ptx-tornado";
            CacheAttentionTasks.check(backend, SPEC, cache);
            for (CacheAttentionSpec spec : featureSpecs()) {
                String feature = spec.features().get(0);
                InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                        () -> CacheAttentionTasks.of(backend, spec, cache, 58), backend + " " + spec);
                assertEquals(feature, e.argument(), e.getMessage());
                assertEquals(spec.featureValue(feature), e.value());
                assertTrue(e.allowed().startsWith(backend + " "), e.getMessage());
            }
        }
    }

    /** The Java cache kernels (tornado-simt's and tornado-mma's) serve each feature and all three together. */
    @Test
    void theJavaCacheKernelsServeEveryFeature() {
        List<CacheAttentionSpec> specs = new java.util.ArrayList<>(featureSpecs());
        specs.add(SPEC.toBuilder().window(32, 4).softcap(30f).sinks(new float[] {0.5f, -0.5f, 1f, 0f}).build());
        for (KvCacheSpec cache : List.of(KvCacheSpec.contiguous(2, 2, 128, 64), KvCacheSpec.paged(2, 2, 128, 64, 16))) {
            for (String backend : List.of("tornado-simt", "tornado-mma")) {
                for (CacheAttentionSpec spec : specs) {
                    CacheAttentionTasks.check(backend, spec, cache);
                    CacheAttentionTasks.of(backend, spec, cache, 58);
                }
            }
        }
    }

    private static List<CacheAttentionSpec> featureSpecs() {
        return List.of(SPEC.toBuilder().window(32, 0).build(), SPEC.toBuilder().softcap(30f).build(),
                SPEC.toBuilder().sinks(new float[] {0.5f, -0.5f, 1f, 0f}).build());
    }

    /** Whether the shipped manifest has every ptx-tornado twin kind with the spec's features (branch feat ships them). */
    private static boolean servesTwins(CacheAttentionSpec spec, KvCacheSpec cache) {
        io.github.tornadoattention.ptx.KernelManifest m = io.github.tornadoattention.ptx.KernelManifest.shipped();
        int header = Math.toIntExact(uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray.ARRAY_HEADER);
        for (io.github.tornadoattention.ptx.KernelVariant.Kind kind : new io.github.tornadoattention.ptx.KernelVariant.Kind[] {
                io.github.tornadoattention.ptx.KernelVariant.Kind.CACHE_DECODE_FUSED,
                io.github.tornadoattention.ptx.KernelVariant.Kind.CACHE_APPEND_DECODE_FUSED,
                io.github.tornadoattention.ptx.KernelVariant.Kind.CACHE_STAGED_DECODE_FUSED,
                io.github.tornadoattention.ptx.KernelVariant.Kind.CACHE_PREFILL}) {
            if (!m.serves(io.github.tornadoattention.ptx.KernelVariant.of(kind, spec.dtype(), spec.headDim())
                    .causal(spec.causal()).paged(cache.paged()).headerBytes(header)
                    .features(io.github.tornadoattention.ptx.LaunchTable.features(spec.features())))) {
                return false;
            }
        }
        return true;
    }
}
