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

    /** {@code probe} touches TornadoVM classes; any failure to load them becomes a reason. */
    static Availability availability(Supplier<Availability> probe) {
        try {
            return probe.get();
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
     * kernel fails to compile: correct but slow, and silent. The probe sets it to False unless the user
     * chose; a user who chose True gets an error here instead of a silent fallback.
     */
    static void requireNoBailout(String backendId) {
        if ("true".equalsIgnoreCase(System.getProperty(BAILOUT_PROPERTY, "false"))) {
            throw new BackendUnavailableException(backendId, "-D" + BAILOUT_PROPERTY + "=True would let a kernel that"
                    + " fails to compile run as plain Java; run with -D" + BAILOUT_PROPERTY + "=False");
        }
    }
}
