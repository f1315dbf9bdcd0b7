package io.github.tornadoattention.ptx;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelManifest.Kernel;
import io.github.tornadoattention.ptx.KernelVariant.Feature;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * Which hand-tuned kernel runs a shape, and how it is launched, for the CUDA-driver ABI. The
 * kernels, their tiles and which one runs which head dim and causal flag are data in the
 * {@link KernelManifest}; this class turns a shape into grids. Prefill runs one configuration per
 * head dim and causal flag; a few queries against a long KV cache go to the split-KV decode kernels
 * and their combine step.
 */
public final class LaunchTable {
    /** The head dims the dense prefill kernels cover (fp16, CUDA driver). */
    public static final List<Integer> HEAD_DIMS = KernelManifest.shipped().headDims(KernelVariant.of(Kind.PREFILL, DType.FP16, 0));
    /** Up to this many queries run the split-KV decode kernels (their row blocks pack G * Sq rows). */
    public static final int DECODE_MAX_QUERIES = 16;
    /** Grid y (prefill: B*Hq) and z (decode: B*Hkv) are limited to 65535 blocks. */
    private static final int MAX_GRID_YZ = 65535;

    private LaunchTable() {
    }

    /** One kernel launch: the manifest's entry and the grid of blocks. */
    public record Launch(Kernel kernel, int gridX, int gridY, int gridZ) {
        public String module() {
            return kernel.module();
        }

        public String entry() {
            return kernel.entry();
        }

        public int threads() {
            return kernel.threads();
        }

        public int dynamicSharedBytes() {
            return kernel.dynamicSharedBytes();
        }

        /** The same grid with {@code other}, which must have this kernel's block (another ABI's twin, a fused pass). */
        public Launch withKernel(Kernel other) {
            if (other.threads() != kernel.threads() || other.rowsPerBlock() != kernel.rowsPerBlock()) {
                throw new IllegalArgumentException(other.entry() + " does not share the block of " + kernel.entry());
            }
            return new Launch(other, gridX, gridY, gridZ);
        }
    }

    /**
     * The decode workspace, written completely by the split pass: partial O {@code [splits, rows, D]}
     * and partial logsumexp {@code [splits, rows]} in fp32, {@code rows} = B * Hq * Sq.
     */
    public record DecodeWorkspace(long partialOFloats, long partialLseFloats, long rows, int splits) {
        static DecodeWorkspace of(AttentionShape shape, int splits) {
            long rows = (long) shape.batch() * shape.heads() * shape.queryLength();
            return new DecodeWorkspace(splits * rows * shape.headDim(), splits * rows, rows, splits);
        }
    }

    /**
     * Throws unless the hand-tuned kernels cover {@code shape}. Window, softcap and sinks are looked up in the
     * manifest like any variant field; a feature no entry serves is refused by its own name (window, softcap,
     * sinks), its value and the variants the manifest serves.
     */
    public static void checkSupported(String backendId, AttentionShape shape) {
        if (!HEAD_DIMS.contains(shape.headDim())) {
            throw new InvalidArgumentException("headDim", shape.headDim(), backendId + " supports head dims " + HEAD_DIMS);
        }
        if ((long) shape.batch() * shape.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) shape.batch() * shape.heads(),
                    backendId + " launches one block row per (batch, head): at most " + MAX_GRID_YZ);
        }
        Kind kind = isDecode(shape) ? Kind.DECODE_SPLIT : Kind.PREFILL;
        try {
            KernelManifest.shipped().select(variant(kind, shape));
        } catch (InvalidArgumentException e) {
            if (!e.argument().equals("dtype")) {
                throw e;
            }
            throw new InvalidArgumentException("dtype", shape.dtype().label(), backendId + " has no " + shape.dtype().label()
                    + " kernel yet (" + e.allowed() + "); cpu-reference serves it");
        }
        requireFeatures(backendId, variant(kind, shape), shape.features(), shape::featureValue);
    }

    /**
     * Looks each of {@code features} ("window", "softcap", "sinks") up in the manifest as {@code variant} with that
     * feature, dense or cache; one no entry serves is refused by its own name, its value ({@code value}) and the
     * variants the manifest serves. Other mismatches of {@code variant} are thrown as the manifest names them.
     */
    public static void requireFeatures(String backendId, KernelVariant variant, List<String> features,
                                       java.util.function.UnaryOperator<String> value) {
        for (String feature : features) {
            try {
                KernelManifest.shipped().select(variant.features(Set.of(feature(feature))));
            } catch (InvalidArgumentException e) {
                if (!e.argument().equals("features")) {
                    throw e;
                }
                throw new InvalidArgumentException(feature, value.apply(feature), backendId + " has no kernel with "
                        + feature + " (" + e.allowed() + "); cpu-reference serves it");
            }
        }
    }

    /** The manifest's features named {@code names} ("window", "softcap", "sinks"). */
    public static Set<Feature> features(List<String> names) {
        Set<Feature> features = EnumSet.noneOf(Feature.class);
        names.forEach(f -> features.add(feature(f)));
        return features;
    }

    /** The manifest's features that {@code shape} asks for. */
    public static Set<Feature> features(AttentionShape shape) {
        Set<Feature> features = EnumSet.noneOf(Feature.class);
        shape.features().forEach(f -> features.add(feature(f)));
        return features;
    }

    private static Feature feature(String name) {
        return Feature.valueOf(name.toUpperCase(Locale.ROOT));
    }

    /** True when the split-KV decode kernels run this shape: a few queries (decode steps). */
    public static boolean isDecode(AttentionShape shape) {
        return shape.queryLength() <= DECODE_MAX_QUERIES;
    }

    /** Decode splits of this shape ({@link DecodeSplitPolicy#gridSplits}: the grid is fixed by the shape). */
    public static int decodeSplits(AttentionShape shape, int multiprocessors) {
        long blocks = (long) shape.batch() * shape.kvHeads() * packedRowBlocks(shape, kernel(Kind.DECODE_SPLIT, shape));
        return DecodeSplitPolicy.gridSplits(shape.kvLength(), blocks, multiprocessors);
    }

    /** The launches for {@code shape}, in order: prefill, or for decode shapes the split pass then the combine pass. */
    public static List<Launch> launches(AttentionShape shape, int splits) {
        if (isDecode(shape)) {
            Kernel combine = kernel(Kind.DECODE_COMBINE, shape);
            long rows = DecodeWorkspace.of(shape, splits).rows();
            return List.of(decodeSplitLaunch(shape, splits),
                    new Launch(combine, Math.toIntExact(Math.ceilDiv(rows, combine.rowsPerBlock())), 1, 1));
        }
        return List.of(prefillLaunch(shape));
    }

    /** The prefill kernel's launch; it is correct for any Sq (decode shapes included), if slower there. */
    public static Launch prefillLaunch(AttentionShape shape) {
        Kernel k = kernel(Kind.PREFILL, shape);
        return new Launch(k, Math.ceilDiv(shape.queryLength(), k.rowsPerBlock()),
                shape.batch() * shape.heads(), 1);
    }

    /**
     * The split pass: one block per (split, row block of the query heads of one KV head times Sq,
     * batch x KV head), so K and V are read once per KV head.
     */
    public static Launch decodeSplitLaunch(AttentionShape shape, int splits) {
        Kernel k = kernel(Kind.DECODE_SPLIT, shape);
        return new Launch(k, splits, packedRowBlocks(shape, k), shape.batch() * shape.kvHeads());
    }

    public static DecodeWorkspace decodeWorkspace(AttentionShape shape, int splits) {
        return DecodeWorkspace.of(shape, splits);
    }

    /** The CUDA-driver entry of {@code kind} for a dense call of this shape (its dtype a variant field). */
    private static Kernel kernel(Kind kind, AttentionShape shape) {
        return KernelManifest.shipped().select(variant(kind, shape).features(features(shape)));
    }

    private static KernelVariant variant(Kind kind, AttentionShape shape) {
        return KernelVariant.of(kind, shape.dtype(), shape.headDim()).causal(shape.causal());
    }

    private static int packedRowBlocks(AttentionShape shape, Kernel split) {
        return Math.toIntExact(Math.ceilDiv((long) shape.groupSize() * shape.queryLength(), split.rowsPerBlock()));
    }
}
