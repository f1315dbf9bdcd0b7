package io.github.tornadoattention.examples.llama;

import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The decoder's kernels, GPULlama3.java style: KernelContext kernels, one workgroup per output row for the
 * matrix-vector products (fp16 weights, fp32 activations and accumulation), a one-workgroup RMSNorm.
 * They are plain Java too: the tests run them on the CPU through an emulated KernelContext.
 *
 * <p>Position-dependent data is read from a small device array ({@code meta}: element 0 is the sequence
 * length after this step's token, so the token sits at position {@code meta[0] - 1}), never passed as a
 * scalar: TornadoVM compiles scalar arguments into the kernel as constants.
 *
 * <p>TornadoVM 5.2 PTX rules kept here (tornado-kernels/README.md): local arrays are used only in the kernel
 * method itself, sizes are compile-time constants, no {@code >>} (it is emitted as a logical shift), loop
 * bounds are {@code <} (a {@code <=} bound in a parallel kernel compiled to an unreachable loop body once).
 */
public final class LlamaKernels {
    /** Threads of the one workgroup of {@link #rmsNorm}. */
    public static final int RMS_THREADS = 1024;
    /** Threads per output row of the matrix-vector kernels. */
    public static final int MATVEC_THREADS = 128;
    /** Key tile of {@link #scalarAttention} (GPULlama3's BLOCK_SIZE_C). */
    public static final int SCALAR_TILE = 16;
    /** Largest head dim of {@link #scalarAttention}: its local tiles are sized for it. */
    public static final int SCALAR_MAX_HEAD_DIM = 128;

    private LlamaKernels() {
    }

    /** x = embedding row of token[0] (fp16 table [vocab, dim] to fp32). One thread per element. */
    public static void embed(KernelContext c, IntArray token, HalfFloatArray table, FloatArray x, int dim) {
        int i = c.globalIdx;
        x.set(i, table.get(token.get(0) * dim + i).getFloat32());
    }

    /**
     * out = weight * x / sqrt(mean(x^2) + eps), in one workgroup of {@link #RMS_THREADS} threads (a tree reduction
     * in local memory; one launch, no second "finalize" kernel and no cross-workgroup race).
     */
    public static void rmsNorm(KernelContext c, FloatArray x, FloatArray weight, FloatArray out, int dim, float eps) {
        int lid = c.localIdx;
        float[] partial = c.allocateFloatLocalArray(RMS_THREADS);
        float sum = 0.0f;
        for (int i = lid; i < dim; i += RMS_THREADS) {
            float v = x.get(i);
            sum += v * v;
        }
        partial[lid] = sum;
        for (int stride = RMS_THREADS / 2; stride > 0; stride /= 2) {
            c.localBarrier();
            if (lid < stride) {
                partial[lid] += partial[lid + stride];
            }
        }
        c.localBarrier();
        float inv = 1.0f / TornadoMath.sqrt(partial[0] / dim + eps);
        for (int i = lid; i < dim; i += RMS_THREADS) {
            out.set(i, weight.get(i) * (inv * x.get(i)));
        }
    }

    /** out[row] = w[row, :] . x (w fp16 [rows, n]); one workgroup of {@link #MATVEC_THREADS} per row. */
    public static void matvec(KernelContext c, FloatArray x, HalfFloatArray w, FloatArray out, int n) {
        int row = c.groupIdx;
        int lid = c.localIdx;
        float[] partial = c.allocateFloatLocalArray(MATVEC_THREADS);
        int base = row * n;
        float sum = 0.0f;
        for (int j = lid; j < n; j += MATVEC_THREADS) {
            sum += w.get(base + j).getFloat32() * x.get(j);
        }
        partial[lid] = sum;
        for (int stride = MATVEC_THREADS / 2; stride > 0; stride /= 2) {
            c.localBarrier();
            if (lid < stride) {
                partial[lid] += partial[lid + stride];
            }
        }
        if (lid == 0) {
            out.set(row, partial[0]);
        }
    }

    /** x[row] += w[row, :] . in (the residual add of an output projection); fp32 input (the scalar variant's). */
    public static void matvecResidual(KernelContext c, FloatArray in, HalfFloatArray w, FloatArray x, int n) {
        int row = c.groupIdx;
        int lid = c.localIdx;
        float[] partial = c.allocateFloatLocalArray(MATVEC_THREADS);
        int base = row * n;
        float sum = 0.0f;
        for (int j = lid; j < n; j += MATVEC_THREADS) {
            sum += w.get(base + j).getFloat32() * in.get(j);
        }
        partial[lid] = sum;
        for (int stride = MATVEC_THREADS / 2; stride > 0; stride /= 2) {
            c.localBarrier();
            if (lid < stride) {
                partial[lid] += partial[lid + stride];
            }
        }
        if (lid == 0) {
            x.set(row, x.get(row) + partial[0]);
        }
    }

    /** As {@link #matvecResidual} with an fp16 input: our attention task's output O. */
    public static void matvecResidualHalf(KernelContext c, HalfFloatArray in, HalfFloatArray w, FloatArray x, int n) {
        int row = c.groupIdx;
        int lid = c.localIdx;
        float[] partial = c.allocateFloatLocalArray(MATVEC_THREADS);
        int base = row * n;
        float sum = 0.0f;
        for (int j = lid; j < n; j += MATVEC_THREADS) {
            sum += w.get(base + j).getFloat32() * in.get(j).getFloat32();
        }
        partial[lid] = sum;
        for (int stride = MATVEC_THREADS / 2; stride > 0; stride /= 2) {
            c.localBarrier();
            if (lid < stride) {
                partial[lid] += partial[lid + stride];
            }
        }
        if (lid == 0) {
            x.set(row, x.get(row) + partial[0]);
        }
    }

    /**
     * SwiGLU's first half: hb[r] = silu(w13[r, :] . x) * (w13[ffn + r, :] . x), w13 = [gate rows; up rows]
     * fp16 [2 ffn, n]. One workgroup per r.
     */
    public static void ffnGateUp(KernelContext c, FloatArray x, HalfFloatArray w13, FloatArray hb, int n, int ffn) {
        int row = c.groupIdx;
        int lid = c.localIdx;
        float[] gatePartial = c.allocateFloatLocalArray(MATVEC_THREADS);
        float[] upPartial = c.allocateFloatLocalArray(MATVEC_THREADS);
        int gateBase = row * n;
        int upBase = (ffn + row) * n;
        float gate = 0.0f;
        float up = 0.0f;
        for (int j = lid; j < n; j += MATVEC_THREADS) {
            float xj = x.get(j);
            gate += w13.get(gateBase + j).getFloat32() * xj;
            up += w13.get(upBase + j).getFloat32() * xj;
        }
        gatePartial[lid] = gate;
        upPartial[lid] = up;
        for (int stride = MATVEC_THREADS / 2; stride > 0; stride /= 2) {
            c.localBarrier();
            if (lid < stride) {
                gatePartial[lid] += gatePartial[lid + stride];
                upPartial[lid] += upPartial[lid + stride];
            }
        }
        if (lid == 0) {
            float g = gatePartial[0];
            hb.set(row, g / (1.0f + TornadoMath.exp(-g)) * upPartial[0]);
        }
    }

    /**
     * Our variant's RoPE: rotates q and k of this token (adjacent pairs, as llama2.c and GPULlama3; cos/sin from
     * host-made tables [maxLength, headDim / 2]) and writes q, k and v as fp16 ([heads, D] and [kvHeads, D], the
     * dense [slots = 1, H, 1, D] tensors our attention task reads); the append task then writes k and v into
     * the cache. One thread per pair of q (heads D / 2 threads).
     *
     * <p>fp16 from a computed float: {@code array.set(i, new HalfFloat(x))} straight in the {@code set} call is
     * lowered by TornadoVM 5.2's PTX backend to {@code cvt.rn.f16.f32} + {@code st.global.b16} (checked in the
     * generated PTX); a {@code HalfFloat} kept in a variable first is not (see tornado-kernels' Fp16).
     */
    public static void ropeHalf(KernelContext c, IntArray meta, FloatArray qkv, FloatArray cos, FloatArray sin,
                                HalfFloatArray q, HalfFloatArray k, HalfFloatArray v, int dim, int kvDim, int headDim) {
        int i = 2 * c.globalIdx;
        int pos = meta.get(0) - 1;
        int f = pos * (headDim / 2) + (i % headDim) / 2;
        float cr = cos.get(f);
        float ci = sin.get(f);
        float q0 = qkv.get(i);
        float q1 = qkv.get(i + 1);
        q.set(i, new HalfFloat(q0 * cr - q1 * ci));
        q.set(i + 1, new HalfFloat(q0 * ci + q1 * cr));
        if (i < kvDim) {
            float k0 = qkv.get(dim + i);
            float k1 = qkv.get(dim + i + 1);
            k.set(i, new HalfFloat(k0 * cr - k1 * ci));
            k.set(i + 1, new HalfFloat(k0 * ci + k1 * cr));
            v.set(i, new HalfFloat(qkv.get(dim + kvDim + i)));
            v.set(i + 1, new HalfFloat(qkv.get(dim + kvDim + i + 1)));
        }
    }

    /**
     * The scalar variant's RoPE with the cache write fused (GPULlama3's ropeRotationWithCacheCopy): q rotated to
     * fp32, k rotated and v copied into the fp32 caches [maxLength, kvDim] at this token's position.
     */
    public static void ropeCacheFp32(KernelContext c, IntArray meta, FloatArray qkv, FloatArray cos, FloatArray sin,
                                     FloatArray q, FloatArray keyCache, FloatArray valueCache, int dim, int kvDim,
                                     int headDim) {
        int i = 2 * c.globalIdx;
        int pos = meta.get(0) - 1;
        int f = pos * (headDim / 2) + (i % headDim) / 2;
        float cr = cos.get(f);
        float ci = sin.get(f);
        float q0 = qkv.get(i);
        float q1 = qkv.get(i + 1);
        q.set(i, q0 * cr - q1 * ci);
        q.set(i + 1, q0 * ci + q1 * cr);
        if (i < kvDim) {
            float k0 = qkv.get(dim + i);
            float k1 = qkv.get(dim + i + 1);
            int row = pos * kvDim;
            keyCache.set(row + i, k0 * cr - k1 * ci);
            keyCache.set(row + i + 1, k0 * ci + k1 * cr);
            valueCache.set(row + i, qkv.get(dim + kvDim + i));
            valueCache.set(row + i + 1, qkv.get(dim + kvDim + i + 1));
        }
    }

    /**
     * The baseline: GPULlama3.java's processHeadsFlashAttention (the kernel its NVIDIA path runs), over this layer's
     * fp32 caches [maxLength, kvDim]. One workgroup per query head; keys in tiles of {@link #SCALAR_TILE}, staged in
     * local memory; scores one per thread; online softmax in fp32; every thread accumulates the whole output row
     * (headDim values, private) and writes its share. Changes from the original: bounds are exclusive ({@code <} on
     * the length instead of {@code <=} on the position, see the class comment), the layer offset is gone (a cache
     * per layer), the local tiles have constant sizes, and 1/sqrt(D) is a multiplication.
     */
    public static void scalarAttention(KernelContext c, IntArray meta, FloatArray q, FloatArray keyCache,
                                       FloatArray valueCache, FloatArray out, int headDim, int kvDim, int kvMul,
                                       float scale) {
        int tid = c.localIdx;
        int h = c.groupIdx;
        int localSize = c.localGroupSizeX;
        int length = meta.get(0);
        int kvOffset = (h / kvMul) * headDim;

        float[] qShared = c.allocateFloatLocalArray(SCALAR_MAX_HEAD_DIM);
        float[] kTile = c.allocateFloatLocalArray(SCALAR_TILE * SCALAR_MAX_HEAD_DIM);
        float[] vTile = c.allocateFloatLocalArray(SCALAR_TILE * SCALAR_MAX_HEAD_DIM);
        float[] sTile = c.allocateFloatLocalArray(SCALAR_TILE);
        float[] tileMax = c.allocateFloatLocalArray(4);

        float maxScore = Float.NEGATIVE_INFINITY;
        float sumExp = 0.0f;
        float[] output = new float[SCALAR_MAX_HEAD_DIM];
        for (int d = 0; d < headDim; d++) {
            output[d] = 0.0f;
        }
        for (int d = tid; d < headDim; d += localSize) {
            qShared[d] = q.get(h * headDim + d);
        }
        c.localBarrier();

        for (int tileStart = 0; tileStart < length; tileStart += SCALAR_TILE) {
            int tileKeys = Math.min(SCALAR_TILE, length - tileStart);
            for (int t = tid; t < tileKeys; t += localSize) {
                int src = (tileStart + t) * kvDim + kvOffset;
                for (int d = 0; d < headDim; d++) {
                    kTile[t * headDim + d] = keyCache.get(src + d);
                    vTile[t * headDim + d] = valueCache.get(src + d);
                }
            }
            c.localBarrier();
            for (int t = tid; t < tileKeys; t += localSize) {
                float score = 0.0f;
                for (int d = 0; d < headDim; d++) {
                    score += qShared[d] * kTile[t * headDim + d];
                }
                sTile[t] = score * scale;
            }
            c.localBarrier();
            // Every thread finds the tile max over the few scores; thread 0's copy is broadcast.
            float localMax = Float.NEGATIVE_INFINITY;
            for (int t = 0; t < tileKeys; t++) {
                localMax = Math.max(localMax, sTile[t]);
            }
            if (tid == 0) {
                tileMax[0] = localMax;
            }
            c.localBarrier();
            float newMax = Math.max(maxScore, tileMax[0]);
            if (newMax != maxScore && maxScore != Float.NEGATIVE_INFINITY) {
                float rescale = TornadoMath.exp(maxScore - newMax);
                sumExp *= rescale;
                for (int d = 0; d < headDim; d++) {
                    output[d] *= rescale;
                }
            }
            maxScore = newMax;
            for (int t = 0; t < tileKeys; t++) {
                float p = TornadoMath.exp(sTile[t] - maxScore);
                sumExp += p;
                for (int d = 0; d < headDim; d++) {
                    output[d] += p * vTile[t * headDim + d];
                }
            }
            c.localBarrier();
        }
        float norm = sumExp > 0.0f ? 1.0f / sumExp : 0.0f;
        for (int d = tid; d < headDim; d += localSize) {
            out.set(h * headDim + d, output[d] * norm);
        }
    }
}
