package io.github.tornadoattention.cpu;

import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;

import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import java.lang.foreign.MemorySegment;

/**
 * A KV cache's storage in host memory: where a token's row lives and the append of new tokens, for
 * devices whose cache is (at times) host memory: the CPU device always, a TornadoVM device before its
 * cache's task graph takes the cache to the GPU.
 */
public final class HostCacheOps {
    private HostCacheOps() {
    }

    /**
     * Writes the new tokens of {@code append} (rows in {@code newKeys}/{@code newValues}) into the storage
     * {@code keys}/{@code values}: token j of slot b to position L_b - n_b + j, with L_b, n_b and the packed
     * offsets read from {@code step} ([3*slots+1] ints) and pages from {@code table} (null: contiguous).
     */
    public static void append(KvCacheSpec spec, MemorySegment step, int[] table, KvCache.Append append,
                              MemorySegment newKeys, MemorySegment newValues, MemorySegment keys, MemorySegment values) {
        int slots = spec.slots();
        long rowBytes = 2L * spec.headDim();
        TensorStrides storage = spec.strides();
        for (int b = 0; b < slots; b++) {
            int length = step.getAtIndex(JAVA_INT_UNALIGNED, b);
            int n = step.getAtIndex(JAVA_INT_UNALIGNED, slots + b);
            int offset = step.getAtIndex(JAVA_INT_UNALIGNED, 2L * slots + b);
            for (int j = 0; j < n; j++) {
                long at = storageRow(spec, table, b, length - n + j);
                for (int h = 0; h < spec.kvHeads(); h++) {
                    long from = sourceRow(append, b, offset, h, j);
                    long to = at + h * storage.head();
                    MemorySegment.copy(newKeys, 2 * from, keys, 2 * to, rowBytes);
                    MemorySegment.copy(newValues, 2 * from, values, 2 * to, rowBytes);
                }
            }
        }
    }

    /** Element index of new token j of slot b, kv head h, in an append's source tensors ({@code offset}: the slot's packed offset). */
    public static long sourceRow(KvCache.Append append, int b, int offset, int h, int j) {
        TensorStrides s = append.strides();
        return append.packed() ? (offset + (long) j) * s.row() + h * s.head() : b * s.batch() + h * s.head() + j * s.row();
    }

    /** Element index of (slot, position, head 0, column 0) in the cache's storage, through {@code table} when paged. */
    public static long storageRow(KvCacheSpec spec, int[] table, int slot, int position) {
        TensorStrides s = spec.strides();
        if (table == null) {
            return slot * s.batch() + position * s.row();
        }
        int page = table[slot * spec.pagesPerSequence() + position / spec.pageSize()];
        return page * s.batch() + (position % spec.pageSize()) * s.row();
    }
}
