package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The launch tables and the launch-geometry arithmetic of both backends (no device needed). That the
 * configurations' shared-memory sizes match the kernels' local arrays is checked where the kernels run,
 * in {@link MmaKernelsTest} and {@link SimtKernelsTest}.
 */
class TileConfigTest {
    private static final MmaTileConfig D64 = MmaTileConfig.forHeadDim(64);
    private static final MmaTileConfig D128 = MmaTileConfig.forHeadDim(128);
    private static final MmaTileConfig D32 = MmaTileConfig.forHeadDim(32);
    private static final MmaTileConfig D96 = MmaTileConfig.forHeadDim(96);
    private static final MmaTileConfig D192 = MmaTileConfig.forHeadDim(192);
    private static final MmaTileConfig D256 = MmaTileConfig.forHeadDim(256);
    private static final SimtTileConfig UP_TO_64 = SimtTileConfig.forHeadDim(64);
    private static final SimtTileConfig UP_TO_128 = SimtTileConfig.forHeadDim(128);

    /** The rows of the variant table (KernelVariants), as the generated kernel classes carry them. */
    @Test
    void launchTablesHoldTheVariantTable() {
        assertEquals(List.of(new MmaTileConfig(32, 64, 64, 4, 2, "CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128"),
                new MmaTileConfig(64, 64, 64, 4, 2, "CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128"),
                new MmaTileConfig(96, 64, 32, 4, 2, null), new MmaTileConfig(128, 64, 32, 4, 2, null),
                new MmaTileConfig(192, 64, 16, 4, 2, null),
                new MmaTileConfig(256, 64, 16, 4, 1, null)), MmaKernels.CONFIGS);
        assertEquals(List.of(new SimtTileConfig(64, 32, 32, 8), new SimtTileConfig(128, 16, 16, 16),
                new SimtTileConfig(256, 8, 16, 16)), SimtKernels.CONFIGS);
        for (MmaTileConfig c : MmaKernels.CONFIGS) {
            assertSame(c, MmaTileConfig.forHeadDim(c.headDim()));
            assertTrue(MmaKernels.kernelName(c).contains(String.valueOf(c.headDim())), MmaKernels.kernelName(c));
            assertNotNull(MmaKernels.kernel(c));
        }
        for (SimtTileConfig c : SimtKernels.CONFIGS) {
            assertSame(c, SimtTileConfig.forHeadDim(c.maxHeadDim()));
            assertNotNull(SimtKernels.kernel(c));
        }
        assertThrows(IllegalArgumentException.class, () -> MmaKernels.kernel(new MmaTileConfig(80, 64, 32, 4, 2, null)));
        assertThrows(IllegalArgumentException.class, () -> SimtKernels.kernel(new SimtTileConfig(512, 8, 16, 16)));
    }

    /** The register cap lives with the configuration; PlanOptions.mmaJitFlags replaces it ("" for none). */
    @Test
    void mmaJitFlagsComeFromTheConfigurationUnlessTheOptionsSetThem() {
        assertEquals("CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128", D64.jitFlags(PlanOptions.defaults()));
        assertNull(D128.jitFlags(PlanOptions.defaults()), "D = 128: TornadoVM's JIT options");
        assertNull(D256.jitFlags(PlanOptions.defaults()), "D = 256: TornadoVM's JIT options");
        PlanOptions tuning = PlanOptions.builder().mmaJitFlags("CU_JIT_MAX_REGISTERS,168").build();
        assertEquals("CU_JIT_MAX_REGISTERS 168", D64.jitFlags(tuning));
        assertEquals("CU_JIT_MAX_REGISTERS 168", D128.jitFlags(tuning));
        assertNull(D64.jitFlags(PlanOptions.builder().mmaJitFlags("").build()), "none at all");
    }

    @ParameterizedTest
    @ValueSource(ints = {0, 16, 48, 63, 80, 112, 127, 129, 160, 255, 264, 512})
    void mmaRejectsOtherHeadDims(int headDim) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> MmaTileConfig.forHeadDim(headDim));
        assertEquals("headDim", e.argument());
        assertEquals(String.valueOf(headDim), e.value());
        assertEquals("tornado-mma supports 32, 64, 96, 128, 192, 256" + MmaTileConfig.HEAD_DIM_NOTE, e.allowed());
    }

    @Test
    void mmaConfigurationsFitStaticSharedMemory() {
        for (MmaTileConfig c : MmaKernels.CONFIGS) {
            // The synchronous kernels of the tests exist at D = 64 and 128 only.
            int[] sizes = c.headDim() != 64 && c.headDim() != 128 ? new int[] {c.sharedMemoryBytes()}
                    : new int[] {c.sharedMemoryBytes(), MmaSynchronousKernels.sharedMemoryBytes(c)};
            for (int bytes : sizes) {
                assertTrue(bytes <= MmaTileConfig.MAX_SHARED_BYTES, c + ": " + bytes);
                assertEquals(0, bytes % 16, "shared arrays must keep 16-byte alignment");
            }
            assertEquals(128, c.threads());
        }
        // Q^T 8 KB + K 9 KB + V^T 8.5 KB (8 KB each and padding) + P^T 8 KB + ones 512 B + flag 16 B + row max 256 B
        assertEquals(35_152, D64.sharedMemoryBytes());
        // Q^T 16 KB + K 9 KB + V^T 8.5 KB (8 KB each and padding) + P^T 4 KB + ones 512 B + flag 16 B + row max 256 B
        assertEquals(39_312, D128.sharedMemoryBytes());
        // Q^T 4 KB (+ 32 B of shift) + K 4.5 KB + V^T 4.25 KB (4 KB each and padding) + P^T 8 KB + ones 512 B + flag 16 B
        // + row max 256 B
        assertEquals(22_064, D32.sharedMemoryBytes());
        // Q^T 12 KB + K 6.75 KB + V^T 6.4 KB (6 KB each and padding) + P^T 4 KB + ones 512 B + flag 16 B + row max 256 B
        assertEquals(30_704, D96.sharedMemoryBytes());
        // Q^T 24 KB (+ 192 B of shift) + K 6.75 KB + V^T 6.4 KB (6 KB each and padding) + P^T 2 KB + ones 512 B + flag 16 B
        // + row max 256 B
        assertEquals(41_040, D192.sharedMemoryBytes());
        // Q^T 32 KB (+ 256 B of shift) + K and V^T in turns in one 9 KB buffer (K: 8 KB and padding) + P^T 2 KB + ones 512 B
        // + flag 16 B + row max 256 B
        assertEquals(45_072, D256.sharedMemoryBytes());
        // Two K/V buffers would not fit.
        assertTrue(new MmaTileConfig(256, 64, 16, 4, 2, null).sharedMemoryBytes() > MmaTileConfig.MAX_SHARED_BYTES);
        // The synchronous kernels of the tests: Q^T 8 KB + K 9 KB + V 9 KB (8 KB each and padding) + P 8 KB + ones 256 B + flag 16 B + row max 256 B
        assertEquals(35_408, MmaSynchronousKernels.sharedMemoryBytes(D64));
        // Q^T 16 KB + K 9 KB + V 9 KB (8 KB each and padding) + P 4 KB + ones 256 B + flag 16 B + row max 256 B
        assertEquals(39_568, MmaSynchronousKernels.sharedMemoryBytes(D128));
    }

    @Test
    void mmaScratchLayout() {
        MmaTileConfig c = D64;
        assertEquals(64 * 64 + 64 * 64 + 64 * (64 + 8), c.scratchFloatsPerCta());
        assertEquals(0, c.scoresOffset(0));
        assertEquals(64 * 64, c.scoresOffset(1));
        assertEquals(2 * 64 * 64, c.outputOffset());
        MmaTileConfig d = D128;
        assertEquals(32 * 64 + 64 * 32 + 64 * (128 + 8), d.scratchFloatsPerCta());
        assertEquals(2 * 32 * 64, d.outputOffset());
        assertEquals(16 * 64 + 64 * 16 + 64 * (256 + 8), D256.scratchFloatsPerCta());
    }

    @Test
    void mmaGridIsOneCtaPerTileUpToTheCap() {
        MmaTileConfig c = D64;
        assertEquals(8, c.queryTiles(512));
        assertEquals(9, c.queryTiles(513));
        assertEquals(1, c.queryTiles(1));
        assertEquals(16 * 8 * 8, c.tiles(16, 8, 512));
        assertEquals(1024, c.gridSize(16, 8, 512));
        assertEquals(2 * 5 * 2, c.gridSize(2, 5, 77));
        // (4, 16, 2048, 128): 2048 tiles on 1024 CTAs, each loops over two
        assertEquals(2048, D128.tiles(4, 16, 2048));
        assertEquals(MmaTileConfig.MAX_CTAS, D128.gridSize(4, 16, 2048));
    }

    /**
     * The CUDA backend's rows (MmaCpAsyncKernels): the same head dims as the PTX backend's, each within 48 KB of static
     * shared memory; a two-stage row has the largest power-of-two Bc whose two stages fit, a one-stage row cannot have
     * two stages at Bc = 16, and K and V share one buffer only where separate ones do not fit.
     */
    @Test
    void cpAsyncRowsTakeTwoStagesWhereStaticSharedMemoryAllows() {
        assertEquals(MmaKernels.CONFIGS.stream().map(MmaTileConfig::headDim).toList(),
                MmaCpAsyncKernels.CONFIGS.stream().map(MmaTileConfig::headDim).toList());
        for (MmaTileConfig c : MmaCpAsyncKernels.CONFIGS) {
            assertSame(c, MmaTileConfig.forHeadDim(c.headDim(), MmaTileConfig.Loads.CP_ASYNC));
            assertEquals(MmaTileConfig.Loads.CP_ASYNC, c.loads());
            assertTrue(c.sharedMemoryBytes() <= MmaTileConfig.MAX_SHARED_BYTES, c.toString());
            if (c.kvStages() == 2) {
                MmaTileConfig wider = new MmaTileConfig(c.headDim(), 64, 2 * c.blockKv(), 4, 2, null,
                        MmaTileConfig.Loads.CP_ASYNC, 2);
                assertTrue(wider.sharedMemoryBytes() > MmaTileConfig.MAX_SHARED_BYTES, wider.toString());
            } else {
                assertEquals(16, c.blockKv(), c.toString());
                assertTrue(new MmaTileConfig(c.headDim(), 64, 16, 4, 2, null, MmaTileConfig.Loads.CP_ASYNC, 2)
                        .sharedMemoryBytes() > MmaTileConfig.MAX_SHARED_BYTES, c.toString());
                if (c.kvBuffers() == 1) {
                    assertTrue(new MmaTileConfig(c.headDim(), 64, 16, 4, 2, null, MmaTileConfig.Loads.CP_ASYNC, 1)
                            .sharedMemoryBytes() > MmaTileConfig.MAX_SHARED_BYTES, c.toString());
                }
            }
        }
        // D = 64: Q^T 8 KB (+ 64 B of shift) + two stages of K (4 KB and padding) and V (4 KB and padding) + P 4 KB
        // + ones 256 B + row max and flag 272 B
        assertEquals(31_312, MmaTileConfig.forHeadDim(64, MmaTileConfig.Loads.CP_ASYNC).sharedMemoryBytes());
        assertEquals(44_816, MmaTileConfig.forHeadDim(256, MmaTileConfig.Loads.CP_ASYNC).sharedMemoryBytes());
    }

    @Test
    void mmaConfigurationsAreCheckedForWhatTheKernelAssumes() {
        // Two K/V stages only for cp.async, with K and V in buffers of their own.
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 64, 4, 2, null,
                MmaTileConfig.Loads.REGISTERS, 2));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 64, 4, 1, null,
                MmaTileConfig.Loads.CP_ASYNC, 2));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 64, 4, 2, null,
                MmaTileConfig.Loads.CP_ASYNC, 3));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 64, 8, 2, null));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 32, 64, 4, 2, null));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 40, 4, 2, null));
        assertThrows(IllegalArgumentException.class, () -> new MmaTileConfig(64, 64, 64, 4, 3, null));
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 8, 32, 63, 64})
    void simtUsesTheSmallConfigurationUpTo64(int headDim) {
        assertSame(UP_TO_64, SimtTileConfig.forHeadDim(headDim));
    }

    @ParameterizedTest
    @ValueSource(ints = {65, 80, 96, 127, 128})
    void simtUsesTheLargeConfigurationUpTo128(int headDim) {
        assertSame(UP_TO_128, SimtTileConfig.forHeadDim(headDim));
    }

    @ParameterizedTest
    @ValueSource(ints = {129, 136, 200, 255, 256})
    void simtUsesTheLargestConfigurationUpTo256(int headDim) {
        SimtTileConfig config = SimtTileConfig.forHeadDim(headDim);
        assertEquals(256, config.maxHeadDim());
        assertTrue(config.sharedMemoryBytes() <= SimtTileConfig.MAX_SHARED_BYTES, config.toString());
    }

    @ParameterizedTest
    @ValueSource(ints = {-1, 0, 257, 512})
    void simtRejectsOtherHeadDims(int headDim) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> SimtTileConfig.forHeadDim(headDim));
        assertEquals("headDim", e.argument());
        assertEquals("tornado-simt supports 1..256", e.allowed());
    }

    @Test
    void simtGeometry() {
        SimtTileConfig small = UP_TO_64;
        assertEquals(256, small.threads());
        assertEquals(4, small.keysPerThread());
        assertEquals(8, small.columnsPerThread());
        assertEquals(16 * 8 * 16, small.workgroups(16, 8, 512));
        SimtTileConfig large = UP_TO_128;
        assertEquals(256, large.threads());
        assertEquals(1, large.keysPerThread());
        assertEquals(8, large.columnsPerThread());
        assertEquals(4 * 16 * 128, large.workgroups(4, 16, 2048));
        assertEquals(7, large.queryTiles(100));
        for (SimtTileConfig c : new SimtTileConfig[] {small, large}) {
            assertTrue(c.sharedMemoryBytes() <= SimtTileConfig.MAX_SHARED_BYTES, c + ": " + c.sharedMemoryBytes());
        }
        assertThrows(IllegalArgumentException.class, () -> new SimtTileConfig(64, 32, 30, 8));
        assertThrows(IllegalArgumentException.class, () -> new SimtTileConfig(64, 3, 32, 8));
    }
}
