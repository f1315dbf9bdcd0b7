package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import java.util.List;
import org.junit.jupiter.api.Test;

/** tornado-simt serves bf16; tornado-mma and ptx-tornado refuse it at plan time by name (no device needed); fp16 of the same shape passes. */
class Bf16RefusalTest {
    private static final AttentionShape BF16 = AttentionShape.builder().batch(1).heads(2).queryLength(64).headDim(64)
            .dtype(DType.BF16).build();

    @Test
    void everyTornadoBackendRefusesBf16ByName() {
        new TornadoSimtBackend().checkSupported(BF16);   // served: BFloat16Array kernels (SimtKernelsTest, VariantCompileTest)
        for (AttentionBackend backend : List.of(new TornadoMmaBackend(), new PtxTornadoBackend())) {
            backend.checkSupported(BF16.toBuilder().dtype(DType.FP16).build());
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> backend.checkSupported(BF16),
                    backend.id());
            assertEquals("dtype", e.argument(), e.getMessage());
            assertEquals("bf16", e.value());
            assertTrue(e.allowed().startsWith(backend.id() + " "), e.getMessage());
            assertTrue(e.allowed().contains("cpu-reference serves"), e.getMessage());
        }
        assertTrue(assertThrows(InvalidArgumentException.class, () -> new TornadoMmaBackend().checkSupported(BF16))
                .allowed().contains("TornadoVM 5.2's PTX backend has no bf16 MMA; its CUDA backend has (planned)"));
        assertTrue(assertThrows(InvalidArgumentException.class, () -> new PtxTornadoBackend().checkSupported(BF16))
                .allowed().contains("(served prefill variants"), "through the manifest lookup");
    }

    @Test
    void prebuiltTwinsAreSelectedByTheShapesType() {
        long header = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.headerBytes().get(0);
        assertEquals("dtype", assertThrows(InvalidArgumentException.class,
                () -> io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(BF16, header)).argument());
    }
}
