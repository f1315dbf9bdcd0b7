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
 * The TornadoVM cache kernels serve no window, softcap or sinks yet: {@link CacheAttentionTasks#check} (which the
 * engine facade and the inference device's cache plans both run at plan time) refuses each by its own name, for
 * every backend and both cache layouts, with no device.
 */
class CacheFeatureRefusalTest {
    // ptx-tornado refuses a feature only where the shipped manifest lacks its twins (accepted once they ship).
    private static final CacheAttentionSpec SPEC = CacheAttentionSpec.builder().batch(2).heads(4).kvHeads(2).headDim(64)
            .maxQueryLength(1).maxLength(128).causal(true).build();

    @Test
    void everyTornadoCachePlanRefusesEachFeatureByName() {
        List<CacheAttentionSpec> specs = List.of(SPEC.toBuilder().window(32, 0).build(), SPEC.toBuilder().softcap(30f).build(),
                SPEC.toBuilder().sinks(new float[] {0.5f, -0.5f, 1f, 0f}).build());
        for (KvCacheSpec cache : List.of(KvCacheSpec.contiguous(2, 2, 128, 64), KvCacheSpec.paged(2, 2, 128, 64, 16))) {
            for (String backend : CacheAttentionTasks.BACKENDS) {
                CacheAttentionTasks.check(backend, SPEC, cache);
                for (CacheAttentionSpec spec : specs) {
                    String feature = spec.features().get(0);
                    if (backend.equals("ptx-tornado") && servesTwins(spec, cache)) {
                        CacheAttentionTasks.check(backend, spec, cache);   // the shipped manifest lists it: accepted
                        continue;
                    }
                    InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                            () -> CacheAttentionTasks.of(backend, spec, cache, 58), backend + " " + spec);
                    assertEquals(feature, e.argument(), e.getMessage());
                    assertEquals(spec.featureValue(feature), e.value());
                    assertTrue(e.allowed().startsWith(backend + " "), e.getMessage());
                    assertTrue(e.allowed().contains("cpu-reference serves"), e.getMessage());
                }
            }
        }
        assertEquals("softcap = 30.0: tornado-simt serves cache attention without window, softcap or sinks"
                + " (cpu-reference serves them)", assertThrows(InvalidArgumentException.class,
                () -> CacheAttentionTasks.check("tornado-simt", specs.get(1), KvCacheSpec.contiguous(2, 2, 128, 64)))
                .getMessage());
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
