package io.github.tornadoattention.tornado;

import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Supplier;
import uk.ac.manchester.tornado.api.common.TornadoDevice;

/**
 * The one JVM-wide lock around what TornadoVM 5.2 cannot run beside anything else: building (and compiling) an
 * execution plan, a plan's first execution, and closing a plan. Steady-state executions of plans that have run once
 * take it shared, so executions of different plans (different caches, lanes, threads) stay concurrent.
 *
 * <p>Why (TornadoVM 5.2.0 source, both NVIDIA backends):
 * <ul>
 *   <li>{@code close()} (and {@code freeDeviceMemory()}) ends in {@code TornadoTaskGraph.free()}, which calls the
 *       device context's {@code reset(planId)} (tornado-runtime {@code TornadoTaskGraph.java:1279}); {@code PTXDeviceContext.reset} and {@code CUDADeviceContext.reset} set
 *       ONE flag per device, {@code wasReset = true}, whichever plan was closed ({@code PTXDeviceContext.java:514},
 *       {@code CUDADeviceContext.java:877}). Every launch of a plan built
 *       {@code withPreCompilation()} checks it ({@code TornadoVMInterpreter.compileTaskFromBytecodeToBinary}, {@code TornadoVMInterpreter.java:1027}:
 *       {@code if (wasReset() && finishedWarmup) throw new TornadoFailureException("reset() was called after
 *       warmup()")}) and only another plan's {@code withPreCompilation()} clears it
 *       ({@code TornadoTaskGraph.java:1180}: {@code setResetToFalse()}). So closing one cache's plan broke
 *       the next execution of every other precompiled plan on the device (another thread's, or the same thread's),
 *       until some plan was built again. {@link #close} clears the flag in the same exclusive section: the reset
 *       concerned the closed plan's id only (its code cache, streams, kernel frame), so the other plans' compiled
 *       code is still valid.</li>
 *   <li>{@code CUDADeviceContext.reset} also unpins every pinned host segment of the context
 *       ({@code getPinnedMemoryRegistry().unpinAll()}), under another plan's copy in flight.</li>
 *   <li>A first execution allocates device buffers and, with {@code withCUDAGraph()}, captures the plan's stream in
 *       {@code CU_STREAM_CAPTURE_MODE_GLOBAL} ({@code PTXStream}, {@code CUDACommandQueue}), in which another thread's
 *       allocation (another plan's build or first execution, a library task's {@code prepare}) invalidates the
 *       capture.</li>
 *   <li>Builds compile through Graal and register the plan with the device context's code caches and stream pools;
 *       two at once is nothing TornadoVM 5.2 promises to survive.</li>
 * </ul>
 * Steady-state executions of different plans use separate streams and buffers (per plan id) and were run from several
 * threads on GPUs (tools/ConcurrentExecuteProbe, the inference device's lanes); two executions of one plan are never
 * concurrent here (a plan's owner serialises its calls).
 *
 * <p>An engine that builds, first-runs or closes its own TornadoVM plans on the device these backends use (e.g. task
 * graphs with our engine or library tasks) while other threads run attention should do so inside {@link #exclusive}
 * and close them with {@link #close}; a close outside it sets the device's flag for everyone.
 *
 * <p>{@link #exclusive} inside {@link #shared} on one thread is refused with an {@link IllegalStateException} (a read
 * lock cannot be upgraded: the thread would wait for itself); the other nestings are fine.
 */
public final class TornadoVMLock {
    private static final ReentrantReadWriteLock LOCK = new ReentrantReadWriteLock();

    private TornadoVMLock() {
    }

    /** Runs {@code work} (a build, a first execution, a close) with nothing else of TornadoVM's running. */
    public static <T> T exclusive(Supplier<T> work) {
        if (LOCK.getReadHoldCount() > 0 && !LOCK.isWriteLockedByCurrentThread()) {
            throw new IllegalStateException("TornadoVMLock.exclusive inside shared on the same thread would wait for "
                    + "itself: a build, first execution or close must not run inside a steady-state execution");
        }
        LOCK.writeLock().lock();
        try {
            return work.get();
        } finally {
            LOCK.writeLock().unlock();
        }
    }

    public static void exclusive(Runnable work) {
        exclusive(() -> {
            work.run();
            return null;
        });
    }

    /** Runs {@code work} (an execution of a plan that has executed before) beside other such executions. */
    public static <T> T shared(Supplier<T> work) {
        LOCK.readLock().lock();
        try {
            return work.get();
        } finally {
            LOCK.readLock().unlock();
        }
    }

    /**
     * Runs one execution of a plan: alone when it is the plan's first ({@code first}: TornadoVM allocates, sends
     * {@code FIRST_EXECUTION} data and captures CUDA graphs then), else shared.
     */
    public static <T> T execution(boolean first, Supplier<T> work) {
        return first ? exclusive(work) : shared(work);
    }

    /**
     * Closes a plan run on {@code device} with {@code close} (e.g. {@code plan::close}, or {@code withAllGraphs()} then
     * {@code close()}) alone, and clears the reset flag the close set on the device (see the class comment), also when
     * the close fails. Failures to free are swallowed: nothing else can be done for a plan that is going away.
     */
    public static void close(TornadoDevice device, PlanCloser close) {
        exclusive(() -> {
            try {
                close.close();
            } catch (Exception e) {
                // Freeing device memory failed; nothing else to do for a plan that is going away.
            } finally {
                device.getDeviceContext().setResetToFalse();
            }
        });
    }

    /** How a plan is closed ({@code plan::close}, or its graphs selected first). */
    @FunctionalInterface
    public interface PlanCloser {
        void close() throws Exception;
    }

    /** Whether this thread holds the lock exclusively (builds assert it). */
    public static boolean heldExclusively() {
        return LOCK.isWriteLockedByCurrentThread();
    }
}
