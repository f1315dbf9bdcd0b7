package io.github.tornadoattention.verify;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.cpu.CpuReference;
import org.junit.jupiter.api.Test;

/** The bf16 tolerance, and the online-softmax reference on bf16 inputs agreeing with the CPU reference within it. */
class Bf16VerifyTest {

    @Test
    void theBf16BoundIsFp16sScaledByTheMantissa() {
        assertEquals(6e-2, Tolerance.maxAbsError(DType.BF16));
        assertEquals(1.6e-2, Tolerance.maxRelativeError(DType.BF16));
        assertEquals(Tolerance.MAX_RELATIVE_ERROR * 8, Tolerance.maxRelativeError(DType.BF16), 1e-12);
        assertEquals(Tolerance.MAX_ABS_ERROR, Tolerance.maxAbsError(DType.FP16));
        // An fp16-passing error passes bf16; a bf16-passing one can fail fp16.
        assertTrue(new ErrorStats(0.05, 0.01, 0, 0, DType.BF16).passes());
        assertFalse(new ErrorStats(0.05, 0.01, 0, 0, DType.FP16).passes());
        assertFalse(new ErrorStats(0.07, 0.01, 0, 0, DType.BF16).passes());
        assertFalse(new ErrorStats(0.01, 0.02, 0, 0, DType.BF16).passes());
    }

    /** Random shapes (GQA/MQA, both layouts, causal, Sq != Skv): the two formulations agree on bf16 inputs. */
    @Test
    void onlineReferenceAgreesWithTheCpuReferenceOnBf16Inputs() {
        for (CorrectnessSuite.Case c : CorrectnessSuite.randomCases(12, 22)) {
            AttentionShape shape = c.shape().toBuilder().dtype(DType.BF16).build();
            try (RandomInputs in = RandomInputs.generate(shape, 5); HalfTensor o = RandomInputs.poisonedOutput(shape)) {
                assertEquals(DType.BF16, in.q().dtype());
                double[][] online = OnlineSoftmaxReference.compute(shape, in.q(), in.k(), in.v());
                CpuReference.Result ref = CpuReference.compute(shape, in.q(), in.k(), in.v());
                for (int i = 0; i < ref.output().length; i++) {
                    assertEquals(ref.output()[i], online[0][i], 1e-9, shape.toString());
                }
                float[] lse = RandomInputs.poisonedLogSumExp(shape);
                Backends.get(Backends.CPU_REFERENCE).plan(shape).forward(in.q(), in.k(), in.v(), o, lse);
                ErrorStats e = ErrorStats.compare(o, online[0], lse, online[1]);
                assertEquals(DType.BF16, e.dtype());
                assertTrue(e.passes(), shape + ": " + e);
                // Rounding O to bf16 alone: at most half an ulp, 2^-8 of each value (8 significant bits).
                assertTrue(e.relativeError() <= 0x1p-8, e.toString());
            }
        }
    }

    @Test
    void theSuiteChecksBf16Cases() {
        for (CorrectnessSuite.Case c : CorrectnessSuite.randomCases(4, 3)) {
            CorrectnessSuite.Case bf16 = new CorrectnessSuite.Case(c.name(), c.shape().toBuilder().dtype(DType.BF16).build());
            CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(Backends.get(Backends.CPU_REFERENCE), bf16, 9);
            assertTrue(outcome.passed(), outcome.toString());
        }
    }

    @Test
    void onlineReferenceRefusesTensorsOfAnotherType() {
        AttentionShape shape = AttentionShape.builder().heads(2).queryLength(4).headDim(8).dtype(DType.BF16).build();
        try (HalfTensor q = HalfTensor.allocate(DType.BF16, shape.queryElements());
             HalfTensor k = HalfTensor.allocate(shape.kvElements()); HalfTensor v = HalfTensor.allocate(DType.BF16, shape.kvElements())) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> OnlineSoftmaxReference.compute(shape, q, k, v));
            assertTrue(e.getMessage().contains("q bf16, k fp16, v bf16"), e.getMessage());
        }
    }
}
