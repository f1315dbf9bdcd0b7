package io.github.tornadoattention.bench;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.BenchmarkHooks;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;

/**
 * Attention on one backend and shape, in two modes: {@link #kernel} (inputs resident on the
 * device, no copies: {@link BenchmarkHooks#rerunOnDevice()}) and {@link #javaCall} (the whole Java call,
 * every input re-sent and the output copied back). Device-timed kernel durations seen during
 * {@link #kernel} are saved beside the JMH results when {@value #KERNEL_TIMES_PROPERTY} names a folder;
 * then the plan is made with {@link PlanOptions#profile()}, so that the TornadoVM-hosted backends time
 * their kernels too.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
public class AttentionBenchmark {
    public static final String KERNEL_TIMES_PROPERTY = "bench.kernelTimesDir";

    @Param(Backends.CPU_REFERENCE)
    public String backend;

    /** See {@link BenchShape#spec()}. */
    @Param("1,8,8,512,512,64,0")
    public String shape;

    private AttentionPlan plan;
    private BenchmarkHooks hooks;
    private RandomInputs inputs;
    private HalfTensor output;
    private final List<Double> kernelMillis = new ArrayList<>();
    private final List<Double> backToBackMillis = new ArrayList<>();
    private boolean measuring;
    /** Back-to-back launches per device-timed sample (see BenchmarkHooks.timeOnDevice). */
    private static final int BACK_TO_BACK_CALLS = 20;

    @Setup(Level.Trial)
    public void setUp() {
        BenchShape s = BenchShape.parse(shape);
        boolean keepKernelTimes = System.getProperty(KERNEL_TIMES_PROPERTY) != null;
        plan = Backends.get(backend).plan(s.toShape(), PlanOptions.builder().profile(keepKernelTimes).build());
        hooks = plan.benchmarkHooks();
        inputs = RandomInputs.generate(s.toShape(), System.nanoTime());
        output = RandomInputs.poisonedOutput(s.toShape());
        plan.forward(inputs.q(), inputs.k(), inputs.v(), output, null);
    }

    /** Device times are kept from measurement iterations only, not warm-up. */
    @Setup(Level.Iteration)
    public void startIteration(IterationParams iteration) {
        measuring = iteration.getType() == IterationType.MEASUREMENT;
    }

    @Benchmark
    public void kernel() {
        hooks.rerunOnDevice();
        if (measuring) {
            hooks.lastDeviceMillis().ifPresent(kernelMillis::add);
        }
    }

    @Benchmark
    public void javaCall() {
        inputs.q().markModified();
        inputs.k().markModified();
        inputs.v().markModified();
        plan.forward(inputs.q(), inputs.k(), inputs.v(), output, null);
    }

    /**
     * After each measured iteration of {@link #kernel}, a few device-timed batches of back-to-back
     * launches, where the backend supports them (outside JMH's measured time).
     */
    @TearDown(Level.Iteration)
    public void endIteration(org.openjdk.jmh.infra.BenchmarkParams params) {
        if (measuring && params.getBenchmark().endsWith(".kernel")) {
            for (int i = 0; i < 5; i++) {
                hooks.timeOnDevice(BACK_TO_BACK_CALLS).ifPresent(backToBackMillis::add);
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        String dir = System.getProperty(KERNEL_TIMES_PROPERTY);
        // Back-to-back batches where the backend has them (no launch latency, as SDPA is timed), else
        // the per-call device times (CUDA events or TornadoVM's profiler around each launch).
        List<Double> samples = backToBackMillis.isEmpty() ? kernelMillis : backToBackMillis;
        if (dir != null && !samples.isEmpty()) {
            Path file = Path.of(dir, backend + "_" + shape.replace(',', '-') + ".json");
            Files.createDirectories(file.getParent());
            Map<String, Object> times = new java.util.LinkedHashMap<>(Map.of("backend", backend, "shape", shape,
                    "timing", backToBackMillis.isEmpty() ? "per call" : BACK_TO_BACK_CALLS + " back-to-back launches",
                    "kernel_ms", samples));
            if (samples != kernelMillis && !kernelMillis.isEmpty()) {
                // Also the per-launch times, the only kind TornadoVM-hosted backends have: like with like.
                times.put("per_launch_ms", kernelMillis);
            }
            Files.writeString(file, JSON.std.asString(times));
        }
        plan.close();
        inputs.close();
        output.close();
    }
}
