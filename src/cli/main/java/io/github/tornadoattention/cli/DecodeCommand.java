package io.github.tornadoattention.cli;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.measure.DecodeLoop;
import io.github.tornadoattention.measure.TimingStats;
import io.github.tornadoattention.verify.ErrorStats;
import java.io.IOException;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code decode}: a decode loop through the Java API as an engine runs it (see {@link DecodeLoop}):
 * caches prefilled to about {@code --context} tokens per sequence, then {@code --steps} tokens, each
 * an append of one token per sequence and attention in every layer, and one synchronisation.
 */
@Command(name = "decode", mixinStandardHelpOptions = true,
        description = "Time decode steps (append + attention per layer, device-resident caches) through the Java API.")
final class DecodeCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Option(names = "--batch", required = true, paramLabel = "B", description = "sequences decoded together")
    int batch;

    @Option(names = "--heads", required = true, paramLabel = "H", description = "query heads")
    int heads;

    @Option(names = "--kv-heads", paramLabel = "HKV", description = "key/value heads (default: --heads)")
    Integer kvHeads;

    @Option(names = "--dim", required = true, paramLabel = "D", description = "head dim")
    int dim;

    @Option(names = "--context", required = true, paramLabel = "N", description = "tokens per sequence before decoding")
    int context;

    @Option(names = "--steps", paramLabel = "T", defaultValue = "64", description = "timed decode steps (default: ${DEFAULT-VALUE})")
    int steps;

    @Option(names = "--warmup", paramLabel = "N", defaultValue = "8", description = "untimed steps first (default: ${DEFAULT-VALUE}; the TornadoVM backends reach their steady "
                    + "state after a few hundred, as the JIT compiles TornadoVM's execute path)")
    int warmup;

    @Option(names = "--layers", paramLabel = "L", defaultValue = "1", description = "layers, each with its own cache (default: ${DEFAULT-VALUE})")
    int layers;

    @Option(names = "--ragged", description = "lengths spread from N/16 to N over the batch instead of N for all")
    boolean ragged;

    @Option(names = "--page-size", paramLabel = "P", defaultValue = "0", description = "paged cache with pages of P tokens (default: contiguous)")
    int pageSize;

    @Option(names = "--backend", paramLabel = "ID", defaultValue = Backends.AUTO, description = "ptx-cuda, ptx-tornado, tornado-mma, tornado-simt (under TornadoVM), cpu-reference or auto (default)")
    String backend;

    @Option(names = "--profile", description = "TornadoVM backends: run the task graphs with TornadoVM's profiler, so the"
            + " kernels' device time is reported (ptx-cuda always times with CUDA events)")
    boolean profile;

    @Option(names = "--cuda-graph", description = "TornadoVM backends: run the caches' task graphs as CUDA graphs"
            + " (TornadoVM captures an execution once and replays it)")
    boolean cudaGraph;

    @Option(names = "--lanes", paramLabel = "N", description = "TornadoVM backends: N host threads run the caches' executions"
            + " concurrently (PlanOptions.lanes; default 0: every call completes before it returns)")
    int lanes;

    @Mixin
    FeatureOptions features = new FeatureOptions();

    @Option(names = "--window-layers", paramLabel = "PATTERN", description = "with --window: which layers are windowed, a"
            + " pattern of L (windowed) and G (global) repeated over the layers, e.g. LG (Gemma 2: alternating, first local)"
            + " or LLLLLG (Gemma 3); each layer type gets its own plan (default: every layer windowed)")
    String windowLayers;

    @Option(names = "--check", description = "check sampled steps' outputs against the CPU reference; exit 1 if out of tolerance")
    boolean check;

    @Option(names = "--seed", paramLabel = "N", description = "seed of the random inputs (default: fresh each run)")
    Long seed;

    @Option(names = "--force", description = "run even when the estimated memory or CPU time is over the limits")
    boolean force;

    @Option(names = "--json", description = "also print one JSON object on the last line")
    boolean json;

    @Override
    public Integer call() throws IOException {
        Limits.calls("--steps", steps, 1);
        Limits.calls("--warmup", warmup, 0);
        if (batch < 1) { // before it sizes the lengths
            throw new InvalidArgumentException("--batch", batch, "must be >= 1");
        }
        requireRange("--layers", layers, 1, 1024);
        requireRange("--context", context, 1, Integer.MAX_VALUE - 2_000_000);
        if (heads < 1) { // before it becomes the default of --kv-heads
            throw new InvalidArgumentException("--heads", heads, "must be >= 1");
        }
        int hkv = kvHeads == null ? heads : kvHeads;
        features.validate();
        if (windowLayers != null) {
            if (features.window == null) {
                throw new InvalidArgumentException("--window-layers", windowLayers, "needs --window (it says which layers the window applies to)");
            }
            DecodeLoop.windowPattern("--window-layers", windowLayers, layers, true); // the pattern's own errors, before any work
        }
        AttentionDevice device = Attention.device(backend, PlanOptions.builder().profile(profile).cudaGraph(cudaGraph).lanes(lanes)
                .build());
        long inputSeed = seed != null ? seed : System.nanoTime();
        int[] lengths = lengths(batch, context, ragged, inputSeed);
        int kernelSamples = Math.min(steps, 16);
        int checkedSteps = check ? 2 : 0;
        int capacity = context + warmup + steps + kernelSamples + checkedSteps + 1;
        // Every step appends a token to every sequence: the caches hold context + all steps, and on the
        // CPU device each step attends over all of it.
        boolean onCpu = device.backendId().equals(Backends.CPU_REFERENCE);
        long cacheDirectBytes = device.directBytes(DecodeLoop.cacheSpec(batch, hkv, capacity, dim, pageSize, features.dtype()));
        Limits.Work.decode(lengths, heads, hkv, dim, layers, capacity, pageSize,
                (long) warmup + steps + kernelSamples + checkedSteps, checkedSteps, onCpu, cacheDirectBytes)
                .check(typedOptions(), force);
        PrintWriter out = spec.commandLine().getOut();
        long plansBefore = Attention.plansCreated();
        try (DecodeLoop loop = new DecodeLoop(device, batch, heads, hkv, dim, layers, capacity, pageSize, lengths, inputSeed,
                b -> features.apply(b, heads, inputSeed), windowLayers)) {
            for (int i = 0; i < warmup; i++) {
                loop.step();
            }
            long plansAfterWarmup = Attention.plansCreated();
            long allocationsAfterWarmup = device.allocations();
            long compilationsAfterWarmup = device.compilations();
            double[] stepMillis = new double[steps];
            for (int i = 0; i < steps; i++) {
                long start = System.nanoTime();
                loop.step();
                stepMillis[i] = (System.nanoTime() - start) / 1e6;
            }
            long plansInSteps = Attention.plansCreated() - plansAfterWarmup;
            long allocationsInSteps = device.allocations() - allocationsAfterWarmup;
            long compilationsInSteps = device.compilations() - compilationsAfterWarmup;
            double[] kernelMillis = new double[kernelSamples];
            for (int i = 0; i < kernelSamples; i++) {
                kernelMillis[i] = loop.timedStep();
            }
            TimingStats step = TimingStats.of(stepMillis);
            TimingStats kernel = Double.isNaN(kernelMillis[0]) ? null : TimingStats.of(kernelMillis);
            double bytes = loop.kvBytesPerToken();

            out.printf("backend     %s (%s)%n", device.backendId(), device.name());
            out.printf("decode      B=%d Hq=%d Hkv=%d D=%d, %d layer(s), context %s, %s cache, seed %d%n", batch, heads,
                    hkv, dim, layers, ragged ? "ragged " + min(lengths) + ".." + max(lengths) : String.valueOf(context),
                    pageSize == 0 ? "contiguous" : "paged (" + pageSize + " tokens per page)", inputSeed);
            if (!loop.spec().features().isEmpty()) {
                out.printf("features    %s%s%n", String.join(", ", loop.spec().features().stream()
                        .map(f -> f + " " + loop.spec().featureValue(f)).toList()),
                        windowLayers == null ? "" : " (window on layers " + windowLayers + " repeated; " + loop.plans() + " plans)");
            }
            out.printf("step        median %.4g ms (95%% CI %.4g..%.4g)  [whole token through the Java API: %d x"
                    + " (append + attention), one synchronisation]%n", step.medianMillis(), step.lowMillis(),
                    step.highMillis(), layers);
            if (kernel != null) {
                out.printf("kernels     median %.4g ms per token  [device time of the launches (CUDA events; TornadoVM: its profiler); step/kernels"
                        + " = %.3f]%n", kernel.medianMillis(), step.medianMillis() / kernel.medianMillis());
                out.printf("K/V read    %.4g TB/s by the kernels, %.4g TB/s per step wall time%n",
                        bytes / kernel.medianMillis() / 1e9, bytes / step.medianMillis() / 1e9);
            }
            out.printf("per step    %d plans created, %d device allocations, %d compilations (after %d warm-up steps)%n",
                    plansInSteps, allocationsInSteps, compilationsInSteps, warmup);

            Map<String, Object> result = new LinkedHashMap<>();
            result.put("backend", device.backendId());
            result.put("device", device.name());
            result.put("batch", batch);
            result.put("heads", heads);
            result.put("kv_heads", hkv);
            result.put("dim", dim);
            result.put("layers", layers);
            result.put("context", context);
            result.put("lengths", lengths);
            result.put("page_size", pageSize);
            result.putAll(FeatureOptions.json(loop.spec()));
            if (windowLayers != null) {
                result.put("window_layers", windowLayers);
            }
            result.put("steps", steps);
            result.put("cuda_graph", cudaGraph);
            result.put("lanes", lanes);
            result.put("median_ms", round(step.medianMillis()));
            result.put("ci95_low_ms", round(step.lowMillis()));
            result.put("ci95_high_ms", round(step.highMillis()));
            result.put("kernel_median_ms", kernel == null ? null : round(kernel.medianMillis()));
            result.put("kv_bytes_per_token", bytes);
            result.put("kernel_kv_tb_per_s", kernel == null ? null : round(bytes / kernel.medianMillis() / 1e9));
            result.put("plans_created", plansInSteps);
            result.put("plans_created_total", Attention.plansCreated() - plansBefore);
            result.put("allocations_after_warmup", allocationsInSteps);
            result.put("compilations_after_warmup", compilationsInSteps);
            result.put("compilations_total", device.compilations());
            result.put("seed", inputSeed);
            // An engine's steady state: after warm-up a step plans, allocates and compiles nothing.
            boolean steadyState = plansInSteps == 0 && allocationsInSteps == 0 && compilationsInSteps == 0;
            result.put("steady_state", steadyState);
            if (!steadyState) {
                out.printf("FAIL        steps after warm-up created plans, allocated or compiled (see above)%n");
            }
            boolean passed = steadyState;
            if (check) {
                ErrorStats worst = null;
                for (int i = 0; i < 2; i++) {
                    ErrorStats e = loop.checkStep();
                    if (worst == null || !e.passes() || e.maxAbsError() > worst.maxAbsError()) {
                        worst = e;
                    }
                }
                out.printf("check       %s: %s (layer 0, 2 sampled steps, against the %s)%n",
                        worst.passes() ? "PASS" : "FAIL", worst, loop.oracleName());
                result.put("checked_against", loop.oracleName());
                result.put("max_abs_error", round(worst.maxAbsError()));
                result.put("rel_error", round(worst.relativeError()));
                result.put("check_passed", worst.passes());
                passed &= worst.passes();
            }
            if (json) {
                out.println(JSON.std.asString(result));
            }
            return passed ? 0 : Main.EXIT_FAILED;
        }
    }

    /** The options that size the work, as the user typed them (for the line that refuses too much work). */
    private String typedOptions() {
        StringBuilder s = new StringBuilder("--batch " + batch + " --heads " + heads);
        if (kvHeads != null) {
            s.append(" --kv-heads ").append(kvHeads);
        }
        s.append(" --dim ").append(dim).append(" --context ").append(context);
        if (ragged) {
            s.append(" --ragged");
        }
        if (pageSize != 0) {
            s.append(" --page-size ").append(pageSize);
        }
        s.append(" --layers ").append(layers).append(" --steps ").append(steps).append(" --warmup ").append(warmup);
        features.typed(s);
        if (windowLayers != null) {
            s.append(" --window-layers ").append(windowLayers);
        }
        return check ? s.append(" --check").toString() : s.toString();
    }

    /** N for every sequence, or (ragged) N/16 .. N evenly spread and shuffled by the seed. */
    static int[] lengths(int batch, int context, boolean ragged, long seed) {
        int[] lengths = new int[batch];
        if (!ragged || batch == 1) {
            java.util.Arrays.fill(lengths, context);
            return lengths;
        }
        int low = Math.max(1, context / 16);
        List<Integer> spread = new ArrayList<>();
        for (int b = 0; b < batch; b++) {
            spread.add(low + (int) ((long) (context - low) * b / (batch - 1)));
        }
        Collections.shuffle(spread, new Random(seed));
        for (int b = 0; b < batch; b++) {
            lengths[b] = spread.get(b);
        }
        return lengths;
    }

    private static void requireRange(String option, int value, int low, int high) {
        if (value < low || value > high) {
            throw new InvalidArgumentException(option, value, "must be in [" + low + ", " + high + "]");
        }
    }

    private static int min(int[] values) {
        return java.util.Arrays.stream(values).min().orElse(0);
    }

    private static int max(int[] values) {
        return java.util.Arrays.stream(values).max().orElse(0);
    }

    private static Double round(double value) {
        return Numbers.json(value);
    }
}
