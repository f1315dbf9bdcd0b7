package io.github.tornadoattention.ptx;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.InvalidArgumentException;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Which hand-tuned kernel runs a shape, and how it is launched: the launch table of
 * ptx-overrides/README.md, shared by the ptx-cuda and ptx-tornado hosts. Prefill picks a tile
 * configuration per head dim and causal flag; a few queries against a long KV cache go to the
 * split-KV decode kernels and their combine step.
 */
public final class LaunchTable {
    public static final List<Integer> HEAD_DIMS = List.of(64, 128);
    public static final String FWD_MODULE = "flash_fwd.ptx";
    public static final String DECODE_MODULE = "flash_decode.ptx";
    /** The decode kernels pack up to 16 rows (query heads of one KV head x Sq) into one warp. */
    public static final int DECODE_MAX_QUERIES = 16;
    private static final int DECODE_ROWS_PER_BLOCK = 16;
    private static final int DECODE_THREADS = 32;
    private static final int COMBINE_THREADS = 128;
    /** Keys per split below which splitting costs more (combine pass, partial writes) than it gains. */
    private static final int MIN_KEYS_PER_SPLIT = 256;
    private static final int MAX_SPLITS = 128;
    /** Grid y (prefill: B*Hq) and z (decode: B*Hkv) are limited to 65535 blocks. */
    private static final int MAX_GRID_YZ = 65535;

    private LaunchTable() {
    }

    /** One kernel launch: entry name, grid, threads per block, dynamic shared memory. */
    public record Launch(String module, String entry, int gridX, int gridY, int gridZ, int threads, int dynamicSharedBytes) {
    }

    /** A prefill tile configuration: Br query rows per block. */
    record Prefill(String entry, int rowsPerBlock, int threads) {
    }

    /** Throws unless the hand-tuned kernels cover {@code shape}. */
    public static void checkSupported(String backendId, AttentionShape shape) {
        if (!HEAD_DIMS.contains(shape.headDim())) {
            throw new InvalidArgumentException("headDim", shape.headDim(), backendId + " supports head dims " + HEAD_DIMS);
        }
        if ((long) shape.batch() * shape.queryHeads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*queryHeads", (long) shape.batch() * shape.queryHeads(),
                    backendId + " launches one block row per (batch, head): at most " + MAX_GRID_YZ);
        }
    }

    /**
     * FlashAttention-2's tile choices, tuned on H100/H200 within 48 KB of static shared memory
     * (ptx-overrides/README.md): D=64 takes 128 query rows per block (Q in registers, K/V tiles of 64
     * keys). D=128 non-causal takes 128 rows (two 16-row groups per warp, Q in shared memory) and tiles
     * of 32 keys with K and V pipelined apart; D=128 causal takes 64 rows and tiles of 48 keys, which
     * measured faster there.
     */
    static Prefill prefill(int headDim, boolean causal) {
        return switch (headDim) {
            case 64 -> new Prefill("flash_fwd_d64_m128n64w4s2", 128, 128);
            case 128 -> causal ? new Prefill("flash_fwd_d128_m64n48w4s2", 64, 128)
                    : new Prefill("flash_fwd_d128_m128n32w4s1_qs_eager", 128, 128);
            default -> throw new IllegalArgumentException("headDim " + headDim);
        };
    }

    /** True when the split-KV decode kernels run this shape: a few queries (decode steps). */
    public static boolean isDecode(AttentionShape shape) {
        return shape.queryLength() <= DECODE_MAX_QUERIES;
    }

    /**
     * Decode splits: about four one-warp blocks per SM, never fewer than {@value #MIN_KEYS_PER_SPLIT}
     * keys per split, at most {@value #MAX_SPLITS}.
     */
    public static int decodeSplits(AttentionShape shape, int multiprocessors) {
        int blocks = shape.batch() * shape.kvHeads() * packedRowBlocks(shape);
        long wanted = Math.round(4.0 * multiprocessors / blocks);
        int byLength = (shape.kvLength() + MIN_KEYS_PER_SPLIT - 1) / MIN_KEYS_PER_SPLIT;
        return (int) Math.max(1, Math.min(wanted, Math.min(byLength, MAX_SPLITS)));
    }

    private static int packedRowBlocks(AttentionShape shape) {
        return (shape.groupSize() * shape.queryLength() + DECODE_ROWS_PER_BLOCK - 1) / DECODE_ROWS_PER_BLOCK;
    }

    /**
     * The launches for {@code shape}, in order. {@code entrySuffix} is "" for the CUDA-driver host
     * and "_tornado" for TornadoVM's prebuilt tasks (same kernels, TornadoVM's argument ABI).
     */
    public static List<Launch> launches(AttentionShape shape, int splits, String entrySuffix) {
        int d = shape.headDim();
        if (isDecode(shape)) {
            String split = (d == 128 ? "flash_decode_split_d128_n32s2" : "flash_decode_split_d64_n64s2") + entrySuffix;
            String combine = "flash_decode_combine_d" + d + entrySuffix;
            int rows = shape.batch() * shape.queryHeads() * shape.queryLength();
            int rowsPerCombineBlock = COMBINE_THREADS / (d / 8); // one thread per 8 values of a row
            return List.of(
                    new Launch(DECODE_MODULE, split, splits, packedRowBlocks(shape), shape.batch() * shape.kvHeads(),
                            DECODE_THREADS, 0),
                    new Launch(DECODE_MODULE, combine, (rows + rowsPerCombineBlock - 1) / rowsPerCombineBlock, 1, 1,
                            COMBINE_THREADS, 0));
        }
        return List.of(prefillLaunch(shape, entrySuffix));
    }

    /**
     * Split-KV decode in one launch ({@code flash_decode_fused_*}, ptx-overrides/src/flash_decode_fused.cuh):
     * the split pass's grid, where the last split of each row block to finish also combines it. Used by
     * the TornadoVM host, whose graph cannot hold the split and combine passes as two tasks (TornadoVM
     * 5.2.0 crashes). Needs {@link #decodeTickets} zeroed ints besides the workspace.
     */
    public static Launch decodeFusedLaunch(AttentionShape shape, int splits, String entrySuffix) {
        String entry = (shape.headDim() == 128 ? "flash_decode_fused_d128_n32s2" : "flash_decode_fused_d64_n64s2") + entrySuffix;
        return new Launch(DECODE_MODULE, entry, splits, packedRowBlocks(shape), shape.batch() * shape.kvHeads(),
                DECODE_THREADS, 0);
    }

    /** Ints of the fused decode kernel's ticket array: one per row block (grid y times grid z). */
    public static int decodeTickets(AttentionShape shape) {
        return packedRowBlocks(shape) * shape.batch() * shape.kvHeads();
    }

    /** The prefill kernel's launch; it is correct for any Sq (decode shapes included), if slower there. */
    public static Launch prefillLaunch(AttentionShape shape, String entrySuffix) {
        Prefill p = prefill(shape.headDim(), shape.causal());
        return new Launch(FWD_MODULE, p.entry() + entrySuffix,
                (shape.queryLength() + p.rowsPerBlock() - 1) / p.rowsPerBlock(), shape.batch() * shape.queryHeads(), 1,
                p.threads(), 0);
    }

    /** Floats of the decode workspace: partial O [splits, B, Hq, Sq, D] and partial lse [splits, B, Hq, Sq]. */
    public static long decodeWorkspaceFloats(AttentionShape shape, int splits) {
        long rows = (long) splits * shape.batch() * shape.queryHeads() * shape.queryLength();
        return rows * shape.headDim() + rows;
    }

    /** The text of a shipped PTX module (a class-path resource built from ptx-overrides/ptx). */
    public static String ptx(String module) {
        String resource = "/io/github/tornadoattention/ptx/" + module;
        try (InputStream in = LaunchTable.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("missing class-path resource " + resource);
            }
            return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
