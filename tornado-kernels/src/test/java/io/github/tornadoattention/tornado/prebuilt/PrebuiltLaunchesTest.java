package io.github.tornadoattention.tornado.prebuilt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import io.github.tornadoattention.ptx.LaunchTable;
import io.github.tornadoattention.ptx.LaunchTable.Launch;
import java.util.List;
import org.junit.jupiter.api.Test;

class PrebuiltLaunchesTest {
    private static final AttentionShape.Builder SHAPE = AttentionShape.builder().batch(2).heads(8).kvHeads(2).queryLength(300);

    @Test
    void prefillRunsTheTwinOfTheLaunchTablesKernelOnItsGrid() {
        assertEquals(List.of(16, 128), PrebuiltLaunches.headerBytes());
        for (int d : KernelManifest.shipped().headDims(KernelVariant.of(Kind.PREFILL, DType.FP16, 0))) {
            for (boolean causal : List.of(false, true)) {
                AttentionShape s = SHAPE.headDim(d).causal(causal).build();
                Launch driver = LaunchTable.prefillLaunch(s);
                for (int header : PrebuiltLaunches.headerBytes()) {
                    Launch twin = PrebuiltLaunches.prefill(s, header);
                    assertEquals(header, twin.kernel().headerBytes());
                    assertEquals(driver.module(), twin.module());
                    assertEquals(0, twin.dynamicSharedBytes(), twin.entry()); // TornadoVM launches with static shared memory
                    // The twin's grid follows its own tile: the CUDA driver's where that fits 48 KB of static shared
                    // memory (then the same entry), else the table's static tile for that head dim.
                    assertEquals(List.of(Math.ceilDiv(s.queryLength(), twin.kernel().rowsPerBlock()), s.batch() * s.heads(), 1),
                            List.of(twin.gridX(), twin.gridY(), twin.gridZ()), twin.entry());
                    if (driver.dynamicSharedBytes() == 0) {
                        assertEquals(List.of(driver.gridX(), driver.threads()), List.of(twin.gridX(), twin.threads()));
                        assertTrue(twin.entry().startsWith(driver.entry()), twin.entry() + " twin of " + driver.entry());
                    }
                }
            }
        }
        assertEquals("flash_fwd_d128_m64n64w4s1_tornado_h128",
                PrebuiltLaunches.prefill(SHAPE.headDim(128).causal(true).build(), 128).entry());
        // A causal chunk that a 4096-key window bands runs the non-causal twin (LaunchTable.tileCausal), a prompt the
        // diagonal bounds the causal one.
        AttentionShape.Builder windowed = AttentionShape.builder().batch(1).heads(32).kvHeads(8).headDim(128).causal(true)
                .window(4095, -1).queryLength(4096);
        assertEquals("flash_fwd_d128_m128n32w4s1_qs_eager_feat_tornado",
                PrebuiltLaunches.prefill(windowed.kvLength(32768).build(), 16).entry());
        assertEquals("flash_fwd_d128_m64n64w4s1_feat_tornado", PrebuiltLaunches.prefill(windowed.kvLength(4096).build(), 16).entry());
        assertThrows(IllegalArgumentException.class, () -> PrebuiltLaunches.prefill(SHAPE.headDim(64).build(), 24));
    }

    @Test
    void fusedDecodeHasTheSplitGridAndOneTicketPerRowBlock() {
        // G * Sq = 4 * 6 = 24 packed rows per KV head: two 16-row blocks.
        AttentionShape decode = AttentionShape.builder().batch(3).heads(8).kvHeads(2).queryLength(6).kvLength(5000)
                .headDim(64).build();
        Launch fused = PrebuiltLaunches.fusedDecode(decode, 5, 128);
        assertEquals("flash_decode_fused_d64_n64s2_tornado_h128", fused.entry());
        assertEquals(List.of(5, 2, 3 * 2, 32), List.of(fused.gridX(), fused.gridY(), fused.gridZ(), fused.threads()));
        assertEquals(2 * 3 * 2, PrebuiltLaunches.tickets(fused));
        for (int d : KernelManifest.shipped().headDims(KernelVariant.of(Kind.PREFILL, DType.FP16, 0))) {
            for (int header : PrebuiltLaunches.headerBytes()) {
                AttentionShape s = decode.toBuilder().headDim(d).causal(true).build();
                Launch twin = PrebuiltLaunches.fusedDecode(s, 3, header);
                Launch split = LaunchTable.decodeSplitLaunch(s, 3);
                assertEquals(List.of(split.gridX(), split.gridY(), split.gridZ(), split.threads()),
                        List.of(twin.gridX(), twin.gridY(), twin.gridZ(), twin.threads()));
                assertEquals(header, twin.kernel().headerBytes());
            }
        }
    }
}
