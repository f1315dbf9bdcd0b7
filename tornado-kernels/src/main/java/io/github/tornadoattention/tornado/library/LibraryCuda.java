package io.github.tornadoattention.tornado.library;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.github.tornadoattention.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SegmentAllocator;

/**
 * The CUDA driver calls of the attention library provider, in a context that is not ours (TornadoVM's
 * CUDA backend makes its own with cuCtxCreate and makes it current before its own calls): where it is not current,
 * push it, work, pop it, so the caller's current context is left as it was. It uses the driver binding directly, not
 * the ptx-cuda host's {@code CudaContext}, which retains the device's primary context (device memory TornadoVM's engine
 * would pay for). An interface, so the provider's logic is tested without a GPU.
 *
 * <p>A launch takes its {@code kernelParams} ready-made ({@link #kernelParams}, once per cached launch): cuLaunchKernel
 * copies the argument values during the call, whether it enqueues the launch or records it into a CUDA graph being
 * captured, so one block serves every later launch of the same arguments.
 */
public interface LibraryCuda {

    /** This thread's current context (0: none). */
    long currentContext();

    void pushContext(long context);

    void popContext();

    /** Compute capability of the current context's device, e.g. 90. */
    int computeCapability();

    long loadModule(String ptx);

    long function(long module, String entry);

    void unloadModule(long module);

    long malloc(long bytes);

    void free(long pointer);

    /** Synchronous host-to-device copy (made before any capture: never inside a CUDA graph). */
    void copyToDevice(long destination, int[] values);

    /** Host memory for kernel arguments that outlives the launches (closed when its launches are dropped). */
    default Arena argumentArena() {
        return Arena.ofShared();
    }

    /** The {@code kernelParams} of a launch with {@code arguments}, allocated from {@code allocator} ({@link #marshal}). */
    default MemorySegment kernelParams(SegmentAllocator allocator, long[] arguments) {
        return marshal(allocator, arguments);
    }

    /**
     * cuLaunchKernel with 1-D blocks and {@code sharedBytes} of dynamic shared memory; {@code kernelParams} as
     * {@link #kernelParams} made it. Nothing is allocated.
     */
    void launch(long function, int gridX, int gridY, int gridZ, int blockX, int sharedBytes, long stream,
                MemorySegment kernelParams);

    /** Lets {@code function} launch with {@code bytes} of dynamic shared memory (more than the default 48 KB). */
    void allowDynamicShared(long function, int bytes);

    /** Whether {@code stream} is being captured into a CUDA graph (events recorded then cannot be timed). */
    boolean isCapturing(long stream);

    /** A CUDA event of the current context, with timing. */
    long createEvent();

    void recordEvent(long event, long stream);

    /** Waits for {@code end}; the milliseconds of device time from {@code start} to it. */
    float elapsedMillis(long start, long end);

    void destroyEvent(long event);

    /**
     * One allocation: an 8-byte slot per argument (an int argument is the low 4 bytes of its slot, little-endian
     * hosts) and the {@code void*} array cuLaunchKernel takes, pointing at them; the array is returned.
     */
    static MemorySegment marshal(SegmentAllocator allocator, long[] arguments) {
        int n = arguments.length;
        MemorySegment block = allocator.allocate(16L * n, 8);
        MemorySegment pointers = block.asSlice(0, 8L * n), values = block.asSlice(8L * n, 8L * n);
        for (int i = 0; i < n; i++) {
            values.setAtIndex(JAVA_LONG, i, arguments[i]);
            pointers.setAtIndex(ADDRESS, i, values.asSlice(8L * i, 8));
        }
        return pointers;
    }

    /** The argument values a {@link #marshal}led {@code kernelParams} holds. */
    static long[] arguments(MemorySegment kernelParams) {
        long[] values = new long[Math.toIntExact(kernelParams.byteSize() / 8)];
        for (int i = 0; i < values.length; i++) {
            values[i] = kernelParams.getAtIndex(ADDRESS, i).reinterpret(8).get(JAVA_LONG, 0);
        }
        return values;
    }

    /** The driver in {@code libcuda.so.1}. */
    static LibraryCuda driver() {
        return new Driver(CudaDriver.load());
    }

    /** The project's one driver binding ({@link CudaDriver}); every CUresult is checked. */
    final class Driver implements LibraryCuda {
        private final CudaDriver cuda;
        /** The out-parameter of cuCtxGetCurrent and cuCtxPopCurrent (callers hold the context's lock). */
        private final MemorySegment scratch = Arena.ofAuto().allocate(JAVA_LONG);

        Driver(CudaDriver cuda) {
            this.cuda = cuda;
        }

        @Override
        public long currentContext() {
            return cuda.currentContext(scratch);
        }

        @Override
        public void pushContext(long context) {
            cuda.pushContext(context);
        }

        @Override
        public void popContext() {
            cuda.popContext(scratch);
        }

        @Override
        public int computeCapability() {
            return cuda.computeCapability(cuda.currentDevice());
        }

        @Override
        public long loadModule(String ptx) {
            return cuda.loadModule(ptx);
        }

        @Override
        public long function(long module, String entry) {
            return cuda.function(module, entry);
        }

        @Override
        public void unloadModule(long module) {
            cuda.unloadModule(module);
        }

        @Override
        public long malloc(long bytes) {
            return cuda.malloc(bytes);
        }

        @Override
        public void free(long pointer) {
            cuda.free(pointer);
        }

        @Override
        public void copyToDevice(long destination, int[] values) {
            cuda.copyToDevice(destination, values);
        }

        @Override
        public void launch(long function, int gridX, int gridY, int gridZ, int blockX, int sharedBytes, long stream,
                           MemorySegment kernelParams) {
            cuda.launch(function, gridX, gridY, gridZ, blockX, sharedBytes, stream, kernelParams);
        }

        @Override
        public void allowDynamicShared(long function, int bytes) {
            cuda.setMaxDynamicSharedBytes(function, bytes);
        }

        @Override
        public boolean isCapturing(long stream) {
            return cuda.isCapturing(stream);
        }

        @Override
        public long createEvent() {
            return cuda.createEvent();
        }

        @Override
        public void recordEvent(long event, long stream) {
            cuda.recordEvent(event, stream);
        }

        @Override
        public float elapsedMillis(long start, long end) {
            return cuda.elapsedMillis(start, end);
        }

        @Override
        public void destroyEvent(long event) {
            cuda.destroyEvent(event);
        }
    }
}
