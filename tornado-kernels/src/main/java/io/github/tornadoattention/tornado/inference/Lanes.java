package io.github.tornadoattention.tornado.inference;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * A device's lanes: host threads that run queued executions (one single-thread executor per lane, so that executions
 * of different caches overlap TornadoVM's synchronous {@code execute()}), the call queued per owner (a cache) and the
 * output copies those calls still owe their callers, in call order. Part of a device's state, used under its lock;
 * it calls nothing but the work and copies it was given.
 */
final class Lanes {
    /** A queued call's output: {@code apply} copies it into the caller's [{@code address}, {@code address + bytes}). */
    private record PendingCopy(Object owner, long address, long bytes, Runnable apply) {
        boolean overlaps(long start, long length) {
            return start < address + bytes && address < start + length;
        }
    }

    /** One single-thread executor per lane; empty without lanes. */
    private final ExecutorService[] executors;
    private int nextLane;
    private final Map<Object, Future<?>> queued = new IdentityHashMap<>();
    private final List<PendingCopy> pendingCopies = new ArrayList<>();

    Lanes(String threadName, int count) {
        this.executors = new ExecutorService[count];
        for (int i = 0; i < count; i++) {
            String thread = threadName + "-lane-" + i;
            this.executors[i] = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, thread);
                t.setDaemon(true);   // devices live as long as the JVM
                return t;
            });
        }
    }

    boolean enabled() {
        return executors.length > 0;
    }

    /** The lane of a new owner: round robin, so an engine's layers spread over the lanes; -1 without lanes. */
    int assign() {
        return executors.length == 0 ? -1 : nextLane++ % executors.length;
    }

    /**
     * Queues {@code work} of {@code owner} (which has nothing queued) on {@code lane}, and its output copy into the
     * caller's [{@code address}, {@code address + bytes}); a pending copy to exactly that range is dropped (this call's
     * output replaces it).
     */
    void submit(Object owner, int lane, Runnable work, long address, long bytes, Runnable copy) {
        queued.put(owner, executors[lane].submit(work));
        pendingCopies.removeIf(c -> c.address == address && c.bytes == bytes);
        pendingCopies.add(new PendingCopy(owner, address, bytes, copy));
    }

    /** Waits for the call {@code owner} has queued, if any; returns its failure (a failed call's output is never copied). */
    RuntimeException await(Object owner) {
        Future<?> f = queued.remove(owner);
        if (f == null) {
            return null;
        }
        RuntimeException failure = outcome(f);
        if (failure != null) {
            pendingCopies.removeIf(c -> c.owner == owner);
        }
        return failure;
    }

    /** Whether a queued call of {@code owner} still has its output to copy (it reads the owner's output array). */
    boolean owesCopy(Object owner) {
        for (PendingCopy c : pendingCopies) {
            if (c.owner == owner) {
                return true;
            }
        }
        return false;
    }

    /** Whether a queued call will write into [address, address + bytes). */
    boolean writesInto(long address, long bytes) {
        for (PendingCopy c : pendingCopies) {
            if (c.overlaps(address, bytes)) {
                return true;
            }
        }
        return false;
    }

    /**
     * Waits for every queued call and copies their outputs into the callers' tensors in call order; returns the first
     * failure of a queued call (after the others have finished), or null.
     */
    RuntimeException drain() {
        RuntimeException failure = null;
        for (Object owner : List.copyOf(queued.keySet())) {
            RuntimeException e = await(owner);
            failure = failure == null ? e : failure;
        }
        List<PendingCopy> copies = new ArrayList<>(pendingCopies);
        pendingCopies.clear();
        for (PendingCopy c : copies) {
            c.apply.run();
        }
        return failure;
    }

    /** The outcome of a queued call: null, or its failure as a runtime exception. */
    private static RuntimeException outcome(Future<?> queued) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    queued.get();
                    return null;
                } catch (InterruptedException e) {
                    interrupted = true;   // the call is running on the GPU: finish waiting, keep the flag
                }
            }
        } catch (ExecutionException e) {
            return e.getCause() instanceof RuntimeException r ? r : new IllegalStateException(e.getCause());
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
