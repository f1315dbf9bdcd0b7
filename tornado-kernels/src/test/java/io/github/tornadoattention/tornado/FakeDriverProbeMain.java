package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.measure.BenchmarkHooks;
import io.github.tornadoattention.verify.RandomInputs;

/**
 * Run by {@link FakeDriverTest} in a child JVM under TornadoVM with the fake CUDA driver of tools/fakecuda
 * ({@code FAKECUDA_VERBOSE=1}: it logs every allocation, copy and launch to stderr). For each backend id given, it
 * makes a plan and calls forward and the benchmark hooks, writing a marker line ({@code [probe] <id> <step>}) to
 * stderr before each step, so that the driver calls between two markers are those of one step. Kernel results are
 * meaningless here (launches are no-ops); only what TornadoVM asks of the driver counts.
 */
public final class FakeDriverProbeMain {
    static final AttentionShape SHAPE = AttentionShape.builder().batch(1).heads(2).queryLength(100).kvLength(300)
            .headDim(64).causal(true).build();

    private FakeDriverProbeMain() {
    }

    public static void main(String[] args) {
        for (String id : args) {
            AttentionBackend backend = switch (id) {
                case "tornado-mma" -> new TornadoMmaBackend();
                case "ptx-tornado" -> new PtxTornadoBackend();
                default -> new TornadoSimtBackend();
            };
            mark(id, "availability " + backend.availability());
            try (RandomInputs in = RandomInputs.generate(SHAPE, 1);
                 HalfTensor o = HalfTensor.allocate(SHAPE.outputElements())) {
                mark(id, "plan");
                AttentionPlan plan = backend.plan(SHAPE);
                BenchmarkHooks hooks = BenchmarkHooks.of(plan);
                mark(id, "forward");
                plan.forward(in.q(), in.k(), in.v(), o, null);
                mark(id, "first-rerun");
                hooks.rerunOnDevice();
                mark(id, "reruns");
                for (int i = 0; i < 3; i++) {
                    hooks.rerunOnDevice();
                }
                mark(id, "forward-again");
                plan.forward(in.q(), in.k(), in.v(), o, null);
                mark(id, "millis-default " + hooks.lastDeviceMillis().isPresent());
                mark(id, "close");
                plan.close();
                mark(id, "profiled-plan");
                try (AttentionPlan profiled = backend.plan(SHAPE, PlanOptions.builder().profile(true).build())) {
                    profiled.forward(in.q(), in.k(), in.v(), o, null);
                    mark(id, "millis-profiled " + BenchmarkHooks.of(profiled).lastDeviceMillis().isPresent());
                    mark(id, "close-profiled");
                }
            } catch (RuntimeException e) {
                mark(id, "failed " + e);
                e.printStackTrace();
            }
            mark(id, "end");
        }
    }

    private static void mark(String id, String step) {
        System.err.println("[probe] " + id + " " + step);
        System.err.flush();
    }
}
