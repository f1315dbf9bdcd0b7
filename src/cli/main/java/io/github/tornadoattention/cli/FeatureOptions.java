package io.github.tornadoattention.cli;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.SplittableRandom;
import picocli.CommandLine.Option;

/**
 * {@code --dtype}, {@code --window}, {@code --softcap} and {@code --sinks}: the element type and the optional score
 * features, for run, selftest, decode and prefill (decode and prefill: the KV caches' type too).
 */
final class FeatureOptions {
    /** Mixed into the seed of the sink logits, so they are not the first draws of the inputs' stream. */
    private static final long SINK_SEED = 0x51A5_0F_5EEDL;

    @Option(names = "--dtype", paramLabel = "fp16|bf16",
            description = "element type of Q, K, V and O (and of the KV caches); default fp16 (selftest: each case's own)")
    String dtype;

    @Option(names = "--window", paramLabel = "LEFT[,RIGHT]",
            description = "sliding window (FlashAttention's window_size): query i sees keys i+Skv-Sq-LEFT..i+Skv-Sq+RIGHT;"
                    + " -1 = unbounded; RIGHT defaults to -1 (0 with --causal has the same effect); decode and prefill: relative to"
                    + " each sequence's own position")
    String window;

    @Option(names = "--softcap", paramLabel = "C", description = "softcap: a score s becomes C*tanh(s/C) before the softmax; C > 0")
    String softcap;

    @Option(names = "--sinks", description = "attention sinks: one random N(0,1) logit per query head (from the seed) in every"
            + " row's softmax denominator")
    boolean sinks;

    /** {@code shape} with the features given; the sink logits are drawn from {@code seed}. */
    AttentionShape apply(AttentionShape shape, long seed) {
        DType type = dtype == null ? shape.dtype() : dtype(dtype);
        if (window == null && softcap == null && !sinks && type == shape.dtype()) {
            return shape;
        }
        AttentionShape.Builder b = shape.toBuilder().dtype(type);
        if (window != null) {
            int[] w = window(window);
            b.window(w[0], w[1]);
        }
        if (softcap != null) {
            b.softcap(softcap(softcap));
        }
        if (sinks) {
            b.sinks(sinkLogits(shape.heads(), seed));
        }
        return b.build();
    }

    /** The cache spec builder {@code b} (of {@code heads} query heads) with the features given, as {@link #apply}. */
    CacheAttentionSpec.Builder apply(CacheAttentionSpec.Builder b, int heads, long seed) {
        if (dtype != null) {
            b.dtype(dtype(dtype));
        }
        if (window != null) {
            int[] w = window(window);
            b.window(w[0], w[1]);
        }
        if (softcap != null) {
            b.softcap(softcap(softcap));
        }
        if (sinks) {
            b.sinks(sinkLogits(heads, seed));
        }
        return b;
    }

    private static float[] sinkLogits(int heads, long seed) {
        SplittableRandom random = new SplittableRandom(seed ^ SINK_SEED);
        float[] logits = new float[Math.max(0, heads)];
        for (int h = 0; h < logits.length; h++) {
            logits[h] = (float) random.nextGaussian();
        }
        return logits;
    }

    /** The features set on a cache spec, for a JSON line, as {@link #json(AttentionShape)}. */
    static Map<String, Object> json(CacheAttentionSpec spec) {
        return json(spec.dtype(), spec.hasWindow() ? java.util.List.of(spec.windowLeft(), spec.windowRight()) : null,
                spec.hasSoftcap() ? spec.softcap() : null, spec.hasSinks() ? spec.sinks() : null);
    }

    /** The features as typed, appended to a command line ({@code s}) that refuses too much work. */
    StringBuilder typed(StringBuilder s) {
        if (window != null) {
            s.append(" --window ").append(window);
        }
        if (softcap != null) {
            s.append(" --softcap ").append(softcap);
        }
        return sinks ? s.append(" --sinks") : s;
    }

    /** The element type given (fp16 by default). */
    DType dtype() {
        return dtype == null ? DType.FP16 : dtype(dtype);
    }

    /** Checks the typed values before any work (the shape checks them again). */
    void validate() {
        if (dtype != null) {
            dtype(dtype);
        }
        if (window != null) {
            window(window);
        }
        if (softcap != null) {
            softcap(softcap);
        }
    }

    /** The features set, for a JSON line: dtype, window [left, right], softcap, sinks (the logits); unset ones left out. */
    static Map<String, Object> json(AttentionShape shape) {
        return json(shape.dtype(), shape.hasWindow() ? java.util.List.of(shape.windowLeft(), shape.windowRight()) : null,
                shape.hasSoftcap() ? shape.softcap() : null, shape.hasSinks() ? shape.sinks() : null);
    }

    /** One JSON vocabulary for shapes and cache specs: dtype, then each feature that is set (null: not set). */
    private static Map<String, Object> json(DType dtype, java.util.List<Integer> window, Float softcap,
                                            java.util.List<Float> sinks) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("dtype", dtype.label());
        if (window != null) {
            m.put("window", window);
        }
        if (softcap != null) {
            m.put("softcap", softcap);
        }
        if (sinks != null) {
            m.put("sinks", sinks);
        }
        return m;
    }

    /** The features as typed, for selftest's JSON line: window [left, right], softcap, sinks true. */
    Map<String, Object> typedJson() {
        Map<String, Object> m = new LinkedHashMap<>();
        if (dtype != null) {
            m.put("dtype", dtype(dtype).label());
        }
        if (window != null) {
            int[] w = window(window);
            m.put("window", java.util.List.of(w[0], w[1]));
        }
        if (softcap != null) {
            m.put("softcap", softcap(softcap));
        }
        if (sinks) {
            m.put("sinks", true);
        }
        return m;
    }

    static DType dtype(String typed) {
        return switch (typed == null ? "" : typed.trim().toLowerCase(java.util.Locale.ROOT)) {
            case "fp16" -> DType.FP16;
            case "bf16" -> DType.BF16;
            default -> throw new InvalidArgumentException("--dtype", typed, "must be fp16 or bf16");
        };
    }

    static int[] window(String typed) {
        String allowed = "must be LEFT or LEFT,RIGHT, each -1 (unbounded) or a number of keys >= 0";
        String[] parts = typed.split(",", -1);
        if (parts.length > 2) {
            throw new InvalidArgumentException("--window", typed, allowed);
        }
        int[] w = {-1, -1};
        try {
            for (int i = 0; i < parts.length; i++) {
                w[i] = Integer.parseInt(parts[i].trim());
            }
        } catch (NumberFormatException e) {
            throw new InvalidArgumentException("--window", typed, allowed);
        }
        if (w[0] < -1 || w[1] < -1) {
            throw new InvalidArgumentException("--window", typed, allowed);
        }
        return w;
    }

    static float softcap(String typed) {
        String allowed = "must be a finite number > 0";
        float value;
        try {
            value = Float.parseFloat(typed.trim());
        } catch (NumberFormatException e) {
            throw new InvalidArgumentException("--softcap", typed, allowed);
        }
        if (!(value > 0f && Float.isFinite(value))) {
            throw new InvalidArgumentException("--softcap", typed, allowed);
        }
        return value;
    }
}
