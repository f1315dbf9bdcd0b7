package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.DecodeSplitPolicy.Splits;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.LaunchTable;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
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
        checkFeatures(device.backendId(), spec, cacheSpec);
        if ((long) spec.batch() * spec.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) spec.batch() * spec.heads(),
                    "the kernels launch one block row per (sequence, head): at most " + MAX_GRID_YZ);
        }
        // Entries and launch geometry from the kernel manifest (ptx/manifest.tsv), the one launch table; a
        // variant it does not serve (dtype, head dim) is refused here, before anything is allocated.
        KernelVariant variant = variant(spec, cacheSpec);
        KernelManifest manifest = KernelManifest.shipped();
        split = manifest.select(variant.kind(Kind.CACHE_DECODE_SPLIT));
        combine = manifest.select(variant.kind(Kind.CACHE_DECODE_COMBINE));
        prefill = manifest.select(variant.kind(Kind.CACHE_PREFILL));
        splitFunction = device.function(split);
        combineFunction = device.function(combine);
        prefillFunction = device.function(prefill);
        rowBlocks = (spec.groupSize() * Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES)
                + split.rowsPerBlock() - 1) / split.rowsPerBlock();
        DeviceTensor dp = null, pp = null, po = null, pl = null;
        try {
            dp = upload(KernelParams.forCache(spec, cacheSpec, false));
            pp = upload(KernelParams.forCache(spec, cacheSpec, true));
            long partialRows = spec.maxQueryLength() <= CacheAttentionSpec.MAX_DENSE_QUERIES
                    ? (long) DecodeSplitPolicy.maxSplits(spec.maxLength()) * spec.batch() * spec.heads() * spec.maxQueryLength() : 1;
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

    /**
     * Window, softcap and sinks are looked up in the manifest like any variant field, for the decode and the
     * prefill pass: one no entry serves is refused by its name, its value and what the manifest serves.
     */
    static void checkFeatures(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        for (Kind kind : new Kind[] {Kind.CACHE_DECODE_SPLIT, Kind.CACHE_PREFILL}) {
            LaunchTable.requireFeatures(backendId, variant(spec, cacheSpec).kind(kind), spec.features(),
                    spec::featureValue);
        }
    }

    /** The CUDA-driver variant of a cache call of this spec (its kind set per pass). */
    static KernelVariant variant(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return KernelVariant.of(Kind.CACHE_PREFILL, spec.dtype(), spec.headDim()).causal(spec.causal())
                .paged(cacheSpec.paged()).features(LaunchTable.features(spec.features()));
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

    /**
     * Splits from the lengths now, over the slots with queries (idle slots' rows are zeros whatever the
     * grid): {@link DecodeSplitPolicy#forLengths}.
     */
    Splits splits(KvCache cache) {
        long granules = 0;
        int maxLength = 0;
        for (int b = 0; b < spec().batch(); b++) {
            if (cache.newTokens(b) > 0) {
                int length = cache.length(b);
                granules += DecodeSplitPolicy.granules(length);
                maxLength = Math.max(maxLength, length);
            }
        }
        return DecodeSplitPolicy.forLengths(granules, maxLength, (long) spec().kvHeads() * rowBlocks,
                device.context().multiprocessors(), spec().maxLength());
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
