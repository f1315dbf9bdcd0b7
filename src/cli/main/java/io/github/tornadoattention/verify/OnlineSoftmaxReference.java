package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import java.util.Arrays;
import java.util.stream.IntStream;

/**
 * A second, independently written formulation of attention, used to check the CPU reference
 * (never checked against itself): FlashAttention's blockwise online softmax in double precision,
 * walking key blocks in the outer loop, with its own index arithmetic; softcap applied per score and the sink
 * folded into the running denominator at the end. Which keys a row sees is the shape's one definition
 * ({@link AttentionShape#firstVisibleKey}, {@link AttentionShape#lastVisibleKey}); tests restate it.
 */
public final class OnlineSoftmaxReference {
    private static final int KEY_BLOCK = 64;

    private OnlineSoftmaxReference() {
    }

    /**
     * On host tensors of either element type (fp16 or bf16): the values exactly as the tensors hold them, which for
     * bf16 are the bf16-rounded inputs; tensors of another type than the shape's are refused like a plan does.
     */
    public static double[][] compute(AttentionShape s, HalfTensor q, HalfTensor k, HalfTensor v) {
        try (HalfTensor o = HalfTensor.allocate(s.dtype(), s.outputElements())) {
            s.checkTensors(q, k, v, o, null);
        }
        return compute(s, q.toFloatArray(), k.toFloatArray(), v.toFloatArray());
    }

    /** Same contract as {@code CpuReference.compute}: O indexed like the O tensor, lse [B, Hq, Sq]; values as given. */
    public static double[][] compute(AttentionShape s, float[] q, float[] k, float[] v) {
        double[] out = new double[q.length];
        double[] lse = new double[s.batch() * s.heads() * s.queryLength()];
        IntStream.range(0, s.batch() * s.heads()).parallel()
                .forEach(bh -> computeHead(s, bh / s.heads(), bh % s.heads(), q, k, v, out, lse));
        return new double[][] {out, lse};
    }

    private static void computeHead(AttentionShape s, int b, int h, float[] q, float[] k, float[] v,
                                    double[] out, double[] lse) {
        int sq = s.queryLength();
        int skv = s.kvLength();
        int d = s.headDim();
        int g = h * s.kvHeads() / s.heads();
        double[] rowMax = new double[sq];
        double[] rowSum = new double[sq];
        double[][] acc = new double[sq][d];
        Arrays.fill(rowMax, Double.NEGATIVE_INFINITY);
        for (int start = 0; start < skv; start += KEY_BLOCK) {
            int end = Math.min(skv, start + KEY_BLOCK);
            for (int i = 0; i < sq; i++) {
                // The visible range is the shape's (one definition); the block walk and the softmax are this class's own.
                int from = Math.max(start, s.firstVisibleKey(i));
                int to = Math.min(end - 1, s.lastVisibleKey(i));
                for (int j = from; j <= to; j++) {
                    double score = 0;
                    for (int c = 0; c < d; c++) {
                        score += q[index(s.layout(), b, h, i, c, s.heads(), sq, d)]
                                * (double) k[index(s.layout(), b, g, j, c, s.kvHeads(), skv, d)];
                    }
                    score *= s.scale();
                    if (s.softcap() > 0) {
                        score = s.softcap() * Math.tanh(score / s.softcap());
                    }
                    double newMax = Math.max(rowMax[i], score);
                    double correction = Math.exp(rowMax[i] - newMax);
                    double p = Math.exp(score - newMax);
                    rowSum[i] = rowSum[i] * correction + p;
                    for (int c = 0; c < d; c++) {
                        acc[i][c] = acc[i][c] * correction + p * v[index(s.layout(), b, g, j, c, s.kvHeads(), skv, d)];
                    }
                    rowMax[i] = newMax;
                }
            }
        }
        double sink = s.hasSinks() ? s.sinks().get(h) : Double.NEGATIVE_INFINITY;
        for (int i = 0; i < sq; i++) {
            boolean seesNothing = rowSum[i] == 0;
            if (!seesNothing && s.hasSinks()) {
                // The sink is one more logit in the denominator, with no value row: fold it in last.
                double newMax = Math.max(rowMax[i], sink);
                double correction = Math.exp(rowMax[i] - newMax);
                rowSum[i] = rowSum[i] * correction + Math.exp(sink - newMax);
                for (int c = 0; c < d; c++) {
                    acc[i][c] *= correction;
                }
                rowMax[i] = newMax;
            }
            for (int c = 0; c < d; c++) {
                out[index(s.layout(), b, h, i, c, s.heads(), sq, d)] = seesNothing ? 0 : acc[i][c] / rowSum[i];
            }
            lse[(b * s.heads() + h) * sq + i] = seesNothing ? sink : rowMax[i] + Math.log(rowSum[i]);
        }
    }

    private static int index(Layout layout, int b, int h, int s, int c, int heads, int seq, int d) {
        return layout == Layout.BHSD ? ((b * heads + h) * seq + s) * d + c : ((b * seq + s) * heads + h) * d + c;
    }
}
