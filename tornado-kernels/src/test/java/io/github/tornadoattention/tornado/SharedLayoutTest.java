package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The shared-memory layouts of tornado-mma's kernels (MmaLayout's aTileAt/aSwizzle, kSubTile/kTileAt,
 * qSubTile/qStageQuery/qStageChunk, vtSubTile/vtAt/vtItemPair/vtItemQuad, pTileAt; the synchronous kernels' vSubTile
 * in MmaSynchronousKernels): every element has its own place
 * inside the tile that
 * MmaTileConfig sizes, and the accesses they were designed for are free of bank conflicts. Shared memory has 32
 * banks of 4 bytes; a warp's 32-bit access is conflict-free when its lanes hit distinct banks, a 64-bit access when
 * each half-warp's lanes hit distinct 8-byte bank pairs, and {@code ldmatrix} reads each 8x8 matrix in one
 * wavefront when its 8 row addresses (16 bytes each) fall in distinct 16-byte bank groups. (That the kernels read
 * what they wrote is checked end to end by MmaKernelsTest.)
 */
class SharedLayoutTest {

    /** TornadoVM's ldmatrix.x4 lowering: lane l supplies row 8 ((l / 8) % 2) + l % 8, byte 16 (l / 16) of it. */
    private static int ldmatrixRowAddress(int lane, int byteOffset) {
        int group = lane >>> 3;
        return byteOffset + ((group & 1) * 8 + (lane & 7)) * 32 + (group >>> 1) * 16;
    }

    @Test
    void swizzledRowAddressesPointAtTheRowsATileAtWrote() {
        for (int lane = 0; lane < 32; lane++) {
            int group = lane >>> 3;
            int row = (group & 1) * 8 + (lane & 7);
            int firstWord = 4 * (group >>> 1);        // the 16-byte half this lane's matrix reads: words 0-3 or 4-7
            assertEquals(4 * MmaLayout.aTileAt(row, firstWord), ldmatrixRowAddress(lane, MmaLayout.aSwizzle(lane)),
                    "lane " + lane);
            for (int word = firstWord; word < firstWord + 4; word++) {   // the half stays contiguous
                assertEquals(MmaLayout.aTileAt(row, firstWord) + word - firstWord, MmaLayout.aTileAt(row, word));
            }
        }
    }

    @Test
    void swizzledLdmatrixReadsEachMatrixInOneWavefront() {
        for (int matrix = 0; matrix < 4; matrix++) {
            Set<Integer> swizzled = new HashSet<>();
            Set<Integer> plain = new HashSet<>();
            for (int lane = 8 * matrix; lane < 8 * matrix + 8; lane++) {
                swizzled.add(Math.floorMod(ldmatrixRowAddress(lane, MmaLayout.aSwizzle(lane)) / 16, 8));
                plain.add(Math.floorMod(ldmatrixRowAddress(lane, 0) / 16, 8));
            }
            assertEquals(8, swizzled.size(), "matrix " + matrix);
            assertEquals(4, plain.size(), "the unswizzled tile reads rows r and r + 4 from the same banks");
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {32, 64, 96, 128, 192, 256})
    void keyAndValueTilesGiveEveryElementItsOwnPlace(int headDim) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(headDim);
        Set<Integer> keys = new HashSet<>();
        Set<Integer> values = new HashSet<>();
        for (int key = 0; key < config.blockKv(); key++) {
            for (int pair = 0; pair < headDim / 2; pair++) {   // the int holding columns 2 pair, 2 pair + 1
                int k = MmaLayout.kSubTile(key / 16, pair / 8, headDim) / 4 + MmaLayout.aTileAt(key % 16, pair % 8);
                int v = MmaSynchronousKernels.vSubTile(key / 16, pair / 4, headDim) / 4
                        + MmaSynchronousKernels.valueRow(key % 16) * 4 + pair % 4;
                assertTrue(keys.add(k) && k < config.keyTileInts(), "K " + key + ", " + pair);
                assertTrue(values.add(v) && v < MmaSynchronousKernels.valueTileInts(config), "V " + key + ", " + pair);
                if (key < 16 && pair < 16) {   // the staging helper's range: 16 keys, 32 columns
                    assertEquals(k, MmaLayout.kTileAt(key, 2 * pair));
                }
            }
        }
    }

    /**
     * The pipelined kernels' K staging: thread t stores 64-bit word i at kTileAt + 288 i, which TornadoVM emits as two
     * 32-bit stores (kT is an int[]). Each half-warp's words fall in 16 distinct 8-byte bank pairs, so a 32-bit store
     * instruction meets each bank at most twice (the two half-warps): 2-way, the least for 8-byte chunks, whose first
     * int always sits in an even bank.
     */
    @ParameterizedTest
    @ValueSource(ints = {32, 64, 96, 128, 192, 256})
    void keyStagingStoresAreAtMostTwoWayConflicted(int headDim) {
        int words = MmaTileConfig.forHeadDim(headDim).blockKv() * headDim / 4 / 128;
        for (int word = 0; word < words; word++) {
            for (int warp = 0; warp < 4; warp++) {
                int[] perBank = new int[32];
                for (int half = 0; half < 2; half++) {
                    Set<Integer> pairs = new HashSet<>();
                    for (int t = 32 * warp + 16 * half; t < 32 * warp + 16 * half + 16; t++) {
                        int at = MmaLayout.kTileAt(MmaLayout.kvLoadKey(t), MmaLayout.kvLoadColumn(t)) + 288 * word;
                        pairs.add((at / 2) % 16);
                        perBank[at % 32]++;
                    }
                    assertEquals(16, pairs.size(), "word " + word + ", warp " + warp + ", half " + half);
                }
                for (int bank = 0; bank < 32; bank++) {
                    assertTrue(perBank[bank] <= 2, "word " + word + ", warp " + warp + ", bank " + bank);
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {32, 64, 96, 128, 192, 256})
    void queryStagingCoversTheTileOnceWithoutBankConflicts(int headDim) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(headDim);
        int items = (config.blockQ() / 2) * (headDim / 4);
        Set<Integer> covered = new HashSet<>();
        Set<Integer> ints = new HashSet<>();
        for (int warpStart = 0; warpStart < items; warpStart += 32) {
            for (int row = 0; row < 4; row++) {            // the four stores of one item: d = 4 chunk + row
                Set<Integer> banks = new HashSet<>();
                for (int it = warpStart; it < warpStart + 32; it++) {
                    int query = MmaLayout.qStageQuery(it);
                    int chunk = MmaLayout.qStageChunk(it, headDim);
                    int at = MmaLayout.qSubTile(chunk >>> 2, query >>> 3, config.blockQ()) / 4
                            + 16 * (chunk & 3) + 4 * row + ((query & 7) >>> 1);
                    banks.add(at % 32);
                    assertTrue(ints.add(at) && at < config.queryTileInts(), "item " + it + ", row " + row);
                    if (row == 0) {
                        assertTrue(query % 2 == 0 && query < config.blockQ() && chunk < headDim / 4);
                        assertTrue(covered.add(query * 1000 + chunk), "item " + it + " repeats another");
                    }
                }
                // D = 96: d blocks b and b + 4 share banks, and its six cannot give every warp four of distinct banks
                // (qStageChunk): the warps of items 256..511 store 2-way conflicted (once per query tile).
                // D = 32: a warp's stores cover its two d blocks only, 2-way.
                boolean twoWay = headDim == 32 || headDim == 96 && (warpStart >>> 8) == 1;
                assertEquals(twoWay ? 16 : 32, banks.size(), "warp at item " + warpStart + ", row " + row);
            }
        }
        assertEquals(items, covered.size());
    }

    /**
     * The pipelined kernels' V^T staging: item i of thread t (vtItemPair, vtItemQuad) writes the four ints of d = 4 dq + row
     * at vtAt: every (key pair, d) once, inside the tile MmaTileConfig sizes, each sub-tile 16-byte aligned (ldmatrix), and
     * each warp-wide 32-bit store (fixed item and row) to 32 distinct banks.
     */
    @ParameterizedTest
    @ValueSource(ints = {32, 64, 96, 128, 192, 256})
    void valueTransposedStagingCoversTheTileOnceWithoutBankConflicts(int headDim) {
        MmaTileConfig config = MmaTileConfig.forHeadDim(headDim);
        int items = (config.blockKv() / 2) * (headDim / 4) / 128;
        assertEquals(config.blockKv() / 2 * (headDim / 4), 128 * items, "whole items per thread");
        Set<Integer> ints = new HashSet<>();
        for (int warp = 0; warp < 4; warp++) {
            for (int i = 0; i < items; i++) {
                for (int row = 0; row < 4; row++) {
                    Set<Integer> banks = new HashSet<>();
                    for (int t = 32 * warp; t < 32 * warp + 32; t++) {
                        int pair = MmaLayout.vtItemPair(t, i, headDim);
                        int quad = MmaLayout.vtItemQuad(t, i, headDim);
                        assertTrue(pair < config.blockKv() / 2 && quad < headDim / 4, "thread " + t + ", item " + i);
                        int at = MmaLayout.vtAt(4 * quad, pair, headDim) + 8 * row;   // the kernels' at + 8 row
                        assertEquals(MmaLayout.vtAt(4 * quad + row, pair, headDim), at);
                        assertTrue(ints.add(at) && at < config.valueTransposedTileInts(), "thread " + t + ", item " + i);
                        banks.add(at % 32);
                    }
                    // D = 96: its six d blocks cannot give every store four of distinct banks (vtItemQuad): 2-way at most.
                    assertEquals(headDim == 96 && i == 1 ? 16 : 32, banks.size(), "warp " + warp + ", item " + i + ", row " + row);
                }
            }
        }
        assertEquals(config.blockKv() * headDim / 2, ints.size());
        for (int keyBlock = 0; keyBlock < config.blockKv() / 16; keyBlock++) {
            for (int dBlock = 0; dBlock < headDim / 16; dBlock++) {
                assertEquals(0, MmaLayout.vtSubTile(keyBlock, dBlock, headDim) % 16);
            }
        }
    }

    /**
     * P^T's sub-tiles: pTileAt is the layout TornadoVM's mmaLoadBSwizzled reads (byte offset b of a 16x8 fp16 tile at
     * b ^ (((b >> 7) & 7) << 4)), and a warp's fp16 stores of one (key half, query) slot write 32 distinct words in 32
     * distinct banks.
     */
    @Test
    void probabilityTransposedLayoutIsTheSwizzledOneAndItsStoresAreConflictFree() {
        Set<Integer> halfs = new HashSet<>();
        for (int row = 0; row < 16; row++) {
            for (int col = 0; col < 8; col++) {
                int b = row * 16 + col * 2;
                assertEquals(b ^ (((b >> 7) & 7) << 4), 2 * MmaLayout.pTileAt(row, col), "row " + row + ", col " + col);
                assertTrue(halfs.add(MmaLayout.pTileAt(row, col)));
            }
        }
        for (int keyHalf = 0; keyHalf < 2; keyHalf++) {
            for (int e = 0; e < 2; e++) {
                Set<Integer> banks = new HashSet<>();
                for (int lane = 0; lane < 32; lane++) {
                    int half = MmaLayout.pTileAt((lane >>> 2) + 8 * keyHalf, 0) + ((lane & 3) << 1) + e;
                    banks.add((half / 2) % 32);
                }
                assertEquals(32, banks.size(), "keys " + (keyHalf == 0 ? "g" : "g + 8") + ", e " + e);
            }
        }
    }
}
