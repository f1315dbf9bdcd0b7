package io.github.tornadoattention.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.KernelManifest;
import org.junit.jupiter.api.Test;

/** What the ptx-cuda cache host launches, checked without a GPU against the kernel manifest and the params ABI. */
class CacheLaunchTest {

    @Test
    void everyEntryTheHostCanPickIsShipped() {
        KernelManifest manifest = KernelManifest.shipped();
        for (int d : new int[] {64, 128}) {
            for (boolean paged : new boolean[] {false, true}) {
                String p = paged ? "_paged" : "";
                assertEquals("cache-decode-split", manifest.entry("flash_cache_decode_split" + p + "_d" + d).kind());
                for (boolean causal : new boolean[] {false, true}) {
                    KernelManifest.Kernel k = manifest.entry(CudaCachePlan.prefillEntry(d, causal, paged));
                    assertEquals("cache-prefill", k.kind());
                    assertEquals(d, k.headDim());
                }
            }
            // The combine kernel gives each row D/8 threads of its block.
            KernelManifest.Kernel combine = manifest.entry("flash_cache_decode_combine_d" + d);
            assertEquals(combine.threads() / (d / 8), combine.rowsPerBlock());
        }
        assertTrue(manifest.entry("kv_cache_append").threads() > 0);
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
}
