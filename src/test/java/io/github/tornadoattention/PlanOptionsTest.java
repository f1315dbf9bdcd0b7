package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.cuda.CudaContext;
import io.github.tornadoattention.cuda.PtxCudaBackend;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** PlanOptions: defaults, validation naming the option, and that plan() hands them to the backend that plans. */
class PlanOptionsTest {
    private static final AttentionShape SHAPE = AttentionShape.builder().batch(1).heads(2).queryLength(8).headDim(16)
            .build();

    @Test
    void defaultsAreDeviceZeroNoProfilerNoCudaGraphsAndTheKernelsOwnJitOptions() {
        PlanOptions d = PlanOptions.defaults();
        assertEquals(0, d.cudaDevice());
        assertFalse(d.profile());
        assertFalse(d.cudaGraph());
        assertEquals(0, d.lanes(), "synchronous calls");
        assertNull(d.mmaJitFlags());
        assertEquals(d, PlanOptions.builder().build());
        assertEquals(d, new PlanOptions(0, false, false, 0, null));
    }

    @Test
    void builderSetsEachOptionAndToBuilderKeepsThem() {
        PlanOptions o = PlanOptions.builder().cudaDevice(3).profile(true).cudaGraph(true).lanes(4)
                .mmaJitFlags("CU_JIT_OPTIMIZATION_LEVEL,4,CU_JIT_MAX_REGISTERS,168").build();
        assertEquals(3, o.cudaDevice());
        assertTrue(o.profile());
        assertTrue(o.cudaGraph());
        assertEquals(4, o.lanes());
        assertEquals("CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 168", o.mmaJitFlags(), "commas become spaces");
        assertEquals(o, o.toBuilder().build());
        assertEquals(1, o.toBuilder().cudaDevice(1).build().cudaDevice());
        assertEquals("", PlanOptions.builder().mmaJitFlags(" , ").build().mmaJitFlags(), "blank: no JIT options");
    }

    @Test
    void invalidOptionsAreRefusedNamingTheOption() {
        InvalidArgumentException device = assertThrows(InvalidArgumentException.class,
                () -> PlanOptions.builder().cudaDevice(-1).build());
        assertEquals("cudaDevice", device.argument());
        assertEquals("-1", device.value());
        for (int lanes : new int[] {-1, PlanOptions.MAX_LANES + 1}) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> PlanOptions.builder().lanes(lanes).build());
            assertEquals("lanes", e.argument());
            assertEquals(String.valueOf(lanes), e.value());
        }
        for (String flags : List.of("CU_JIT_MAX_REGISTERS", "CU_JIT_MAX_REGS 128", "CU_JIT_MAX_REGISTERS many")) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> PlanOptions.builder().mmaJitFlags(flags).build(), flags);
            assertEquals("mmaJitFlags", e.argument(), e.getMessage());
            assertTrue(e.getMessage().contains(flags), e.getMessage());
        }
        assertTrue(assertThrows(InvalidArgumentException.class, () -> PlanOptions.builder().mmaJitFlags("X 1").build())
                .getMessage().contains("CU_JIT_MAX_REGISTERS"), "lists the accepted names");
        assertEquals("options", assertThrows(InvalidArgumentException.class,
                () -> Backends.get(Backends.CPU_REFERENCE).plan(SHAPE, null)).argument());
        assertEquals("options", assertThrows(InvalidArgumentException.class,
                () -> Backends.get(Backends.AUTO).plan(SHAPE, null)).argument());
        assertEquals("cudaDevice", assertThrows(InvalidArgumentException.class, () -> CudaContext.get(-1)).argument());
    }

    /** auto hands the options to the backend it chooses, unchanged; plan(shape) means the defaults. */
    @Test
    void autoPassesTheOptionsThrough() {
        Recording recording = new Recording();
        AutoBackend auto = new AutoBackend(Map.of(Backends.CPU_REFERENCE, recording));
        PlanOptions options = PlanOptions.builder().profile(true).cudaDevice(2).mmaJitFlags("CU_JIT_MAX_REGISTERS 96")
                .build();
        try (AttentionPlan plan = auto.plan(SHAPE, options)) {
            assertEquals(Backends.CPU_REFERENCE, plan.backendId());
        }
        try (AttentionPlan plan = auto.plan(SHAPE)) {
            assertEquals(Backends.CPU_REFERENCE, plan.backendId());
        }
        assertEquals(2, recording.seen.size());
        assertSame(options, recording.seen.get(0));
        assertSame(PlanOptions.defaults(), recording.seen.get(1));
        auto.device(options);
        assertSame(options, recording.seen.get(2), "device(options) too");
    }

    @Test
    void attentionPlanTakesOptions() {
        try (AttentionPlan plan = Attention.plan(SHAPE, Backends.CPU_REFERENCE, PlanOptions.builder().profile(true).build());
             HalfTensor q = HalfTensor.allocate(SHAPE.queryElements());
             HalfTensor k = HalfTensor.allocate(SHAPE.kvElements());
             HalfTensor v = HalfTensor.allocate(SHAPE.kvElements());
             HalfTensor o = plan.forward(q, k, v)) {
            assertEquals(SHAPE.outputElements(), o.length());
        }
    }

    /** Without an NVIDIA driver ptx-cuda refuses any device with the reason; a negative one is a bad option first. */
    @Test
    void ptxCudaHonoursTheDeviceOption() {
        PtxCudaBackend backend = new PtxCudaBackend();
        if (!backend.availability().available()) {
            PlanOptions device3 = PlanOptions.builder().cudaDevice(3).build();
            assertThrows(BackendUnavailableException.class, () -> backend.plan(SHAPE.toBuilder().headDim(64).build(),
                    device3));
            assertThrows(BackendUnavailableException.class, () -> backend.device(device3));
        }
    }

    /** The CPU reference, recording the options of every plan and device call. */
    private static final class Recording implements AttentionBackend {
        final List<PlanOptions> seen = new ArrayList<>();
        private final AttentionBackend cpu = Backends.get(Backends.CPU_REFERENCE);

        @Override
        public String id() {
            return Backends.CPU_REFERENCE;
        }

        @Override
        public String description() {
            return "recording";
        }

        @Override
        public Availability availability() {
            return cpu.availability();
        }

        @Override
        public void checkSupported(AttentionShape shape) {
        }

        @Override
        public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
            seen.add(options);
            return cpu.plan(shape, options);
        }

        @Override
        public AttentionDevice device(PlanOptions options) {
            seen.add(options);
            return cpu.device(options);
        }
    }
}
