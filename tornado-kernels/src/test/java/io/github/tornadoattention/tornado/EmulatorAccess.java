package io.github.tornadoattention.tornado;

import uk.ac.manchester.tornado.api.KernelContext;

/** {@link KernelEmulator} for tests of other packages (the engine's cache kernels). */
public final class EmulatorAccess {
    private EmulatorAccess() {
    }

    /** A kernel body taking the emulated context. */
    public interface Kernel {
        void run(KernelContext kc);
    }

    /** Runs {@code groups} workgroups of {@code threads} threads on the CPU (see {@link KernelEmulator#launch}). */
    public static void launch(int groups, int threads, Kernel kernel) {
        KernelEmulator.launch(groups, threads, kernel::run);
    }

    /** Bytes of local memory one workgroup of the last launch allocated. */
    public static int localBytesOfLastLaunch() {
        return KernelEmulator.localBytesOfLastLaunch();
    }
}
