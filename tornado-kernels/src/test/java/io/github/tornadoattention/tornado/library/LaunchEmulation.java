package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.ptx.KernelParams;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * What a library call's launches write, on the CPU: its arrays read as the cache kernels' ABI says
 * (ptx-overrides/src/flash_cache.cu's comment) through the call's params block (q, K, V and O strides, page size,
 * pages per sequence, Sq) and the step words (L_b, n_b, packed offsets), the block table mapping key j of slot b to row
 * j % pageSize of page blockTable[b * pagesPerSequence + j / pageSize]; attention itself is {@link CpuReference#cached}.
 * Decode writes every dense row (rows past n_b: O = 0, lse = -inf); prefill the packed rows of the step's total. Its
 * addressing is written from the ABI alone, not from {@link LibraryGpuCheck}'s, so the check's cases pass against it
 * only if the check lays its arrays out as the kernels read them.
 */
final class LaunchEmulation {
    private LaunchEmulation() {
    }

    static void run(LibraryCall call, Object[] args) {
        if (call.op() == LibraryCall.Op.APPEND_DECODE) {
            append(call, args);
        }
        int[] p = call.params();
        LibraryCall.Positions at = call.positions();
        TornadoNativeArray q = (TornadoNativeArray) args[at.q()], k = (TornadoNativeArray) args[at.keys()];
        TornadoNativeArray v = (TornadoNativeArray) args[at.values()], o = (TornadoNativeArray) args[at.o()];
        IntArray step = (IntArray) args[at.step()];
        IntArray blocks = at.blockTable() >= 0 ? (IntArray) args[at.blockTable()] : null;
        FloatArray lse = at.lse() >= 0 ? (FloatArray) args[at.lse()] : null;
        int batch = p[KernelParams.P_B], heads = p[KernelParams.P_HQ], d = p[KernelParams.P_D], sq = p[KernelParams.P_SQ];
        int pageSize = p[KernelParams.P_PAGE_SIZE], pagesPerSequence = p[KernelParams.P_PAGES_PER_SEQ];
        boolean packed = call.op() == LibraryCall.Op.PREFILL;
        int[] lengths = new int[batch], newTokens = new int[batch];
        for (int b = 0; b < batch; b++) {
            lengths[b] = step.get(b);
            newTokens[b] = step.get(batch + b);
        }
        int total = step.get(3 * batch);
        // The definition on a BHSD (dense) or packed copy of q: rows [Sq] per (slot, head), or [maxTotalQueries = Sq].
        CacheAttentionSpec spec = packed ? call.spec().toBuilder().maxTotalQueries(sq).build()
                : call.spec().toBuilder().maxQueryLength(sq).layout(Layout.BHSD).build();
        int rows = packed ? sq : batch * sq;
        float[] qf = new float[rows * heads * d];
        for (int r = 0; r < rows; r++) {
            for (int h = 0; h < heads; h++) {
                long from = strided(p, KernelParams.P_Q_STRIDE, packed ? 0 : r / sq, h, packed ? r : r % sq);
                int to = packed ? (r * heads + h) * d : (((r / sq) * heads + h) * sq + r % sq) * d;
                for (int x = 0; x < d; x++) {
                    qf[to + x] = LibraryGpuCheck.get(q, (int) (from + x));
                }
            }
        }
        CpuReference.RowSource keys = rows(k, p, KernelParams.P_K_STRIDE, blocks, pageSize, pagesPerSequence);
        CpuReference.RowSource values = rows(v, p, KernelParams.P_V_STRIDE, blocks, pageSize, pagesPerSequence);
        CpuReference.Result ref = CpuReference.cached(spec, qf, packed, keys, values, lengths, newTokens);
        for (int r = 0; r < (packed ? total : rows); r++) {
            for (int h = 0; h < heads; h++) {
                long to = strided(p, KernelParams.P_O_STRIDE, packed ? 0 : r / sq, h, packed ? r : r % sq);
                int from = packed ? (r * heads + h) * d : (((r / sq) * heads + h) * sq + r % sq) * d;
                for (int x = 0; x < d; x++) {
                    LibraryGpuCheck.put(o, (int) (to + x), (float) ref.output()[from + x]);
                }
                if (lse != null) {
                    int i = packed ? h * sq + r : ((r / sq) * heads + h) * sq + r % sq;
                    lse.set(i, (float) ref.logSumExp()[i]);
                }
            }
        }
    }

    /**
     * The append launch as flash_cache.cu's kv_cache_append reads its arguments (k, v, new_k, new_v, lens, block_table,
     * new_offsets, B, Hkv, D, max_new, new strides b/h/r, cache strides b/h/r, page_size, pages_per_seq): the launch
     * made on stand-in pointers (argument i at 16 (i + 1)) tells which array each pointer is; token j < n_b of slot b
     * goes to position L_b - n_b + j.
     */
    private static void append(LibraryCall call, Object[] args) {
        long[] pointers = new long[args.length];
        for (int i = 0; i < pointers.length; i++) {
            pointers[i] = 16L * (i + 1);
        }
        LibraryCall.Launch launch = call.launches(pointers, new LibraryCall.Workspace(0, 0, 0)).get(0);
        long[] a = launch.arguments();
        TornadoNativeArray k = (TornadoNativeArray) args[(int) (a[0] / 16 - 1)];
        TornadoNativeArray v = (TornadoNativeArray) args[(int) (a[1] / 16 - 1)];
        TornadoNativeArray newK = (TornadoNativeArray) args[(int) (a[2] / 16 - 1)];
        TornadoNativeArray newV = (TornadoNativeArray) args[(int) (a[3] / 16 - 1)];
        IntArray lens = (IntArray) args[(int) (a[4] / 16 - 1)];
        IntArray blocks = a[5] == 0 ? null : (IntArray) args[(int) (a[5] / 16 - 1)];
        if (a[6] != 0) {
            throw new IllegalStateException("a dense append-decode passes no packed offsets");
        }
        int batch = (int) a[7], kvHeads = (int) a[8], d = (int) a[9];
        long newSb = a[11], newSh = a[12], newSr = a[13], cacheSb = a[14], cacheSh = a[15], cacheSr = a[16];
        int pageSize = (int) a[17], pagesPerSequence = (int) a[18];
        for (int b = 0; b < batch; b++) {
            int n = lens.get(batch + b);
            for (int h = 0; h < kvHeads; h++) {
                for (int j = 0; j < n; j++) {
                    int pos = lens.get(b) - n + j;
                    long src = b * newSb + h * newSh + j * newSr;
                    long dst = pageSize > 0
                            ? blocks.get(b * pagesPerSequence + pos / pageSize) * cacheSb + h * cacheSh + (pos % pageSize) * cacheSr
                            : b * cacheSb + h * cacheSh + pos * cacheSr;
                    for (int x = 0; x < d; x++) {
                        LibraryGpuCheck.put(k, (int) (dst + x), LibraryGpuCheck.get(newK, (int) (src + x)));
                        LibraryGpuCheck.put(v, (int) (dst + x), LibraryGpuCheck.get(newV, (int) (src + x)));
                    }
                }
            }
        }
    }

    /** Element offset of (batch, head, row) by the strides at params word {@code at}. */
    private static long strided(int[] p, int at, int batch, int head, int row) {
        return (long) batch * p[at] + (long) head * p[at + 1] + (long) row * p[at + 2];
    }

    private static CpuReference.RowSource rows(TornadoNativeArray cache, int[] p, int strides, IntArray blocks, int pageSize,
                                               int pagesPerSequence) {
        return (slot, kvHead, position, into) -> {
            long start = pageSize == 0 ? strided(p, strides, slot, kvHead, position)
                    : strided(p, strides, blocks.get(slot * pagesPerSequence + position / pageSize), kvHead, position % pageSize);
            for (int x = 0; x < into.length; x++) {
                into[x] = LibraryGpuCheck.get(cache, (int) (start + x));
            }
        };
    }
}
