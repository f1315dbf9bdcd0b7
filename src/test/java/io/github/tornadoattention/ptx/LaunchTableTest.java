package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
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
        // A head dim the shipped manifest lacks (none has 40) is refused naming what it serves.
        InvalidArgumentException d = assertThrows(InvalidArgumentException.class,
                () -> Backends.get(Backends.PTX_CUDA).checkSupported(shape().headDim(40).build()));
        assertEquals("headDim", d.argument());
        assertTrue(d.allowed().contains("fp16 D=32") && d.allowed().contains("bf16 D=256"), d.allowed());
        assertTrue(d.allowed().startsWith("ptx-cuda serves what its kernel manifest lists"), d.allowed());
        InvalidArgumentException grid = assertThrows(InvalidArgumentException.class,
                () -> LaunchTable.checkSupported("ptx-cuda", shape().batch(65536).heads(1).kvHeads(1).queryLength(1).build()));
        assertEquals("batch*heads", grid.argument());
        LaunchTable.checkSupported("ptx-cuda", shape().build());
    }

    @Test
    void prefillGridCoversEveryQueryRowOnceWithTheManifestsTile() {
        LaunchTable.Launch full = LaunchTable.prefillLaunch(shape().build());
        assertEquals("flash_fwd_d128_m128n48w4s1_dyn", full.entry());
        assertEquals("flash_fwd.ptx", full.module());
        assertEquals(128, full.kernel().rowsPerBlock());
        assertEquals(3, full.gridX()); // ceil(300 / 128)
        assertEquals(16, full.gridY()); // B * Hq
        assertEquals(128, full.threads());
        assertEquals(57344, full.dynamicSharedBytes()); // Q 32 KB + one K and one V buffer of 48 keys
        LaunchTable.Launch causal = LaunchTable.prefillLaunch(shape().causal(true).build());
        assertEquals("flash_fwd_d128_m64n64w4s1", causal.entry());
        assertEquals(5, causal.gridX()); // ceil(300 / 64)
        assertEquals(List.of(LaunchTable.prefillLaunch(shape().build())), LaunchTable.launches(shape().build(), 0));
    }

    /** A causal call whose rows a wide window bounds runs the non-causal tile; the kernel keeps the causal flag. */
    @Test
    void aWideWindowThatBoundsMostRowsRunsTheNonCausalTile() {
        AttentionShape.Builder chunk = AttentionShape.builder().batch(1).heads(32).kvHeads(8).headDim(128).causal(true);
        // A 4096-query chunk at the end of a 32K context: the window bounds every row.
        AttentionShape banded = chunk.queryLength(4096).kvLength(32768).window(4095, -1).build();
        assertEquals("flash_fwd_d128_m128n48w4s1_dyn_feat", LaunchTable.prefillLaunch(banded).entry());
        assertEquals(32, LaunchTable.prefillLaunch(banded).gridX()); // ceil(4096 / 128)
        assertEquals(1, KernelParams.of(banded, 0)[KernelParams.P_CAUSAL]);
        // The TornadoVM twins follow the same rule with their own tiles.
        KernelVariant twin = LaunchTable.variant(KernelVariant.Kind.PREFILL, banded).features(LaunchTable.features(banded))
                .headerBytes(16);
        assertEquals("flash_fwd_d128_m128n32w4s1_qs_eager_feat_tornado", KernelManifest.shipped().select(twin).entry());
        // Narrower than 2048 keys the causal tile is faster, banded or not.
        assertEquals("flash_fwd_d128_m64n64w4s1_feat",
                LaunchTable.prefillLaunch(chunk.window(LaunchTable.WIDE_WINDOW_KEYS - 2, -1).build()).entry());
        assertEquals("flash_fwd_d128_m128n48w4s1_dyn_feat",
                LaunchTable.prefillLaunch(chunk.window(LaunchTable.WIDE_WINDOW_KEYS - 1, -1).build()).entry());
        // A prompt no longer than its window: the diagonal bounds every row.
        AttentionShape prompt = chunk.queryLength(4096).kvLength(4096).window(4095, -1).build();
        assertEquals("flash_fwd_d128_m64n64w4s1_feat", LaunchTable.prefillLaunch(prompt).entry());
        // The window bounds rows 4096.. of a 8193-token prompt (more than half of them), of an 8192-token one half.
        assertFalse(LaunchTable.tileCausal(chunk.queryLength(8193).kvLength(8193).build()));
        assertTrue(LaunchTable.tileCausal(chunk.queryLength(8192).kvLength(8192).build()));
        // The same rule over a KV cache's packed rows: a 64-row chunk ending at key 5000 of a 4096-key window is banded,
        // the first 64 rows of a prompt are not; the window cuts rows i > left - (keys - queries).
        assertEquals(0, LaunchTable.unboundRows(4095, 64, 5000));
        assertEquals(64, LaunchTable.unboundRows(4095, 64, 64));
        assertEquals(4096, LaunchTable.unboundRows(4095, 8192, 8192));
        assertEquals(10, LaunchTable.unboundRows(4095, 100, 4186));
        assertEquals(100, LaunchTable.unboundRows(-1, 100, 1 << 20));
        assertTrue(LaunchTable.tileCausal(true, 4095, 64 + 64, 64));
        assertFalse(LaunchTable.tileCausal(true, 4095, 64 + 65, 64));
        assertTrue(LaunchTable.tileCausal(true, LaunchTable.WIDE_WINDOW_KEYS - 2, 64, 0));
        assertFalse(LaunchTable.mayRunBanded(false, 4095));
        // Non-causal calls, and head dims with one tile for both flags, are unchanged; so is decode's split pass.
        assertFalse(LaunchTable.tileCausal(chunk.causal(false).build()));
        assertEquals("flash_fwd_d64_m128n64w4s2_feat",
                LaunchTable.prefillLaunch(chunk.causal(true).headDim(64).queryLength(4096).kvLength(32768).build()).entry());
        AttentionShape decode = chunk.headDim(128).queryLength(1).kvLength(32768).build();
        assertTrue(LaunchTable.variant(KernelVariant.Kind.DECODE_SPLIT, decode).causal());
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
        List<LaunchTable.Launch> launches = LaunchTable.launches(decode, 8);
        assertEquals(List.of("flash_decode_split_d128_n32s2", "flash_decode_combine_d128"),
                launches.stream().map(LaunchTable.Launch::entry).toList());
        assertEquals(List.of(8, 1, 8 * 8, 32), List.of(launches.get(0).gridX(), launches.get(0).gridY(),
                launches.get(0).gridZ(), launches.get(0).threads()));
        assertEquals(8 * 32 / 8, launches.get(1).gridX()); // 8 rows of D=128 per 128-thread block
        assertEquals(128, launches.get(1).threads());
    }

    @Test
    void decodePacksTheQueryHeadsOfAKvHeadIntoRowBlocks() {
        // G * Sq = 4 * 6 = 24 packed rows per KV head: two 16-row blocks; D=64 combines 16 rows per block.
        AttentionShape decode = AttentionShape.builder().batch(3).heads(8).kvHeads(2).queryLength(6).kvLength(5000)
                .headDim(64).causal(true).build();
        List<LaunchTable.Launch> launches = LaunchTable.launches(decode, 5);
        assertEquals(List.of(5, 2, 3 * 2), List.of(launches.get(0).gridX(), launches.get(0).gridY(), launches.get(0).gridZ()));
        assertEquals(launches.get(0), LaunchTable.decodeSplitLaunch(decode, 5));
        assertEquals((3 * 8 * 6 + 15) / 16, launches.get(1).gridX());
    }

    @Test
    void decodeWorkspaceHoldsOnePartialRowPerSplitAndQueryRow() {
        AttentionShape decode = AttentionShape.builder().batch(3).heads(8).kvHeads(2).queryLength(6).kvLength(5000)
                .headDim(64).build();
        LaunchTable.DecodeWorkspace w = LaunchTable.decodeWorkspace(decode, 5);
        assertEquals(3 * 8 * 6, w.rows());
        assertEquals(5, w.splits());
        assertEquals(5L * 3 * 8 * 6, w.partialLseFloats());
        assertEquals(5L * 3 * 8 * 6 * 64, w.partialOFloats());
    }

    /**
     * What a manifest lists is served, for either ABI: the CUDA driver's split + combine, TornadoVM's fused decode
     * (a hand-made table with bf16 at head dim 96 and every feature, as branches bring them).
     */
    @Test
    void eachAbiIsCheckedAgainstTheEntriesItRuns() {
        String header = "module\tentry\tkind\tdtype\thead_dim\tcausal\tlayout\tfeatures\tabi\theader_bytes\tarch\tbr\tbc"
                + "\twarps\tthreads\tstages\tq_in_smem\topt\tsmem_dynamic\tsmem_static\tregs_sm_89\tregs_sm_90\n";
        java.util.function.BiFunction<String, Integer, String> row = (kind, bytes) -> String.join("\t", "m.ptx",
                kind + bytes, kind, "bf16", "96", "any", "none", "window+softcap+sinks", bytes == 0 ? "cuda" : "tornado",
                String.valueOf(bytes), "sm80", "16", "64", "1", "32", "2", "0", "-", "0", "0", "1", "1") + "\n";
        KernelManifest m = KernelManifest.parse(header + row.apply("prefill", 0) + row.apply("decode-split", 0)
                + row.apply("decode-combine", 0) + row.apply("prefill", 16) + row.apply("decode-fused", 16));
        AttentionShape.Builder b = AttentionShape.builder().heads(4).kvHeads(2).headDim(96).dtype(DType.BF16)
                .causal(true).window(63, 0).softcap(30f).sinks(new float[] {1, 2, 3, 4});
        for (int queries : new int[] {1, 300}) {
            AttentionShape s = b.queryLength(queries).kvLength(4096).build();
            LaunchTable.checkSupported("ptx-cuda", s, m, 0);
            LaunchTable.checkSupported("ptx-tornado", s, m, 16);
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> LaunchTable.checkSupported("ptx-tornado", s, m, 128));
            assertTrue(e.allowed().startsWith("ptx-tornado serves what its kernel manifest lists"), e.getMessage());
        }
        // The fused decode twin alone serves decode behind a header: without it, a decode shape is refused.
        KernelManifest noFused = KernelManifest.parse(header + row.apply("prefill", 16));
        AttentionShape decode = b.queryLength(1).kvLength(4096).build();
        assertThrows(InvalidArgumentException.class, () -> LaunchTable.checkSupported("ptx-tornado", decode, noFused, 16));
    }
}
