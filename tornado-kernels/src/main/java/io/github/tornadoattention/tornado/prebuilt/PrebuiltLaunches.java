package io.github.tornadoattention.tornado.prebuilt;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import io.github.tornadoattention.ptx.LaunchTable;
import io.github.tornadoattention.ptx.LaunchTable.Launch;
import java.util.List;

/**
 * The ptx-tornado host's launches: the launch table's kernels in their TornadoVM twins, which take
 * TornadoVM's kernel-context word first and read every array behind its object header
 * ({@code TornadoNativeArray.ARRAY_HEADER} bytes: 16 by default, 128 with
 * {@code -Dtornado.panama.objectHeader=128}, which keeps the rows 128-byte aligned and is faster).
 * The twins are rows of the {@link KernelManifest} with that header. Decode shapes run the split-KV
 * decode as one fused launch (TornadoVM 5.2.0 crashes the JVM with the split and combine passes as
 * two prebuilt tasks of one graph: SIGSEGV in cuEventQuery when the next execution copies its
 * inputs, measured on an H200).
 */
public final class PrebuiltLaunches {
    private PrebuiltLaunches() {
    }

    /** The array header sizes the twins are compiled for. */
    public static List<Integer> headerBytes() {
        return KernelManifest.shipped().headerBytes(Kind.PREFILL);
    }

    /**
     * Throws unless the shipped manifest has the twins {@code shape} runs behind {@code headerBytes} (prefill, or the
     * fused decode): whatever it serves (element type, head dim, window, softcap, sinks) is accepted.
     */
    public static void checkSupported(String backendId, AttentionShape shape, long headerBytes) {
        LaunchTable.checkSupported(backendId, shape, KernelManifest.shipped(), Math.toIntExact(headerBytes));
    }

    /** The prefill launch of {@code shape} with the twin reading arrays behind {@code headerBytes} (its own tile). */
    public static Launch prefill(AttentionShape shape, long headerBytes) {
        KernelManifest.Kernel k = KernelManifest.shipped().select(twin(Kind.PREFILL, shape, headerBytes));
        return new Launch(k, Math.ceilDiv(shape.queryLength(), k.rowsPerBlock()), shape.batch() * shape.heads(), 1);
    }

    /**
     * Split-KV decode in one launch: the split pass's grid, where the last split of each row block to
     * finish also combines it. Its arguments: q, k, v, o, lse, the {@link LaunchTable.DecodeWorkspace}'s
     * partial O and partial lse, {@link #tickets} zeroed ints (the kernel leaves them zero), params.
     */
    public static Launch fusedDecode(AttentionShape shape, int splits, long headerBytes) {
        KernelManifest.Kernel k = KernelManifest.shipped().select(twin(Kind.DECODE_FUSED, shape, headerBytes));
        int rowBlocks = Math.toIntExact(Math.ceilDiv((long) shape.groupSize() * shape.queryLength(), k.rowsPerBlock()));
        return new Launch(k, splits, rowBlocks, shape.batch() * shape.kvHeads());
    }

    /**
     * Splits of the fused decode of {@code shape} on {@code multiprocessors} SMs: {@link DecodeSplitPolicy#gridSplits}
     * over the queries' key span, with the twin's row blocks.
     */
    public static int decodeSplits(AttentionShape shape, int multiprocessors, long headerBytes) {
        Launch one = fusedDecode(shape, 1, headerBytes);
        return DecodeSplitPolicy.gridSplits(DecodeSplitPolicy.keySpan(shape), (long) one.gridY() * one.gridZ(), multiprocessors);
    }

    /**
     * The dense variant of {@code kind} for {@code shape} in the twin reading arrays behind {@code headerBytes}: the
     * CUDA-driver variant's fields (its prefill tile by {@link LaunchTable#tileCausal}) and features.
     */
    private static KernelVariant twin(Kind kind, AttentionShape shape, long headerBytes) {
        return LaunchTable.variant(kind, shape).features(LaunchTable.features(shape)).headerBytes(Math.toIntExact(headerBytes));
    }

    /** Ints of the fused decode kernel's ticket array: one per row block (grid y times grid z). */
    public static int tickets(Launch fusedDecode) {
        return fusedDecode.gridY() * fusedDecode.gridZ();
    }
}
