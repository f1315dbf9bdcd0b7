package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import java.util.List;
import org.junit.jupiter.api.Test;

class LaunchTableTest {
    private static AttentionShape.Builder shape() {
        return AttentionShape.builder().batch(2).heads(8).kvHeads(2).queryLength(300).headDim(128);
    }

    @Test
    void unsupportedHeadDimsAndGridsAreRejectedByName() {
        InvalidArgumentException d = assertThrows(InvalidArgumentException.class,
                () -> Backends.get(Backends.PTX_CUDA).checkSupported(shape().headDim(96).build()));
        assertEquals("headDim", d.argument());
        assertTrue(d.allowed().contains("[64, 128]"), d.allowed());
        InvalidArgumentException grid = assertThrows(InvalidArgumentException.class,
                () -> LaunchTable.checkSupported("ptx-cuda", shape().batch(65536).heads(1).kvHeads(1).queryLength(1).build()));
        assertEquals("batch*queryHeads", grid.argument());
        LaunchTable.checkSupported("ptx-cuda", shape().build());
    }

    @Test
    void prefillGridCoversEveryQueryRowOnce() {
        LaunchTable.Launch l = LaunchTable.prefillLaunch(shape().build(), "");
        assertEquals("flash_fwd_d128_m128n32w4s1_qs_eager", l.entry());
        assertEquals(3, l.gridX()); // ceil(300 / 128)
        assertEquals(16, l.gridY()); // B * Hq
        assertEquals(128, l.threads());
        LaunchTable.Launch causal = LaunchTable.prefillLaunch(shape().causal(true).build(), "_tornado");
        assertEquals("flash_fwd_d128_m64n48w4s2_tornado", causal.entry());
        assertEquals(5, causal.gridX()); // ceil(300 / 64)
    }

    @Test
    void decodeSplitsFillTheGpuWithoutTinySlices() {
        AttentionShape decode = AttentionShape.builder().batch(8).heads(32).kvHeads(8).queryLength(1).kvLength(32768)
                .headDim(128).build();
        assertTrue(LaunchTable.isDecode(decode));
        // 64 one-warp blocks on 132 SMs: about four per SM wants round(528 / 64) = 8 splits.
        assertEquals(8, LaunchTable.decodeSplits(decode, 132));
        // A short cache is never cut below 256 keys per split.
        AttentionShape shortCache = AttentionShape.builder().batch(1).heads(8).kvHeads(8).queryLength(1).kvLength(300)
                .headDim(64).build();
        assertEquals(2, LaunchTable.decodeSplits(shortCache, 132));
        List<LaunchTable.Launch> launches = LaunchTable.launches(decode, 8, "");
        assertEquals(List.of("flash_decode_split_d128_n32s2", "flash_decode_combine_d128"),
                launches.stream().map(LaunchTable.Launch::entry).toList());
        assertEquals(8, launches.get(0).gridX());
        assertEquals(8 * 8, launches.get(0).gridZ());
        assertEquals(8 * 32 / 8, launches.get(1).gridX()); // 8 rows of D=128 per 128-thread block
    }

    @Test
    void fusedDecodeHasTheSplitGridAndOneTicketPerRowBlock() {
        // G * Sq = 4 * 6 = 24 packed rows per KV head: two 16-row blocks.
        AttentionShape decode = AttentionShape.builder().batch(3).heads(8).kvHeads(2).queryLength(6).kvLength(5000)
                .headDim(64).build();
        LaunchTable.Launch fused = LaunchTable.decodeFusedLaunch(decode, 5, "_tornado_h128");
        assertEquals("flash_decode_fused_d64_n64s2_tornado_h128", fused.entry());
        assertEquals(List.of(5, 2, 3 * 2, 32), List.of(fused.gridX(), fused.gridY(), fused.gridZ(), fused.threads()));
        assertEquals(2 * 3 * 2, LaunchTable.decodeTickets(decode));
        // Every twin the hosts may ask for is in the shipped module.
        String module = LaunchTable.ptx(LaunchTable.DECODE_MODULE);
        for (int d : LaunchTable.HEAD_DIMS) {
            for (String suffix : List.of("", "_tornado", "_tornado_h128")) {
                String entry = LaunchTable.decodeFusedLaunch(decode.toBuilder().headDim(d).build(), 1, suffix).entry();
                assertTrue(module.contains(".entry " + entry + "("), entry);
            }
        }
    }
}
