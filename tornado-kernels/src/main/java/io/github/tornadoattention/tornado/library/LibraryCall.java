package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import io.github.tornadoattention.ptx.LaunchTable;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.types.arrays.BFloat16Array;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * One library function of a spec over a cache, mapped onto the ptx-cuda cache kernels (ptx-overrides/src/
 * flash_cache.cu: decode = split pass + combine, prefill = the varlen prefill over the cache), with no CUDA: the
 * entries (selected from the kernel manifest by the variant, as every host does: element type, head dim, causal,
 * cache layout, the fewest-features entry that serves the spec's window/softcap/sinks), the params block
 * ({@link KernelParams#forCache}, as ptx-cuda's {@code CudaCachePlan} makes it), the split workspace, the launch
 * geometry and each launch's arguments, and the checks of the task's arrays. Append-decode puts the cache's append
 * kernel before the decode; FORWARD ({@link ForwardLibraryTask}) is dense attention of one {@code AttentionShape}
 * with the launch table's launches (as ptx-cuda's plan makes them, dynamic shared memory included).
 *
 * <p>Every launch is fixed by the spec, never by the run-time lengths (which the kernels read from the step array on
 * the device), so a CUDA graph may capture them: decode splits the capacity
 * ({@link DecodeSplitPolicy#fixedForCapacity}; splits past a sequence's keys write empty partials that the combine
 * weighs 0), prefill covers {@code min(maxQueryLength, maxTotalQueries)} queries per sequence (tiles past a
 * sequence's new tokens exit).
 *
 * <p>The task factories ({@link CacheLibraryTasks}, {@link ForwardLibraryTask}, {@link AttentionLibraryTasks#decode})
 * attach the call to their
 * descriptor (its {@code tuning}); the provider reads it back and checks the arguments against it.
 */
public final class LibraryCall {
    /**
     * What a function computes. APPEND_DECODE: the step's new K/V rows written into the cache (ptx-cuda's append
     * kernel), then DECODE; the launches ptx-cuda's cache decode makes. FORWARD: dense attention of an
     * {@link AttentionShape}, the launches ptx-cuda's plan makes (the prefill kernel, or for a decode shape the split
     * pass + combine), dynamic shared memory included.
     */
    public enum Op { DECODE, PREFILL, APPEND_DECODE, FORWARD }

    /** Argument positions in the task's parameters; -1: the function has no such argument. */
    public record Positions(int q, int keys, int values, int step, int blockTable, int o, int lse, int newKeys,
                            int newValues) {
        int[] arrays() {
            return new int[] {q, keys, values, step, blockTable, o, lse, newKeys, newValues};
        }
    }

    /** What identifies a prepared call: equal keys map to equal launches, params and workspace. */
    public record Key(String function, CacheAttentionSpec spec, KvCacheSpec cacheSpec, AttentionShape shape, int splits) {
    }

    /** One kernel launch: its entry, grid and arguments (one 8-byte slot each, as cuLaunchKernel takes them). */
    public record Launch(KernelManifest.Kernel kernel, int gridX, int gridY, int gridZ, long[] arguments) {
    }

    /** The device memory a prepared call owns: the params block and the decode's split workspace (0: none). */
    public record Workspace(long params, long partialO, long partialLse) {
    }

    /** CUDA grid y and z limit. */
    static final int MAX_GRID_YZ = 65535;
    /** The kernels read 16-byte chunks: every array's data must start 16-byte aligned. */
    static final int ALIGNMENT = 16;
    /** What refusals call this host. */
    static final String HOST = "the " + AttentionLibraryTasks.LIBRARY_NAME + " library task";
    private static final String[] ROLE_NAMES = {"q", "keys", "values", "step", "blockTable", "o", "lse", "newKeys",
        "newValues"};
    /** The append kernel's int arguments after its 7 pointers (ptx-overrides/src/flash_cache.cu's append ABI). */
    private static final int APPEND_INTS = 12;

    private final String function;
    private final Op op;
    private final CacheAttentionSpec spec;
    private final KvCacheSpec cacheSpec;
    /** FORWARD: the shape and ptx-cuda's launches for it; else null. */
    private final AttentionShape shape;
    private final List<LaunchTable.Launch> forward;
    private final Positions at;
    /** {@link Positions#arrays()}, made once: the per-dispatch checks allocate nothing. */
    private final int[] arrays;
    private final int argumentCount;
    private final String[] names;
    private final boolean exactSizes;
    private final long stepInts;
    private final int[] params;
    private final KernelManifest.Kernel main;
    private final KernelManifest.Kernel combine;
    /** APPEND_DECODE: the cache's append entry, its grid x and its int arguments; else null. */
    private final KernelManifest.Kernel append;
    private final int appendGridX;
    private final long[] appendInts;
    private final int keysPerSplit;
    private final int splits;
    private final int gridX;
    private final int gridY;
    private final int gridZ;
    private final int combineGridX;
    private final long partialOFloats;
    private final long partialLseFloats;
    /** Its dispatches timed with CUDA events whether or not {@link DispatchTimer} is on. */
    private volatile boolean timedOnDevice;

    private LibraryCall(String function, Op op, CacheAttentionSpec spec, KvCacheSpec cacheSpec, Positions at,
                        int argumentCount, String[] names, boolean exactSizes, long stepInts) {
        this.function = function;
        this.op = op;
        this.spec = spec;
        this.cacheSpec = cacheSpec;
        this.at = at;
        this.arrays = at.arrays();
        this.argumentCount = argumentCount;
        this.names = names;
        this.exactSizes = exactSizes;
        this.stepInts = stepInts;
        this.shape = null;
        this.forward = null;
        check(spec, cacheSpec);
        KernelManifest manifest = KernelManifest.shipped();
        if (op == Op.APPEND_DECODE) {
            // The append entry of the cache's element type, head dim and layout (no score features: it only copies).
            append = manifest.select(KernelVariant.of(Kind.CACHE_APPEND, spec.dtype(), spec.headDim())
                    .paged(cacheSpec.paged()));
            int maxNew = denseQueries(spec);
            int rowsPerBlock = append.threads() / (spec.headDim() / 8);
            appendGridX = Math.ceilDiv(maxNew, rowsPerBlock);
            // New K/V [slots, Hkv, maxNew, D] (BHSD); the cache's storage strides; page size and pages per sequence.
            var storage = cacheSpec.strides();
            appendInts = new long[] {spec.batch(), spec.kvHeads(), spec.headDim(), maxNew,
                (long) spec.kvHeads() * maxNew * spec.headDim(), (long) maxNew * spec.headDim(), spec.headDim(),
                storage.batch(), storage.head(), storage.row(), cacheSpec.pageSize(), cacheSpec.pagesPerSequence()};
        } else {
            append = null;
            appendGridX = 0;
            appendInts = null;
        }
        if (op != Op.PREFILL) {
            main = select(manifest, Kind.CACHE_DECODE_SPLIT, spec, cacheSpec);
            combine = select(manifest, Kind.CACHE_DECODE_COMBINE, spec, cacheSpec);
            params = KernelParams.forCache(spec, cacheSpec, false);
            DecodeSplitPolicy.Splits fixed = DecodeSplitPolicy.fixedForCapacity(cacheSpec.capacity());
            keysPerSplit = fixed.keysPerSplit();
            splits = fixed.count();
            int queries = denseQueries(spec);
            long rows = (long) spec.batch() * spec.heads() * queries;
            gridX = splits;
            gridY = Math.ceilDiv(spec.groupSize() * queries, main.rowsPerBlock());
            gridZ = spec.batch() * spec.kvHeads();
            combineGridX = Math.toIntExact(Math.ceilDiv(rows, combine.rowsPerBlock()));
            partialOFloats = splits * rows * spec.headDim();
            partialLseFloats = splits * rows;
        } else {
            main = select(manifest, Kind.CACHE_PREFILL, spec, cacheSpec);
            combine = null;
            params = KernelParams.forCache(spec, cacheSpec, true);
            keysPerSplit = 0;
            splits = 0;
            gridX = Math.max(1, Math.ceilDiv(longestPrompt(spec), main.rowsPerBlock()));
            gridY = spec.batch() * spec.heads();
            gridZ = 1;
            combineGridX = 0;
            partialOFloats = 0;
            partialLseFloats = 0;
        }
    }

    /**
     * A function of {@link CacheLibraryTasks}: arrays {@code (q, keys, values, step, blockTable, o[, lse])}, sizes
     * exact. Decode: q, o [batch, heads, min(maxQueryLength, 16), headDim] in the spec's layout, lse [batch, heads,
     * that]; prefill: q, o [maxTotalQueries, heads, headDim], lse [heads, maxTotalQueries].
     */
    static LibraryCall of(String function, Op op, boolean lse, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        InvalidArgumentException.requireNonNull("spec", spec);
        InvalidArgumentException.requireNonNull("cacheSpec", cacheSpec);
        if (op == Op.APPEND_DECODE) {
            // (newKeys, newValues, q, keys, values, step, blockTable, o[, lse]): CacheAttentionTasks.addAppendAndDecode's order.
            Positions at = new Positions(2, 3, 4, 5, 6, 7, lse ? 8 : -1, 0, 1);
            return new LibraryCall(function, op, spec, cacheSpec, at, lse ? 9 : 8, ROLE_NAMES, true, 3L * spec.batch() + 1);
        }
        Positions at = new Positions(0, 1, 2, 3, 4, 5, lse ? 6 : -1, -1, -1);
        return new LibraryCall(function, op, spec, cacheSpec, at, lse ? 7 : 6, ROLE_NAMES, true, 3L * spec.batch() + 1);
    }

    /**
     * Dense attention of {@code shape} (function {@code function}): arrays {@code (q, k, v, o, lse)} of exactly the
     * shape's sizes; ptx-cuda's launches for the shape ({@link LaunchTable#launches}, a decode shape split
     * {@code splits} ways), its params block ({@link KernelParams#of}) and decode workspace.
     */
    private LibraryCall(String function, AttentionShape shape, int splits) {
        this.function = function;
        this.op = Op.FORWARD;
        this.spec = null;
        this.cacheSpec = null;
        this.shape = shape;
        this.at = new Positions(0, 1, 2, -1, -1, 3, 4, -1, -1);
        this.arrays = at.arrays();
        this.argumentCount = 5;
        this.names = ROLE_NAMES;
        this.exactSizes = true;
        this.stepInts = 0;
        this.forward = List.copyOf(LaunchTable.launches(shape, splits, KernelManifest.shipped()));
        this.params = KernelParams.of(shape, splits);
        this.main = forward.get(0).kernel();
        this.combine = forward.size() > 1 ? forward.get(1).kernel() : null;
        this.append = null;
        this.appendGridX = 0;
        this.appendInts = null;
        this.keysPerSplit = 0;
        this.splits = splits;
        this.gridX = forward.get(0).gridX();
        this.gridY = forward.get(0).gridY();
        this.gridZ = forward.get(0).gridZ();
        this.combineGridX = combine == null ? 0 : forward.get(1).gridX();
        LaunchTable.DecodeWorkspace workspace = splits > 0 ? LaunchTable.decodeWorkspace(shape, splits) : null;
        this.partialOFloats = workspace == null ? 0 : workspace.partialOFloats();
        this.partialLseFloats = workspace == null ? 0 : workspace.partialLseFloats();
    }

    /**
     * The dense function of {@code shape} on a device of {@code multiprocessors} SMs (a decode shape's split count, as
     * ptx-cuda picks it: {@link LaunchTable#decodeSplits}); a shape no shipped entry serves is refused by name.
     */
    static LibraryCall forward(String function, AttentionShape shape, int multiprocessors) {
        InvalidArgumentException.requireNonNull("shape", shape);
        if (multiprocessors < 1) {
            throw new InvalidArgumentException("multiprocessors", multiprocessors, "must be >= 1 (the device's SM count)");
        }
        KernelManifest manifest = KernelManifest.shipped();
        LaunchTable.checkSupported(HOST, shape, manifest);
        int splits = LaunchTable.isDecode(shape) ? LaunchTable.decodeSplits(shape, multiprocessors, manifest) : 0;
        return new LibraryCall(function, shape, splits);
    }

    /** The spec and cache every function of the library serves: consistent, and within the kernels' grid limits. */
    static void check(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        spec.checkCache(cacheSpec);
        if ((long) spec.batch() * spec.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) spec.batch() * spec.heads(),
                    "the kernels launch one block row per (sequence, head): at most " + MAX_GRID_YZ);
        }
    }

    /**
     * The 13-argument {@link AttentionLibraryTasks#decode} (fp16, contiguous cache, BHSD, no lse): its scalars made
     * into the spec and cache every function takes, its arrays at their positions (sizes at least what the shape
     * needs).
     */
    static LibraryCall legacyDecode(Object[] args) {
        if (args == null || args.length != AttentionLibraryTasks.DECODE_ARGS) {
            throw new InvalidArgumentException("arguments", args == null ? null : args.length,
                    AttentionLibraryTasks.DECODE + " takes " + AttentionLibraryTasks.DECODE_ARGS + " arguments");
        }
        int batch = integer(args, AttentionLibraryTasks.ARG_BATCH, "batch");
        int heads = integer(args, AttentionLibraryTasks.ARG_HEADS, "heads");
        int kvHeads = integer(args, AttentionLibraryTasks.ARG_KV_HEADS, "kvHeads");
        int queries = integer(args, AttentionLibraryTasks.ARG_QUERIES, "queries");
        int capacity = integer(args, AttentionLibraryTasks.ARG_CAPACITY, "capacity");
        int headDim = integer(args, AttentionLibraryTasks.ARG_HEAD_DIM, "headDim");
        boolean causal = type(args, AttentionLibraryTasks.ARG_CAUSAL, "causal", Boolean.class);
        float scale = type(args, AttentionLibraryTasks.ARG_SCALE, "scale", Float.class);
        if (queries < 1 || queries > CacheAttentionSpec.MAX_DENSE_QUERIES) {
            throw new InvalidArgumentException("queries", queries,
                    "must be in [1, " + CacheAttentionSpec.MAX_DENSE_QUERIES + "] (longer prompts: the packed prefill)");
        }
        // Positivity, the head ratio, the scale and 32-bit tensor sizes, as every other host checks them.
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(kvHeads)
                .headDim(headDim).maxQueryLength(queries).maxLength(capacity).causal(causal).scale(scale)
                .layout(Layout.BHSD).dtype(DType.FP16).build();
        KvCacheSpec cache = KvCacheSpec.contiguous(batch, kvHeads, capacity, headDim);
        Positions at = new Positions(AttentionLibraryTasks.ARG_Q, AttentionLibraryTasks.ARG_K,
                AttentionLibraryTasks.ARG_V, AttentionLibraryTasks.ARG_LENS, -1, AttentionLibraryTasks.ARG_O, -1, -1, -1);
        String[] names = {"q", "keys", "values", "lens", "blockTable", "o", "lse", "newKeys", "newValues"};
        LibraryCall call = new LibraryCall(AttentionLibraryTasks.DECODE, Op.DECODE, spec, cache, at,
                AttentionLibraryTasks.DECODE_ARGS, names, false, 2L * batch);
        call.checkArguments(args);
        return call;
    }

    /**
     * Checks the task's arguments against the call (allocating nothing unless it refuses them): their count, and each array's type (16-bit tensors: a
     * {@link HalfFloatArray} for fp16, a {@link BFloat16Array} for bf16, or bf16/fp16 bits in a {@link ShortArray};
     * step and block table {@link IntArray}s; lse a {@link FloatArray}) and size.
     *
     * @throws InvalidArgumentException naming the first bad argument
     */
    public void checkArguments(Object[] args) {
        if (args == null || args.length != argumentCount) {
            throw new InvalidArgumentException("arguments", args == null ? null : args.length,
                    function + " takes " + argumentCount + " arguments");
        }
        if (op == Op.FORWARD) {
            requireTensor(args, at.q(), shape.queryElements(), "the shape's query elements");
            requireTensor(args, at.keys(), shape.kvElements(), "the shape's key/value elements");
            requireTensor(args, at.values(), shape.kvElements(), "the shape's key/value elements");
            requireTensor(args, at.o(), shape.outputElements(), "the shape's output elements");
            require(args, at.lse(), FloatArray.class, "a FloatArray", shape.logSumExpElements(), "batch*heads*queryLength");
            return;
        }
        boolean dense = op != Op.PREFILL;
        long q = dense ? denseElements() : spec.packedQueryElements();
        String qShape = dense ? "batch*heads*min(maxQueryLength,16)*headDim" : "maxTotalQueries*heads*headDim";
        requireTensor(args, at.q(), q, qShape);
        if (at.newKeys() >= 0) {
            long rows = (long) spec.batch() * spec.kvHeads() * denseQueries(spec) * spec.headDim();
            requireTensor(args, at.newKeys(), rows, "batch*kvHeads*min(maxQueryLength,16)*headDim");
            requireTensor(args, at.newValues(), rows, "batch*kvHeads*min(maxQueryLength,16)*headDim");
        }
        requireTensor(args, at.keys(), cacheSpec.elements(), "cacheSpec.elements()");
        requireTensor(args, at.values(), cacheSpec.elements(), "cacheSpec.elements()");
        if (args[at.keys()] == args[at.values()]) {
            throw new InvalidArgumentException(names[2], "the " + names[1] + " array", "must be another array than " + names[1]);
        }
        requireTensor(args, at.o(), q, qShape);
        require(args, at.step(), IntArray.class, "an IntArray", stepInts,
                exactSizes ? "3*batch+1 ints (CacheAttentionTasks.newStepArray)" : "2*batch ints (fillLens)");
        if (at.blockTable() >= 0) {
            require(args, at.blockTable(), IntArray.class, "an IntArray", blockTableInts(),
                    cacheSpec.paged() ? "batch*pagesPerSequence ints" : "one unread int for a contiguous cache");
        }
        if (at.lse() >= 0) {
            require(args, at.lse(), FloatArray.class, "a FloatArray", lseFloats(),
                    dense ? "batch*heads*min(maxQueryLength,16)" : "heads*maxTotalQueries");
        }
    }

    /**
     * Checks the device pointers TornadoVM resolved for the arrays (the first element, past the array header):
     * present and 16-byte aligned.
     */
    public void checkPointers(long[] pointers) {
        if (pointers == null || pointers.length != argumentCount) {
            throw new InvalidArgumentException("devicePointers", pointers == null ? null : pointers.length,
                    "one per argument (" + argumentCount + ")");
        }
        for (int role = 0; role < arrays.length; role++) {
            int i = arrays[role];
            if (i < 0) {
                continue;
            }
            if (pointers[i] == 0) {
                throw new InvalidArgumentException(names[role], 0, "must be on the device (TornadoVM gave no device pointer)");
            }
            if (pointers[i] % ALIGNMENT != 0) {
                throw new InvalidArgumentException(names[role], "0x" + Long.toHexString(pointers[i]),
                        "the kernels need 16-byte aligned data (TornadoVM's array header must be a multiple of 16 bytes)");
            }
        }
    }

    /**
     * The launches, in order, for the arrays at {@code pointers} (as {@link #checkPointers} accepts them) and the
     * call's {@code workspace}. Decode: the split pass (q, k, v, o_partial, lse_partial, params, lens, block_table,
     * keys_per_split), then the combine (o_partial, lse_partial, o, lse, params, num_splits). Prefill: (q, k, v, o,
     * lse, params, q_offsets = the step's offsets, lens = the step, block_table). Append-decode: first the append (k,
     * v, new_k, new_v, lens = the step, block_table, packed_offsets = null, then its ints: slots, Hkv, D, max_new, the new
     * rows' and the cache's batch/head/row strides, page size, pages per sequence), then the decode's two. A contiguous
     * cache's block table and an absent lse are passed as null.
     */
    public List<Launch> launches(long[] pointers, Workspace workspace) {
        if (op == Op.FORWARD) {
            long q = pointers[at.q()], k = pointers[at.keys()], v = pointers[at.values()];
            long o = pointers[at.o()], lse = pointers[at.lse()];
            LaunchTable.Launch first = forward.get(0);
            if (combine == null) {
                return List.of(new Launch(main, first.gridX(), first.gridY(), first.gridZ(),
                        new long[] {q, k, v, o, lse, workspace.params()}));
            }
            LaunchTable.Launch second = forward.get(1);
            return List.of(new Launch(main, first.gridX(), first.gridY(), first.gridZ(),
                            new long[] {q, k, v, workspace.partialO(), workspace.partialLse(), workspace.params()}),
                    new Launch(combine, second.gridX(), second.gridY(), second.gridZ(),
                            new long[] {workspace.partialO(), workspace.partialLse(), o, lse, workspace.params()}));
        }
        long blocks = cacheSpec.paged() ? pointers[at.blockTable()] : 0;
        long lse = at.lse() >= 0 ? pointers[at.lse()] : 0;
        long step = pointers[at.step()];
        List<Launch> launches = new ArrayList<>(3);
        if (append != null) {
            long[] arguments = new long[7 + APPEND_INTS];
            long[] pointerArguments = {pointers[at.keys()], pointers[at.values()], pointers[at.newKeys()],
                pointers[at.newValues()], step, blocks, 0};
            System.arraycopy(pointerArguments, 0, arguments, 0, 7);
            System.arraycopy(appendInts, 0, arguments, 7, APPEND_INTS);
            launches.add(new Launch(append, appendGridX, spec.kvHeads(), spec.batch(), arguments));
        }
        if (op != Op.PREFILL) {
            launches.add(new Launch(main, gridX, gridY, gridZ, new long[] {pointers[at.q()], pointers[at.keys()],
                    pointers[at.values()], workspace.partialO(), workspace.partialLse(), workspace.params(), step, blocks,
                    keysPerSplit}));
            launches.add(new Launch(combine, combineGridX, 1, 1, new long[] {workspace.partialO(), workspace.partialLse(),
                    pointers[at.o()], lse, workspace.params(), splits}));
        } else {
            long offsets = step + 4L * 2 * spec.batch();
            launches.add(new Launch(main, gridX, gridY, gridZ, new long[] {pointers[at.q()], pointers[at.keys()],
                    pointers[at.values()], pointers[at.o()], lse, workspace.params(), offsets, step, blocks}));
        }
        return launches;
    }

    /** The entries the launches use, in launch order (loaded once each by the provider). */
    public List<KernelManifest.Kernel> kernels() {
        if (append != null) {
            return List.of(append, main, combine);
        }
        return combine == null ? List.of(main) : List.of(main, combine);
    }

    /** Times this call's dispatches on the device ({@link DispatchTimer#drainMillis}), or stops. */
    void timeOnDevice(boolean on) {
        timedOnDevice = on;
    }

    boolean timedOnDevice() {
        return timedOnDevice;
    }

    public Key key() {
        return new Key(function, spec, cacheSpec, shape, splits);
    }

    public String function() {
        return function;
    }

    public Op op() {
        return op;
    }

    public CacheAttentionSpec spec() {
        return spec;
    }

    public KvCacheSpec cacheSpec() {
        return cacheSpec;
    }

    /** FORWARD's shape; null for the cache functions. */
    public AttentionShape shape() {
        return shape;
    }

    public Positions positions() {
        return at;
    }

    public int argumentCount() {
        return argumentCount;
    }

    /** The params block, uploaded once per prepared call. */
    public int[] params() {
        return params.clone();
    }

    /** Decode: keys per split (a multiple of {@link DecodeSplitPolicy#GRANULE}) and the split count; prefill: 0. */
    public int keysPerSplit() {
        return keysPerSplit;
    }

    public int splits() {
        return splits;
    }

    /** The decode's split workspace in floats (0 for prefill). */
    public long partialOFloats() {
        return partialOFloats;
    }

    public long partialLseFloats() {
        return partialLseFloats;
    }

    /** Dense queries per sequence of a decode: the spec's maxQueryLength, at most 16 (as the engine tasks). */
    static int denseQueries(CacheAttentionSpec spec) {
        return Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES);
    }

    /** The longest prompt a prefill grid covers. */
    static int longestPrompt(CacheAttentionSpec spec) {
        return Math.min(spec.maxQueryLength(), spec.maxTotalQueries());
    }

    private long denseElements() {
        return (long) spec.batch() * spec.heads() * denseQueries(spec) * spec.headDim();
    }

    private long lseFloats() {
        return op != Op.PREFILL ? (long) spec.batch() * spec.heads() * denseQueries(spec) : spec.packedLseElements();
    }

    private long blockTableInts() {
        return cacheSpec.paged() ? (long) cacheSpec.slots() * cacheSpec.pagesPerSequence() : 1;
    }

    /**
     * The entry of {@code kind} for the spec and cache; its features are looked up like any variant field, and of the
     * entries that serve them the one with the fewest runs. One no entry serves is refused by name.
     */
    private static KernelManifest.Kernel select(KernelManifest manifest, Kind kind, CacheAttentionSpec spec,
                                                KvCacheSpec cacheSpec) {
        KernelVariant variant = KernelVariant.of(kind, spec.dtype(), spec.headDim()).causal(spec.causal())
                .paged(cacheSpec.paged());
        return LaunchTable.require(HOST, manifest, variant, spec.features(), spec::featureValue);
    }

    /** A 16-bit tensor argument: its element type's array (or 16-bit bits in a ShortArray) of the right size. */
    private void requireTensor(Object[] args, int index, long elements, String what) {
        DType dtype = op == Op.FORWARD ? shape.dtype() : spec.dtype();
        Class<? extends TornadoNativeArray> typed = dtype == DType.BF16 ? BFloat16Array.class : HalfFloatArray.class;
        Object value = args[index];
        // FORWARD (ptx-tornado's plans) keeps bf16 bits in HalfFloatArrays too: any 16-bit array of the size.
        boolean sixteenBits = op == Op.FORWARD && value instanceof HalfFloatArray;
        if (!(typed.isInstance(value) || value instanceof ShortArray || sixteenBits)) {
            throw new InvalidArgumentException(names[roleOf(index)], value == null ? null : value.getClass().getSimpleName(),
                    "argument " + index + " must be a " + typed.getSimpleName() + " or a ShortArray ("
                            + dtype.label() + " bits)");
        }
        requireSize(index, (TornadoNativeArray) value, elements, what);
    }

    private void require(Object[] args, int index, Class<? extends TornadoNativeArray> type, String allowed, long elements,
                         String what) {
        Object value = args[index];
        if (!type.isInstance(value)) {
            throw new InvalidArgumentException(names[roleOf(index)], value == null ? null : value.getClass().getSimpleName(),
                    "argument " + index + " must be " + allowed);
        }
        requireSize(index, (TornadoNativeArray) value, elements, what);
    }

    private void requireSize(int index, TornadoNativeArray array, long elements, String what) {
        long size = array.getSize();
        if (exactSizes ? size != elements : size < elements) {
            throw new InvalidArgumentException(names[roleOf(index)], array.getClass().getSimpleName() + "[" + size + "]",
                    (exactSizes ? "must have " : "needs at least ") + elements + " elements (" + what + ")");
        }
    }

    private int roleOf(int index) {
        for (int role = 0; role < arrays.length; role++) {
            if (arrays[role] == index) {
                return role;
            }
        }
        throw new IllegalArgumentException("argument " + index + " is no array of " + function);
    }

    private static int integer(Object[] args, int index, String name) {
        return type(args, index, name, Integer.class);
    }

    private static <T> T type(Object[] args, int index, String name, Class<T> type) {
        Object value = args[index];
        if (!type.isInstance(value)) {
            throw new InvalidArgumentException(name, value, "argument " + index + " must be a " + type.getSimpleName());
        }
        return type.cast(value);
    }

    @Override
    public String toString() {
        return HOST + " " + function + ": " + (op == Op.FORWARD ? shape : spec + " over " + cacheSpec);
    }
}
