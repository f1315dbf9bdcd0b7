package io.github.tornadoattention.cli;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DirectMemory;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.InvalidArgumentException;
import java.lang.management.ManagementFactory;
import java.util.Locale;

/**
 * The command line's limits, and the estimates checked against them before any work starts: the
 * one place they live. A command whose estimate is over a limit stops with one line (exit 2) unless
 * the user passes {@code --force}.
 */
public final class Limits {
    /** Most timed or warm-up calls: each timed call keeps a sample, and the interval is bootstrapped. */
    static final int MAX_CALLS = 1_000_000;
    /** Longest estimated CPU time a command may take without {@code --force}. */
    static final double CPU_SECONDS_LIMIT = 600;
    /**
     * The speed assumed for the CPU reference (and the online-softmax oracle), per core. They measure
     * 1-2 GFLOP/s per core; assuming faster makes the estimate a lower bound, so a run that is refused
     * would really take longer than the limit.
     */
    static final double CPU_FLOPS_PER_CORE = 3e9;

    /**
     * How much slower per FLOP the CPU device's attention over a KV cache is than the dense reference:
     * it converts every K and V element from fp16 through the cache's row lookup, once per query head.
     * It measures about 0.5 GFLOP/s per core (decode, D=64, after JIT warm-up); counting its FLOPs this
     * many times keeps the estimate a lower bound.
     */
    static final double CACHED_REFERENCE_SLOWDOWN = 6;

    private Limits() {
    }

    /**
     * The largest softmax scale accepted at head dim {@code headDim}: every score scale·q·k of fp16
     * inputs (|q·k| <= headDim·65504²) then stays within half the fp32 range, so scores, their
     * exp2 form (times log2 e) and the logsumexp are finite in every backend.
     */
    public static float maxScale(int headDim) {
        return io.github.tornadoattention.AttentionShape.maxScale(headDim);
    }

    /** {@code --scale} as typed: a number in (0, maxScale(headDim)]; errors quote the text. */
    static Float scale(String typed, int headDim) {
        if (typed == null) {
            return null;
        }
        int d = Math.max(headDim, 1); // a bad --dim is reported by the shape
        String allowed = "must be a number > 0 and at most " + maxScale(d) + " at --dim " + d
                + " (so every score of fp16 inputs stays finite in fp32)";
        float value;
        try {
            value = Float.parseFloat(typed.trim());
        } catch (NumberFormatException e) {
            throw new InvalidArgumentException("--scale", typed, allowed);
        }
        if (!(value > 0f && value <= maxScale(d))) { // NaN fails too
            throw new InvalidArgumentException("--scale", typed, allowed);
        }
        return value;
    }

    /** A count of calls ({@code --warmup}, {@code --iters}) in [min, MAX_CALLS]. */
    static int calls(String option, int value, int min) {
        if (value < min || value > MAX_CALLS) {
            throw new InvalidArgumentException(option, value, "must be in " + min + ".." + MAX_CALLS);
        }
        return value;
    }

    /**
     * A command's estimated needs: CPU reference work, peak Java heap, off-heap (HalfTensor) memory, and the JVM's
     * direct memory its KV caches take on the device ({@link AttentionDevice#directBytes(KvCacheSpec)}: TornadoVM
     * keeps each cache on the host too) with the number of caches, for the error.
     */
    record Work(double cpuFlops, long heapBytes, long offHeapBytes, long directBytes, int caches) {
        static final Work NONE = new Work(0, 0, 0);

        Work(double cpuFlops, long heapBytes, long offHeapBytes) {
            this(cpuFlops, heapBytes, offHeapBytes, 0, 0);
        }

        /** One shape: its inputs and output as HalfTensors and {@code referencePasses} runs of a CPU reference. */
        static Work of(AttentionShape shape, long referencePasses) {
            long q = shape.queryElements();
            long kv = shape.kvElements();
            long lse = shape.logSumExpElements();
            long offHeap = 2 * (2 * q + 2 * kv); // q, k, v, o in fp16
            long heap;
            if (referencePasses == 0) {
                heap = 4 * Math.max(q, kv) + 4 * lse; // the random values before they become fp16
            } else {
                // Inputs as float[], O as double[] and float[], lse, and per thread a score row and
                // (online softmax) a head's accumulators.
                long perThread = 8L * (shape.kvLength() + (long) shape.queryLength() * shape.headDim());
                heap = 4 * (q + 2 * kv) + 12 * q + 12 * lse + cores() * perThread;
            }
            return new Work(shape.flops() * referencePasses, heap, offHeap);
        }

        /**
         * {@code decode}: {@code tokens} steps (warm-up, timed, device-timed and checked) over {@code layers}
         * caches prefilled to {@code lengths} and growing one token per step, on the CPU device when
         * {@code onCpu} (attention by the CPU reference, caches in host memory); {@code checkedSteps} of
         * them also run an oracle on the CPU (layer 0). Each cache takes {@code cacheDirectBytes} of the JVM's
         * direct memory ({@link AttentionDevice#directBytes(KvCacheSpec)}).
         */
        static Work decode(int[] lengths, int heads, int kvHeads, int headDim, int layers, int capacity, int pageSize,
                           long tokens, int checkedSteps, boolean onCpu, long cacheDirectBytes) {
            double keysSeen = 0; // sum over steps and slots of the keys one query head attends to
            double checkedKeys = 0;
            int longest = 0;
            for (int length : lengths) {
                keysSeen += tokens * (double) length + tokens * (tokens + 1.0) / 2;
                checkedKeys += checkedSteps * ((double) length + tokens);
                longest = Math.max(longest, length);
            }
            double perKey = 4.0 * heads * headDim * CACHED_REFERENCE_SLOWDOWN; // q.k and p.v, per query head
            double flops = perKey * (checkedKeys + (onCpu ? layers * keysSeen : 0));
            long slots = lengths.length;
            long rows = pageSize == 0 ? capacity : ((long) capacity + pageSize - 1) / pageSize * pageSize;
            long cacheBytes = 2L * 2 * slots * kvHeads * rows * headDim; // K and V, fp16, per layer
            long stepTensors = 4 * 2 * (2 * slots * kvHeads + slots * heads) * headDim + 2 * slots * heads * headDim;
            long pool = 2L * Math.min(Math.max(longest, 1), 4096) * kvHeads * headDim;
            long offHeap = onCpu ? layers * cacheBytes + 2 * pool + stepTensors : 0;
            // The random pool and step inputs as floats; per thread, the oracle's K and V of one head as
            // floats and its scores; a check's per-slot K and V.
            long perThread = 4L * 2 * capacity * headDim + 8L * capacity;
            long heap = 4 * (2 * pool + stepTensors) + cores() * perThread
                    + (checkedSteps > 0 ? 4L * 2 * kvHeads * capacity * headDim : 0);
            return new Work(flops, heap, offHeap, layers * cacheDirectBytes, layers);
        }

        /**
         * {@code prefill}: {@code calls} varlen prefills of causal prompts {@code lengths} into a cache on
         * the CPU device when {@code onCpu}; {@code check} adds one pass of the CPU reference.
         */
        static Work prefill(int[] lengths, int heads, int kvHeads, int headDim, int pageSize, long calls, boolean check,
                            boolean onCpu) {
            double pairs = 0; // causal (query, key) pairs per head
            long total = 0;
            int longest = 1;
            for (int n : lengths) {
                pairs += n * (n + 1.0) / 2;
                total += n;
                longest = Math.max(longest, n);
            }
            double perPass = 4.0 * heads * headDim * pairs * CACHED_REFERENCE_SLOWDOWN;
            double flops = perPass * ((onCpu ? calls : 0) + (check ? 1 : 0));
            long rows = pageSize == 0 ? longest : ((long) longest + pageSize - 1) / pageSize * pageSize;
            long slots = lengths.length;
            long packed = Math.max(1, total);
            long offHeap = onCpu ? 2L * 2 * slots * kvHeads * rows * headDim + 2L * 2 * packed * (heads + kvHeads) * headDim : 0;
            // q, the prompts' K and V as floats, per token and head in the check's model, O as doubles.
            long heap = 4 * packed * heads * headDim + 2 * packed * kvHeads * (4L * headDim + 16) + 8 * packed * heads * headDim
                    + cores() * (4L * 2 * longest * headDim + 8L * longest);
            return new Work(flops, heap, offHeap);
        }

        /** Run one after the other: the work adds up, memory is the larger peak. */
        Work then(Work next) {
            return new Work(cpuFlops + next.cpuFlops, Math.max(heapBytes, next.heapBytes),
                    Math.max(offHeapBytes, next.offHeapBytes), Math.max(directBytes, next.directBytes),
                    directBytes >= next.directBytes ? caches : next.caches);
        }

        /** The CPU work {@code factor} times over (memory is reused). */
        Work times(double factor) {
            return new Work(cpuFlops * factor, heapBytes, offHeapBytes, directBytes, caches);
        }

        double cpuSeconds() {
            return cpuFlops / (CPU_FLOPS_PER_CORE * cores());
        }

        /**
         * Throws {@link Exceeded} naming {@code what} (the options as typed) if the work is over a limit,
         * unless {@code force}. The JVM's direct-memory limit holds even then: the caches would be refused
         * when made.
         */
        void check(String what, boolean force) {
            long direct = DirectMemory.available();
            if (directBytes > direct) {
                throw new Exceeded(what + ": its " + caches + " KV cache(s) need " + DirectMemory.bytes(directBytes)
                        + " of the JVM's direct memory (a TornadoVM device keeps each cache on the host as well as on"
                        + " the GPU), more than the " + DirectMemory.bytes(direct) + " it can still reserve (limit "
                        + DirectMemory.bytes(DirectMemory.limit()) + "); raise the limit with JAVA_OPTS=-XX:MaxDirectMemorySize="
                        + DirectMemory.suggestedLimit(DirectMemory.used() + directBytes)
                        + " or more, if the machine has the memory");
            }
            if (force) {
                return;
            }
            long maxHeap = Runtime.getRuntime().maxMemory();
            long physical = physicalMemory();
            String problem = null;
            if (heapBytes > maxHeap) {
                problem = "needs about " + bytes(heapBytes) + " of Java heap for the CPU reference, over the JVM's"
                        + " maximum of " + bytes(maxHeap) + " (raise it with JAVA_OPTS=-Xmx...)";
            } else if (offHeapBytes > physical) {
                problem = "needs about " + bytes(offHeapBytes) + " of off-heap memory for its tensors, over the "
                        + bytes(physical) + " of memory of this machine";
            } else if (cpuSeconds() > CPU_SECONDS_LIMIT) {
                problem = String.format(Locale.ROOT, "needs about %.3g FLOPs of CPU reference work, about %s at an"
                                + " assumed %.3g GFLOP/s (%.3g per core x %d cores), over the %s limit",
                        cpuFlops, duration(cpuSeconds()), CPU_FLOPS_PER_CORE * cores() / 1e9,
                        CPU_FLOPS_PER_CORE / 1e9, cores(), duration(CPU_SECONDS_LIMIT));
            }
            if (problem != null) {
                throw new Exceeded(what + ": " + problem + "; pass --force to run anyway");
            }
        }
    }

    /** An estimate over a limit: one line for the user (exit 2). */
    static final class Exceeded extends RuntimeException {
        Exceeded(String message) {
            super(message);
        }
    }

    static int cores() {
        return Runtime.getRuntime().availableProcessors();
    }

    private static long physicalMemory() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getTotalMemorySize();
    }

    static String bytes(long bytes) {
        return String.format(Locale.ROOT, "%.3g GiB (%d bytes)", bytes / (double) (1L << 30), bytes);
    }

    static String duration(double seconds) {
        if (seconds < 120) {
            return String.format(Locale.ROOT, "%.3g s", seconds);
        }
        if (seconds < 2 * 3600) {
            return String.format(Locale.ROOT, "%.3g min", seconds / 60);
        }
        if (seconds < 2 * 86400) {
            return String.format(Locale.ROOT, "%.3g h", seconds / 3600);
        }
        if (seconds < 2 * 365 * 86400.0) {
            return String.format(Locale.ROOT, "%.3g days", seconds / 86400);
        }
        return String.format(Locale.ROOT, "%.3g years", seconds / (365 * 86400.0));
    }
}
