package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.NanCheck;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassModel;
import java.lang.classfile.CodeModel;
import java.lang.classfile.Instruction;
import java.lang.classfile.MethodModel;
import java.lang.classfile.Opcode;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The tornado-mma kernels ({@link MmaKernels}) and the synchronous ones they were derived from
 * ({@link MmaSynchronousKernels}), run by {@link KernelEmulator} on the CPU (no GPU needed) with the MMA
 * intrinsics' PTX semantics and the PTX's float min/max ({@link KernelEmulator#ptxKernel}), against the CPU
 * reference: layouts, masks, GQA, BSHD, tails, the grid loop, the recompute path and a NaN in the inputs; and a subset
 * with the semantics of the CUDA C that TornadoVM's CUDA backend generates for them ({@link KernelEmulator#cudaLongKernel}).
 */
class MmaKernelsTest {
    /** The kernels with the PTX's float semantics, loaded once each ({@link #kernel(int, boolean)}). */
    private static final Map<String, MmaPlan.Kernel> KERNELS = new ConcurrentHashMap<>();

    static Stream<AttentionShape> shapes() {
        return Stream.of(
                shape(1, 2, 2, 70, 150, 64, false, Layout.BHSD),
                shape(1, 2, 2, 130, 130, 64, true, Layout.BHSD),
                shape(1, 2, 2, 100, 40, 64, true, Layout.BHSD),      // rows that see no key
                shape(2, 4, 2, 64, 64, 64, true, Layout.BSHD),       // GQA
                shape(1, 1, 1, 1, 1, 64, true, Layout.BHSD),
                shape(1, 2, 1, 80, 100, 128, false, Layout.BSHD),    // MQA
                shape(1, 2, 2, 70, 70, 128, true, Layout.BHSD),
                shape(1, 1, 1, 20, 90, 128, true, Layout.BHSD),     // Sq < Skv, causal
                shape(8, 8, 8, 128, 128, 64, false, Layout.BHSD));  // two full K/V tiles, 128 CTAs
    }

    /**
     * D = 32 (Bc = 64), 96 (Bc = 32), 192 and 256 (Bc = 16; at 256 K and V^T in turns in one buffer), which the synchronous kernels of
     * the tests do not serve: tails (Skv not a multiple of Bc), causal and not, GQA and MQA, BSHD, rows that see no key,
     * Sq < Skv.
     */
    static Stream<AttentionShape> shapesWide() {
        return Stream.of(
                shape(1, 2, 2, 70, 150, 32, false, Layout.BHSD),
                shape(2, 4, 2, 64, 80, 32, true, Layout.BSHD),       // GQA, Sq < Skv
                shape(1, 2, 1, 100, 40, 32, true, Layout.BHSD),      // MQA, rows that see no key
                shape(1, 2, 2, 70, 150, 96, false, Layout.BHSD),
                shape(2, 4, 2, 64, 80, 96, true, Layout.BSHD),       // GQA, Sq < Skv
                shape(1, 2, 1, 100, 40, 96, true, Layout.BHSD),      // MQA, rows that see no key
                shape(1, 2, 2, 70, 150, 192, false, Layout.BHSD),
                shape(2, 4, 2, 64, 80, 192, true, Layout.BSHD),      // GQA, Sq < Skv
                shape(1, 2, 1, 100, 40, 192, true, Layout.BHSD),     // MQA, rows that see no key
                shape(1, 2, 2, 70, 150, 256, false, Layout.BHSD),
                shape(1, 2, 2, 130, 130, 256, true, Layout.BHSD),
                shape(2, 4, 2, 64, 80, 256, true, Layout.BSHD),      // GQA, Sq < Skv
                shape(1, 2, 1, 100, 40, 256, true, Layout.BHSD),     // MQA, rows that see no key
                shape(1, 4, 2, 90, 96, 256, false, Layout.BSHD),     // no partial K/V tile: the unmasked kernel
                shape(1, 1, 1, 1, 1, 256, true, Layout.BHSD));
    }

    private static AttentionShape shape(int b, int hq, int hkv, int sq, int skv, int d, boolean causal, Layout layout) {
        return AttentionShape.builder().batch(b).heads(hq).kvHeads(hkv).queryLength(sq).kvLength(skv).headDim(d)
                .causal(causal).layout(layout).build();
    }

    /**
     * Window, softcap and sinks on the shipped kernels (the synchronous ones of the tests serve none): alone and
     * together, causal or not, windows that start tiles past 0 (rows whose first visible tile is not their CTA's first),
     * rows that see no key (with a sink: O = 0, logsumexp = the sink), a softcap small enough that every score is capped.
     */
    static Stream<AttentionShape> featureShapes() {
        float[] sinks2 = {0.8f, -1.5f};
        float[] sinks4 = {3.0f, -0.2f, 0.0f, 1.2f};
        AttentionShape d64 = shape(1, 2, 2, 200, 260, 64, true, Layout.BHSD);
        AttentionShape d128 = shape(2, 4, 2, 150, 150, 128, false, Layout.BSHD);
        AttentionShape d32 = shape(1, 4, 2, 100, 130, 32, true, Layout.BSHD);     // GQA
        AttentionShape d96 = shape(1, 4, 2, 100, 130, 96, true, Layout.BSHD);     // GQA
        AttentionShape d192 = shape(1, 4, 2, 100, 130, 192, true, Layout.BHSD);   // GQA
        AttentionShape d256 = shape(2, 4, 2, 120, 150, 256, true, Layout.BSHD);   // GQA
        return Stream.of(
                d64.toBuilder().window(40, 0).build(),
                d64.toBuilder().causal(false).window(5, 70).build(),
                d64.toBuilder().causal(false).window(-1, 3).build(),
                d64.toBuilder().softcap(1.0f).build(),
                d64.toBuilder().sinks(sinks2).build(),
                d64.toBuilder().window(100, 0).softcap(10.0f).sinks(sinks2).build(),
                shape(1, 2, 2, 100, 40, 64, true, Layout.BHSD).toBuilder().sinks(sinks2).build(),   // rows with no key
                shape(1, 2, 2, 90, 90, 64, false, Layout.BHSD).toBuilder().window(0, 0).sinks(sinks2).build(),
                d128.toBuilder().window(33, 7).build(),
                d128.toBuilder().softcap(2.5f).sinks(sinks4).build(),
                d128.toBuilder().causal(true).window(64, 0).softcap(30.0f).sinks(sinks4).build(),
                d32.toBuilder().window(30, 0).softcap(5.0f).sinks(sinks4).build(),
                d32.toBuilder().causal(false).window(10, 20).build(),
                d96.toBuilder().window(30, 0).softcap(5.0f).sinks(sinks4).build(),
                d96.toBuilder().causal(false).window(10, 20).build(),
                d192.toBuilder().window(30, 0).softcap(5.0f).sinks(sinks4).build(),
                d192.toBuilder().causal(false).window(10, 20).build(),
                d256.toBuilder().window(40, 0).build(),
                d256.toBuilder().causal(false).window(20, 30).build(),
                d256.toBuilder().causal(false).softcap(1.0f).sinks(sinks4).build(),
                d256.toBuilder().window(100, 0).softcap(10.0f).sinks(sinks4).build(),
                shape(1, 2, 2, 100, 40, 256, true, Layout.BHSD).toBuilder().sinks(sinks2).build());   // rows with no key
    }

    @ParameterizedTest
    @MethodSource("featureShapes")
    void featuresMatchTheReference(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 43)) {
            ErrorStats errors = run(shape, in, 5);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    /** The synchronous kernels of the tests, the baseline and reference of the shipped ones. */
    @ParameterizedTest
    @MethodSource("shapes")
    void synchronousKernelsMatchTheReference(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 42)) {
            ErrorStats errors = run(shape, in, shape.batch() == 8 ? 1024 : 3, true);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    /** The shipped kernels, which overlap the K/V loads with compute. */
    @ParameterizedTest
    @MethodSource({"shapes", "shapesWide"})
    void kernelsMatchTheReference(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 44)) {
            ErrorStats errors = run(shape, in, shape.batch() == 8 ? 1024 : 3);
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }


    /**
     * The shipped kernels, which TornadoVM's CUDA backend runs too (MmaPlan, where cp.async is off), with the semantics of
     * the CUDA C it generates ({@link KernelEmulator#cudaLongKernel}: {@code >>>} as {@code >>}, the masks Graal folds
     * away gone, division by a power of two rounding a negative dividend down): the first two shapes of each head dim
     * of {@link #shapes} and {@link #shapesWide}, causal and not, tails, GQA, MQA, BSHD (the inputs have negative fp16 in
     * every word's top position, which the pairing before MmaLayout.halfPair turned into NaN there).
     */
    @ParameterizedTest
    @MethodSource("cudaShapes")
    void kernelsMatchTheReferenceWithCudaSemantics(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 45)) {
            ErrorStats errors = run(shape, in, 3, false, cudaKernel(shape.headDim()));
            assertTrue(errors.passes(), shape + ": " + errors);
        }
    }

    static Stream<AttentionShape> cudaShapes() {
        return Stream.concat(shapes(), shapesWide())
                .collect(java.util.stream.Collectors.groupingBy(AttentionShape::headDim, java.util.TreeMap::new,
                        java.util.stream.Collectors.toList()))
                .values().stream().flatMap(perHeadDim -> perHeadDim.stream().limit(2));
    }

    /**
     * The pipelined kernels' reference row max (from shuffles) is the synchronous kernels' (one thread per row
     * over the scratch): rowMax of the last query tile of the last workgroup, rows that see no key -1e30 instead of
     * -infinity. (The recompute path would hide a wrong one from the output comparison.)
     */
    @ParameterizedTest
    @MethodSource("shapes")
    void shuffledReferenceMaxIsTheFirstTilesMax(AttentionShape shape) {
        try (RandomInputs in = RandomInputs.generate(shape, 46)) {
            int grid = shape.batch() == 8 ? 16 : 3;
            run(shape, in, grid, true);
            float[] split = ((float[]) KernelEmulator.localArrayOfLastLaunch(5)).clone();
            run(shape, in, grid, false);
            float[] lean = (float[]) KernelEmulator.localArrayOfLastLaunch(5);
            assertEquals(64, lean.length, "rowMax is local array 5");
            for (int r = 0; r < 64; r++) {
                float expected = split[r] == Float.NEGATIVE_INFINITY ? -1.0e30f : split[r];
                assertEquals(expected, lean[r], "row " + r);
            }
        }
    }

    /** fp16Pow2 against Java's float-to-fp16 conversion of 2^z: normal, subnormal, underflow, masked. */
    @Test
    void fp16Pow2IsTheRoundedPowerOfTwo() {
        for (float z = -30.0f; z < 15.9f; z += 0.0137f) {
            int expected = Float.floatToFloat16((float) Math.pow(2.0, z)) & 0xFFFF;
            int actual = MmaSynchronousKernels.fp16Pow2(z);
            assertTrue(Math.abs(actual - expected) <= 1, "z = " + z + ": " + actual + " vs " + expected);
        }
        assertEquals(0x3C00, MmaSynchronousKernels.fp16Pow2(0.0f));
        assertEquals(0x4000, MmaSynchronousKernels.fp16Pow2(1.0f));
        assertEquals(0x0001, MmaSynchronousKernels.fp16Pow2(-24.0f));
        assertEquals(0x0400, MmaSynchronousKernels.fp16Pow2(-14.0f));
        assertEquals(0, MmaSynchronousKernels.fp16Pow2(-26.0f));
        assertEquals(0, MmaSynchronousKernels.fp16Pow2(-1.0e30f));
    }

    /** Keys past the first tile score far above the first tile's max: the tile is recomputed. */
    @ParameterizedTest
    @ValueSource(ints = {32, 64, 96, 128, 192, 256})
    void recomputesWhenAScoreExceedsTheReferenceMax(int d) {
        AttentionShape shape = shape(1, 1, 1, 64, 200, d, false, Layout.BHSD);
        try (RandomInputs in = RandomInputs.generate(shape, 7)) {
            float[] k = in.k().toFloatArray();
            for (int i = 64 * 64; i < k.length; i++) {
                // scores ~ N(0, 25) after the first K/V tile (its 64 keys at D = 64, 32 at D = 128, 16 at 256; at 32 from
                // key 128, past its 64; at 96 from
                // key 42, past its 32; at 192 from key 21, past its 16)
                k[i] *= 5.0f;
            }
            in.k().copyFrom(k);
            ErrorStats errors = run(shape, in, 1);
            assertTrue(errors.passes(), errors.toString());
            if (d == 64 || d == 128) {     // the synchronous kernels serve D = 64 and 128
                ErrorStats synchronous = run(shape, in, 1, true);
                assertTrue(synchronous.passes(), "synchronous: " + synchronous);
            }
        }
    }

    /**
     * The suite's {@code nan-in-one-key} case ({@link NanCheck}: one NaN in key 120 of kv head 1, batch 1; B 2, Hq 4,
     * Hkv 2, Sq 150, Skv 200, causal, BSHD) with its inputs (selftest --seed 20261128, case 23) and grid, as the suite
     * checks it, also at D = 128. It failed on the GPU and here (12 rows of the query tile 64..127 that do not see the
     * key with logsumexp -infinity: the recompute that the NaN key triggers raised the flag again and reset rowMax).
     */
    @ParameterizedTest
    @ValueSource(ints = {64, 128, 256})
    void nanInOneKeyCasePasses(int d) {
        AttentionShape shape = nanShape(d, NanCheck.testCase().shape().kvLength(), true);
        try (RandomInputs in = RandomInputs.generate(shape, 20261128L + 22);
             HalfTensor out = HalfTensor.allocate(shape.outputElements())) {
            NanCheck.poison(shape, in.k());
            CpuReference.Result expected = CpuReference.compute(shape, in.q(), in.k(), in.v());
            float[] lse = runPoisoned(shape, in, out);
            ErrorStats errors = NanCheck.compare(shape, out, expected.output(), lse, expected.logSumExp());
            assertTrue(errors.passes(), errors.toString());
        }
    }

    /**
     * One NaN in one key (column 7 of key {@code key}, kv head 1, batch 1) reaches exactly the rows that see it: their
     * O is NaN in every element and their logsumexp NaN, every other row is the reference's. Key 10 lies in the
     * first K/V tile (the reference max; causal with Skv = Sq, rows 0..9 of the tile do not see it), key 120 past it;
     * causal or with a partial last K/V tile the masking's {@code min.f32} turns a visible NaN score into 1e30
     * (P = +infinity, which triggers the recompute), unmasked (Skv 192, not causal) the NaN stays a NaN.
     */
    @ParameterizedTest
    @CsvSource({"64, 150, true, 10", "64, 192, false, 120", "64, 200, false, 10",
            "128, 150, true, 10", "128, 192, false, 120", "256, 150, true, 10", "256, 192, false, 120",
            "256, 200, false, 10", "192, 150, true, 10", "96, 150, true, 10", "96, 192, false, 120",
            "32, 150, true, 10", "32, 192, false, 120"})
    void aNanKeyReachesExactlyTheRowsThatSeeIt(int d, int kvLength, boolean causal, int key) {
        AttentionShape shape = nanShape(d, kvLength, causal);
        try (RandomInputs in = RandomInputs.generate(shape, 11);
             HalfTensor out = HalfTensor.allocate(shape.outputElements())) {
            in.k().set(shape.kvStrides().rowStart(1, 1, key) + 7, Float.NaN);
            CpuReference.Result expected = CpuReference.compute(shape, in.q(), in.k(), in.v());
            float[] lse = runPoisoned(shape, in, out);
            List<String> wrong = new ArrayList<>();
            int nanRows = 0;
            for (int b = 0; b < shape.batch(); b++) {
                for (int h = 0; h < shape.heads(); h++) {
                    for (int i = 0; i < shape.queryLength(); i++) {
                        boolean sees = b == 1 && shape.kvHeadOf(h) == 1 && key <= shape.lastVisibleKey(i);
                        nanRows += sees ? 1 : 0;
                        long start = shape.queryStrides().rowStart(b, h, i);
                        int at = (b * shape.heads() + h) * shape.queryLength() + i;
                        boolean ok = sees ? Float.isNaN(lse[at])
                                : Math.abs(lse[at] - expected.logSumExp()[at]) <= 1e-3;
                        for (int c = 0; c < d; c++) {
                            float actual = out.get(start + c);
                            ok &= sees ? Float.isNaN(actual)
                                    : Math.abs(actual - expected.output()[Math.toIntExact(start + c)]) <= 1e-2;
                        }
                        if (!ok && wrong.size() < 10) {
                            wrong.add("b" + b + " h" + h + " row " + i + (sees ? " (sees the key)" : "") + ": lse "
                                    + lse[at] + ", O[0] " + out.get(start));
                        }
                    }
                }
            }
            assertTrue(nanRows > 0 && nanRows < shape.batch() * shape.heads() * shape.queryLength());
            assertTrue(wrong.isEmpty(), "wrong rows: " + wrong);
        }
    }

    /** {@link NanCheck}'s shape with head dim {@code d}, Skv {@code kvLength} and the mask {@code causal}. */
    private static AttentionShape nanShape(int d, int kvLength, boolean causal) {
        AttentionShape s = NanCheck.testCase().shape();
        return shape(s.batch(), s.heads(), s.kvHeads(), s.queryLength(), kvLength, d, causal, s.layout());
    }

    /**
     * Runs the shipped kernel with the float semantics of the PTX on the whole grid into {@code out} and a logsumexp
     * (returned), both filled with {@link NanCheck#SENTINEL} first.
     */
    private static float[] runPoisoned(AttentionShape s, RandomInputs in, HalfTensor out) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim());
        float[] lseValues = new float[s.logSumExpElements()];
        NanCheck.prepare(out, lseValues);
        LongArray q = EmulatedInputs.longs(in.q());
        LongArray k = EmulatedInputs.longs(in.k());
        LongArray v = EmulatedInputs.longs(in.v());
        LongArray o = EmulatedInputs.longs(out);
        FloatArray lse = FloatArray.fromArray(lseValues);
        int grid = config.gridSize(s.batch(), s.heads(), s.queryLength());
        FloatArray scratch = new FloatArray(grid * config.scratchFloatsPerCta());
        MmaPlan.Kernel kernel = kernel(s.headDim(), false);
        KernelEmulator.launch(grid, config.threads(), kc -> kernel.apply(kc, q, k, v, o, lse, scratch, s.batch(),
                s.heads(), s.kvHeads(), s.queryLength(), s.kvLength(), MmaPlan.causalWord(s),
                s.layout() == Layout.BSHD ? 1 : 0, s.scale(), grid, SimtPlan.windowOf(s), SimtPlan.scoresOf(s)));
        MemorySegment.copy(o.getSegment(), 0, out.data(), 0, out.data().byteSize());
        out.markModified();
        return lse.toHeapArray();
    }

    /**
     * The shipped kernel ({@link MmaKernels#kernel}) or the synchronous one ({@link MmaSynchronousKernels#kernel}) for a
     * head dim, with the float semantics of TornadoVM's PTX ({@link KernelEmulator#ptxKernel}).
     */
    static MmaPlan.Kernel kernel(int headDim, boolean synchronous) {
        return KERNELS.computeIfAbsent(headDim + (synchronous ? " synchronous" : ""), key -> synchronous
                ? KernelEmulator.ptxKernel(MmaSynchronousKernels.class, headDim == 64 ? "attentionD64" : "attentionD128")
                : KernelEmulator.ptxKernel(MmaKernels.class, MmaKernels.kernelName(MmaTileConfig.forHeadDim(headDim))));
    }

    /** The shipped kernel for a head dim with the semantics of TornadoVM's CUDA C ({@link KernelEmulator#cudaLongKernel}). */
    static MmaPlan.Kernel cudaKernel(int headDim) {
        return KERNELS.computeIfAbsent(headDim + " cuda", key -> KernelEmulator.cudaLongKernel(MmaKernels.class,
                MmaKernels.kernelName(MmaTileConfig.forHeadDim(headDim))));
    }

    /** The shipped kernel for the shape's head dim, on at most {@code maxGrid} CTAs. */
    static ErrorStats run(AttentionShape s, RandomInputs in, int maxGrid) {
        return run(s, in, maxGrid, false);
    }

    /**
     * {@code synchronous}: {@link MmaSynchronousKernels}' kernel, else the shipped one ({@link MmaKernels#kernel}); both with
     * the float semantics of the PTX ({@link #kernel(int, boolean)}).
     */
    static ErrorStats run(AttentionShape s, RandomInputs in, int maxGrid, boolean synchronous) {
        return run(s, in, maxGrid, synchronous, kernel(s.headDim(), synchronous));
    }

    /** {@link #run(AttentionShape, RandomInputs, int, boolean)} with {@code kernel}, the shipped one ({@code synchronous} false) or not. */
    private static ErrorStats run(AttentionShape s, RandomInputs in, int maxGrid, boolean synchronous, MmaPlan.Kernel kernel) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim());
        LongArray q = EmulatedInputs.longs(in.q());
        LongArray k = EmulatedInputs.longs(in.k());
        LongArray v = EmulatedInputs.longs(in.v());
        LongArray o = new LongArray(Math.toIntExact(s.outputElements() / 4));
        EmulatedInputs.poison(o.getSegment());
        FloatArray lse = EmulatedInputs.poisonedLse(s);
        int grid = Math.min(maxGrid, config.gridSize(s.batch(), s.heads(), s.queryLength()));
        FloatArray scratch = new FloatArray(grid * config.scratchFloatsPerCta());
        int causal = MmaPlan.causalWord(s);
        int bshd = s.layout() == Layout.BSHD ? 1 : 0;
        KernelEmulator.launch(grid, config.threads(), kc -> kernel.apply(kc, q, k, v, o, lse, scratch, s.batch(),
                s.heads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), grid, SimtPlan.windowOf(s),
                SimtPlan.scoresOf(s)));
        assertEquals(synchronous ? MmaSynchronousKernels.sharedMemoryBytes(config) : config.sharedMemoryBytes(),
                KernelEmulator.localBytesOfLastLaunch(), "MmaTileConfig and the kernel's local arrays disagree");
        return EmulatedInputs.compare("tornado-mma", s, in, o.getSegment(), lse);
    }

    /**
     * TornadoVM's mmaStore stores element e at 16 + 4 e bytes into the array (the Java heap float[] header),
     * FloatArray.get(e) reads at ARRAY_HEADER + 4 e: the kernels' column skew makes the two meet.
     */
    @Test
    void mmaStoreSkewMeetsFloatArrayIndexing() {
        assertEquals(0, MmaKernels.mmaStoreSkew(16));
        assertEquals(2, MmaKernels.mmaStoreSkew(24));
        assertEquals(28, MmaKernels.mmaStoreSkew(128));
        assertEquals(MmaKernels.mmaStoreSkew(TornadoNativeArray.ARRAY_HEADER), MmaKernels.MMA_STORE_SKEW);
        for (long header : new long[] {16, 24, 128}) {
            for (int e : new int[] {0, 1, 4, 12_800}) {
                assertEquals(header + 4L * e, KernelEmulator.mmaStoreByteOffset(e + MmaKernels.mmaStoreSkew(header)),
                        "header " + header + ", element " + e);
            }
        }
    }

    /** The emulated kernels in a JVM with a 128-byte TornadoVM array header ({@link HeaderProbeMain}). */
    @Test
    void kernelsWorkWithA128ByteArrayHeader() throws Exception {
        String home = System.getenv("TORNADOVM_HOME");
        assumeTrue(home != null, "TORNADOVM_HOME not set");
        String classPath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        try (Stream<Path> jars = Files.list(Path.of(home, "share", "java", "tornado"))) {
            Path api = jars.filter(p -> p.getFileName().toString().startsWith("tornado-api")).findFirst().orElseThrow();
            classPath = classPath + File.pathSeparator + api;
        }
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process process = new ProcessBuilder(java.toString(), "-Dtornado.panama.objectHeader=128",
                "--enable-native-access=ALL-UNNAMED", "-cp", classPath, HeaderProbeMain.class.getName())
                .redirectErrorStream(true).start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(process.waitFor(120, TimeUnit.SECONDS), "child JVM did not finish");
        assertEquals(0, process.exitValue(), output);
        assertTrue(output.contains("header 128 skew 28 cp.async skew 56"), output);
        assertEquals(8, output.lines().filter(l -> l.startsWith("ok ")).count(), output);   // 2 shapes x 4 kernels
    }

    @Test
    void emulatedMmaMultipliesLikeTheTensorCores() {
        // A = 16x16 with A[m][k] = m + k / 16, B = 16x8 with B[k][n] = k == n ? 1 : (k == n + 8 ? 2 : 0):
        // D[m][n] = A[m][n] + 2 A[m][n + 8].
        int[] aTile = new int[128];
        int[] bTile = new int[64];
        float[] expected = new float[128];
        for (int m = 0; m < 16; m++) {
            for (int kk = 0; kk < 16; kk += 2) {
                aTile[m * 8 + kk / 2] = bits(m + kk / 16f) | (bits(m + (kk + 1) / 16f) << 16);
            }
        }
        for (int kk = 0; kk < 16; kk++) {
            for (int n = 0; n < 8; n += 2) {
                bTile[kk * 4 + n / 2] = bits(b(kk, n)) | (bits(b(kk, n + 1)) << 16);
            }
        }
        for (int m = 0; m < 16; m++) {
            for (int n = 0; n < 8; n++) {
                expected[m * 8 + n] = round(m + n / 16f) + 2 * round(m + (n + 8) / 16f);
            }
        }
        FloatArray out = new FloatArray(128);
        KernelEmulator.launch(1, 32, kc -> {
            int[] a = kc.allocateIntLocalArray(128);
            int[] b = kc.allocateIntLocalArray(64);
            int lane = kc.localIdx;
            for (int i = lane; i < 128; i += 32) {
                a[i] = aTile[i];
            }
            for (int i = lane; i < 64; i += 32) {
                b[i] = bTile[i];
            }
            kc.localBarrier();
            float[] d = kc.mma(kc.mmaLoadA(a, 16, 0), kc.mmaLoadB(b, 16, 0), kc.mmaFragment(0f),
                    uk.ac.manchester.tornado.api.enums.MMAShape.M16N8K16);
            kc.mmaStore(d, out, 0, 0, 8);
        });
        for (int i = 0; i < 128; i++) {
            assertEquals(expected[i], out.get(i), 1e-3, "D[" + i / 8 + "][" + i % 8 + "]");
        }
    }

    /** The emulated shuffles: shfl.sync.down keeps a lane's own value past lane 31; idx 0 broadcasts lane 0. */
    @Test
    void emulatedShufflesMoveValuesDownTheWarp() {
        FloatArray out = new FloatArray(96);
        KernelEmulator.launch(1, 32, kc -> {
            int lane = kc.localIdx;
            out.set(lane, kc.simdShuffleDown(lane, 4));
            out.set(32 + lane, kc.simdShuffleDown(lane, lane & 3));
            out.set(64 + lane, kc.simdBroadcastFirst(lane + 100.0f));
        });
        for (int lane = 0; lane < 32; lane++) {
            assertEquals(lane < 28 ? lane + 4 : lane, out.get(lane), "down 4, lane " + lane);
            assertEquals(lane + (lane & 3) <= 31 ? lane + (lane & 3) : lane, out.get(32 + lane), "down lane % 4, lane " + lane);
            assertEquals(100.0f, out.get(64 + lane));
        }
    }

    private static float b(int k, int n) {
        return k == n ? 1f : k == n + 8 ? 2f : 0f;
    }

    private static int bits(float x) {
        return Float.floatToFloat16(x) & 0xFFFF;
    }

    private static float round(float x) {
        return Float.float16ToFloat(Float.floatToFloat16(x));
    }

    /**
     * TornadoVM 5.2's PTX backend emits Java's {@code >>} as {@code shr.b32}/{@code shr.b64}, a logical
     * shift in PTX, so {@code x >> 31} of a negative x is 1 on the GPU and -1 here (its CUDA backend: see
     * {@link #noSignBitIsTakenWithAShift}). The emulator runs
     * Java semantics and cannot see that (a sign mask {@code (row - length) >> 31} passed every emulated
     * test while it zeroed the inputs on the GPU), so the kernels must have no arithmetic right shift, but for
     * {@link MmaLayout#halfPair}'s: it keeps only the low 16 bits of each shift, which a logical and an arithmetic shift
     * agree on (and it must not use {@code >>>}, for the CUDA backend: see there).
     */
    @Test
    void kernelsHaveNoArithmeticRightShift() throws IOException {
        List<String> found = new ArrayList<>();
        for (Class<?> kernelCode : List.of(MmaKernels.class, MmaLayout.class, MmaSynchronousKernels.class)) {
            byte[] bytes;
            try (InputStream in = kernelCode.getResourceAsStream(kernelCode.getSimpleName() + ".class")) {
                bytes = in.readAllBytes();
            }
            ClassModel model = ClassFile.of().parse(bytes);
            for (MethodModel method : model.methods()) {
                for (CodeModel code : method.code().stream().toList()) {
                    for (var element : code) {
                        boolean halfPair = kernelCode == MmaLayout.class && method.methodName().equalsString("halfPair");
                        if (element instanceof Instruction instruction && !halfPair
                                && (instruction.opcode() == Opcode.ISHR || instruction.opcode() == Opcode.LSHR)) {
                            found.add(kernelCode.getSimpleName() + "." + method.methodName().stringValue() + ": "
                                    + instruction.opcode());
                        }
                    }
                }
            }
        }
        assertTrue(found.isEmpty(), "arithmetic right shifts (write >>> on non-negative values): " + found);
    }

    /**
     * TornadoVM 5.2's CUDA backend emits Java's {@code >>>} as C's {@code >>} on an {@code int}, an arithmetic shift, so
     * {@code x >>> 31} of a negative x is -1 there and 1 here (and on the PTX backend). A sign bit is therefore taken with
     * a compare and select ({@code x < 0 ? 1 : 0}), never a shift by 31 (or 63): the only value shifted so is the loop's
     * key offset {@code j0} (never negative), whose {@code j0 >>> 31} is an opaque 0 on every backend. Checked on the
     * bytecode (compiled with -g): every shift by 31 or 63 reads the local variable {@code j0}.
     */
    @Test
    void noSignBitIsTakenWithAShift() throws IOException {
        List<String> found = new ArrayList<>();
        int j0Shifts = 0;
        for (Class<?> kernelCode : List.of(MmaKernels.class, MmaLayout.class, MmaSynchronousKernels.class)) {
            byte[] bytes;
            try (InputStream in = kernelCode.getResourceAsStream(kernelCode.getSimpleName() + ".class")) {
                bytes = in.readAllBytes();
            }
            for (MethodModel method : ClassFile.of().parse(bytes).methods()) {
                for (CodeModel code : method.code().stream().toList()) {
                    Map<Integer, String> names = new java.util.HashMap<>();
                    code.findAttribute(java.lang.classfile.Attributes.localVariableTable()).ifPresent(t -> t.localVariables()
                            .forEach(v -> names.putIfAbsent(v.slot(), v.name().stringValue())));
                    List<Instruction> instructions = code.elementStream().filter(e -> e instanceof Instruction)
                            .map(e -> (Instruction) e).toList();
                    for (int i = 2; i < instructions.size(); i++) {
                        Instruction shift = instructions.get(i);
                        if ((shift.opcode() == Opcode.IUSHR || shift.opcode() == Opcode.LUSHR)
                                && instructions.get(i - 1) instanceof java.lang.classfile.instruction.ConstantInstruction c
                                && (c.constantValue().equals(31) || c.constantValue().equals(63))) {
                            Instruction operand = instructions.get(i - 2);
                            boolean j0 = operand instanceof java.lang.classfile.instruction.LoadInstruction load
                                    && "j0".equals(names.get(load.slot()));
                            if (j0) {
                                j0Shifts++;
                            } else {
                                found.add(kernelCode.getSimpleName() + "." + method.methodName().stringValue() + ": "
                                        + operand + " " + c.constantValue() + " " + shift.opcode());
                            }
                        }
                    }
                }
            }
        }
        assertTrue(j0Shifts > 0, "the check sees the j0 shifts");
        assertTrue(found.isEmpty(), "sign bits taken with >>> 31 (write x < 0 ? 1 : 0): " + found);
    }

    @Test
    void shapesAreMultiplesOfFourHalves() {
        try (HalfTensor t = HalfTensor.allocate(64)) {
            assertEquals(16, EmulatedInputs.longs(t).getSize());
        }
    }
}
