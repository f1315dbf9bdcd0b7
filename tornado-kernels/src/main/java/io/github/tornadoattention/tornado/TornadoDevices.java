package io.github.tornadoattention.tornado;

import io.github.tornadoattention.Availability;
import io.github.tornadoattention.BackendUnavailableException;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.TornadoBackend;
import uk.ac.manchester.tornado.api.TornadoRuntime;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;

/**
 * Which TornadoVM device the kernels run on, probed once per JVM. Everything that can go wrong when
 * TornadoVM is missing or cannot start (no argfile, no tornado-api, no NVIDIA driver) is caught here and
 * turned into a reason; nothing is thrown at the caller of {@link #probe}.
 *
 * <p>Only the backends' {@code availability()} and {@code plan()} reach this class, so loading a backend
 * provider through {@link java.util.ServiceLoader} never touches TornadoVM. The probe changes no global setting
 * (no system property): whether TornadoVM may fall back to plain Java is the JVM's command line's to say
 * ({@link TornadoBackendSupport#requireNoBailout}).
 */
final class TornadoDevices {
    static final String NOT_INITIALISED =
            "TornadoVM runtime not initialised: run under TornadoVM (bin/tornado-attention with TORNADOVM_HOME set)";

    /** What the probe found: the device to use, or why there is none. */
    record Probe(TornadoDevice device, TornadoVMBackendType backend, String reason) {
        boolean found() {
            return device != null;
        }

        /** E.g. {@code NVIDIA H100 80GB HBM3 (PTX)}. */
        String deviceName() {
            return device.getPhysicalDevice().getDeviceName() + " (" + backendName(backend) + ")";
        }

        Availability availability() {
            return found() ? Availability.available(deviceName()) : Availability.unavailable(reason);
        }

        TornadoDevice require(String backendId) {
            if (!found()) {
                throw new BackendUnavailableException(backendId, reason);
            }
            return device;
        }
    }

    private static volatile Probe anyDevice;
    private static volatile Probe nvidiaDevice;

    private TornadoDevices() {
    }

    /** TornadoVM's default device, whatever its backend (tornado-simt). */
    static Probe anyDevice() {
        Probe p = anyDevice;
        if (p == null) {
            p = probe(false);
            anyDevice = p;
        }
        return p;
    }

    /**
     * A device of one of TornadoVM's two NVIDIA backends, PTX or CUDA (tornado-mma: its tensor-core intrinsics;
     * ptx-tornado: its prebuilt tasks): the default device when it is one, else the first such device.
     */
    static Probe nvidiaDevice() {
        Probe p = nvidiaDevice;
        if (p == null) {
            p = probe(true);
            nvidiaDevice = p;
        }
        return p;
    }

    private static Probe probe(boolean needNvidia) {
        // The argfile sets these; without them TornadoRuntimeProvider's static initialiser fails.
        if (System.getProperty("tornado.load.runtime.implementation") == null) {
            return new Probe(null, null, NOT_INITIALISED);
        }
        try {
            return find(needNvidia);
        } catch (LinkageError | RuntimeException e) {
            return new Probe(null, null, describe(e));
        }
    }

    private static Probe find(boolean needNvidia) {
        TornadoRuntime runtime = TornadoRuntimeProvider.getTornadoRuntime();
        int backends = runtime.getNumBackends();
        if (backends == 0) {
            return new Probe(null, null, "TornadoVM found no backend (no OpenCL, PTX or SPIR-V device)");
        }
        TornadoDevice defaultDevice = runtime.getDefaultDevice();
        if (!needNvidia || (defaultDevice != null && BackendTypes.isNvidia(defaultDevice.getTornadoVMBackend()))) {
            if (defaultDevice == null) {
                return new Probe(null, null, "TornadoVM found no device");
            }
            return new Probe(defaultDevice, defaultDevice.getTornadoVMBackend(), null);
        }
        List<String> others = new ArrayList<>();
        for (int i = 0; i < backends; i++) {
            TornadoBackend backend = runtime.getBackend(i);
            TornadoVMBackendType type = backend.getBackendType();
            if (BackendTypes.isNvidia(type) && backend.getNumDevices() > 0) {
                return new Probe(backend.getDefaultDevice(), type, null);
            }
            others.add(backendName(type));
        }
        return new Probe(null, null, "tornado-mma and ptx-tornado need TornadoVM's PTX or CUDA backend (NVIDIA GPU,"
                + " compute capability >= 8.0); this TornadoVM has: " + String.join(", ", others));
    }

    /** One line for a failure to start TornadoVM, naming the likely cause. */
    static String describe(Throwable e) {
        Throwable root = e;
        for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (String.valueOf(c.getMessage()).contains("libcuda")) {
                return "TornadoVM's NVIDIA backend cannot load the CUDA driver (libcuda.so.1): no NVIDIA driver on this machine";
            }
            root = c;
        }
        if (root instanceof NoClassDefFoundError || root instanceof ClassNotFoundException) {
            return NOT_INITIALISED + " (missing class " + root.getMessage() + ")";
        }
        String message = root.getMessage() == null ? "" : ": " + root.getMessage().lines().findFirst().orElse("");
        return "TornadoVM could not start (" + root.getClass().getSimpleName() + message + ")";
    }

    static String backendName(TornadoVMBackendType type) {
        // By name: TornadoVM 6.0 and later have no PTX and SPIRV constants.
        return switch (type.name()) {
            case "OPENCL" -> "OpenCL";
            case "PTX" -> "PTX";
            case "SPIRV" -> "SPIR-V";
            case "METAL" -> "Metal";
            case "CUDA" -> "CUDA";
            default -> type.name();
        };
    }
}
