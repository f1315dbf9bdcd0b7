package io.github.tornadoattention.tornado.inference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.tornado.EmulatorAccess;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The merge kernel of the TornadoVM devices' mergeStates ({@link MergeStatesGraph#mergeStates}) run on the CPU by the
 * KernelEmulator, over staging arrays of its size class as the device uses them (poisoned past the call's shape),
 * against {@link CpuReference#merge} on fresh random inputs: some parts -inf, a row with every part -inf, NaN and
 * +inf lse, NaN in a part's O.
 */
class MergeStatesKernelTest {
    /** fp16 rounding of |O| < 8 (the merged values are convex combinations of the parts'), and fp32 exp. */
    private static final double MAX_ABS = 1e-2;
    private static final double MAX_LSE = 1e-4;

    /** The emulated merge's O and lse (only the call's rows: staging past them is not the caller's). */
    private record Merged(float[] o, float[] lse) {
    }

    private static Merged emulate(float[] oParts, float[] lseParts, int parts, int rows, int d) {
        MergeStatesGraph.Capacity c = MergeStatesGraph.Capacity.of(parts, rows, d);
        HalfFloatArray op = new HalfFloatArray(c.inputElements());
        FloatArray lp = new FloatArray(c.inputRows());
        op.init(new HalfFloat(Float.NaN));   // staging past the call's shape holds an earlier call's data
        lp.init(Float.NaN);
        for (int i = 0; i < oParts.length; i++) {
            op.set(i, new HalfFloat(oParts[i]));
        }
        for (int i = 0; i < lseParts.length; i++) {
            lp.set(i, lseParts[i]);
        }
        IntArray params = new IntArray(MergeStatesGraph.P_COUNT);
        params.set(MergeStatesGraph.P_PARTS, parts);
        params.set(MergeStatesGraph.P_ROWS, rows);
        params.set(MergeStatesGraph.P_HEAD_DIM, d);
        FloatArray ws = new FloatArray(c.outputElements());
        HalfFloatArray o = new HalfFloatArray(c.outputElements());
        FloatArray lse = new FloatArray(c.outputRows());
        o.init(new HalfFloat(Float.NaN));
        lse.init(Float.NaN);
        EmulatorAccess.launch(c.workgroups(), MergeStatesGraph.THREADS,
                kc -> MergeStatesGraph.mergeStates(kc, op, lp, params, ws, o, lse));
        float[] out = new float[rows * d];
        for (int i = 0; i < out.length; i++) {
            out[i] = o.get(i).getFloat32();
        }
        for (int i = out.length; i < c.outputElements(); i++) {
            assertTrue(Float.isNaN(o.get(i).getFloat32()), "o[" + i + "] past the call's rows is not written");
        }
        float[] l = new float[rows];
        for (int r = 0; r < rows; r++) {
            l[r] = lse.get(r);
        }
        return new Merged(out, l);
    }

    private static float[] randomHalves(Random random, int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = Float.float16ToFloat(Float.floatToFloat16((float) random.nextGaussian()));
        }
        return x;
    }

    /** Asserts {@code got} is the reference: NaN exactly where the reference is NaN, -inf where it is, else close. */
    private static void assertMatches(CpuReference.Result expected, Merged got, int rows, int d, String where) {
        for (int r = 0; r < rows; r++) {
            double el = expected.logSumExp()[r];
            float l = got.lse[r];
            String at = where + " row " + r;
            assertEquals(Double.isNaN(el), Float.isNaN(l), at + ": lse " + l + " vs " + el);
            if (!Double.isNaN(el)) {
                if (Double.isInfinite(el)) {
                    assertEquals(el, l, 0, at + ": lse");
                } else {
                    assertEquals(el, l, MAX_LSE * Math.max(1, Math.abs(el)), at + ": lse");
                }
            }
            for (int c = 0; c < d; c++) {
                double e = expected.output()[r * d + c];
                float x = got.o[r * d + c];
                assertEquals(Double.isNaN(e), Float.isNaN(x), at + " column " + c + ": o " + x + " vs " + e);
                if (!Double.isNaN(e)) {
                    assertEquals(e, x, MAX_ABS, at + " column " + c + ": o");
                }
            }
        }
    }

    @ParameterizedTest(name = "parts {0} rows {1} D {2}")
    @CsvSource({"1, 5, 64", "2, 37, 64", "3, 37, 128", "4, 130, 8", "5, 17, 72", "2, 300, 256", "7, 1, 32"})
    void mergesLikeTheReferenceWithEmptyParts(int parts, int rows, int d) {
        Random random = new Random(31L * parts + 7L * rows + d);
        float[] oParts = randomHalves(random, parts * rows * d);
        float[] lseParts = new float[parts * rows];
        for (int i = 0; i < lseParts.length; i++) {
            lseParts[i] = random.nextInt(4) == 0 ? Float.NEGATIVE_INFINITY : (float) (random.nextGaussian() * 6);
        }
        for (int p = 0; p < parts; p++) {
            lseParts[p * rows] = Float.NEGATIVE_INFINITY;   // row 0 has no part: O = 0, lse = -inf
        }
        Merged got = emulate(oParts, lseParts, parts, rows, d);
        assertMatches(CpuReference.merge(oParts, lseParts, parts, rows, d), got, rows, d, parts + "x" + rows + " D=" + d);
        for (int c = 0; c < d; c++) {
            assertEquals(0f, got.o[c], 0, "a row with every part -inf gets O = 0");
        }
        assertEquals(Float.NEGATIVE_INFINITY, got.lse[0], 0, "and lse = -inf");
    }

    @Test
    void nanAndInfinityReachWhatTheyReachInTheReference() {
        int parts = 3;
        int rows = 9;
        int d = 16;
        Random random = new Random(11);
        float[] oParts = randomHalves(random, parts * rows * d);
        float[] lseParts = new float[parts * rows];
        for (int i = 0; i < lseParts.length; i++) {
            lseParts[i] = (float) random.nextGaussian();
        }
        lseParts[rows + 1] = Float.NaN;                        // row 1: a NaN part
        lseParts[2] = Float.NaN;                               // row 2: a NaN part, the others -inf
        lseParts[rows + 2] = Float.NEGATIVE_INFINITY;
        lseParts[2 * rows + 2] = Float.NEGATIVE_INFINITY;
        lseParts[2 * rows + 3] = Float.POSITIVE_INFINITY;      // row 3: a +inf part
        oParts[(rows + 4) * d + 5] = Float.NaN;                // row 4: NaN in one element of a weighed part
        lseParts[5] = Float.NEGATIVE_INFINITY;                 // row 5: NaN in a part that weighs 0
        oParts[5 * d + 7] = Float.NaN;
        CpuReference.Result expected = CpuReference.merge(oParts, lseParts, parts, rows, d);
        Merged got = emulate(oParts, lseParts, parts, rows, d);
        assertMatches(expected, got, rows, d, "nan");
        for (int r : new int[] {1, 2, 3}) {
            assertTrue(Float.isNaN(got.lse[r]), "row " + r + ": lse NaN");
        }
        assertTrue(Float.isNaN(got.o[4 * d + 5]) && !Float.isNaN(got.o[4 * d + 6]) && !Float.isNaN(got.lse[4]),
                "row 4: the NaN element only");
        assertTrue(!Float.isNaN(got.o[5 * d + 7]), "row 5: a part of weight 0 is not read");
    }

    @Test
    void sizeClassesArePowersOfTwoAndCoverTheCall() {
        MergeStatesGraph.Capacity small = MergeStatesGraph.Capacity.of(2, 3, 64);
        assertEquals(new MergeStatesGraph.Capacity(1024, 1024), small, "at least one workgroup's output");
        assertEquals(small, MergeStatesGraph.Capacity.of(3, 5, 64), "another shape of the same class");
        MergeStatesGraph.Capacity c = MergeStatesGraph.Capacity.of(3, 37, 128);
        assertEquals(16384, c.inputElements());
        assertEquals(8192, c.outputElements());
        assertEquals(8, c.workgroups(), "one thread per 8 output elements, 128 per workgroup");
        assertTrue(c.inputRows() >= 3 * 37 && c.outputRows() >= 37);
    }
}
