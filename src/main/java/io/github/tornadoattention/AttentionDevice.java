package io.github.tornadoattention;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One backend's device: its memory, its stream, and what an inference engine holds on to there,
 * device tensors, KV caches and plans over capacities. Get it with {@link Attention#device(String)}.
 *
 * <p>Stream order: calls that take device tensors (copies, {@link KvCache#append}, plan calls)
 * enqueue on this device's stream and return; {@link #synchronize()} waits for all of them. A host
 * source may be reused when a call returns; a host destination holds its data after the
 * synchronisation. On the CPU device every call completes before it returns.
 *
 * <p>Counters for engines and tests: {@link #allocations()} counts device allocations made through
 * this device (a decode step after warm-up makes none).
 */
public abstract class AttentionDevice {
    private final String backendId;
    private final AtomicLong allocations;

    protected AttentionDevice(String backendId) {
        this(backendId, new AtomicLong());
    }

    /** A view of another device (e.g. on another stream) shares its allocation counter. */
    protected AttentionDevice(String backendId, AtomicLong allocations) {
        this.backendId = backendId;
        this.allocations = allocations;
    }

    public final String backendId() {
        return backendId;
    }

    /** The device's name, e.g. {@code NVIDIA H200 (sm_90)}. */
    public abstract String name();

    /** A new tensor of {@code length} elements (contents undefined until written). */
    public final DeviceTensor allocate(DType dtype, long length) {
        InvalidArgumentException.requireNonNull("dtype", dtype);
        if (length < 1 || length > Long.MAX_VALUE / 8) {
            throw new InvalidArgumentException("length", length, "must be in [1, " + Long.MAX_VALUE / 8 + "]");
        }
        return DirectMemory.allocate("length", length, "a " + dtype.label() + " tensor on " + backendId,
                directBytes(dtype, length), () -> allocateUnchecked(dtype, length));
    }

    /** {@link #allocate} without the direct-memory check, for a caller that checks (and reports) a whole structure. */
    final DeviceTensor allocateUnchecked(DType dtype, long length) {
        long address = malloc(dtype, length);
        allocations.incrementAndGet();
        return new DeviceTensor(this, dtype, length, address, true);
    }

    /**
     * Bytes of the JVM's direct memory ({@link DirectMemory}) a KV cache of {@code spec} takes on this device: the
     * TornadoVM devices keep each cache's arrays on the host as well as on the GPU; 0 on ptx-cuda (GPU memory) and
     * cpu-reference (native memory outside that limit). {@link #kvCache} checks it before allocating.
     */
    public final long directBytes(KvCacheSpec spec) {
        InvalidArgumentException.requireNonNull("spec", spec);
        return 2 * directBytes(spec.dtype(), spec.elements()) + directBytes(DType.INT32, KvCache.stepInfoLength(spec))
                + (spec.paged() ? directBytes(DType.INT32, KvCache.blockTableLength(spec)) : 0);
    }

    /**
     * Wraps {@code length} elements of device memory the engine owns, at {@code address} (a
     * CUdeviceptr on ptx-cuda), without copying. Closing the tensor leaves the memory alone. The device
     * checks the address first: ptx-cuda accepts memory of its CUDA device, the TornadoVM devices and
     * cpu-reference accept memory inside one of their own allocations; an address a device cannot check
     * is refused (never a crash).
     *
     * @throws InvalidArgumentException if the memory is not this device's
     * @throws UnsupportedOperationException if this device cannot check addresses
     */
    public final DeviceTensor wrap(long address, DType dtype, long length) {
        InvalidArgumentException.requireNonNull("dtype", dtype);
        if (address == 0) {
            throw new InvalidArgumentException("address", 0, "must be a device address, not null");
        }
        if (length < 1) {
            throw new InvalidArgumentException("length", length, "must be >= 1");
        }
        checkWrappable(address, length * dtype.bytes());
        return new DeviceTensor(this, dtype, length, address, false);
    }

    /**
     * This device on the engine's own stream ({@code stream}: a CUstream on ptx-cuda): the returned
     * view enqueues there and shares memory, caches and counters with this one.
     */
    public AttentionDevice onStream(long stream) {
        throw new UnsupportedOperationException(backendId + " has no streams: every call completes before it returns");
    }

    /** A KV cache on this device: zero lengths, storage allocated now. */
    public final KvCache kvCache(KvCacheSpec spec) {
        return new KvCache(this, InvalidArgumentException.requireNonNull("spec", spec));
    }

    /** A plan for attention of new tokens over caches of {@code cacheSpec}, for every step. */
    public final CacheAttentionPlan plan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        InvalidArgumentException.requireNonNull("spec", spec);
        InvalidArgumentException.requireNonNull("cacheSpec", cacheSpec);
        spec.checkCache(cacheSpec);
        return newCachePlan(spec, cacheSpec);
    }

    /**
     * Merges partial attention results over disjoint key sets (cascade or shared-prefix attention,
     * caches split across devices): {@code oParts} [parts, rows, headDim] of o's element type (fp16 or bf16) and {@code lseParts}
     * [parts, rows] fp32 (natural log) into {@code o} [rows, headDim] and, when not null, {@code lse}:
     * lse = log(sum_i exp(lse_i)), O = sum_i exp(lse_i - lse) O_i; parts with lse_i = -inf weigh 0,
     * a row with none gives O = 0 and lse = -inf.
     */
    public final void mergeStates(DeviceTensor oParts, DeviceTensor lseParts, int parts, int headDim, DeviceTensor o,
                                  DeviceTensor lse) {
        InvalidArgumentException.requireNonNull("oParts", oParts);
        InvalidArgumentException.requireNonNull("lseParts", lseParts);
        InvalidArgumentException.requireNonNull("o", o);
        if (parts < 1) {
            throw new InvalidArgumentException("parts", parts, "must be >= 1");
        }
        if (headDim < 8 || headDim % 8 != 0) {
            throw new InvalidArgumentException("headDim", headDim, "must be a positive multiple of 8");
        }
        long rows = o.length() / headDim;
        o.requireOpen("o");
        if (o.dtype() != DType.FP16 && o.dtype() != DType.BF16) {
            throw new InvalidArgumentException("o.dtype", o.dtype().label(), "must be fp16 or bf16");
        }
        o.require("o", this, o.dtype(), rows * headDim, "rows*headDim");
        if (oParts.dtype() != o.dtype()) {   // one element type per call
            throw new InvalidArgumentException("oParts.dtype", oParts.dtype().label(), "must equal o's " + o.dtype().label());
        }
        oParts.require("oParts", this, o.dtype(), parts * rows * headDim, "parts*rows*headDim");
        lseParts.require("lseParts", this, DType.FP32, parts * rows, "parts*rows");
        if (lse != null) {
            lse.require("lse", this, DType.FP32, rows, "rows");
        }
        merge(oParts, lseParts, parts, rows, headDim, o, lse);
    }

    /**
     * Runs {@code ops} in order, each enqueueing device work, and returns the device time of each
     * (CUDA events around each op; waits for all of them): kernel time without the gaps between
     * launches. Empty where the device has no timer (the CPU device).
     */
    public java.util.Optional<double[]> timeEach(java.util.List<Runnable> ops) {
        for (Runnable op : ops) {
            op.run();
        }
        return java.util.Optional.empty();
    }

    /** Waits for everything enqueued on this device's stream. */
    public abstract void synchronize();

    /** Device allocations made through this device so far (tensors, caches, plans). */
    public final long allocations() {
        return allocations.get();
    }

    /**
     * Task graphs built and kernels compiled through this device so far (TornadoVM devices: an execution
     * plan per KV cache; 0 where kernels come precompiled and are loaded once): a step after warm-up
     * compiles nothing.
     */
    public long compilations() {
        return 0;
    }

    /** Throws unless {@code tensor} lives on this device (any stream view of it). */
    public final void requireSame(String argument, DeviceTensor tensor) {
        if (!sameMemory(tensor.device())) {
            throw new InvalidArgumentException(argument, tensor, "must be on " + name() + " (" + backendId + ")");
        }
    }

    /** Whether {@code other} shares this device's memory (the same device, perhaps another stream). */
    protected boolean sameMemory(AttentionDevice other) {
        return other == this;
    }

    /** Counts an allocation a backend made outside {@link #allocate} (workspaces). */
    protected final void countAllocation() {
        allocations.incrementAndGet();
    }

    protected final AtomicLong allocationCounter() {
        return allocations;
    }

    // ---- what a backend provides (addresses are device addresses, sizes in bytes)

    /**
     * Bytes of the JVM's direct memory an allocation of {@code length} elements of {@code dtype} takes (TornadoVM
     * arrays: their header and data); 0, the default, where {@link #malloc} takes none.
     */
    protected long directBytes(DType dtype, long length) {
        return 0;
    }

    /** Device memory for {@code length} elements of {@code dtype} (backends that allocate typed arrays need both). */
    protected abstract long malloc(DType dtype, long length);

    protected abstract void free(long address, long bytes);

    /**
     * Throws unless [address, address + bytes) is memory of this device that its kernels and copies
     * may use. A device that cannot tell keeps this default and refuses every {@link #wrap}: an
     * unchecked address would crash the JVM on the first copy.
     */
    protected void checkWrappable(long address, long bytes) {
        throw new UnsupportedOperationException(backendId + " (" + name() + ") cannot check that address 0x"
                + Long.toHexString(address) + " is its memory, so it wraps none: allocate tensors with allocate()");
    }

    protected abstract void copyToDevice(long destination, MemorySegment source, long bytes);

    protected abstract void copyToHost(MemorySegment destination, long source, long bytes);

    protected abstract void copyOnDevice(long destination, long source, long bytes);

    /** Writes {@code count} ints of {@code values} to {@code destination}, stream ordered (small metadata). */
    protected abstract void uploadInts(long destination, int[] values, int from, int count);

    /** Writes the new tokens of the cache's last append (see {@link KvCache.Append}) into its storage. */
    protected abstract void appendToCache(KvCache cache, KvCache.Append append);

    protected abstract CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec);

    protected abstract void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim,
                                  DeviceTensor o, DeviceTensor lse);
}
