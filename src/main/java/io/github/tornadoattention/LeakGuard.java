package io.github.tornadoattention;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The safety net behind {@code close()}: when a tensor, cache or plan becomes unreachable without
 * being closed, the garbage collector's cleaner runs its release action (freeing host or device
 * memory) and the leak is logged, the first at warn level, later ones at debug. {@code close()}
 * stays the contract: memory is released when the owner closes, not when the collector gets to it.
 *
 * <p>The release action must not refer to its owner (that would keep the owner reachable forever):
 * it holds only what it frees.
 */
public final class LeakGuard {
    private static final Logger LOG = LoggerFactory.getLogger(LeakGuard.class);
    private static final Cleaner CLEANER = Cleaner.create();
    private static final AtomicBoolean REPORTED = new AtomicBoolean();
    private static final AtomicLong FREED = new AtomicLong();

    private final Action action;
    private final Cleaner.Cleanable cleanable;

    private static final class Action implements Runnable {
        private final String what;
        private final Runnable release;
        private volatile boolean closedByOwner;

        Action(String what, Runnable release) {
            this.what = what;
            this.release = release;
        }

        @Override
        public void run() {
            if (!closedByOwner) {
                FREED.incrementAndGet();
                String message = "{} was not closed; the garbage collector released it. Close it (try-with-resources)";
                if (REPORTED.compareAndSet(false, true)) {
                    LOG.warn(message + "; further leaks are logged at debug level", what);
                } else {
                    LOG.debug(message, what);
                }
            }
            release.run();
        }
    }

    private LeakGuard(Object owner, String what, Runnable release) {
        this.action = new Action(what, release);
        this.cleanable = CLEANER.register(owner, action);
    }

    /** Guards {@code owner}: {@code release} (which must not refer to the owner) runs on close or after a leak. */
    public static LeakGuard register(Object owner, String what, Runnable release) {
        return new LeakGuard(owner, what, release);
    }

    /** The owner closes: release now (once), without reporting a leak. */
    public void close() {
        action.closedByOwner = true;
        cleanable.clean();
    }

    /** Resources released by the cleaner because their owners were dropped unclosed (for tests). */
    public static long leaksFreed() {
        return FREED.get();
    }
}
