package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelManifest.Kernel;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The ptx-cuda device: memory from cuMemAlloc in the process's CUDA context, every call enqueued on
 * one CUDA stream (the library's own, or the engine's through {@link #onStream}). Small per-step
 * metadata (lengths, block-table entries) goes up through a ring of page-locked memory, so that
 * uploads are truly asynchronous and cost no allocation.
 */
public final class CudaDevice extends AttentionDevice {

    private final CudaContext cuda;
    private final CudaDriver driver;
    private final long stream;
    private final boolean ownsStream;
    private final int ordinal;
    private final UploadRing ring;
    private final Arena arena = Arena.ofShared();
    private final KernelArgs appendArgs = new KernelArgs(arena, 19);
    private final KernelArgs mergeArgs = new KernelArgs(arena, 7);
    private final java.util.concurrent.ConcurrentHashMap<String, Long> functions = new java.util.concurrent.ConcurrentHashMap<>();

    CudaDevice(CudaContext cuda) {
        this(cuda, 0, new AtomicLong(), -1);
    }

    private CudaDevice(CudaContext cuda, long engineStream, AtomicLong allocations, int knownOrdinal) {
        super(io.github.tornadoattention.Backends.PTX_CUDA, allocations);
        this.cuda = cuda;
        this.driver = cuda.driver();
        cuda.makeCurrent();
        this.ownsStream = engineStream == 0;
        this.stream = ownsStream ? driver.createStream() : engineStream;
        if (knownOrdinal >= 0) {
            this.ordinal = knownOrdinal;
        } else {
            long probe = driver.malloc(256);
            this.ordinal = driver.deviceOrdinalOf(probe);
            driver.free(probe);
        }
        this.ring = new UploadRing(driver, stream);
    }

    @Override
    public String name() {
        return cuda.deviceName() + " (CUDA device " + ordinal + ")";
    }

    CudaContext context() {
        return cuda;
    }

    long stream() {
        return stream;
    }

    @Override
    public AttentionDevice onStream(long engineStream) {
        if (engineStream == 0) {
            throw new InvalidArgumentException("stream", 0, "must be a CUstream the engine created (the legacy default stream is not supported)");
        }
        return new CudaDevice(cuda, engineStream, allocationCounter(), ordinal);
    }

    @Override
    protected boolean sameMemory(AttentionDevice other) {
        return other instanceof CudaDevice c && c.cuda == cuda;
    }

    @Override
    public void synchronize() {
        cuda.makeCurrent();
        driver.synchronize(stream);
    }

    private long[] events = new long[0];

    @Override
    public synchronized java.util.Optional<double[]> timeEach(java.util.List<Runnable> ops) {
        cuda.makeCurrent();
        if (events.length < 2 * ops.size()) {
            long[] more = java.util.Arrays.copyOf(events, 2 * ops.size());
            for (int i = events.length; i < more.length; i++) {
                more[i] = driver.createEvent();
            }
            events = more;
        }
        for (int i = 0; i < ops.size(); i++) {
            driver.recordEvent(events[2 * i], stream);
            ops.get(i).run();
            driver.recordEvent(events[2 * i + 1], stream);
        }
        double[] millis = new double[ops.size()];
        for (int i = 0; i < ops.size(); i++) {
            millis[i] = driver.elapsedMillis(events[2 * i], events[2 * i + 1]);
        }
        return java.util.Optional.of(millis);
    }

    /** A plan's own device buffer, counted with this device's allocations. */
    long allocateCounted(long bytes) {
        cuda.makeCurrent();
        long pointer = driver.malloc(bytes);
        countAllocation();
        return pointer;
    }

    @Override
    protected long malloc(io.github.tornadoattention.DType dtype, long length) {
        cuda.makeCurrent();
        return driver.malloc(length * dtype.bytes());
    }

    @Override
    protected void free(long address, long bytes) {
        cuda.makeCurrent();
        driver.free(address);
    }

    @Override
    protected void checkWrappable(long address, long bytes) {
        if (address % 16 != 0) {
            throw new InvalidArgumentException("address", "0x" + Long.toHexString(address),
                    "must be 16-byte aligned (the kernels move 16-byte vectors)");
        }
        int owner = driver.deviceOrdinalOf(address);
        if (owner != ordinal) {
            throw new InvalidArgumentException("address", "0x" + Long.toHexString(address),
                    owner < 0 ? "must be CUDA device memory" : "is memory of CUDA device " + owner + ", not of " + name());
        }
    }

    @Override
    protected void copyToDevice(long destination, MemorySegment source, long bytes) {
        cuda.makeCurrent();
        driver.copyToDevice(destination, source, bytes, stream);
    }

    @Override
    protected void copyToHost(MemorySegment destination, long source, long bytes) {
        cuda.makeCurrent();
        driver.copyToHost(destination, source, bytes, stream);
    }

    @Override
    protected void copyOnDevice(long destination, long source, long bytes) {
        cuda.makeCurrent();
        driver.copyOnDevice(destination, source, bytes, stream);
    }

    @Override
    protected synchronized void uploadInts(long destination, int[] values, int from, int count) {
        cuda.makeCurrent();
        // Through the ring in pieces: a whole block table (slots x pages per sequence) can exceed a ring half.
        for (int done = 0; done < count; done += UploadRing.MAX_INTS) {
            int n = Math.min(UploadRing.MAX_INTS, count - done);
            MemorySegment staged = ring.take(4L * n);
            MemorySegment.copy(values, from + done, staged, JAVA_INT, 0, n);
            driver.copyToDevice(destination + 4L * done, staged, 4L * n, stream);
        }
    }

    @Override
    protected synchronized void appendToCache(KvCache cache, KvCache.Append append) {
        KvCacheSpec spec = cache.spec();
        TensorStrides s = append.strides();
        TensorStrides storage = spec.strides();
        long step = cache.stepInfo().address();
        appendArgs.pointer(0, cache.keys().address())
                .pointer(1, cache.values().address())
                .pointer(2, append.keys().address())
                .pointer(3, append.values().address())
                .pointer(4, step)
                .pointer(5, spec.paged() ? cache.blockTable().address() : 0)
                .pointer(6, append.packed() ? step + 4L * 2 * spec.slots() : 0)
                .integer(7, spec.slots())
                .integer(8, spec.kvHeads())
                .integer(9, spec.headDim())
                .integer(10, append.maxNew())
                .integer(11, Math.toIntExact(s.batch()))
                .integer(12, Math.toIntExact(s.head()))
                .integer(13, Math.toIntExact(s.row()))
                .integer(14, Math.toIntExact(storage.batch()))
                .integer(15, Math.toIntExact(storage.head()))
                .integer(16, Math.toIntExact(storage.row()))
                .integer(17, spec.pageSize())
                .integer(18, spec.pagesPerSequence());
        // The append entry of the cache's element type (a variant field like any other).
        Kernel kernel = cuda.manifest().select(KernelVariant.of(Kind.CACHE_APPEND, spec.dtype(), spec.headDim())
                .paged(spec.paged()));
        int rowsPerBlock = kernel.threads() / (spec.headDim() / 8);
        int gridX = (append.maxNew() + rowsPerBlock - 1) / rowsPerBlock;
        launch(kernel, function(kernel), gridX, spec.kvHeads(), spec.slots(), appendArgs);
    }

    @Override
    protected CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return new CudaCachePlan(this, spec, cacheSpec);
    }

    @Override
    protected synchronized void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim,
                                      DeviceTensor o, DeviceTensor lse) {
        mergeArgs.pointer(0, oParts.address()).pointer(1, lseParts.address()).pointer(2, o.address())
                .pointer(3, lse == null ? 0 : lse.address()).integer(4, parts);
        mergeArgs.int64(5, rows).integer(6, headDim);
        Kernel kernel = cuda.manifest().select(KernelVariant.of(Kind.MERGE_STATES, o.dtype(), headDim));
        long rowsPerBlock = kernel.threads() / (headDim / 8);
        launch(kernel, function(kernel), Math.toIntExact((rows + rowsPerBlock - 1) / rowsPerBlock), 1, 1, mergeArgs);
    }

    /** The function handle of {@code kernel} (its entry is JIT-compiled once, on first use: {@link CudaContext#function}). */
    long function(Kernel kernel) {
        return functions.computeIfAbsent(kernel.module() + ":" + kernel.entry(), e -> cuda.function(kernel));
    }

    /** Launches {@code function}, {@code kernel}'s (see {@link #function}), with its block and dynamic shared memory, on this device's stream. */
    void launch(Kernel kernel, long function, int gridX, int gridY, int gridZ, KernelArgs args) {
        cuda.makeCurrent();
        driver.launch(function, gridX, gridY, gridZ, kernel.threads(), kernel.dynamicSharedBytes(), stream, args.segment());
    }

    /**
     * Page-locked staging for small uploads: a ring in two halves; before writing into a half again,
     * wait for the event recorded when it was last left (long completed in a steady loop).
     */
    static final class UploadRing {
        static final long BYTES = 1 << 20;
        private static final long HALF = BYTES / 2;
        /** The most ints one upload stages (a quarter of the ring). */
        static final int MAX_INTS = (int) (BYTES / 16);
        private final CudaDriver driver;
        private final long stream;
        private MemorySegment memory;
        private final long[] halfDone = new long[2];
        private int half;
        private long offset;

        UploadRing(CudaDriver driver, long stream) {
            this.driver = driver;
            this.stream = stream;
        }

        MemorySegment take(long bytes) {
            if (bytes > HALF) {
                throw new InvalidArgumentException("upload bytes", bytes, "metadata uploads must be <= " + HALF);
            }
            if (memory == null) {
                memory = driver.hostAlloc(BYTES);
                halfDone[0] = driver.createEvent();
                halfDone[1] = driver.createEvent();
            }
            Place p = place(half, offset, bytes);
            if (p.half() != half) {
                // Leaving this half: mark it, and make sure the other half's last uploads have been read.
                driver.recordEvent(halfDone[half], stream);
                driver.synchronizeEvent(halfDone[p.half()]);
            }
            half = p.half();
            offset = p.next();
            return memory.asSlice(p.at(), bytes);
        }

        /** Where an upload of {@code bytes} goes: the half it fills, its offset, and the fill after it (16-byte aligned). */
        record Place(int half, long at, long next) {
        }

        /** The ring's arithmetic, apart from the driver: fill {@code half} from {@code offset}, or start the other half. */
        static Place place(int half, long offset, long bytes) {
            long aligned = (bytes + 15) & ~15L;
            if (offset + aligned <= (half + 1) * HALF) {
                return new Place(half, offset, offset + aligned);
            }
            int other = 1 - half;
            return new Place(other, other * HALF, other * HALF + aligned);
        }
    }
}
