package io.github.tornadoattention.tornado.inference;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;

import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.HostCacheOps;
import java.lang.foreign.MemorySegment;

/**
 * Row copies between callers' tensors (host memory between calls on a TornadoVM device) and a cache graph's staging
 * arrays, whose dense layout is [slots, heads, S, D] (S staging rows per slot). Pure functions of their arguments.
 */
final class StagingRows {
    private StagingRows() {
    }

    /**
     * Copies dense rows between a caller's tensor ({@code strides}, {@code sq} rows per (slot, head), from row
     * {@code j0}) and staging ({@code rows} per (slot, head)); {@code in}: caller to staging.
     */
    static void copyRows(MemorySegment caller, TensorStrides strides, MemorySegment staged, int slots, int heads,
                         int rows, int sq, int headDim, int j0, boolean in) {
        long rowBytes = 2L * headDim;
        if (sq == rows && strides.equals(new TensorStrides((long) heads * sq * headDim, (long) sq * headDim, headDim))) {
            long bytes = (long) slots * heads * sq * rowBytes;   // the same dense layout: one copy
            if (in) {
                MemorySegment.copy(caller, 0, staged, 0, bytes);
            } else {
                MemorySegment.copy(staged, 0, caller, 0, bytes);
            }
            return;
        }
        for (int b = 0; b < slots; b++) {
            for (int h = 0; h < heads; h++) {
                for (int j = 0; j < sq; j++) {
                    long at = 2 * strides.rowStart(b, h, j0 + j);
                    long st = (((long) b * heads + h) * rows + j) * rowBytes;
                    if (in) {
                        MemorySegment.copy(caller, at, staged, st, rowBytes);
                    } else {
                        MemorySegment.copy(staged, st, caller, at, rowBytes);
                    }
                }
            }
        }
    }

    /**
     * Copies chunk {@code [j0, j0 + rows)} of each slot's new rows of {@code append} (read from {@code srcK},
     * {@code srcV}) into the staging rows; returns the chunk's step words (lengths after the chunk, its counts; no
     * packed offsets).
     */
    static int[] stageAppendChunk(KvCacheSpec spec, int[] step, KvCache.Append append,
                                  MemorySegment srcK, MemorySegment srcV, MemorySegment stageK, MemorySegment stageV,
                                  int rows, int j0) {
        int slots = spec.slots();
        int d = spec.headDim();
        long rowBytes = 2L * d;
        int[] chunk = new int[3 * slots + 1];
        for (int b = 0; b < slots; b++) {
            int n = step[slots + b];
            int c = Math.max(0, Math.min(rows, n - j0));
            chunk[b] = step[b] - n + j0 + c;
            chunk[slots + b] = c;
            for (int h = 0; h < spec.kvHeads(); h++) {
                for (int jj = 0; jj < c; jj++) {
                    long from = 2 * HostCacheOps.sourceRow(append, b, step[2 * slots + b], h, j0 + jj);
                    long to = 2 * ((((long) b * spec.kvHeads() + h) * rows + jj) * d);
                    MemorySegment.copy(srcK, from, stageK, to, rowBytes);
                    MemorySegment.copy(srcV, from, stageV, to, rowBytes);
                }
            }
        }
        return chunk;
    }

    /**
     * Stages chunk {@code [j0, j0 + rows)} of each slot's packed queries (q [total, heads, D], slot b's from its packed
     * offset) as dense rows; returns the chunk's step words for a chunked decode task
     * ({@code CacheAttentionTasks.addChunkedDecode}): per slot the length its queries see (causal: the keys up to its
     * last query of the chunk), its count of queries in the chunk and, in the packed-offset words, how many of its
     * queries come after the chunk (non-causal: the chunk's queries sit that many positions before the slot's end; a
     * causal chunk's length already ends at its last query, so 0).
     */
    static int[] stagePackedQueries(MemorySegment q, MemorySegment staged, int[] step, int slots, int heads, int rows,
                                    int headDim, boolean causal, int j0) {
        long rowBytes = 2L * headDim;
        int[] chunk = new int[3 * slots + 1];
        for (int b = 0; b < slots; b++) {
            int n = step[slots + b];
            int c = Math.max(0, Math.min(rows, n - j0));
            // Causal: query j0 + jj sees keys up to L - n + j0 + jj, i.e. a step of length L - n + j0 + c.
            chunk[b] = causal ? step[b] - n + j0 + c : step[b];
            chunk[slots + b] = c;
            chunk[2 * slots + b] = causal ? 0 : Math.max(0, n - j0 - c);
            for (int h = 0; h < heads; h++) {
                for (int jj = 0; jj < c; jj++) {
                    long packedRow = ((long) step[2 * slots + b] + j0 + jj) * heads + h;
                    MemorySegment.copy(q, packedRow * rowBytes, staged, (((long) b * heads + h) * rows + jj) * rowBytes,
                            rowBytes);
                }
            }
        }
        return chunk;
    }

    /**
     * Copies the outputs of a chunk staged by {@link #stagePackedQueries} ({@code chunk}: its step words) into the
     * packed o [total, heads, D] and, when not null, lse [heads, maxTotal].
     */
    static void unstagePackedOutputs(MemorySegment stagedO, MemorySegment stagedLse, MemorySegment o, MemorySegment lse,
                                     int[] chunk, int[] step, int slots, int heads, int rows, int headDim, int maxTotal,
                                     int j0) {
        long rowBytes = 2L * headDim;
        for (int b = 0; b < slots; b++) {
            for (int h = 0; h < heads; h++) {
                for (int jj = 0; jj < chunk[slots + b]; jj++) {
                    int t = step[2 * slots + b] + j0 + jj;
                    long stagedRow = ((long) b * heads + h) * rows + jj;
                    MemorySegment.copy(stagedO, stagedRow * rowBytes, o, ((long) t * heads + h) * rowBytes, rowBytes);
                    if (lse != null) {
                        lse.setAtIndex(JAVA_FLOAT_UNALIGNED, (long) h * maxTotal + t,
                                stagedLse.getAtIndex(JAVA_FLOAT_UNALIGNED, stagedRow));
                    }
                }
            }
        }
    }

    /** Copies the step's new rows from the host cache (appended there) into the staging rows. */
    static void stageFromCache(KvCacheSpec spec, int[] table, int[] step, MemorySegment keys, MemorySegment values,
                               MemorySegment stageK, MemorySegment stageV, int rows) {
        int slots = spec.slots();
        int d = spec.headDim();
        long rowBytes = 2L * d;
        TensorStrides storage = spec.strides();
        for (int b = 0; b < slots; b++) {
            int n = Math.min(step[slots + b], rows);
            for (int j = 0; j < n; j++) {
                long at = HostCacheOps.storageRow(spec, table, b, step[b] - step[slots + b] + j);
                for (int h = 0; h < spec.kvHeads(); h++) {
                    long from = 2 * (at + h * storage.head());
                    long to = 2 * ((((long) b * spec.kvHeads() + h) * rows + j) * d);
                    MemorySegment.copy(keys, from, stageK, to, rowBytes);
                    MemorySegment.copy(values, from, stageV, to, rowBytes);
                }
            }
        }
    }

    /** The most new tokens of a slot in {@code step} (lengths, then new tokens per slot). */
    static int maxNew(int[] step, int slots) {
        int m = 0;
        for (int b = 0; b < slots; b++) {
            m = Math.max(m, step[slots + b]);
        }
        return m;
    }

    static void write(MemorySegment words, int[] values) {
        MemorySegment.copy(values, 0, words, JAVA_INT_UNALIGNED, 0, values.length);
    }
}
