package io.github.tornadoattention.examples.llama;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.IntFunction;
import uk.ac.manchester.tornado.api.KernelContext;

/**
 * Runs a KernelContext kernel on the CPU: one virtual thread per GPU thread, local arrays shared by a workgroup,
 * {@code localBarrier()} a barrier over it. The part of tornado-kernels' test KernelEmulator these kernels need
 * (no warp intrinsics, no MMA).
 */
final class Emulator {
    interface Kernel {
        void run(KernelContext kc);
    }

    private Emulator() {
    }

    static void launch(int groups, int threads, Kernel kernel) {
        for (int group = 0; group < groups; group++) {
            CyclicBarrier barrier = new CyclicBarrier(threads);
            List<Object> locals = new ArrayList<>();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Thread> running = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Context kc = new Context(barrier, locals, group, groups, t, threads);
                running.add(Thread.ofVirtual().start(() -> {
                    try {
                        kernel.run(kc);
                    } catch (Throwable e) {
                        if (failure.compareAndSet(null, e)) {
                            barrier.reset();
                        }
                    }
                }));
            }
            for (Thread thread : running) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException(e);
                }
            }
            if (failure.get() != null) {
                throw new IllegalStateException("workgroup " + group + " failed", failure.get());
            }
        }
    }

    private static final class Context extends KernelContext {
        private final CyclicBarrier barrier;
        private final List<Object> locals;
        private int allocations;

        Context(CyclicBarrier barrier, List<Object> locals, int group, int groups, int t, int threads) {
            this.barrier = barrier;
            this.locals = locals;
            set("localIdx", t);
            set("groupIdx", group);
            set("globalIdx", group * threads + t);
            set("localGroupSizeX", threads);
            set("globalGroupSizeX", groups * threads);
        }

        private void set(String field, int value) {
            try {
                Field f = KernelContext.class.getField(field);
                f.setAccessible(true);
                f.set(this, value);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot emulate KernelContext." + field, e);
            }
        }

        private Object local(IntFunction<Object> create, int size) {
            synchronized (locals) {
                int index = allocations++;
                while (locals.size() <= index) {
                    locals.add(create.apply(size));
                }
                return locals.get(index);
            }
        }

        @Override
        public float[] allocateFloatLocalArray(int size) {
            return (float[]) local(float[]::new, size);
        }

        @Override
        public int[] allocateIntLocalArray(int size) {
            return (int[]) local(int[]::new, size);
        }

        @Override
        public void localBarrier() {
            try {
                barrier.await();
            } catch (InterruptedException | BrokenBarrierException e) {
                throw new IllegalStateException("barrier broken: another thread failed", e);
            }
        }
    }
}
