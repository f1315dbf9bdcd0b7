package io.github.tornadoattention;

import java.util.ArrayList;
import java.util.List;

/**
 * One attention call's shape: the single place where shapes are validated.
 *
 * <p>Q is [batch, heads, queryLength, headDim], K and V are [batch, kvHeads, kvLength, headDim],
 * O is shaped like Q, all of one element type {@link #dtype()} (fp16, the default, or bf16) in {@link #layout()}; the optional logsumexp is fp32
 * [batch, heads, queryLength]. Query head {@code h} reads key/value head
 * {@code h / (heads / kvHeads)} (MHA, GQA, MQA). With {@code causal}, query {@code i} sees key
 * {@code j} iff {@code j <= i + (kvLength - queryLength)} (bottom-right aligned); a row that sees no
 * key gives O = 0 and logsumexp = -infinity.
 *
 * <p>Optional features, as FlashAttention defines them (off by default):
 * <ul>
 * <li>{@code window(left, right)}: query {@code i} sees key {@code j} only when
 * {@code i + Skv - Sq - left <= j <= i + Skv - Sq + right}; -1 leaves that side unbounded. With causal, the
 * visible keys are those both allow. {@link #firstVisibleKey}/{@link #lastVisibleKey} are the one statement
 * of which keys a row sees.</li>
 * <li>{@code softcap(c)}: a score {@code s = scale * q.k} becomes {@code c * tanh(s / c)} before the softmax.</li>
 * <li>{@code sinks}: one logit per query head that joins every row's softmax denominator and adds no value;
 * the logsumexp includes it, and a row that sees no key then gives O = 0 and logsumexp = the sink.</li>
 * </ul>
 *
 * <p>Build one with {@link #builder()}; the canonical constructor validates every field and throws
 * {@link InvalidArgumentException} naming the first bad one.
 */
public record AttentionShape(int batch, int heads, int kvHeads, int queryLength, int kvLength,
                             int headDim, boolean causal, float scale, Layout layout,
                             int windowLeft, int windowRight, float softcap, List<Float> sinks, DType dtype) {

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
        requireWindowSide("window.left", windowLeft);
        requireWindowSide("window.right", windowRight);
        if (!(softcap == 0f || softcap > 0f && Float.isFinite(softcap))) { // NaN fails too
            throw new InvalidArgumentException("softcap", softcap, "must be 0 (off) or a finite number > 0");
        }
        softcap = softcap == 0f ? 0f : softcap; // -0 is off too
        sinks = sinks == null ? List.of() : sinks;
        if (!sinks.isEmpty() && sinks.size() != heads) {
            throw new InvalidArgumentException("sinks", "length " + sinks.size(),
                    "must hold one logit per query head: length heads = " + heads);
        }
        for (int h = 0; h < sinks.size(); h++) {
            Float logit = sinks.get(h);
            if (logit == null || !Float.isFinite(logit)) {
                throw new InvalidArgumentException("sinks", "[" + h + "] = " + logit, "every sink logit must be finite");
            }
        }
        sinks = List.copyOf(sinks);
        InvalidArgumentException.requireNonNull("dtype", dtype);
        if (dtype != DType.FP16 && dtype != DType.BF16) {
            throw new InvalidArgumentException("dtype", dtype.label(), "Q, K, V and O are fp16 or bf16");
        }
    }

    /** An fp16 shape. */
    public AttentionShape(int batch, int heads, int kvHeads, int queryLength, int kvLength, int headDim, boolean causal,
                          float scale, Layout layout, int windowLeft, int windowRight, float softcap, List<Float> sinks) {
        this(batch, heads, kvHeads, queryLength, kvLength, headDim, causal, scale, layout, windowLeft, windowRight, softcap,
                sinks, DType.FP16);
    }

    /** An fp16 shape without window, softcap or sinks. */
    public AttentionShape(int batch, int heads, int kvHeads, int queryLength, int kvLength, int headDim, boolean causal,
                          float scale, Layout layout) {
        this(batch, heads, kvHeads, queryLength, kvLength, headDim, causal, scale, layout, -1, -1, 0f, List.of());
    }

    private static void requireWindowSide(String argument, int value) {
        if (value < -1) {
            throw new InvalidArgumentException(argument, value, "must be -1 (unbounded) or a number of keys >= 0");
        }
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
                .kvLength(kvLength).headDim(headDim).causal(causal).scale(scale).layout(layout)
                .window(windowLeft, windowRight).softcap(softcap).sinks(sinkArray()).dtype(dtype);
    }

    /** True when a window bounds either side. */
    public boolean hasWindow() {
        return windowLeft >= 0 || windowRight >= 0;
    }

    public boolean hasSoftcap() {
        return softcap > 0f;
    }

    public boolean hasSinks() {
        return !sinks.isEmpty();
    }

    /** The sink logit of query head {@code queryHead}, or -infinity without sinks (a sink that adds nothing). */
    public double sink(int queryHead) {
        return sinks.isEmpty() ? Double.NEGATIVE_INFINITY : sinks.get(queryHead);
    }

    /** The sink logits as an array, or null without sinks. */
    public float[] sinkArray() {
        if (sinks.isEmpty()) {
            return null;
        }
        float[] a = new float[sinks.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = sinks.get(i);
        }
        return a;
    }

    /**
     * The features set beyond the plain definition, by the names their errors use: "window", "softcap",
     * "sinks", in that order; empty when none is.
     */
    public List<String> features() {
        List<String> names = new ArrayList<>(3);
        if (hasWindow()) {
            names.add("window");
        }
        if (hasSoftcap()) {
            names.add("softcap");
        }
        if (hasSinks()) {
            names.add("sinks");
        }
        return List.copyOf(names);
    }

    /** A feature's value as errors and descriptions show it: {@code (left, right)}, the cap, or the logits. */
    public String featureValue(String feature) {
        return switch (feature) {
            case "window" -> "(" + windowLeft + ", " + windowRight + ")";
            case "softcap" -> String.valueOf(softcap);
            case "sinks" -> sinks.toString();
            default -> throw new IllegalArgumentException("no feature " + feature);
        };
    }

    /**
     * Throws for the first feature set on this shape: for a backend that serves none of them. Names the backend,
     * the feature and what the backend serves.
     */
    public void requireNoFeatures(String backendId) {
        requireNoFeatures(backendId, "dense attention", features(), this::featureValue);
    }

    /** The refusal of {@link #requireNoFeatures(String)}, shared with the cache spec ({@code what}: what the backend serves). */
    static void requireNoFeatures(String backendId, String what, List<String> features,
                                  java.util.function.UnaryOperator<String> value) {
        for (String feature : features) {
            throw new InvalidArgumentException(feature, value.apply(feature), backendId + " serves " + what
                    + " without window, softcap or sinks (cpu-reference serves them)");
        }
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
     * The first key that query {@code row} sees (the window's left edge, else 0). Row {@code row} sees keys
     * {@code firstVisibleKey(row)..lastVisibleKey(row)}, none when that range is empty.
     */
    public int firstVisibleKey(int row) {
        return firstVisibleKey((long) row + kvLength - queryLength, kvLength, windowLeft);
    }

    /**
     * The last key that query {@code row} sees (causal and the window's right edge both bound it), or -1 if
     * it sees none (causal with more queries than keys).
     */
    public int lastVisibleKey(int row) {
        return lastVisibleKey((long) row + kvLength - queryLength, kvLength, causal, windowRight);
    }

    /**
     * The one rule for which keys a query sees, dense or over a cache: a query at {@code position} (dense row
     * i: i + Skv - Sq; cache query j of a sequence's n new tokens: L - n + j) among {@code kvLength} keys sees
     * keys {@code firstVisibleKey(..)..lastVisibleKey(..)}. This is the first: {@code position - left} (-1:
     * unbounded), clamped to [0, kvLength].
     */
    public static int firstVisibleKey(long position, int kvLength, int windowLeft) {
        if (windowLeft < 0) {
            return 0;
        }
        return (int) Math.min(kvLength, Math.max(0, position - windowLeft));
    }

    /**
     * The last key a query at {@code position} among {@code kvLength} keys sees: below kvLength, at most
     * {@code position} when causal and at most {@code position + right} with a right window side; -1 for none.
     */
    public static int lastVisibleKey(long position, int kvLength, boolean causal, int windowRight) {
        long last = kvLength - 1;
        if (causal) {
            last = Math.min(last, position);
        }
        if (windowRight >= 0) {
            last = Math.min(last, position + windowRight);
        }
        return (int) Math.max(-1, last);
    }

    /** How many keys query {@code row} sees. */
    public int visibleKeys(int row) {
        return Math.max(0, lastVisibleKey(row) - firstVisibleKey(row) + 1);
    }

    /** True when query {@code row} sees key {@code key}. */
    public boolean sees(int row, int key) {
        return key >= firstVisibleKey(row) && key <= lastVisibleKey(row);
    }

    /**
     * FLOPs of the two matrix products, 4*B*Hq*Sq*Skv*D; for causal, half of that when Sq == Skv (the
     * usual convention), otherwise (and with a window) counted over the (query, key) pairs that are visible.
     */
    public double flops() {
        double perPair = 4.0 * batch * heads * headDim;
        if (!hasWindow() && !causal) {
            return perPair * queryLength * kvLength;
        }
        if (!hasWindow() && queryLength == kvLength) {
            return perPair * queryLength * kvLength / 2;
        }
        double visiblePairs = 0;
        for (int i = 0; i < queryLength; i++) {
            visiblePairs += visibleKeys(i);
        }
        return perPair * visiblePairs;
    }

    /**
     * Checks tensors against this shape before a backend writes anything. {@code lse} may be null. Q, K, V and O
     * share one element type, this shape's {@link #dtype()}: a call mixing types is refused naming each tensor's.
     */
    public void checkTensors(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        checkTensor("q", q, queryElements(), "batch*heads*queryLength*headDim");
        checkTensor("k", k, kvElements(), "batch*kvHeads*kvLength*headDim");
        checkTensor("v", v, kvElements(), "batch*kvHeads*kvLength*headDim");
        checkTensor("o", o, outputElements(), "batch*heads*queryLength*headDim");
        checkElementTypes(q.dtype(), k.dtype(), v.dtype(), o.dtype());
        if (o == q || o == k || o == v) {
            throw new InvalidArgumentException("o", "the same tensor as an input", "must be a separate tensor");
        }
        if (lse != null && lse.length != logSumExpElements()) {
            throw new InvalidArgumentException("lse.length", lse.length,
                    "must equal batch*heads*queryLength = " + logSumExpElements() + " (or pass null)");
        }
    }

    /** One element type per call: the plan's. Mixed types name every tensor's type; one other type names the plan's. */
    private void checkElementTypes(DType q, DType k, DType v, DType o) {
        if (q != k || q != v || q != o) {
            throw new InvalidArgumentException("q, k, v, o", "q " + q.label() + ", k " + k.label() + ", v " + v.label()
                    + ", o " + o.label(), "must share one element type (one type per call; this plan's is "
                    + dtype.label() + ")");
        }
        if (q != dtype) {
            throw new InvalidArgumentException("q, k, v, o", q.label(), "this plan was made for " + dtype.label()
                    + " tensors (AttentionShape.dtype)");
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

    /**
     * A compact description such as {@code B=2 Hq=8 Hkv=8 Sq=512 Skv=512 D=64 causal bhsd}, with
     * {@code window=(L,R)}, {@code softcap=C} and {@code sinks} when set.
     */
    @Override
    public String toString() {
        return "B=" + batch + " Hq=" + heads + " Hkv=" + kvHeads + " Sq=" + queryLength + " Skv=" + kvLength
                + " D=" + headDim + (causal ? " causal" : " non-causal") + " " + layout.name().toLowerCase()
                + (scale == defaultScale(headDim) ? "" : " scale=" + scale)
                + (hasWindow() ? " window=(" + windowLeft + "," + windowRight + ")" : "")
                + (hasSoftcap() ? " softcap=" + softcap : "") + (hasSinks() ? " sinks" : "")
                + (dtype == DType.FP16 ? "" : " " + dtype.label());
    }

    /**
     * A builder's sink array as the record holds it: null is none (the empty list); an empty array is refused, as
     * the record's length check then refuses any length but {@code heads}. Shared by every spec that takes sinks.
     */
    static List<Float> sinkList(float[] sinks, int heads) {
        if (sinks == null) {
            return List.of();
        }
        if (sinks.length == 0) { // an empty list is how the record says "none"
            throw new InvalidArgumentException("sinks", "length 0",
                    "must hold one logit per query head: length heads = " + heads + " (or pass null for none)");
        }
        List<Float> list = new ArrayList<>(sinks.length);
        for (float f : sinks) {
            list.add(f);
        }
        return list;
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
        private int windowLeft = -1;
        private int windowRight = -1;
        private float softcap;
        private float[] sinks;
        private DType dtype = DType.FP16;

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

        /**
         * FlashAttention's {@code window_size}: query i sees keys j with
         * {@code i + Skv - Sq - left <= j <= i + Skv - Sq + right}; -1 leaves a side unbounded (default (-1, -1)).
         * With causal, a key must satisfy both.
         */
        public Builder window(int left, int right) {
            this.windowLeft = left;
            this.windowRight = right;
            return this;
        }

        /** Softcap c: a score s becomes c * tanh(s / c) before the softmax; 0 (the default) is off. */
        public Builder softcap(float softcap) {
            this.softcap = softcap;
            return this;
        }

        /**
         * One sink logit per query head (length heads, finite), joining every row's softmax denominator; null
         * (the default) means none. The values are copied.
         */
        public Builder sinks(float[] perQueryHead) {
            this.sinks = perQueryHead == null ? null : perQueryHead.clone();
            return this;
        }

        /** The element type of Q, K, V and O: fp16 (the default) or bf16. */
        public Builder dtype(DType dtype) {
            this.dtype = dtype;
            return this;
        }

        private List<Float> sinkList() {
            return AttentionShape.sinkList(sinks, heads);
        }

        public AttentionShape build() {
            return new AttentionShape(batch, heads, kvHeads == null ? heads : kvHeads, queryLength,
                    kvLength == null ? queryLength : kvLength, headDim, causal,
                    scale == null ? (headDim > 0 ? defaultScale(headDim) : 1f) : scale, layout,
                    windowLeft, windowRight, softcap, sinkList(), dtype);
        }
    }
}
