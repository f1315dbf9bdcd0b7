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
 * lists bf16 twins), tornado-mma refuses it by name, saying why for the TornadoVM backend found (PTX: no bf16 MMA;
 * CUDA: its bf16 MMA is not used by tornado-mma's kernels yet).
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
        // Why, for the TornadoVM backend found (both where none is, as in this JVM without a driver).
        assertTrue(e.allowed().contains("TornadoVM 5.2's PTX backend has no bf16 MMA")
                || e.allowed().contains("TornadoVM's CUDA backend has bf16 MMA"), e.getMessage());
        assertTrue(e.allowed().contains("tornado-simt, ptx-tornado and cpu-reference serve bf16"), e.getMessage());
    }

    /**
     * tornado-mma runs the PTX backend's kernel family on both NVIDIA backends, fp16 only; bf16 is refused naming the
     * backend and the type (the CUDA backend's cp.async/bf16 family is not selected: it fails on a GPU).
     */
    @Test
    void mmaServesFp16OnBothBackends() {
        AttentionShape fp16 = BF16.toBuilder().dtype(DType.FP16).build();
        assertEquals(MmaTileConfig.Loads.REGISTERS, MmaPlan.loadsOn(TornadoVMBackendType.CUDA, fp16));
        assertEquals(MmaTileConfig.Loads.REGISTERS, MmaPlan.loadsOn(TornadoVMBackendType.PTX, fp16));
        for (TornadoVMBackendType backend : new TornadoVMBackendType[] {TornadoVMBackendType.PTX, TornadoVMBackendType.CUDA}) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> MmaPlan.loadsOn(backend, BF16));
            assertEquals("dtype", e.argument());
            assertEquals("bf16", e.value());
            assertTrue(e.allowed().contains("TornadoVM's " + TornadoDevices.backendName(backend) + " backend serves fp16"),
                    e.getMessage());
        }
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
