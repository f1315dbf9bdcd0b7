package io.github.tornadoattention.tornado.engine;

import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DirectMemory;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import io.github.tornadoattention.ptx.LaunchTable;
import io.github.tornadoattention.tornado.BackendTypes;
import io.github.tornadoattention.tornado.TornadoArrays;
import io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches;
import io.github.tornadoattention.tornado.prebuilt.PrebuiltTasks;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Attention over a KV cache as tasks of an engine's own TornadoVM {@link TaskGraph}, over the engine's own
 * arrays: the way a TornadoVM engine (one task graph per layer, as GPULlama3.java builds them) adds our
 * attention next to its projections, with nothing copied and nothing synchronised in between.
 *
 * <pre>{@code
 * CacheAttentionTasks att = CacheAttentionTasks.create("ptx-tornado", spec, cacheSpec, device);
 * TornadoNativeArray kCache = att.newCacheArray(), vCache = att.newCacheArray();   // one pair per layer
 * IntArray step = CacheAttentionTasks.newStepArray(slots), blocks = att.newBlockTable();
 * // graph "l0a": the engine's tasks (RMSNorm, QKV projection, RoPE) write q, newK, newV (fp16), persisted
 * TaskGraph attend = new TaskGraph("l0b")
 *         .consumeFromDevice("l0a", q, newK, newV)
 *         .transferToDevice(DataTransferMode.FIRST_EXECUTION, kCache, vCache, blocks)  // the cache stays on the device
 *         .transferToDevice(DataTransferMode.EVERY_EXECUTION, step);                   // lengths: runtime data
 * att.addAppendAndDecode(attend, "l0b", scheduler, "attn_", newK, newV, q, kCache, vCache, step, blocks, o, null);
 * // ... the engine's output projection reading o, in the same graph after our task ...
 * // per token: CacheAttentionTasks.setStep(step, lengthsAfterAppend, newTokens); then the graphs in order
 * }</pre>
 *
 * <p><b>What the tasks read at run time.</b> Everything that changes from step to step comes from device
 * memory, never from a kernel scalar (TornadoVM compiles scalar arguments into the kernel as constants): the
 * step array (int32 {@code [3*slots+1]}: each slot's length after this step's append L_b, its new tokens n_b,
 * their prefix sums, the total; {@link #setStep}) and the block table of a paged cache. Changing lengths,
 * appending, switching sequences or pages never rebuilds the graph or compiles anything. The split-KV decode
 * grid is fixed when the task is added ({@link #splits()}, from the capacity and the device's SM count); the
 * kernels derive the keys per split from the lengths of each step.
 *
 * <p><b>Semantics</b> are the library's (README, "Inference API"): query j of slot b sees key k iff
 * k &lt; L_b and, causal, k &lt;= L_b - n_b + j; rows j &gt;= n_b, idle slots and rows that see no key give
 * O = 0, lse = -inf. Layouts: cache [slots, Hkv, capacity, D] (contiguous) or a page pool [pages, Hkv,
 * pageSize, D] with a block table [slots, pagesPerSequence]; dense q, o [slots, Hq, maxQueryLength, D]
 * (BHSD), new K/V [slots, Hkv, maxQueryLength, D].
 *
 * <p><b>Backends.</b> {@code ptx-tornado}: the hand-tuned PTX as prebuilt tasks (one fused split-KV launch for
 * decode, with or without this step's append, the latter also staged: its per-step inputs in one array,
 * {@link #addStagedAppendAndDecode}; the varlen prefill); needs TornadoVM's PTX or CUDA backend (the prebuilt form per backend: {@link PrebuiltTasks}).
 * {@code tornado-simt} and {@code tornado-mma}: the Java cache kernels ({@link CacheKernels}, scalar fp32; decode is
 * memory bound, so both Java backends share them), JIT-compiled by TornadoVM with the engine's graph, on any
 * TornadoVM backend; fp16 over {@link HalfFloatArray}s, bf16 over bf16 bits in {@link ShortArray}s
 * ({@link #arrayType()}), head dims that are multiples of 16 up to 256. The append alone ({@link #addAppend}) is the Java kernel on every backend.
 *
 * <p><b>TornadoVM 5.2.0 runs a prebuilt task correctly only as the first task of its graph</b> (and only one per
 * graph): {@code TornadoVMInterpreter.globalToLocalTaskIndex} finds a task with {@code indexOf}, and
 * {@code PrebuiltTask.equals} matches no prebuilt task, so every prebuilt task uses the installed code of the
 * graph's first task (a launch with another kernel's code fails with CUDA error 701 or computes garbage; measured on
 * an H200). So on ptx-tornado put {@link #addAppendAndDecode}, {@link #addDecode} or {@link #addPrefill} first in a
 * graph of its own and the engine's tasks around it in the graphs before and after (persist/consume between them,
 * as a TornadoVM engine does between layers); Java tasks may follow it in the same graph.
 *
 * <p><b>Arrays</b> are checked when a task is added (type by the signature; lengths here): a wrong one is an
 * {@link InvalidArgumentException} naming it, before any task runs. A TornadoVM array belongs to no device until a
 * plan runs it; the device is the execution plan's ({@code withDevice}); the tasks are built for the device given to
 * {@link #create} (its SM count; {@code ptx-tornado} refuses a device of another TornadoVM backend).
 *
 * <p><b>Threads.</b> The engine owns the execution plans these tasks run in. Where other threads use TornadoVM on the
 * same device meanwhile (another engine thread, our inference device), build, first-run and close those plans inside
 * {@link io.github.tornadoattention.tornado.TornadoVMLock#exclusive} and close them with
 * {@link io.github.tornadoattention.tornado.TornadoVMLock#close}: TornadoVM 5.2 cannot run those beside anything else,
 * and a plain {@code close()} makes every other precompiled plan on the device fail its next launch.
 */
public final class CacheAttentionTasks {
    /** Backends whose kernels this class can add. */
    public static final List<String> BACKENDS = List.of(Backends.PTX_TORNADO, Backends.TORNADO_MMA, Backends.TORNADO_SIMT);

    private final String backendId;
    private final CacheAttentionSpec spec;
    private final KvCacheSpec cacheSpec;
    private final int splits;
    /** The Java cache kernels: every backend's append; tornado-mma's and tornado-simt's attention. */
    private final JavaCacheTasks javaTasks;
    private final boolean prebuilt;
    /** The TornadoVM backend of the device the tasks are for: the form of ptx-tornado's prebuilt tasks follows it. */
    private final TornadoVMBackendType deviceBackend;

    private CacheAttentionTasks(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec, int computeUnits,
                                TornadoVMBackendType deviceBackend) {
        this.backendId = backendId;
        this.deviceBackend = deviceBackend;
        this.spec = spec;
        this.cacheSpec = cacheSpec;
        int rowBlocks = Math.max(1, Math.ceilDiv(spec.groupSize() * denseQueries(), 16));
        // A fixed grid (graphs are built once) over the keys a full cache's queries see (with a window, its span);
        // the kernels derive the keys per split from each step's lengths.
        this.splits = DecodeSplitPolicy.gridSplits(DecodeSplitPolicy.keySpan(spec, cacheSpec.capacity(), denseQueries()),
                (long) spec.batch() * spec.kvHeads() * rowBlocks, computeUnits);
        this.prebuilt = backendId.equals(Backends.PTX_TORNADO);
        // ptx-tornado attends with the prebuilt twins; the Java kernels only append there (a bit copy, any element type).
        this.javaTasks = prebuilt ? null : JavaCacheTasks.withSplits(spec, cacheSpec, splits);
    }

    /**
     * Tasks of {@code backendId} ({@link #BACKENDS}) for attention of {@code spec} over caches of
     * {@code cacheSpec}, built for {@code device} (the device the engine's execution plan will use).
     */
    public static CacheAttentionTasks create(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec,
                                             TornadoDevice device) {
        check(backendId, spec, cacheSpec);
        InvalidArgumentException.requireNonNull("device", device);
        if (backendId.equals(Backends.PTX_TORNADO) && !PrebuiltTasks.serves(device.getTornadoVMBackend())) {
            throw new InvalidArgumentException("device", device.getPhysicalDevice().getDeviceName() + " ("
                    + device.getTornadoVMBackend() + ")", "ptx-tornado's prebuilt tasks need a device of TornadoVM's PTX or"
                    + " CUDA backend");
        }
        check(backendId, spec, cacheSpec);
        return new CacheAttentionTasks(backendId, spec, cacheSpec, device.getPhysicalDevice().getDeviceMaxComputeUnits(),
                device.getTornadoVMBackend());
    }

    /**
     * {@link #create} for a device of TornadoVM's PTX backend (its CUDA backend where the TornadoVM release has no PTX
     * backend) with {@code computeUnits} SMs (tests; the split count follows from it).
     */
    static CacheAttentionTasks of(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec, int computeUnits) {
        check(backendId, spec, cacheSpec);
        return new CacheAttentionTasks(backendId, spec, cacheSpec, computeUnits,
                BackendTypes.PTX.orElse(TornadoVMBackendType.CUDA));
    }

    /** Throws an {@link InvalidArgumentException} unless {@code backendId}'s kernels serve {@code spec} over {@code cacheSpec}. */
    public static void check(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        InvalidArgumentException.requireNonNull("backendId", backendId);
        InvalidArgumentException.requireNonNull("spec", spec);
        InvalidArgumentException.requireNonNull("cacheSpec", cacheSpec);
        if (!BACKENDS.contains(backendId)) {
            throw new InvalidArgumentException("backendId", backendId, "must be one of " + BACKENDS);
        }
        spec.checkCache(cacheSpec);
        if (backendId.equals(Backends.PTX_TORNADO)) {
            List<Integer> headers = PrebuiltLaunches.headerBytes();
            if (!headers.contains((int) TornadoNativeArray.ARRAY_HEADER)) {
                throw new InvalidArgumentException("tornado.panama.objectHeader", TornadoNativeArray.ARRAY_HEADER,
                        "the prebuilt kernels read arrays behind a header of " + headers + " bytes");
            }
            // Every twin a graph of this spec may add: element type, head dim and the features (window, softcap,
            // sinks) are looked up in the manifest like any variant field, so whatever it serves is accepted; a
            // refusal names the field (a feature by its own name) and what the manifest serves.
            for (Kind kind : new Kind[] {Kind.CACHE_DECODE_FUSED, Kind.CACHE_APPEND_DECODE_FUSED,
                    Kind.CACHE_STAGED_DECODE_FUSED, Kind.CACHE_PREFILL}) {
                try {
                    LaunchTable.require(backendId, KernelManifest.shipped(), twin(kind, spec, cacheSpec), spec.features(),
                            spec::featureValue);
                } catch (InvalidArgumentException e) {
                    // A field of the spec argument (dtype, headDim, causal) is named as one; features by their own names.
                    if (spec.features().contains(e.argument())) {
                        throw e;
                    }
                    throw new InvalidArgumentException("spec." + e.argument(), e.value(), e.allowed());
                }
            }
        } else {
            // The Java cache kernels serve fp16 and bf16, window, softcap and sinks (run-time words; CacheKernels).
            JavaCacheTasks.checkSupported(spec, cacheSpec);
        }
    }

    /**
     * The 16 int32 words of an append's parameters (the same for every backend): new K/V rows with element
     * {@code strides} (batch, head, row; packed: row = the packed row), up to {@code maxNew} per slot.
     */
    public static int[] appendParams(KvCacheSpec cacheSpec, TensorStrides strides, int maxNew, boolean packed) {
        return JavaCacheTasks.appendParams(cacheSpec, strides, maxNew, packed);
    }

    public String backendId() {
        return backendId;
    }

    public CacheAttentionSpec spec() {
        return spec;
    }

    public KvCacheSpec cacheSpec() {
        return cacheSpec;
    }

    /** The decode grid's split count (grid x); keys per split follow the lengths at run time. */
    public int splits() {
        return splits;
    }

    /** Dense queries per slot of a decode task: the spec's {@code maxQueryLength}, at most 16. */
    public int denseQueries() {
        return Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES);
    }

    /**
     * A K or V cache of {@code cacheSpec} (zeros), for one layer: a {@link HalfFloatArray} for fp16, bf16 bits in a
     * {@link ShortArray} for bf16 ({@link #arrayType}). It is host memory too (the JVM's direct memory): where that
     * cannot hold it, an {@link InvalidArgumentException} names the cache, the bytes and the limit.
     */
    @SuppressWarnings("unchecked")
    public <T extends TornadoNativeArray> T newCacheArray() {
        long elements = cacheSpec.elements();
        return (T) DirectMemory.allocate("cacheSpec", cacheSpec, "a K or V cache array",
                TornadoArrays.bytes(spec.dtype(), elements),
                () -> JavaCacheTasks.newArray(spec.dtype(), Math.toIntExact(elements)));
    }

    /**
     * The array type of this spec's 16-bit tensors (q, o, the caches, new K/V): {@link HalfFloatArray} for fp16,
     * {@link ShortArray} (bf16 bits) for bf16. The Java kernels take only this type; ptx-tornado's prebuilt tasks move
     * bits and take either.
     */
    public Class<? extends TornadoNativeArray> arrayType() {
        return JavaCacheTasks.arrayType(spec.dtype());
    }

    /** The block table of a paged cache ([slots, pagesPerSequence] page ids, zeros); a contiguous cache: one unread int. */
    public IntArray newBlockTable() {
        return new IntArray(cacheSpec.paged() ? cacheSpec.slots() * cacheSpec.pagesPerSequence() : 1);
    }

    /** A step array for {@code slots} sequences (zeros: every slot empty and idle). */
    public static IntArray newStepArray(int slots) {
        if (slots < 1) {
            throw new InvalidArgumentException("slots", slots, "must be >= 1");
        }
        return new IntArray(3 * slots + 1);
    }

    /**
     * Writes a step (host side, before the engine's execution): slot b holds {@code lengthsAfter[b]} tokens
     * after this step's append, of which {@code newTokens[b]} are new (0: idle this step); the packed offsets
     * and the total follow. Checked: same length as the array's slots, 0 &lt;= n_b &lt;= L_b.
     */
    public static void setStep(IntArray step, int[] lengthsAfter, int[] newTokens) {
        InvalidArgumentException.requireNonNull("step", step);
        int slots = (step.getSize() - 1) / 3;
        if (step.getSize() != 3 * slots + 1 || slots < 1) {
            throw new InvalidArgumentException("step", step.getSize() + " ints", "must be 3*slots+1 ints (newStepArray)");
        }
        writeStep(step.getSegment(), slots, lengthsAfter, newTokens);
    }

    /** {@link #setStep(IntArray, int[], int[])} into the step words at the start of a stage array ({@link #stageLayout()}). */
    public void setStagedStep(TornadoNativeArray stage, int[] lengthsAfter, int[] newTokens) {
        requireTensor("stage", stage, stageLayout().halves(), "stageLayout().halves()");
        writeStep(stage.getSegment(), spec.batch(), lengthsAfter, newTokens);
    }

    private static void writeStep(MemorySegment words, int slots, int[] lengthsAfter, int[] newTokens) {
        InvalidArgumentException.requireNonNull("lengthsAfter", lengthsAfter);
        InvalidArgumentException.requireNonNull("newTokens", newTokens);
        if (lengthsAfter.length != slots || newTokens.length != slots) {
            throw new InvalidArgumentException("lengthsAfter/newTokens", lengthsAfter.length + "/" + newTokens.length,
                    "must have one entry per slot (" + slots + ")");
        }
        for (int b = 0; b < slots; b++) {
            if (newTokens[b] < 0 || newTokens[b] > lengthsAfter[b]) {
                throw new InvalidArgumentException("newTokens[" + b + "]", newTokens[b],
                        "must be in [0, lengthsAfter[" + b + "] = " + lengthsAfter[b] + "]");
            }
        }
        int offset = 0;
        for (int b = 0; b < slots; b++) {
            words.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, b, lengthsAfter[b]);
            words.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, slots + b, newTokens[b]);
            words.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, 2 * slots + b, offset);
            offset += newTokens[b];
        }
        words.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, 3 * slots, offset);
    }

    /**
     * Adds the append of this step's new tokens (a Java kernel, any position in the graph): n_b rows of slot b from {@code newK}/{@code newV}
     * [slots, Hkv, maxQueryLength, D] (BHSD) to positions L_b - n_b .. L_b - 1 of the cache. The cache is
     * read and written (declare it {@code FIRST_EXECUTION}: TornadoVM drops the upload of an array whose first
     * task only writes it).
     */
    public void addAppend(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                          TornadoNativeArray newK, TornadoNativeArray newV, TornadoNativeArray kCache, TornadoNativeArray vCache,
                          IntArray step, IntArray blockTable) {
        IntArray params = denseAppendParams(graph, newK, newV);
        addAppend(graph, graphName, scheduler, taskPrefix, newK, newV, params, denseQueries(), kCache, vCache, step,
                blockTable);
    }

    /**
     * The append with its parameters in {@code appendParams} (16 ints, {@link #appendParams}), an array the caller
     * declares and may change between executions (layout, dense or packed; packed rows come from the step array's
     * offsets), for up to {@code maxRows} new rows per slot. A Java kernel on every backend (a copy, bound by
     * memory like the PTX one; and it may sit anywhere in a graph, see the class comment on prebuilt tasks).
     */
    public void addAppend(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                          TornadoNativeArray newK, TornadoNativeArray newV, IntArray appendParams, int maxRows,
                          TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step, IntArray blockTable) {
        requireCache(kCache, vCache, step, blockTable);
        InvalidArgumentException.requireNonNull("newK", newK);
        InvalidArgumentException.requireNonNull("newV", newV);
        requireLength("appendParams", appendParams, 16, "16 ints (appendParams)");
        // The append is a Java kernel on every backend: one array type for all four (a bit copy, either type).
        if (!(kCache instanceof HalfFloatArray || kCache instanceof ShortArray)) {
            throw new InvalidArgumentException("kCache", kCache.getClass().getSimpleName(),
                    "must be a HalfFloatArray (fp16) or a ShortArray (bf16 bits)");
        }
        for (Object[] named : new Object[][] {{"vCache", vCache}, {"newK", newK}, {"newV", newV}}) {
            if (named[1].getClass() != kCache.getClass()) {
                throw new InvalidArgumentException((String) named[0], named[1].getClass().getSimpleName(),
                        "must be a " + kCache.getClass().getSimpleName() + " as kCache is");
            }
        }
        JavaCacheTasks.addAppend(graph, graphName, scheduler, taskPrefix, newK, newV, appendParams, kCache, vCache, step, blockTable);
    }

    /**
     * Adds this step's append and decode attention as one unit: on ptx-tornado ONE prebuilt task (the fused PTX
     * twin: each block first writes the new rows of its key range, then attends), which must be the FIRST task of
     * {@code graph} (see the class comment); on tornado-mma/tornado-simt the append and decode tasks. New K/V
     * [slots, Hkv, maxQueryLength, D] (BHSD), q and o [slots, Hq, maxQueryLength, D], lse as {@link #addDecode}.
     */
    public void addAppendAndDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                                   TornadoNativeArray newK, TornadoNativeArray newV, TornadoNativeArray q, TornadoNativeArray kCache,
                                   TornadoNativeArray vCache, IntArray step, IntArray blockTable, TornadoNativeArray o,
                                   FloatArray lse) {
        IntArray params = denseAppendParams(graph, newK, newV);
        addAppendAndDecode(graph, graphName, scheduler, taskPrefix, newK, newV, params, q, kCache, vCache, step, blockTable,
                o, lse);
    }

    /** {@link #addAppendAndDecode} with the new rows' parameters in {@code appendParams} (dense, declared by the caller). */
    public void addAppendAndDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                                   TornadoNativeArray newK, TornadoNativeArray newV, IntArray appendParams, TornadoNativeArray q,
                                   TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step, IntArray blockTable,
                                   TornadoNativeArray o, FloatArray lse) {
        if (!prebuilt) {
            addAppend(graph, graphName, scheduler, taskPrefix, newK, newV, appendParams, denseQueries(), kCache, vCache,
                    step, blockTable);
            addDecode(graph, graphName, scheduler, taskPrefix, q, kCache, vCache, step, blockTable, o, lse);
            return;
        }
        requireLength("appendParams", appendParams, 16, "16 ints (appendParams)");
        InvalidArgumentException.requireNonNull("newK", newK);
        InvalidArgumentException.requireNonNull("newV", newV);
        addFusedDecode(graph, graphName, scheduler, taskPrefix, Kind.CACHE_APPEND_DECODE_FUSED, q, kCache, vCache, step,
                blockTable, o, lse, newK, Access.READ_ONLY, newV, Access.READ_ONLY, appendParams, Access.READ_ONLY);
    }

    /**
     * Where the inputs of a staged call ({@link #addStagedAppendAndDecode}) lie in its one stage array, in halves
     * (fp16 elements): the step array's {@code 3*slots+1} int32 words from element 0, then q [slots, Hq,
     * maxQueryLength, D] at {@code qOffset}, new K and new V [slots, Hkv, maxQueryLength, D] at {@code newKOffset}
     * and {@code newVOffset}; {@code halves} elements in all. Each part starts on a 16-byte boundary.
     */
    public record StageLayout(int qOffset, int newKOffset, int newVOffset, int halves) {
    }

    /** The stage array's layout for this spec (see {@link StageLayout}). */
    public StageLayout stageLayout() {
        long q0 = Math.ceilDiv(2L * (3L * spec.batch() + 1), 8) * 8;
        long rowsPerHead = (long) denseQueries() * spec.headDim();
        long k0 = q0 + (long) spec.batch() * spec.heads() * rowsPerHead;
        long v0 = k0 + (long) spec.batch() * spec.kvHeads() * rowsPerHead;
        long end = v0 + (long) spec.batch() * spec.kvHeads() * rowsPerHead;
        if (end > Integer.MAX_VALUE) {
            throw new InvalidArgumentException("spec", spec, "a stage array holds at most " + Integer.MAX_VALUE + " halves");
        }
        return new StageLayout((int) q0, (int) k0, (int) v0, (int) end);
    }

    /**
     * {@link #addAppendAndDecode} on ptx-tornado with the step's per-execution inputs in ONE array, {@code stage}
     * ({@link #stageLayout()}: the step words, q, new K, new V), so that an execution that sends them sends one
     * array instead of four (TornadoVM spends several microseconds on each transfer of an execution). The one
     * prebuilt task of its graph, first, as {@link #addAppendAndDecode}. Write the step words with
     * {@link #setStagedStep}.
     */
    public void addStagedAppendAndDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                                         TornadoNativeArray stage, TornadoNativeArray kCache, TornadoNativeArray vCache,
                                         IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        if (!prebuilt) {
            throw new InvalidArgumentException("backendId", backendId, "staged tasks are ptx-tornado's (the Java "
                    + "kernels read the step from an IntArray): use addAppendAndDecode");
        }
        StageLayout layout = stageLayout();
        requireTensor("stage", stage, layout.halves(), "stageLayout().halves()");
        requireCache(kCache, vCache, blockTable);
        long lseRows = requireOutputs(o, lse);
        int maxNew = denseQueries();
        int[] words = appendParams(cacheSpec, denseNewStrides(maxNew), maxNew, false);
        words[CacheKernels.A_STAGE] = layout.qOffset();
        words[CacheKernels.A_STAGE + 1] = layout.newKOffset();
        words[CacheKernels.A_STAGE + 2] = layout.newVOffset();
        IntArray appendParams = IntArray.fromArray(words);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, appendParams);
        FusedDecode f = fusedDecode(graph, Kind.CACHE_STAGED_DECODE_FUSED, lse, lseRows);
        PrebuiltTasks.add(graph, scheduler, deviceBackend, graphName, taskPrefix + "decode", f.kernel, splits, f.rowBlocks,
                spec.batch() * spec.kvHeads(), stage, Access.READ_ONLY, kCache, Access.READ_WRITE, vCache,
                Access.READ_WRITE, o, Access.WRITE_ONLY, f.lse, Access.WRITE_ONLY, f.params, Access.READ_ONLY, blockTable,
                Access.READ_ONLY, f.workspace, Access.READ_WRITE, f.tickets, Access.READ_WRITE, appendParams,
                Access.READ_ONLY);
    }

    /**
     * {@link #addDecode} for queries that are one chunk of a longer run of each slot's new tokens (a packed call run
     * in dense chunks, as the inference device does): the step's packed-offset words hold, per slot, how many of its
     * queries come after the chunk (its lengths and counts are the chunk's: a causal chunk's length may end at its last
     * query, a non-causal one's is the slot's whole length), so that each query keeps its position in its sequence,
     * which the window is relative to. The Java cache kernels only (tornado-simt, tornado-mma).
     */
    public void addChunkedDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                                 TornadoNativeArray q, TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step,
                                 IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        if (prebuilt) {
            throw new InvalidArgumentException("backendId", backendId, "chunked decode tasks are the Java cache "
                    + "kernels' (tornado-simt, tornado-mma)");
        }
        long lseRows = requireDense(q, kCache, vCache, step, blockTable, o, lse);
        FloatArray lseOut = lse != null ? lse : deviceOnly(graph, new FloatArray(Math.toIntExact(lseRows)));
        javaTasks.addDecode(graph, graphName, scheduler, taskPrefix, q, kCache, vCache, step, blockTable, o, lseOut,
                lse != null, true);
    }

    /**
     * Adds decode attention (on ptx-tornado: the first task of the graph) (up to {@link #denseQueries()} new queries per slot, split-KV) of {@code q} over the
     * cache into {@code o} (both [slots, Hq, maxQueryLength, D] fp16) and, when not null, {@code lse}
     * ([slots, Hq, maxQueryLength] fp32, natural log). Its workspace arrays are added to the graph
     * ({@code FIRST_EXECUTION}: device only).
     */
    public void addDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                          TornadoNativeArray q, TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step,
                          IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        if (!prebuilt) {
            long lseRows = requireDense(q, kCache, vCache, step, blockTable, o, lse);
            FloatArray lseOut = lse != null ? lse : deviceOnly(graph, new FloatArray(Math.toIntExact(lseRows)));
            javaTasks.addDecode(graph, graphName, scheduler, taskPrefix, q, kCache, vCache, step, blockTable, o, lseOut,
                    lse != null, false);
            return;
        }
        addFusedDecode(graph, graphName, scheduler, taskPrefix, Kind.CACHE_DECODE_FUSED, q, kCache, vCache, step,
                blockTable, o, lse);
    }

    /**
     * The fused split-KV decode twin of {@code kind} (decode, or append + decode) as one prebuilt task; {@code extra}:
     * the arguments after the tickets (array, access pairs). The cache is read-write when the kernel appends.
     */
    private void addFusedDecode(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix, Kind kind,
                                TornadoNativeArray q, TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step,
                                IntArray blockTable, TornadoNativeArray o, FloatArray lse, Object... extra) {
        long lseRows = requireDense(q, kCache, vCache, step, blockTable, o, lse);
        FusedDecode f = fusedDecode(graph, kind, lse, lseRows);
        Access cache = extra.length > 0 ? Access.READ_WRITE : Access.READ_ONLY;
        List<Object> arguments = new java.util.ArrayList<>(List.of(q, Access.READ_ONLY, kCache, cache, vCache, cache,
                o, Access.WRITE_ONLY, f.lse, Access.WRITE_ONLY, f.params, Access.READ_ONLY, step, Access.READ_ONLY,
                blockTable, Access.READ_ONLY, f.workspace, Access.READ_WRITE, f.tickets, Access.READ_WRITE));
        arguments.addAll(List.of(extra));
        PrebuiltTasks.add(graph, scheduler, deviceBackend, graphName, taskPrefix + "decode", f.kernel, splits, f.rowBlocks,
                spec.batch() * spec.kvHeads(), arguments.toArray());
    }

    /** A fused decode twin's entry, row blocks and device-only arrays (lse: the caller's, or one of its own). */
    private record FusedDecode(KernelManifest.Kernel kernel, int rowBlocks, IntArray params, FloatArray workspace,
                               IntArray tickets, FloatArray lse) {
    }

    /** Picks the twin of {@code kind} for this spec and declares its params, workspace, tickets (and own lse) in the graph. */
    private FusedDecode fusedDecode(TaskGraph graph, Kind kind, FloatArray lse, long lseRows) {
        CacheAttentionSpec dense = spec.toBuilder().maxQueryLength(denseQueries()).build();
        IntArray params = IntArray.fromArray(KernelParams.forCache(dense, cacheSpec, false));
        params.set(KernelParams.P_KEYS_PER_SPLIT, 0);   // derived from the lengths by the kernel
        KernelManifest.Kernel kernel = twinKernel(kind, spec, cacheSpec);
        int rowBlocks = Math.ceilDiv(spec.groupSize() * denseQueries(), kernel.rowsPerBlock());
        FloatArray workspace = new FloatArray(Math.toIntExact((long) splits * lseRows * (spec.headDim() + 1)));
        IntArray tickets = new IntArray(rowBlocks * spec.batch() * spec.kvHeads());
        FloatArray lseOut = lse != null ? lse : new FloatArray(Math.toIntExact(lseRows));
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, lse != null ? new Object[] {params, workspace, tickets}
                : new Object[] {params, workspace, tickets, lseOut});
        return new FusedDecode(kernel, rowBlocks, params, workspace, tickets, lseOut);
    }

    /**
     * Adds packed (varlen) prefill over the cache (on ptx-tornado: the first task of the graph): the new tokens of each slot, packed along the sequence axis
     * ({@code q}, {@code o} [maxTotalQueries, Hq, D]; slot b's rows from its packed offset in the step array), each
     * attending to its cache (causal per prompt when the spec is), into {@code o} and, when not null, {@code lse}
     * ([Hq, maxTotalQueries]). Append the prompts' K/V first ({@link #addAppend} with packed parameters, or the
     * engine's own task). The grid covers prompts of up to {@code spec.maxQueryLength()} tokens.
     */
    public void addPrefill(TaskGraph graph, String graphName, GridScheduler scheduler, String taskPrefix,
                           TornadoNativeArray q, TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step,
                           IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        requireCache(kCache, vCache, step, blockTable);
        long rows = (long) spec.maxTotalQueries() * spec.heads();
        requireTensor("q", q, rows * spec.headDim(), "maxTotalQueries*heads*headDim");
        requireTensor("o", o, rows * spec.headDim(), "maxTotalQueries*heads*headDim");
        if (lse != null) {
            requireLength("lse", lse, rows, "heads*maxTotalQueries");
        }
        FloatArray lseOut = lse != null ? lse : deviceOnly(graph, new FloatArray(Math.toIntExact(rows)));
        if (!prebuilt) {
            javaTasks.addPrefill(graph, graphName, scheduler, taskPrefix, q, kCache, vCache, step, blockTable, o, lseOut,
                    lse != null);
            return;
        }
        IntArray params = IntArray.fromArray(KernelParams.forCache(spec, cacheSpec, true));
        params.set(KernelParams.P_WRITE_LSE, lse != null ? 1 : 0);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, params);
        KernelManifest.Kernel kernel = twinKernel(Kind.CACHE_PREFILL, spec, cacheSpec);
        int longestPrompt = Math.min(spec.maxQueryLength(), spec.maxTotalQueries());
        PrebuiltTasks.add(graph, scheduler, deviceBackend, graphName, taskPrefix + "prefill", kernel,
                Math.max(1, Math.ceilDiv(longestPrompt, kernel.rowsPerBlock())), spec.batch() * spec.heads(), 1,
                q, Access.READ_ONLY, kCache, Access.READ_ONLY, vCache, Access.READ_ONLY, o, Access.WRITE_ONLY,
                lseOut, Access.WRITE_ONLY, params, Access.READ_ONLY, step, Access.READ_ONLY, blockTable, Access.READ_ONLY);
    }

    private FloatArray deviceOnly(TaskGraph graph, FloatArray array) {
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, array);
        return array;
    }

    /**
     * Checks dense new K/V rows [slots, Hkv, maxQueryLength, D] and declares their append parameters
     * ({@code FIRST_EXECUTION}: constant) in {@code graph}.
     */
    private IntArray denseAppendParams(TaskGraph graph, TornadoNativeArray newK, TornadoNativeArray newV) {
        int maxNew = denseQueries();
        long rows = (long) spec.batch() * spec.kvHeads() * maxNew * spec.headDim();
        requireTensor("newK", newK, rows, "slots*kvHeads*maxQueryLength*headDim");
        requireTensor("newV", newV, rows, "slots*kvHeads*maxQueryLength*headDim");
        IntArray params = IntArray.fromArray(appendParams(cacheSpec, denseNewStrides(maxNew), maxNew, false));
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, params);
        return params;
    }

    /** Strides of new K/V [slots, Hkv, maxNew, D] (BHSD). */
    private TensorStrides denseNewStrides(int maxNew) {
        long d = spec.headDim();
        return new TensorStrides(spec.kvHeads() * maxNew * d, maxNew * d, d);
    }

    /** The TornadoVM twin of {@code kind} for a spec over a cache, reading arrays behind TornadoVM's array header. */
    private static KernelVariant twin(Kind kind, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return KernelVariant.of(kind, spec.dtype(), spec.headDim()).causal(spec.causal()).paged(cacheSpec.paged())
                .headerBytes(Math.toIntExact(TornadoNativeArray.ARRAY_HEADER));
    }

    /** The twin of {@code kind} with the spec's features, from the shipped manifest. */
    private static KernelManifest.Kernel twinKernel(Kind kind, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return KernelManifest.shipped().select(twin(kind, spec, cacheSpec).features(LaunchTable.features(spec.features())));
    }

    /** Checks a dense call's arrays; returns the lse rows, slots*heads*maxQueryLength. */
    private long requireDense(TornadoNativeArray q, TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step,
                              IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        requireCache(kCache, vCache, step, blockTable);
        requireTensor("q", q, (long) spec.batch() * spec.heads() * denseQueries() * spec.headDim(),
                "slots*heads*maxQueryLength*headDim");
        return requireOutputs(o, lse);
    }

    /** Checks a dense call's o and lse (may be null); returns the lse rows, slots*heads*maxQueryLength. */
    private long requireOutputs(TornadoNativeArray o, FloatArray lse) {
        long lseRows = (long) spec.batch() * spec.heads() * denseQueries();
        requireTensor("o", o, lseRows * spec.headDim(), "slots*heads*maxQueryLength*headDim");
        if (lse != null) {
            requireLength("lse", lse, lseRows, "slots*heads*maxQueryLength");
        }
        return lseRows;
    }

    private void requireCache(TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step, IntArray blockTable) {
        requireKv(kCache, vCache);
        requireLength("step", step, 3L * spec.batch() + 1, "3*slots+1 ints (newStepArray)");
        requireBlockTable(blockTable);
    }

    /** The staged call's cache arrays: its step words live in the stage array. */
    private void requireCache(TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray blockTable) {
        requireKv(kCache, vCache);
        requireBlockTable(blockTable);
    }

    private void requireKv(TornadoNativeArray kCache, TornadoNativeArray vCache) {
        requireTensor("kCache", kCache, cacheSpec.elements(), "cacheSpec.elements()");
        requireTensor("vCache", vCache, cacheSpec.elements(), "cacheSpec.elements()");
        if (kCache == vCache) {
            throw new InvalidArgumentException("vCache", "the kCache array", "must be another array than kCache");
        }
    }

    private void requireBlockTable(IntArray blockTable) {
        if (cacheSpec.paged()) {
            requireLength("blockTable", blockTable, (long) cacheSpec.slots() * cacheSpec.pagesPerSequence(),
                    "slots*pagesPerSequence ints (newBlockTable)");
        } else {
            InvalidArgumentException.requireNonNull("blockTable", blockTable);
        }
    }

    /** {@link #requireLength} for a 16-bit tensor, which the Java kernels need of {@link #arrayType()}. */
    private void requireTensor(String name, TornadoNativeArray array, long length, String what) {
        requireLength(name, array, length, what);
        if (!prebuilt && !arrayType().isInstance(array)) {
            throw new InvalidArgumentException(name, array.getClass().getSimpleName(), "must be a "
                    + arrayType().getSimpleName() + " (" + spec.dtype().label() + " on " + backendId + "'s Java kernels)");
        }
    }

    private static void requireLength(String name, TornadoNativeArray array, long length, String what) {
        InvalidArgumentException.requireNonNull(name, array);
        if (array.getSize() != length) {
            throw new InvalidArgumentException(name, array.getClass().getSimpleName() + "[" + array.getSize() + "]",
                    "must have " + length + " elements (" + what + ")");
        }
    }

    @Override
    public String toString() {
        return backendId + " cache attention " + spec + " over " + cacheSpec + ", " + splits + " splits";
    }
}
