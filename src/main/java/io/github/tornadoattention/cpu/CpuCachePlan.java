package io.github.tornadoattention.cpu;

import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED;

import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import java.lang.foreign.MemorySegment;

/** The oracle over a cache's device state: lengths and new tokens from its step info, rows through its block table. */
final class CpuCachePlan extends CacheAttentionPlan {
    private final CpuDevice device;

    CpuCachePlan(CpuDevice device, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        super(device, spec, cacheSpec);
        this.device = device;
    }

    @Override
    protected void runDense(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        run(q, cache, o, lse, false);
    }

    @Override
    protected void runPacked(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        run(q, cache, o, lse, true);
    }

    private void run(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse, boolean packed) {
        int slots = cache.spec().slots();
        MemorySegment step = device.tensor(cache.stepInfo());
        int[] lengths = new int[slots];
        int[] newTokens = new int[slots];
        for (int b = 0; b < slots; b++) {
            lengths[b] = step.getAtIndex(JAVA_INT_UNALIGNED, b);
            newTokens[b] = step.getAtIndex(JAVA_INT_UNALIGNED, slots + b);
        }
        MemorySegment keys = device.tensor(cache.keys());
        MemorySegment values = device.tensor(cache.values());
        long head = cache.spec().strides().head();
        KvCacheSpec spec = cache.spec();
        int[] table = device.blockTable(cache);
        DType type = spec.dtype();   // the cache's element type, fp16 or bf16 (the plan's: checked when it was made)
        CpuReference.RowSource k = (b, h, j, into) -> readRow(type, keys, HostCacheOps.storageRow(spec, table, b, j) + h * head, into);
        CpuReference.RowSource v = (b, h, j, into) -> readRow(type, values, HostCacheOps.storageRow(spec, table, b, j) + h * head, into);
        CpuReference.Result r = CpuReference.cached(spec(), device.floats16(q), packed, k, v, lengths, newTokens);
        if (packed) {
            // Rows past this call's total stay as they were, as on a GPU.
            int total = step.getAtIndex(JAVA_INT_UNALIGNED, 3L * slots);
            int rowElements = spec().heads() * spec().headDim();
            MemorySegment out = device.tensor(o);
            for (int i = 0; i < total * rowElements; i++) {
                out.setAtIndex(JAVA_SHORT_UNALIGNED, i, o.dtype().fromDouble(r.output()[i]));
            }
            if (lse != null) {
                MemorySegment l = device.tensor(lse);
                for (int h = 0; h < spec().heads(); h++) {
                    for (int t = 0; t < total; t++) {
                        int at = h * spec().maxTotalQueries() + t;
                        l.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, at, (float) r.logSumExp()[at]);
                    }
                }
            }
        } else {
            device.writeHalves(o, r.output());
            if (lse != null) {
                device.writeFloats(lse, r.logSumExp());
            }
        }
    }

    private static void readRow(DType type, MemorySegment m, long at, float[] into) {
        for (int c = 0; c < into.length; c++) {
            into[c] = type.toFloat(m.getAtIndex(JAVA_SHORT_UNALIGNED, at + c));
        }
    }
}
