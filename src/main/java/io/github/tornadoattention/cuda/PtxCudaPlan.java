package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.LaunchTable;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalDouble;

/**
 * A ptx-cuda plan: device buffers, the params block, the kernel functions and their argument
 * arrays are all made once here; a call copies in the inputs that changed, launches, and copies O
 * (and logsumexp, when asked) back on one stream, timing the kernels with CUDA events.
 */
final class PtxCudaPlan extends AttentionPlan {
    private final CudaDevice device;
    private final CudaContext cuda;
    private final CudaDriver driver;
    private final Resources resources;
    private final Arena arena;
    private final io.github.tornadoattention.LeakGuard guard;
    private final long stream;
    private final long start;
    private final long end;
    private final Input[] inputs;
    private final long deviceO;
    private final long deviceLse;
    private final MemorySegment hostLse;
    private final List<Kernel> kernels = new ArrayList<>();
    /** The same launches with argument slots rewritten per device-tensor call. */
    private final List<KernelArgs> deviceArgs = new ArrayList<>();
    private final boolean decode;

    /** A launch with its function handle and its prepared {@code void**} argument array. */
    private record Kernel(long function, LaunchTable.Launch launch, MemorySegment arguments) {
    }

    /** What the plan holds on the device and off-heap, apart from the plan so that a leak guard can free it. */
    private static final class Resources implements Runnable {
        final CudaContext cuda;
        final Arena arena = Arena.ofShared();
        final List<Long> allocations = new ArrayList<>();
        final List<Long> events = new ArrayList<>();

        Resources(CudaContext cuda) {
            this.cuda = cuda;
        }

        @Override
        public void run() {
            cuda.makeCurrent();
            allocations.forEach(cuda.driver()::free);
            events.forEach(cuda.driver()::destroyEvent);
            arena.close();
        }
    }

    /** An input's device copy and what was last sent to it (tensor and version), to skip resends. */
    private static final class Input {
        final long device;
        HalfTensor sent;
        long sentVersion;

        Input(long device) {
            this.device = device;
        }
    }

    PtxCudaPlan(String backendId, AttentionShape shape, CudaDevice device) {
        super(backendId, shape);
        this.device = device;
        this.cuda = device.context();
        this.driver = cuda.driver();
        cuda.makeCurrent();
        resources = new Resources(cuda);
        arena = resources.arena;
        guard = io.github.tornadoattention.LeakGuard.register(this, "a ptx-cuda plan (" + shape + ")", resources);
        // The device's stream: host-tensor and device-tensor calls are ordered with the engine's caches and copies.
        stream = device.stream();
        try {
            start = driver.createEvent();
            resources.events.add(start);
            end = driver.createEvent();
            resources.events.add(end);
            long bytes = shape.dtype().bytes();
            inputs = new Input[] {new Input(alloc(bytes * shape.queryElements())), new Input(alloc(bytes * shape.kvElements())),
                new Input(alloc(bytes * shape.kvElements()))};
            deviceO = alloc(bytes * shape.outputElements());
            deviceLse = alloc(4L * shape.logSumExpElements());
            hostLse = arena.allocate(JAVA_FLOAT, shape.logSumExpElements());
            decode = LaunchTable.isDecode(shape);
            KernelManifest manifest = cuda.manifest();
            int splits = decode ? LaunchTable.decodeSplits(shape, cuda.multiprocessors(), manifest) : 0;
            // With sinks the block is longer (their logits follow the 32 words): sized by what KernelParams writes.
            MemorySegment hostParams = arena.allocateFrom(JAVA_INT, KernelParams.of(shape, splits));
            long params = alloc(hostParams.byteSize());
            driver.copyToDevice(params, hostParams, hostParams.byteSize(), stream);
            List<LaunchTable.Launch> launches = LaunchTable.launches(shape, splits, manifest);
            if (decode) {
                LaunchTable.DecodeWorkspace workspace = LaunchTable.decodeWorkspace(shape, splits);
                long partialO = alloc(4 * workspace.partialOFloats());
                long partialLse = alloc(4 * workspace.partialLseFloats());
                kernels.add(kernel(launches.get(0), inputs[0].device, inputs[1].device, inputs[2].device, partialO,
                        partialLse, params));
                kernels.add(kernel(launches.get(1), partialO, partialLse, deviceO, deviceLse, params));
            } else {
                kernels.add(kernel(launches.get(0), inputs[0].device, inputs[1].device, inputs[2].device, deviceO,
                        deviceLse, params));
            }
            driver.synchronize(stream);
        } catch (RuntimeException e) {
            release();
            throw e;
        }
    }

    private long alloc(long bytes) {
        long pointer = device.allocateCounted(bytes);
        resources.allocations.add(pointer);
        return pointer;
    }

    private Kernel kernel(LaunchTable.Launch launch, long... pointers) {
        long function = cuda.function(launch.kernel());
        MemorySegment values = arena.allocate(JAVA_LONG, pointers.length);
        MemorySegment arguments = arena.allocate(ADDRESS, pointers.length);
        KernelArgs forDevice = new KernelArgs(arena, pointers.length);
        for (int i = 0; i < pointers.length; i++) {
            values.setAtIndex(JAVA_LONG, i, pointers[i]);
            arguments.setAtIndex(ADDRESS, i, values.asSlice(8L * i, 8));
            forDevice.pointer(i, pointers[i]);
        }
        deviceArgs.add(forDevice);
        return new Kernel(function, launch, arguments);
    }

    @Override
    protected void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        cuda.makeCurrent();
        send(inputs[0], q);
        send(inputs[1], k);
        send(inputs[2], v);
        launchAll();
        driver.copyToHost(o.data(), deviceO, o.data().byteSize(), stream);
        if (lse != null) {
            driver.copyToHost(hostLse, deviceLse, hostLse.byteSize(), stream);
        }
        driver.synchronize(stream);
        o.markModified();
        if (lse != null) {
            MemorySegment.copy(hostLse, JAVA_FLOAT, 0, lse, 0, lse.length);
        }
        recordDeviceMillis(driver.elapsedMillis(start, end));
    }

    @Override
    protected void rerun(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        cuda.makeCurrent();
        launchAll();
        driver.synchronize(stream);
        recordDeviceMillis(driver.elapsedMillis(start, end));
    }

    @Override
    public AttentionDevice device() {
        return device;
    }

    /** Device tensors: only the argument slots of q, k, v, o and lse change; no copy, no event, no synchronisation. */
    @Override
    protected void computeOnDevice(DeviceTensor q, DeviceTensor k, DeviceTensor v, DeviceTensor o, DeviceTensor lse) {
        cuda.makeCurrent();
        deviceArgs.get(0).pointer(0, q.address()).pointer(1, k.address()).pointer(2, v.address());
        KernelArgs last = deviceArgs.get(deviceArgs.size() - 1);
        int outputSlot = decode ? 2 : 3;
        last.pointer(outputSlot, o.address()).pointer(outputSlot + 1, lse == null ? deviceLse : lse.address());
        for (int i = 0; i < kernels.size(); i++) {
            LaunchTable.Launch l = kernels.get(i).launch();
            driver.launch(kernels.get(i).function(), l.gridX(), l.gridY(), l.gridZ(), l.threads(), l.dynamicSharedBytes(),
                    stream, deviceArgs.get(i).segment());
        }
        // Host-tensor calls compare what is on the device with what they last sent: these inputs are not that.
        for (Input input : inputs) {
            input.sent = null;
        }
    }

    @Override
    protected OptionalDouble timeBackToBack(int calls) {
        cuda.makeCurrent();
        driver.recordEvent(start, stream);
        for (int i = 0; i < calls; i++) {
            launchKernels();
        }
        driver.recordEvent(end, stream);
        return OptionalDouble.of(driver.elapsedMillis(start, end) / calls);
    }

    /** Copies {@code tensor} to the device unless this very tensor, unchanged, is already there (a KV cache). */
    private void send(Input input, HalfTensor tensor) {
        if (input.sent == tensor && input.sentVersion == tensor.version()) {
            return;
        }
        driver.copyToDevice(input.device, tensor.data(), tensor.data().byteSize(), stream);
        input.sent = tensor;
        input.sentVersion = tensor.version();
    }

    /** The plan's kernels between the two timing events. */
    private void launchAll() {
        driver.recordEvent(start, stream);
        launchKernels();
        driver.recordEvent(end, stream);
    }

    private void launchKernels() {
        for (Kernel k : kernels) {
            LaunchTable.Launch l = k.launch();
            driver.launch(k.function(), l.gridX(), l.gridY(), l.gridZ(), l.threads(), l.dynamicSharedBytes(), stream,
                    k.arguments());
        }
    }

    @Override
    protected void release() {
        guard.close();
    }
}
