package io.github.tornadoattention.tornado;

/**
 * Where tornado-mma's kernels ({@link MmaKernels}) keep each tile element in shared memory and in the per-CTA scratch,
 * and which elements each thread stages: the layouts the MMA intrinsics read ({@code ldmatrix} A and B operands,
 * {@code mmaStore} fragments), padded, shifted and swizzled so that the staging stores and the {@code ldmatrix} reads
 * are free of bank conflicts (SharedLayoutTest checks that). {@link MmaTileConfig} sizes the tiles from these
 * offsets; the kernels call them inline (TornadoVM inlines every call, so a layout costs no call at run time).
 *
 * <p>Offsets are in bytes where a name says {@code SubTile}, else in ints (two fp16) of an {@code int[]} tile, halfs of
 * a {@code HalfFloat[]} tile, or floats of the scratch. Right shifts are {@code >>>} on non-negative values only (see
 * {@link MmaKernels}), but {@link #halfPair}'s.
 */
final class MmaLayout {
    private MmaLayout() {
    }

    /**
     * The key (0..15) whose words thread {@code t} loads in the pipelined kernels' K/V staging: each warp
     * instruction reads four keys, eight lanes each, and the lanes of a key read eight consecutive 64-bit words
     * (64 bytes; {@link #kvLoadColumn}): four cache lines per instruction (a mapping of 16 bytes per key took
     * eight). K's padded layout ({@link #kSubTile}) takes the stores of this mapping with at most 2-way bank conflicts
     * (a lane order chosen for the unpadded layouts instead measured 2-8% slower on the H100).
     */
    static int kvLoadKey(int t) {
        return 4 * (t >>> 5) + ((t >>> 3) & 3);
    }

    /** The first of the four fp16 columns (0..28) of a 32-column block that thread {@code t} loads: see {@link #kvLoadKey}. */
    static int kvLoadColumn(int t) {
        return 4 * (t & 7);
    }

    /**
     * The int that holds fp16 {@code c} (0..3) of two 64-bit words of four fp16 each, the first word's in the low half:
     * how the kernels pair two rows (queries, keys) at one column for the MMA operand tiles. Signed shifts and a mask,
     * never {@code >>>}: TornadoVM 5.2's CUDA backend writes Java's {@code >>>} as C's {@code >>} on a signed type, and
     * Graal drops a mask that follows {@code >>> 48} as redundant, so that form sign-extends the top fp16 of a word whose
     * top bit is set and turns the pair's other half into 0xFFFF, a NaN.
     */
    static int halfPair(long first, long second, int c) {
        return ((int) (first >> (16 * c)) & 0xFFFF) | ((int) (second >> (16 * c)) << 16);
    }

    /**
     * Byte offset in the Q^T tile of B-operand sub-tile (d block {@code dBlock} of 16, query block {@code queryBlock} of 8):
     * 16 d-rows x 8 queries, 256 bytes with 16-byte rows ({@code mmaLoadB}), each d block's sub-tiles 16 bytes further on
     * than the last's. With that shift a warp's staging stores ({@link #qStageQuery}, {@link #qStageChunk}: four d blocks,
     * two 4-row groups, four query pairs) reach all 32 banks; unshifted, every sub-tile starts in bank 0 and they reached
     * 4 (8-way conflicts).
     */
    static int qSubTile(int dBlock, int queryBlock, int bq) {
        return (dBlock * (bq / 8) + queryBlock) * 256 + 16 * dBlock;
    }

    /** The even query of the pair that Q^T staging item {@code it} loads (bits: 1..0 pair in the block, 7..5 block). */
    static int qStageQuery(int it) {
        return 8 * ((it >>> 5) & 7) + 2 * (it & 3);
    }

    /**
     * The 4-column chunk of d (d = 4 chunk .. + 3) that Q^T staging item {@code it} loads: bits 4..3 and 9.. the d block,
     * bits 8 and 2 the chunk within it, so that one warp covers four d blocks ({@link #qSubTile}).
     */
    static int qStageChunk(int it) {
        int dBlock = 4 * (it >>> 9) + ((it >>> 3) & 3);
        return 4 * dBlock + 2 * ((it >>> 8) & 1) + ((it >>> 2) & 1);
    }

    /**
     * {@link #qStageChunk} at head dim {@code d} (D = 32: see below): D = 96 has six d blocks, which its map's bits 9.. and 4..3 cannot
     * cover, so there bits 9..8 (0..2) and 4..3 make a combination {@link #sixBlocks} turns into a d block and the chunk's
     * bit 1; one warp still covers four distinct d blocks, but d blocks b and b + 4 share banks, so the warps of items
     * 256..511 (d blocks 4, 5, 0, 1) store 2-way conflicted (once per query tile).
     */
    static int qStageChunk(int it, int d) {
        // D = 32 (two d blocks, 256 items): bits 2..4 the chunk; a warp covers two d blocks, its stores 2-way conflicted.
        return d == 32 ? (it >>> 2) & 7 : d == 96 ? 4 * sixBlocks(4 * (it >>> 8) + ((it >>> 3) & 3)) + 2 * sixHalf(4 * (it >>> 8) + ((it >>> 3) & 3))
                + ((it >>> 2) & 1) : qStageChunk(it);
    }

    /** The d block (0..5) of combination {@code c} (0..11) of a d block and a chunk-half at D = 96: c mod 6. */
    static int sixBlocks(int c) {
        return c - 6 * sixHalf(c);
    }

    /** The chunk-half (0, 1) of combination {@code c} (0..11) at D = 96: c / 6, without a division. */
    static int sixHalf(int c) {
        return (c + 2) >>> 3;
    }

    /**
     * Byte offset in the K tile of A-operand sub-tile (key block {@code keyBlock}, d block {@code dBlock}): 16 keys x 16
     * columns, 512 bytes with 32-byte rows ({@code mmaLoadA}'s fixed layout), followed by 64 bytes of padding. The padding
     * puts odd d blocks half a bank cycle (64 bytes) off even ones, so that a half-warp's 64-bit staging stores (two keys,
     * 32 columns: two sub-tiles) reach 16 distinct 8-byte bank pairs, not 8 twice.
     */
    static int kSubTile(int keyBlock, int dBlock, int d) {
        return (keyBlock * (d / 16) + dBlock) * 576;
    }

    /**
     * Int index within an A-operand sub-tile (16 rows of 32 bytes, 8 ints each) of row {@code row}, int {@code word}
     * (columns 2 word, 2 word + 1), swizzled: rows 4-7 and 12-15 keep their two 16-byte halves swapped. {@code ldmatrix}
     * reads each 8x8 matrix as 8 rows of 16 bytes, one address per lane; with 32-byte rows, rows r and r + 4 of a
     * matrix fall in the same banks (2 wavefronts per matrix). Swapped halves put them in the other 16 bytes of the
     * bank cycle, and {@link #aSwizzle} moves each lane's row address to match.
     */
    static int aTileAt(int row, int word) {
        return row * 8 + (word ^ (((row >>> 2) & 1) << 2));
    }

    /**
     * The byte offset, added to every {@code mmaLoadA}, that makes lane {@code lane}'s row address follow
     * {@link #aTileAt}'s swizzle. TornadoVM's {@code ldmatrix.x4} has lane l supply row 8 ((l / 8) % 2) + l % 8 at byte
     * 16 (l / 16) of the row; rows with bit 2 set have their halves swapped, so those lanes move +16 bytes (first half)
     * or -16 (second half). (The byte offset is a register operand of the intrinsic, added to each lane's address.)
     */
    static int aSwizzle(int lane) {
        return ((lane >>> 2) & 1) * (16 - ((lane >>> 4) << 5));
    }

    /**
     * Int index in the K tile of key {@code key} < 16, columns {@code col} < 32 and + 1 ({@link #kSubTile}); key + 16
     * and col + 32 are 288 (d / 32) and 288 ints further.
     */
    static int kTileAt(int key, int col) {
        return kSubTile(0, col >>> 4, 32) / 4 + aTileAt(key, (col & 15) >>> 1);
    }

    /**
     * Half index within a 16 keys x 8 queries B-operand sub-tile of P^T (16-byte rows, {@code mmaLoadBSwizzled}) of key
     * {@code row}, query {@code col}: rows 8-15 are stored pairwise swapped, the permutation TornadoVM's swizzled
     * {@code ldmatrix} addressing undoes (byte offset b read at b ^ (((b >> 7) & 7) << 4); within 256 bytes it flips bit
     * 4, the row's bit 0, for rows 8-15). A warp's fp16 stores of one (key half, query) slot reach 32 distinct banks.
     */
    static int pTileAt(int row, int col) {
        return ((row ^ (row >>> 3)) << 3) + col;
    }

    /**
     * Byte offset in the V^T tile of A-operand sub-tile (key block {@code keyBlock}, d block {@code dBlock}): 16 d-rows x
     * 16 keys, 512 bytes with 32-byte rows, followed by 32 bytes of padding, the four d blocks of a key block in a row.
     * The padding puts d block i eight banks on from d block 0, so that the staging stores of a warp (vtItemPair,
     * vtItemQuad: eight words of each of four d blocks) reach all 32 banks.
     */
    static int vtSubTile(int keyBlock, int dBlock, int d) {
        return (keyBlock * (d / 16) + dBlock) * 544;
    }

    /** Int index in the V^T tile of d {@code d} and the key pair {@code pair} (keys 2 pair, 2 pair + 1), swizzled (aTileAt). */
    static int vtAt(int col, int pair, int d) {
        return vtSubTile(pair >>> 3, col >>> 4, d) / 4 + aTileAt(col & 15, pair & 7);
    }

    /**
     * The key pair (Bc / 2 of them) of V^T staging item {@code i} (0..3; 0..2 at D = 96 and 192) of thread {@code t}: lane
     * bits 3-4 the pair's low bits; then at D = 64 (Bc = 64) item bit 1 and the warp, at D = 96 and 128 (Bc = 32) the warp, at
     * D = 192 and 256 (Bc = 16) warp bit 0. See {@link #vtItemQuad}.
     */
    static int vtItemPair(int t, int i, int d) {
        // D = 32 (Bc = 64, two items): lane bits 2-4 the pair's low bits, lane bit 1 its bit 3 (key blocks 16 banks apart),
        // the item its bit 4 (see vtItemQuad).
        return d == 32 ? ((t >>> 2) & 7) | (((t >>> 1) & 1) << 3) | ((i & 1) << 4)
                : d == 64 ? ((t >>> 3) & 3) | (((i >>> 1) & 1) << 2) | ((t >>> 5) << 3)
                : d == 128 || d == 96 ? ((t >>> 3) & 3) | ((t >>> 5) << 2) : ((t >>> 3) & 3) | (((t >>> 5) & 1) << 2);
    }

    /**
     * The 4-column chunk of d (D / 4 of them) of V^T staging item {@code i} of thread {@code t}: lane bit 0 its bit 0, lane
     * bits 1-2 the d block's low bits; item bit 0 its bit 1 and, at D = 128 and 256, item bit 1 the d block's bit 2, at
     * D = 256 warp bit 1 its bit 3; at D = 192 (three items) warp bit 1 its bit 1 and the item the d block's high part
     * (d blocks 4 i .. 4 i + 3); at D = 96 see below. One warp instruction covers four key pairs x two chunks of each of four d blocks: four
     * cache lines per load, and stores to 32 distinct banks (vtSubTile).
     */
    static int vtItemQuad(int t, int i, int d) {
        // D = 96: three items; lane bits 1-2 and the item make a combination (sixBlocks) of a d block and the chunk's bit
        // 1. d blocks b and b + 4 share banks (vtSubTile), so item 1 (d blocks 4, 5, 0, 1) stores 2-way conflicted.
        int c = 4 * i + ((t >>> 1) & 3);
        // D = 32: the warp the chunk in its d block, lane bit 0 the d block (with vtItemPair's lanes, all 32 banks).
        return d == 32 ? ((t >>> 5) & 3) | ((t & 1) << 2)
                : d == 96 ? (t & 1) | (sixHalf(c) << 1) | (sixBlocks(c) << 2)
                : d == 192 ? (t & 1) | (((t >>> 6) & 1) << 1) | (((t >>> 1) & 3) << 2) | (i << 4)
                : (t & 1) | ((i & 1) << 1) | (((t >>> 1) & 3) << 2) | (d == 64 ? 0 : ((i >>> 1) & 1) << 4)
                | (d == 256 ? (t >>> 6) << 5 : 0);
    }

    /**
     * Index within a scratch S^T buffer of the score of key {@code key} and query {@code query} (both within
     * the tile). S^T is stored fragment by fragment, each 16 keys x 8 queries dense (512 bytes, mmaStore with
     * row stride 8): a warp's store or read of one fragment element then touches 2 cache lines, not the 8 that
     * a Bc x Br row-major layout gave (row stride Br), which made the scratch round trip most of the L1 traffic.
     */
    static int scoreAt(int key, int query, int bq) {
        return ((key >>> 4) * (bq / 8) + (query >>> 3)) * 128 + (key & 15) * 8 + (query & 7);
    }

    /**
     * Index within a CTA's O^T scratch (the kernels that accumulate O^T = V^T P^T) of query {@code query}, column
     * {@code col} of O: stored fragment by fragment, 16 columns x 8 queries dense (mmaStore with row stride 8), the D / 16
     * fragments of a query block together. The row sums l follow, one float per query, at Br D.
     */
    static int outputTAt(int query, int col, int d) {
        return ((query >>> 3) * (d / 16) + (col >>> 4)) * 128 + (col & 15) * 8 + (query & 7);
    }
    /**
     * Byte offset in the V tile of B-operand sub-tile (key block {@code keyBlock}, d block {@code n} of 8): 16 keys x 8
     * columns, 256 bytes with 16-byte rows ({@code mmaLoadB}: the kernels that compute O = P V, MmaCpAsyncKernels and the
     * synchronous kernels of the tests). Four consecutive d blocks form a 1152-byte group, at 0, 272, 576 and 848 bytes
     * in it: shifted 0, 16, 64 and 80 bytes within a bank cycle, so that a half-warp's 64-bit staging stores (two keys,
     * four d blocks) reach 16 distinct 8-byte bank pairs; unpadded (all four at 0 mod 128) they reached 4.
     */
    static int vSubTile(int keyBlock, int n, int d) {
        return (keyBlock * (d / 32) + (n >>> 2)) * 1152 + (n & 1) * 272 + ((n >>> 1) & 1) * 576;
    }

    /**
     * The row of key {@code key} < 16 in a V sub-tile: key g + 8 e at row 2 g + e, the order of P's columns (a lane packs
     * its keys g and g + 8 of one query row into one int of P).
     */
    static int valueRow(int key) {
        return ((key & 7) << 1) | (key >>> 3);
    }

    /**
     * Index within a CTA's O scratch (the kernels that accumulate O = P V) of query row {@code row} (0..Br-1), column
     * {@code col} (0..D-1, and D for the row sum l): O is stored fragment by fragment (16 rows x 8 columns dense, mmaStore
     * with row stride 8; the row sums are fragment D / 8 of each warp's 16 rows), so that a warp's store or read of one
     * fragment element touches 2 cache lines rather than 8.
     */
    static int outputAt(int row, int col, int d) {
        return ((row >>> 4) * (d / 8 + 1) + (col >>> 3)) * 128 + (row & 15) * 8 + (col & 7);
    }
}
