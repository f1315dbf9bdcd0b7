package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The CUDA backend's tornado-mma kernels ({@link MmaCpAsyncKernels}) run by {@link KernelEmulator} on the CPU with the
 * semantics of the CUDA C that TornadoVM generates ({@link KernelEmulator#cudaKernel}: fminf/fmaxf, {@code >>>} as an
 * arithmetic shift, masks that Graal folds away dropped, division by a power of two as Graal's shifts, in the kernels
 * and the helpers they call) and of cp.async (a copy is visible only after a wait that covers it and a barrier after that;
 * {@link KernelEmulator.CopyLanding}), against the CPU reference on fresh random inputs with the output and logsumexp
 * poisoned first (NaN never passes): every head dim of the table, causal and not, fp16 and bf16 (bf16 within the bf16
 * tolerance of verify/Tolerance), tails, GQA/MQA, BSHD, rows that see no key, window, softcap, sinks, the recompute, a
 * NaN key, and copies landing at issue (a buffer overwritten under its readers would show).
 */
class MmaCpAsyncKernelsTest {
    private static final Map<String, MmaPlan.CpAsyncKernel> KERNELS = new ConcurrentHashMap<>();

    @AfterEach
    void copiesLandAsTheyDefault() {
        KernelEmulator.copiesLand(KernelEmulator.CopyLanding.AT_BARRIER_AFTER_WAIT);
    }

    private static AttentionShape shape(int b, int hq, int hkv, int sq, int skv, int d, boolean causal, Layout layout,
                                        DType dtype) {
        return AttentionShape.builder().batch(b).heads(hq).kvHeads(hkv).queryLength(sq).kvLength(skv).headDim(d)
                .causal(causal).layout(layout).dtype(dtype).build();
    }

    /**
     * Per head dim of the table and element type: not causal with a partial last K/V tile (MQA), causal with Sq < Skv
     * (GQA, BSHD), causal with rows that see no key, and one whose K/V tiles are all full (the unmasked kernel).
     */
    static Stream<AttentionShape> shapes() {
        List<AttentionShape> shapes = new ArrayList<>();
        for (MmaTileConfig config : MmaCpAsyncKernels.CONFIGS) {
            int d = config.headDim();
            for (DType dtype : new DType[] {DType.FP16, DType.BF16}) {
                shapes.add(shape(1, 2, 1, 70, 150, d, false, Layout.BHSD, dtype));
                shapes.add(shape(2, 4, 2, 64, 80, d, true, Layout.BSHD, dtype));
                shapes.add(shape(1, 2, 2, 100, 40, d, true, Layout.BHSD, dtype));
                shapes.add(shape(1, 1, 1, 90, 2 * config.blockKv() * 2, d, false, Layout.BHSD, dtype));
            }
        }
        return shapes.stream();
    }

    @ParameterizedTest
    @MethodSource("shapes")
    void kernelsMatchTheReference(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 51)) {
            ErrorStats errors = run(shape, in, 3, null);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    /** Window, softcap and sinks, alone and together, per head dim, fp16 and bf16. */
    static Stream<AttentionShape> featureShapes() {
        float[] sinks4 = {3.0f, -0.2f, 0.0f, 1.2f};
        List<AttentionShape> shapes = new ArrayList<>();
        for (MmaTileConfig config : MmaCpAsyncKernels.CONFIGS) {
            AttentionShape base = shape(1, 4, 2, 100, 130, config.headDim(), true, Layout.BSHD, DType.FP16);
            shapes.add(base.toBuilder().window(30, 0).softcap(5.0f).sinks(sinks4).build());
            shapes.add(base.toBuilder().causal(false).window(10, 20).build());
            shapes.add(base.toBuilder().dtype(DType.BF16).window(40, 0).softcap(2.0f).sinks(sinks4).build());
        }
        shapes.add(shape(1, 2, 2, 100, 40, 64, true, Layout.BHSD, DType.FP16).toBuilder()
                .sinks(new float[] {0.8f, -1.5f}).build());   // rows with no key: O = 0, logsumexp = the sink
        return shapes.stream();
    }

    @ParameterizedTest
    @MethodSource("featureShapes")
    void featuresMatchTheReference(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 53)) {
            ErrorStats errors = run(shape, in, 5, null);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    /**
     * Copies landing the moment they are issued: a kernel that copied the next tile into a buffer other warps still read
     * (no barrier between their reads and the copy) would read the next tile's K or V there.
     */
    @ParameterizedTest
    @MethodSource("landingAtIssueShapes")
    void kernelsMatchTheReferenceWithCopiesLandingAtIssue(AttentionShape shape) {
        KernelEmulator.copiesLand(KernelEmulator.CopyLanding.AT_ISSUE);
        try (RandomInputs in = RandomInputs.generate(shape, 52)) {
            ErrorStats errors = run(shape, in, 3, null);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    /** One shape of {@link #shapes} per head dim and type: causal, GQA, BSHD, several K/V tiles. */
    static Stream<AttentionShape> landingAtIssueShapes() {
        return shapes().filter(s -> s.batch() == 2);
    }

    /** Keys past the first tile score far above the first tile's max: the tile is recomputed, fp16 and bf16. */
    @ParameterizedTest
    @MethodSource("recomputeShapes")
    void recomputesWhenAScoreExceedsTheReferenceMax(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 7)) {
            float[] k = in.k().toFloatArray();
            int first = MmaTileConfig.forHeadDim(shape.headDim(), MmaTileConfig.Loads.CP_ASYNC).blockKv() * shape.headDim();
            for (int i = first; i < k.length; i++) {
                k[i] *= 5.0f;     // scores ~ N(0, 25) past the first K/V tile
            }
            in.k().copyFrom(k);
            ErrorStats errors = run(shape, in, 1, null);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    static Stream<AttentionShape> recomputeShapes() {
        return MmaCpAsyncKernels.CONFIGS.stream().flatMap(c -> Stream.of(DType.FP16, DType.BF16)
                .map(dtype -> shape(1, 1, 1, 64, 200, c.headDim(), false, Layout.BHSD, dtype)));
    }

    /**
     * One NaN in one key reaches exactly the rows that see it (O NaN in every element, logsumexp NaN), every other row is
     * the reference's: causal (masked: the NaN score becomes 1e30 through fminf, then P NaN) and not with full tiles
     * (unmasked: P NaN), per head dim, fp16 and bf16.
     */
    @ParameterizedTest
    @MethodSource("nanShapes")
    void aNanKeyReachesExactlyTheRowsThatSeeIt(AttentionShape shape) {
        int key = 10;
        try (RandomInputs in = RandomInputs.generate(shape, 11);
             HalfTensor out = HalfTensor.allocate(shape.dtype(), shape.outputElements())) {
            in.k().set(shape.kvStrides().rowStart(0, 1, key) + 7, Float.NaN);
            CpuReference.Result expected = CpuReference.compute(shape, in.q(), in.k(), in.v());
            float[] lse = new float[shape.logSumExpElements()];
            run(shape, in, 4, out, lse);
            List<String> wrong = new ArrayList<>();
            int nanRows = 0;
            double bound = io.github.tornadoattention.verify.Tolerance.maxAbsError(shape.dtype());
            for (int h = 0; h < shape.heads(); h++) {
                for (int i = 0; i < shape.queryLength(); i++) {
                    boolean sees = shape.kvHeadOf(h) == 1 && key <= shape.lastVisibleKey(i);
                    nanRows += sees ? 1 : 0;
                    long start = shape.queryStrides().rowStart(0, h, i);
                    int at = h * shape.queryLength() + i;
                    boolean ok = sees ? Float.isNaN(lse[at]) : Math.abs(lse[at] - expected.logSumExp()[at]) <= 1e-3;
                    for (int c = 0; c < shape.headDim(); c++) {
                        float actual = out.get(start + c);
                        ok &= sees ? Float.isNaN(actual)
                                : Math.abs(actual - expected.output()[Math.toIntExact(start + c)]) <= bound;
                    }
                    if (!ok && wrong.size() < 10) {
                        wrong.add("h" + h + " row " + i + (sees ? " (sees the key)" : "") + ": lse " + lse[at] + ", O[0] "
                                + out.get(start));
                    }
                }
            }
            assertTrue(nanRows > 0 && nanRows < shape.heads() * shape.queryLength());
            assertTrue(wrong.isEmpty(), "wrong rows: " + wrong);
        }
    }

    static Stream<AttentionShape> nanShapes() {
        return MmaCpAsyncKernels.CONFIGS.stream().flatMap(c -> Stream.of(DType.FP16, DType.BF16).flatMap(dtype -> Stream.of(
                shape(1, 4, 2, 150, 150, c.headDim(), true, Layout.BSHD, dtype),
                shape(1, 4, 2, 70, 4 * c.blockKv(), c.headDim(), false, Layout.BHSD, dtype))));
    }

    /**
     * The kernels with every {@code asyncCopyWaitGroup} removed fail: their copies never land (the emulator refuses a
     * kernel that ends with copies not waited for), so the emulator would catch a missing wait.
     */
    @Test
    void withoutTheWaitsTheKernelsFail() {
        AttentionShape shape = shape(1, 2, 1, 70, 150, 64, true, Layout.BHSD, DType.FP16);
        MmaTileConfig config = MmaTileConfig.forHeadDim(64, MmaTileConfig.Loads.CP_ASYNC);
        MmaPlan.CpAsyncKernel noWaits = KernelEmulator.cudaKernelWithout(MmaCpAsyncKernels.class,
                MmaCpAsyncKernels.kernelName(config, false), "asyncCopyWaitGroup");
        try (RandomInputs in = RandomInputs.generate(shape, 54)) {
            assertThrows(IllegalStateException.class, () -> run(shape, in, 2, noWaits));
        }
    }

    /**
     * A copy is visible to another thread only after a wait and a barrier: without the barrier (or without the wait) the
     * other thread reads the old value; with copies landing at issue it reads the new one at once.
     */
    @Test
    void copiesAreVisibleToOtherThreadsAfterAWaitAndABarrier() {
        HalfFloatArray source = new HalfFloatArray(64);
        for (int i = 0; i < 64; i++) {
            source.set(i, new uk.ac.manchester.tornado.api.types.HalfFloat((float) (i + 1)));
        }
        int expected = (Float.floatToFloat16(1.0f) & 0xFFFF) | (Float.floatToFloat16(2.0f) << 16);
        uk.ac.manchester.tornado.api.types.arrays.IntArray seen = new uk.ac.manchester.tornado.api.types.arrays.IntArray(4);
        KernelEmulator.launch(1, 32, kc -> {
            int[] tile = kc.allocateIntLocalArray(32);
            int t = kc.localIdx;
            kc.asyncCopyToLocal(tile, t, source, 2 * t + MmaCpAsyncKernels.CP_ASYNC_SKEW);
            kc.asyncCopyCommit();
            kc.localBarrier();
            int beforeWait = tile[(t + 1) & 31];
            kc.asyncCopyWaitGroup(0);
            int afterWaitOnly = tile[(t + 1) & 31];
            kc.localBarrier();
            if (t == 31) {
                seen.set(0, beforeWait);
                seen.set(1, afterWaitOnly);
                seen.set(2, tile[0]);
            }
        });
        assertEquals(0, seen.get(0), "visible before the wait");
        assertEquals(0, seen.get(1), "visible to another thread before the barrier");
        assertEquals(expected, seen.get(2));
        KernelEmulator.copiesLand(KernelEmulator.CopyLanding.AT_ISSUE);
        KernelEmulator.launch(1, 1, kc -> {
            int[] tile = kc.allocateIntLocalArray(4);
            kc.asyncCopyToLocal(tile, 0, source, MmaCpAsyncKernels.CP_ASYNC_SKEW);
            seen.set(3, tile[0]);
            kc.asyncCopyCommit();
            kc.asyncCopyWaitGroup(0);
            kc.localBarrier();
        });
        assertEquals(expected, seen.get(3));
    }

    /** The emulated bf16 mma decodes bf16 bits (2 x 3 + 0.5 x -4 = 4, which read as fp16 bits would be tiny numbers). */
    @Test
    void emulatedBf16MmaMultipliesBf16() {
        int two = Float.floatToRawIntBits(2.0f) >>> 16;
        int half = Float.floatToRawIntBits(0.5f) >>> 16;
        int three = Float.floatToRawIntBits(3.0f) >>> 16;
        int minusFour = Float.floatToRawIntBits(-4.0f) >>> 16;
        FloatArray out = new FloatArray(128);
        KernelEmulator.launch(1, 32, kc -> {
            int[] a = kc.allocateIntLocalArray(128);   // A[m][0] = 2, A[m][1] = 0.5, else 0
            int[] b = kc.allocateIntLocalArray(64);    // B[0][n] = 3, B[1][n] = -4, else 0
            int lane = kc.localIdx;
            for (int i = lane; i < 128; i += 32) {
                a[i] = (i & 7) == 0 ? two | (half << 16) : 0;
            }
            for (int i = lane; i < 64; i += 32) {
                b[i] = i < 4 ? three | (three << 16) : i < 8 ? minusFour | (minusFour << 16) : 0;
            }
            kc.localBarrier();
            float[] d = kc.mmaBF16(kc.mmaLoadA(a, 16, 0), kc.mmaLoadB(b, 16, 0), kc.mmaFragment(0f),
                    uk.ac.manchester.tornado.api.enums.MMAShape.M16N8K16);
            kc.mmaStore(d, out, 0, 0, 8);
        });
        for (int i = 0; i < 128; i++) {
            assertEquals(4.0f, out.get(i), "D[" + i / 8 + "][" + i % 8 + "]");
        }
    }

    /** cp.async's source skips 16 bytes of header, HalfFloatArray.get(e) ARRAY_HEADER: the skew makes the two meet. */
    @Test
    void cpAsyncSkewMeetsHalfFloatArrayIndexing() {
        assertEquals(0, MmaCpAsyncKernels.cpAsyncSkew(16));
        assertEquals(56, MmaCpAsyncKernels.cpAsyncSkew(128));
        assertEquals(MmaCpAsyncKernels.cpAsyncSkew(TornadoNativeArray.ARRAY_HEADER), MmaCpAsyncKernels.CP_ASYNC_SKEW);
    }

    /** P's fp16 bits: e^z rounded (within an ulp, as fp16Pow2), 0 for masked keys, NaN past 11 and for NaN. */
    @Test
    void probabilityBitsAreThoseOfEToTheZ() {
        for (float z = -20.0f; z <= 11.0f; z += 0.0173f) {
            int fp16 = Float.floatToFloat16((float) Math.exp(z)) & 0xFFFF;
            assertTrue(Math.abs(MmaCpAsyncKernels.fp16Exp(z) - fp16) <= 1, "fp16, z = " + z);
            int bf16 = Bf16.fromFloat((float) Math.exp(z)) & 0xFFFF;
            assertTrue(Math.abs(MmaCpAsyncKernels.bf16Exp(z) - bf16) <= 1, "bf16, z = " + z);
        }
        assertEquals(0, MmaCpAsyncKernels.fp16Exp(-1.0e30f));
        assertEquals(0, MmaCpAsyncKernels.bf16Exp(-1.0e30f));
        assertTrue(Float.isNaN(Float.float16ToFloat((short) MmaCpAsyncKernels.fp16Exp(1.0e30f))));
        assertTrue(Float.isNaN(Float.float16ToFloat((short) MmaCpAsyncKernels.fp16Exp(Float.NaN))));
        assertTrue(Float.isNaN(Float.intBitsToFloat(MmaCpAsyncKernels.bf16Exp(Float.NaN) << 16)));
    }

    /** The kernel of the shape's head dim and type with the CUDA C's semantics ({@link KernelEmulator#cudaKernel}). */
    static MmaPlan.CpAsyncKernel kernel(AttentionShape s) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim(), MmaTileConfig.Loads.CP_ASYNC);
        String name = MmaCpAsyncKernels.kernelName(config, s.dtype() == DType.BF16);
        return KERNELS.computeIfAbsent(name, n -> KernelEmulator.cudaKernel(MmaCpAsyncKernels.class, n));
    }

    /** The kernel ({@code kernel}, or the shape's: {@link #kernel(AttentionShape)}) on at most {@code maxGrid} CTAs, against the reference. */
    static ErrorStats run(AttentionShape s, RandomInputs in, int maxGrid, MmaPlan.CpAsyncKernel kernel) {
        LongArray o = new LongArray(Math.toIntExact(s.outputElements() / 4));
        EmulatedInputs.poison(o.getSegment());
        FloatArray lse = EmulatedInputs.poisonedLse(s);
        launch(s, in, maxGrid, kernel == null ? kernel(s) : kernel, o, lse);
        return EmulatedInputs.compare("tornado-mma", s, in, o.getSegment(), lse);
    }

    /** The shape's kernel on at most {@code maxGrid} CTAs into {@code out} and {@code lseValues}, both poisoned first. */
    private static void run(AttentionShape s, RandomInputs in, int maxGrid, HalfTensor out, float[] lseValues) {
        LongArray o = new LongArray(Math.toIntExact(s.outputElements() / 4));
        EmulatedInputs.poison(o.getSegment());
        FloatArray lse = EmulatedInputs.poisonedLse(s);
        launch(s, in, maxGrid, kernel(s), o, lse);
        MemorySegment.copy(o.getSegment(), 0, out.data(), 0, out.data().byteSize());
        out.markModified();
        MemorySegment.copy(lse.getSegment(), java.lang.foreign.ValueLayout.JAVA_FLOAT, 0, lseValues, 0, lseValues.length);
    }

    private static void launch(AttentionShape s, RandomInputs in, int maxGrid, MmaPlan.CpAsyncKernel kernel, LongArray o,
                               FloatArray lse) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim(), MmaTileConfig.Loads.CP_ASYNC);
        LongArray q = EmulatedInputs.longs(in.q());
        HalfFloatArray k = EmulatedInputs.halves(in.k());
        HalfFloatArray v = EmulatedInputs.halves(in.v());
        int grid = Math.min(maxGrid, config.gridSize(s.batch(), s.heads(), s.queryLength()));
        FloatArray scratch = new FloatArray(grid * config.scratchFloatsPerCta());
        KernelEmulator.launch(grid, config.threads(), kc -> kernel.apply(kc, q, k, v, o, lse, scratch, s.batch(), s.heads(),
                s.kvHeads(), s.queryLength(), s.kvLength(), MmaPlan.causalWord(s), s.layout() == Layout.BSHD ? 1 : 0,
                s.scale(), grid, SimtPlan.windowOf(s), SimtPlan.scoresOf(s)));
        assertEquals(config.sharedMemoryBytes(), KernelEmulator.localBytesOfLastLaunch(),
                "MmaTileConfig and the kernel's local arrays disagree");
        assertFalse(config.sharedMemoryBytes() > MmaTileConfig.MAX_SHARED_BYTES, config.toString());
    }
}
