package io.github.tornadoattention.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.tornado.KernelEmulator;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/** The decoder's kernels run on the CPU (emulated KernelContext) against double-precision math. */
class LlamaKernelsTest {
    private final SplittableRandom random = new SplittableRandom(7);

    private FloatArray floats(int n, double scale) {
        FloatArray a = new FloatArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, (float) (scale * (2 * random.nextDouble() - 1)));
        }
        return a;
    }

    private HalfFloatArray halves(int n, double scale) {
        HalfFloatArray a = new HalfFloatArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, new HalfFloat((float) (scale * (2 * random.nextDouble() - 1))));
        }
        return a;
    }

    private static float h(HalfFloatArray a, int i) {
        return a.get(i).getFloat32();
    }

    private static double dot(HalfFloatArray w, int row, int n, float[] x) {
        double s = 0;
        for (int j = 0; j < n; j++) {
            s += (double) h(w, row * n + j) * x[j];
        }
        return s;
    }

    private static IntArray meta(int lengthAfter) {
        IntArray m = new IntArray(4);
        m.set(0, lengthAfter);
        return m;
    }

    @Test
    void embedCopiesTheTokensRow() {
        int dim = 96;
        HalfFloatArray table = halves(5 * dim, 1);
        FloatArray x = new FloatArray(dim);
        IntArray token = new IntArray(1);
        token.set(0, 3);
        KernelEmulator.launch(dim / 32, 32, kc -> LlamaKernels.embed(kc, token, table, x, dim));
        for (int i = 0; i < dim; i++) {
            assertEquals(h(table, 3 * dim + i), x.get(i), "element " + i);
        }
    }

    @Test
    void rmsNormMatchesDouble() {
        int dim = 3000;   // not a multiple of the 1024 threads
        FloatArray x = floats(dim, 3);
        FloatArray w = floats(dim, 2);
        FloatArray out = new FloatArray(dim);
        KernelEmulator.launch(1, LlamaKernels.RMS_THREADS, kc -> LlamaKernels.rmsNorm(kc, x, w, out, dim, 1e-5f));
        double ss = 0;
        for (int i = 0; i < dim; i++) {
            ss += (double) x.get(i) * x.get(i);
        }
        double inv = 1 / Math.sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++) {
            double expected = w.get(i) * inv * x.get(i);
            assertEquals(expected, out.get(i), 1e-5 * Math.max(1, Math.abs(expected)), "element " + i);
        }
    }

    @Test
    void matrixVectorKernelsMatchDouble() {
        int rows = 6;
        int n = 300;   // not a multiple of the 128 threads per row
        HalfFloatArray w = halves(rows * n, 0.5);
        FloatArray x = floats(n, 1);
        HalfFloatArray xHalf = new HalfFloatArray(n);
        float[] xs = new float[n];
        float[] xhs = new float[n];
        for (int j = 0; j < n; j++) {
            xs[j] = x.get(j);
            xHalf.set(j, new HalfFloat(x.get(j)));
            xhs[j] = h(xHalf, j);
        }
        FloatArray out = new FloatArray(rows);
        KernelEmulator.launch(rows, LlamaKernels.MATVEC_THREADS, kc -> LlamaKernels.matvec(kc, x, w, out, n));
        FloatArray residual = floats(rows, 1);
        FloatArray residualHalf = new FloatArray(rows);
        float[] before = residual.toHeapArray();
        for (int r = 0; r < rows; r++) {
            residualHalf.set(r, before[r]);
        }
        KernelEmulator.launch(rows, LlamaKernels.MATVEC_THREADS, kc -> LlamaKernels.matvecResidual(kc, x, w, residual, n));
        KernelEmulator.launch(rows, LlamaKernels.MATVEC_THREADS,
                kc -> LlamaKernels.matvecResidualHalf(kc, xHalf, w, residualHalf, n));
        for (int r = 0; r < rows; r++) {
            double expected = dot(w, r, n, xs);
            assertEquals(expected, out.get(r), 1e-4, "matvec row " + r);
            assertEquals(before[r] + expected, residual.get(r), 1e-4, "matvecResidual row " + r);
            assertEquals(before[r] + dot(w, r, n, xhs), residualHalf.get(r), 1e-4, "matvecResidualHalf row " + r);
        }
    }

    @Test
    void ffnGateUpIsSiluOfGateTimesUp() {
        int ffn = 5;
        int n = 200;
        HalfFloatArray w13 = halves(2 * ffn * n, 0.3);
        FloatArray x = floats(n, 1);
        FloatArray hb = new FloatArray(ffn);
        KernelEmulator.launch(ffn, LlamaKernels.MATVEC_THREADS, kc -> LlamaKernels.ffnGateUp(kc, x, w13, hb, n, ffn));
        float[] xs = x.toHeapArray();
        for (int r = 0; r < ffn; r++) {
            double gate = dot(w13, r, n, xs);
            double up = dot(w13, ffn + r, n, xs);
            assertEquals(gate / (1 + Math.exp(-gate)) * up, hb.get(r), 1e-4, "row " + r);
        }
    }

    /** A tiny config's RoPE tables, as LlamaWeights makes them. */
    private static LlamaWeights tables(LlamaConfig config) {
        return new LlamaWeights(config, 1);
    }

    @Test
    void ropeKernelsRotatePairsAtTheTokensPositionAndFillTheCache() {
        LlamaConfig config = new LlamaConfig(1, 64, 4, 2, 16, 0, 8, 12, 10000f, 1e-5f);
        LlamaWeights w = tables(config);
        int dim = config.dim();
        int kvDim = config.kvDim();
        int d = config.headDim();
        FloatArray qkv = floats(config.qkvRows(), 2);
        int length = 10;   // position 9
        HalfFloatArray q = new HalfFloatArray(dim);
        HalfFloatArray k = new HalfFloatArray(kvDim);
        HalfFloatArray v = new HalfFloatArray(kvDim);
        KernelEmulator.launch(2, dim / 4, kc -> LlamaKernels.ropeHalf(kc, meta(length), qkv, w.ropeCos, w.ropeSin, q, k, v,
                dim, kvDim, d));
        FloatArray q32 = new FloatArray(dim);
        FloatArray keyCache = new FloatArray(config.maxLength() * kvDim);
        FloatArray valueCache = new FloatArray(config.maxLength() * kvDim);
        KernelEmulator.launch(2, dim / 4, kc -> LlamaKernels.ropeCacheFp32(kc, meta(length), qkv, w.ropeCos, w.ropeSin, q32,
                keyCache, valueCache, dim, kvDim, d));
        int pos = length - 1;
        for (int i = 0; i < dim; i += 2) {
            double angle = pos * Math.pow(config.ropeTheta(), -(double) (i % d) / d);
            double c = Math.cos(angle);
            double s = Math.sin(angle);
            double q0 = qkv.get(i) * c - qkv.get(i + 1) * s;
            double q1 = qkv.get(i) * s + qkv.get(i + 1) * c;
            assertEquals(q0, q32.get(i), 1e-5, "q32 " + i);
            assertEquals(q1, q32.get(i + 1), 1e-5, "q32 " + (i + 1));
            assertEquals(q0, h(q, i), 2e-3, "q " + i);   // fp16: 2^-11 relative, |q| < 3
            assertEquals(q1, h(q, i + 1), 2e-3, "q " + (i + 1));
            if (i < kvDim) {
                double k0 = qkv.get(dim + i) * c - qkv.get(dim + i + 1) * s;
                double k1 = qkv.get(dim + i) * s + qkv.get(dim + i + 1) * c;
                assertEquals(k0, h(k, i), 2e-3, "k " + i);
                assertEquals(k1, h(k, i + 1), 2e-3, "k " + (i + 1));
                assertEquals(k0, keyCache.get(pos * kvDim + i), 1e-5, "key cache " + i);
                assertEquals(k1, keyCache.get(pos * kvDim + i + 1), 1e-5, "key cache " + (i + 1));
                for (int j = i; j < i + 2; j++) {
                    float value = qkv.get(dim + kvDim + j);
                    assertEquals(value, valueCache.get(pos * kvDim + j), "value cache " + j);
                    assertEquals(Float.float16ToFloat(Float.floatToFloat16(value)), h(v, j), "v " + j);
                }
            }
        }
        for (int j = 0; j < config.maxLength() * kvDim; j++) {
            if (j / kvDim != pos) {
                assertEquals(0.0f, keyCache.get(j), "only the token's row is written: " + j);
            }
        }
    }

    @Test
    void scalarAttentionMatchesTheCpuReference() {
        int heads = 4;
        int kvHeads = 2;
        int d = 64;
        int maxLength = 50;
        int kvDim = kvHeads * d;
        for (int length : new int[] {1, 16, 37, 50}) {   // one key, one full tile, a partial tile, the capacity
            FloatArray q = floats(heads * d, 1);
            FloatArray keyCache = floats(maxLength * kvDim, 2);
            FloatArray valueCache = floats(maxLength * kvDim, 1);
            FloatArray out = new FloatArray(heads * d);
            float scale = (float) (1 / Math.sqrt(d));
            KernelEmulator.launch(heads, ScalarAttention.THREADS_PER_HEAD, kc -> LlamaKernels.scalarAttention(kc,
                    meta(length), q, keyCache, valueCache, out, d, kvDim, heads / kvHeads, scale));
            CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(heads).kvHeads(kvHeads).headDim(d)
                    .maxQueryLength(1).maxLength(maxLength).causal(true).build();
            CpuReference.Result ref = CpuReference.cached(spec, q.toHeapArray(), false,
                    (slot, kvHead, position, into) -> {
                        for (int i = 0; i < d; i++) {
                            into[i] = keyCache.get(position * kvDim + kvHead * d + i);
                        }
                    },
                    (slot, kvHead, position, into) -> {
                        for (int i = 0; i < d; i++) {
                            into[i] = valueCache.get(position * kvDim + kvHead * d + i);
                        }
                    }, new int[] {length}, new int[] {1});
            LlamaDecoderDemo.Check check = LlamaDecoderDemo.compare(0, length, 0, out.toHeapArray(), ref.output());
            assertEquals(0, check.nans(), "length " + length);
            assertTrue(check.maxAbsError() < 1e-5, "length " + length + ": " + check);
        }
    }

    @Test
    void theCheckCountsNanAsAFailure() {
        LlamaDecoderDemo.Check check = LlamaDecoderDemo.compare(0, 1, 0, new float[] {1, Float.NaN}, new double[] {1, 2});
        assertEquals(1, check.nans());
        assertTrue(!check.passes());
        assertTrue(LlamaDecoderDemo.compare(0, 1, 0, new float[] {1, 2.001f}, new double[] {1, 2}).passes());
        assertTrue(!LlamaDecoderDemo.compare(0, 1, 0, new float[] {1, 2.1f}, new double[] {1, 2}).passes());
    }
}
