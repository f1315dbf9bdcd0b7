package io.github.tornadoattention.tornado.library;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.util.ServiceLoader;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.exceptions.TornadoRuntimeException;
import uk.ac.manchester.tornado.runtime.common.TornadoXPUDevice;
import uk.ac.manchester.tornado.runtime.library.LibraryRegistry;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoLibraryProvider;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoNativeStreamSupport;

/**
 * The provider as TornadoVM's runtime sees it, with no GPU: the services entry makes
 * {@code ServiceLoader} (as {@code LibraryRegistry} calls it) find {@link AttentionLibrary}, and
 * {@code LibraryRegistry.findProvider} returns it for a device that exposes its CUDA stream (what the
 * CUDA backend's {@code CUDATornadoDevice} implements) and refuses it, by name, for one that does not
 * (the PTX, OpenCL and SPIR-V devices).
 */
class AttentionLibraryRegistryTest {

    /** A TornadoXPUDevice stand-in; with {@code cuda}, also a TornadoNativeStreamSupport. */
    static TornadoXPUDevice device(boolean cuda) {
        Class<?>[] types = cuda ? new Class<?>[] {TornadoXPUDevice.class, TornadoNativeStreamSupport.class}
                : new Class<?>[] {TornadoXPUDevice.class};
        return (TornadoXPUDevice) Proxy.newProxyInstance(AttentionLibraryRegistryTest.class.getClassLoader(), types,
                (proxy, method, args) -> switch (method.getName()) {
                    case "toString" -> cuda ? "stand-in CUDA-backend device" : "stand-in PTX-backend device";
                    case "hashCode" -> System.identityHashCode(proxy);
                    case "equals" -> proxy == args[0];
                    case "getNativeStream" -> 0x5000L;
                    case "getNativeContext" -> 0xC000L;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
    }

    @Test
    void serviceLoaderFindsTheProviderWhereTheRegistryLooks() {
        boolean found = false;
        for (TornadoLibraryProvider p : ServiceLoader.load(TornadoLibraryProvider.class, LibraryRegistry.class.getClassLoader())) {
            found |= p instanceof AttentionLibrary;
        }
        assertTrue(found, "META-INF/services entry for AttentionLibrary not seen by ServiceLoader");
    }

    @Test
    void registryPicksTheProviderForADeviceWithANativeStream() {
        TornadoLibraryProvider p = LibraryRegistry.findProvider(AttentionLibraryTasks.LIBRARY_NAME, device(true));
        assertInstanceOf(AttentionLibrary.class, p);
        assertEquals(AttentionLibraryTasks.LIBRARY_NAME, p.libraryName());
    }

    @Test
    void registryRefusesADeviceWithoutANativeStream() {
        TornadoRuntimeException e = assertThrows(TornadoRuntimeException.class,
                () -> LibraryRegistry.findProvider(AttentionLibraryTasks.LIBRARY_NAME, device(false)));
        assertTrue(e.getMessage().contains("is not supported on device: stand-in PTX-backend device"), e.getMessage());
    }
}
