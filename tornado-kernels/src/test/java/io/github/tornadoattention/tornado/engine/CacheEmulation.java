package io.github.tornadoattention.tornado.engine;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.tornado.EmulatorAccess;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The Java cache kernels of a task spec run on the KernelEmulator against {@link CpuReference#cached} of a reference
 * spec, in either element type (fp16 in HalfFloatArrays, bf16 bits in ShortArrays), outputs poisoned (NaN) first: for
 * the tests here and for those of other packages (the inference device's variants, whose task specs must compute what
 * their plans define). Each call throws an AssertionError naming the first element out of tolerance.
 */
public final class CacheEmulation {
    /** fp16 output (fp32 accumulation): DESIGN.md's bounds. */
    static final double FP16_MAX_ABS = 1e-2;
    static final double FP16_MAX_REL = 2e-3;
    /** bf16 output (8-bit mantissa), the README's bounds for bf16 checks (the reference on the same bf16 inputs). */
    static final double BF16_MAX_ABS = 6e-2;
    static final double BF16_MAX_REL = 1.6e-2;

    private CacheEmulation() {
    }

    /** A cache's contents (random N(0,1) values of the element type) and its block table (shuffled pages). */
    public static final class Cache {
        final KvCacheSpec spec;
        final DType dtype;
        final TornadoNativeArray k;
        final TornadoNativeArray v;
        final float[] kf;
        final float[] vf;
        final int[] table;
        final IntArray blockTable;

        public Cache(KvCacheSpec spec, Random random) {
            DType dtype = spec.dtype();
            this.spec = spec;
            this.dtype = dtype;
            int n = Math.toIntExact(spec.elements());
            this.kf = new float[n];
            this.vf = new float[n];
            this.k = randomTensor(dtype, random, kf);
            this.v = randomTensor(dtype, random, vf);
            List<Integer> pages = new ArrayList<>();
            for (int p = 0; p < Math.max(1, spec.pages()); p++) {
                pages.add(p);
            }
            Collections.shuffle(pages, random);
            this.table = pages.stream().mapToInt(Integer::intValue).toArray();
            this.blockTable = IntArray.fromArray(table);
        }

        long rowStart(int b, int h, int j) {
            TensorStrides s = spec.strides();
            if (spec.paged()) {
                int page = table[b * spec.pagesPerSequence() + j / spec.pageSize()];
                return page * s.batch() + h * s.head() + (long) (j % spec.pageSize()) * s.row();
            }
            return s.rowStart(b, h, j);
        }

        CpuReference.RowSource source(float[] values) {
            return (b, h, j, into) -> System.arraycopy(values, (int) rowStart(b, h, j), into, 0, into.length);
        }

        /** The keys as the reference reads them. */
        public CpuReference.RowSource keys() {
            return source(kf);
        }

        public CpuReference.RowSource values() {
            return source(vf);
        }
    }

    /**
     * An array of {@code values.length} random N(0,1) values of {@code dtype}; {@code values} receives each element's
     * exact value (bf16: the float's top half, so that the reference sees what the kernel reads).
     */
    public static TornadoNativeArray randomTensor(DType dtype, Random random, float[] values) {
        if (dtype == DType.BF16) {
            ShortArray a = new ShortArray(values.length);
            for (int i = 0; i < values.length; i++) {
                short bits = (short) (Float.floatToRawIntBits((float) random.nextGaussian()) >>> 16);
                a.set(i, bits);
                values[i] = Float.intBitsToFloat((bits & 0xFFFF) << 16);
            }
            return a;
        }
        HalfFloatArray a = new HalfFloatArray(values.length);
        for (int i = 0; i < values.length; i++) {
            a.set(i, new HalfFloat((float) random.nextGaussian()));
            values[i] = a.get(i).getFloat32();
        }
        return a;
    }

    /** {@code n} elements of {@code dtype}, each a NaN. */
    public static TornadoNativeArray poisoned(DType dtype, int n) {
        if (dtype == DType.BF16) {
            ShortArray a = new ShortArray(n);
            a.init((short) 0x7FC0);
            return a;
        }
        HalfFloatArray a = new HalfFloatArray(n);
        a.init(new HalfFloat(Float.NaN));
        return a;
    }

    /** The values of a 16-bit array (bf16 decoded here by the definition, not by the kernels' helper). */
    public static float[] values(TornadoNativeArray a) {
        float[] f = new float[Math.toIntExact(a.getSize())];
        for (int i = 0; i < f.length; i++) {
            f[i] = a instanceof ShortArray s ? Float.intBitsToFloat((s.get(i) & 0xFFFF) << 16)
                    : ((HalfFloatArray) a).get(i).getFloat32();
        }
        return f;
    }

    public static FloatArray poisonedFloats(int n) {
        FloatArray a = new FloatArray(n);
        a.init(Float.NaN);
        return a;
    }

    /**
     * Decode (split pass with {@code splits} splits, then the combine) of the kernels built for {@code taskSpec} over a
     * random cache of {@code cacheSpec}, against the reference of {@code referenceSpec} (the same batch, heads, head dim,
     * query rows and layout); every row of o and lse is checked.
     */
    public static void decode(CacheAttentionSpec taskSpec, CacheAttentionSpec referenceSpec, KvCacheSpec cacheSpec,
                              int splits, int[] lengths, int[] newTokens, long seed) {
        Random random = new Random(seed);
        DType dtype = taskSpec.dtype();
        Cache c = new Cache(cacheSpec.withDtype(dtype), random);
        int qn = Math.toIntExact(taskSpec.denseQueryElements());
        float[] qf = new float[qn];
        TornadoNativeArray q = randomTensor(dtype, random, qf);
        TornadoNativeArray o = poisoned(dtype, qn);
        FloatArray lse = poisonedFloats(Math.toIntExact(taskSpec.denseLseElements()));
        runDecode(taskSpec, false, c, splits, CacheKernelsTest.stepArray(lengths, newTokens), q, o, lse);
        CpuReference.Result ref = CpuReference.cached(referenceSpec, qf, false, c.keys(), c.values(), lengths,
                newTokens);
        compare("decode " + describe(taskSpec, cacheSpec, lengths, newTokens) + " splits " + splits, dtype, values(o),
                lse, ref, taskSpec.denseLseElements());
    }

    /**
     * One decode call (split pass with {@code splits} splits, then the combine) of the kernels built for
     * {@code taskSpec} ({@code chunked}: as {@code CacheAttentionTasks.addChunkedDecode} adds them) over {@code c} with
     * the step words {@code step}: dense q, o [B, Hq, Sq, D] of the spec's type and lse [B, Hq, Sq].
     */
    public static void runDecode(CacheAttentionSpec taskSpec, boolean chunked, Cache c, int splits, IntArray step,
                                 TornadoNativeArray q, TornadoNativeArray o, FloatArray lse) {
        DType dtype = taskSpec.dtype();
        JavaCacheTasks tasks = JavaCacheTasks.withSplits(taskSpec, c.spec, splits);
        FloatArray ws = poisonedFloats(Math.toIntExact(tasks.decodeWorkspaceFloats()));
        IntArray params = tasks.attentionParams(true, chunked);
        FloatArray scores = tasks.scores();
        float scale = taskSpec.scale();
        CacheTileConfig config = tasks.config();
        int groups = Math.toIntExact(tasks.decodeGroups());
        if (dtype == DType.BF16) {
            CacheKernels.DecodeSplitBf16 split = CacheKernels.decodeSplitBf16(config);
            EmulatorAccess.launch(groups, config.threads(), kc -> split.apply(kc, (ShortArray) q, (ShortArray) c.k,
                    (ShortArray) c.v, step, c.blockTable, params, ws, scale, scores));
            assertTrue(EmulatorAccess.localBytesOfLastLaunch() <= CacheTileConfig.MAX_SHARED_BYTES);
            EmulatorAccess.launch(tasks.combineGroups(), tasks.combineThreads(),
                    kc -> CacheKernels.decodeCombineBf16(kc, ws, step, params, (ShortArray) o, lse, scores));
        } else {
            CacheKernels.DecodeSplit split = CacheKernels.decodeSplit(config);
            EmulatorAccess.launch(groups, config.threads(), kc -> split.apply(kc, (HalfFloatArray) q,
                    (HalfFloatArray) c.k, (HalfFloatArray) c.v, step, c.blockTable, params, ws, scale, scores));
            assertTrue(EmulatorAccess.localBytesOfLastLaunch() <= CacheTileConfig.MAX_SHARED_BYTES);
            EmulatorAccess.launch(tasks.combineGroups(), tasks.combineThreads(),
                    kc -> CacheKernels.decodeCombine(kc, ws, step, params, (HalfFloatArray) o, lse, scores));
        }
    }

    /**
     * Packed prefill of the kernels built for {@code taskSpec} against the reference of {@code referenceSpec}; rows
     * past the step's total must stay poisoned.
     */
    public static void prefill(CacheAttentionSpec taskSpec, CacheAttentionSpec referenceSpec, KvCacheSpec cacheSpec,
                               int[] lengths, int[] newTokens, long seed) {
        Random random = new Random(seed);
        DType dtype = taskSpec.dtype();
        Cache c = new Cache(cacheSpec.withDtype(dtype), random);
        IntArray step = CacheKernelsTest.stepArray(lengths, newTokens);
        JavaCacheTasks tasks = JavaCacheTasks.withSplits(taskSpec, cacheSpec, 1);
        int qn = Math.toIntExact(taskSpec.packedQueryElements());
        float[] qf = new float[qn];
        TornadoNativeArray q = randomTensor(dtype, random, qf);
        TornadoNativeArray o = poisoned(dtype, qn);
        FloatArray lse = poisonedFloats(Math.toIntExact(taskSpec.packedLseElements()));
        FloatArray ws = poisonedFloats(qn);
        IntArray params = tasks.attentionParams(true);
        FloatArray scores = tasks.scores();
        float scale = taskSpec.scale();
        CacheTileConfig config = tasks.config();
        if (dtype == DType.BF16) {
            CacheKernels.PrefillBf16 kernel = CacheKernels.prefillBf16(config);
            EmulatorAccess.launch(tasks.prefillGroups(), config.threads(), kc -> kernel.apply(kc, (ShortArray) q,
                    (ShortArray) c.k, (ShortArray) c.v, step, c.blockTable, params, ws, (ShortArray) o, lse, scale,
                    scores));
        } else {
            CacheKernels.Prefill kernel = CacheKernels.prefill(config);
            EmulatorAccess.launch(tasks.prefillGroups(), config.threads(), kc -> kernel.apply(kc, (HalfFloatArray) q,
                    (HalfFloatArray) c.k, (HalfFloatArray) c.v, step, c.blockTable, params, ws, (HalfFloatArray) o,
                    lse, scale, scores));
        }
        assertTrue(EmulatorAccess.localBytesOfLastLaunch() <= CacheTileConfig.MAX_SHARED_BYTES);
        CpuReference.Result ref = CpuReference.cached(referenceSpec, qf, true, c.keys(), c.values(), lengths, newTokens);
        int total = Arrays.stream(newTokens).sum();
        float[] out = values(o);
        int rowElements = taskSpec.heads() * taskSpec.headDim();
        for (int i = total * rowElements; i < out.length; i++) {
            assertTrue(Float.isNaN(out[i]), "prefill wrote o[" + i + "] past the total " + total);
            out[i] = (float) ref.output()[i];
        }
        for (int h = 0; h < taskSpec.heads(); h++) {
            for (int t = total; t < taskSpec.maxTotalQueries(); t++) {
                int at = h * taskSpec.maxTotalQueries() + t;
                assertTrue(Float.isNaN(lse.get(at)), "prefill wrote lse past the total");
                lse.set(at, (float) ref.logSumExp()[at]);
            }
        }
        compare("prefill " + describe(taskSpec, cacheSpec, lengths, newTokens), dtype, out, lse, ref,
                taskSpec.packedLseElements());
    }

    private static String describe(CacheAttentionSpec spec, KvCacheSpec cache, int[] lengths, int[] newTokens) {
        return spec.dtype().label() + " D=" + spec.headDim() + " Hq=" + spec.heads() + " Hkv=" + spec.kvHeads() + " Sq="
                + spec.maxQueryLength() + " causal=" + spec.causal() + " features=" + spec.features() + " page="
                + cache.pageSize() + " L=" + Arrays.toString(lengths) + " n=" + Arrays.toString(newTokens);
    }

    /**
     * Throws an AssertionError naming the first of {@code out} and {@code lse} (its first {@code lseRows}) out of the
     * tolerance of {@code dtype} against {@code ref}.
     */
    public static void compare(String what, DType dtype, float[] out, FloatArray lse, CpuReference.Result ref,
                               long lseRows) {
        double maxAbs = dtype == DType.BF16 ? BF16_MAX_ABS : FP16_MAX_ABS;
        double maxRel = dtype == DType.BF16 ? BF16_MAX_REL : FP16_MAX_REL;
        double err2 = 0;
        double ref2 = 0;
        for (int i = 0; i < out.length; i++) {
            double e = Math.abs(out[i] - ref.output()[i]);
            if (!(e <= maxAbs)) {
                throw new AssertionError(what + ": o[" + i + "] = " + out[i] + ", expected " + ref.output()[i]);
            }
            err2 += e * e;
            ref2 += ref.output()[i] * ref.output()[i];
        }
        assertTrue(Math.sqrt(err2) <= maxRel * Math.sqrt(ref2) + 1e-6, what + ": relative error "
                + Math.sqrt(err2 / ref2));
        for (int r = 0; r < lseRows; r++) {
            double expected = ref.logSumExp()[r];
            float got = lse.get(r);
            boolean ok = expected == Double.NEGATIVE_INFINITY ? got == Float.NEGATIVE_INFINITY
                    : Math.abs(got - expected) <= 1e-3 * Math.max(1, Math.abs(expected));
            assertTrue(ok, what + ": lse[" + r + "] = " + got + ", expected " + expected);
        }
    }
}
