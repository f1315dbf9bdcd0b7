package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.cpu.CpuReference;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * What a KV cache should hold, kept as plain lists of token rows per slot (no pages, no device):
 * the independent model that the tests (CPU here, GPU in the checks) compare every backend's cache
 * and cache attention with.
 */
public final class KvCacheModel {
    public final int slots;
    public final int kvHeads;
    public final int headDim;
    /** Per slot, per token: [kvHeads][headDim] for K and for V. */
    public final List<List<float[][]>> keys = new ArrayList<>();
    public final List<List<float[][]>> values = new ArrayList<>();
    public final int[] newTokens;
    /** The caches' element type: new K/V rows are drawn rounded to it and uploaded as it. */
    public final DType dtype;

    public KvCacheModel(int slots, int kvHeads, int headDim) {
        this(slots, kvHeads, headDim, DType.FP16);
    }

    public KvCacheModel(int slots, int kvHeads, int headDim, DType dtype) {
        this.dtype = dtype;
        this.slots = slots;
        this.kvHeads = kvHeads;
        this.headDim = headDim;
        this.newTokens = new int[slots];
        for (int b = 0; b < slots; b++) {
            keys.add(new ArrayList<>());
            values.add(new ArrayList<>());
        }
    }

    public int length(int slot) {
        return keys.get(slot).size();
    }

    public int[] lengths() {
        int[] l = new int[slots];
        for (int b = 0; b < slots; b++) {
            l[b] = length(b);
        }
        return l;
    }

    /** Appends dense [slots, kvHeads, maxNew, headDim] (BHSD) random rows to the model and the cache. */
    public void appendDense(KvCache cache, AttentionDevice device, Random random, int maxNew, int[] counts) {
        float[] k = random(dtype, random, slots * kvHeads * maxNew * headDim);
        float[] v = random(dtype, random, k.length);
        try (DeviceTensor dk = upload(device, dtype, k); DeviceTensor dv = upload(device, dtype, v)) {
            cache.append(dk, dv, io.github.tornadoattention.Layout.BHSD, maxNew, counts);
        }
        for (int b = 0; b < slots; b++) {
            for (int j = 0; j < counts[b]; j++) {
                float[][] kr = new float[kvHeads][headDim];
                float[][] vr = new float[kvHeads][headDim];
                for (int h = 0; h < kvHeads; h++) {
                    int at = ((b * kvHeads + h) * maxNew + j) * headDim;
                    System.arraycopy(k, at, kr[h], 0, headDim);
                    System.arraycopy(v, at, vr[h], 0, headDim);
                }
                keys.get(b).add(kr);
                values.get(b).add(vr);
            }
        }
        System.arraycopy(counts, 0, newTokens, 0, slots);
    }

    /** Appends packed [total, kvHeads, headDim] random rows to the cache, then to the model. */
    public void appendPacked(KvCache cache, AttentionDevice device, Random random, int[] counts) {
        float[][] kv = randomPacked(random, counts);
        try (DeviceTensor dk = upload(device, dtype, kv[0]); DeviceTensor dv = upload(device, dtype, kv[1])) {
            cache.appendPacked(dk, dv, counts);
        }
        recordPacked(kv[0], kv[1], counts);
    }

    /** Random packed K and V rows for {@code counts} new tokens per slot: {k, v}, [max(1, total), kvHeads, headDim] each. */
    public float[][] randomPacked(Random random, int[] counts) {
        int total = 0;
        for (int n : counts) {
            total += n;
        }
        float[] k = random(dtype, random, Math.max(1, total) * kvHeads * headDim);
        return new float[][] {k, random(dtype, random, k.length)};
    }

    /** Records packed rows {@code k}, {@code v} (slot b's counts[b] rows after the slots before it) as appended. */
    public void recordPacked(float[] k, float[] v, int[] counts) {
        int row = 0;
        for (int b = 0; b < slots; b++) {
            for (int j = 0; j < counts[b]; j++, row++) {
                float[][] kr = new float[kvHeads][headDim];
                float[][] vr = new float[kvHeads][headDim];
                for (int h = 0; h < kvHeads; h++) {
                    System.arraycopy(k, (row * kvHeads + h) * headDim, kr[h], 0, headDim);
                    System.arraycopy(v, (row * kvHeads + h) * headDim, vr[h], 0, headDim);
                }
                keys.get(b).add(kr);
                values.get(b).add(vr);
            }
        }
        System.arraycopy(counts, 0, newTokens, 0, slots);
    }

    public void truncate(int slot, int length) {
        keys.get(slot).subList(length, keys.get(slot).size()).clear();
        values.get(slot).subList(length, values.get(slot).size()).clear();
        newTokens[slot] = 0;
    }

    public void sharePrefix(int from, int to, int tokens) {
        keys.get(to).addAll(keys.get(from).subList(0, tokens));
        values.get(to).addAll(values.get(from).subList(0, tokens));
        newTokens[to] = 0;
    }

    public CpuReference.Result expected(CacheAttentionSpec spec, float[] q, boolean packed) {
        CpuReference.RowSource k = (b, h, j, into) -> System.arraycopy(keys.get(b).get(j)[h], 0, into, 0, headDim);
        CpuReference.RowSource v = (b, h, j, into) -> System.arraycopy(values.get(b).get(j)[h], 0, into, 0, headDim);
        return CpuReference.cached(spec, q, packed, k, v, lengths(), newTokens.clone());
    }

    public static float[] randomFp16(Random random, int n) {
        return random(DType.FP16, random, n);
    }

    /** {@code n} N(0,1) values rounded to {@code dtype} (so the oracle sees exactly what the device holds). */
    public static float[] random(DType dtype, Random random, int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = dtype.toFloat(dtype.fromFloat((float) random.nextGaussian()));
        }
        return x;
    }

    /** Fills a device tensor with NaN: an output poisoned before the call under test. */
    public static void poison(DeviceTensor t) {
        try (HalfTensor nan = HalfTensor.allocate(t.dtype(), t.length())) {
            nan.fill(Float.NaN);
            t.copyFrom(nan);
        }
    }

    public static DeviceTensor upload(AttentionDevice device, float[] values) {
        return upload(device, DType.FP16, values);
    }

    /** A new device tensor of {@code dtype} holding {@code values} (rounded to it). */
    public static DeviceTensor upload(AttentionDevice device, DType dtype, float[] values) {
        DeviceTensor t = device.allocate(dtype, values.length);
        try (HalfTensor h = HalfTensor.of(dtype, values)) {
            t.copyFrom(h);
        }
        return t;
    }

    public static float[] download(AttentionDevice device, DeviceTensor t) {
        try (HalfTensor h = HalfTensor.allocate(t.dtype(), t.length())) {
            t.copyTo(h);
            device.synchronize();
            return h.toFloatArray();
        }
    }
}
