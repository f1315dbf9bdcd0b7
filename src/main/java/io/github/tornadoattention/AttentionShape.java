package io.github.tornadoattention;

/**
 * One attention call's shape: the single place where shapes are validated.
 *
 * <p>Q is [batch, heads, queryLength, headDim], K and V are [batch, kvHeads, kvLength, headDim],
 * O is shaped like Q, all fp16 in {@link #layout()}; the optional logsumexp is fp32
 * [batch, heads, queryLength]. Query head {@code h} reads key/value head
 * {@code h / (heads / kvHeads)} (MHA, GQA, MQA). With {@code causal}, query {@code i} sees key
 * {@code j} iff {@code j <= i + (kvLength - queryLength)} (bottom-right aligned); a row that sees no
 * key gives O = 0 and logsumexp = -infinity.
 *
 * <p>Build one with {@link #builder()}; the canonical constructor validates every field and throws
 * {@link InvalidArgumentException} naming the first bad one.
 */
public record AttentionShape(int batch, int heads, int kvHeads, int queryLength, int kvLength,
                             int headDim, boolean causal, float scale, Layout layout) {

    /** Kernels index tensors with 32-bit element offsets. */
    public static final long MAX_TENSOR_ELEMENTS = Integer.MAX_VALUE;

    public AttentionShape {
        requirePositive("batch", batch);
        requirePositive("heads", heads);
        requirePositive("kvHeads", kvHeads);
        requirePositive("queryLength", queryLength);
        requirePositive("kvLength", kvLength);
        requirePositive("headDim", headDim);
        if (heads % kvHeads != 0) {
            throw new InvalidArgumentException("kvHeads", kvHeads,
                    "must divide heads (" + heads + ") evenly: MHA, GQA or MQA");
        }
        if (!(scale > 0f && scale <= maxScale(headDim))) { // NaN fails too
            throw new InvalidArgumentException("scale", scale, "must be > 0 and at most " + maxScale(headDim)
                    + " at headDim " + headDim + " (so every score of fp16 inputs, and the logsumexp, stays finite in fp32)");
        }
        InvalidArgumentException.requireNonNull("layout", layout);
        requireAddressable("q", (long) batch * heads * queryLength * headDim);
        requireAddressable("k", (long) batch * kvHeads * kvLength * headDim);
    }

    private static void requirePositive(String argument, int value) {
        if (value <= 0) {
            throw new InvalidArgumentException(argument, value, "must be >= 1");
        }
    }

    private static void requireAddressable(String tensor, long elements) {
        if (elements > MAX_TENSOR_ELEMENTS) {
            throw new InvalidArgumentException(tensor + " elements", elements,
                    "a tensor may hold at most " + MAX_TENSOR_ELEMENTS + " elements");
        }
    }

    /**
     * The largest accepted scale at {@code headDim}: scale * headDim * 65504^2 (the largest score of fp16
     * inputs) times 2 stays below Float.MAX_VALUE, so scores and the logsumexp are finite in fp32.
     */
    public static float maxScale(int headDim) {
        return (float) (Float.MAX_VALUE / (2.0 * Math.max(1, headDim) * 65504.0 * 65504.0));
    }

    /** The default softmax scale, 1/sqrt(headDim). */
    public static float defaultScale(int headDim) {
        return (float) (1.0 / Math.sqrt(headDim));
    }

    public static Builder builder() {
        return new Builder();
    }

    public Builder toBuilder() {
        return new Builder().batch(batch).heads(heads).kvHeads(kvHeads).queryLength(queryLength)
                .kvLength(kvLength).headDim(headDim).causal(causal).scale(scale).layout(layout);
    }

    public long queryElements() {
        return (long) batch * heads * queryLength * headDim;
    }

    public long kvElements() {
        return (long) batch * kvHeads * kvLength * headDim;
    }

    /** O has Q's shape. */
    public long outputElements() {
        return queryElements();
    }

    public int logSumExpElements() {
        return batch * heads * queryLength;
    }

    public TensorStrides queryStrides() {
        return layout.strides(heads, queryLength, headDim);
    }

    public TensorStrides kvStrides() {
        return layout.strides(kvHeads, kvLength, headDim);
    }

    /** Query heads that share one key/value head. */
    public int groupSize() {
        return heads / kvHeads;
    }

    /** The key/value head read by query head {@code queryHead}. */
    public int kvHeadOf(int queryHead) {
        return queryHead / groupSize();
    }

    /**
     * The last key that query {@code row} sees, or -1 if it sees none (causal with more queries
     * than keys).
     */
    public int lastVisibleKey(int row) {
        if (!causal) {
            return kvLength - 1;
        }
        long last = (long) row + kvLength - queryLength;
        return (int) Math.min(kvLength - 1, Math.max(-1, last));
    }

    /**
     * FLOPs of the two matrix products, 4*B*Hq*Sq*Skv*D; for causal, half of that when Sq == Skv (the
     * usual convention), otherwise counted over the (query, key) pairs that are actually visible.
     */
    public double flops() {
        double perPair = 4.0 * batch * heads * headDim;
        if (!causal) {
            return perPair * queryLength * kvLength;
        }
        if (queryLength == kvLength) {
            return perPair * queryLength * kvLength / 2;
        }
        double visiblePairs = 0;
        for (int i = 0; i < queryLength; i++) {
            visiblePairs += lastVisibleKey(i) + 1;
        }
        return perPair * visiblePairs;
    }

    /** Checks tensors against this shape before a backend writes anything. {@code lse} may be null. */
    public void checkTensors(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        checkTensor("q", q, queryElements(), "batch*heads*queryLength*headDim");
        checkTensor("k", k, kvElements(), "batch*kvHeads*kvLength*headDim");
        checkTensor("v", v, kvElements(), "batch*kvHeads*kvLength*headDim");
        checkTensor("o", o, outputElements(), "batch*heads*queryLength*headDim");
        if (o == q || o == k || o == v) {
            throw new InvalidArgumentException("o", "the same tensor as an input", "must be a separate tensor");
        }
        if (lse != null && lse.length != logSumExpElements()) {
            throw new InvalidArgumentException("lse.length", lse.length,
                    "must equal batch*heads*queryLength = " + logSumExpElements() + " (or pass null)");
        }
    }

    private static void checkTensor(String name, HalfTensor tensor, long expected, String formula) {
        InvalidArgumentException.requireNonNull(name, tensor);
        if (!tensor.isOpen()) {
            throw new InvalidArgumentException(name, "a closed tensor", "must be open");
        }
        if (tensor.length() != expected) {
            throw new InvalidArgumentException(name + ".length", tensor.length(),
                    "must equal " + formula + " = " + expected);
        }
    }

    /** A compact description such as {@code B=2 Hq=8 Hkv=8 Sq=512 Skv=512 D=64 causal bhsd}. */
    @Override
    public String toString() {
        return "B=" + batch + " Hq=" + heads + " Hkv=" + kvHeads + " Sq=" + queryLength + " Skv=" + kvLength
                + " D=" + headDim + (causal ? " causal" : " non-causal") + " " + layout.name().toLowerCase()
                + (scale == defaultScale(headDim) ? "" : " scale=" + scale);
    }

    /** Builds a shape; key/value heads and length default to the query's, scale to 1/sqrt(headDim). */
    public static final class Builder {
        private int batch = 1;
        private int heads = 1;
        private Integer kvHeads;
        private int queryLength = 1;
        private Integer kvLength;
        private int headDim = 64;
        private boolean causal;
        private Float scale;
        private Layout layout = Layout.BHSD;

        public Builder batch(int batch) {
            this.batch = batch;
            return this;
        }

        /** Query heads. */
        public Builder heads(int heads) {
            this.heads = heads;
            return this;
        }

        public Builder kvHeads(Integer kvHeads) {
            this.kvHeads = kvHeads;
            return this;
        }

        /** Query length; also the key/value length unless {@link #kvLength} is set. */
        public Builder queryLength(int queryLength) {
            this.queryLength = queryLength;
            return this;
        }

        public Builder kvLength(Integer kvLength) {
            this.kvLength = kvLength;
            return this;
        }

        public Builder headDim(int headDim) {
            this.headDim = headDim;
            return this;
        }

        public Builder causal(boolean causal) {
            this.causal = causal;
            return this;
        }

        /** Softmax scale; null means 1/sqrt(headDim). */
        public Builder scale(Float scale) {
            this.scale = scale;
            return this;
        }

        public Builder layout(Layout layout) {
            this.layout = layout;
            return this;
        }

        public AttentionShape build() {
            return new AttentionShape(batch, heads, kvHeads == null ? heads : kvHeads, queryLength,
                    kvLength == null ? queryLength : kvLength, headDim, causal,
                    scale == null ? (headDim > 0 ? defaultScale(headDim) : 1f) : scale, layout);
        }
    }
}
