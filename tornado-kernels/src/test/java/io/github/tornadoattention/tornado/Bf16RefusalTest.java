package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;

/**
 * bf16 at plan time (no device needed): tornado-simt serves it (its bf16 kernels), ptx-tornado serves it (the manifest
 * lists bf16 twins), tornado-mma serves it on TornadoVM's CUDA backend only (its cp.async family's bf16 MMA) and
 * elsewhere refuses it by name, saying which backend it found.
 */
class Bf16RefusalTest {
    private static final AttentionShape BF16 = AttentionShape.builder().batch(1).heads(2).queryLength(64).headDim(64)
            .dtype(DType.BF16).build();

    @Test
    void simtAndPtxTornadoServeBf16AndMmaRefusesItByName() {
        new TornadoSimtBackend().checkSupported(BF16);   // SimtKernelsTest, VariantCompileTest
        new PtxTornadoBackend().checkSupported(BF16);    // the shipped manifest's bf16 twins
        TornadoMmaBackend mma = new TornadoMmaBackend();
        mma.checkSupported(BF16.toBuilder().dtype(DType.FP16).build());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> mma.checkSupported(BF16));
        assertEquals("dtype", e.argument(), e.getMessage());
        assertEquals("bf16", e.value());
        assertTrue(e.allowed().startsWith(mma.id() + " "), e.getMessage());
        // Why, and what this JVM found (no driver here: no NVIDIA device).
        assertTrue(e.allowed().contains("serves bf16 on TornadoVM's CUDA backend only"), e.getMessage());
        assertTrue(e.allowed().contains("no NVIDIA device was found"), e.getMessage());
        assertTrue(e.allowed().contains("tornado-simt, ptx-tornado and cpu-reference serve bf16"), e.getMessage());
    }

    /**
     * fp16 takes the register-loading family on both NVIDIA backends (faster than the cp.async family on an H200); bf16 the
     * cp.async family on the CUDA backend, and on the PTX backend a refusal naming the backend and the type.
     */
    @Test
    void mmaFamilyPerBackendAndType() {
        AttentionShape fp16 = BF16.toBuilder().dtype(DType.FP16).build();
        assertEquals(MmaTileConfig.Loads.REGISTERS, MmaPlan.loadsOn(TornadoVMBackendType.CUDA, fp16));
        assertEquals(MmaTileConfig.Loads.CP_ASYNC, MmaPlan.loadsOn(TornadoVMBackendType.CUDA, BF16));
        // The PTX backend's half, where the TornadoVM API this compiles against has one (5.x; not 6.0 and later).
        BackendTypes.PTX.ifPresent(ptx -> {
            assertEquals(MmaTileConfig.Loads.REGISTERS, MmaPlan.loadsOn(ptx, fp16));
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> MmaPlan.loadsOn(ptx, BF16));
            assertEquals("dtype", e.argument());
            assertEquals("bf16", e.value());
            assertTrue(e.allowed().contains("TornadoVM's PTX backend serves fp16"), e.getMessage());
        });
    }

    @Test
    void prebuiltTwinsAreSelectedByTheShapesType() {
        long header = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.headerBytes().get(0);
        var bf16 = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(BF16, header);
        var fp16 = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(BF16.toBuilder().dtype(DType.FP16).build(),
                header);
        assertEquals(DType.BF16, bf16.kernel().dtype(), bf16.entry());
        assertEquals(DType.FP16, fp16.kernel().dtype(), fp16.entry());
    }
}
