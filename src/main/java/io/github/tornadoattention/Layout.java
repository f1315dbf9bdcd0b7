package io.github.tornadoattention;

/** Dense row-major memory layouts of a [batch, heads, sequence, headDim] tensor. */
public enum Layout {
    /** [batch][heads][sequence][headDim]: each head's rows are contiguous. The default. */
    BHSD,
    /** [batch][sequence][heads][headDim]: a token's heads are contiguous (what a QKV projection writes). */
    BSHD;

    /** Element strides of a tensor with this layout; the head dimension is always contiguous. */
    public TensorStrides strides(int heads, int sequence, int headDim) {
        long d = headDim;
        return switch (this) {
            case BHSD -> new TensorStrides((long) heads * sequence * d, sequence * d, d);
            case BSHD -> new TensorStrides((long) sequence * heads * d, d, heads * d);
        };
    }
}
