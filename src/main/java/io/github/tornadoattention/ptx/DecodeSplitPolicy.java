package io.github.tornadoattention.ptx;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;

/**
 * How split-KV decode (flash-decoding) divides each sequence's keys among blocks: the one policy of every
 * host (ptx-cuda's dense and cache plans, the TornadoVM cache graphs, the engine tasks, the library task) and of
 * the GPU harness ({@code ptx-overrides/harness/split_policy.py} mirrors it; a test compares the two).
 *
 * <p>Decode is bound by memory bandwidth: it needs enough blocks in flight to keep every SM reading, and each
 * split costs a partial (O, lse) write and a share of the combine. So: about {@value #BLOCKS_PER_SM} one-warp
 * blocks per SM over the whole grid, keys per split in multiples of {@value #GRANULE} (a multiple of every
 * decode tile's key block, and long enough that the combine stays cheap), at most {@value #MAX_SPLITS} splits.
 *
 * <p>Three situations, one rule:
 * <ul>
 * <li>{@link #gridSplits}: the grid is fixed when the plan is made (a dense decode shape, or a TornadoVM graph
 *     or CUDA graph whose kernels derive the keys per split from the run-time lengths:
 *     {@link #derivedKeysPerSplit});</li>
 * <li>{@link #fixedForCapacity}: the grid and the keys per split are both fixed (a launch captured with its
 *     arguments, as the library task's): the capacity's split in granules, up to {@value #MAX_SPLITS};</li>
 * <li>{@link #forLengths}: the host picks both per call from the lengths of the sequences with queries
 *     (ptx-cuda's cache plan).</li>
 * </ul>
 *
 * <p>Splits share out the keys the queries can see, {@link #keySpan}: with a window that is its span, not the
 * context (a 4096-key window at a 32K context splits ~4096 keys). The kernels cut the same span: the dense split
 * pass from the visible span and num_splits, the cache split s from span_start + s * keysPerSplit, span_start per
 * sequence.
 */
public final class DecodeSplitPolicy {
    /** Keys per split come in multiples of this. */
    public static final int GRANULE = 256;
    public static final int MAX_SPLITS = 128;
    /** One-warp decode blocks per SM the grid aims for. */
    public static final int BLOCKS_PER_SM = 4;
    /** A cache split pass's span starts at a multiple of this ({@link #cacheSpanStart}). */
    public static final int SPAN_ALIGN = 64;

    private DecodeSplitPolicy() {
    }

    /** A split of the keys: {@code keysPerSplit} keys per block (a multiple of {@value #GRANULE}), {@code count} splits. */
    public record Splits(int keysPerSplit, int count) {
    }

    /**
     * The keys that {@code queries} queries at the end of a sequence of {@code length} keys (positions
     * length - queries .. length - 1) see together: from the first query's first visible key to the last query's
     * last one ({@link AttentionShape#firstVisibleKey(long, int, int)}, {@link AttentionShape#lastVisibleKey(long,
     * int, boolean, int)}). Without a window: {@code length}; with a left side w: min(length, w + queries).
     */
    public static int keySpan(int length, int queries, boolean causal, int windowLeft, int windowRight) {
        if (length <= 0) {
            return 0;
        }
        int first = AttentionShape.firstVisibleKey((long) length - Math.max(1, queries), length, windowLeft);
        int last = AttentionShape.lastVisibleKey(length - 1L, length, causal, windowRight);
        return Math.max(0, Math.min(length, last - first + 1));
    }

    /** The key span of a dense decode shape: its Sq queries over its Skv keys. */
    public static int keySpan(AttentionShape shape) {
        return keySpan(shape.kvLength(), shape.queryLength(), shape.causal(), shape.windowLeft(), shape.windowRight());
    }

    /** The key span of a cache sequence of {@code length} keys with {@code newTokens} queries, under {@code spec}'s window. */
    public static int keySpan(CacheAttentionSpec spec, int length, int newTokens) {
        return keySpan(length, newTokens, spec.causal(), spec.windowLeft(), spec.windowRight());
    }

    /**
     * The keys a cache split pass cuts for a sequence of {@code length} keys with {@code newTokens} queries: from
     * {@link #cacheSpanStart} to the end. The kernels start there, so the host's splits must cover it all (from the
     * first visible key instead, the last up to 63 keys, the new token's own among them, would go unread).
     */
    public static int cacheKeySpan(CacheAttentionSpec spec, int length, int newTokens) {
        return Math.max(0, length - cacheSpanStart(length, newTokens, spec.windowLeft()));
    }

    /**
     * The cache split passes' first key (flash_params.cuh's cache_span_start): the first key the first query sees
     * (window left side; 0 without one), rounded down to a multiple of {@value #SPAN_ALIGN}, every decode tile's key
     * block, so that split s covers [start + s * keysPerSplit, start + (s + 1) * keysPerSplit) in whole tiles.
     */
    public static int cacheSpanStart(int length, int newTokens, int windowLeft) {
        return windowLeft >= 0 ? Math.max(0, length - newTokens - windowLeft) / SPAN_ALIGN * SPAN_ALIGN : 0;
    }

    /**
     * Splits of a grid fixed at plan time over up to {@code keys} keys per sequence, where one split of the
     * whole grid has {@code blocksPerSplit} blocks (sequences x KV heads x row blocks).
     */
    public static int gridSplits(long keys, long blocksPerSplit, int multiprocessors) {
        long wanted = Math.round((double) BLOCKS_PER_SM * multiprocessors / Math.max(1, blocksPerSplit));
        long byLength = Math.ceilDiv(Math.max(0, keys), GRANULE);
        return (int) Math.max(1, Math.min(wanted, Math.min(byLength, MAX_SPLITS)));
    }

    /** The most splits a sequence of up to {@code capacity} keys is ever given. */
    public static int maxSplits(long capacity) {
        return (int) Math.max(1, Math.min(MAX_SPLITS, Math.ceilDiv(Math.max(0, capacity), GRANULE)));
    }

    /** Grid and keys per split both fixed for {@code capacity} keys (launches captured with their arguments). */
    public static Splits fixedForCapacity(int capacity) {
        long granules = Math.max(1, Math.ceilDiv(capacity, GRANULE));
        int keysPerSplit = Math.toIntExact(Math.ceilDiv(granules, maxSplits(capacity)) * GRANULE);
        return new Splits(keysPerSplit, Math.max(1, Math.ceilDiv(capacity, keysPerSplit)));
    }

    /** Granules of a sequence of {@code length} keys (sum them over the sequences with queries for {@link #forLengths}). */
    public static long granules(int length) {
        return Math.ceilDiv(Math.max(0, length), GRANULE);
    }

    /**
     * Splits picked per call: {@code granules} summed over the sequences with queries, the longest of them
     * {@code maxLength}, {@code blocksPerGranule} blocks per granule of keys (KV heads x row blocks), at most
     * {@link #maxSplits}({@code capacity}) splits per sequence.
     */
    public static Splits forLengths(long granules, int maxLength, long blocksPerGranule, int multiprocessors, int capacity) {
        long target = (long) BLOCKS_PER_SM * multiprocessors;
        long perSplit = Math.max(1, Math.round((double) granules * blocksPerGranule / target));
        long byCap = Math.ceilDiv((long) maxLength, (long) maxSplits(capacity) * GRANULE);
        int keysPerSplit = Math.toIntExact(Math.max(perSplit, Math.max(1, byCap)) * GRANULE);
        return new Splits(keysPerSplit, Math.max(1, Math.ceilDiv(maxLength, keysPerSplit)));
    }

    /**
     * The keys per split a kernel with a fixed grid of {@code splits} derives on the device from the longest
     * length of the step (the fused decode twins with params[P_KEYS_PER_SPLIT] = 0): the longest length shared
     * out, rounded up to the kernel's key tile {@code keyTile} (0 when no sequence with a query has a key).
     */
    public static int derivedKeysPerSplit(int maxLength, int splits, int keyTile) {
        return Math.ceilDiv(Math.ceilDiv(maxLength, splits), keyTile) * keyTile;
    }
}
