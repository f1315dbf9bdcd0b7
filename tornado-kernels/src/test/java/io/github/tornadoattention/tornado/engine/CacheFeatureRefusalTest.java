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
 * (tornado-simt, tornado-mma) and ptx-tornado's prebuilt twins (where the manifest lists them) serve them; both cache layouts.
 */
class CacheFeatureRefusalTest {
    private static final CacheAttentionSpec SPEC = CacheAttentionSpec.builder().batch(2).heads(4).kvHeads(2).headDim(64)
            .maxQueryLength(1).maxLength(128).causal(true).build();

    /**
     * ptx-tornado's cache twins serve each feature where the shipped manifest lists it (every twin kind does); a head
     * dim no twin has is refused naming the spec's field.
     */
    @Test
    void ptxTornadoServesEachFeatureThroughTheManifest() {
        for (KvCacheSpec cache : List.of(KvCacheSpec.contiguous(2, 2, 128, 64), KvCacheSpec.paged(2, 2, 128, 64, 16))) {
            String backend = "ptx-tornado";
            CacheAttentionTasks.check(backend, SPEC, cache);
            for (CacheAttentionSpec spec : featureSpecs()) {
                CacheAttentionTasks.check(backend, spec, cache);
            }
        }
        CacheAttentionSpec d80 = SPEC.toBuilder().headDim(80).window(32, 0).build();
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> CacheAttentionTasks.check("ptx-tornado", d80, KvCacheSpec.contiguous(2, 2, 128, 80)));
        assertEquals("spec.headDim", e.argument(), e.getMessage());
        assertTrue(e.allowed().startsWith("ptx-tornado "), e.getMessage());
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
}
