package io.github.tornadoattention.verify;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.cli.Limits;
import io.github.tornadoattention.cpu.CpuReference;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Both oracles at the ends of the accepted scale range, on the largest fp16 inputs: the logsumexp
 * stays finite (in fp32 too) and a correct result passes the check.
 */
class ScaleRangeTest {
    private static final int D = 64;
    private static final float FP16_MAX = 65504f;

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void theOraclesStayFiniteAtTheLargestScale(boolean smallest) {
        float scale = smallest ? Float.MIN_VALUE : Limits.maxScale(D);
        AttentionShape shape = AttentionShape.builder().batch(1).heads(2).queryLength(3).kvLength(5).headDim(D)
                .scale(scale).build();
        float[] q = new float[(int) shape.queryElements()];
        float[] k = new float[(int) shape.kvElements()];
        float[] v = new float[(int) shape.kvElements()];
        Arrays.fill(q, FP16_MAX);
        Arrays.fill(k, FP16_MAX);
        for (int i = 0; i < v.length; i++) {
            v[i] = (i % 7) - 3;
        }
        CpuReference.Result reference = CpuReference.compute(shape, q, k, v);
        double[][] online = OnlineSoftmaxReference.compute(shape, q, k, v);
        // Every key scores scale * D * 65504^2: equal scores, so lse = that + log(5) and O = the mean of V.
        double expectedLse = (double) scale * D * FP16_MAX * FP16_MAX + Math.log(5);
        for (int row = 0; row < shape.logSumExpElements(); row++) {
            assertTrue(Float.isFinite((float) reference.logSumExp()[row]), String.valueOf(reference.logSumExp()[row]));
            assertEquals(expectedLse, reference.logSumExp()[row], Math.ulp(expectedLse) * 4);
            assertEquals(expectedLse, online[1][row], Math.ulp(expectedLse) * 4);
        }
        for (int i = 0; i < q.length; i++) {
            assertEquals(reference.output()[i], online[0][i], 1e-12);
        }
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void aCorrectResultPassesTheCheckAtEitherEnd(boolean smallest) {
        float scale = smallest ? Float.MIN_VALUE : Limits.maxScale(D);
        AttentionShape shape = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(40).kvLength(77)
                .headDim(D).causal(true).scale(scale).build();
        try (AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(shape); RandomInputs in = RandomInputs.generate(shape, 9);
             HalfTensor o = RandomInputs.poisonedOutput(shape)) {
            float[] lse = RandomInputs.poisonedLogSumExp(shape);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            ErrorStats errors = CorrectnessSuite.compareWithOracle(plan.backendId(), shape, in, o, lse);
            assertTrue(errors.passes(), errors.toString());
        }
    }

    @Test
    void theLogSumExpIsJudgedAgainstTheNearestFp32() {
        double reference = 1.2345678901e20; // one fp32 step here is 2^43, far beyond the 1e-3 tolerance
        try (HalfTensor o = HalfTensor.of(0f)) {
            assertTrue(ErrorStats.compare(o, new double[] {0}, new float[] {(float) reference}, new double[] {reference})
                    .passes());
            float nextFp32 = Math.nextUp((float) reference);
            assertTrue(!ErrorStats.compare(o, new double[] {0}, new float[] {nextFp32}, new double[] {reference}).passes());
        }
    }
}
