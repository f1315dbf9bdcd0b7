package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Run by {@link MmaKernelsTest} in a child JVM with {@code -Dtornado.panama.objectHeader=128}: the emulated
 * tornado-mma kernels (the synchronous ones of the tests, and the CUDA backend's cp.async ones in fp16 and bf16) on a few shapes, where FloatArray.get/set skip 128 bytes of header and the emulated
 * {@code mmaStore} (like TornadoVM's) 16. Prints {@code header N} and one {@code ok}/{@code FAIL} line per shape.
 */
public final class HeaderProbeMain {
    private HeaderProbeMain() {
    }

    public static void main(String[] args) {
        System.out.println("header " + TornadoNativeArray.ARRAY_HEADER + " skew " + MmaKernels.MMA_STORE_SKEW + " cp.async skew "
                + MmaCpAsyncKernels.CP_ASYNC_SKEW);
        for (AttentionShape s : new AttentionShape[] {
                AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(70).kvLength(150).headDim(64)
                        .causal(true).layout(Layout.BHSD).build(),
                AttentionShape.builder().batch(1).heads(1).queryLength(40).kvLength(90).headDim(128)
                        .causal(false).layout(Layout.BSHD).build()}) {
            try (RandomInputs in = RandomInputs.generate(s, 11)) {
                for (boolean synchronous : new boolean[] {true, false}) {
                    ErrorStats errors = MmaKernelsTest.run(s, in, 2, synchronous);
                    System.out.println((errors.passes() ? "ok " : "FAIL ") + s + " synchronous=" + synchronous + ": " + errors);
                }
            }
            // The CUDA backend's kernels, whose cp.async sources skip 16 bytes of header (CP_ASYNC_SKEW), fp16 and bf16.
            for (io.github.tornadoattention.DType dtype : io.github.tornadoattention.DType.values()) {
                if (dtype == io.github.tornadoattention.DType.FP16 || dtype == io.github.tornadoattention.DType.BF16) {
                    AttentionShape typed = s.toBuilder().dtype(dtype).build();
                    try (RandomInputs in = RandomInputs.generate(typed, 12)) {
                        ErrorStats errors = MmaCpAsyncKernelsTest.run(typed, in, 2, null);
                        System.out.println((errors.passes() ? "ok " : "FAIL ") + typed + " cp.async: " + errors);
                    }
                }
            }
        }
    }
}
