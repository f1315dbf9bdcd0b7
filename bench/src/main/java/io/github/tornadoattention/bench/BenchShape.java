package io.github.tornadoattention.bench;

import io.github.tornadoattention.AttentionShape;
import java.util.List;
import java.util.stream.Stream;

/**
 * One benchmarked shape, written {@code B,Hq,Hkv,Sq,Skv,D,causal} (causal 0 or 1) in JMH parameters
 * and in the JSON handed to the PyTorch baseline. The lists below are the one place the
 * benchmarked shapes are defined.
 */
public record BenchShape(int batch, int heads, int kvHeads, int seq, int kvSeq, int dim, boolean causal) {

    /** The seeds' shapes and larger ones, causal and not. */
    public static final List<BenchShape> PREFILL = Stream.of(
                    new int[] {1, 8, 512, 64}, new int[] {8, 8, 128, 64}, new int[] {16, 8, 512, 64},
                    new int[] {4, 16, 2048, 64}, new int[] {4, 16, 2048, 128}, new int[] {1, 32, 4096, 128})
            .flatMap(s -> Stream.of(false, true).map(c -> new BenchShape(s[0], s[1], s[1], s[2], s[2], s[3], c)))
            .toList();

    /** Decode: one query against a long KV cache (B=8, Hq=32, Hkv=8, D=128); causal is moot for Sq=1. */
    public static final List<BenchShape> DECODE = Stream.of(4096, 8192, 16384, 32768)
            .map(skv -> new BenchShape(8, 32, 8, 1, skv, 128, false)).toList();

    /** The seed shapes only: what the CPU reference can time in reasonable time. */
    public static final List<BenchShape> SEEDS = PREFILL.subList(0, 6);

    public static final List<BenchShape> ALL = Stream.concat(PREFILL.stream(), DECODE.stream()).toList();

    public static BenchShape parse(String spec) {
        String[] f = spec.split(",");
        if (f.length != 7) {
            throw new IllegalArgumentException("shape = " + spec + ": expected B,Hq,Hkv,Sq,Skv,D,causal(0|1)");
        }
        return new BenchShape(Integer.parseInt(f[0].trim()), Integer.parseInt(f[1].trim()), Integer.parseInt(f[2].trim()),
                Integer.parseInt(f[3].trim()), Integer.parseInt(f[4].trim()), Integer.parseInt(f[5].trim()),
                f[6].trim().equals("1"));
    }

    public String spec() {
        return batch + "," + heads + "," + kvHeads + "," + seq + "," + kvSeq + "," + dim + "," + (causal ? 1 : 0);
    }

    /** A short label for tables and charts, e.g. {@code (16,8,512,64) causal} or {@code decode 8x32/8 Skv=4096}. */
    public String label() {
        if (seq == 1) {
            return "decode B=" + batch + " Hq=" + heads + " Hkv=" + kvHeads + " Skv=" + kvSeq + " D=" + dim;
        }
        return "(" + batch + "," + heads + "," + seq + "," + dim + ")" + (causal ? " causal" : "");
    }

    public AttentionShape toShape() {
        return AttentionShape.builder().batch(batch).heads(heads).kvHeads(kvHeads).queryLength(seq).kvLength(kvSeq)
                .headDim(dim).causal(causal).build();
    }
}
