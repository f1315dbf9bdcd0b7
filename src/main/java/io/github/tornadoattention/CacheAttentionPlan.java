package io.github.tornadoattention;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Attention of each sequence's new tokens over its {@link KvCache}, for one {@link CacheAttentionSpec}
 * (capacities) and one cache layout ({@link KvCacheSpec}): made once, it serves every step and every
 * layer's cache of that spec as lengths change, with no new plan, no allocation and no copy of the
 * cache. Calls are stream ordered (see {@link AttentionDevice}).
 *
 * <p>The queries of a call are the tokens of the cache's last append: query j of slot b is the j-th
 * token appended to b, and it sees key k iff k < length(b) and, when causal,
 * k <= length(b) - newTokens(b) + j (bottom-right), and within the spec's window around that position
 * ({@link CacheAttentionSpec#firstVisibleKey}/{@link CacheAttentionSpec#lastVisibleKey}); the spec's softcap
 * and sinks apply as in dense calls. Rows that see no key get O = 0 and lse = -inf (the sink with sinks);
 * dense rows past a slot's new tokens get O = 0 and lse = -inf.
 */
public abstract class CacheAttentionPlan implements AutoCloseable {
    private static final String DENSE_ROWS = "batch*heads*maxQueryLength";
    private static final String DENSE_ELEMENTS = DENSE_ROWS + "*headDim";
    private static final String PACKED_ROWS = "maxTotalQueries*heads";
    private static final String PACKED_ELEMENTS = PACKED_ROWS + "*headDim";
    private static final AtomicLong CREATED = new AtomicLong();

    private final AttentionDevice device;
    private final CacheAttentionSpec spec;
    private final KvCacheSpec cacheSpec;
    private boolean closed;

    protected CacheAttentionPlan(AttentionDevice device, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        this.device = device;
        this.spec = spec;
        this.cacheSpec = cacheSpec;
        CREATED.incrementAndGet();
    }

    /** Cache plans made in this JVM so far (an engine's decode loop makes none per step). */
    public static long created() {
        return CREATED.get();
    }

    public AttentionDevice device() {
        return device;
    }

    public CacheAttentionSpec spec() {
        return spec;
    }

    public KvCacheSpec cacheSpec() {
        return cacheSpec;
    }

    /**
     * Dense queries (decode, speculative steps): {@code q} and {@code o} [batch, heads, maxQueryLength,
     * headDim] in the spec's layout, {@code lse} [batch, heads, maxQueryLength] fp32 or null.
     */
    public final void forward(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        requireOpen();
        if (spec.maxQueryLength() > CacheAttentionSpec.MAX_DENSE_QUERIES) {
            throw new InvalidArgumentException("maxQueryLength", spec.maxQueryLength(), "dense cache calls take at most "
                    + CacheAttentionSpec.MAX_DENSE_QUERIES + " new tokens per sequence; use forwardPacked");
        }
        checkCache(cache);
        if (cache.maxNewTokens() > spec.maxQueryLength()) {
            throw new InvalidArgumentException("cache.newTokens", cache.maxNewTokens(),
                    "a slot's new tokens must be <= the plan's maxQueryLength " + spec.maxQueryLength());
        }
        checkTensors(q, o, lse, spec.denseQueryElements(), spec.denseLseElements(), DENSE_ROWS);
        runDense(q, cache, o, lse);
    }

    /**
     * Packed queries (varlen prefill): {@code q} and {@code o} [maxTotalQueries, heads, headDim], rows
     * of slot b after those of the slots before it, {@code lse} [heads, maxTotalQueries] fp32 or null.
     */
    public final void forwardPacked(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        requireOpen();
        checkCache(cache);
        if (cache.totalNewTokens() > spec.maxTotalQueries()) {
            throw new InvalidArgumentException("cache.totalNewTokens", cache.totalNewTokens(),
                    "must be <= the plan's maxTotalQueries " + spec.maxTotalQueries());
        }
        checkTensors(q, o, lse, spec.packedQueryElements(), spec.packedLseElements(), PACKED_ROWS);
        runPacked(q, cache, o, lse);
    }

    public final boolean isClosed() {
        return closed;
    }

    @Override
    public final void close() {
        if (!closed) {
            closed = true;
            release();
        }
    }

    protected abstract void runDense(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse);

    protected abstract void runPacked(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse);

    protected void release() {
    }

    private void checkCache(KvCache cache) {
        InvalidArgumentException.requireNonNull("cache", cache);
        if (!cache.isOpen()) {
            throw new InvalidArgumentException("cache", "closed", "must be open");
        }
        if (!device.sameMemory(cache.device())) {
            throw new InvalidArgumentException("cache", "on " + cache.device().name(), "must be on " + device.name());
        }
        if (!cache.spec().equals(cacheSpec)) {
            throw new InvalidArgumentException("cache.spec", cache.spec(), "must equal the plan's " + cacheSpec);
        }
    }

    private void checkTensors(DeviceTensor q, DeviceTensor o, DeviceTensor lse, long elements, long lseElements,
                              String rows) {
        String rowElements = rows.equals(DENSE_ROWS) ? DENSE_ELEMENTS : PACKED_ELEMENTS;   // no string built per call
        InvalidArgumentException.requireNonNull("q", q).require("q", device, spec.dtype(), elements, rowElements);
        InvalidArgumentException.requireNonNull("o", o).require("o", device, spec.dtype(), elements, rowElements);
        if (o == q) {
            throw new InvalidArgumentException("o", "the same tensor as q", "must be a separate tensor");
        }
        if (lse != null) {
            lse.require("lse", device, DType.FP32, lseElements, rows);
        }
    }

    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("this " + device.backendId() + " cache plan is closed");
        }
    }
}
