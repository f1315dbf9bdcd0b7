package io.github.tornadoattention.tornado.inference;

import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;

/**
 * Where and how a device's graphs are built: the backend whose kernels they run, the TornadoVM device, and the plan
 * options ({@code profile}: TornadoVM's profiler, whose kernel times {@code timeEach} reports; {@code cudaGraph}:
 * executions captured once and replayed).
 */
record GraphTarget(String backendId, TornadoDevice device, boolean profile, boolean cudaGraph) {

    /** The execution plan of {@code graph} with these options, compiled now (TornadoVM's JIT of every task). */
    TornadoExecutionPlan compile(TaskGraph graph, GridScheduler scheduler) {
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
            closeQuietly(built);
            throw e;
        }
    }

    static void closeQuietly(TornadoExecutionPlan plan) {
        try {
            plan.close();
        } catch (TornadoExecutionPlanException | RuntimeException e) {
            // Freeing device memory failed; nothing else to do for a plan that is going away.
        }
    }
}
