package io.github.tornadoattention;

/**
 * What a {@link KvCache} holds: {@code slots} sequences of up to {@code capacity} tokens, each token
 * {@code kvHeads} rows of {@code headDim} {@code dtype} values for K and for V.
 *
 * <p>{@code pageSize == 0}: contiguous, K and V are [slots, kvHeads, capacity, headDim]. Otherwise
 * paged: a pool of {@code pages} pages [pages, kvHeads, pageSize, headDim] and a block table per
 * slot ({@code pagesPerSequence()} entries) naming the page of each {@code pageSize} tokens.
 */
public record KvCacheSpec(int slots, int kvHeads, int capacity, int headDim, DType dtype, int pageSize, int pages) {
    /** Largest page size accepted (pages are power-of-two sized so kernels find a row with a shift). */
    public static final int MAX_PAGE_SIZE = 1024;

    public KvCacheSpec {
        requirePositive("slots", slots);
        requirePositive("kvHeads", kvHeads);
        requirePositive("capacity", capacity);
        requirePositive("headDim", headDim);
        InvalidArgumentException.requireNonNull("dtype", dtype);
        if (dtype != DType.FP16 && dtype != DType.BF16) {
            throw new InvalidArgumentException("dtype", dtype.label(), "a KV cache holds fp16 or bf16");
        }
        if (pageSize < 0 || pageSize > MAX_PAGE_SIZE || (pageSize & (pageSize - 1)) != 0) {
            throw new InvalidArgumentException("pageSize", pageSize,
                    "must be 0 (contiguous) or a power of two in [1, " + MAX_PAGE_SIZE + "]");
        }
        if (pageSize == 0 && pages != 0) {
            throw new InvalidArgumentException("pages", pages, "must be 0 for a contiguous cache");
        }
        if (pageSize > 0 && pages < 1) {
            throw new InvalidArgumentException("pages", pages, "a paged cache needs >= 1 page");
        }
        long rows = pageSize == 0 ? (long) slots * capacity : (long) pages * pageSize;
        if (rows * kvHeads * headDim > AttentionShape.MAX_TENSOR_ELEMENTS) {
            throw new InvalidArgumentException(pageSize == 0 ? "slots*kvHeads*capacity*headDim" : "pages*kvHeads*pageSize*headDim",
                    rows * kvHeads * headDim, "kernels index K and V with 32-bit offsets: at most "
                            + AttentionShape.MAX_TENSOR_ELEMENTS + " elements");
        }
    }

    /** A contiguous fp16 cache. */
    public static KvCacheSpec contiguous(int slots, int kvHeads, int capacity, int headDim) {
        return new KvCacheSpec(slots, kvHeads, capacity, headDim, DType.FP16, 0, 0);
    }

    /** The same cache holding {@code dtype} elements (fp16, the default, or bf16: the plan's element type). */
    public KvCacheSpec withDtype(DType dtype) {
        return new KvCacheSpec(slots, kvHeads, capacity, headDim, dtype, pageSize, pages);
    }

    /** A paged fp16 cache with enough pages for every slot to reach {@code capacity}. */
    public static KvCacheSpec paged(int slots, int kvHeads, int capacity, int headDim, int pageSize) {
        if (pageSize <= 0) {
            throw new InvalidArgumentException("pageSize", pageSize, "a paged cache needs a page size >= 1");
        }
        int perSequence = (capacity + pageSize - 1) / pageSize;
        return new KvCacheSpec(slots, kvHeads, capacity, headDim, DType.FP16, pageSize, Math.multiplyExact(slots, perSequence));
    }

    /** The same cache with a pool of {@code pages} pages (fewer than every slot at capacity: pages are shared on demand). */
    public KvCacheSpec withPages(int pages) {
        return new KvCacheSpec(slots, kvHeads, capacity, headDim, dtype, pageSize, pages);
    }

    public boolean paged() {
        return pageSize > 0;
    }

    /** Block-table entries per slot: ceil(capacity / pageSize); 0 when contiguous. */
    public int pagesPerSequence() {
        return paged() ? (capacity + pageSize - 1) / pageSize : 0;
    }

    /** Elements of the K (or V) storage. */
    public long elements() {
        return paged() ? (long) pages * kvHeads * pageSize * headDim : (long) slots * kvHeads * capacity * headDim;
    }

    /** Element strides of the storage: [slots or pages, kvHeads, tokens, headDim]. */
    public TensorStrides strides() {
        long rows = paged() ? pageSize : capacity;
        return new TensorStrides((long) kvHeads * rows * headDim, rows * headDim, headDim);
    }

    private static void requirePositive(String argument, int value) {
        if (value < 1) {
            throw new InvalidArgumentException(argument, value, "must be >= 1");
        }
    }
}
