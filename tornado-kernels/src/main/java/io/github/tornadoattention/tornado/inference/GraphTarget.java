package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.tornado.TornadoVMLock;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;

/**
 * Where and how a device's graphs are built: the backend whose kernels they run, the TornadoVM device, and the plan
 * options ({@code profile}: TornadoVM's profiler, whose kernel times {@code timeEach} reports; {@code cudaGraph}:
 * executions captured once and replayed).
 */
record GraphTarget(String backendId, TornadoDevice device, boolean profile, boolean cudaGraph) {

    /**
     * The execution plan of {@code graph} with these options, compiled now (TornadoVM's JIT of every task); called by
     * a build inside {@link TornadoVMLock#exclusive}.
     */
    TornadoExecutionPlan compile(TaskGraph graph, GridScheduler scheduler) {
        if (!TornadoVMLock.heldExclusively()) {
            throw new IllegalStateException("GraphTarget.compile outside TornadoVMLock.exclusive: a TornadoVM plan must"
                    + " be built alone (builds call it inside the lock)");
        }
        TornadoExecutionPlan built = new TornadoExecutionPlan(graph.snapshot());
        try {
            built.withDevice(device).withGridScheduler(scheduler);
            if (profile) {
                built.withProfiler(ProfilerMode.SILENT);
            }
            if (cudaGraph) {
                built.withCUDAGraph();
            }
            built.withPreCompilation();
            return built;
        } catch (RuntimeException | Error e) {
            close(built);
            throw e;
        }
    }

    /** Frees {@code plan}'s device memory (alone, see {@link TornadoVMLock#close}); failures are swallowed. */
    void close(TornadoExecutionPlan plan) {
        TornadoVMLock.close(device, plan::close);
    }
}
