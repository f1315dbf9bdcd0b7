package io.github.tornadoattention.cli;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.BenchmarkHooks;
import io.github.tornadoattention.measure.TimingStats;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.IOException;
import java.io.PrintWriter;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.function.IntConsumer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code run}: times one shape on one backend and, with --check, compares it with the CPU reference. */
@Command(name = "run", mixinStandardHelpOptions = true,
        description = "Time attention for one shape on random N(0,1) fp16 inputs; print median time and TFLOP/s.")
final class RunCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Option(names = "--batch", required = true, paramLabel = "B", description = "batch size")
    int batch;

    @Option(names = "--heads", required = true, paramLabel = "H", description = "query heads")
    int heads;

    @Option(names = "--kv-heads", paramLabel = "HKV", description = "key/value heads (default: --heads); must divide --heads")
    Integer kvHeads;

    @Option(names = "--seq", required = true, paramLabel = "S", description = "query length")
    int seq;

    @Option(names = "--kv-seq", paramLabel = "SKV", description = "key/value length (default: --seq)")
    Integer kvSeq;

    @Option(names = "--dim", required = true, paramLabel = "D", description = "head dim")
    int dim;

    @Option(names = "--causal", description = "causal mask, bottom-right aligned")
    boolean causal;

    @Option(names = "--scale", paramLabel = "X",
            description = "softmax scale (default: 1/sqrt(D)); > 0 and at most 3.4e38/(2*D*65504^2), 6.19e26 at D=64")
    String scale;

    @Option(names = "--layout", paramLabel = "bhsd|bshd", defaultValue = "bhsd", description = "memory layout (default: ${DEFAULT-VALUE})")
    Layout layout;

    @Mixin
    FeatureOptions features = new FeatureOptions();

    @Option(names = "--backend", paramLabel = "ID", defaultValue = Backends.AUTO,
            description = "one of: ptx-cuda, ptx-tornado, tornado-mma, tornado-simt, cpu-reference, auto (default)")
    String backend;

    @Option(names = "--check", description = "compare the output with the CPU reference; exit 1 if out of tolerance")
    boolean check;

    @Option(names = "--warmup", paramLabel = "N", defaultValue = "3", description = "untimed calls first (default: ${DEFAULT-VALUE})")
    int warmup;

    @Option(names = "--iters", paramLabel = "N", defaultValue = "10", description = "timed calls (default: ${DEFAULT-VALUE})")
    int iters;

    @Option(names = "--seed", paramLabel = "N", description = "seed of the random inputs (default: fresh each run)")
    Long seed;

    @Option(names = "--json", description = "also print one JSON object on the last line")
    boolean json;

    @Option(names = "--force", description = "run even when the estimated memory or CPU time is over the limits")
    boolean force;

    @Option(names = "--profile", description = "TornadoVM backends: time each call's kernels on the device (TornadoVM's profiler)")
    boolean profile;

    @Option(names = "--cuda-graph", description = "TornadoVM backends: replay the plan as CUDA graphs")
    boolean cudaGraph;

    @Option(names = "--cuda-device", paramLabel = "N", defaultValue = "0", description = "ptx-cuda: CUDA device ordinal (default: ${DEFAULT-VALUE})")
    int cudaDevice;

    @Option(names = "--mma-jit-flags", paramLabel = "FLAGS", description = "tornado-mma: CUDA JIT options for tuning, NAME,VALUE pairs (e.g. CU_JIT_MAX_REGISTERS,168)")
    String mmaJitFlags;

    @Override
    public Integer call() throws IOException {
        Limits.calls("--warmup", warmup, 0);
        Limits.calls("--iters", iters, 1);
        features.validate();
        long inputSeed = seed != null ? seed : System.nanoTime();
        AttentionShape shape = features.apply(AttentionShape.builder().batch(batch).heads(heads).kvHeads(kvHeads)
                .queryLength(seq).kvLength(kvSeq).headDim(dim).causal(causal).scale(Limits.scale(scale, dim)).layout(layout)
                .build(), inputSeed);
        PrintWriter out = spec.commandLine().getOut();
        PlanOptions options = PlanOptions.builder().profile(profile).cudaGraph(cudaGraph).cudaDevice(cudaDevice)
                .mmaJitFlags(mmaJitFlags).build();
        try (AttentionPlan plan = Backends.get(backend).plan(shape, options)) {
            // cpu-reference computes every call on the CPU; a check runs a CPU oracle once more.
            boolean onCpu = plan.backendId().equals(Backends.CPU_REFERENCE);
            long referencePasses = (onCpu ? warmup + iters : 0) + (check ? (onCpu ? 2 : 1) : 0);
            Limits.Work.of(shape, referencePasses).check(typedOptions(onCpu), force);
            try (RandomInputs in = RandomInputs.generate(shape, inputSeed);
                 HalfTensor o = RandomInputs.poisonedOutput(shape)) {
                return measure(out, plan, shape, in, o, inputSeed, onCpu);
            }
        }
    }

    private int measure(PrintWriter out, AttentionPlan plan, AttentionShape shape, RandomInputs in, HalfTensor o,
                        long inputSeed, boolean onCpu) throws IOException {
        String device = Backends.get(plan.backendId()).availability().detail();
        for (int i = 0; i < warmup; i++) {
            plan.forward(in.q(), in.k(), in.v(), o, null);
        }
        TimingStats call = time(() -> plan.forward(in.q(), in.k(), in.v(), o, null));
        // The CPU reference has no device: its call is all there is to time.
        TimingStats resident = null;
        TimingStats kernel = null;
        TimingStats perLaunch = null;
        if (!onCpu) {
            double[] kernelMillis = new double[iters];
            BenchmarkHooks hooks = plan.benchmarkHooks();
            hooks.rerunOnDevice();   // untimed: TornadoVM-hosted plans build their rerun plan here
            resident = time(i -> {
                hooks.rerunOnDevice();
                kernelMillis[i] = hooks.lastDeviceMillis().orElse(Double.NaN);
            });
            // Back-to-back batches timed on the device where the backend can (no launch latency), else per call.
            double[] batches = new double[iters];
            for (int i = 0; i < iters; i++) {
                batches[i] = hooks.timeOnDevice(10).orElse(Double.NaN);
            }
            perLaunch = Double.isNaN(kernelMillis[0]) ? null : TimingStats.of(kernelMillis);
            kernel = !Double.isNaN(batches[0]) ? TimingStats.of(batches) : perLaunch;
        }
        DeviceCall deviceCall = onCpu || plan.device() == null ? null : timeDeviceCall(plan, shape, in);

        out.printf("backend     %s (%s)%n", plan.backendId(), device);
        out.printf("shape       %s, seed %d%n", shape, inputSeed);
        printTiming(out, "call", call, shape, onCpu ? "whole Java call" : "whole Java call, host transfers included");
        if (resident != null) {
            printTiming(out, "on device", resident, shape, "inputs already on the device, no copies");
        }
        if (kernel != null) {
            printTiming(out, "kernel", kernel, shape, kernel == perLaunch ? "device-timed kernels only"
                    : "device-timed kernels only, launched back to back");
        }
        if (perLaunch != null && kernel != perLaunch) {
            printTiming(out, "per launch", perLaunch, shape, "events around each launch, launch latency included");
        }
        if (deviceCall != null) {
            printTiming(out, "device call", deviceCall.timing(), shape,
                    "forward on device tensors + synchronize: the whole Java call an engine makes");
            if (kernel != null) {
                out.printf("%-11s %.3gx the kernel, %.3g us of host time per call  [%s]%n", "", deviceCall.timing().medianMillis()
                        / kernel.medianMillis(), 1e3 * (deviceCall.timing().medianMillis() - kernel.medianMillis()),
                        deviceCall.check().passes() ? "output matches the host-tensor call" : "OUTPUT DIFFERS from the host-tensor call");
            }
            out.printf("%-11s %.3g us until forward returns  [the host's own cost of a call: checks, argument slots, launches]%n",
                    "enqueue", 1e3 * deviceCall.enqueue().medianMillis());
        }

        Map<String, Object> result = new LinkedHashMap<>();
        result.put("backend", plan.backendId());
        result.put("device", device);
        result.put("batch", batch);
        result.put("heads", heads);
        result.put("kv_heads", shape.kvHeads());
        result.put("seq", seq);
        result.put("kv_seq", shape.kvLength());
        result.put("dim", dim);
        result.put("causal", causal);
        result.put("scale", shape.scale());
        result.put("layout", layout.name().toLowerCase());
        result.putAll(FeatureOptions.json(shape));
        result.put("seed", inputSeed);
        result.put("warmup", warmup);
        result.put("iters", iters);
        putTiming(result, "", call, shape);
        if (resident != null) {
            putTiming(result, "device_", resident, shape);
        }
        if (kernel != null) {
            putTiming(result, "kernel_", kernel, shape);
            result.put("kernel_timing", kernel == perLaunch ? "per launch" : "back to back");
        }
        if (perLaunch != null) {
            result.put("per_launch_median_ms", Numbers.json(perLaunch.medianMillis()));
        }
        if (deviceCall != null) {
            putTiming(result, "device_call_", deviceCall.timing(), shape);
            if (kernel != null) {
                result.put("device_call_over_kernel", Numbers.json(deviceCall.timing().medianMillis() / kernel.medianMillis()));
                result.put("host_overhead_us", Numbers.json(1e3 * (deviceCall.timing().medianMillis() - kernel.medianMillis())));
            }
            result.put("device_call_matches_host_call", deviceCall.check().passes());
            result.put("enqueue_us", Numbers.json(1e3 * deviceCall.enqueue().medianMillis()));
        }

        int exit = 0;
        if (check) {
            o.fill(Float.NaN);
            float[] lse = RandomInputs.poisonedLogSumExp(shape);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            ErrorStats errors = CorrectnessSuite.compareWithOracle(plan.backendId(), shape, in, o, lse);
            out.printf("check       %s: %s (against the %s)%n", errors.passes() ? "PASS" : "FAIL", errors,
                    CorrectnessSuite.oracleName(plan.backendId()));
            result.put("checked_against", CorrectnessSuite.oracleName(plan.backendId()));
            result.put("max_abs_error", Numbers.json(errors.maxAbsError()));
            result.put("rel_error", Numbers.json(errors.relativeError()));
            result.put("lse_error", Numbers.json(errors.maxLseError()));
            result.put("bad_values", errors.badValues());
            result.put("check_passed", errors.passes());
            exit = errors.passes() ? 0 : Main.EXIT_FAILED;
        }
        if (json) {
            out.println(JSON.std.asString(result));
        }
        return exit;
    }

    /** The options that size the work, as the user typed them (for the line that refuses too much work). */
    private String typedOptions(boolean onCpu) {
        StringBuilder s = new StringBuilder("--batch " + batch + " --heads " + heads);
        if (kvHeads != null) {
            s.append(" --kv-heads ").append(kvHeads);
        }
        s.append(" --seq ").append(seq);
        if (kvSeq != null) {
            s.append(" --kv-seq ").append(kvSeq);
        }
        s.append(" --dim ").append(dim);
        if (causal) {
            s.append(" --causal");
        }
        if (features.window != null) {
            s.append(" --window ").append(features.window);
        }
        if (onCpu) {
            s.append(" --warmup ").append(warmup).append(" --iters ").append(iters);
        }
        return check ? s.append(" --check").toString() : s.toString();
    }

    /** A device-tensor call's timing, and its output compared with the host-tensor call's. */
    private record DeviceCall(TimingStats timing, TimingStats enqueue, ErrorStats check) {
    }

    /** Times plan.forward on device tensors (inputs copied once) followed by a synchronisation, as an engine calls it. */
    private DeviceCall timeDeviceCall(AttentionPlan plan, AttentionShape shape, RandomInputs in) {
        io.github.tornadoattention.AttentionDevice device = plan.device();
        try (io.github.tornadoattention.DeviceTensor dq = device.allocate(shape.dtype(), shape.queryElements());
             io.github.tornadoattention.DeviceTensor dk = device.allocate(shape.dtype(), shape.kvElements());
             io.github.tornadoattention.DeviceTensor dv = device.allocate(shape.dtype(), shape.kvElements());
             io.github.tornadoattention.DeviceTensor dO = device.allocate(shape.dtype(), shape.outputElements());
             HalfTensor expected = plan.forward(in.q(), in.k(), in.v());
             HalfTensor actual = RandomInputs.poisonedOutput(shape)) {
            dq.copyFrom(in.q());
            dk.copyFrom(in.k());
            dv.copyFrom(in.v());
            dO.copyFrom(actual);
            for (int i = 0; i < Math.max(1, warmup); i++) {
                plan.forward(dq, dk, dv, dO, null);
                device.synchronize();
            }
            TimingStats timing = time(() -> {
                plan.forward(dq, dk, dv, dO, null);
                device.synchronize();
            });
            // The host's own cost: until forward returns (the synchronisation after each call is not timed).
            double[] enqueue = new double[iters];
            for (int i = 0; i < iters; i++) {
                long start = System.nanoTime();
                plan.forward(dq, dk, dv, dO, null);
                enqueue[i] = (System.nanoTime() - start) / 1e6;
                device.synchronize();
            }
            dO.copyTo(actual);
            device.synchronize();
            double[] reference = new double[Math.toIntExact(expected.length())];
            for (int i = 0; i < reference.length; i++) {
                reference[i] = expected.get(i);
            }
            return new DeviceCall(timing, TimingStats.of(enqueue), ErrorStats.compare(actual, reference, null, null));
        }
    }

    private TimingStats time(Runnable call) {
        return time(i -> call.run());
    }

    /** Wall-clock times of {@code iters} calls of {@code call} (given the iteration number). */
    private TimingStats time(IntConsumer call) {
        double[] millis = new double[iters];
        for (int i = 0; i < iters; i++) {
            long start = System.nanoTime();
            call.accept(i);
            millis[i] = (System.nanoTime() - start) / 1e6;
        }
        return TimingStats.of(millis);
    }

    private static void printTiming(PrintWriter out, String label, TimingStats t, AttentionShape shape, String what) {
        out.printf("%-11s median %s ms (95%% CI %s..%s), %s  [%s]%n", label, Numbers.text(t.medianMillis()),
                Numbers.text(t.lowMillis()), Numbers.text(t.highMillis()), Numbers.throughput(shape.flops(), t.medianMillis()),
                what);
    }

    /** median_ms, ci95_low_ms, ci95_high_ms and tflops, each key after {@code prefix}. */
    private static void putTiming(Map<String, Object> result, String prefix, TimingStats t, AttentionShape shape) {
        result.put(prefix + "median_ms", Numbers.json(t.medianMillis()));
        result.put(prefix + "ci95_low_ms", Numbers.json(t.lowMillis()));
        result.put(prefix + "ci95_high_ms", Numbers.json(t.highMillis()));
        result.put(prefix + "tflops", Numbers.json(t.teraflops(shape.flops())));
    }
}
