package io.github.tornadoattention.tornado.library;

import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.runtime.common.TornadoXPUDevice;
import uk.ac.manchester.tornado.runtime.library.spi.LibraryContext;
import uk.ac.manchester.tornado.runtime.library.spi.LibraryInvocation;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoLibraryProvider;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoNativeStreamSupport;

/**
 * tornado-attention as a TornadoVM 5.2.0 library ({@code TornadoLibraryProvider}, found by
 * ServiceLoader): the tasks of {@link CacheLibraryTasks} (decode and varlen prefill over a contiguous or paged
 * cache) and {@link AttentionLibraryTasks#decode} run the ptx-cuda cache kernels on TornadoVM's own device buffers
 * and CUDA stream. Each descriptor carries its checked {@link LibraryCall} as its tuning. Only TornadoVM's CUDA backend exposes its stream
 * ({@code TornadoNativeStreamSupport}); on the PTX, OpenCL and SPIR-V backends the task is refused
 * ("not supported on device"), as cuBLAS's are.
 */
public final class AttentionLibrary implements TornadoLibraryProvider {

    /** The provider's context: our state for one (device, execution plan). */
    record Context(AttentionLibraryContext state) implements LibraryContext {
    }

    @Override
    public String libraryName() {
        return AttentionLibraryTasks.LIBRARY_NAME;
    }

    @Override
    public boolean canHandle(TornadoXPUDevice device) {
        return device instanceof TornadoNativeStreamSupport;
    }

    @Override
    public LibraryContext createContext(TornadoXPUDevice device, long executionPlanId) {
        TornadoNativeStreamSupport cuda = (TornadoNativeStreamSupport) device;
        return new Context(new AttentionLibraryContext(LibraryCuda.driver(), cuda.getNativeContext(executionPlanId),
                cuda.getNativeStream(executionPlanId)));
    }

    @Override
    public void prepare(LibraryTaskDescriptor descriptor, LibraryContext context) {
        ((Context) context).state().prepare(descriptor.getFunctionName(), descriptor.getParameters(), descriptor.getTuning());
    }

    @Override
    public void dispatch(String functionName, LibraryInvocation invocation) {
        AttentionLibraryContext state = ((Context) invocation.getContext()).state();
        int n = invocation.getNumArgs();
        // The context's own argument arrays, filled and used under its lock (dispatch keeps copies, never these).
        synchronized (state) {
            Object[] args = state.scratchArguments(n);
            long[] pointers = state.scratchPointers(n);
            try {
                for (int i = 0; i < n; i++) {
                    args[i] = invocation.getArg(i);
                    pointers[i] = invocation.isReference(i) ? invocation.getDevicePointer(i) : 0;
                }
                state.dispatch(functionName, args, pointers, invocation.getTuning());
            } finally {
                java.util.Arrays.fill(args, null);   // holds no engine array past the call
            }
        }
    }

    @Override
    public void destroyContext(LibraryContext context) {
        ((Context) context).state().close();
    }
}
