package io.github.tornadoattention.examples.llama;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import io.github.tornadoattention.verify.Tolerance;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.common.TornadoDevice;

/**
 * A Llama-shaped decoder with random weights, built the TornadoVM way (one task graph per layer, GPULlama3.java's
 * layout: {@link LlamaDecoder}), that feeds a random prompt one token per step and then generates greedily. Each
 * attention variant ({@code --attention ours,scalar}) runs the same model and prompt in turn: ours (our attention
 * added to the layer graph through {@link CacheAttentionTasks}) and scalar (GPULlama3's fp32 attention kernel,
 * {@link LlamaKernels#scalarAttention}). It reports the wall time per token, TornadoVM's per-task kernel times over
 * the last generated tokens, what attention costs per token, the generated tokens (hash + first 32), and at sampled
 * steps every layer's attention output against the CPU reference (exit status 1 if one is out of tolerance or NaN).
 *
 * <p>A second variant is fed the first variant's generated tokens (teacher forcing) and records its own greedy pick
 * at every step, so one run says at how many steps the two models agree and, where not, how close the two best
 * logits were. A variant that agrees at every step would generate the same tokens on its own.
 */
@Command(name = "llama-decoder", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Llama-shaped decoder (random weights) on TornadoVM: one task graph per layer; our attention "
                + "task against a GPULlama3-style scalar attention kernel.")
public final class LlamaDecoderDemo implements Callable<Integer> {
    static final int EXIT_FAILED = 1;
    static final int EXIT_BAD_INPUT = 2;
    /** The attention variants (--attention). */
    static final List<String> VARIANTS = List.of("ours", "scalar", "library");
    /** Steps at the start of the prompt left out of the prompt's mean time (first transfers, warm-up). */
    static final int PROMPT_WARMUP_STEPS = 16;

    @Spec
    CommandSpec spec;

    @Option(names = "--attention", split = ",", paramLabel = "VARIANT", defaultValue = "ours,scalar",
            description = "variants to run, in order: ours, scalar, library (the library task; TornadoVM's CUDA backend) "
                    + "(default: ${DEFAULT-VALUE})")
    List<String> attention;

    @Option(names = "--backend", paramLabel = "ID", defaultValue = "ptx-tornado",
            description = "our attention's backend: ptx-tornado, tornado-mma, tornado-simt (default: ${DEFAULT-VALUE})")
    String backend;

    @Option(names = "--layers", defaultValue = "4", description = "decoder layers (default: ${DEFAULT-VALUE})")
    int layers;

    @Option(names = "--dim", defaultValue = "4096", description = "hidden size (default: ${DEFAULT-VALUE})")
    int dim;

    @Option(names = "--heads", defaultValue = "32", description = "query heads (default: ${DEFAULT-VALUE})")
    int heads;

    @Option(names = "--kv-heads", defaultValue = "8", description = "key/value heads (default: ${DEFAULT-VALUE})")
    int kvHeads;

    @Option(names = "--head-dim", defaultValue = "128", description = "head dim; heads*head-dim = dim (default: ${DEFAULT-VALUE})")
    int headDim;

    @Option(names = "--ffn-dim", defaultValue = "0",
            description = "SwiGLU feed-forward size, 0 for none (Llama 3 8B: 14336) (default: ${DEFAULT-VALUE})")
    int ffnDim;

    @Option(names = "--vocab", defaultValue = "32000", description = "vocabulary size (default: ${DEFAULT-VALUE})")
    int vocab;

    @Option(names = "--prompt", defaultValue = "3840", description = "prompt tokens, fed one per step (default: ${DEFAULT-VALUE})")
    int prompt;

    @Option(names = "--prefix", defaultValue = "0",
            description = "cache positions of every layer filled with the same random K/V rows for each variant before "
                    + "the prompt, which then starts at this position: a long context without feeding a long prompt "
                    + "through the scalar kernel one token per step (tens of minutes at 4K) (default: ${DEFAULT-VALUE})")
    int prefix;

    @Option(names = "--generate", defaultValue = "256", description = "tokens generated greedily (default: ${DEFAULT-VALUE})")
    int generate;

    @Option(names = "--check-steps", defaultValue = "4",
            description = "steps at which every layer's attention is checked against the CPU reference, 0 for none "
                    + "(default: ${DEFAULT-VALUE})")
    int checkSteps;

    @Option(names = "--profile-steps", defaultValue = "16",
            description = "last generated steps run under TornadoVM's profiler for per-task kernel times; as many "
                    + "steps before them, with the profiler off, time the library task on the device (its own CUDA "
                    + "events) (default: ${DEFAULT-VALUE})")
    int profileSteps;

    @Option(names = "--cuda-graph", description = "run the plan withCUDAGraph(): each task graph captured once and "
            + "replayed (TornadoVM's per-task host work gone; its profiler then times no task, so --profile-steps "
            + "must be 0)")
    boolean cudaGraph;

    @Option(names = "--seed", defaultValue = "20261201", description = "seed of the weights and the prompt (default: ${DEFAULT-VALUE})")
    long seed;

    @Option(names = "--rope-theta", defaultValue = "500000", description = "RoPE base (default: ${DEFAULT-VALUE})")
    float ropeTheta;

    @Option(names = "--json", paramLabel = "FILE", description = "also write the results as JSON to FILE (- for stdout)")
    String json;

    public static void main(String[] args) {
        System.exit(execute(args, new PrintWriter(System.out, true), new PrintWriter(System.err, true)));
    }

    static int execute(String[] args, PrintWriter out, PrintWriter err) {
        CommandLine cl = new CommandLine(new LlamaDecoderDemo()).setOut(out).setErr(err);
        cl.setExecutionExceptionHandler((e, commandLine, parsed) -> {
            if (e instanceof InvalidArgumentException) {
                commandLine.getErr().println("error: " + e.getMessage());
                return EXIT_BAD_INPUT;
            }
            throw e;
        });
        cl.setParameterExceptionHandler((e, a) -> {
            e.getCommandLine().getErr().println("error: " + e.getMessage());
            e.getCommandLine().getErr().println("(--help lists the options)");
            return EXIT_BAD_INPUT;
        });
        return cl.execute(args);
    }

    /** The options' meaning as a config; a bad combination is a {@link ParameterException} naming the option. */
    LlamaConfig config() {
        for (String variant : attention) {
            if (!VARIANTS.contains(variant)) {
                throw bad("--attention", variant, "each must be one of " + String.join(", ", VARIANTS));
            }
        }
        if (attention.isEmpty() || new TreeSet<>(attention).size() != attention.size()) {
            throw bad("--attention", String.join(",", attention), "one or more of " + String.join(", ", VARIANTS)
                    + ", each once");
        }
        if (!CacheAttentionTasks.BACKENDS.contains(backend)) {
            throw bad("--backend", backend, "must be one of " + CacheAttentionTasks.BACKENDS);
        }
        if (prompt < 1) {
            throw bad("--prompt", prompt, "must be >= 1");
        }
        if (prefix < 0 || prefix > 1 << 20) {
            throw bad("--prefix", prefix, "must be in [0, 2^20]");
        }
        if (generate < 1 || (long) prefix + prompt + generate > 1 << 20) {
            throw bad("--generate", generate, "must be >= 1, with --prefix + --prompt + --generate <= 2^20");
        }
        if (profileSteps < 0 || 2L * profileSteps >= generate) {
            throw bad("--profile-steps", profileSteps, "must be >= 0 with 2 x --profile-steps < --generate = " + generate);
        }
        if (cudaGraph && profileSteps != 0) {
            throw bad("--profile-steps", profileSteps, "must be 0 with --cuda-graph (TornadoVM's profiler times no task "
                    + "inside a CUDA graph)");
        }
        if (checkSteps < 0 || checkSteps > 64) {
            throw bad("--check-steps", checkSteps, "must be in [0, 64]");
        }
        try {
            return new LlamaConfig(layers, dim, heads, kvHeads, headDim, ffnDim, vocab, prefix + prompt + generate, ropeTheta,
                    1e-5f);
        } catch (InvalidArgumentException e) {
            String option = switch (e.argument()) {
                case "kvHeads" -> "--kv-heads";
                case "headDim" -> "--head-dim";
                case "ffnDim" -> "--ffn-dim";
                case "maxLength" -> "--prompt";
                case "ropeTheta" -> "--rope-theta";
                default -> "--" + e.argument();
            };
            throw bad(option, e.value(), e.allowed());
        }
    }

    private ParameterException bad(String option, Object value, String allowed) {
        return new ParameterException(spec.commandLine(), option + " = " + value + ": " + allowed);
    }

    @Override
    public Integer call() throws IOException {
        LlamaConfig config = config();
        PrintWriter out = spec.commandLine().getOut();
        TornadoDevice device = TornadoExecutionPlan.getDevice(0, 0);
        out.printf("Llama-shaped decoder: %d layers, dim %d, %d heads / %d kv heads x %d, ffn %d, vocab %d; "
                        + "%s%d prompt + %d generated tokens; device %s%n", config.layers(), config.dim(), config.heads(),
                config.kvHeads(), config.headDim(), config.ffnDim(), config.vocab(),
                prefix > 0 ? prefix + " random cache positions + " : "", prompt, generate, device);
        long t0 = System.nanoTime();
        LlamaWeights weights = new LlamaWeights(config, seed);
        out.printf("random fp16 weights: %.2f GB in %.1f s%n", config.weightBytes() / 1e9, (System.nanoTime() - t0) / 1e9);
        int[] promptTokens = new SplittableRandom(seed).ints(prompt, 0, config.vocab()).toArray();

        List<VariantRun> runs = new ArrayList<>();
        for (String name : attention) {
            AttentionVariant variant = switch (name) {
                case "ours" -> new OursAttention(config, backend, device);
                case "library" -> new LibraryAttention(config, device);
                default -> new ScalarAttention(config);
            };
            int[] forced = runs.isEmpty() ? null : runs.get(0).tokens;
            runs.add(run(config, weights, variant, promptTokens, forced, out));
        }
        report(runs, out);
        if (json != null) {
            writeJson(config, runs, out);
        }
        return runs.stream().allMatch(r -> r.checks.stream().allMatch(Check::passes)) ? 0 : EXIT_FAILED;
    }

    /** One sampled step of one layer against the CPU reference. */
    record Check(int step, int length, int layer, double maxAbsError, double relativeError, long nans) {
        boolean passes() {
            return nans == 0 && maxAbsError <= Tolerance.MAX_ABS_ERROR && relativeError <= Tolerance.MAX_RELATIVE_ERROR;
        }
    }

    /** What one variant gave. */
    static final class VariantRun {
        String name;
        double buildSeconds;
        double runSeconds;
        double promptMsPerToken;
        double decodeMsPerToken;
        int timedDecodeSteps;
        int[] tokens;
        float[] margins;
        int[] runnerUps;
        boolean forced;
        /** Per task name: kernel ms per token, summed over the layers (profiled steps). */
        Map<String, Double> kernelMsPerToken = new LinkedHashMap<>();
        double attentionMsPerToken;
        /** Per task the variant times itself ({@link AttentionVariant#timeOnDevice}): device ms per token. */
        Map<String, Double> deviceMsPerToken = new LinkedHashMap<>();
        /** Attention's device time per token: {@link #deviceMsPerToken} where present, else the profiler's. */
        double attentionDeviceMsPerToken;
        /** The plan's graphs in run order, each with the tasks the profiler timed in it (in the report's order). */
        Map<String, List<String>> graphTasks = new LinkedHashMap<>();
        List<Check> checks = new ArrayList<>();
    }

    private VariantRun run(LlamaConfig config, LlamaWeights weights, AttentionVariant variant, int[] promptTokens,
                           int[] forced, PrintWriter out) {
        VariantRun run = new VariantRun();
        run.name = variant.name();
        run.forced = forced != null;
        int steps = prompt + generate - 1;   // the last generated token is not fed back
        int firstProfiled = steps - profileSteps;
        // The library task's device timing runs without TornadoVM's profiler, whose waits around a library call
        // would leave the GPU idle at its first launch.
        int firstDeviceTimed = firstProfiled - profileSteps;
        TreeSet<Integer> sampled = sampledSteps(firstDeviceTimed);
        run.tokens = new int[generate];
        run.margins = new float[generate];
        run.runnerUps = new int[generate];
        double[] promptMs = new double[prompt];
        List<Double> decodeMs = new ArrayList<>();
        Map<String, Long> kernelNanos = new LinkedHashMap<>();
        long t0 = System.nanoTime();
        Map<String, Long> deviceNanos = new LinkedHashMap<>();
        try (LlamaDecoder decoder = new LlamaDecoder(weights, variant, cudaGraph)) {
            run.buildSeconds = (System.nanoTime() - t0) / 1e9;
            if (prefix > 0) {
                variant.fillPrefix(prefix, new AttentionVariant.PrefixRows(seed, config.kvHeads(), config.headDim()));
            }
            decoder.graphNames().forEach(g -> run.graphTasks.put(g, new ArrayList<>()));
            List<String> names = decoder.graphNames();
            out.printf("%n[%s] %d task graphs (%s) built and compiled in %.1f s; running %d steps%n", run.name,
                    names.size(), names.size() <= 6 ? String.join(", ", names)
                            : String.join(", ", names.subList(0, 4)) + ", ..., " + names.getLast(),
                    run.buildSeconds, steps);
            long start = System.nanoTime();
            for (int s = 0; s < steps; s++) {
                int tok = s < prompt ? promptTokens[s] : (forced != null ? forced[s - prompt] : run.tokens[s - prompt]);
                boolean withLogits = s >= prompt - 1;
                boolean sample = sampled.contains(s);
                boolean profiled = s >= firstProfiled;
                boolean deviceTimed = s >= firstDeviceTimed && !profiled;
                decoder.profile(profiled);
                variant.timeOnDevice(deviceTimed);
                long begin = System.nanoTime();
                LlamaDecoder.StepResult result = decoder.step(tok, prefix + s + 1, withLogits, sample);
                if (withLogits) {
                    Greedy.Pick pick = Greedy.pick(result.logits());
                    int g = s - (prompt - 1);
                    run.tokens[g] = pick.token();
                    run.margins[g] = pick.margin();
                    run.runnerUps[g] = pick.runnerUp();
                }
                double ms = (System.nanoTime() - begin) / 1e6;
                if (sample) {
                    check(config, s, result.samples(), run.checks, out, run.name);
                } else if (profiled) {
                    result.kernelNanos().forEach((task, ns) -> kernelNanos.merge(task, ns, Long::sum));
                } else if (deviceTimed) {
                    variant.drainDeviceNanos().forEach((task, ns) -> deviceNanos.merge(task, ns, Long::sum));
                } else if (s < prompt - 1) {
                    promptMs[s] = ms;
                } else {
                    decodeMs.add(ms);
                }
            }
            run.runSeconds = (System.nanoTime() - start) / 1e9;
        } finally {
            variant.timeOnDevice(false);
            variant.drainDeviceNanos();
        }
        // The last generated token comes from the last step's logits; the loop never feeds it back.
        run.promptMsPerToken = mean(promptMs, Math.min(PROMPT_WARMUP_STEPS, prompt - 1), prompt - 1, sampled);
        // Per-token decode time: the median of the unprofiled, unsampled generated steps (at ~the end context).
        run.timedDecodeSteps = decodeMs.size();
        run.decodeMsPerToken = median(decodeMs);
        Map<String, Double> perTask = new java.util.TreeMap<>(LlamaDecoderDemo::graphOrder);
        kernelNanos.forEach((task, ns) -> perTask.merge(ProfileLog.taskName(task), ns / 1e6 / Math.max(1, profileSteps),
                Double::sum));
        run.kernelMsPerToken = new LinkedHashMap<>(perTask);
        kernelNanos.keySet().stream().sorted((a, b) -> graphOrder(ProfileLog.taskName(a), ProfileLog.taskName(b)))
                .forEach(id -> {
                    int dot = id.indexOf('.');
                    List<String> tasks = run.graphTasks.get(dot < 0 ? "" : id.substring(0, dot));
                    if (tasks != null && !tasks.contains(ProfileLog.taskName(id))) {
                        tasks.add(ProfileLog.taskName(id));
                    }
                });
        run.attentionMsPerToken = perTask.entrySet().stream().filter(e -> variant.isAttentionTask(e.getKey()))
                .mapToDouble(Map.Entry::getValue).sum();
        if (profileSteps == 0) {
            run.attentionMsPerToken = Double.NaN;   // nothing timed
        }
        deviceNanos.forEach((task, ns) -> run.deviceMsPerToken.put(task, ns / 1e6 / Math.max(1, profileSteps)));
        // Attention on the device: the variant's own device time where it has one, else the profiler's.
        run.attentionDeviceMsPerToken = perTask.entrySet().stream().filter(e -> variant.isAttentionTask(e.getKey()))
                .mapToDouble(e -> run.deviceMsPerToken.getOrDefault(e.getKey(), e.getValue())).sum();
        return run;
    }

    /** The order tasks run in a token (the profiler's log has none); our attention's tasks sit where attention is. */
    private static final List<String> TASK_ORDER = List.of("embed", "rms_att", "qkv", "rope", "attention", "out_proj",
            "rms_ffn", "ffn_gate_up", "ffn_down", "final_norm", "lm_head");
    /** Our attention's tasks in the order they run (library: one; ptx-tornado: the fused one; Java backends: three). */
    private static final List<String> OUR_ATTENTION_ORDER = List.of("attn_append_decode", "attn_decode", "attn_Append",
            "attn_DecodeSplit", "attn_DecodeCombine");

    static int graphOrder(String a, String b) {
        int c = Integer.compare(rank(a), rank(b));
        if (c == 0 && rank(a) == TASK_ORDER.indexOf("attention")) {
            c = Integer.compare(attentionRank(a), attentionRank(b));
        }
        return c != 0 ? c : a.compareTo(b);
    }

    private static int attentionRank(String task) {
        int i = OUR_ATTENTION_ORDER.indexOf(task);
        return i < 0 ? OUR_ATTENTION_ORDER.size() : i;
    }

    private static int rank(String task) {
        int i = TASK_ORDER.indexOf(task.startsWith("attn_") ? "attention" : task);
        return i < 0 ? TASK_ORDER.size() : i;
    }

    /** {@code --check-steps} steps spread over [0, end), the last at end - 1 (the longest context not profiled). */
    private TreeSet<Integer> sampledSteps(int end) {
        TreeSet<Integer> steps = new TreeSet<>();
        for (int i = 1; i <= checkSteps; i++) {
            steps.add((int) Math.max(0, Math.round((double) i * end / checkSteps) - 1));
        }
        return steps;
    }

    private void check(LlamaConfig config, int step, List<AttentionVariant.Sample> samples, List<Check> checks,
                       PrintWriter out, String name) {
        int length = prefix + step + 1;
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(config.heads()).kvHeads(config.kvHeads())
                .headDim(config.headDim()).maxQueryLength(1).maxLength(config.maxLength()).causal(true).build();
        for (int l = 0; l < samples.size(); l++) {
            AttentionVariant.Sample sample = samples.get(l);
            CpuReference.Result ref = CpuReference.cached(spec, sample.q(), false, sample.keys(), sample.values(),
                    new int[] {length}, new int[] {1});
            checks.add(compare(step, length, l, sample.output(), ref.output()));
            if (prefix > 0) {
                // The reference reads the cache as downloaded: make sure the prefix rows did reach the device.
                for (boolean values : new boolean[] {false, true}) {
                    float[] row = new float[config.headDim()];
                    (values ? sample.values() : sample.keys()).read(0, 0, prefix - 1, row);
                    float[] filled = new AttentionVariant.PrefixRows(seed, config.kvHeads(), config.headDim())
                            .row(l, values, prefix - 1);   // [kvHeads, D]: kv head 0 first
                    double[] expected = new double[row.length];
                    for (int i = 0; i < row.length; i++) {
                        expected[i] = filled[i];
                    }
                    Check c = compare(step, prefix, l, row, expected);
                    if (c.maxAbsError != 0 || c.nans != 0) {
                        out.printf("[%s] layer %d: the cache's last prefix row differs from the rows filled in: FAIL%n",
                                name, l);
                        checks.add(new Check(step, prefix, l, Double.POSITIVE_INFINITY, c.relativeError, c.nans));
                    }
                }
            }
        }
        Check worst = checks.subList(checks.size() - samples.size(), checks.size()).stream()
                .max((a, b) -> Double.compare(a.maxAbsError, b.maxAbsError)).orElseThrow();
        boolean pass = checks.subList(checks.size() - samples.size(), checks.size()).stream().allMatch(Check::passes);
        out.printf("[%s] check at length %d (all %d layers): max abs %.2e, rel %.2e, NaN %d: %s%n", name, length,
                samples.size(), worst.maxAbsError, worst.relativeError, worst.nans, pass ? "PASS" : "FAIL");
    }

    static Check compare(int step, int length, int layer, float[] actual, double[] expected) {
        double maxAbs = 0;
        double diff2 = 0;
        double ref2 = 0;
        long nans = 0;
        for (int i = 0; i < expected.length; i++) {
            if (!Float.isFinite(actual[i])) {
                nans++;
                continue;
            }
            double d = actual[i] - expected[i];
            maxAbs = Math.max(maxAbs, Math.abs(d));
            diff2 += d * d;
            ref2 += expected[i] * expected[i];
        }
        return new Check(step, length, layer, maxAbs, ref2 == 0 ? Math.sqrt(diff2) : Math.sqrt(diff2 / ref2), nans);
    }

    private static double mean(double[] ms, int from, int to, TreeSet<Integer> skip) {
        double sum = 0;
        int n = 0;
        for (int i = from; i < to; i++) {
            if (!skip.contains(i)) {
                sum += ms[i];
                n++;
            }
        }
        return n == 0 ? Double.NaN : sum / n;
    }

    private static double median(List<Double> values) {
        if (values.isEmpty()) {
            return Double.NaN;
        }
        double[] v = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    private void report(List<VariantRun> runs, PrintWriter out) {
        for (VariantRun run : runs) {
            if (profileSteps == 0) {
                out.printf("%n[%s] no kernel times (--profile-steps 0%s)%n", run.name, cudaGraph ? ", --cuda-graph" : "");
            } else {
                out.printf("%n[%s] kernel time per token over the last %d generated tokens (TornadoVM profiler, "
                        + "summed over %d layers; launch latency included):%n", run.name, profileSteps, layers);
                double total = run.kernelMsPerToken.values().stream().mapToDouble(Double::doubleValue).sum();
                out.printf("  %-20s %10s %7s%n", "task", "ms/token", "share");
                run.kernelMsPerToken.forEach((task, ms) -> out.printf("  %-20s %10.4f %6.1f%%%n", task, ms,
                        total > 0 ? 100 * ms / total : 0));
                out.printf("  %-20s %10.4f%n", "all kernels", total);
                run.deviceMsPerToken.forEach((task, ms) -> out.printf("  %-20s %10.4f on the device (CUDA events "
                        + "around its launches, the %d steps before, profiler off; the profiler's time above is the "
                        + "host's, between two markers it waits for)%n", task, ms, profileSteps));
            }
            out.printf("[%s] tokens: hash %s, first 32 %s%n", run.name, Greedy.hash(run.tokens),
                    Arrays.toString(Arrays.copyOf(run.tokens, Math.min(32, run.tokens.length))));
        }
        VariantRun first = runs.get(0);
        out.printf("%n%-20s %10s %10s %12s %12s %12s %16s %12s%n", "variant", "prompt", "decode", "attention",
                "attention", "kernels", "tokens", "check");
        out.printf("%-20s %10s %10s %12s %12s %12s %16s %12s%n", "", "ms/token", "ms/token", "ms/token",
                "device ms", "ms/token", "hash", "max abs err");
        for (VariantRun run : runs) {
            double kernels = run.kernelMsPerToken.values().stream().mapToDouble(Double::doubleValue).sum();
            double worst = run.checks.stream().mapToDouble(Check::maxAbsError).max().orElse(Double.NaN);
            boolean pass = run.checks.stream().allMatch(Check::passes);
            out.printf("%-20s %10.3f %10.3f %12.4f %12.4f %12.4f %16s %12s%n", run.name, run.promptMsPerToken,
                    run.decodeMsPerToken, run.attentionMsPerToken, run.attentionDeviceMsPerToken, kernels,
                    Greedy.hash(run.tokens),
                    run.checks.isEmpty() ? "-" : String.format("%.2e %s", worst, pass ? "ok" : "FAIL"));
        }
        out.printf("(decode: median wall time of %d unprofiled generated steps at context %d..%d%s; attention: its "
                        + "tasks' kernel time at context ~%d, TornadoVM's profiler; device: the library task's own CUDA "
                        + "events where it has them)%n", first.timedDecodeSteps, prefix + prompt + 1,
                prefix + prompt + generate - 2 * profileSteps - 1, cudaGraph ? ", CUDA graphs" : "",
                prefix + prompt + generate - profileSteps / 2);
        for (VariantRun run : runs.subList(1, runs.size())) {
            out.printf("%n%s / %s attention time: %.2fx (profiler), %.2fx (device)%n", run.name, first.name,
                    run.attentionMsPerToken / first.attentionMsPerToken,
                    run.attentionDeviceMsPerToken / first.attentionDeviceMsPerToken);
            out.print(agreement(first, run));
        }
    }

    /** How the second variant's greedy picks compare with the first's tokens, which it was fed. */
    static String agreement(VariantRun first, VariantRun other) {
        StringBuilder s = new StringBuilder();
        int same = 0;
        List<Integer> differ = new ArrayList<>();
        for (int g = 0; g < first.tokens.length; g++) {
            if (first.tokens[g] == other.tokens[g]) {
                same++;
            } else {
                differ.add(g);
            }
        }
        s.append(String.format("%s fed %s's tokens picks the same token at %d of %d steps%s%n", other.name, first.name,
                same, first.tokens.length, differ.isEmpty() ? ": both generate the same tokens" : ""));
        for (int g : differ.subList(0, Math.min(8, differ.size()))) {
            s.append(String.format("  token %d: %s picks %d (runner-up %d, margin %.2e); %s picks %d (runner-up %d, "
                            + "margin %.2e)%n", g, first.name, first.tokens[g], first.runnerUps[g], first.margins[g],
                    other.name, other.tokens[g], other.runnerUps[g], other.margins[g]));
        }
        return s.toString();
    }

    private void writeJson(LlamaConfig config, List<VariantRun> runs, PrintWriter out) throws IOException {
        Map<String, Object> root = new LinkedHashMap<>();
        Map<String, Object> configJson = new LinkedHashMap<>();
        configJson.put("layers", config.layers());
        configJson.put("dim", config.dim());
        configJson.put("heads", config.heads());
        configJson.put("kv_heads", config.kvHeads());
        configJson.put("head_dim", config.headDim());
        configJson.put("ffn_dim", config.ffnDim());
        configJson.put("vocab", config.vocab());
        configJson.put("prefix", prefix);
        configJson.put("prompt", prompt);
        configJson.put("generate", generate);
        configJson.put("seed", seed);
        root.put("config", configJson);
        root.put("backend", backend);
        root.put("cuda_graph", cudaGraph);
        List<Object> variants = new ArrayList<>();
        for (VariantRun run : runs) {
            Map<String, Object> v = new LinkedHashMap<>();
            v.put("name", run.name);
            v.put("fed_first_variant_tokens", run.forced);
            v.put("build_seconds", run.buildSeconds);
            v.put("run_seconds", run.runSeconds);
            v.put("prompt_ms_per_token", run.promptMsPerToken);
            v.put("decode_ms_per_token", run.decodeMsPerToken);
            v.put("decode_steps_timed", run.timedDecodeSteps);
            v.put("kernel_ms_per_token", run.kernelMsPerToken);
            v.put("attention_ms_per_token", run.attentionMsPerToken);
            v.put("device_ms_per_token", run.deviceMsPerToken);
            v.put("attention_device_ms_per_token", run.attentionDeviceMsPerToken);
            v.put("graphs", run.graphTasks);
            v.put("tokens_hash", Greedy.hash(run.tokens));
            v.put("tokens", Arrays.stream(run.tokens).boxed().toList());
            List<Object> checks = new ArrayList<>();
            for (Check c : run.checks) {
                checks.add(Map.of("step", c.step(), "length", c.length(), "layer", c.layer(),
                        "max_abs_error", c.maxAbsError(), "relative_error", c.relativeError(), "nans", c.nans(),
                        "pass", c.passes()));
            }
            v.put("checks", checks);
            variants.add(v);
        }
        root.put("variants", variants);
        if (runs.size() > 1) {
            root.put("attention_ratio", runs.get(1).attentionMsPerToken / runs.get(0).attentionMsPerToken);
            root.put("attention_device_ratio", runs.get(1).attentionDeviceMsPerToken
                    / runs.get(0).attentionDeviceMsPerToken);
        }
        String text = JSON.std.with(JSON.Feature.PRETTY_PRINT_OUTPUT).asString(root);
        if (json.equals("-")) {
            out.println(text);
        } else {
            Files.writeString(Path.of(json), text + "\n");
            out.println("JSON written to " + json);
        }
    }
}
