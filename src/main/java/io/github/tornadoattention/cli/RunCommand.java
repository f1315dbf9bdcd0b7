package io.github.tornadoattention.cli;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.Layout;
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

    @Option(names = "--scale", paramLabel = "X", description = "softmax scale (default: 1/sqrt(D))")
    Float scale;

    @Option(names = "--layout", paramLabel = "bhsd|bshd", defaultValue = "bhsd", description = "memory layout (default: ${DEFAULT-VALUE})")
    Layout layout;

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

    @Override
    public Integer call() throws IOException {
        if (warmup < 0) {
            throw new InvalidArgumentException("--warmup", warmup, "must be >= 0");
        }
        if (iters < 1) {
            throw new InvalidArgumentException("--iters", iters, "must be >= 1");
        }
        AttentionShape shape = AttentionShape.builder().batch(batch).heads(heads).kvHeads(kvHeads).queryLength(seq)
                .kvLength(kvSeq).headDim(dim).causal(causal).scale(scale).layout(layout).build();
        long inputSeed = seed != null ? seed : System.nanoTime();
        PrintWriter out = spec.commandLine().getOut();
        try (AttentionPlan plan = Backends.get(backend).plan(shape);
             RandomInputs in = RandomInputs.generate(shape, inputSeed);
             HalfTensor o = RandomInputs.poisonedOutput(shape)) {
            String device = Backends.get(plan.backendId()).availability().detail();
            for (int i = 0; i < warmup; i++) {
                plan.forward(in.q(), in.k(), in.v(), o, null);
            }
            TimingStats call = time(() -> plan.forward(in.q(), in.k(), in.v(), o, null));
            double[] kernelMillis = new double[iters];
            TimingStats resident = time(i -> {
                plan.rerunOnDevice();
                kernelMillis[i] = plan.lastDeviceMillis().orElse(Double.NaN);
            });
            // Back-to-back batches timed on the device where the backend can (no launch latency), else per call.
            double[] batches = new double[iters];
            for (int i = 0; i < iters; i++) {
                batches[i] = plan.timeOnDevice(10).orElse(Double.NaN);
            }
            TimingStats perLaunch = Double.isNaN(kernelMillis[0]) ? null : TimingStats.of(kernelMillis);
            TimingStats kernel = !Double.isNaN(batches[0]) ? TimingStats.of(batches) : perLaunch;

            out.printf("backend     %s (%s)%n", plan.backendId(), device);
            out.printf("shape       %s, seed %d%n", shape, inputSeed);
            printTiming(out, "call", call, shape, "whole Java call, host transfers included");
            printTiming(out, "on device", resident, shape, "inputs already on the device, no copies");
            if (kernel != null) {
                printTiming(out, "kernel", kernel, shape, kernel == perLaunch ? "device-timed kernels only"
                        : "device-timed kernels only, launched back to back");
            }
            if (perLaunch != null && kernel != perLaunch) {
                printTiming(out, "per launch", perLaunch, shape, "events around each launch, launch latency included");
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
            result.put("iters", iters);
            result.put("median_ms", call.medianMillis());
            result.put("ci95_low_ms", call.lowMillis());
            result.put("ci95_high_ms", call.highMillis());
            result.put("tflops", call.teraflops(shape.flops()));
            result.put("device_median_ms", resident.medianMillis());
            result.put("device_tflops", resident.teraflops(shape.flops()));
            if (kernel != null) {
                result.put("kernel_median_ms", kernel.medianMillis());
                result.put("kernel_tflops", kernel.teraflops(shape.flops()));
                result.put("kernel_timing", kernel == perLaunch ? "per launch" : "back to back");
            }
            if (perLaunch != null) {
                result.put("per_launch_median_ms", perLaunch.medianMillis());
            }

            int exit = 0;
            if (check) {
                o.fill(Float.NaN);
                float[] lse = RandomInputs.poisonedLogSumExp(shape);
                plan.forward(in.q(), in.k(), in.v(), o, lse);
                ErrorStats errors = CorrectnessSuite.compareWithOracle(plan.backendId(), shape, in, o, lse);
                out.printf("check       %s: %s%n", errors.passes() ? "PASS" : "FAIL", errors);
                result.put("max_abs_error", errors.maxAbsError());
                result.put("rel_error", errors.relativeError());
                result.put("lse_error", errors.maxLseError());
                result.put("bad_values", errors.badValues());
                result.put("check_passed", errors.passes());
                exit = errors.passes() ? 0 : Main.EXIT_FAILED;
            }
            if (json) {
                out.println(JSON.std.asString(result));
            }
            return exit;
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
        out.printf("%-11s median %.4f ms (95%% CI %.4f..%.4f), %.3f TFLOP/s  [%s]%n", label, t.medianMillis(),
                t.lowMillis(), t.highMillis(), t.teraflops(shape.flops()), what);
    }
}
