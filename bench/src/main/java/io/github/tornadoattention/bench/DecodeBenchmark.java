package io.github.tornadoattention.bench;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.measure.DecodeLoop;
import io.github.tornadoattention.verify.KvCacheModel;
import java.util.Arrays;
import java.util.Random;
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

/**
 * The inference API as an engine uses it: {@link #decodeToken} is one token of {@link DecodeLoop}
 * (every layer appends one token per sequence and attends over its cache; one synchronisation),
 * {@link #varlenPrefill} one packed prefill of ragged prompts (append into an empty cache +
 * attention, causal per prompt). PyTorch's cost for the same decode runs beside it in the GPU report
 * (bench/decode_baseline.py).
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
public class DecodeBenchmark {
    @Param(Backends.CPU_REFERENCE)
    public String backend;

    /** batch, heads, kv heads, head dim, context, layers, page size (0: contiguous), ragged (0/1). */
    @Param("2,4,2,64,256,1,0,0")
    public String decode;

    private DecodeLoop loop;
    private AttentionDevice device;
    private KvCache prefillCache;
    private CacheAttentionPlan prefillPlan;
    private DeviceTensor promptQ;
    private DeviceTensor promptK;
    private DeviceTensor promptV;
    private DeviceTensor promptO;
    private int[] promptLengths;
    private int steps;
    private int capacityLeft;

    @Setup(Level.Trial)
    public void setUp() {
        int[] p = Arrays.stream(decode.split(",")).mapToInt(Integer::parseInt).toArray();
        int batch = p[0], heads = p[1], kvHeads = p[2], dim = p[3], context = p[4], layers = p[5], page = p[6];
        boolean ragged = p[7] != 0;
        device = Attention.device(backend);
        int[] lengths = new int[batch];
        for (int b = 0; b < batch; b++) {
            lengths[b] = ragged ? Math.max(1, context / 16 + (context - context / 16) * b / Math.max(1, batch - 1)) : context;
        }
        capacityLeft = 4096;
        loop = new DecodeLoop(device, batch, heads, kvHeads, dim, layers, context + capacityLeft, page, lengths, 1);
        // Varlen prefill: the same prompts' lengths packed, into an empty cache each call.
        promptLengths = lengths;
        int total = Arrays.stream(lengths).sum();
        KvCacheSpec spec = page == 0 ? KvCacheSpec.contiguous(batch, kvHeads, context, dim)
                : KvCacheSpec.paged(batch, kvHeads, context, dim, page);
        CacheAttentionSpec attention = CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(kvHeads)
                .headDim(dim).maxQueryLength(context).maxTotalQueries(total).maxLength(context).causal(true).build();
        prefillCache = device.kvCache(spec);
        prefillPlan = device.plan(attention, spec);
        Random random = new Random(2);
        promptQ = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) attention.packedQueryElements()));
        promptK = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, total * kvHeads * dim));
        promptV = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, total * kvHeads * dim));
        promptO = device.allocate(DType.FP16, attention.packedQueryElements());
    }

    @Benchmark
    public void decodeToken() {
        if (++steps == capacityLeft) {
            loop.rewind(); // stay within the caches' capacity; the context stays as set up
            steps = 0;
        }
        loop.step();
    }

    @Benchmark
    public void varlenPrefill() {
        prefillCache.resetAll();
        prefillCache.appendPacked(promptK, promptV, promptLengths);
        prefillPlan.forwardPacked(promptQ, prefillCache, promptO, null);
        device.synchronize();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        loop.close();
        prefillPlan.close();
        prefillCache.close();
        for (DeviceTensor t : new DeviceTensor[] {promptQ, promptK, promptV, promptO}) {
            t.close();
        }
    }
}
