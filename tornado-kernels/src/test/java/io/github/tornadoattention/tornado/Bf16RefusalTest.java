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

/** Every TornadoVM backend refuses bf16 at plan time by name (no device needed); fp16 of the same shape passes. */
class Bf16RefusalTest {
    private static final AttentionShape BF16 = AttentionShape.builder().batch(1).heads(2).queryLength(64).headDim(64)
            .dtype(DType.BF16).build();

    @Test
    void everyTornadoBackendRefusesBf16ByName() {
        boolean shipped = io.github.tornadoattention.ptx.KernelManifest.shipped().serves(io.github.tornadoattention.ptx.KernelVariant
                .of(io.github.tornadoattention.ptx.KernelVariant.Kind.PREFILL, DType.BF16, 64).headerBytes(
                        Math.toIntExact(uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray.ARRAY_HEADER)));
        for (AttentionBackend backend : List.of(new TornadoSimtBackend(), new TornadoMmaBackend(), new PtxTornadoBackend())) {
            backend.checkSupported(BF16.toBuilder().dtype(DType.FP16).build());
            if (shipped && backend instanceof PtxTornadoBackend) {
                backend.checkSupported(BF16);   // the manifest lists bf16 twins: served
                continue;
            }
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> backend.checkSupported(BF16),
                    backend.id());
            assertEquals("dtype", e.argument(), e.getMessage());
            assertEquals("bf16", e.value());
            assertTrue(e.allowed().startsWith(backend.id() + " "), e.getMessage());
            assertTrue(e.allowed().contains("cpu-reference serves"), e.getMessage());
        }
        assertTrue(assertThrows(InvalidArgumentException.class, () -> new TornadoMmaBackend().checkSupported(BF16))
                .allowed().contains("TornadoVM 5.2's PTX backend has no bf16 MMA; its CUDA backend has (planned)"));
        if (!shipped) {
            assertTrue(assertThrows(InvalidArgumentException.class, () -> new PtxTornadoBackend().checkSupported(BF16))
                    .allowed().contains("(served prefill variants"), "through the manifest lookup");
        }
    }

    @Test
    void prebuiltTwinsAreSelectedByTheShapesType() {
        long header = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.headerBytes().get(0);
        org.junit.jupiter.api.Assumptions.assumeFalse(io.github.tornadoattention.ptx.KernelManifest.shipped().serves(
                io.github.tornadoattention.ptx.KernelVariant.of(io.github.tornadoattention.ptx.KernelVariant.Kind.PREFILL,
                        DType.BF16, 64).headerBytes((int) header)), "the shipped manifest has bf16 twins");
        assertEquals("dtype", assertThrows(InvalidArgumentException.class,
                () -> io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(BF16, header)).argument());
    }
}
