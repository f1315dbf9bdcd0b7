package io.github.tornadoattention.tornado.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.EmulatorAccess;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/**
 * The Java cache kernels past the power-of-two head dims up to 128 and over bf16 caches, on the KernelEmulator against
 * the CPU reference ({@link CacheEmulation}: random inputs, outputs poisoned first): head dims that do not divide the
 * workgroup (48, 96), the wide configuration (fewer threads than columns: 144..256), and the bf16 twins of every kernel
 * (decode split and combine, prefill, append, copies) with window, softcap and sinks.
 */
class CacheKernelsHeadDimAndBf16Test {
    private static final float[] SINKS = {0.9f, -0.6f, 1.7f, 0.0f};

    private static CacheAttentionSpec spec(DType dtype, int d, int batch, int maxQuery, int maxTotal, int capacity,
                                           boolean causal) {
        return CacheAttentionSpec.builder().batch(batch).heads(4).kvHeads(2).headDim(d).maxQueryLength(maxQuery)
                .maxTotalQueries(maxTotal).maxLength(capacity).causal(causal).dtype(dtype).build();
    }

    private static KvCacheSpec cache(DType dtype, int batch, int capacity, int d, int pageSize) {
        KvCacheSpec c = pageSize == 0 ? KvCacheSpec.contiguous(batch, 2, capacity, d)
                : KvCacheSpec.paged(batch, 2, capacity, d, pageSize);
        return c.withDtype(dtype);
    }

    private static void decode(CacheAttentionSpec spec, KvCacheSpec cache, int splits, int[] lengths, int[] newTokens,
                               long seed) {
        CacheEmulation.decode(spec, spec, cache, splits, lengths, newTokens, seed);
    }

    private static void prefill(CacheAttentionSpec spec, KvCacheSpec cache, int[] lengths, int[] newTokens, long seed) {
        CacheEmulation.prefill(spec, spec, cache, lengths, newTokens, seed);
    }

    @Test
    void everyMultipleOf16UpTo256HasAConfigurationWithin48KB() {
        for (int d = 16; d <= 256; d += 16) {
            CacheTileConfig config = CacheTileConfig.forHeadDim(d);
            assertTrue(config.maxHeadDim() >= d, "D=" + d + ": " + config);
            assertTrue(config.sharedMemoryBytes() <= CacheTileConfig.MAX_SHARED_BYTES, config.toString());
            assertEquals(d > 128, config.wide(), "D=" + d + ": " + config);
        }
        for (int d : new int[] {8, 40, 72, 100, 264, 512}) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> CacheTileConfig.forHeadDim(d));
            assertEquals("headDim", e.argument());
            assertTrue(e.allowed().contains("multiples of 16 in 16..256"), e.getMessage());
        }
    }

    @Test
    void decodeHeadDimsThatDoNotDivideTheWorkgroupAndPast128() {
        for (int d : new int[] {48, 96, 192, 256}) {
            CacheAttentionSpec s = spec(DType.FP16, d, 3, 3, 9, 160, true).toBuilder().window(40, 0).softcap(2.5f)
                    .sinks(SINKS).build();
            decode(s, cache(DType.FP16, 3, 160, d, d == 96 ? 16 : 0), 3, new int[] {5, 150, 0}, new int[] {3, 2, 0},
                    200 + d);
            // No features, non-causal, one split, a single token per slot (4 row copies).
            CacheAttentionSpec plain = spec(DType.FP16, d, 2, 1, 2, 100, false);
            decode(plain, cache(DType.FP16, 2, 100, d, 0), 1, new int[] {100, 37}, new int[] {1, 1}, 300 + d);
        }
    }

    @Test
    void prefillHeadDimsThatDoNotDivideTheWorkgroupAndPast128() {
        for (int d : new int[] {48, 96, 192, 256}) {
            for (boolean causal : new boolean[] {true, false}) {
                CacheAttentionSpec s = spec(DType.FP16, d, 3, 40, 44, 64, causal).toBuilder().window(9, causal ? 0 : 3)
                        .softcap(3f).sinks(SINKS).build();
                prefill(s, cache(DType.FP16, 3, 64, d, d == 192 ? 8 : 0), new int[] {20, 0, 47}, new int[] {20, 0, 22},
                        400 + d + (causal ? 1 : 0));
            }
        }
    }

    @Test
    void bf16DecodeAndPrefillWithWindowSoftcapAndSinks() {
        for (int d : new int[] {64, 96, 128, 256}) {
            CacheAttentionSpec s = spec(DType.BF16, d, 3, 3, 9, 160, true).toBuilder().window(40, 0).softcap(2.5f)
                    .sinks(SINKS).build();
            decode(s, cache(DType.BF16, 3, 160, d, 16), 3, new int[] {5, 150, 0}, new int[] {3, 2, 0}, 500 + d);
            CacheAttentionSpec p = spec(DType.BF16, d, 2, 40, 40, 64, true).toBuilder().window(7, 0).sinks(SINKS).build();
            prefill(p, cache(DType.BF16, 2, 64, d, 0), new int[] {33, 41}, new int[] {17, 19}, 600 + d);
        }
        CacheAttentionSpec plain = spec(DType.BF16, 64, 2, 1, 2, 300, false);
        decode(plain, cache(DType.BF16, 2, 300, 64, 0), 7, new int[] {300, 33}, new int[] {1, 1}, 700);
    }

    /** The bf16 append and copies move bits: every bit pattern, NaNs included, arrives unchanged. */
    @Test
    void bf16AppendAndCopiesMoveBits() {
        KvCacheSpec c = cache(DType.BF16, 2, 40, 64, 0);
        int n = Math.toIntExact(c.elements());
        Random random = new Random(801);
        ShortArray k = randomBits(random, n);
        ShortArray v = randomBits(random, n);
        int[] lengths = {11, 25};
        int[] newTokens = {11, 9};
        IntArray step = CacheKernelsTest.stepArray(lengths, newTokens);
        int maxNew = 11;
        int[] ap = JavaCacheTasks.appendParams(c, new io.github.tornadoattention.TensorStrides(2L * maxNew * 64,
                (long) maxNew * 64, 64), maxNew, false);
        IntArray apArray = IntArray.fromArray(ap);
        ShortArray newK = randomBits(random, 2 * 2 * maxNew * 64);
        ShortArray newV = randomBits(random, 2 * 2 * maxNew * 64);
        short[] expectedK = k.toHeapArray();
        short[] expectedV = v.toHeapArray();
        for (int b = 0; b < 2; b++) {
            for (int h = 0; h < 2; h++) {
                for (int j = 0; j < newTokens[b]; j++) {
                    int from = (b * 2 + h) * maxNew * 64 + j * 64;
                    int to = (int) c.strides().rowStart(b, h, lengths[b] - newTokens[b] + j);
                    for (int e = 0; e < 64; e++) {
                        expectedK[to + e] = newK.get(from + e);
                        expectedV[to + e] = newV.get(from + e);
                    }
                }
            }
        }
        FloatArray sink = new FloatArray(1);
        IntArray blocks = new IntArray(1);
        EmulatorAccess.launch(JavaCacheTasks.appendGroups(apArray), CacheKernels.APPEND_THREADS,
                kc -> CacheKernels.appendBf16(kc, newK, newV, k, v, step, blocks, apArray, sink));
        assertTrue(Arrays.equals(expectedK, k.toHeapArray()), "bf16 append: K bits");
        assertTrue(Arrays.equals(expectedV, v.toHeapArray()), "bf16 append: V bits");
        int[] copies = {2, 0, 3000, 700, 1000, 5000, 50};   // no source overlaps a destination (they run at once)
        System.arraycopy(k.toHeapArray(), 0, expectedK, 3000, 700);
        System.arraycopy(k.toHeapArray(), 1000, expectedK, 5000, 50);
        IntArray copyArray = IntArray.fromArray(copies);
        EmulatorAccess.launch(2, CacheKernels.COPY_THREADS, kc -> CacheKernels.copyRangesBf16(kc, k, v, copyArray));
        assertTrue(Arrays.equals(expectedK, k.toHeapArray()), "bf16 copies: K bits");
    }

    private static ShortArray randomBits(Random random, int n) {
        ShortArray a = new ShortArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, (short) random.nextInt(1 << 16));
        }
        return a;
    }

}
