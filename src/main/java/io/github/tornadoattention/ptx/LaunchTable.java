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
     * Throws unless the shipped manifest serves {@code shape} ({@link #checkSupported(String, AttentionShape,
     * KernelManifest)}).
     */
    public static void checkSupported(String backendId, AttentionShape shape) {
        checkSupported(backendId, shape, KernelManifest.shipped());
    }

    /**
     * Throws unless {@code manifest} has the entries {@code shape} runs: element type, head dim, causal flag and the
     * features (window, softcap, sinks) are looked up like any variant field, all at once, so whatever the manifest
     * serves is accepted. A refusal names the field that rules the shape out (a feature by its own name, with its
     * value), the backend and what the manifest serves.
     */
    public static void checkSupported(String backendId, AttentionShape shape, KernelManifest manifest) {
        checkSupported(backendId, shape, manifest, 0);
    }

    /**
     * As {@link #checkSupported(String, AttentionShape, KernelManifest)} for the ABI of {@code headerBytes}: 0, the
     * CUDA driver's prefill or split + combine entries; else the TornadoVM twins (prefill or the fused decode).
     */
    public static void checkSupported(String backendId, AttentionShape shape, KernelManifest manifest, int headerBytes) {
        if ((long) shape.batch() * shape.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) shape.batch() * shape.heads(),
                    backendId + " launches one block row per (batch, head): at most " + MAX_GRID_YZ);
        }
        List<Kind> kinds = !isDecode(shape) ? List.of(Kind.PREFILL)
                : headerBytes == 0 ? List.of(Kind.DECODE_SPLIT, Kind.DECODE_COMBINE) : List.of(Kind.DECODE_FUSED);
        for (Kind kind : kinds) {
            require(backendId, manifest, variant(kind, shape).headerBytes(headerBytes), shape.features(), shape::featureValue);
        }
    }

    /**
     * The entry of {@code manifest} for {@code variant} with {@code features} (names: "window", "softcap", "sinks"),
     * as {@link KernelManifest#select} finds it; a refusal is rethrown naming {@code backendId}: a feature no entry
     * serves by its own name and value ({@code value}), any other field as the manifest names it.
     */
    public static Kernel require(String backendId, KernelManifest manifest, KernelVariant variant, List<String> features,
                                 java.util.function.UnaryOperator<String> value) {
        try {
            return manifest.select(variant.features(features(features)));
        } catch (InvalidArgumentException e) {
            if (e.argument().equals("features")) {
                // Name the first feature that no entry with the rest of the variant serves.
                for (String feature : features) {
                    if (!manifest.serves(variant.features(Set.of(feature(feature))))) {
                        throw new InvalidArgumentException(feature, value.apply(feature), backendId + " has no kernel with "
                                + feature + " (" + e.allowed() + "); cpu-reference serves it");
                    }
                }
                throw new InvalidArgumentException(String.join("+", features), features.stream().map(value).toList(),
                        backendId + " has no kernel with these features together (" + e.allowed() + "); cpu-reference serves them");
            }
            throw new InvalidArgumentException(e.argument(), e.value(), backendId + " serves what its kernel manifest lists ("
                    + e.allowed() + "); cpu-reference serves it");
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

    /**
     * Decode splits of this shape ({@link DecodeSplitPolicy#gridSplits}: the grid is fixed by the shape), over the
     * keys the queries can see ({@link DecodeSplitPolicy#keySpan}): with a window, its span, not the whole context.
     */
    public static int decodeSplits(AttentionShape shape, int multiprocessors) {
        return decodeSplits(shape, multiprocessors, KernelManifest.shipped());
    }

    public static int decodeSplits(AttentionShape shape, int multiprocessors, KernelManifest manifest) {
        long blocks = (long) shape.batch() * shape.kvHeads() * packedRowBlocks(shape, kernel(manifest, Kind.DECODE_SPLIT, shape));
        return DecodeSplitPolicy.gridSplits(DecodeSplitPolicy.keySpan(shape), blocks, multiprocessors);
    }

    /** The launches for {@code shape}, in order: prefill, or for decode shapes the split pass then the combine pass. */
    public static List<Launch> launches(AttentionShape shape, int splits) {
        return launches(shape, splits, KernelManifest.shipped());
    }

    public static List<Launch> launches(AttentionShape shape, int splits, KernelManifest manifest) {
        if (isDecode(shape)) {
            Kernel combine = kernel(manifest, Kind.DECODE_COMBINE, shape);
            long rows = DecodeWorkspace.of(shape, splits).rows();
            return List.of(decodeSplitLaunch(shape, splits, manifest),
                    new Launch(combine, Math.toIntExact(Math.ceilDiv(rows, combine.rowsPerBlock())), 1, 1));
        }
        return List.of(prefillLaunch(shape, manifest));
    }

    /** The prefill kernel's launch; it is correct for any Sq (decode shapes included), if slower there. */
    public static Launch prefillLaunch(AttentionShape shape) {
        return prefillLaunch(shape, KernelManifest.shipped());
    }

    public static Launch prefillLaunch(AttentionShape shape, KernelManifest manifest) {
        Kernel k = kernel(manifest, Kind.PREFILL, shape);
        return new Launch(k, Math.ceilDiv(shape.queryLength(), k.rowsPerBlock()),
                shape.batch() * shape.heads(), 1);
    }

    /**
     * The split pass: one block per (split, row block of the query heads of one KV head times Sq,
     * batch x KV head), so K and V are read once per KV head.
     */
    public static Launch decodeSplitLaunch(AttentionShape shape, int splits) {
        return decodeSplitLaunch(shape, splits, KernelManifest.shipped());
    }

    public static Launch decodeSplitLaunch(AttentionShape shape, int splits, KernelManifest manifest) {
        Kernel k = kernel(manifest, Kind.DECODE_SPLIT, shape);
        return new Launch(k, splits, packedRowBlocks(shape, k), shape.batch() * shape.kvHeads());
    }

    public static DecodeWorkspace decodeWorkspace(AttentionShape shape, int splits) {
        return DecodeWorkspace.of(shape, splits);
    }

    /** The CUDA-driver entry of {@code kind} for a dense call of this shape (dtype, head dim, features: variant fields). */
    private static Kernel kernel(KernelManifest manifest, Kind kind, AttentionShape shape) {
        return manifest.select(variant(kind, shape).features(features(shape)));
    }

    /** The CUDA-driver variant of {@code kind} for a dense call of {@code shape}, without its features. */
    public static KernelVariant variant(Kind kind, AttentionShape shape) {
        return KernelVariant.of(kind, shape.dtype(), shape.headDim()).causal(kind == Kind.PREFILL ? tileCausal(shape) : shape.causal());
    }

    /** Window width (left side + the query's own key) from which a banded causal prefill runs the non-causal tile. */
    public static final int WIDE_WINDOW_KEYS = 2048;

    /**
     * The causal flag a dense prefill's tile is chosen by, on either ABI (every tile applies the call's own causal
     * flag and window): {@link #tileCausal(boolean, int, long, long)} over the shape's rows.
     */
    public static boolean tileCausal(AttentionShape shape) {
        return tileCausal(shape.causal(), shape.windowLeft(), shape.queryLength(),
                unboundRows(shape.windowLeft(), shape.queryLength(), shape.kvLength()));
    }

    /**
     * The causal flag a prefill tile is chosen by, for {@code rows} query rows of which {@code unboundRows} see every
     * key up to the diagonal ({@link #unboundRows}). A causal call runs the causal tile unless a window of at least
     * {@link #WIDE_WINDOW_KEYS} keys, not the diagonal, bounds the keys of more than half its rows: their work is then
     * a band, which the taller non-causal tile runs faster. Measured on an H200
     * (bench/results/h200-2026-11-27-windowed-prefill-tile.md): banded, the non-causal tile takes 0.92-0.98x the causal
     * tile's time from a 2048-key window up on the CUDA-driver D=128 pair (1.01-1.11x below it), and 0.87-0.91x on the
     * TornadoVM twins of D=96 and D=128; where the diagonal bounds half the rows or more it takes up to 1.05x. Head
     * dims with one tile for both flags are unaffected.
     */
    public static boolean tileCausal(boolean causal, int windowLeft, long rows, long unboundRows) {
        return mayRunBanded(causal, windowLeft) ? 2 * unboundRows >= rows : causal;
    }

    /** True when {@link #tileCausal} may pick the non-causal tile for a call with this causal flag and window. */
    public static boolean mayRunBanded(boolean causal, int windowLeft) {
        return causal && windowLeft >= WIDE_WINDOW_KEYS - 1;
    }

    /**
     * Of {@code queries} rows that end a sequence of {@code keys} keys (row i at position keys - queries + i), those
     * whose first visible key is 0: the window's left side does not cut them.
     */
    public static long unboundRows(int windowLeft, int queries, int keys) {
        if (windowLeft < 0) {
            return queries;
        }
        // Row i sees keys from i + keys - queries - left: the window cuts rows i > left - (keys - queries).
        return Math.clamp((long) windowLeft - ((long) keys - queries) + 1, 0, queries);
    }

    private static int packedRowBlocks(AttentionShape shape, Kernel split) {
        return Math.toIntExact(Math.ceilDiv((long) shape.groupSize() * shape.queryLength(), split.rowsPerBlock()));
    }
}
