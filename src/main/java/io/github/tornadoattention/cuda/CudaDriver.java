package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
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
 * The CUDA driver API calls the project makes, bound with java.lang.foreign (no JNI): the ptx-cuda host's
 * (through {@link CudaContext}) and the TornadoVM library task's, which works in a context TornadoVM made
 * (push it, work, pop it).
 * Handles ({@code CUcontext}, {@code CUmodule}, ...) and device pointers are plain {@code long}s.
 * Every call checks its CUresult and throws {@link CudaException} with the result's name.
 */
public final class CudaDriver {
    static final String LIBRARY = "libcuda.so.1";
    /** CU_DEVICE_ATTRIBUTE_* values from cuda.h. */
    static final int ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
    static final int ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
    static final int ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
    /** CU_JIT_ERROR_LOG_BUFFER and its size, for readable PTX load errors. */
    private static final int JIT_ERROR_LOG_BUFFER = 5;
    private static final int JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
    private static final int LOG_BYTES = 16 * 1024;

    private static final Linker LINKER = Linker.nativeLinker();
    private final SymbolLookup lib;
    private final MethodHandle cuGetErrorName;
    private final MethodHandle cuInit;
    private final MethodHandle cuDeviceGetCount;
    private final MethodHandle cuDeviceGet;
    private final MethodHandle cuDeviceGetName;
    private final MethodHandle cuDeviceGetAttribute;
    private final MethodHandle cuDevicePrimaryCtxRetain;
    private final MethodHandle cuCtxSetCurrent;
    private final MethodHandle cuModuleLoadDataEx;
    private final MethodHandle cuModuleGetFunction;
    private final MethodHandle cuMemAlloc;
    private final MethodHandle cuMemFree;
    private final MethodHandle cuMemcpyHtoDAsync;
    private final MethodHandle cuMemcpyDtoHAsync;
    private final MethodHandle cuStreamCreate;
    private final MethodHandle cuStreamSynchronize;
    private final MethodHandle cuStreamDestroy;
    private final MethodHandle cuEventCreate;
    private final MethodHandle cuEventRecord;
    private final MethodHandle cuEventSynchronize;
    private final MethodHandle cuEventElapsedTime;
    private final MethodHandle cuEventDestroy;
    private final MethodHandle cuStreamIsCapturing;
    private final MethodHandle cuLaunchKernel;
    private final MethodHandle cuMemcpyDtoDAsync;
    private final MethodHandle cuMemHostAlloc;
    private final MethodHandle cuMemFreeHost;
    private final MethodHandle cuPointerGetAttribute;
    private final MethodHandle cuCtxPushCurrent;
    private final MethodHandle cuCtxPopCurrent;
    private final MethodHandle cuCtxGetDevice;
    private final MethodHandle cuCtxGetCurrent;
    private final MethodHandle cuModuleUnload;
    private final MethodHandle cuMemcpyHtoD;
    private final MethodHandle cuFuncSetAttribute;
    /** CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: a kernel may launch with more than 48 KB of dynamic shared memory only after this is set. */
    static final int FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

    /**
     * Binds the driver library (the ptx-cuda host shares one through {@link CudaContext}).
     *
     * @throws IllegalArgumentException if {@value #LIBRARY} cannot be loaded (no NVIDIA driver)
     */
    public static CudaDriver load() {
        return new CudaDriver();
    }

    /**
     * Binds the driver library.
     *
     * @throws IllegalArgumentException if {@value #LIBRARY} cannot be loaded (no NVIDIA driver)
     */
    CudaDriver() {
        this(SymbolLookup.libraryLookup(LIBRARY, Arena.global()));
    }

    /** Binds the driver library at {@code library} (tests: the fake driver of tornado-kernels/tools/fakecuda). */
    CudaDriver(java.nio.file.Path library) {
        this(SymbolLookup.libraryLookup(library, Arena.global()));
    }

    private CudaDriver(SymbolLookup library) {
        lib = library;
        cuCtxPushCurrent = bind("cuCtxPushCurrent_v2", JAVA_LONG);
        cuCtxPopCurrent = bind("cuCtxPopCurrent_v2", ADDRESS);
        cuCtxGetDevice = bind("cuCtxGetDevice", ADDRESS);
        cuCtxGetCurrent = bind("cuCtxGetCurrent", ADDRESS);
        cuModuleUnload = bind("cuModuleUnload", JAVA_LONG);
        cuMemcpyHtoD = bind("cuMemcpyHtoD_v2", JAVA_LONG, ADDRESS, JAVA_LONG);
        cuFuncSetAttribute = bind("cuFuncSetAttribute", JAVA_LONG, JAVA_INT, JAVA_INT);
        cuGetErrorName = bind("cuGetErrorName", JAVA_INT, ADDRESS);
        cuInit = bind("cuInit", JAVA_INT);
        cuDeviceGetCount = bind("cuDeviceGetCount", ADDRESS);
        cuDeviceGet = bind("cuDeviceGet", ADDRESS, JAVA_INT);
        cuDeviceGetName = bind("cuDeviceGetName", ADDRESS, JAVA_INT, JAVA_INT);
        cuDeviceGetAttribute = bind("cuDeviceGetAttribute", ADDRESS, JAVA_INT, JAVA_INT);
        cuDevicePrimaryCtxRetain = bind("cuDevicePrimaryCtxRetain", ADDRESS, JAVA_INT);
        cuCtxSetCurrent = bind("cuCtxSetCurrent", JAVA_LONG);
        cuModuleLoadDataEx = bind("cuModuleLoadDataEx", ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS);
        cuModuleGetFunction = bind("cuModuleGetFunction", ADDRESS, JAVA_LONG, ADDRESS);
        cuMemAlloc = bind("cuMemAlloc_v2", ADDRESS, JAVA_LONG);
        cuMemFree = bind("cuMemFree_v2", JAVA_LONG);
        cuMemcpyHtoDAsync = bind("cuMemcpyHtoDAsync_v2", JAVA_LONG, ADDRESS, JAVA_LONG, JAVA_LONG);
        cuMemcpyDtoHAsync = bind("cuMemcpyDtoHAsync_v2", ADDRESS, JAVA_LONG, JAVA_LONG, JAVA_LONG);
        cuStreamCreate = bind("cuStreamCreate", ADDRESS, JAVA_INT);
        cuStreamSynchronize = bind("cuStreamSynchronize", JAVA_LONG);
        cuStreamDestroy = bind("cuStreamDestroy_v2", JAVA_LONG);
        cuEventCreate = bind("cuEventCreate", ADDRESS, JAVA_INT);
        cuEventRecord = bind("cuEventRecord", JAVA_LONG, JAVA_LONG);
        cuEventSynchronize = bind("cuEventSynchronize", JAVA_LONG);
        cuEventElapsedTime = bind("cuEventElapsedTime", ADDRESS, JAVA_LONG, JAVA_LONG);
        cuEventDestroy = bind("cuEventDestroy_v2", JAVA_LONG);
        cuStreamIsCapturing = bind("cuStreamIsCapturing", JAVA_LONG, ADDRESS);
        cuMemcpyDtoDAsync = bind("cuMemcpyDtoDAsync_v2", JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG);
        cuMemHostAlloc = bind("cuMemHostAlloc", ADDRESS, JAVA_LONG, JAVA_INT);
        cuMemFreeHost = bind("cuMemFreeHost", ADDRESS);
        cuPointerGetAttribute = bind("cuPointerGetAttribute", ADDRESS, JAVA_INT, JAVA_LONG);
        cuLaunchKernel = bind("cuLaunchKernel", JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT,
                JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS, ADDRESS);
    }

    private MethodHandle bind(String name, java.lang.foreign.MemoryLayout... args) {
        MemorySegment symbol = lib.find(name)
                .orElseThrow(() -> new IllegalArgumentException(LIBRARY + " has no symbol " + name));
        return LINKER.downcallHandle(symbol, FunctionDescriptor.of(JAVA_INT, args));
    }

    /** The CUresult's name, e.g. CUDA_ERROR_NO_DEVICE. */
    public String errorName(int result) {
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

    /** A downcall returning a CUresult. */
    @FunctionalInterface
    private interface Downcall {
        int invoke() throws Throwable;
    }

    /** Runs a downcall and throws {@link CudaException} unless it returned CUDA_SUCCESS. */
    private void call(String name, Downcall downcall) {
        call(name, downcall, () -> null);
    }

    /** As {@link #call(String, Downcall)}, with a detail (e.g. the JIT log) for the exception. */
    private void call(String name, Downcall downcall, java.util.function.Supplier<String> detail) {
        int result;
        try {
            result = downcall.invoke();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(name, t);
        }
        if (result != 0) {
            throw new CudaException(name, result, errorName(result), detail.get());
        }
    }

    public void init() {
        call("cuInit", () -> (int) cuInit.invokeExact(0));
    }

    public int deviceCount() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call("cuDeviceGetCount", () -> (int) cuDeviceGetCount.invokeExact(out));
            return out.get(JAVA_INT, 0);
        }
    }

    public int device(int ordinal) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call("cuDeviceGet", () -> (int) cuDeviceGet.invokeExact(out, ordinal));
            return out.get(JAVA_INT, 0);
        }
    }

    public String deviceName(int device) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment name = arena.allocate(256);
            call("cuDeviceGetName", () -> (int) cuDeviceGetName.invokeExact(name, 256, device));
            return name.getString(0, StandardCharsets.US_ASCII);
        }
    }

    public int deviceAttribute(int device, int attribute) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call("cuDeviceGetAttribute", () -> (int) cuDeviceGetAttribute.invokeExact(out, attribute, device));
            return out.get(JAVA_INT, 0);
        }
    }

    /** The device's primary context (shared with every other user of the driver in this process). */
    public long primaryContext(int device) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_LONG);
            call("cuDevicePrimaryCtxRetain", () -> (int) cuDevicePrimaryCtxRetain.invokeExact(out, device));
            return out.get(JAVA_LONG, 0);
        }
    }

    /** Contexts are current per thread; every entry point sets it, since plans may move between threads. */
    public void setCurrent(long context) {
        call("cuCtxSetCurrent", () -> (int) cuCtxSetCurrent.invokeExact(context));
    }

    /** Makes {@code context} current on this thread above the one that was (undo with {@link #popContext}). */
    public void pushContext(long context) {
        call("cuCtxPushCurrent", () -> (int) cuCtxPushCurrent.invokeExact(context));
    }

    public void popContext() {
        try (Arena arena = Arena.ofConfined()) {
            popContext(arena.allocate(JAVA_LONG));
        }
    }

    /** {@link #popContext()} with the caller's 8-byte {@code scratch} for the popped handle (no allocation). */
    public void popContext(MemorySegment scratch) {
        int result;
        try {
            result = (int) cuCtxPopCurrent.invokeExact(scratch);
        } catch (Throwable t) {
            throw downcallFailed("cuCtxPopCurrent", t);
        }
        check("cuCtxPopCurrent", result);
    }

    /** This thread's current context (0: none), read through the caller's 8-byte {@code scratch} (no allocation). */
    public long currentContext(MemorySegment scratch) {
        int result;
        try {
            result = (int) cuCtxGetCurrent.invokeExact(scratch);
        } catch (Throwable t) {
            throw downcallFailed("cuCtxGetCurrent", t);
        }
        check("cuCtxGetCurrent", result);
        return scratch.get(JAVA_LONG, 0);
    }

    /** The device of the current context. */
    public int currentDevice() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call("cuCtxGetDevice", () -> (int) cuCtxGetDevice.invokeExact(out));
            return out.get(JAVA_INT, 0);
        }
    }

    /** Compute capability of {@code device}, e.g. 89 for sm_89. */
    public int computeCapability(int device) {
        return 10 * deviceAttribute(device, ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) + deviceAttribute(device, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    }

    public void unloadModule(long module) {
        call("cuModuleUnload", () -> (int) cuModuleUnload.invokeExact(module));
    }

    /** Synchronous copy of {@code values} to the device (never inside a CUDA graph capture). */
    public void copyToDevice(long destination, int[] values) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment source = arena.allocateFrom(JAVA_INT, values);
            call("cuMemcpyHtoD", () -> (int) cuMemcpyHtoD.invokeExact(destination, source, 4L * values.length));
        }
    }

    /** JIT-compiles PTX text into a module; a failure carries the JIT's error log. */
    public long loadModule(String ptx) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment image = arena.allocateFrom(ptx, StandardCharsets.US_ASCII);
            MemorySegment log = arena.allocate(LOG_BYTES);
            MemorySegment options = arena.allocate(JAVA_INT, 2);
            options.setAtIndex(JAVA_INT, 0, JIT_ERROR_LOG_BUFFER);
            options.setAtIndex(JAVA_INT, 1, JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
            MemorySegment values = arena.allocate(ADDRESS, 2);
            values.setAtIndex(ADDRESS, 0, log);
            values.setAtIndex(ADDRESS, 1, MemorySegment.ofAddress(LOG_BYTES));
            MemorySegment out = arena.allocate(JAVA_LONG);
            call("cuModuleLoadDataEx", () -> (int) cuModuleLoadDataEx.invokeExact(out, image, 2, options, values),
                    () -> log.getString(0, StandardCharsets.US_ASCII).strip());
            return out.get(JAVA_LONG, 0);
        }
    }

    public long function(long module, String name) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_LONG);
            MemorySegment cName = arena.allocateFrom(name);
            call("cuModuleGetFunction(" + name + ")", () -> (int) cuModuleGetFunction.invokeExact(out, module, cName));
            return out.get(JAVA_LONG, 0);
        }
    }

    /** Lets {@code function} launch with up to {@code bytes} of dynamic shared memory (more than the default 48 KB). */
    public void setMaxDynamicSharedBytes(long function, int bytes) {
        call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + bytes + ")", () -> (int) cuFuncSetAttribute.invokeExact(
                function, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
    }

    public long malloc(long bytes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_LONG);
            call("cuMemAlloc(" + bytes + " bytes)", () -> (int) cuMemAlloc.invokeExact(out, bytes));
            return out.get(JAVA_LONG, 0);
        }
    }

    public void free(long devicePointer) {
        call("cuMemFree", () -> (int) cuMemFree.invokeExact(devicePointer));
    }

    public void copyToDevice(long destination, MemorySegment source, long bytes, long stream) {
        call("cuMemcpyHtoDAsync", () -> (int) cuMemcpyHtoDAsync.invokeExact(destination, source, bytes, stream));
    }

    public void copyToHost(MemorySegment destination, long source, long bytes, long stream) {
        call("cuMemcpyDtoHAsync", () -> (int) cuMemcpyDtoHAsync.invokeExact(destination, source, bytes, stream));
    }

    public long createStream() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_LONG);
            call("cuStreamCreate", () -> (int) cuStreamCreate.invokeExact(out, 1 /* CU_STREAM_NON_BLOCKING */));
            return out.get(JAVA_LONG, 0);
        }
    }

    public void synchronize(long stream) {
        call("cuStreamSynchronize", () -> (int) cuStreamSynchronize.invokeExact(stream));
    }

    public void destroyStream(long stream) {
        call("cuStreamDestroy", () -> (int) cuStreamDestroy.invokeExact(stream));
    }

    public long createEvent() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_LONG);
            call("cuEventCreate", () -> (int) cuEventCreate.invokeExact(out, 0));
            return out.get(JAVA_LONG, 0);
        }
    }

    public void recordEvent(long event, long stream) {
        call("cuEventRecord", () -> (int) cuEventRecord.invokeExact(event, stream));
    }

    /** Waits for {@code end} and returns the milliseconds between the two events. */
    public float elapsedMillis(long start, long end) {
        try (Arena arena = Arena.ofConfined()) {
            call("cuEventSynchronize", () -> (int) cuEventSynchronize.invokeExact(end));
            MemorySegment out = arena.allocate(JAVA_FLOAT);
            call("cuEventElapsedTime", () -> (int) cuEventElapsedTime.invokeExact(out, start, end));
            return out.get(JAVA_FLOAT, 0);
        }
    }

    /** Whether {@code stream} is being captured into a CUDA graph (cuStreamIsCapturing: any status but NONE). */
    public boolean isCapturing(long stream) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call("cuStreamIsCapturing", () -> (int) cuStreamIsCapturing.invokeExact(stream, out));
            return out.get(JAVA_INT, 0) != 0;
        }
    }

    public void destroyEvent(long event) {
        call("cuEventDestroy", () -> (int) cuEventDestroy.invokeExact(event));
    }

    /**
     * Launches {@code function}; {@code kernelParams} is the {@code void**} array of pointers to each
     * argument's value, as cuLaunchKernel expects.
     */
    public void launch(long function, int gridX, int gridY, int gridZ, int blockX, int dynamicSharedBytes,
                       long stream, MemorySegment kernelParams) {
        // No capturing lambda here: a launch is the hot path of every host (nothing allocated per call).
        int result;
        try {
            result = (int) cuLaunchKernel.invokeExact(function, gridX, gridY, gridZ, blockX, 1, 1, dynamicSharedBytes,
                    stream, kernelParams, MemorySegment.NULL);
        } catch (Throwable t) {
            throw downcallFailed("cuLaunchKernel", t);
        }
        check("cuLaunchKernel", result);
    }

    /** The hot paths' check of a CUresult (as {@link #call} makes it, without a lambda). */
    private void check(String name, int result) {
        if (result != 0) {
            throw new CudaException(name, result, errorName(result), null);
        }
    }

    /** What {@link #call} throws when the downcall itself failed. */
    private static RuntimeException downcallFailed(String name, Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(name, t);
    }

    public void copyOnDevice(long destination, long source, long bytes, long stream) {
        call("cuMemcpyDtoDAsync", () -> (int) cuMemcpyDtoDAsync.invokeExact(destination, source, bytes, stream));
    }

    /** Page-locked host memory, so that copies from it are truly asynchronous. */
    public MemorySegment hostAlloc(long bytes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ADDRESS);
            call("cuMemHostAlloc(" + bytes + " bytes)", () -> (int) cuMemHostAlloc.invokeExact(out, bytes, 0));
            return out.get(ADDRESS, 0).reinterpret(bytes);
        }
    }

    public void freeHost(MemorySegment memory) {
        call("cuMemFreeHost", () -> (int) cuMemFreeHost.invokeExact(memory));
    }

    /** Waits until {@code event} has completed. */
    public void synchronizeEvent(long event) {
        call("cuEventSynchronize", () -> (int) cuEventSynchronize.invokeExact(event));
    }

    /**
     * The ordinal of the device that owns {@code pointer}, or -1 if the driver does not know it as
     * device memory (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
     */
    public int deviceOrdinalOf(long pointer) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            int result = (int) cuPointerGetAttribute.invokeExact(out, 9, pointer);
            return result == 0 ? out.get(JAVA_INT, 0) : -1;
        } catch (Throwable t) {
            return -1;
        }
    }
}
