package io.github.tornadoattention.tornado.library;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.github.tornadoattention.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * The CUDA driver calls of the attention library provider, in a context that is not ours (TornadoVM's
 * CUDA backend makes its own with cuCtxCreate): push it, work, pop it, so the caller's current context
 * is left as it was. It uses the driver binding directly, not the ptx-cuda host's {@code CudaContext}, which
 * retains the device's primary context (device memory TornadoVM's engine would pay for). An interface, so
 * the provider's logic is tested without a GPU.
 */
public interface LibraryCuda {

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

    /** cuLaunchKernel with 1-D blocks, no dynamic shared memory, one 8-byte slot per argument. */
    void launch(long function, int gridX, int gridY, int gridZ, int blockX, long stream, long[] arguments);

    /** The driver in {@code libcuda.so.1}. */
    static LibraryCuda driver() {
        return new Driver();
    }

    /** The project's one driver binding ({@link CudaDriver}); every CUresult is checked. */
    final class Driver implements LibraryCuda {
        private final CudaDriver cuda = CudaDriver.load();

        @Override
        public void pushContext(long context) {
            cuda.pushContext(context);
        }

        @Override
        public void popContext() {
            cuda.popContext();
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
        public void launch(long function, int gridX, int gridY, int gridZ, int blockX, long stream, long[] arguments) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment values = arena.allocate(JAVA_LONG, arguments.length);
                MemorySegment pointers = arena.allocate(ADDRESS, arguments.length);
                for (int i = 0; i < arguments.length; i++) {
                    // An int argument is the low 4 bytes of its 8-byte slot (little-endian hosts).
                    values.setAtIndex(JAVA_LONG, i, arguments[i]);
                    pointers.setAtIndex(ADDRESS, i, values.asSlice(8L * i, 8));
                }
                cuda.launch(function, gridX, gridY, gridZ, blockX, 0, stream, pointers);
            }
        }
    }
}
