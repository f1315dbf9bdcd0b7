package io.github.tornadoattention.cpu;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.TensorStrides;
import java.util.stream.IntStream;

/**
 * The definition of attention: plain Java, double accumulation, each row's scores materialised.
 * Every other backend is checked against this. Written for obviousness, not speed (rows are only
 * spread over cores).
 */
public final class CpuReference {
    private CpuReference() {
    }

    /** O in the shape's layout (index as the O tensor) and logsumexp [batch, queryHeads, queryLength]. */
    public record Result(double[] output, double[] logSumExp) {
    }

    public static Result compute(AttentionShape shape, HalfTensor q, HalfTensor k, HalfTensor v) {
        return compute(shape, q.toFloatArray(), k.toFloatArray(), v.toFloatArray());
    }

    public static Result compute(AttentionShape shape, float[] q, float[] k, float[] v) {
        double[] out = new double[Math.toIntExact(shape.outputElements())];
        double[] lse = new double[shape.logSumExpElements()];
        IntStream.range(0, shape.batch() * shape.queryHeads()).parallel()
                .forEach(bh -> computeHead(shape, bh / shape.queryHeads(), bh % shape.queryHeads(), q, k, v, out, lse));
        return new Result(out, lse);
    }

    private static void computeHead(AttentionShape s, int b, int h, float[] q, float[] k, float[] v,
                                    double[] out, double[] lse) {
        TensorStrides qs = s.queryStrides();
        TensorStrides kvs = s.kvStrides();
        int kvHead = s.kvHeadOf(h);
        int d = s.headDim();
        double[] scores = new double[s.kvLength()];
        for (int i = 0; i < s.queryLength(); i++) {
            long qRow = qs.rowStart(b, h, i);
            int lseIndex = (b * s.queryHeads() + h) * s.queryLength() + i;
            int lastKey = s.lastVisibleKey(i);
            if (lastKey < 0) {
                // No visible key: O stays 0, logsumexp is log(0).
                lse[lseIndex] = Double.NEGATIVE_INFINITY;
                continue;
            }
            double max = Double.NEGATIVE_INFINITY;
            for (int j = 0; j <= lastKey; j++) {
                long kRow = kvs.rowStart(b, kvHead, j);
                double dot = 0;
                for (int c = 0; c < d; c++) {
                    dot += (double) q[(int) (qRow + c)] * k[(int) (kRow + c)];
                }
                scores[j] = s.scale() * dot;
                max = Math.max(max, scores[j]);
            }
            double sum = 0;
            for (int j = 0; j <= lastKey; j++) {
                scores[j] = Math.exp(scores[j] - max);
                sum += scores[j];
            }
            for (int j = 0; j <= lastKey; j++) {
                long vRow = kvs.rowStart(b, kvHead, j);
                double p = scores[j] / sum;
                for (int c = 0; c < d; c++) {
                    out[(int) (qRow + c)] += p * v[(int) (vRow + c)];
                }
            }
            lse[lseIndex] = max + Math.log(sum);
        }
    }
}
