package io.github.tornadoattention.tornado.library;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;

/**
 * Device time of the library's dispatches inside an engine's task graphs. While on (or for a call that asks for it:
 * {@code ForwardLibraryTask.timeOnDevice}, which ptx-tornado's profiled plans use), each dispatch records a CUDA event
 * on TornadoVM's stream before its launches and one after them; {@link #drain} waits for them and returns, per
 * function, the dispatches and their device milliseconds. That is the instrument ptx-cuda's kernel times use (CUDA
 * events around the launches). TornadoVM's own profiler times a library task on the host, between two stream markers
 * it waits for (TornadoVM 5.2's CUDA backend has no device timestamps for library calls), so its time also holds the
 * host's dispatch and both waits.
 *
 * <p>Off by default: then a dispatch makes no extra driver call. On, a dispatch costs two cuEventRecord calls and a
 * cuStreamIsCapturing, so it is for measuring, not for serving. Dispatches captured into a CUDA graph are not timed
 * (an event recorded during a capture has no time). The events are the dispatching context's, reused after a drain
 * and destroyed with it; dispatches of a context closed before the drain are dropped.
 */
public final class DispatchTimer {
    private static volatile boolean enabled;
    /** Timed dispatches not drained yet, in dispatch order (guarded by the class). */
    private static final List<Timed> PENDING = new ArrayList<>();

    /** A function's timed dispatches and their device time in all. */
    public record Totals(int dispatches, double millis) {
    }

    /** One timed dispatch: its context, call and the start and end events. */
    record Timed(AttentionLibraryContext context, LibraryCall call, long[] events) {
    }

    private DispatchTimer() {
    }

    /** Turns the timing of later dispatches on or off (every context of the JVM). */
    public static void enable(boolean on) {
        enabled = on;
    }

    public static boolean enabled() {
        return enabled;
    }

    static synchronized void add(Timed timed) {
        PENDING.add(timed);
    }

    /** Drops the context's pending dispatches (it is closing: its events go with it). */
    static synchronized void forget(AttentionLibraryContext context) {
        PENDING.removeIf(t -> t.context() == context);
    }

    /**
     * Waits for every dispatch timed since the last drain and returns their totals by function name, in the order
     * the functions were first dispatched; the events go back to their contexts for reuse.
     */
    public static Map<String, Totals> drain() {
        return drain(t -> true);
    }

    /**
     * The device milliseconds of {@code call}'s dispatches timed since the last drain (timed because the timer is on or
     * the call asks for it: {@link LibraryCall#timeOnDevice}), waited for; NaN when there is none. Other calls'
     * dispatches stay pending.
     */
    static double drainMillis(LibraryCall call) {
        Totals totals = drain(t -> t.call() == call).get(call.function());
        return totals == null ? Double.NaN : totals.millis();
    }

    /** Takes the pending dispatches {@code which} accepts, waits for them and totals them by function name. */
    private static Map<String, Totals> drain(Predicate<Timed> which) {
        List<Timed> taken = new ArrayList<>();
        synchronized (DispatchTimer.class) {
            PENDING.removeIf(t -> which.test(t) && taken.add(t));
        }
        Map<String, Totals> totals = new LinkedHashMap<>();
        for (Timed t : taken) {
            double ms = t.context().elapsedAndRecycle(t.events());
            if (!Double.isNaN(ms)) {
                totals.merge(t.call().function(), new Totals(1, ms),
                        (a, b) -> new Totals(a.dispatches() + b.dispatches(), a.millis() + b.millis()));
            }
        }
        return totals;
    }
}
