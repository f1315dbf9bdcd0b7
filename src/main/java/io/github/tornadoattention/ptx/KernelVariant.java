package io.github.tornadoattention.ptx;

import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import java.util.Arrays;
import java.util.Collections;
import java.util.EnumSet;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * What a host asks of a hand-tuned kernel: what it computes, for which element type, head dim, causal flag,
 * cache layout, run-time features, ABI (0 header bytes: the CUDA driver; else TornadoVM's array header) and
 * architecture family. Every host (ptx-cuda, the TornadoVM graphs, the engine tasks, the library task) and the
 * harness select entries of the {@link KernelManifest} by this value, never by an entry name.
 */
public record KernelVariant(Kind kind, DType dtype, int headDim, boolean causal, CacheLayout layout,
                            Set<Feature> features, int headerBytes, String arch) {
    /** The sm_80-level family: PTX for compute_80, which runs on sm_80, sm_89 (L4) and sm_90 (H100/H200). */
    public static final String SM80 = "sm80";

    /** What an entry computes; {@link #column()} is the manifest's {@code kind} column. */
    public enum Kind {
        PREFILL, DECODE_SPLIT, DECODE_COMBINE, DECODE_FUSED,
        CACHE_PREFILL, CACHE_DECODE_SPLIT, CACHE_DECODE_COMBINE, CACHE_DECODE_FUSED,
        CACHE_APPEND_DECODE_FUSED, CACHE_STAGED_DECODE_FUSED, CACHE_APPEND, MERGE_STATES;

        public String column() {
            return name().toLowerCase(Locale.ROOT).replace('_', '-');
        }

        static Kind ofColumn(String text) {
            return Arrays.stream(values()).filter(k -> k.column().equals(text)).findFirst()
                    .orElseThrow(() -> new IllegalStateException("manifest: unknown kind " + text));
        }
    }

    /** Where K and V live: a dense tensor (no cache), a contiguous cache or a paged pool. */
    public enum CacheLayout {
        NONE, CONTIGUOUS, PAGED;

        public String column() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /** Run-time score and mask features an entry may support beside causal. */
    public enum Feature {
        WINDOW, SOFTCAP, SINKS;

        public String column() {
            return name().toLowerCase(Locale.ROOT);
        }

        static Set<Feature> ofColumn(String text) {
            if (text.equals("-")) {
                return Set.of();
            }
            return Collections.unmodifiableSet(Arrays.stream(text.split("\\+"))
                    .map(f -> Arrays.stream(values()).filter(v -> v.column().equals(f)).findFirst()
                            .orElseThrow(() -> new IllegalStateException("manifest: unknown feature " + f)))
                    .collect(Collectors.toCollection(() -> EnumSet.noneOf(Feature.class))));
        }
    }

    public KernelVariant {
        InvalidArgumentException.requireNonNull("kind", kind);
        InvalidArgumentException.requireNonNull("dtype", dtype);
        InvalidArgumentException.requireNonNull("layout", layout);
        InvalidArgumentException.requireNonNull("arch", arch);
        features = Set.copyOf(features);
        if (headDim < 0 || headerBytes < 0) {
            throw new InvalidArgumentException(headDim < 0 ? "headDim" : "headerBytes", headDim < 0 ? headDim : headerBytes,
                    "must be >= 0");
        }
    }

    /** A dense (no cache), non-causal, CUDA-driver, sm80-family variant without features; change it with the withers. */
    public static KernelVariant of(Kind kind, DType dtype, int headDim) {
        return new KernelVariant(kind, dtype, headDim, false, CacheLayout.NONE, Set.of(), 0, SM80);
    }

    public KernelVariant causal(boolean causal) {
        return new KernelVariant(kind, dtype, headDim, causal, layout, features, headerBytes, arch);
    }

    public KernelVariant layout(CacheLayout layout) {
        return new KernelVariant(kind, dtype, headDim, causal, layout, features, headerBytes, arch);
    }

    /** The cache layout of a cache that is paged or not. */
    public KernelVariant paged(boolean paged) {
        return layout(paged ? CacheLayout.PAGED : CacheLayout.CONTIGUOUS);
    }

    public KernelVariant features(Set<Feature> features) {
        return new KernelVariant(kind, dtype, headDim, causal, layout, features, headerBytes, arch);
    }

    /** The ABI: 0 for the CUDA driver, else the bytes of TornadoVM's array header before each array's data. */
    public KernelVariant headerBytes(int headerBytes) {
        return new KernelVariant(kind, dtype, headDim, causal, layout, features, headerBytes, arch);
    }

    public KernelVariant kind(Kind kind) {
        return new KernelVariant(kind, dtype, headDim, causal, layout, features, headerBytes, arch);
    }

    @Override
    public String toString() {
        return kind.column() + " " + dtype.name().toLowerCase(Locale.ROOT) + " D=" + headDim + (causal ? " causal" : " non-causal")
                + (layout == CacheLayout.NONE ? "" : " " + layout.column() + " cache")
                + (features.isEmpty() ? "" : " " + features.stream().map(Feature::column).sorted().toList())
                + (headerBytes == 0 ? " (CUDA driver" : " (TornadoVM, " + headerBytes + "-byte header") + ", " + arch + ")";
    }
}
