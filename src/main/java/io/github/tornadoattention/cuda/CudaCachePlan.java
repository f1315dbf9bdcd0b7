package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.LaunchTable;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Cache attention on ptx-cuda (kernels in ptx-overrides/src/flash_cache.cu). Made once for
 * capacities: two params blocks (dense and packed calls), the split-KV workspace for the largest
 * split count, argument blocks per launch. A call rewrites only the argument slots (tensor addresses,
 * the split size picked from the cache's current lengths) and enqueues: decode = split pass +
 * combine, packed = one prefill-over-cache launch.
 */
final class CudaCachePlan extends CacheAttentionPlan {
    /** Keys per split come in multiples of this (a multiple of every decode tile's Bc). */
    static final int SPLIT_GRANULE = 256;
    static final int MAX_SPLITS = 128;
    private final KernelManifest.Kernel split;
    private final KernelManifest.Kernel combine;
    private final KernelManifest.Kernel prefill;
    /** CUDA grid y and z are limited to 65535 blocks. */
    private static final int MAX_GRID_YZ = 65535;

    private final CudaDevice device;
    /** Argument blocks and params staging: freed by the collector with the plan (its device buffers are guarded tensors). */
    private final Arena arena = Arena.ofAuto();
    private final DeviceTensor denseParams;
    private final DeviceTensor packedParams;
    private final DeviceTensor partialO;
    private final DeviceTensor partialLse;
    private final int maxSplits;
    private final int rowBlocks;
    private final long splitFunction;
    private final long combineFunction;
    private final long prefillFunction;
    private final KernelArgs splitArgs = new KernelArgs(arena, 9);
    private final KernelArgs combineArgs = new KernelArgs(arena, 6);
    private final KernelArgs prefillArgs = new KernelArgs(arena, 9);

    CudaCachePlan(CudaDevice device, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        super(device, spec, cacheSpec);
        this.device = device;
        int d = spec.headDim();
        if (!LaunchTable.HEAD_DIMS.contains(d)) {
            throw new InvalidArgumentException("headDim", d, "ptx-cuda cache kernels support head dims " + LaunchTable.HEAD_DIMS);
        }
        if (spec.dtype() != io.github.tornadoattention.DType.FP16) {
            throw new InvalidArgumentException("dtype", spec.dtype(), "ptx-cuda ships fp16 kernels only (bf16 is planned)");
        }
        if ((long) spec.batch() * spec.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) spec.batch() * spec.heads(),
                    "the kernels launch one block row per (sequence, head): at most " + MAX_GRID_YZ);
        }
        String paged = cacheSpec.paged() ? "_paged" : "";
        // Entry names and launch geometry from the kernel manifest (ptx/manifest.tsv), the one launch table.
        KernelManifest manifest = KernelManifest.shipped();
        split = manifest.entry("flash_cache_decode_split" + paged + "_d" + d);
        combine = manifest.entry("flash_cache_decode_combine_d" + d);
        prefill = manifest.entry(prefillEntry(d, spec.causal(), cacheSpec.paged()));
        splitFunction = device.function(split.entry());
        combineFunction = device.function(combine.entry());
        prefillFunction = device.function(prefill.entry());
        rowBlocks = (spec.groupSize() * Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES)
                + split.rowsPerBlock() - 1) / split.rowsPerBlock();
        maxSplits = Math.max(1, Math.min(MAX_SPLITS, (spec.maxLength() + SPLIT_GRANULE - 1) / SPLIT_GRANULE));
        DeviceTensor dp = null, pp = null, po = null, pl = null;
        try {
            dp = upload(KernelParams.forCache(spec, cacheSpec, false));
            pp = upload(KernelParams.forCache(spec, cacheSpec, true));
            long partialRows = spec.maxQueryLength() <= CacheAttentionSpec.MAX_DENSE_QUERIES
                    ? (long) maxSplits * spec.batch() * spec.heads() * spec.maxQueryLength() : 1;
            po = device.allocate(io.github.tornadoattention.DType.FP32, partialRows * d);
            pl = device.allocate(io.github.tornadoattention.DType.FP32, partialRows);
        } catch (RuntimeException e) {
            for (DeviceTensor t : new DeviceTensor[] {dp, pp, po, pl}) {
                if (t != null) {
                    t.close();
                }
            }
            throw e;
        }
        denseParams = dp;
        packedParams = pp;
        partialO = po;
        partialLse = pl;
        device.synchronize();
    }

    static String prefillEntry(int d, boolean causal, boolean paged) {
        return "flash_cache_fwd" + (paged ? "_paged" : "") + "_d" + d + (d == 128 && causal ? "_causal" : "");
    }

    private DeviceTensor upload(int[] params) {
        DeviceTensor t = device.allocate(io.github.tornadoattention.DType.INT32, params.length);
        MemorySegment host = arena.allocateFrom(JAVA_INT, params);
        t.copyFrom(host, 0);
        return t;
    }

    @Override
    protected synchronized void runDense(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        Splits splits = splits(cache);
        long step = cache.stepInfo().address();
        long blocks = cache.spec().paged() ? cache.blockTable().address() : 0;
        splitArgs.pointer(0, q.address()).pointer(1, cache.keys().address()).pointer(2, cache.values().address())
                .pointer(3, partialO.address()).pointer(4, partialLse.address()).pointer(5, denseParams.address())
                .pointer(6, step).pointer(7, blocks).integer(8, splits.keysPerSplit());
        device.launch(splitFunction, splits.count(), rowBlocks, spec().batch() * spec().kvHeads(), split.threads(), splitArgs);
        long rows = (long) spec().batch() * spec().heads() * spec().maxQueryLength();
        int rowsPerBlock = combine.rowsPerBlock();
        combineArgs.pointer(0, partialO.address()).pointer(1, partialLse.address()).pointer(2, o.address())
                .pointer(3, lse == null ? 0 : lse.address()).pointer(4, denseParams.address()).integer(5, splits.count());
        device.launch(combineFunction, Math.toIntExact((rows + rowsPerBlock - 1) / rowsPerBlock), 1, 1, combine.threads(),
                combineArgs);
    }

    /** A decode launch's split of the keys: {@code keysPerSplit} keys per block, {@code count} splits (grid x). */
    record Splits(int keysPerSplit, int count) {
    }

    /**
     * Splits from the lengths now, over the slots with queries (idle slots' rows are zeros whatever the
     * grid): enough splits for about four one-warp blocks per SM over all the work, in granules of
     * {@value #SPLIT_GRANULE} keys, at most {@link #maxSplits} per sequence.
     */
    Splits splits(KvCache cache) {
        long granules = 0;
        int maxLength = 0;
        for (int b = 0; b < spec().batch(); b++) {
            if (cache.newTokens(b) > 0) {
                int length = cache.length(b);
                granules += (length + SPLIT_GRANULE - 1) / SPLIT_GRANULE;
                maxLength = Math.max(maxLength, length);
            }
        }
        long blocksPerGranule = (long) spec().kvHeads() * rowBlocks;
        long target = 4L * device.context().multiprocessors();
        long perSplit = Math.max(1, Math.round((double) granules * blocksPerGranule / target));
        long byCap = ((long) maxLength + (long) maxSplits * SPLIT_GRANULE - 1) / ((long) maxSplits * SPLIT_GRANULE);
        int keysPerSplit = Math.toIntExact(Math.max(perSplit, Math.max(1, byCap)) * SPLIT_GRANULE);
        return new Splits(keysPerSplit, Math.max(1, (maxLength + keysPerSplit - 1) / keysPerSplit));
    }

    @Override
    protected synchronized void runPacked(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        int maxNew = cache.maxNewTokens();
        if (maxNew == 0) {
            return;
        }
        long step = cache.stepInfo().address();
        prefillArgs.pointer(0, q.address()).pointer(1, cache.keys().address()).pointer(2, cache.values().address())
                .pointer(3, o.address()).pointer(4, lse == null ? 0 : lse.address()).pointer(5, packedParams.address())
                .pointer(6, step + 4L * 2 * spec().batch()).pointer(7, step)
                .pointer(8, cache.spec().paged() ? cache.blockTable().address() : 0);
        device.launch(prefillFunction, (maxNew + prefill.rowsPerBlock() - 1) / prefill.rowsPerBlock(),
                spec().batch() * spec().heads(), 1, prefill.threads(), prefillArgs);
    }

    @Override
    protected void release() {
        for (DeviceTensor t : new DeviceTensor[] {denseParams, packedParams, partialO, partialLse}) {
            t.close();
        }
    }
}
