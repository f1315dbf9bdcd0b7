package io.github.tornadoattention;

import java.util.List;

/**
 * What a {@link CacheAttentionPlan} is made for: capacities, not lengths. {@code batch} sequences
 * (the cache's slots), {@code heads} query heads over {@code kvHeads} K/V heads of {@code headDim},
 * up to {@code maxQueryLength} new tokens per sequence and call, up to {@code maxTotalQueries} new
 * tokens in all in a packed (varlen) call, caches of up to {@code maxLength} tokens. Lengths are
 * run-time data of the cache: one plan serves every step.
 *
 * <p>Dense queries ({@link CacheAttentionPlan#forward}) are [batch, heads, maxQueryLength, headDim]
 * in {@code layout} (decode: {@code maxQueryLength <= }{@value #MAX_DENSE_QUERIES}); packed queries
 * ({@link CacheAttentionPlan#forwardPacked}) are [total, heads, headDim].
 *
 * <p>Window, softcap and sinks are those of {@link AttentionShape} (validated by the same code), taken relative to
 * each sequence's own position: query j of a sequence's n new tokens over its L keys sits at position
 * {@code p = L - n + j} and sees keys k with {@code p - left <= k <= p + right} (-1: unbounded), k < L and, when
 * causal, k <= p ({@link #firstVisibleKey}/{@link #lastVisibleKey}, the dense rule at Sq = n, Skv = L); softcap c
 * turns a score s into c * tanh(s / c); a sink (one logit per query head) joins each row's softmax denominator
 * and the logsumexp, adding no value. A plan per layer type: a local and a global layer take two specs.
 */
public record CacheAttentionSpec(int batch, int heads, int kvHeads, int headDim, int maxQueryLength, int maxTotalQueries,
                                 int maxLength, boolean causal, float scale, Layout layout, DType dtype,
                                 int windowLeft, int windowRight, float softcap, List<Float> sinks) {
    /** Dense query tensors are for decode and speculative steps; longer prompts go packed. */
    public static final int MAX_DENSE_QUERIES = 16;

    public CacheAttentionSpec {
        // The shape check covers positivity, the head ratio, the scale, 32-bit tensor sizes and the features
        // (window sides, softcap, sinks: one per query head), which it also normalises.
        AttentionShape checked = new AttentionShape(batch, heads, kvHeads, maxQueryLength, maxLength, headDim, causal,
                scale, InvalidArgumentException.requireNonNull("layout", layout), windowLeft, windowRight, softcap, sinks);
        softcap = checked.softcap();
        sinks = checked.sinks();
        if (maxTotalQueries < 1 || (long) maxTotalQueries * heads * headDim > AttentionShape.MAX_TENSOR_ELEMENTS) {
            throw new InvalidArgumentException("maxTotalQueries", maxTotalQueries,
                    "must be >= 1 and keep maxTotalQueries*heads*headDim <= " + AttentionShape.MAX_TENSOR_ELEMENTS);
        }
        InvalidArgumentException.requireNonNull("dtype", dtype);
    }

    /** A spec without window, softcap or sinks. */
    public CacheAttentionSpec(int batch, int heads, int kvHeads, int headDim, int maxQueryLength, int maxTotalQueries,
                              int maxLength, boolean causal, float scale, Layout layout, DType dtype) {
        this(batch, heads, kvHeads, headDim, maxQueryLength, maxTotalQueries, maxLength, causal, scale, layout, dtype,
                -1, -1, 0f, List.of());
    }

    public static Builder builder() {
        return new Builder();
    }

    /** A builder holding this spec's values, to derive another (e.g. a prefill spec from a decode one). */
    public Builder toBuilder() {
        return builder().batch(batch).heads(heads).kvHeads(kvHeads).headDim(headDim).maxQueryLength(maxQueryLength)
                .maxTotalQueries(maxTotalQueries).maxLength(maxLength).causal(causal).scale(scale).layout(layout)
                .dtype(dtype).window(windowLeft, windowRight).softcap(softcap).sinks(sinkArray());
    }

    /** This spec's features on a shape of its capacities: the one place that names and shows them. */
    private AttentionShape featureShape() {
        return new AttentionShape(batch, heads, kvHeads, maxQueryLength, maxLength, headDim, causal, scale, layout,
                windowLeft, windowRight, softcap, sinks);
    }

    public boolean hasWindow() {
        return windowLeft >= 0 || windowRight >= 0;
    }

    public boolean hasSoftcap() {
        return softcap > 0f;
    }

    public boolean hasSinks() {
        return !sinks.isEmpty();
    }

    /** The sink logit of query head {@code queryHead}, or -infinity without sinks. */
    public double sink(int queryHead) {
        return sinks.isEmpty() ? Double.NEGATIVE_INFINITY : sinks.get(queryHead);
    }

    /** The sink logits as an array, or null without sinks. */
    public float[] sinkArray() {
        return featureShape().sinkArray();
    }

    /** The features set, by the names their errors use ("window", "softcap", "sinks"); empty when none is. */
    public List<String> features() {
        return featureShape().features();
    }

    /** A feature's value as errors show it, as {@link AttentionShape#featureValue}. */
    public String featureValue(String feature) {
        return featureShape().featureValue(feature);
    }

    /** Throws for the first feature set: for a backend whose cache kernels serve none, naming it and the feature. */
    public void requireNoFeatures(String backendId) {
        AttentionShape.requireNoFeatures(backendId, "cache attention", features(), this::featureValue);
    }

    /**
     * The first key that query {@code j} of a sequence's {@code newTokens} new tokens over its {@code length} keys
     * sees: {@link AttentionShape#firstVisibleKey(long, int, int)} at position {@code length - newTokens + j}.
     */
    public int firstVisibleKey(int length, int newTokens, int j) {
        return AttentionShape.firstVisibleKey((long) length - newTokens + j, length, windowLeft);
    }

    /** The last key that query {@code j} sees (-1: none), as {@link #firstVisibleKey}. */
    public int lastVisibleKey(int length, int newTokens, int j) {
        return AttentionShape.lastVisibleKey((long) length - newTokens + j, length, causal, windowRight);
    }

    /** Elements of a dense query (or output) tensor. */
    public long denseQueryElements() {
        return (long) batch * heads * maxQueryLength * headDim;
    }

    /** Elements of a dense call's logsumexp: [batch, heads, maxQueryLength]. */
    public long denseLseElements() {
        return (long) batch * heads * maxQueryLength;
    }

    /** Elements of a packed query (or output) tensor: [maxTotalQueries, heads, headDim]. */
    public long packedQueryElements() {
        return (long) maxTotalQueries * heads * headDim;
    }

    /** Elements of a packed call's logsumexp: [heads, maxTotalQueries]; query t of head h at h*maxTotalQueries + t. */
    public long packedLseElements() {
        return (long) heads * maxTotalQueries;
    }

    public int groupSize() {
        return heads / kvHeads;
    }

    /** Strides of dense Q and O: [batch, heads, maxQueryLength, headDim] in {@link #layout()}. */
    public TensorStrides denseQueryStrides() {
        return new AttentionShape(batch, heads, kvHeads, maxQueryLength, maxLength, headDim, causal, scale, layout)
                .queryStrides();
    }

    /** Throws unless {@code cache} has the batch, heads, head dim, type and capacity this plan was made for. */
    public void checkCache(KvCacheSpec cache) {
        if (cache.slots() != batch) {
            throw new InvalidArgumentException("cache.slots", cache.slots(), "must equal the plan's batch " + batch);
        }
        if (cache.kvHeads() != kvHeads) {
            throw new InvalidArgumentException("cache.kvHeads", cache.kvHeads(), "must equal the plan's kvHeads " + kvHeads);
        }
        if (cache.headDim() != headDim) {
            throw new InvalidArgumentException("cache.headDim", cache.headDim(), "must equal the plan's headDim " + headDim);
        }
        if (cache.dtype() != dtype) {
            throw new InvalidArgumentException("cache.dtype", cache.dtype(), "must equal the plan's dtype " + dtype);
        }
        if (cache.capacity() > maxLength) {
            throw new InvalidArgumentException("cache.capacity", cache.capacity(),
                    "must be <= the plan's maxLength " + maxLength);
        }
    }

    public static final class Builder {
        private int batch = 1;
        private int heads = 1;
        private Integer kvHeads;
        private int headDim = 128;
        private int maxQueryLength = 1;
        private Integer maxTotalQueries;
        private int maxLength = 4096;
        private boolean causal = true;
        private Float scale;
        private Layout layout = Layout.BHSD;
        private DType dtype = DType.FP16;
        private int windowLeft = -1;
        private int windowRight = -1;
        private float softcap;
        private float[] sinks;

        public Builder batch(int batch) {
            this.batch = batch;
            return this;
        }

        public Builder heads(int heads) {
            this.heads = heads;
            return this;
        }

        public Builder kvHeads(int kvHeads) {
            this.kvHeads = kvHeads;
            return this;
        }

        public Builder headDim(int headDim) {
            this.headDim = headDim;
            return this;
        }

        public Builder maxQueryLength(int maxQueryLength) {
            this.maxQueryLength = maxQueryLength;
            return this;
        }

        public Builder maxTotalQueries(int maxTotalQueries) {
            this.maxTotalQueries = maxTotalQueries;
            return this;
        }

        public Builder maxLength(int maxLength) {
            this.maxLength = maxLength;
            return this;
        }

        public Builder causal(boolean causal) {
            this.causal = causal;
            return this;
        }

        public Builder scale(float scale) {
            this.scale = scale;
            return this;
        }

        public Builder layout(Layout layout) {
            this.layout = layout;
            return this;
        }

        public Builder dtype(DType dtype) {
            this.dtype = dtype;
            return this;
        }

        /** As {@link AttentionShape.Builder#window}, relative to each sequence's own position (default (-1, -1)). */
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

        /** One sink logit per query head (length heads, finite); null (the default) is none. Copied. */
        public Builder sinks(float[] perQueryHead) {
            this.sinks = perQueryHead == null ? null : perQueryHead.clone();
            return this;
        }

        /** The spec; {@code kvHeads} defaults to {@code heads}, {@code maxTotalQueries} to batch*maxQueryLength. */
        public CacheAttentionSpec build() {
            long total = maxTotalQueries != null ? maxTotalQueries : Math.min(Integer.MAX_VALUE, (long) batch * maxQueryLength);
            return new CacheAttentionSpec(batch, heads, kvHeads == null ? heads : kvHeads, headDim, maxQueryLength,
                    (int) total, maxLength, causal, scale == null ? AttentionShape.defaultScale(headDim) : scale, layout, dtype,
                    windowLeft, windowRight, softcap, AttentionShape.sinkList(sinks, heads));
        }
    }
}
