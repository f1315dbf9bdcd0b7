package io.github.tornadoattention.tornado;

import java.util.Arrays;
import java.util.Optional;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;

/**
 * TornadoVM's backend types that not every TornadoVM release has, looked up by name. TornadoVM 5.2's
 * {@link TornadoVMBackendType} has {@code PTX} and {@code SPIRV}; TornadoVM 6.0 removed both backends and their
 * constants. Code that names them only through this class compiles against either API.
 */
public final class BackendTypes {
    /** TornadoVM's PTX backend, where the TornadoVM release has one; empty where it has not. */
    public static final Optional<TornadoVMBackendType> PTX = named("PTX");

    private BackendTypes() {
    }

    /** Whether {@code type} is TornadoVM's PTX backend. */
    public static boolean isPtx(TornadoVMBackendType type) {
        return type != null && type.name().equals("PTX");
    }

    /** Whether {@code type} is one of TornadoVM's NVIDIA backends (CUDA, and PTX where there is one). */
    public static boolean isNvidia(TornadoVMBackendType type) {
        return type == TornadoVMBackendType.CUDA || isPtx(type);
    }

    /** The backend type called {@code name}, if this TornadoVM release has it. */
    static Optional<TornadoVMBackendType> named(String name) {
        return Arrays.stream(TornadoVMBackendType.values()).filter(t -> t.name().equals(name)).findFirst();
    }
}
