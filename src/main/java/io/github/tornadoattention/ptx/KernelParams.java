package io.github.tornadoattention.ptx;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.TensorStrides;

/**
 * The {@code params} array every hand-tuned kernel reads (see ptx-overrides/README.md): 32 int32
 * describing the call, so both hosts (ptx-cuda and ptx-tornado) pass the same thing. The indices
 * are {@code ParamIndex} of ptx-overrides/src/flash_params.cuh, name for name (KernelParamsTest
 * reads that header).
 */
public final class KernelParams {
    public static final int P_B = 0;
    public static final int P_HQ = 1;
    public static final int P_HKV = 2;
    public static final int P_SQ = 3;
    public static final int P_SKV = 4;
    public static final int P_D = 5;
    public static final int P_CAUSAL = 6;
    /** Float bits of scale * log2(e). */
    public static final int P_SCALE_LOG2 = 7;
    public static final int P_WRITE_LSE = 8;
    /** Q strides in elements: batch, head, row (this index and the next two); K, V and O likewise. */
    public static final int P_Q_STRIDE = 9;
    public static final int P_K_STRIDE = 12;
    public static final int P_V_STRIDE = 15;
    public static final int P_O_STRIDE = 18;
    /** Decode only. */
    public static final int P_NUM_SPLITS = 21;
    /** Float bits of scale. */
    public static final int P_SCALE = 22;
    /** KV-cache calls: tokens per page (0: a contiguous cache). */
    public static final int P_PAGE_SIZE = 23;
    /** KV-cache calls: the block table's row stride (pages per sequence). */
    public static final int P_PAGES_PER_SEQ = 24;
    /**
     * KV-cache fused decode ({@code flash_cache_decode_fused*_tornado}): keys per split, a multiple of 64
     * (TornadoVM compiles scalar arguments in as constants, so it comes from the params block).
     */
    public static final int P_KEYS_PER_SPLIT = 25;
    /** Window: keys from query position - left; -1 unbounded. */
    public static final int P_WINDOW_LEFT = 26;
    /** Window: keys up to query position + right; -1 unbounded (causal still applies). */
    public static final int P_WINDOW_RIGHT = 27;
    /** Float bits of the softcap c (0: off). */
    public static final int P_SOFTCAP = 28;
    /** 1: words {@code P_COUNT + h} hold the float bits of query head h's sink logit; 0: no sinks. */
    public static final int P_SINKS = 29;
    /** Words before the sinks (the block is {@code P_COUNT + heads} words long when {@code P_SINKS} is 1). */
    public static final int P_COUNT = 32;
    public static final int LENGTH = P_COUNT;
    private static final double LOG2_E = 1.4426950408889634;

    private KernelParams() {
    }

    /**
     * Params for {@code shape}; {@code splits} is the decode split count (0 for prefill). With sinks the block is
     * {@code P_COUNT + heads} words long (the sinks follow the 32 words), else {@link #LENGTH}.
     */
    public static int[] of(AttentionShape shape, int splits) {
        int[] p = new int[shape.hasSinks() ? P_COUNT + shape.heads() : LENGTH];
        p[P_B] = shape.batch();
        p[P_HQ] = shape.heads();
        p[P_HKV] = shape.kvHeads();
        p[P_SQ] = shape.queryLength();
        p[P_SKV] = shape.kvLength();
        p[P_D] = shape.headDim();
        p[P_CAUSAL] = shape.causal() ? 1 : 0;
        p[P_SCALE_LOG2] = Float.floatToRawIntBits((float) (shape.scale() * LOG2_E));
        p[P_WRITE_LSE] = 1; // always write logsumexp: it is tiny, and hosts copy it back only on request
        TensorStrides q = shape.queryStrides();
        TensorStrides kv = shape.kvStrides();
        putStrides(p, P_Q_STRIDE, q);
        putStrides(p, P_K_STRIDE, kv);
        putStrides(p, P_V_STRIDE, kv);
        putStrides(p, P_O_STRIDE, q); // O has Q's shape and layout
        p[P_NUM_SPLITS] = splits;
        p[P_SCALE] = Float.floatToRawIntBits(shape.scale());
        putFeatures(p, shape);
        return p;
    }

    /**
     * Params of the cache kernels (ptx-overrides/src/flash_cache.cu) for attention of {@code spec} over
     * caches of {@code cache}: dense calls (q, o [batch, heads, maxQueryLength, D]) or packed ones
     * ([total, heads, D], lse [heads, maxTotalQueries]). Keys per split 0: the fused TornadoVM twins derive
     * it from the lengths at run time.
     */
    public static int[] forCache(CacheAttentionSpec spec, KvCacheSpec cache, boolean packed) {
        // The features ride along: the kernels apply the window at each sequence's own position.
        AttentionShape shape = packed
                ? new AttentionShape(1, spec.heads(), spec.kvHeads(), spec.maxTotalQueries(), cache.capacity(), spec.headDim(),
                        spec.causal(), spec.scale(), Layout.BSHD, spec.windowLeft(), spec.windowRight(), spec.softcap(),
                        spec.sinks(), spec.dtype())
                : new AttentionShape(spec.batch(), spec.heads(), spec.kvHeads(),
                        Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES), cache.capacity(),
                        spec.headDim(), spec.causal(), spec.scale(), spec.layout(), spec.windowLeft(), spec.windowRight(),
                        spec.softcap(), spec.sinks(), spec.dtype());
        int[] p = of(shape, 0);
        p[P_B] = spec.batch();
        TensorStrides kv = cache.strides();
        putStrides(p, P_K_STRIDE, kv);
        putStrides(p, P_V_STRIDE, kv);
        p[P_PAGE_SIZE] = cache.pageSize();
        p[P_PAGES_PER_SEQ] = cache.pagesPerSequence();
        return p;
    }

    /**
     * Window sides (-1: unbounded), the softcap's float bits (0: off) and the sinks: a flag, then head h's logit
     * bits at {@code P_COUNT + h} (the block must be that long).
     */
    private static void putFeatures(int[] p, AttentionShape shape) {
        p[P_WINDOW_LEFT] = shape.windowLeft();
        p[P_WINDOW_RIGHT] = shape.windowRight();
        p[P_SOFTCAP] = shape.hasSoftcap() ? Float.floatToRawIntBits(shape.softcap()) : 0;
        p[P_SINKS] = shape.hasSinks() ? 1 : 0;
        for (int h = 0; h < shape.sinks().size(); h++) {
            p[P_COUNT + h] = Float.floatToRawIntBits(shape.sinks().get(h));
        }
    }

    /** Writes {@code s} (batch, head, row) at {@code at}, one of the {@code P_*_STRIDE} indices. */
    public static void putStrides(int[] p, int at, TensorStrides s) {
        // Validated shapes keep every tensor under 2^31 elements, so strides fit in int32.
        p[at] = Math.toIntExact(s.batch());
        p[at + 1] = Math.toIntExact(s.head());
        p[at + 2] = Math.toIntExact(s.row());
    }
}
