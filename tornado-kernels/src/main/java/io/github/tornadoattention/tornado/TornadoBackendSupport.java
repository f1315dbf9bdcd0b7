package io.github.tornadoattention.tornado;

import io.github.tornadoattention.Availability;
import io.github.tornadoattention.BackendUnavailableException;
import java.util.function.Supplier;

/**
 * What both TornadoVM backends do before touching TornadoVM: report availability without ever throwing
 * (the jar may be on the class path of a JVM started without TornadoVM, or without tornado-api at all),
 * and refuse to plan when a kernel that fails to compile could silently run as plain Java instead.
 */
final class TornadoBackendSupport {
    static final String BAILOUT_PROPERTY = "tornado.recover.bailout";

    private TornadoBackendSupport() {
    }

    /**
     * {@code probe} touches TornadoVM classes; any failure to load them becomes a reason. A device found in a JVM
     * where TornadoVM may fall back to plain Java ({@link #requireNoBailout}) is reported unavailable, saying so.
     */
    static Availability availability(Supplier<Availability> probe) {
        try {
            Availability found = probe.get();
            String refusal = bailoutRefusal();
            return found.available() && refusal != null ? Availability.unavailable(refusal) : found;
        } catch (LinkageError | RuntimeException e) {
            return Availability.unavailable(describe(e));
        }
    }

    private static String describe(Throwable e) {
        if (e instanceof NoClassDefFoundError) {
            return "TornadoVM runtime not initialised: run under TornadoVM (bin/tornado-attention with TORNADOVM_HOME"
                    + " set); missing class " + e.getMessage();
        }
        return "TornadoVM could not start: " + e;
    }

    /**
     * TornadoVM's default ({@code tornado.recover.bailout=True}) runs a task as sequential Java when its
     * kernel fails to compile: correct but slow, and silent. So the backends plan only in a JVM started with
     * {@code -Dtornado.recover.bailout=False} (bin/tornado-attention, the tests and the benchmarks pass it);
     * nothing here sets it, as TornadoVM reads it once, when its runtime starts.
     */
    static void requireNoBailout(String backendId) {
        String refusal = bailoutRefusal();
        if (refusal != null) {
            throw new BackendUnavailableException(backendId, refusal);
        }
    }

    /** Why this JVM's bailout setting forbids planning, or null when it is {@code False}. */
    private static String bailoutRefusal() {
        String value = System.getProperty(BAILOUT_PROPERTY);
        if (value != null && value.trim().equalsIgnoreCase("false")) {
            return null;
        }
        return (value == null ? "TornadoVM's default " + BAILOUT_PROPERTY + "=True" : "-D" + BAILOUT_PROPERTY + "="
                + value) + " would let a kernel that fails to compile run as plain Java; run with -D" + BAILOUT_PROPERTY
                + "=False (bin/tornado-attention does)";
    }

    /**
     * The inference device of backend {@code backendId} on the device {@code probe} found
     * ({@link io.github.tornadoattention.tornado.inference.TornadoAttentionDevice}); {@code options.profile()}
     * runs its task graphs with TornadoVM's profiler, {@code options.cudaGraph()} as CUDA graphs, {@code options.lanes()}
     * host threads run cache executions concurrently.
     */
    static io.github.tornadoattention.AttentionDevice device(String backendId, java.util.function.Supplier<TornadoDevices.Probe> probe,
                                                             io.github.tornadoattention.PlanOptions options) {
        io.github.tornadoattention.InvalidArgumentException.requireNonNull("options", options);
        requireNoBailout(backendId);
        return io.github.tornadoattention.tornado.inference.TornadoAttentionDevice.of(backendId,
                probe.get().require(backendId), options.profile(), options.cudaGraph(), options.lanes());
    }
}
