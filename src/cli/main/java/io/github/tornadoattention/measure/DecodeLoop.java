package io.github.tornadoattention.measure;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.KvCacheModel;
import io.github.tornadoattention.verify.OnlineSoftmaxReference;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * A decode loop as an inference engine runs it: {@code layers} KV caches (one per layer) prefilled
 * to a length per sequence, one {@link CacheAttentionPlan} per layer type (one for all layers, or with a
 * window pattern such as Gemma 2's alternating local and global layers, one for the windowed layers and
 * one for the global ones), then per token and layer
 * an append of each sequence's new K/V and attention of its query over its cache, with one
 * synchronisation per token. Inputs are device tensors throughout, as an engine's projections would
 * leave them. Used by {@code decode} on the command line and by the benchmarks.
 *
 * <p>Cache contents are known without keeping them on the host: position j of a prefilled sequence
 * holds row j mod {@code poolRows} of a random pool, decode step t's token holds step tensor t mod 4,
 * so sampled steps can be checked against the oracle.
 */
public final class DecodeLoop implements AutoCloseable {
    private static final int STEP_TENSORS = 4;

    private final AttentionDevice device;
    private final CacheAttentionSpec spec;
    /** The element type of the caches, queries and outputs (the spec's). */
    private final DType dtype;
    /** The spec of the global layers of a window pattern (the spec without its window); null without one. */
    private final CacheAttentionSpec globalSpec;
    /** Per layer: true where the layer is windowed (the layer uses {@link #spec}), false where global. */
    private final boolean[] windowedLayer;
    private final KvCacheSpec cacheSpec;
    private final int[] prefill;
    private final int poolRows;
    private final float[] poolKeys;
    private final float[] poolValues;
    private final float[][] stepKeys = new float[STEP_TENSORS][];
    private final float[][] stepValues = new float[STEP_TENSORS][];
    private final float[][] queries = new float[STEP_TENSORS][];
    private final List<KvCache> caches = new ArrayList<>();
    private final List<DeviceTensor> tensors = new ArrayList<>();
    private final CacheAttentionPlan plan;
    private final CacheAttentionPlan globalPlan;
    private final DeviceTensor[] stepK = new DeviceTensor[STEP_TENSORS];
    private final DeviceTensor[] stepV = new DeviceTensor[STEP_TENSORS];
    private final DeviceTensor[] q = new DeviceTensor[STEP_TENSORS];
    private final DeviceTensor o;
    /** The global layers' output (a window pattern's second layer type), so a check sees both types; null without. */
    private final DeviceTensor oGlobal;
    private final int[] ones;
    private int steps;

    /** The spec of each layer's cache: contiguous, or paged with enough pages for every slot at capacity. */
    public static KvCacheSpec cacheSpec(int batch, int kvHeads, int capacity, int headDim, int pageSize, DType dtype) {
        return (pageSize == 0 ? KvCacheSpec.contiguous(batch, kvHeads, capacity, headDim)
                : KvCacheSpec.paged(batch, kvHeads, capacity, headDim, pageSize)).withDtype(dtype);
    }

    /**
     * Makes the caches and the plan and prefills: slot b holds {@code lengths[b]} tokens.
     * {@code capacity} bounds the length a sequence reaches while decoding.
     */
    public DecodeLoop(AttentionDevice device, int batch, int heads, int kvHeads, int headDim, int layers, int capacity,
                      int pageSize, int[] lengths, long seed) {
        this(device, batch, heads, kvHeads, headDim, layers, capacity, pageSize, lengths, seed, b -> b);
    }

    /** As above, the plan's spec with {@code features} applied (window, softcap, sinks: a layer type's options). */
    public DecodeLoop(AttentionDevice device, int batch, int heads, int kvHeads, int headDim, int layers, int capacity,
                      int pageSize, int[] lengths, long seed,
                      java.util.function.UnaryOperator<CacheAttentionSpec.Builder> features) {
        this(device, batch, heads, kvHeads, headDim, layers, capacity, pageSize, lengths, seed, features, null);
    }

    /**
     * As above with a window pattern: {@code windowLayers} (L = windowed, G = global, repeated over the layers,
     * e.g. "LG" for Gemma 2) says which layers keep the spec's window; the global ones get a second plan, the
     * same spec without the window. Null: every layer uses the spec as it is.
     */
    public DecodeLoop(AttentionDevice device, int batch, int heads, int kvHeads, int headDim, int layers, int capacity,
                      int pageSize, int[] lengths, long seed,
                      java.util.function.UnaryOperator<CacheAttentionSpec.Builder> features, String windowLayers) {
        this.device = device;
        this.prefill = lengths.clone();
        if (layers < 1) {
            throw new InvalidArgumentException("layers", layers, "must be >= 1");
        }
        spec = features.apply(CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(kvHeads).headDim(headDim)
                .maxQueryLength(1).maxLength(capacity).causal(true)).build();
        dtype = spec.dtype();
        cacheSpec = cacheSpec(batch, kvHeads, capacity, headDim, pageSize, dtype);
        windowedLayer = windowPattern("windowLayers", windowLayers, layers, spec.hasWindow());
        boolean anyGlobal = windowLayers != null && !allTrue(windowedLayer);
        globalSpec = anyGlobal ? spec.toBuilder().window(-1, -1).build() : null;
        Random random = new Random(seed);
        int longest = Arrays.stream(lengths).max().orElse(0);
        poolRows = Math.max(1, Math.min(longest, 4096));
        poolKeys = KvCacheModel.random(dtype, random, poolRows * kvHeads * headDim);
        poolValues = KvCacheModel.random(dtype, random, poolKeys.length);
        ones = new int[batch];
        Arrays.fill(ones, 1);
        try {
            DeviceTensor pk = track(KvCacheModel.upload(device, dtype, poolKeys));
            DeviceTensor pv = track(KvCacheModel.upload(device, dtype, poolValues));
            for (int t = 0; t < STEP_TENSORS; t++) {
                stepKeys[t] = KvCacheModel.random(dtype, random, batch * kvHeads * headDim);
                stepValues[t] = KvCacheModel.random(dtype, random, batch * kvHeads * headDim);
                queries[t] = KvCacheModel.random(dtype, random, Math.toIntExact(spec.denseQueryElements()));
                stepK[t] = track(KvCacheModel.upload(device, dtype, stepKeys[t]));
                stepV[t] = track(KvCacheModel.upload(device, dtype, stepValues[t]));
                q[t] = track(KvCacheModel.upload(device, dtype, queries[t]));
            }
            o = track(device.allocate(dtype, spec.denseQueryElements()));
            oGlobal = globalSpec == null ? null : track(device.allocate(dtype, spec.denseQueryElements()));
            for (int l = 0; l < layers; l++) {
                KvCache cache = device.kvCache(cacheSpec);
                caches.add(cache);
                int[] counts = new int[batch];
                for (int b = 0; b < batch; b++) {
                    for (int done = 0; done < lengths[b]; done += counts[b]) {
                        Arrays.fill(counts, 0);
                        counts[b] = Math.min(poolRows, lengths[b] - done);
                        cache.appendPacked(pk, pv, counts);
                    }
                    counts[b] = 0;
                }
            }
            plan = device.plan(spec, cacheSpec);
            globalPlan = globalSpec == null ? null : device.plan(globalSpec, cacheSpec);
            device.synchronize();
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    private DeviceTensor track(DeviceTensor t) {
        tensors.add(t);
        return t;
    }

    public CacheAttentionSpec spec() {
        return spec;
    }

    public int layers() {
        return caches.size();
    }

    /** The spec of layer {@code layer}: the spec, or for a global layer of a window pattern the spec without its window. */
    public CacheAttentionSpec spec(int layer) {
        return windowedLayer[layer] || globalSpec == null ? spec : globalSpec;
    }

    /** How many plans the loop made: one per layer type. */
    public int plans() {
        return globalPlan == null ? 1 : 2;
    }

    private DeviceTensor out(int layer) {
        return windowedLayer[layer] || oGlobal == null ? o : oGlobal;
    }

    private CacheAttentionPlan plan(int layer) {
        return windowedLayer[layer] || globalPlan == null ? plan : globalPlan;
    }

    /** One token: every layer appends one token per sequence and attends; then one synchronisation. */
    public void step() {
        int t = steps++ % STEP_TENSORS;
        for (int l = 0; l < caches.size(); l++) {
            KvCache cache = caches.get(l);
            cache.append(stepK[t], stepV[t], Layout.BHSD, 1, ones);
            plan(l).forward(q[t], cache, out(l), null);
        }
        device.synchronize();
    }

    /** One token with each launch group timed on the device: the sum of append and attention device times. */
    public double timedStep() {
        int t = steps++ % STEP_TENSORS;
        List<Runnable> ops = new ArrayList<>();
        for (int l = 0; l < caches.size(); l++) {
            KvCache cache = caches.get(l);
            CacheAttentionPlan p = plan(l);
            DeviceTensor out = out(l);
            ops.add(() -> cache.append(stepK[t], stepV[t], Layout.BHSD, 1, ones));
            ops.add(() -> p.forward(q[t], cache, out, null));
        }
        return device.timeEach(ops).map(ms -> Arrays.stream(ms).sum()).orElse(Double.NaN);
    }

    /**
     * Bytes of K and V the attention of one token reads over all layers: per sequence the keys its query sees
     * (a windowed layer's window, not the whole cache).
     */
    public double kvBytesPerToken() {
        double tokens = 0;
        for (int l = 0; l < caches.size(); l++) {
            CacheAttentionSpec s = spec(l);
            for (int b = 0; b < prefill.length; b++) {
                int length = caches.get(l).length(b);
                int position = length - 1; // the new token's
                int first = s.windowLeft() < 0 ? 0 : Math.max(0, position - s.windowLeft());
                tokens += position - first + 1;
            }
        }
        return tokens * 2.0 * cacheSpec.kvHeads() * cacheSpec.headDim() * 2; // K and V, 2-byte elements (fp16, bf16)
    }

    /**
     * Per layer, whether it is windowed: {@code pattern} (L windowed, G global) repeated over the layers; null:
     * every layer as the spec says. Errors name {@code argument}.
     */
    public static boolean[] windowPattern(String argument, String pattern, int layers, boolean specHasWindow) {
        boolean[] windowed = new boolean[layers];
        if (pattern == null) {
            Arrays.fill(windowed, specHasWindow);
            return windowed;
        }
        String allowed = "must be a pattern of L (windowed layer) and G (global layer), e.g. LG, repeated over the layers;"
                + " it needs a window";
        if (!specHasWindow || pattern.isEmpty() || !pattern.chars().allMatch(c -> c == 'L' || c == 'G')) {
            throw new InvalidArgumentException(argument, pattern, allowed);
        }
        for (int l = 0; l < layers; l++) {
            windowed[l] = pattern.charAt(l % pattern.length()) == 'L';
        }
        return windowed;
    }

    private static boolean allTrue(boolean[] values) {
        for (boolean v : values) {
            if (!v) {
                return false;
            }
        }
        return true;
    }

    /**
     * Runs one more token and checks its attention output against the oracle ({@link #oracleName}) over what
     * the caches must hold, the outputs poisoned first; with a window pattern both layer types' outputs (every
     * layer's cache holds the same tokens, so each type's last layer stands for the type). The worse result.
     */
    public ErrorStats checkStep() {
        int t = steps % STEP_TENSORS;
        KvCacheModel.poison(o);
        if (oGlobal != null) {
            KvCacheModel.poison(oGlobal);
        }
        step();
        ErrorStats worst = compare(spec, o, t);
        if (oGlobal != null) {
            ErrorStats global = compare(globalSpec, oGlobal, t);
            if (!global.passes() || global.maxAbsError() > worst.maxAbsError()) {
                worst = global;
            }
        }
        return worst;
    }

    private ErrorStats compare(CacheAttentionSpec layerSpec, DeviceTensor output, int t) {
        float[] actual = KvCacheModel.download(device, output);
        KvCache cache = caches.get(0);
        int[] lengths = new int[prefill.length];
        for (int b = 0; b < lengths.length; b++) {
            lengths[b] = cache.length(b);
        }
        int d = cacheSpec.headDim();
        int kvHeads = cacheSpec.kvHeads();
        int batch = prefill.length;
        int decoded = steps;
        CpuReference.RowSource keys = (b, h, j, into) -> row(b, h, j, into, poolKeys, stepKeys, decoded, batch, kvHeads, d);
        CpuReference.RowSource values = (b, h, j, into) -> row(b, h, j, into, poolValues, stepValues, decoded, batch, kvHeads, d);
        double[] expected = onCpuReference()
                ? onlineSoftmax(layerSpec, queries[t], keys, values, lengths)
                : CpuReference.cached(layerSpec, queries[t], false, keys, values, lengths, ones).output();
        try (io.github.tornadoattention.HalfTensor out = io.github.tornadoattention.HalfTensor.of(dtype, actual)) {
            return ErrorStats.compare(out, expected, null, null);
        }
    }

    /** What {@link #checkStep} compares with: the CPU reference, or on cpu-reference (itself the CPU reference) the online-softmax one. */
    public String oracleName() {
        return CorrectnessSuite.oracleName(device.backendId());
    }

    private boolean onCpuReference() {
        return device.backendId().equals(Backends.CPU_REFERENCE);
    }

    /**
     * The decode step's output by the independent {@link OnlineSoftmaxReference}: per slot, one query per
     * head over the slot's keys as a dense [1, kvHeads, length, headDim] problem (the query at position
     * length - 1, the dense row's too, so the spec's window, softcap and sinks carry over as they are).
     */
    private double[] onlineSoftmax(CacheAttentionSpec spec, float[] q, CpuReference.RowSource keys, CpuReference.RowSource values, int[] lengths) {
        int d = cacheSpec.headDim();
        int heads = spec.heads();
        int kvHeads = cacheSpec.kvHeads();
        double[] out = new double[Math.toIntExact(spec.denseQueryElements())];
        float[] row = new float[d];
        for (int b = 0; b < lengths.length; b++) {
            int length = lengths[b];
            float[] k = new float[kvHeads * length * d];
            float[] v = new float[k.length];
            for (int h = 0; h < kvHeads; h++) {
                for (int j = 0; j < length; j++) {
                    keys.read(b, h, j, row);
                    System.arraycopy(row, 0, k, (h * length + j) * d, d);
                    values.read(b, h, j, row);
                    System.arraycopy(row, 0, v, (h * length + j) * d, d);
                }
            }
            AttentionShape shape = AttentionShape.builder().batch(1).heads(heads).kvHeads(kvHeads).queryLength(1)
                    .kvLength(length).headDim(d).causal(true).scale(spec.scale())
                    .window(spec.windowLeft(), spec.windowRight()).softcap(spec.softcap()).sinks(spec.sinkArray()).build();
            float[] slotQ = Arrays.copyOfRange(q, b * heads * d, (b + 1) * heads * d);
            double[] o = OnlineSoftmaxReference.compute(shape, slotQ, k, v)[0];
            System.arraycopy(o, 0, out, b * heads * d, heads * d);
        }
        return out;
    }

    /** Row j of slot b: the pool for prefilled positions, else the step tensor of the decode step that wrote it. */
    private void row(int b, int h, int j, float[] into, float[] pool, float[][] step, int decoded, int batch, int kvHeads, int d) {
        if (j < prefill[b]) {
            System.arraycopy(pool, ((j % poolRows) * kvHeads + h) * d, into, 0, d);
        } else {
            int stepIndex = j - prefill[b]; // decode steps so far wrote positions prefill[b] .. prefill[b] + decoded - 1
            System.arraycopy(step[stepIndex % STEP_TENSORS], (b * kvHeads + h) * d, into, 0, d);
        }
    }

    /** Resets every cache to its prefill length (so a long run stays within capacity). */
    public void rewind() {
        for (KvCache cache : caches) {
            for (int b = 0; b < prefill.length; b++) {
                cache.truncate(b, prefill[b]);
            }
        }
        steps = 0;
    }

    @Override
    public void close() {
        if (plan != null) {
            plan.close();
        }
        if (globalPlan != null) {
            globalPlan.close();
        }
        caches.forEach(KvCache::close);
        tensors.forEach(DeviceTensor::close);
    }
}
