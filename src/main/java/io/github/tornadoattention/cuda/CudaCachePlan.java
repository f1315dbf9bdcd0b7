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
    /** The non-causal tile, for packed steps a wide window bands (LaunchTable.tileCausal); else {@link #prefill}. */
    private final KernelManifest.Kernel prefillBanded;
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
    private final long prefillBandedFunction;
    private final KernelArgs splitArgs = new KernelArgs(arena, 9);
    private final KernelArgs combineArgs = new KernelArgs(arena, 6);
    private final KernelArgs prefillArgs = new KernelArgs(arena, 9);

    CudaCachePlan(CudaDevice device, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        super(device, spec, cacheSpec);
        this.device = device;
        int d = spec.headDim();
        if ((long) spec.batch() * spec.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) spec.batch() * spec.heads(),
                    "the kernels launch one block row per (sequence, head): at most " + MAX_GRID_YZ);
        }
        // Entries and launch geometry from the kernel manifest (ptx/manifest.tsv), the one launch table; a
        // variant it does not serve (dtype, head dim) is refused here, before anything is allocated.
        KernelManifest manifest = device.context().manifest();
        split = select(device.backendId(), manifest, Kind.CACHE_DECODE_SPLIT, spec, cacheSpec);
        combine = select(device.backendId(), manifest, Kind.CACHE_DECODE_COMBINE, spec, cacheSpec);
        prefill = select(device.backendId(), manifest, Kind.CACHE_PREFILL, spec, cacheSpec);
        // Both prefill tiles are loaded now, so that no step compiles; they are one entry where the head dim has one tile.
        prefillBanded = LaunchTable.mayRunBanded(spec.causal(), spec.windowLeft())
                ? select(device.backendId(), manifest, variant(spec, cacheSpec).kind(Kind.CACHE_PREFILL).causal(false), spec)
                : prefill;
        splitFunction = device.function(split);
        combineFunction = device.function(combine);
        prefillFunction = device.function(prefill);
        prefillBandedFunction = prefillBanded == prefill ? prefillFunction : device.function(prefillBanded);
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
     * The entry of {@code kind} for this spec and cache: element type, head dim, causal flag, layout and the
     * features (window, softcap, sinks) are looked up in {@code manifest} like any variant field; one no entry
     * serves is refused by its name, its value and what the manifest serves.
     */
    static KernelManifest.Kernel select(String backendId, KernelManifest manifest, Kind kind, CacheAttentionSpec spec,
                                        KvCacheSpec cacheSpec) {
        return select(backendId, manifest, variant(spec, cacheSpec).kind(kind), spec);
    }

    /** The entry for {@code variant} with the spec's features, refused as {@link LaunchTable#require} words it. */
    private static KernelManifest.Kernel select(String backendId, KernelManifest manifest, KernelVariant variant,
                                                CacheAttentionSpec spec) {
        return LaunchTable.require(backendId, manifest, variant, spec.features(), spec::featureValue);
    }

    /** The CUDA-driver variant of a cache call of this spec without its features (its kind set per pass). */
    static KernelVariant variant(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return KernelVariant.of(Kind.CACHE_PREFILL, spec.dtype(), spec.headDim()).causal(spec.causal())
                .paged(cacheSpec.paged());
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
        device.launch(split, splitFunction, splits.count(), rowBlocks, spec().batch() * spec().kvHeads(), splitArgs);
        long rows = (long) spec().batch() * spec().heads() * spec().maxQueryLength();
        int rowsPerBlock = combine.rowsPerBlock();
        combineArgs.pointer(0, partialO.address()).pointer(1, partialLse.address()).pointer(2, o.address())
                .pointer(3, lse == null ? 0 : lse.address()).pointer(4, denseParams.address()).integer(5, splits.count());
        device.launch(combine, combineFunction, Math.toIntExact((rows + rowsPerBlock - 1) / rowsPerBlock), 1, 1, combineArgs);
    }

    /**
     * Splits from the lengths now, over the slots with queries (idle slots' rows are zeros whatever the
     * grid): {@link DecodeSplitPolicy#forLengths} over each sequence's span as the kernel cuts it
     * ({@link DecodeSplitPolicy#cacheKeySpan}: with a window, the window's keys from a tile-aligned start).
     */
    Splits splits(KvCache cache) {
        long granules = 0;
        int maxLength = 0;
        for (int b = 0; b < spec().batch(); b++) {
            int n = cache.newTokens(b);
            if (n > 0) {
                int span = DecodeSplitPolicy.cacheKeySpan(spec(), cache.length(b), n);
                granules += DecodeSplitPolicy.granules(span);
                maxLength = Math.max(maxLength, span);
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
        // The tile for this step's rows (LaunchTable.tileCausal): each sequence's new rows end at its length.
        boolean banded = false;
        if (prefillBanded != prefill) {
            long rows = 0;
            long unbound = 0;
            for (int b = 0; b < spec().batch(); b++) {
                int n = cache.newTokens(b);
                rows += n;
                unbound += LaunchTable.unboundRows(spec().windowLeft(), n, cache.length(b));
            }
            banded = !LaunchTable.tileCausal(true, spec().windowLeft(), rows, unbound);
        }
        KernelManifest.Kernel kernel = banded ? prefillBanded : prefill;
        long step = cache.stepInfo().address();
        prefillArgs.pointer(0, q.address()).pointer(1, cache.keys().address()).pointer(2, cache.values().address())
                .pointer(3, o.address()).pointer(4, lse == null ? 0 : lse.address()).pointer(5, packedParams.address())
                .pointer(6, step + 4L * 2 * spec().batch()).pointer(7, step)
                .pointer(8, cache.spec().paged() ? cache.blockTable().address() : 0);
        device.launch(kernel, banded ? prefillBandedFunction : prefillFunction,
                (maxNew + kernel.rowsPerBlock() - 1) / kernel.rowsPerBlock(), spec().batch() * spec().heads(), 1, prefillArgs);
    }

    @Override
    protected void release() {
        for (DeviceTensor t : new DeviceTensor[] {denseParams, packedParams, partialO, partialLse}) {
            t.close();
        }
    }
}
