package io.github.tornadoattention.cli;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.measure.TimingStats;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.KvCacheModel;
import java.io.IOException;
import java.io.PrintWriter;
import java.util.Arrays;
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
 * {@code prefill}: varlen prefill through the Java API as an engine runs it: prompts of different lengths
 * packed along the sequence axis, appended into an empty KV cache and attended causally per prompt
 * ({@link KvCache#appendPacked} + {@link CacheAttentionPlan#forwardPacked}), one synchronisation.
 */
@Command(name = "prefill", mixinStandardHelpOptions = true,
        description = "Time varlen prefill (packed prompts into a KV cache + causal attention) through the Java API.")
final class PrefillCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Option(names = "--heads", required = true, paramLabel = "H", description = "query heads")
    int heads;

    @Option(names = "--kv-heads", paramLabel = "HKV", description = "key/value heads (default: --heads)")
    Integer kvHeads;

    @Option(names = "--dim", required = true, paramLabel = "D", description = "head dim")
    int dim;

    @Option(names = "--lengths", required = true, split = ",", paramLabel = "N,N,...", description = "prompt lengths, one per sequence")
    List<Integer> lengths;

    @Option(names = "--page-size", paramLabel = "P", defaultValue = "0", description = "paged cache with pages of P tokens (default: contiguous)")
    int pageSize;

    @Option(names = "--backend", paramLabel = "ID", defaultValue = Backends.AUTO, description = "ptx-cuda, cpu-reference,"
            + " auto (default); under TornadoVM also ptx-tornado, tornado-mma, tornado-simt (varlen calls in chunks: slow)")
    String backend;

    @Option(names = "--iters", paramLabel = "N", defaultValue = "20", description = "timed calls (default: ${DEFAULT-VALUE})")
    int iters;

    @Mixin
    FeatureOptions features = new FeatureOptions();

    @Option(names = "--check", description = "compare the output with the CPU reference; exit 1 if out of tolerance")
    boolean check;

    @Option(names = "--seed", paramLabel = "N", description = "seed of the random inputs (default: fresh each run)")
    Long seed;

    @Option(names = "--json", description = "also print one JSON object on the last line")
    boolean json;

    @Option(names = "--force", description = "run even when the estimated memory or CPU time is over the limits")
    boolean force;

    @Override
    public Integer call() throws IOException {
        if (iters < 1 || iters > 10_000) { // each timed call keeps a sample
            throw new InvalidArgumentException("--iters", iters, "must be in 1..10000");
        }
        int[] prompts = lengths.stream().mapToInt(Integer::intValue).toArray();
        for (int n : prompts) {
            if (n < 0) {
                throw new InvalidArgumentException("--lengths", lengths, "every length must be >= 0");
            }
        }
        int batch = prompts.length;
        if (heads < 1) { // before it becomes the default of --kv-heads
            throw new InvalidArgumentException("--heads", heads, "must be >= 1");
        }
        int hkv = kvHeads == null ? heads : kvHeads;
        features.validate();
        int longest = Math.max(1, Arrays.stream(prompts).max().orElse(1));
        int total = Arrays.stream(prompts).sum();
        AttentionDevice device = Attention.device(backend);
        boolean onCpu = device.backendId().equals(Backends.CPU_REFERENCE);
        long calls = 3 + 2L * iters + (check ? 1 : 0); // warm-up, wall-timed, device-timed, checked
        Limits.Work.prefill(prompts, heads, hkv, dim, pageSize, calls, check, onCpu).check(typedOptions(), force);
        long inputSeed = seed != null ? seed : System.nanoTime();
        Random random = new Random(inputSeed);
        CacheAttentionSpec attention = features.apply(CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(hkv)
                .headDim(dim).maxQueryLength(longest).maxTotalQueries(Math.max(1, total)).maxLength(longest).causal(true),
                heads, inputSeed).build();
        DType dtype = attention.dtype();
        KvCacheSpec cacheSpec = (pageSize == 0 ? KvCacheSpec.contiguous(batch, hkv, longest, dim)
                : KvCacheSpec.paged(batch, hkv, longest, dim, pageSize)).withDtype(dtype);
        PrintWriter out = spec.commandLine().getOut();
        KvCacheModel model = new KvCacheModel(batch, hkv, dim, dtype);
        float[] q = KvCacheModel.random(dtype, random, (int) attention.packedQueryElements());
        try (KvCache cache = device.kvCache(cacheSpec); CacheAttentionPlan plan = device.plan(attention, cacheSpec);
             DeviceTensor dq = KvCacheModel.upload(device, dtype, q);
             DeviceTensor o = device.allocate(dtype, attention.packedQueryElements())) {
            float[][] kv = model.randomPacked(random, prompts); // the prompts' K and V, kept for the check
            model.recordPacked(kv[0], kv[1], prompts);
            DeviceTensor k = KvCacheModel.upload(device, dtype, kv[0]);
            DeviceTensor v = KvCacheModel.upload(device, dtype, kv[1]);
            Runnable call = () -> {
                cache.resetAll();
                cache.appendPacked(k, v, prompts);
                plan.forwardPacked(dq, cache, o, null);
            };
            for (int i = 0; i < 3; i++) {
                call.run();
                device.synchronize();
            }
            double[] wall = new double[iters];
            double[] kernel = new double[iters];
            for (int i = 0; i < iters; i++) {
                long start = System.nanoTime();
                call.run();
                device.synchronize();
                wall[i] = (System.nanoTime() - start) / 1e6;
            }
            for (int i = 0; i < iters; i++) {
                kernel[i] = device.timeEach(List.of(call)).map(ms -> ms[0]).orElse(Double.NaN);
            }
            TimingStats callStats = TimingStats.of(wall);
            TimingStats kernelStats = Double.isNaN(kernel[0]) ? null : TimingStats.of(kernel);
            double flops = 0;
            for (int n : prompts) { // 4*H*D per visible (query, key) pair: n(n+1)/2 causal pairs without a window
                for (int j = 0; j < n; j++) {
                    flops += 4.0 * heads * dim * Math.max(0, attention.lastVisibleKey(n, n, j) - attention.firstVisibleKey(n, n, j) + 1);
                }
            }
            out.printf("backend     %s (%s)%n", device.backendId(), device.name());
            out.printf("prefill     %d prompts %s, Hq=%d Hkv=%d D=%d, %s cache, seed %d%n", batch, lengths, heads, hkv, dim,
                    pageSize == 0 ? "contiguous" : "paged (" + pageSize + ")", inputSeed);
            if (!attention.features().isEmpty()) {
                out.printf("features    %s%n", String.join(", ", attention.features().stream()
                        .map(f -> f + " " + attention.featureValue(f)).toList()));
            }
            out.printf("call        median %.4g ms (95%% CI %.4g..%.4g), %s  [reset + append + attention +"
                    + " synchronize]%n", callStats.medianMillis(), callStats.lowMillis(), callStats.highMillis(),
                    Numbers.throughput(flops, callStats.medianMillis()));
            if (kernelStats != null) {
                out.printf("kernels     median %.4g ms  [device time: CUDA events around the append and the attention]%n",
                        kernelStats.medianMillis());
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("backend", device.backendId());
            result.put("lengths", prompts);
            result.put("heads", heads);
            result.put("kv_heads", hkv);
            result.put("dim", dim);
            result.put("page_size", pageSize);
            result.putAll(FeatureOptions.json(attention));
            result.put("median_ms", Numbers.json(callStats.medianMillis()));
            result.put("ci95_low_ms", Numbers.json(callStats.lowMillis()));
            result.put("ci95_high_ms", Numbers.json(callStats.highMillis()));
            result.put("tflops", Numbers.json(callStats.teraflops(flops)));
            result.put("kernel_median_ms", kernelStats == null ? null : Numbers.json(kernelStats.medianMillis()));
            result.put("seed", inputSeed);
            boolean passed = true;
            if (check) {
                KvCacheModel.poison(o);
                call.run();
                float[] actual = Arrays.copyOf(KvCacheModel.download(device, o), Math.max(1, total) * heads * dim);
                CpuReference.Result expected = model.expected(attention, q, true);
                try (HalfTensor h = HalfTensor.of(dtype, actual)) {
                    ErrorStats e = ErrorStats.compare(h, Arrays.copyOf(expected.output(), actual.length), null, null);
                    out.printf("check       %s: %s (against the CPU reference)%n", e.passes() ? "PASS" : "FAIL", e);
                    result.put("checked_against", "CPU reference");
                    result.put("max_abs_error", Numbers.json(e.maxAbsError()));
                    result.put("rel_error", Numbers.json(e.relativeError()));
                    result.put("check_passed", e.passes());
                    passed = e.passes();
                }
            }
            k.close();
            v.close();
            if (json) {
                out.println(JSON.std.asString(result));
            }
            return passed ? 0 : Main.EXIT_FAILED;
        }
    }

    /** The options that size the work, as the user typed them (for the line that refuses too much work). */
    private String typedOptions() {
        StringBuilder s = new StringBuilder("--heads " + heads);
        if (kvHeads != null) {
            s.append(" --kv-heads ").append(kvHeads);
        }
        s.append(" --dim ").append(dim).append(" --lengths ")
                .append(String.join(",", lengths.stream().map(String::valueOf).toList()));
        if (pageSize != 0) {
            s.append(" --page-size ").append(pageSize);
        }
        s.append(" --iters ").append(iters);
        features.typed(s);
        return check ? s.append(" --check").toString() : s.toString();
    }
}
