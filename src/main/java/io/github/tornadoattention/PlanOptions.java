package io.github.tornadoattention;

import java.util.List;

/**
 * How a plan is made and run, beside its {@link AttentionShape}: which device, whether its kernels are timed on the
 * device, whether TornadoVM replays them as CUDA graphs, JIT options for tuning. {@link #defaults()} is what
 * {@link AttentionBackend#plan(AttentionShape)} uses; a backend ignores the options that do not concern it.
 *
 * <pre>{@code
 * PlanOptions options = PlanOptions.builder().cudaDevice(1).profile(true).build();
 * try (AttentionPlan plan = Attention.plan(shape, "auto", options)) { ... }
 * }</pre>
 *
 * @param cudaDevice  ptx-cuda: the CUDA device ordinal (default 0); a device the machine lacks is refused when the
 *                    plan is made, naming {@code cudaDevice}
 * @param profile     TornadoVM backends (tornado-simt, tornado-mma, ptx-tornado): time every call's kernels on the
 *                    device with TornadoVM's profiler, reported by
 *                    {@link io.github.tornadoattention.BenchmarkHooks#lastDeviceMillis()}. Off by default: the
 *                    profiler adds events and bookkeeping to every call. (ptx-cuda always times with CUDA events.)
 * @param cudaGraph   TornadoVM backends: replay the plan's task graph as CUDA graphs (TornadoVM's
 *                    {@code withCUDAGraph}); off by default
 * @param lanes       TornadoVM inference devices ({@link Attention#device}): host threads that run KV-cache executions
 *                    (a decode call's append + attention) concurrently, each cache always on the same one, so calls on
 *                    different caches (an engine's layers) overlap TornadoVM's synchronous per-execution cost as calls
 *                    on a CUDA stream do; such a call may return before it completes and {@code synchronize()} or any
 *                    host access to a tensor waits for it. 0 (the default): every call completes before it returns.
 *                    0..{@value #MAX_LANES}
 * @param mmaJitFlags tornado-mma: CUDA JIT options for its kernels, {@code NAME VALUE} pairs separated by spaces or
 *                    commas (e.g. {@code CU_JIT_OPTIMIZATION_LEVEL,4,CU_JIT_MAX_REGISTERS,168}), replacing the tile
 *                    configuration's own (at most 128 registers at D = 64); {@code ""} for none; {@code null} (the
 *                    default) keeps the configuration's. For tuning. Stored with single spaces. TornadoVM's PTX
 *                    backend only: its CUDA backend compiles with NVRTC and takes none (tornado-mma refuses them there).
 */
public record PlanOptions(int cudaDevice, boolean profile, boolean cudaGraph, int lanes, String mmaJitFlags) {
    /** The most {@link #lanes()} a device takes. */
    public static final int MAX_LANES = 16;
    /** The CUDA JIT options TornadoVM's PTX backend accepts ({@code withCompilerFlags}). */
    public static final List<String> JIT_FLAG_NAMES = List.of("CU_JIT_OPTIMIZATION_LEVEL", "CU_JIT_MAX_REGISTERS",
            "CU_JIT_CACHE_MODE", "CU_JIT_GENERATE_DEBUG_INFO", "CU_JIT_LOG_VERBOSE", "CU_JIT_GENERATE_LINE_INFO",
            "CU_JIT_TARGET");
    private static final PlanOptions DEFAULTS = new PlanOptions(0, false, false, 0, null);

    /** Validates; throws {@link InvalidArgumentException} naming the option. */
    public PlanOptions {
        if (cudaDevice < 0) {
            throw new InvalidArgumentException("cudaDevice", cudaDevice, "must be >= 0 (a CUDA device ordinal)");
        }
        if (lanes < 0 || lanes > MAX_LANES) {
            throw new InvalidArgumentException("lanes", lanes, "must be 0.." + MAX_LANES + " (host threads; 0: synchronous calls)");
        }
        mmaJitFlags = mmaJitFlags == null ? null : checkJitFlags(mmaJitFlags);
    }

    /** Device 0, no profiler, no CUDA graphs, synchronous calls, the kernels' own JIT options. */
    public static PlanOptions defaults() {
        return DEFAULTS;
    }

    public static Builder builder() {
        return new Builder(DEFAULTS);
    }

    public Builder toBuilder() {
        return new Builder(this);
    }

    private static String checkJitFlags(String flags) {
        String normalised = flags.replace(',', ' ').trim();
        if (normalised.isEmpty()) {
            return "";
        }
        String[] words = normalised.split("\\s+");
        if (words.length % 2 != 0) {
            throw new InvalidArgumentException("mmaJitFlags", "'" + flags + "'", "must be NAME VALUE pairs, e.g."
                    + " CU_JIT_MAX_REGISTERS 128");
        }
        for (int i = 0; i < words.length; i += 2) {
            if (!JIT_FLAG_NAMES.contains(words[i])) {
                throw new InvalidArgumentException("mmaJitFlags", "'" + flags + "'", words[i]
                        + " is not a CUDA JIT option TornadoVM accepts: " + String.join(", ", JIT_FLAG_NAMES));
            }
            try {
                Long.parseLong(words[i + 1]);
            } catch (NumberFormatException e) {
                throw new InvalidArgumentException("mmaJitFlags", "'" + flags + "'", "the value of " + words[i]
                        + " must be an integer, not " + words[i + 1]);
            }
        }
        return String.join(" ", words);
    }

    /** Options one at a time; {@link #build()} validates. */
    public static final class Builder {
        private int cudaDevice;
        private boolean profile;
        private boolean cudaGraph;
        private int lanes;
        private String mmaJitFlags;

        private Builder(PlanOptions from) {
            cudaDevice = from.cudaDevice;
            profile = from.profile;
            cudaGraph = from.cudaGraph;
            lanes = from.lanes;
            mmaJitFlags = from.mmaJitFlags;
        }

        public Builder cudaDevice(int ordinal) {
            this.cudaDevice = ordinal;
            return this;
        }

        public Builder profile(boolean profile) {
            this.profile = profile;
            return this;
        }

        public Builder cudaGraph(boolean cudaGraph) {
            this.cudaGraph = cudaGraph;
            return this;
        }

        public Builder lanes(int lanes) {
            this.lanes = lanes;
            return this;
        }

        public Builder mmaJitFlags(String flags) {
            this.mmaJitFlags = flags;
            return this;
        }

        public PlanOptions build() {
            return new PlanOptions(cudaDevice, profile, cudaGraph, lanes, mmaJitFlags);
        }
    }
}
