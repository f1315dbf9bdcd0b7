package io.github.tornadoattention;

/**
 * Element types of device tensors. Attention inputs and outputs are {@link #FP16} today ({@link #BF16}
 * is declared so that plans and caches already carry a type; no backend ships bf16 kernels yet);
 * logsumexp is {@link #FP32}; lengths, offsets and block tables are {@link #INT32}.
 */
public enum DType {
    FP16(2),
    BF16(2),
    FP32(4),
    INT32(4);

    private final int bytes;

    DType(int bytes) {
        this.bytes = bytes;
    }

    /** Bytes per element. */
    public int bytes() {
        return bytes;
    }

    /** Throws unless this is a type attention data (Q, K, V, O) may have on a backend that supports {@code supported}. */
    static void requireAttentionType(String argument, DType type, java.util.Set<DType> supported) {
        InvalidArgumentException.requireNonNull(argument, type);
        if (!supported.contains(type)) {
            throw new InvalidArgumentException(argument, type, "this backend supports " + supported);
        }
    }
}
