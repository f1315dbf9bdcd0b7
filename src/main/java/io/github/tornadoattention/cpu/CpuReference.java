package io.github.tornadoattention.cpu;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;
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

    /** O in the shape's layout (index as the O tensor) and logsumexp [batch, heads, queryLength]. */
    public record Result(double[] output, double[] logSumExp) {
    }

    public static Result compute(AttentionShape shape, HalfTensor q, HalfTensor k, HalfTensor v) {
        return compute(shape, q.toFloatArray(), k.toFloatArray(), v.toFloatArray());
    }

    public static Result compute(AttentionShape shape, float[] q, float[] k, float[] v) {
        double[] out = new double[Math.toIntExact(shape.outputElements())];
        double[] lse = new double[shape.logSumExpElements()];
        IntStream.range(0, shape.batch() * shape.heads()).parallel()
                .forEach(bh -> computeHead(shape, bh / shape.heads(), bh % shape.heads(), q, k, v, out, lse));
        return new Result(out, lse);
    }

    private static void computeHead(AttentionShape s, int b, int h, float[] q, float[] k, float[] v,
                                    double[] out, double[] lse) {
        TensorStrides qs = s.queryStrides();
        TensorStrides kvs = s.kvStrides();
        int kvHead = s.kvHeadOf(h);
        double[] scores = new double[s.kvLength()];
        for (int i = 0; i < s.queryLength(); i++) {
            lse[(b * s.heads() + h) * s.queryLength() + i] = softmaxRow(s.scale(), s.softcap(), s.sink(h), q,
                    qs.rowStart(b, h, i), k, v, j -> kvs.rowStart(b, kvHead, j), s.firstVisibleKey(i), s.lastVisibleKey(i),
                    scores, out, s.headDim());
        }
    }

    /** Reads row {@code position} of K or V of ({@code slot}, {@code kvHead}) into {@code into} (headDim values). */
    @FunctionalInterface
    public interface RowSource {
        void read(int slot, int kvHead, int position, float[] into);
    }

    /**
     * The definition of attention over a KV cache: slot b's {@code newTokens[b]} queries over its
     * {@code lengths[b]} keys; query j, at position p = L_b - n_b + j, sees key k iff k < L_b, when causal
     * k <= p, and within the spec's window p - left <= k <= p + right ({@link CacheAttentionSpec#firstVisibleKey},
     * {@link CacheAttentionSpec#lastVisibleKey}); scores are softcapped and the head's sink joins the softmax
     * denominator and the lse as in the dense definition. Dense ({@code packed == false}): q and O [batch, heads, maxQueryLength, headDim] in the spec's
     * layout, lse [batch, heads, maxQueryLength]; rows j >= n_b give O = 0, lse = -inf. Packed: q and
     * O [maxTotalQueries, heads, headDim] with slot b's rows after those of the slots before it, lse
     * [heads, maxTotalQueries]; rows past the total stay O = 0, lse = -inf.
     */
    public static Result cached(CacheAttentionSpec spec, float[] q, boolean packed, RowSource keys, RowSource values,
                                int[] lengths, int[] newTokens) {
        int d = spec.headDim();
        int heads = spec.heads();
        long rows = packed ? spec.maxTotalQueries() : (long) spec.batch() * spec.maxQueryLength();
        double[] out = new double[Math.toIntExact(rows * heads * d)];
        double[] lse = new double[Math.toIntExact(rows * heads)];
        java.util.Arrays.fill(lse, Double.NEGATIVE_INFINITY);
        int[] offsets = new int[spec.batch() + 1];
        for (int b = 0; b < spec.batch(); b++) {
            offsets[b + 1] = offsets[b] + newTokens[b];
        }
        TensorStrides dense = spec.denseQueryStrides();
        IntStream.range(0, spec.batch() * heads).parallel().forEach(bh -> {
            int b = bh / heads;
            int h = bh % heads;
            int kvHead = h / spec.groupSize();
            int length = lengths[b];
            int n = newTokens[b];
            float[] k = new float[length * d];
            float[] v = new float[length * d];
            float[] row = new float[d];
            for (int j = 0; j < length; j++) {
                keys.read(b, kvHead, j, row);
                System.arraycopy(row, 0, k, j * d, d);
                values.read(b, kvHead, j, row);
                System.arraycopy(row, 0, v, j * d, d);
            }
            double[] scores = new double[length];
            for (int j = 0; j < n; j++) {
                long qRow = packed ? ((long) offsets[b] + j) * heads * d + (long) h * d : dense.rowStart(b, h, j);
                int lseIndex = packed ? h * spec.maxTotalQueries() + offsets[b] + j
                        : (b * heads + h) * spec.maxQueryLength() + j;
                lse[lseIndex] = softmaxRow(spec.scale(), spec.softcap(), spec.sink(h), q, qRow, k, v, key -> (long) key * d,
                        spec.firstVisibleKey(length, n, j), spec.lastVisibleKey(length, n, j), scores, out, d);
            }
        });
        return new Result(out, lse);
    }

    /**
     * One query row, the definition: scores s_j = scale * q.k_j over keys [firstKey, lastKey] (materialised,
     * double accumulation), each capped to softcap * tanh(s_j / softcap) when softcap > 0; with the sink
     * logit z (-inf: none) the row's weights are p_j = exp(s_j) / (exp(z) + sum_j exp(s_j)) and O row =
     * sum_j p_j v_j, added into {@code out} at {@code row}. Returns the logsumexp (natural log, the sink
     * included): the sink when the row sees no key (O stays 0), so -inf without one. Key j's K and V rows
     * start at {@code rowStart(j)}.
     */
    private static double softmaxRow(double scale, double softcap, double sink, float[] q, long row, float[] k,
                                     float[] v, java.util.function.IntToLongFunction rowStart, int firstKey, int lastKey,
                                     double[] scores, double[] out, int d) {
        if (lastKey < firstKey) {
            return sink;
        }
        double max = sink;
        for (int j = firstKey; j <= lastKey; j++) {
            long kRow = rowStart.applyAsLong(j);
            double dot = 0;
            for (int c = 0; c < d; c++) {
                dot += (double) q[(int) (row + c)] * k[(int) (kRow + c)];
            }
            double score = scale * dot;
            scores[j] = softcap > 0 ? softcap * Math.tanh(score / softcap) : score;
            max = Math.max(max, scores[j]);
        }
        double sum = Math.exp(sink - max); // 0 without a sink
        for (int j = firstKey; j <= lastKey; j++) {
            scores[j] = Math.exp(scores[j] - max);
            sum += scores[j];
        }
        for (int j = firstKey; j <= lastKey; j++) {
            long vRow = rowStart.applyAsLong(j);
            double p = scores[j] / sum;
            for (int c = 0; c < d; c++) {
                out[(int) (row + c)] += p * v[(int) (vRow + c)];
            }
        }
        return max + Math.log(sum);
    }

    /**
     * The definition of combine: partial results over disjoint key sets, {@code oParts}
     * [parts, rows, headDim] and {@code lseParts} [parts, rows], merged into O [rows, headDim] and lse:
     * lse = log sum_i exp(lse_i), O = sum_i exp(lse_i - lse) O_i; a row whose parts are all -inf gives
     * O = 0, lse = -inf.
     */
    public static Result merge(float[] oParts, float[] lseParts, int parts, int rows, int headDim) {
        double[] out = new double[rows * headDim];
        double[] lse = new double[rows];
        for (int r = 0; r < rows; r++) {
            double max = Double.NEGATIVE_INFINITY;
            for (int i = 0; i < parts; i++) {
                max = Math.max(max, lseParts[i * rows + r]);
            }
            if (max == Double.NEGATIVE_INFINITY) {
                lse[r] = max;
                continue;
            }
            double sum = 0;
            for (int i = 0; i < parts; i++) {
                sum += Math.exp(lseParts[i * rows + r] - max);
            }
            lse[r] = max + Math.log(sum);
            for (int i = 0; i < parts; i++) {
                double w = Math.exp(lseParts[i * rows + r] - lse[r]);
                if (w == 0) {
                    continue;
                }
                for (int c = 0; c < headDim; c++) {
                    out[r * headDim + c] += w * oParts[(i * rows + r) * headDim + c];
                }
            }
        }
        return new Result(out, lse);
    }
}
