package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.InvalidArgumentException;

/**
 * The decoder's shape. Llama 3 8B's attention (hidden 4096, 32 query heads over 8 key/value heads of 128) on
 * fewer layers; {@code ffnDim} 0 leaves the feed-forward block out (the layer is then the attention half of a
 * decoder layer: RMSNorm, QKV projection, RoPE + cache write, attention, output projection), 14336 gives Llama 3 8B's SwiGLU.
 * {@code maxLength} is the KV cache capacity (prompt + generated tokens).
 */
public record LlamaConfig(int layers, int dim, int heads, int kvHeads, int headDim, int ffnDim, int vocab, int maxLength,
                          float ropeTheta, float rmsEps) {
    /** Index arithmetic in the kernels is 32-bit: every weight matrix stays below this many elements. */
    static final long MAX_MATRIX_ELEMENTS = Integer.MAX_VALUE;

    public LlamaConfig {
        positive("layers", layers);
        positive("dim", dim);
        positive("heads", heads);
        positive("kvHeads", kvHeads);
        positive("vocab", vocab);
        positive("maxLength", maxLength);
        if (headDim < 2 || headDim % 2 != 0 || headDim > LlamaKernels.SCALAR_MAX_HEAD_DIM) {
            throw new InvalidArgumentException("headDim", headDim,
                    "must be even, 2.." + LlamaKernels.SCALAR_MAX_HEAD_DIM + " (the scalar kernel's tile size)");
        }
        if (heads * headDim != dim) {
            throw new InvalidArgumentException("heads", heads, "heads * headDim must equal dim = " + dim);
        }
        if (heads % kvHeads != 0) {
            throw new InvalidArgumentException("kvHeads", kvHeads, "must divide heads = " + heads);
        }
        if (ffnDim < 0) {
            throw new InvalidArgumentException("ffnDim", ffnDim, "must be >= 0 (0: no feed-forward block)");
        }
        if ((long) vocab * dim > MAX_MATRIX_ELEMENTS || (long) 2 * ffnDim * dim > MAX_MATRIX_ELEMENTS
                || (long) maxLength * kvHeads * headDim > MAX_MATRIX_ELEMENTS) {
            throw new InvalidArgumentException("vocab", vocab,
                    "vocab*dim, 2*ffnDim*dim and maxLength*kvHeads*headDim must stay below 2^31 (32-bit indices)");
        }
        if (!(ropeTheta > 1) || !(rmsEps > 0)) {
            throw new InvalidArgumentException("ropeTheta", ropeTheta, "ropeTheta must be > 1 and rmsEps > 0");
        }
    }

    private static void positive(String name, int value) {
        if (value < 1) {
            throw new InvalidArgumentException(name, value, "must be >= 1");
        }
    }

    public int kvDim() {
        return kvHeads * headDim;
    }

    public int qkvRows() {
        return dim + 2 * kvDim();
    }

    /** fp16 weight elements of one layer. */
    public long layerWeights() {
        return (long) qkvRows() * dim + (long) dim * dim + 3L * ffnDim * dim;
    }

    /** fp16 weight bytes of the whole model (layers, embedding table, LM head). */
    public long weightBytes() {
        return 2 * (layers * layerWeights() + 2L * vocab * dim);
    }
}
