package io.github.tornadoattention.examples.llama;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;

/**
 * Random weights (no model can be downloaded where this was written): fp16 matrices drawn uniformly with the
 * standard deviations below, the same for a given seed whatever the thread count (each 1M-element chunk has its
 * own generator). Shared by every variant run in one JVM, so they see the same model.
 *
 * <p>The scales make attention matter to the tokens: q and k elements of standard deviation ~2 give scores of
 * standard deviation ~4, a peaked softmax over a few keys, so the attention output (v of standard deviation 1)
 * moves the residual stream about as much as the token embedding does. With Xavier-like scales everywhere the
 * softmax over 4K keys would be nearly flat, the attention output ~0 and the next token a function of the
 * current one only.
 */
public final class LlamaWeights {
    static final double EMBEDDING_STD = 1.0;
    static final double QK_STD_TIMES_SQRT_DIM = 2.0;
    static final double V_STD_TIMES_SQRT_DIM = 1.0;
    static final double OUT_STD_TIMES_SQRT_N = 1.0;
    private static final int CHUNK = 1 << 20;

    /** One layer's weights: fused [q; k; v] rows, output projection, RMSNorm weights, SwiGLU (null without FFN). */
    public record Layer(FloatArray attentionNorm, HalfFloatArray wqkv, HalfFloatArray wo, FloatArray ffnNorm,
                        HalfFloatArray w13, HalfFloatArray w2) {
    }

    public final LlamaConfig config;
    public final HalfFloatArray embedding;
    public final List<Layer> layers;
    public final FloatArray finalNorm;
    public final HalfFloatArray lmHead;
    /** RoPE tables [maxLength, headDim / 2], computed in double on the host. */
    public final FloatArray ropeCos;
    public final FloatArray ropeSin;

    public LlamaWeights(LlamaConfig config, long seed) {
        this.config = config;
        int dim = config.dim();
        int tensor = 0;
        embedding = uniform(config.vocab() * dim, EMBEDDING_STD, seed, tensor++);
        List<Layer> all = new ArrayList<>();
        for (int l = 0; l < config.layers(); l++) {
            HalfFloatArray wqkv = new HalfFloatArray(config.qkvRows() * dim);
            double qk = QK_STD_TIMES_SQRT_DIM / Math.sqrt(dim);
            fill(wqkv, 0, (config.dim() + config.kvDim()) * dim, qk, seed, tensor++);
            fill(wqkv, (config.dim() + config.kvDim()) * dim, config.kvDim() * dim, V_STD_TIMES_SQRT_DIM / Math.sqrt(dim),
                    seed, tensor++);
            HalfFloatArray wo = uniform(dim * dim, OUT_STD_TIMES_SQRT_N / Math.sqrt(dim), seed, tensor++);
            FloatArray attentionNorm = ones(dim);
            FloatArray ffnNorm = null;
            HalfFloatArray w13 = null;
            HalfFloatArray w2 = null;
            if (config.ffnDim() > 0) {
                ffnNorm = ones(dim);
                w13 = uniform(2 * config.ffnDim() * dim, 1.0 / Math.sqrt(dim), seed, tensor++);
                w2 = uniform(dim * config.ffnDim(), 1.0 / Math.sqrt(config.ffnDim()), seed, tensor++);
            }
            all.add(new Layer(attentionNorm, wqkv, wo, ffnNorm, w13, w2));
        }
        layers = List.copyOf(all);
        finalNorm = ones(dim);
        lmHead = uniform(config.vocab() * dim, 1.0 / Math.sqrt(dim), seed, tensor);
        int half = config.headDim() / 2;
        ropeCos = new FloatArray(config.maxLength() * half);
        ropeSin = new FloatArray(config.maxLength() * half);
        for (int pos = 0; pos < config.maxLength(); pos++) {
            for (int j = 0; j < half; j++) {
                double angle = pos * Math.pow(config.ropeTheta(), -2.0 * j / config.headDim());
                ropeCos.set(pos * half + j, (float) Math.cos(angle));
                ropeSin.set(pos * half + j, (float) Math.sin(angle));
            }
        }
    }

    private static FloatArray ones(int n) {
        FloatArray a = new FloatArray(n);
        a.init(1.0f);
        return a;
    }

    private static HalfFloatArray uniform(int n, double std, long seed, int tensor) {
        HalfFloatArray a = new HalfFloatArray(n);
        fill(a, 0, n, std, seed, tensor);
        return a;
    }

    /** Elements [from, from + n) uniform in [-a, a], a = std sqrt(3), as fp16 bits written straight into memory. */
    static void fill(HalfFloatArray array, int from, int n, double std, long seed, int tensor) {
        MemorySegment data = array.getSegment();
        float a = (float) (std * Math.sqrt(3.0));
        int chunks = (n + CHUNK - 1) / CHUNK;
        IntStream.range(0, chunks).parallel().forEach(chunk -> {
            SplittableRandom random = new SplittableRandom(seed * 1_000_003L + tensor * 65_537L + chunk);
            int end = Math.min(n, (chunk + 1) * CHUNK);
            for (int i = chunk * CHUNK; i < end; i++) {
                float value = a * (2.0f * random.nextFloat() - 1.0f);
                data.setAtIndex(ValueLayout.JAVA_SHORT, from + (long) i, Float.floatToFloat16(value));
            }
        });
    }
}
