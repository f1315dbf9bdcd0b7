package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.LaunchTable;
import io.github.tornadoattention.tornado.library.ForwardLibraryTask;
import io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches;
import io.github.tornadoattention.tornado.prebuilt.PrebuiltTasks;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The ptx-tornado task graph for one shape. On TornadoVM's PTX backend: the launch table's prefill kernel, or for
 * decode shapes the fused split-KV decode kernel ({@link PrebuiltLaunches}), as one prebuilt task (the TornadoVM
 * twins: 48 KB of static shared memory) inside the task graph of {@link TornadoAttentionPlan}. On its CUDA backend: a
 * library task ({@link ForwardLibraryTask}) with ptx-cuda's own launches for the shape, dynamic shared memory included.
 *
 * <p>TornadoVM's prebuilt ABI, which the TornadoVM twins in ptx-overrides/ follow: the first kernel
 * parameter is TornadoVM's kernel context, every array arrives as a pointer to its header (data
 * {@link TornadoNativeArray#ARRAY_HEADER} bytes in), the kernel is looked up by a mangled name,
 * TornadoVM prepends its own {@code .version/.target} lines and launches with static shared memory
 * only. The PTX each task loads ({@link PrebuiltPtx}) is written to a temporary file, deleted once the
 * plan is built.
 */
final class PtxTornadoPlan extends TornadoAttentionPlan {
    private final HalfFloatArray o;
    private final List<Path> ptxFiles = new ArrayList<>();
    /** The CUDA backend's library task; null on the PTX backend. */
    private final ForwardLibraryTask library;

    PtxTornadoPlan(AttentionShape s, TornadoDevice device, PlanOptions options) {
        super(Backends.PTX_TORNADO, s, options);
        HalfFloatArray q = new HalfFloatArray(Math.toIntExact(s.queryElements()));
        HalfFloatArray k = new HalfFloatArray(Math.toIntExact(s.kvElements()));
        HalfFloatArray v = new HalfFloatArray(Math.toIntExact(s.kvElements()));
        this.o = new HalfFloatArray(Math.toIntExact(s.outputElements()));
        if (device.getTornadoVMBackend() == TornadoVMBackendType.CUDA) {
            // TornadoVM's CUDA backend launches a prebuilt task with no dynamic shared memory (48 KB tiles); a library
            // task launches ptx-cuda's own entries, dynamic shared memory included, inside the same graphs.
            ForwardLibraryTask task = ForwardLibraryTask.create(s, device.getPhysicalDevice().getDeviceMaxComputeUnits());
            // TornadoVM's profiler times a library task on the host (dispatch and two waits): its own events instead.
            task.timeOnDevice(options.profile());
            this.library = task;
            build(device, q, k, v, List.of(), (graph, name, scheduler) -> graph.libraryTask("flash", task::forward, q, k, v,
                    o, lseArray), null);
            return;
        }
        this.library = null;
        long header = TornadoNativeArray.ARRAY_HEADER;
        if (!PrebuiltLaunches.headerBytes().contains((int) header)) {
            throw new BackendUnavailableException(Backends.PTX_TORNADO, "TornadoVM's array header is " + header
                    + " bytes (tornado.panama.objectHeader); the prebuilt kernels support " + PrebuiltLaunches.headerBytes());
        }
        int splits = LaunchTable.isDecode(s)
                ? PrebuiltLaunches.decodeSplits(s, device.getPhysicalDevice().getDeviceMaxComputeUnits(), header) : 0;
        IntArray params = IntArray.fromArray(KernelParams.of(s, splits));
        List<Object> arguments = new ArrayList<>(List.of(q, Access.READ_ONLY, k, Access.READ_ONLY, v, Access.READ_ONLY,
                o, Access.WRITE_ONLY, lseArray, Access.WRITE_ONLY));
        List<TornadoNativeArray> deviceOnly = new ArrayList<>(List.of(params));
        LaunchTable.Launch launch;
        if (splits > 0) {
            launch = PrebuiltLaunches.fusedDecode(s, splits, header);
            // The decode workspace, device-only: partial O and logsumexp per split, and the tickets (zeros; the
            // kernel leaves them so).
            LaunchTable.DecodeWorkspace workspace = LaunchTable.decodeWorkspace(s, splits);
            FloatArray partialO = new FloatArray(Math.toIntExact(workspace.partialOFloats()));
            FloatArray partialLse = new FloatArray(Math.toIntExact(workspace.partialLseFloats()));
            IntArray tickets = new IntArray(PrebuiltLaunches.tickets(launch));
            deviceOnly.addAll(List.of(partialO, partialLse, tickets));
            arguments.addAll(List.of(partialO, Access.READ_WRITE, partialLse, Access.READ_WRITE, tickets, Access.READ_WRITE));
        } else {
            launch = PrebuiltLaunches.prefill(s, header);
        }
        arguments.addAll(List.of(params, Access.READ_ONLY));
        build(device, q, k, v, deviceOnly, (graph, name, scheduler) -> {
            ptxFiles.add(PrebuiltTasks.add(graph, scheduler, device.getTornadoVMBackend(), name, "flash", launch.kernel(), launch.gridX(), launch.gridY(),
                    launch.gridZ(), arguments.toArray()));
        }, null);
    }

    /** The execution plan has compiled its tasks (TornadoVM caches the module per plan): the PTX files can go. */
    @Override
    protected void compiled() {
        deletePtxFiles();
    }

    private void deletePtxFiles() {
        for (Path file : ptxFiles) {
            try {
                Files.deleteIfExists(file);
            } catch (IOException e) {
                file.toFile().deleteOnExit();
            }
        }
        ptxFiles.clear();
    }

    /** The library task's own device time where it was timed (not replayed from a CUDA graph), else the profiler's. */
    @Override
    protected double deviceMillis(TornadoExecutionResult result) {
        double ms = library == null ? Double.NaN : library.drainDeviceMillis();
        return Double.isNaN(ms) ? super.deviceMillis(result) : ms;
    }

    @Override
    protected TornadoNativeArray outputArray() {
        return o;
    }
}
