package io.github.tornadoattention.tornado.library;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.ServiceLoader;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.exceptions.TornadoRuntimeException;
import uk.ac.manchester.tornado.runtime.common.TornadoXPUDevice;
import uk.ac.manchester.tornado.runtime.library.LibraryRegistry;
import uk.ac.manchester.tornado.runtime.library.spi.LibraryInvocation;
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

    @Test
    void providerHandsTheDescriptorsCallToPrepareAndTheInvocationsToDispatch() {
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(4).kvHeads(1).headDim(64).maxQueryLength(1)
                .maxLength(64).build();
        KvCacheSpec cache = KvCacheSpec.paged(1, 1, 64, 64, 16);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        HalfFloatArray q = new HalfFloatArray(4 * 64), o = new HalfFloatArray(4 * 64);
        HalfFloatArray k = new HalfFloatArray((int) cache.elements()), v = new HalfFloatArray((int) cache.elements());
        LibraryTaskDescriptor d = att.decodeWithLse(q, k, v, new IntArray(4), new IntArray(4), o, new FloatArray(4));
        AttentionLibraryTest.FakeCuda cuda = new AttentionLibraryTest.FakeCuda(90);
        AttentionLibrary provider = new AttentionLibrary();
        AttentionLibrary.Context context = new AttentionLibrary.Context(new AttentionLibraryContext(cuda, 0xC000, 0x5000));
        provider.prepare(d, context);
        assertEquals(1, context.state().preparedCalls());
        cuda.calls.clear();
        long[] pointers = {0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 0x700};
        boolean[] reference = {true, true, true, true, true, true, true};
        provider.dispatch(d.getFunctionName(), new LibraryInvocation(d.getParameters(), pointers, reference, device(true), 1,
                context, d.getTuning()));
        assertEquals(List.of("push c000",
                "launch flash_cache_decode_split_paged_d64 grid 1x1x1 block 32 stream 5000 args [256, 512, 768, 1001, 1002, 1000, 1024, 1280, 256]",
                "launch flash_cache_decode_combine_d64 grid 1x1x1 block 128 stream 5000 args [1001, 1002, 1536, 1792, 1000, 1]",
                "pop"), cuda.calls);
        provider.destroyContext(context);
        assertTrue(cuda.calls.getLast().equals("pop") && cuda.calls.contains("free 1000"), cuda.calls.toString());
    }
}
