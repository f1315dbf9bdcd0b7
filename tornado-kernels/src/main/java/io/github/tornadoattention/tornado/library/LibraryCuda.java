package io.github.tornadoattention.tornado.library;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.charset.StandardCharsets;

/**
 * The CUDA driver calls of the attention library provider, in a context that is not ours (TornadoVM's
 * CUDA backend makes its own with cuCtxCreate): push it, work, pop it, so the caller's current context
 * is left as it was. A separate small binding from the ptx-cuda host's {@code CudaDriver} because that
 * one is reached only through {@code CudaContext}, which retains the device's primary context (device
 * memory TornadoVM's engine would pay for) and offers no push/pop. An interface, so the provider's
 * logic is tested without a GPU.
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

    /** java.lang.foreign binding of the calls above; every CUresult is checked. */
    final class Driver implements LibraryCuda {
        private static final Linker LINKER = Linker.nativeLinker();
        private final SymbolLookup lib = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
        private final MethodHandle cuGetErrorName = bind("cuGetErrorName", JAVA_INT, ADDRESS);
        private final MethodHandle cuCtxPushCurrent = bind("cuCtxPushCurrent_v2", JAVA_LONG);
        private final MethodHandle cuCtxPopCurrent = bind("cuCtxPopCurrent_v2", ADDRESS);
        private final MethodHandle cuCtxGetDevice = bind("cuCtxGetDevice", ADDRESS);
        private final MethodHandle cuDeviceGetAttribute = bind("cuDeviceGetAttribute", ADDRESS, JAVA_INT, JAVA_INT);
        private final MethodHandle cuModuleLoadData = bind("cuModuleLoadData", ADDRESS, ADDRESS);
        private final MethodHandle cuModuleGetFunction = bind("cuModuleGetFunction", ADDRESS, JAVA_LONG, ADDRESS);
        private final MethodHandle cuModuleUnload = bind("cuModuleUnload", JAVA_LONG);
        private final MethodHandle cuMemAlloc = bind("cuMemAlloc_v2", ADDRESS, JAVA_LONG);
        private final MethodHandle cuMemFree = bind("cuMemFree_v2", JAVA_LONG);
        private final MethodHandle cuMemcpyHtoD = bind("cuMemcpyHtoD_v2", JAVA_LONG, ADDRESS, JAVA_LONG);
        private final MethodHandle cuLaunchKernel = bind("cuLaunchKernel", JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT,
                JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS, ADDRESS);

        private MethodHandle bind(String name, java.lang.foreign.MemoryLayout... args) {
            MemorySegment symbol = lib.find(name)
                    .orElseThrow(() -> new IllegalStateException("libcuda.so.1 has no symbol " + name));
            return LINKER.downcallHandle(symbol, FunctionDescriptor.of(JAVA_INT, args));
        }

        @FunctionalInterface
        private interface Call {
            int invoke(Arena arena) throws Throwable;
        }

        private void check(String name, Call call) {
            int result;
            try (Arena arena = Arena.ofConfined()) {
                result = call.invoke(arena);
            } catch (RuntimeException | Error e) {
                throw e;
            } catch (Throwable t) {
                throw new IllegalStateException(name, t);
            }
            if (result != 0) {
                throw new IllegalStateException(name + " failed: " + errorName(result));
            }
        }

        private String errorName(int result) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(ADDRESS);
                if ((int) cuGetErrorName.invokeExact(result, out) != 0) {
                    return "CUresult " + result;
                }
                return out.get(ADDRESS, 0).reinterpret(256).getString(0, StandardCharsets.US_ASCII);
            } catch (Throwable t) {
                return "CUresult " + result;
            }
        }

        private long outLong(String name, java.util.function.Function<MemorySegment, Call> call) {
            long[] value = new long[1];
            check(name, arena -> {
                MemorySegment out = arena.allocate(JAVA_LONG);
                int r = call.apply(out).invoke(arena);
                value[0] = out.get(JAVA_LONG, 0);
                return r;
            });
            return value[0];
        }

        @Override
        public void pushContext(long context) {
            check("cuCtxPushCurrent", a -> (int) cuCtxPushCurrent.invokeExact(context));
        }

        @Override
        public void popContext() {
            check("cuCtxPopCurrent", a -> (int) cuCtxPopCurrent.invokeExact(a.allocate(JAVA_LONG)));
        }

        @Override
        public int computeCapability() {
            int device = (int) outLong("cuCtxGetDevice", out -> a -> (int) cuCtxGetDevice.invokeExact(out));
            int major = (int) outLong("cuDeviceGetAttribute", out -> a -> (int) cuDeviceGetAttribute.invokeExact(out, 75, device));
            int minor = (int) outLong("cuDeviceGetAttribute", out -> a -> (int) cuDeviceGetAttribute.invokeExact(out, 76, device));
            return 10 * major + minor;
        }

        @Override
        public long loadModule(String ptx) {
            return outLong("cuModuleLoadData", out -> a -> (int) cuModuleLoadData.invokeExact(out,
                    a.allocateFrom(ptx, StandardCharsets.US_ASCII)));
        }

        @Override
        public long function(long module, String entry) {
            return outLong("cuModuleGetFunction(" + entry + ")",
                    out -> a -> (int) cuModuleGetFunction.invokeExact(out, module, a.allocateFrom(entry)));
        }

        @Override
        public void unloadModule(long module) {
            check("cuModuleUnload", a -> (int) cuModuleUnload.invokeExact(module));
        }

        @Override
        public long malloc(long bytes) {
            return outLong("cuMemAlloc(" + bytes + " bytes)", out -> a -> (int) cuMemAlloc.invokeExact(out, bytes));
        }

        @Override
        public void free(long pointer) {
            check("cuMemFree", a -> (int) cuMemFree.invokeExact(pointer));
        }

        @Override
        public void copyToDevice(long destination, int[] values) {
            check("cuMemcpyHtoD", a -> (int) cuMemcpyHtoD.invokeExact(destination, a.allocateFrom(JAVA_INT, values),
                    4L * values.length));
        }

        @Override
        public void launch(long function, int gridX, int gridY, int gridZ, int blockX, long stream, long[] arguments) {
            check("cuLaunchKernel", a -> {
                MemorySegment values = a.allocate(JAVA_LONG, arguments.length);
                MemorySegment pointers = a.allocate(ADDRESS, arguments.length);
                for (int i = 0; i < arguments.length; i++) {
                    // An int argument is the low 4 bytes of its 8-byte slot (little-endian hosts).
                    values.setAtIndex(JAVA_LONG, i, arguments[i]);
                    pointers.setAtIndex(ADDRESS, i, values.asSlice(8L * i, 8));
                }
                return (int) cuLaunchKernel.invokeExact(function, gridX, gridY, gridZ, blockX, 1, 1, 0, stream, pointers,
                        MemorySegment.NULL);
            });
        }
    }
}
