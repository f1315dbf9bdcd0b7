package io.github.tornadoattention.tornado.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.tornado.EmulatorAccess;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The Java cache kernels run on the CPU by the KernelEmulator, against {@link CpuReference#cached} (attention) and a
 * plain model (append, copies), on random fp16 inputs with the outputs poisoned (NaN) first.
 */
class CacheKernelsTest {
    private static final double MAX_ABS = 1e-2;
    private static final double MAX_REL = 2e-3;

    /** A cache of random fp16 contents, its block table (shuffled pages) and a step. */
    private static final class Fixture {
        final CacheAttentionSpec spec;
        final KvCacheSpec cacheSpec;
        final HalfFloatArray k;
        final HalfFloatArray v;
        final int[] table;
        final IntArray blockTable;
        final int[] lengths;
        final int[] newTokens;
        final IntArray step;
        final Random random;

        Fixture(long seed, int d, int batch, int heads, int kvHeads, int maxQuery, int maxTotal, int capacity,
                int pageSize, boolean causal, Layout layout, int[] lengths, int[] newTokens) {
            this(seed, d, batch, heads, kvHeads, maxQuery, maxTotal, capacity, pageSize, causal, layout, lengths, newTokens,
                    b -> b);
        }

        /** With {@code features} applied to the spec's builder (window, softcap, sinks). */
        Fixture(long seed, int d, int batch, int heads, int kvHeads, int maxQuery, int maxTotal, int capacity,
                int pageSize, boolean causal, Layout layout, int[] lengths, int[] newTokens,
                java.util.function.UnaryOperator<CacheAttentionSpec.Builder> features) {
            this.random = new Random(seed);
            this.spec = features.apply(CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(kvHeads).headDim(d)
                    .maxQueryLength(maxQuery).maxTotalQueries(maxTotal).maxLength(capacity).causal(causal).layout(layout))
                    .build();
            this.cacheSpec = pageSize == 0 ? KvCacheSpec.contiguous(batch, kvHeads, capacity, d)
                    : KvCacheSpec.paged(batch, kvHeads, capacity, d, pageSize);
            this.k = randomHalves(random, Math.toIntExact(cacheSpec.elements()));
            this.v = randomHalves(random, Math.toIntExact(cacheSpec.elements()));
            List<Integer> pages = new ArrayList<>();
            for (int p = 0; p < Math.max(1, cacheSpec.pages()); p++) {
                pages.add(p);
            }
            Collections.shuffle(pages, random);
            this.table = pages.stream().mapToInt(Integer::intValue).toArray();
            this.blockTable = IntArray.fromArray(table);
            this.lengths = lengths;
            this.newTokens = newTokens;
            this.step = stepArray(lengths, newTokens);
        }

        /** Element index of row {@code j} of (slot b, kv head h) in the storage. */
        long rowStart(int b, int h, int j) {
            TensorStrides s = cacheSpec.strides();
            if (cacheSpec.paged()) {
                int page = table[b * cacheSpec.pagesPerSequence() + j / cacheSpec.pageSize()];
                return page * s.batch() + h * s.head() + (long) (j % cacheSpec.pageSize()) * s.row();
            }
            return s.rowStart(b, h, j);
        }

        CpuReference.RowSource source(HalfFloatArray a) {
            return (b, h, j, into) -> {
                long at = rowStart(b, h, j);
                for (int c = 0; c < into.length; c++) {
                    into[c] = a.get((int) (at + c)).getFloat32();
                }
            };
        }
    }

    static IntArray stepArray(int[] lengths, int[] newTokens) {
        int b = lengths.length;
        int[] s = new int[3 * b + 1];
        for (int i = 0; i < b; i++) {
            s[i] = lengths[i];
            s[b + i] = newTokens[i];
            s[2 * b + i] = s[3 * b];
            s[3 * b] += newTokens[i];
        }
        return IntArray.fromArray(s);
    }

    static HalfFloatArray randomHalves(Random random, int n) {
        HalfFloatArray a = new HalfFloatArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, new HalfFloat((float) random.nextGaussian()));
        }
        return a;
    }

    static float[] floats(HalfFloatArray a) {
        float[] f = new float[a.getSize()];
        for (int i = 0; i < f.length; i++) {
            f[i] = a.get(i).getFloat32();
        }
        return f;
    }

    static HalfFloatArray poisonedHalves(int n) {
        HalfFloatArray a = new HalfFloatArray(n);
        a.init(new HalfFloat(Float.NaN));
        return a;
    }

    static FloatArray poisonedFloats(int n) {
        FloatArray a = new FloatArray(n);
        a.init(Float.NaN);
        return a;
    }

    /** Decode: split pass + combine, against the reference; every row of o and lse is checked. */
    private static void decode(Fixture f, JavaCacheTasks tasks) {
        CacheAttentionSpec spec = f.spec;
        int d = spec.headDim();
        HalfFloatArray q = randomHalves(f.random, Math.toIntExact(spec.denseQueryElements()));
        HalfFloatArray o = poisonedHalves(q.getSize());
        FloatArray lse = poisonedFloats(Math.toIntExact(spec.denseLseElements()));
        FloatArray ws = poisonedFloats(Math.toIntExact(tasks.decodeWorkspaceFloats()));
        IntArray params = tasks.attentionParams(true);
        float scale = spec.scale();
        CacheKernels.DecodeSplit split = CacheKernels.decodeSplit(tasks.config());
        EmulatorAccess.launch(Math.toIntExact(tasks.decodeGroups()), tasks.config().threads(),
                kc -> split.apply(kc, q, f.k, f.v, f.step, f.blockTable, params, ws, scale, tasks.scores()));
        assertTrue(EmulatorAccess.localBytesOfLastLaunch() <= 48 * 1024);
        EmulatorAccess.launch(tasks.combineGroups(), tasks.config().threads(),
                kc -> CacheKernels.decodeCombine(kc, ws, f.step, params, o, lse, tasks.scores()));
        CpuReference.Result ref = CpuReference.cached(spec, floats(q), false, f.source(f.k), f.source(f.v), f.lengths,
                f.newTokens);
        compare("decode " + describe(f) + " splits " + tasks.splits(), floats(o), lse, ref, spec.denseLseElements(), d);
    }

    /** Packed prefill against the reference; rows past the total must stay as they were (poisoned). */
    private static void prefill(Fixture f, JavaCacheTasks tasks) {
        CacheAttentionSpec spec = f.spec;
        int d = spec.headDim();
        HalfFloatArray q = randomHalves(f.random, Math.toIntExact(spec.packedQueryElements()));
        HalfFloatArray o = poisonedHalves(q.getSize());
        FloatArray lse = poisonedFloats(Math.toIntExact(spec.packedLseElements()));
        FloatArray ws = poisonedFloats(Math.toIntExact(spec.packedQueryElements()));
        IntArray params = tasks.attentionParams(true);
        float scale = spec.scale();
        CacheKernels.Prefill kernel = CacheKernels.prefill(tasks.config());
        EmulatorAccess.launch(tasks.prefillGroups(), tasks.config().threads(),
                kc -> kernel.apply(kc, q, f.k, f.v, f.step, f.blockTable, params, ws, o, lse, scale, tasks.scores()));
        CpuReference.Result ref = CpuReference.cached(spec, floats(q), true, f.source(f.k), f.source(f.v), f.lengths,
                f.newTokens);
        int total = Arrays.stream(f.newTokens).sum();
        float[] out = floats(o);
        int rowElements = spec.heads() * d;
        for (int i = total * rowElements; i < out.length; i++) {
            assertTrue(Float.isNaN(out[i]), "prefill wrote o[" + i + "] past the total " + total);
        }
        for (int h = 0; h < spec.heads(); h++) {
            for (int t = total; t < spec.maxTotalQueries(); t++) {
                assertTrue(Float.isNaN(lse.get(h * spec.maxTotalQueries() + t)), "prefill wrote lse past the total");
            }
        }
        // Only rows < total are compared below: give the poisoned tail the reference's values.
        for (int i = total * rowElements; i < out.length; i++) {
            out[i] = 0;
        }
        for (int h = 0; h < spec.heads(); h++) {
            for (int t = total; t < spec.maxTotalQueries(); t++) {
                lse.set(h * spec.maxTotalQueries() + t, Float.NEGATIVE_INFINITY);
            }
        }
        compare("prefill " + describe(f), out, lse, ref, spec.packedLseElements(), d);
    }

    private static String describe(Fixture f) {
        return "D=" + f.spec.headDim() + " Hq=" + f.spec.heads() + " Hkv=" + f.spec.kvHeads() + " Sq="
                + f.spec.maxQueryLength() + " causal=" + f.spec.causal() + " page=" + f.cacheSpec.pageSize() + " L="
                + Arrays.toString(f.lengths) + " n=" + Arrays.toString(f.newTokens);
    }

    private static void compare(String what, float[] out, FloatArray lse, CpuReference.Result ref, long lseRows, int d) {
        double maxAbs = 0;
        double err2 = 0;
        double ref2 = 0;
        for (int i = 0; i < out.length; i++) {
            double e = Math.abs(out[i] - ref.output()[i]);
            if (!(e <= MAX_ABS)) {
                throw new AssertionError(what + ": o[" + i + "] = " + out[i] + ", expected " + ref.output()[i]);
            }
            maxAbs = Math.max(maxAbs, e);
            err2 += e * e;
            ref2 += ref.output()[i] * ref.output()[i];
        }
        assertTrue(Math.sqrt(err2) <= MAX_REL * Math.sqrt(ref2) + 1e-6, what + ": relative error " + Math.sqrt(err2 / ref2));
        for (int r = 0; r < lseRows; r++) {
            double expected = ref.logSumExp()[r];
            float got = lse.get(r);
            boolean ok = expected == Double.NEGATIVE_INFINITY ? got == Float.NEGATIVE_INFINITY
                    : Math.abs(got - expected) <= 1e-3 * Math.max(1, Math.abs(expected));
            assertTrue(ok, what + ": lse[" + r + "] = " + got + ", expected " + expected);
        }
        assertTrue(d > 0);
    }

    @Test
    void decodeContiguousGqaRaggedIdleAndEmptySlots() {
        // Slot 1 idle (n = 0), slot 2 empty (L = 0), slot 3 long enough for several tiles per split.
        for (int d : new int[] {64, 128}) {
            Fixture f = new Fixture(11 + d, d, 4, 4, 2, 3, 12, 200, 0, true, Layout.BHSD,
                    new int[] {5, 9, 0, 150}, new int[] {3, 0, 0, 2});
            decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 3));
        }
    }

    @Test
    void decodeSmallHeadDimsEveryRowCopyCount() {
        // D = 16, 32: a thread's 16 keys per load trip wrap around the tile. G = 8: n = 1, 2, 0, 1 give 8 and 16 rows
        // (2 and 1 row copies), G = 2 below gives 2 rows (4 copies).
        for (int d : new int[] {16, 32}) {
            Fixture f = new Fixture(61 + d, d, 4, 8, 1, 2, 8, 100, 0, true, Layout.BHSD,
                    new int[] {37, 100, 0, 64}, new int[] {1, 2, 0, 1});
            decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 3));
            Fixture g = new Fixture(71 + d, d, 2, 4, 2, 1, 2, 90, 16, false, Layout.BSHD,
                    new int[] {90, 45}, new int[] {1, 1});
            decode(g, JavaCacheTasks.withSplits(g.spec, g.cacheSpec, 2));
        }
    }

    @Test
    void decodeSingleTokenPagedShuffledNonCausal() {
        for (int d : new int[] {64, 128}) {
            Fixture f = new Fixture(21 + d, d, 3, 8, 2, 1, 3, 130, 16, false, Layout.BHSD,
                    new int[] {1, 77, 130}, new int[] {1, 1, 1});
            decode(f, new JavaCacheTasks(f.spec, f.cacheSpec, 2));
        }
    }

    @Test
    void decodeSpeculativeRowsPagedCausalBshd() {
        // G * Sq = 4 * 5 = 20 rows: two row blocks per KV head; queries that see few keys (n close to L).
        Fixture f = new Fixture(31, 128, 3, 8, 2, 5, 15, 96, 8, true, Layout.BSHD,
                new int[] {5, 40, 96}, new int[] {5, 2, 4});
        decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 4));
    }

    @Test
    void decodeMhaOneSplitAndManySplits() {
        for (int splits : new int[] {1, 7}) {
            Fixture f = new Fixture(41 + splits, 64, 2, 2, 2, 1, 2, 300, 0, true, Layout.BHSD,
                    new int[] {300, 33}, new int[] {1, 1});
            decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, splits));
        }
    }

    @Test
    void decodeNanInOneKeyReachesExactlyTheRowsThatSeeIt() {
        Fixture f = new Fixture(51, 64, 2, 2, 1, 2, 4, 64, 0, true, Layout.BHSD, new int[] {40, 40},
                new int[] {2, 2});
        // Key 39 of slot 0 is seen by query 1 only (causal: query 0 sees keys <= 38).
        long at = f.rowStart(0, 0, 39);
        f.k.set((int) at + 3, new HalfFloat(Float.NaN));
        JavaCacheTasks tasks = JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 2);
        HalfFloatArray q = randomHalves(f.random, Math.toIntExact(f.spec.denseQueryElements()));
        HalfFloatArray o = poisonedHalves(q.getSize());
        FloatArray lse = poisonedFloats(Math.toIntExact(f.spec.denseLseElements()));
        FloatArray ws = poisonedFloats(Math.toIntExact(tasks.decodeWorkspaceFloats()));
        IntArray params = tasks.attentionParams(true);
        CacheKernels.DecodeSplit split = CacheKernels.decodeSplit(tasks.config());
        EmulatorAccess.launch(Math.toIntExact(tasks.decodeGroups()), tasks.config().threads(),
                kc -> split.apply(kc, q, f.k, f.v, f.step, f.blockTable, params, ws, f.spec.scale(), tasks.scores()));
        EmulatorAccess.launch(tasks.combineGroups(), tasks.config().threads(),
                kc -> CacheKernels.decodeCombine(kc, ws, f.step, params, o, lse, tasks.scores()));
        int d = 64;
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 2; s++) {
                int row = h * 2 + s;   // slot 0
                boolean sees = s == 1;
                assertEquals(sees, Float.isNaN(lse.get(row)), "lse of head " + h + " query " + s);
                for (int c = 0; c < d; c++) {
                    assertEquals(sees, Float.isNaN(o.get(row * d + c).getFloat32()), "o of head " + h + " query " + s);
                }
            }
        }
        for (int i = 4 * d; i < o.getSize(); i++) {
            assertTrue(!Float.isNaN(o.get(i).getFloat32()), "slot 1 is unaffected");
        }
    }

    @Test
    void prefillPackedPromptsContiguousAndPaged() {
        // Several prompts, one idle slot, a prompt appended to an existing prefix, tiles spanning prompts.
        for (int pageSize : new int[] {0, 16}) {
            for (boolean causal : new boolean[] {true, false}) {
                Fixture f = new Fixture(61 + pageSize + (causal ? 1 : 0), 64, 4, 4, 2, 64, 56, 80, pageSize, causal,
                        Layout.BHSD, new int[] {20, 0, 47, 9}, new int[] {20, 0, 22, 3});
                prefill(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 1));
            }
        }
    }

    @Test
    void prefillD128Gqa() {
        Fixture f = new Fixture(71, 128, 2, 4, 1, 40, 40, 64, 8, true, Layout.BHSD, new int[] {33, 41},
                new int[] {17, 19});
        prefill(f, new JavaCacheTasks(f.spec, f.cacheSpec, 1));
    }

    /**
     * Window (at each sequence's own position), softcap and sinks on the decode (split + combine: the sink joins once,
     * in the combine) and the packed prefill, contiguous and paged, against {@link CpuReference#cached}; rows that see no
     * key (window (0, 0) non-causal with n > L... and idle slots) and every head dim of the table.
     */
    @Test
    void decodeWithWindowSoftcapAndSinks() {
        float[] sinks = {0.9f, -0.6f, 1.7f, 0.0f};
        for (int d : new int[] {32, 64, 128}) {
            Fixture f = new Fixture(81 + d, d, 4, 4, 2, 3, 12, 200, d == 64 ? 16 : 0, true, Layout.BHSD,
                    new int[] {5, 9, 0, 170}, new int[] {3, 0, 0, 2},
                    b -> b.window(24, 0).softcap(2.5f).sinks(sinks));
            decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 3));
        }
        // Each feature alone, non-causal with a right window side, one split and several.
        for (int splits : new int[] {1, 4}) {
            Fixture w = new Fixture(91 + splits, 64, 2, 4, 1, 2, 4, 150, 0, false, Layout.BSHD, new int[] {150, 40},
                    new int[] {2, 1}, b -> b.window(10, 3));
            decode(w, JavaCacheTasks.withSplits(w.spec, w.cacheSpec, splits));
            Fixture c = new Fixture(93 + splits, 64, 2, 4, 1, 2, 4, 150, 0, true, Layout.BHSD, new int[] {150, 40},
                    new int[] {2, 1}, b -> b.softcap(1.0f));
            decode(c, JavaCacheTasks.withSplits(c.spec, c.cacheSpec, splits));
            Fixture s = new Fixture(95 + splits, 64, 2, 4, 1, 2, 4, 150, 0, true, Layout.BHSD, new int[] {150, 0},
                    new int[] {2, 0}, b -> b.sinks(sinks));
            decode(s, JavaCacheTasks.withSplits(s.spec, s.cacheSpec, splits));
        }
    }

    @Test
    void prefillWithWindowSoftcapAndSinks() {
        float[] sinks = {0.4f, -2.0f, 1.1f, 0.3f};
        for (int pageSize : new int[] {0, 16}) {
            for (boolean causal : new boolean[] {true, false}) {
                Fixture f = new Fixture(101 + pageSize + (causal ? 1 : 0), 64, 4, 4, 2, 64, 56, 80, pageSize, causal,
                        Layout.BHSD, new int[] {20, 0, 47, 9}, new int[] {20, 0, 22, 3},
                        b -> b.window(7, causal ? 0 : 2).softcap(3.0f).sinks(sinks));
                prefill(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 1));
            }
        }
        Fixture big = new Fixture(111, 128, 2, 4, 1, 40, 40, 64, 8, true, Layout.BHSD, new int[] {33, 41},
                new int[] {17, 19}, b -> b.window(5, -1).sinks(sinks));
        prefill(big, new JavaCacheTasks(big.spec, big.cacheSpec, 1));
    }

    /**
     * The window skips the key tiles left of every row: a NaN in V at key 0 of each slot, which no row's window reaches,
     * leaves the decode and the prefill finite (a loaded tile gives 0 * NaN = NaN in P V).
     */
    @Test
    void theWindowSkipsKeysLeftOfEveryRow() {
        Fixture f = new Fixture(121, 64, 2, 2, 1, 2, 4, 200, 0, true, Layout.BHSD, new int[] {200, 130},
                new int[] {2, 2}, b -> b.window(16, 0));
        for (int b = 0; b < 2; b++) {
            f.v.set((int) f.rowStart(b, 0, 0), new HalfFloat(Float.NaN));
        }
        decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 2));
        prefill(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 1));
    }

    /** The append's expected cache: rows of new K/V at L_b - n_b + j, as in kv_cache_append. */
    private static void appendModel(Fixture f, float[] cache, HalfFloatArray src, int[] ap) {
        int batch = ap[CacheKernels.A_B];
        int hkv = ap[CacheKernels.A_HKV];
        int d = ap[CacheKernels.A_D];
        int off = 0;
        for (int b = 0; b < batch; b++) {
            int n = f.newTokens[b];
            for (int h = 0; h < hkv; h++) {
                for (int j = 0; j < n; j++) {
                    long from = ap[CacheKernels.A_PACKED] == 1
                            ? (long) (off + j) * ap[CacheKernels.A_NEW_STRIDE + 2] + (long) h * ap[CacheKernels.A_NEW_STRIDE + 1]
                            : (long) b * ap[CacheKernels.A_NEW_STRIDE] + (long) h * ap[CacheKernels.A_NEW_STRIDE + 1]
                                    + (long) j * ap[CacheKernels.A_NEW_STRIDE + 2];
                    long to = f.rowStart(b, h, f.lengths[b] - n + j);
                    for (int c = 0; c < d; c++) {
                        cache[(int) (to + c)] = src.get((int) (from + c)).getFloat32();
                    }
                }
            }
            off += n;
        }
    }

    private static void append(Fixture f, boolean packed, Layout layout, int maxNew) {
        int d = f.cacheSpec.headDim();
        int hkv = f.cacheSpec.kvHeads();
        int batch = f.cacheSpec.slots();
        TensorStrides strides = layout == Layout.BSHD ? new TensorStrides((long) maxNew * hkv * d, d, (long) hkv * d)
                : new TensorStrides((long) hkv * maxNew * d, (long) maxNew * d, d);
        int[] ap = JavaCacheTasks.appendParams(f.cacheSpec, packed ? null : strides, maxNew, packed);
        IntArray apArray = IntArray.fromArray(ap);
        int rows = packed ? Arrays.stream(f.newTokens).sum() : batch * maxNew;
        HalfFloatArray newK = randomHalves(f.random, Math.max(1, rows * hkv * d));
        HalfFloatArray newV = randomHalves(f.random, Math.max(1, rows * hkv * d));
        float[] expectedK = floats(f.k);
        float[] expectedV = floats(f.v);
        appendModel(f, expectedK, newK, ap);
        appendModel(f, expectedV, newV, ap);
        FloatArray sink = poisonedFloats(1);
        EmulatorAccess.launch(JavaCacheTasks.appendGroups(apArray), CacheKernels.APPEND_THREADS,
                kc -> CacheKernels.append(kc, newK, newV, f.k, f.v, f.step, f.blockTable, apArray, sink));
        String what = "append packed=" + packed + " " + layout + " " + describe(f);
        assertTrue(Arrays.equals(expectedK, floats(f.k)), what + ": K");
        assertTrue(Arrays.equals(expectedV, floats(f.v)), what + ": V");
        assertTrue(!Float.isNaN(sink.get(0)), "the append reads the caches into its sink");
    }

    @Test
    void appendDenseAndPackedContiguousAndPaged() {
        for (int pageSize : new int[] {0, 4}) {
            for (int d : new int[] {64, 128}) {
                for (Layout layout : new Layout[] {Layout.BHSD, Layout.BSHD}) {
                    Fixture f = new Fixture(81 + pageSize + d, d, 3, 4, 2, 11, 33, 40, pageSize, true, Layout.BHSD,
                            new int[] {11, 0, 25}, new int[] {11, 0, 9});
                    append(f, false, layout, 11);
                }
                Fixture f = new Fixture(91 + pageSize + d, d, 4, 4, 2, 16, 64, 40, pageSize, true, Layout.BHSD,
                        new int[] {16, 3, 0, 21}, new int[] {16, 2, 0, 13});
                append(f, true, Layout.BHSD, 16);
            }
        }
    }

    @Test
    void appendThenDecodeSeesTheNewTokens() {
        Fixture f = new Fixture(95, 64, 2, 4, 2, 2, 4, 48, 16, true, Layout.BHSD, new int[] {30, 2},
                new int[] {2, 2});
        append(f, false, Layout.BHSD, 2);
        decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 2));
    }

    @Test
    void copyRangesCopiesBothCachesAndZeroCopiesNothing() {
        Fixture f = new Fixture(101, 64, 2, 2, 2, 1, 2, 64, 16, true, Layout.BHSD, new int[] {1, 1}, new int[] {1, 1});
        int page = 2 * 16 * 64;   // elements of one page (Hkv x pageSize x D)
        int[] copies = {3, 0, 5 * page, page, 2 * page + 7, 7 * page, 300, 6 * page, 3 * page + 1, 1000};
        float[] expectedK = floats(f.k);
        float[] expectedV = floats(f.v);
        for (int i = 0; i < copies[0]; i++) {
            System.arraycopy(floats(f.k), copies[1 + 3 * i], expectedK, copies[2 + 3 * i], copies[3 + 3 * i]);
            System.arraycopy(floats(f.v), copies[1 + 3 * i], expectedV, copies[2 + 3 * i], copies[3 + 3 * i]);
        }
        IntArray copyArray = IntArray.fromArray(copies);
        EmulatorAccess.launch(3, CacheKernels.COPY_THREADS, kc -> CacheKernels.copyRanges(kc, f.k, f.v, copyArray));
        assertTrue(Arrays.equals(expectedK, floats(f.k)), "K copies");
        assertTrue(Arrays.equals(expectedV, floats(f.v)), "V copies");
        IntArray none = IntArray.fromArray(new int[] {0, 0, page, 10});
        EmulatorAccess.launch(2, CacheKernels.COPY_THREADS, kc -> CacheKernels.copyRanges(kc, f.k, f.v, none));
        assertTrue(Arrays.equals(expectedK, floats(f.k)), "n = 0 copies nothing");
    }

    @Test
    void splitsFollowTheComputeUnitsAndCapacity() {
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(8).heads(32).kvHeads(8).headDim(128)
                .maxQueryLength(1).maxLength(32768).build();
        KvCacheSpec cache = KvCacheSpec.paged(8, 8, 32768, 128, 16);
        JavaCacheTasks h100 = new JavaCacheTasks(spec, cache, 132);
        // The one decode split policy: about four blocks per SM over the 8 * 8 row blocks of a split, round(528 / 64).
        assertEquals(8, h100.splits());
        assertEquals(DecodeSplitPolicy.gridSplits(32768, 8 * 8, 132), h100.splits());
        assertEquals(8L * 64, h100.decodeGroups());
        // No split shorter than a granule of keys: a 40-key cache is one split.
        KvCacheSpec small = KvCacheSpec.contiguous(8, 8, 40, 128);
        assertEquals(1, new JavaCacheTasks(spec.toBuilder().maxLength(40).build(), small, 132).splits());
        CacheAttentionSpec spec72 = spec.toBuilder().headDim(72).build();   // not a multiple of 16
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> new JavaCacheTasks(spec72, KvCacheSpec.contiguous(8, 8, 64, 72), 132));
        assertEquals("headDim", e.argument());
        assertThrows(InvalidArgumentException.class, () -> new JavaCacheTasks(spec, cache, 0));
    }

    @Test
    void localArraysMatchTheDeclaredSizes() {
        Fixture f = new Fixture(111, 64, 1, 1, 1, 1, 1, 32, 0, true, Layout.BHSD, new int[] {3}, new int[] {1});
        decode(f, JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 1));
        // Re-run the split pass alone: the last launch above was the combine, which has no local arrays.
        JavaCacheTasks tasks = JavaCacheTasks.withSplits(f.spec, f.cacheSpec, 1);
        int expected = tasks.config().sharedMemoryBytes();
        FloatArray ws = poisonedFloats(Math.toIntExact(tasks.decodeWorkspaceFloats()));
        HalfFloatArray q = randomHalves(f.random, 64);
        IntArray params = tasks.attentionParams(false);
        CacheKernels.DecodeSplit split = CacheKernels.decodeSplit(tasks.config());
        EmulatorAccess.launch(1, tasks.config().threads(),
                kc -> split.apply(kc, q, f.k, f.v, f.step, f.blockTable, params, ws, 0.125f, tasks.scores()));
        assertEquals(expected, EmulatorAccess.localBytesOfLastLaunch());
        assertTrue(expected <= 48 * 1024);
    }

    /** The append-params words are flash_cache.cuh's enum AppendParam (the PTX twin reads the same block). */
    @Test
    void appendParamsAreFlashCacheAppendParamNameForName() throws Exception {
        Map<String, Integer> header = appendParamEnum(Files.readString(flashCacheHeader()));
        assertTrue(header.containsKey("A_PACKED"), "parsed " + header);
        Map<String, Integer> java = new TreeMap<>();
        for (Field field : CacheKernels.class.getDeclaredFields()) {
            if (field.getName().startsWith("A_") && Modifier.isStatic(field.getModifiers()) && field.getType() == int.class) {
                java.put(field.getName(), field.getInt(null));
            }
        }
        assertEquals(header, java, "CacheKernels must declare flash_cache.cuh's AppendParam, name for name");
    }

    private static Path flashCacheHeader() throws IOException {
        Path dir = Path.of(System.getProperty("basedir", ".")).toAbsolutePath();
        for (Path p = dir; p != null; p = p.getParent()) {
            Path candidate = p.resolve("ptx-overrides/src/flash_cache.cuh");
            if (Files.exists(candidate)) {
                return candidate;
            }
        }
        throw new IOException("ptx-overrides/src/flash_cache.cuh not found above " + dir);
    }

    static Map<String, Integer> appendParamEnum(String header) {
        Matcher body = Pattern.compile("enum\\s+AppendParam\\s*\\{(.*?)\\}", Pattern.DOTALL).matcher(header);
        assertTrue(body.find(), "flash_cache.cuh has no enum AppendParam");
        String text = body.group(1).replaceAll("//[^\n]*", "").replaceAll("/\\*.*?\\*/", "");
        Map<String, Integer> out = new TreeMap<>();
        for (String item : text.split(",")) {
            if (item.isBlank()) {
                continue;
            }
            Matcher m = Pattern.compile("\\s*(\\w+)\\s*=\\s*(\\d+)\\s*").matcher(item);
            assertTrue(m.matches(), "AppendParam items must be NAME = number: '" + item.strip() + "'");
            out.put(m.group(1), Integer.parseInt(m.group(2)));
        }
        return out;
    }
}
