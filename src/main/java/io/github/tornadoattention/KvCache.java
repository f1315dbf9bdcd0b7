package io.github.tornadoattention;

import java.util.Arrays;

/**
 * A device-resident KV cache for one layer: {@link KvCacheSpec#slots()} sequences, each with a
 * length kept on the device (and mirrored here, so bad input is refused before anything is
 * enqueued). Made by {@link AttentionDevice#kvCache}.
 *
 * <p>{@link #append} writes only the new tokens' K and V, any number per sequence (ragged), from
 * device or host tensors; the tokens of the last append are the queries of the next
 * {@link CacheAttentionPlan} call (query j of slot b sees keys k <= length(b) - newTokens(b) + j
 * when causal). {@link #truncate} and {@link #reset} roll sequences back (speculative decoding,
 * beam search). A paged cache takes pages from a free list as sequences grow, returns them when
 * they shrink, and lets sequences share prefix pages ({@link #sharePrefix}; a shared page is
 * copied before a sequence writes into it).
 *
 * <p>Every method checks all its arguments first: a refused call changes nothing, here or on the
 * device. Not thread safe: one engine thread drives a cache.
 */
public final class KvCache implements AutoCloseable {
    /**
     * What a backend writes for an append: token j (< newTokens(b)) of slot b goes to position
     * length(b) - newTokens(b) + j. Dense: its row in {@code keys}/{@code values} is
     * b*strides.batch + h*strides.head + j*strides.row; packed: (offset(b) + j)*strides.row + h*strides.head.
     */
    public record Append(DeviceTensor keys, DeviceTensor values, int maxNew, TensorStrides strides, boolean packed) {
    }

    private final AttentionDevice device;
    private final KvCacheSpec spec;
    private final DeviceTensor keys;
    private final DeviceTensor values;
    /** [3*slots + 1] ints: lengths, new tokens, then the prefix sums of new tokens (packed offsets). */
    private final DeviceTensor stepInfo;
    private final DeviceTensor blockTable;
    private final int[] step;
    private final int slots;
    private final int[][] table;
    private final int[] pageRefs;
    private final int[] freePages;
    private int freeCount;
    private DeviceTensor stagingKeys;
    private DeviceTensor stagingValues;
    private boolean closed;

    KvCache(AttentionDevice device, KvCacheSpec spec) {
        this.device = device;
        this.spec = spec;
        this.slots = spec.slots();
        this.step = new int[stepInfoLength(spec)];
        // On a TornadoVM device the arrays are host memory too (the JVM's direct memory): refused with the cache's
        // numbers, up front or when an allocation fails, with nothing left allocated.
        DeviceTensor[] storage = DirectMemory.allocate("spec", describe(spec), "a KV cache on " + device.backendId(),
                device.directBytes(spec), () -> allocateStorage(device, spec));
        keys = storage[0];
        values = storage[1];
        stepInfo = storage[2];
        blockTable = storage[3];
        if (spec.paged()) {
            table = new int[slots][spec.pagesPerSequence()];
            for (int[] row : table) {
                Arrays.fill(row, -1);
            }
            pageRefs = new int[spec.pages()];
            freePages = new int[spec.pages()];
            for (int p = 0; p < spec.pages(); p++) {
                freePages[p] = spec.pages() - 1 - p; // pops page 0 first
            }
            freeCount = spec.pages();
            int[] zeros = new int[slots * spec.pagesPerSequence()];
            device.uploadInts(blockTable.address(), zeros, 0, zeros.length);
        } else {
            table = null;
            pageRefs = null;
            freePages = null;
        }
        uploadStep();
    }

    /** K, V, the step info and (paged) the block table; on failure none stays allocated. */
    private static DeviceTensor[] allocateStorage(AttentionDevice device, KvCacheSpec spec) {
        DeviceTensor[] storage = new DeviceTensor[4];
        try {
            storage[0] = device.allocateUnchecked(spec.dtype(), spec.elements());
            storage[1] = device.allocateUnchecked(spec.dtype(), spec.elements());
            storage[2] = device.allocateUnchecked(DType.INT32, stepInfoLength(spec));
            if (spec.paged()) {
                storage[3] = device.allocateUnchecked(DType.INT32, blockTableLength(spec));
            }
        } catch (RuntimeException | OutOfMemoryError e) {
            for (DeviceTensor t : storage) {
                if (t != null) {
                    t.close();
                }
            }
            throw e;
        }
        return storage;
    }

    /** Ints of the step info: lengths, new tokens, then the prefix sums of new tokens. */
    static int stepInfoLength(KvCacheSpec spec) {
        return 3 * spec.slots() + 1;
    }

    /** Ints of a paged cache's block table. */
    static long blockTableLength(KvCacheSpec spec) {
        return (long) spec.slots() * spec.pagesPerSequence();
    }

    /** The cache as the API names it, for an error. */
    private static String describe(KvCacheSpec spec) {
        return "slots " + spec.slots() + ", kvHeads " + spec.kvHeads() + ", capacity " + spec.capacity() + ", headDim "
                + spec.headDim() + ", dtype " + spec.dtype().label()
                + (spec.paged() ? ", pageSize " + spec.pageSize() + ", pages " + spec.pages() : "");
    }

    public KvCacheSpec spec() {
        return spec;
    }

    public AttentionDevice device() {
        return device;
    }

    /** Tokens held by {@code slot}. */
    public int length(int slot) {
        return step[checkSlot("slot", slot)];
    }

    /** Tokens of {@code slot} added by the last append (0 after a truncate or reset of it). */
    public int newTokens(int slot) {
        return step[slots + checkSlot("slot", slot)];
    }

    /** Sum of {@link #newTokens}: the rows of a packed query tensor for the next call. */
    public int totalNewTokens() {
        return step[3 * slots];
    }

    /** The largest {@link #newTokens} over the slots. */
    public int maxNewTokens() {
        int max = 0;
        for (int b = 0; b < slots; b++) {
            max = Math.max(max, step[slots + b]);
        }
        return max;
    }

    /** Pages not held by any sequence (0 for a contiguous cache). */
    public int freePages() {
        return freeCount;
    }

    /** The pages {@code slot} holds, in token order (empty for a contiguous cache). */
    public int[] pages(int slot) {
        checkSlot("slot", slot);
        if (!spec.paged()) {
            return new int[0];
        }
        return Arrays.copyOf(table[slot], pagesFor(step[slot]));
    }

    /**
     * Appends {@code newTokens[b]} tokens to slot b from dense device tensors [slots, kvHeads, maxNew,
     * headDim] in {@code layout} (BSHD: [slots, maxNew, kvHeads, headDim]); rows past a slot's count
     * are ignored.
     */
    public void append(DeviceTensor newKeys, DeviceTensor newValues, Layout layout, int maxNew, int... newTokens) {
        requireOpen();
        InvalidArgumentException.requireNonNull("layout", layout);
        if (maxNew < 1) {
            throw new InvalidArgumentException("maxNew", maxNew, "must be >= 1");
        }
        long elements = (long) slots * spec.kvHeads() * maxNew * spec.headDim();
        newKeys = InvalidArgumentException.requireNonNull("newKeys", newKeys);
        newKeys.require("newKeys", device, spec.dtype(), elements, "slots*kvHeads*maxNew*headDim");
        InvalidArgumentException.requireNonNull("newValues", newValues)
                .require("newValues", device, spec.dtype(), elements, "slots*kvHeads*maxNew*headDim");
        int[] counts = checkCounts(newTokens, maxNew);
        long d = spec.headDim();
        TensorStrides strides = layout == Layout.BHSD
                ? new TensorStrides(spec.kvHeads() * maxNew * d, maxNew * d, d)
                : new TensorStrides(maxNew * spec.kvHeads() * d, d, spec.kvHeads() * d);
        commit(counts, new Append(newKeys, newValues, maxNew, strides, false));
    }

    /** {@link #append(DeviceTensor, DeviceTensor, Layout, int, int...)} from host tensors (copied first). */
    public void append(HalfTensor newKeys, HalfTensor newValues, Layout layout, int maxNew, int... newTokens) {
        requireOpen();
        long elements = (long) slots * spec.kvHeads() * Math.max(1, maxNew) * spec.headDim();
        checkHost("newKeys", newKeys, elements);
        checkHost("newValues", newValues, elements);
        checkCounts(newTokens, Math.max(1, maxNew));
        stage(newKeys, newValues, elements);
        append(stagingKeys, stagingValues, layout, maxNew, newTokens);
    }

    /**
     * Appends packed tokens (varlen): {@code newKeys}/{@code newValues} hold [total, kvHeads, headDim]
     * rows, slot b's {@code newTokens[b]} tokens after those of the slots before it. The tensors may be
     * longer than needed (allocated for a capacity).
     */
    public void appendPacked(DeviceTensor newKeys, DeviceTensor newValues, int... newTokens) {
        requireOpen();
        int[] counts = checkCounts(newTokens, Integer.MAX_VALUE);
        long total = sum(counts);
        long rowElements = (long) spec.kvHeads() * spec.headDim();
        for (DeviceTensor t : new DeviceTensor[] {newKeys, newValues}) {
            String name = t == newKeys ? "newKeys" : "newValues";
            InvalidArgumentException.requireNonNull(name, t).requireOpen(name);
            device.requireSame(name, t);
            if (t.dtype() != spec.dtype()) {
                throw new InvalidArgumentException(name + ".dtype", t.dtype(), "must be " + spec.dtype());
            }
            if (t.length() < total * rowElements) {
                throw new InvalidArgumentException(name + ".length", t.length(),
                        "must hold the " + total + " new tokens: >= total*kvHeads*headDim = " + total * rowElements);
            }
        }
        if (total == 0) {
            commit(counts, null);
            return;
        }
        long d = spec.headDim();
        commit(counts, new Append(newKeys, newValues, Math.max(1, max(counts)), new TensorStrides(0, d, rowElements), true));
    }

    /** {@link #appendPacked(DeviceTensor, DeviceTensor, int...)} from host tensors of exactly total*kvHeads*headDim values. */
    public void appendPacked(HalfTensor newKeys, HalfTensor newValues, int... newTokens) {
        requireOpen();
        int[] counts = checkCounts(newTokens, Integer.MAX_VALUE);
        long total = sum(counts);
        long elements = Math.max(1, total) * spec.kvHeads() * spec.headDim();
        if (total == 0) {
            commit(counts, null);
            return;
        }
        checkHost("newKeys", newKeys, elements);
        checkHost("newValues", newValues, elements);
        stage(newKeys, newValues, elements);
        appendPacked(stagingKeys, stagingValues, newTokens);
    }

    /** Rolls {@code slot} back to its first {@code length} tokens (a paged cache frees the pages past them). */
    public void truncate(int slot, int length) {
        requireOpen();
        checkSlot("slot", slot);
        if (length < 0 || length > step[slot]) {
            throw new InvalidArgumentException("length", length, "must be in [0, " + step[slot] + "] (slot " + slot
                    + "'s current length)");
        }
        if (spec.paged()) {
            int keep = pagesFor(length);
            for (int i = keep; i < pagesFor(step[slot]); i++) {
                release(table[slot][i]);
                table[slot][i] = -1;
            }
        }
        step[slot] = length;
        step[slots + slot] = 0;
        uploadStep();
    }

    /** Empties {@code slot}. */
    public void reset(int slot) {
        truncate(slot, 0);
    }

    /** Empties every slot. */
    public void resetAll() {
        for (int b = 0; b < slots; b++) {
            truncate(b, 0);
        }
    }

    /**
     * Starts the empty slot {@code to} with the first {@code tokens} tokens of slot {@code from}: a
     * paged cache shares their whole pages (and copies the partial last one), a contiguous one copies.
     */
    public void sharePrefix(int from, int to, int tokens) {
        requireOpen();
        checkSlot("from", from);
        checkSlot("to", to);
        if (from == to) {
            throw new InvalidArgumentException("to", to, "must differ from from");
        }
        if (step[to] != 0) {
            throw new InvalidArgumentException("to", to, "must be an empty slot (it holds " + step[to] + " tokens; reset it)");
        }
        if (tokens < 0 || tokens > step[from]) {
            throw new InvalidArgumentException("tokens", tokens, "must be in [0, " + step[from] + "] (slot " + from + "'s length)");
        }
        int d = spec.headDim();
        int bytes = spec.dtype().bytes();
        TensorStrides s = spec.strides();
        if (spec.paged()) {
            int full = tokens / spec.pageSize();
            boolean partial = tokens % spec.pageSize() != 0;
            if (partial && freeCount < 1) {
                throw new InvalidArgumentException("tokens", tokens, "sharing a partial page needs 1 free page; the pool has none");
            }
            for (int i = 0; i < full; i++) {
                table[to][i] = table[from][i];
                pageRefs[table[from][i]]++;
            }
            if (partial) {
                int page = takePage();
                copyPage(table[from][full], page);
                table[to][full] = page;
            }
            uploadTable(to, 0, pagesFor(tokens));
        } else if (tokens > 0) {
            for (int h = 0; h < spec.kvHeads(); h++) {
                long src = (from * s.batch() + h * s.head()) * bytes;
                long dst = (to * s.batch() + h * s.head()) * bytes;
                device.copyOnDevice(keys.address() + dst, keys.address() + src, (long) tokens * d * bytes);
                device.copyOnDevice(values.address() + dst, values.address() + src, (long) tokens * d * bytes);
            }
        }
        step[to] = tokens;
        step[slots + to] = 0;
        uploadStep();
    }

    /**
     * For engines that manage pages themselves: gives the empty slot {@code slot} the pages
     * {@code pageIds} (in token order) holding {@code length} tokens already written. Each id must
     * be in the pool and appear once; pages may be shared with other slots.
     */
    public void usePages(int slot, int[] pageIds, int length) {
        requireOpen();
        checkSlot("slot", slot);
        if (!spec.paged()) {
            throw new InvalidArgumentException("pageIds", "given", "only a paged cache has pages");
        }
        InvalidArgumentException.requireNonNull("pageIds", pageIds);
        if (step[slot] != 0) {
            throw new InvalidArgumentException("slot", slot, "must be empty (it holds " + step[slot] + " tokens; reset it)");
        }
        if (length < 0 || length > spec.capacity() || pagesFor(length) != pageIds.length) {
            throw new InvalidArgumentException("length", length, "must be in [0, " + spec.capacity() + "] and fill the "
                    + pageIds.length + " pages given: ceil(length/" + spec.pageSize() + ") == pageIds.length");
        }
        boolean[] seen = new boolean[spec.pages()];
        for (int i = 0; i < pageIds.length; i++) {
            int p = pageIds[i];
            if (p < 0 || p >= spec.pages()) {
                throw new InvalidArgumentException("pageIds[" + i + "]", p, "must be a page of the pool: [0, " + spec.pages() + ")");
            }
            if (seen[p]) {
                throw new InvalidArgumentException("pageIds[" + i + "]", p, "appears twice in one sequence");
            }
            seen[p] = true;
        }
        for (int i = 0; i < pageIds.length; i++) {
            int p = pageIds[i];
            if (pageRefs[p] == 0) {
                removeFree(p);
            }
            pageRefs[p]++;
            table[slot][i] = p;
        }
        uploadTable(slot, 0, pageIds.length);
        step[slot] = length;
        step[slots + slot] = 0;
        uploadStep();
    }

    // ---- for backends

    /** K storage: [slots, kvHeads, capacity, headDim] or the page pool [pages, kvHeads, pageSize, headDim]. */
    public DeviceTensor keys() {
        requireOpen();
        return keys;
    }

    public DeviceTensor values() {
        requireOpen();
        return values;
    }

    /** [3*slots + 1] ints on the device: lengths, new tokens, packed offsets (prefix sums of new tokens). */
    public DeviceTensor stepInfo() {
        requireOpen();
        return stepInfo;
    }

    /** [slots, pagesPerSequence] page ids on the device; null for a contiguous cache. */
    public DeviceTensor blockTable() {
        requireOpen();
        return blockTable;
    }

    public boolean isOpen() {
        return !closed;
    }

    /** Frees the cache's device memory. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            for (DeviceTensor t : new DeviceTensor[] {keys, values, stepInfo, blockTable, stagingKeys, stagingValues}) {
                if (t != null) {
                    t.close();
                }
            }
        }
    }

    // ---- internals

    private void commit(int[] counts, Append append) {
        int needed = 0;
        if (spec.paged()) {
            for (int b = 0; b < slots; b++) {
                if (counts[b] > 0) {
                    needed += pagesFor(step[b] + counts[b]) - pagesFor(step[b]) + (needsCopyOnWrite(b) ? 1 : 0);
                }
            }
            if (needed > freeCount) {
                throw new InvalidArgumentException("newTokens", Arrays.toString(counts),
                        "need " + needed + " new pages; the pool has " + freeCount + " free of " + spec.pages());
            }
            for (int b = 0; b < slots; b++) {
                if (counts[b] == 0) {
                    continue;
                }
                int first = pagesFor(step[b]);
                int from = first;
                if (needsCopyOnWrite(b)) {
                    int shared = table[b][first - 1];
                    int page = takePage();
                    copyPage(shared, page);
                    release(shared);
                    table[b][first - 1] = page;
                    from = first - 1;
                }
                int last = pagesFor(step[b] + counts[b]);
                for (int i = first; i < last; i++) {
                    table[b][i] = takePage();
                }
                if (last > from) {
                    uploadTable(b, from, last - from);
                }
            }
        }
        for (int b = 0; b < slots; b++) {
            step[b] += counts[b];
            step[slots + b] = counts[b];
        }
        uploadStep();
        if (append != null) {
            device.appendToCache(this, append);
        }
    }

    /** Whether slot b's next token lands in a page another sequence also holds. */
    private boolean needsCopyOnWrite(int b) {
        int length = step[b];
        return length % spec.pageSize() != 0 && pageRefs[table[b][length / spec.pageSize()]] > 1;
    }

    private void uploadStep() {
        int offset = 0;
        for (int b = 0; b < slots; b++) {
            step[2 * slots + b] = offset;
            offset += step[slots + b];
        }
        step[3 * slots] = offset;
        device.uploadInts(stepInfo.address(), step, 0, step.length);
    }

    private void uploadTable(int slot, int from, int count) {
        long at = blockTable.address() + 4L * ((long) slot * spec.pagesPerSequence() + from);
        device.uploadInts(at, table[slot], from, count);
    }

    private void copyPage(int from, int to) {
        long pageBytes = spec.strides().batch() * spec.dtype().bytes();
        device.copyOnDevice(keys.address() + to * pageBytes, keys.address() + from * pageBytes, pageBytes);
        device.copyOnDevice(values.address() + to * pageBytes, values.address() + from * pageBytes, pageBytes);
    }

    private int takePage() {
        int page = freePages[--freeCount];
        pageRefs[page] = 1;
        return page;
    }

    private void release(int page) {
        if (--pageRefs[page] == 0) {
            freePages[freeCount++] = page;
        }
    }

    private void removeFree(int page) {
        for (int i = 0; i < freeCount; i++) {
            if (freePages[i] == page) {
                freePages[i] = freePages[--freeCount];
                return;
            }
        }
    }

    private int pagesFor(int tokens) {
        return (tokens + spec.pageSize() - 1) / spec.pageSize();
    }

    private int[] checkCounts(int[] newTokens, int maxNew) {
        InvalidArgumentException.requireNonNull("newTokens", newTokens);
        if (newTokens.length != slots) {
            throw new InvalidArgumentException("newTokens.length", newTokens.length, "must equal the cache's slots " + slots);
        }
        for (int b = 0; b < slots; b++) {
            int n = newTokens[b];
            if (n < 0 || n > maxNew) {
                throw new InvalidArgumentException("newTokens[" + b + "]", n, "must be in [0, " + Math.min(maxNew, spec.capacity()) + "]");
            }
            if ((long) step[b] + n > spec.capacity()) {
                throw new InvalidArgumentException("newTokens[" + b + "]", n, "slot " + b + " holds " + step[b]
                        + " of " + spec.capacity() + " tokens: at most " + (spec.capacity() - step[b]) + " more fit");
            }
        }
        return newTokens.clone();
    }

    private void checkHost(String name, HalfTensor t, long elements) {
        InvalidArgumentException.requireNonNull(name, t);
        if (!t.isOpen()) {
            throw new InvalidArgumentException(name, "a closed HalfTensor", "must be open");
        }
        if (t.length() != elements) {
            throw new InvalidArgumentException(name + ".length", t.length(), "must equal " + elements);
        }
    }

    /**
     * Copies host tensors into staging device tensors, reallocated when the size changes (a dense append
     * takes tensors of exactly its size): host appends of one size allocate once.
     */
    private void stage(HalfTensor k, HalfTensor v, long elements) {
        if (stagingKeys == null || stagingKeys.length() != elements) {
            if (stagingKeys != null) {
                stagingKeys.close();
                stagingValues.close();
            }
            stagingKeys = device.allocate(spec.dtype(), elements);
            stagingValues = device.allocate(spec.dtype(), elements);
        }
        stagingKeys.copyFrom(k);
        stagingValues.copyFrom(v);
    }

    private int checkSlot(String name, int slot) {
        if (slot < 0 || slot >= slots) {
            throw new InvalidArgumentException(name, slot, "must be a slot in [0, " + slots + ")");
        }
        return slot;
    }

    /**
     * Throws unless the cache and all of its storage are open. A caller may close a tensor the
     * accessors hand out ({@link #keys()} and the others): every method checks that here, before it
     * changes a length or a page, so such a call is refused with nothing changed.
     */
    private void requireOpen() {
        if (closed) {
            throw new InvalidArgumentException("cache", "closed", "must be open");
        }
        String[] names = {"keys", "values", "stepInfo", "blockTable"};
        DeviceTensor[] storage = {keys, values, stepInfo, blockTable};
        for (int i = 0; i < storage.length; i++) {
            if (storage[i] != null && !storage[i].isOpen()) {
                throw new InvalidArgumentException("cache." + names[i] + "()", storage[i],
                        "must be open: the cache owns its storage (close the cache, not its tensors)");
            }
        }
    }

    private static long sum(int[] values) {
        long total = 0;
        for (int v : values) {
            total += v;
        }
        return total;
    }

    private static int max(int[] values) {
        int m = 0;
        for (int v : values) {
            m = Math.max(m, v);
        }
        return m;
    }
}
