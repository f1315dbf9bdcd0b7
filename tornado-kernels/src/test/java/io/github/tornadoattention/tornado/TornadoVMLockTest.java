package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.TornadoDeviceContext;
import uk.ac.manchester.tornado.api.common.TornadoDevice;

/**
 * {@link TornadoVMLock} without TornadoVM: builds, first executions and closes run alone, steady-state executions
 * together, a close clears the device's reset flag even when it fails, and taking it exclusively inside a shared
 * section (a deadlock) is refused with a clear error.
 */
class TornadoVMLockTest {

    @Test
    void steadyStateExecutionsRunTogether() throws Exception {
        CyclicBarrier both = new CyclicBarrier(2);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Runnable execution = () -> TornadoVMLock.execution(false, () -> {
            try {
                both.await(10, TimeUnit.SECONDS);   // times out unless the other thread is inside too
            } catch (Exception e) {
                failure.set(e);
            }
            return null;
        });
        Thread a = Thread.ofPlatform().start(execution);
        Thread b = Thread.ofPlatform().start(execution);
        a.join();
        b.join();
        assertEquals(null, failure.get(), "two shared executions were inside at once");
    }

    @Test
    void aBuildWaitsForExecutionsAndExecutionsWaitForABuild() throws Exception {
        CountDownLatch executing = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        AtomicBoolean executionDone = new AtomicBoolean();
        Thread execution = Thread.ofPlatform().start(() -> TornadoVMLock.shared(() -> {
            executing.countDown();
            await(release);
            executionDone.set(true);
            return null;
        }));
        executing.await();
        AtomicBoolean sawExecutionDone = new AtomicBoolean();
        Thread build = Thread.ofPlatform().start(() -> TornadoVMLock.exclusive(() -> sawExecutionDone.set(executionDone.get())));
        build.join(300);
        assertTrue(build.isAlive(), "the build waits while an execution runs");
        release.countDown();
        build.join();
        execution.join();
        assertTrue(sawExecutionDone.get(), "the build ran after the execution");

        CountDownLatch building = new CountDownLatch(1);
        CountDownLatch finishBuild = new CountDownLatch(1);
        AtomicBoolean built = new AtomicBoolean();
        Thread first = Thread.ofPlatform().start(() -> TornadoVMLock.execution(true, () -> {
            building.countDown();
            await(finishBuild);
            built.set(true);
            return null;
        }));
        building.await();
        AtomicBoolean sawBuilt = new AtomicBoolean();
        Thread later = Thread.ofPlatform().start(() -> TornadoVMLock.shared(() -> {
            sawBuilt.set(built.get());
            return null;
        }));
        later.join(300);
        assertTrue(later.isAlive(), "an execution waits while a first execution runs");
        finishBuild.countDown();
        first.join();
        later.join();
        assertTrue(sawBuilt.get());
    }

    @Test
    void nestingThatCannotDeadlockIsAllowedAndTheOtherIsRefused() {
        assertEquals(3, TornadoVMLock.exclusive(() -> TornadoVMLock.exclusive(() -> TornadoVMLock.shared(() -> 3))));
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> TornadoVMLock.shared(() -> TornadoVMLock.exclusive(() -> 1)));
        assertTrue(e.getMessage().contains("inside shared"), e.getMessage());
        assertFalse(TornadoVMLock.heldExclusively());
    }

    @Test
    void aCloseRunsAloneAndClearsTheResetFlagEvenWhenItFails() {
        AtomicInteger cleared = new AtomicInteger();
        TornadoDevice device = device(cleared);
        AtomicBoolean alone = new AtomicBoolean();
        TornadoVMLock.close(device, () -> alone.set(TornadoVMLock.heldExclusively()));
        assertTrue(alone.get());
        assertEquals(1, cleared.get());
        TornadoVMLock.close(device, () -> {
            throw new IllegalStateException("freeing failed");
        });
        assertEquals(2, cleared.get(), "cleared after a failed close too");
    }

    /** A TornadoDevice whose context counts {@code setResetToFalse()} calls (nothing else is called). */
    private static TornadoDevice device(AtomicInteger cleared) {
        TornadoDeviceContext context = (TornadoDeviceContext) Proxy.newProxyInstance(TornadoVMLockTest.class.getClassLoader(),
                new Class<?>[] {TornadoDeviceContext.class}, (proxy, method, args) -> {
                    if (method.getName().equals("setResetToFalse")) {
                        cleared.incrementAndGet();
                        return null;
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
        return (TornadoDevice) Proxy.newProxyInstance(TornadoVMLockTest.class.getClassLoader(),
                new Class<?>[] {TornadoDevice.class}, (proxy, method, args) -> {
                    if (method.getName().equals("getDeviceContext")) {
                        return context;
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
