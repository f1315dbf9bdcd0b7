package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The library task's dispatch on the real driver binding under the fake CUDA driver (a JVM of its own, as the fake
 * libcuda.so.1 must not stand in for the driver of the other tests): {@code library.LibraryDispatchProbe} counts
 * the driver calls. A steady-state dispatch (same pointers, TornadoVM's context current) is one cuCtxGetCurrent and
 * the two launches of a decode, nothing allocated on the device; where another context is current it is pushed and
 * popped around them and left current.
 */
class AttentionLibraryFakeDriverTest {

    @Test
    void aSteadyStateDispatchIsOneContextQueryAndTheLaunches() throws IOException, InterruptedException {
        String log = FakeCuda.runProbe(io.github.tornadoattention.tornado.library.LibraryDispatchProbe.class,
                "library-dispatch", Map.of());
        assertTrue(log.contains("[probe] first cuLaunchKernel 2 cuCtxGetCurrent 1 cuCtxPushCurrent 1 cuCtxPopCurrent 1 "
                + "cuMemAlloc 3 currentUnchanged true"), log);   // prepare pushes once and makes params + workspace
        assertTrue(log.contains("[probe] steady cuLaunchKernel 20 cuCtxGetCurrent 10 cuCtxPushCurrent 0 cuCtxPopCurrent 0 "
                + "cuMemAlloc 0 currentUnchanged true"), log);
        assertTrue(log.contains("[probe] not-current cuLaunchKernel 20 cuCtxGetCurrent 10 cuCtxPushCurrent 10 "
                + "cuCtxPopCurrent 10 cuMemAlloc 0 currentUnchanged true"), log);
    }
}
