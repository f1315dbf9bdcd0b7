package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import java.util.SplittableRandom;

/** Fresh N(0,1) inputs of the shape's dtype (fp16 or bf16; never zeros), and a NaN-poisoned output to write into. */
public record RandomInputs(HalfTensor q, HalfTensor k, HalfTensor v) implements AutoCloseable {

    public static RandomInputs generate(AttentionShape shape, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        return new RandomInputs(gaussian(shape, shape.queryElements(), random), gaussian(shape, shape.kvElements(), random),
                gaussian(shape, shape.kvElements(), random));
    }

    private static HalfTensor gaussian(AttentionShape shape, long length, SplittableRandom random) {
        float[] values = new float[Math.toIntExact(length)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) random.nextGaussian();
        }
        return HalfTensor.of(shape.dtype(), values);
    }

    /** An output tensor filled with NaN, so an unwritten element cannot pass. */
    public static HalfTensor poisonedOutput(AttentionShape shape) {
        HalfTensor o = HalfTensor.allocate(shape.dtype(), shape.outputElements());
        o.fill(Float.NaN);
        return o;
    }

    public static float[] poisonedLogSumExp(AttentionShape shape) {
        float[] lse = new float[shape.logSumExpElements()];
        java.util.Arrays.fill(lse, Float.NaN);
        return lse;
    }

    @Override
    public void close() {
        q.close();
        k.close();
        v.close();
    }
}
