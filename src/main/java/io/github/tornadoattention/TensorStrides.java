package io.github.tornadoattention;

/** Element strides of a [batch, heads, sequence, headDim] tensor whose last dimension is contiguous. */
public record TensorStrides(long batch, long head, long row) {

    /** Index of element {@code (b, h, s, 0)}: the start of one row of {@code headDim} values. */
    public long rowStart(int b, int h, int s) {
        return b * batch + h * head + s * row;
    }
}
