package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.List;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The library task's dispatch on the real driver binding ({@link LibraryCuda#driver()}), run over the fake
 * libcuda.so.1 of tools/fakecuda (AttentionLibraryFakeDriverTest): a paged decode with lse prepared and dispatched
 * once, then {@value #STEPS} more dispatches on the same pointers with TornadoVM's context current, then
 * {@value #STEPS} with another context current; after each phase one line of the fake driver's counters' increase:
 * {@code [probe] PHASE cuLaunchKernel N cuCtxGetCurrent N cuCtxPushCurrent N cuCtxPopCurrent N cuMemAlloc N}, and
 * whether the thread's current context is the one it had.
 */
public final class LibraryDispatchProbe {
    static final int STEPS = 10;
    static final List<String> COUNTERS = List.of("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent",
            "cuMemAlloc");

    private LibraryDispatchProbe() {
    }

    public static void main(String[] args) throws Throwable {
        MethodHandle count = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup("libcuda.so.1", Arena.global())
                .find("fakecuda_count").orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS));
        CudaDriver cuda = CudaDriver.load();
        cuda.init();
        long context = cuda.primaryContext(cuda.device(0));
        cuda.setCurrent(context);   // as TornadoVM's CUDA backend does before its own calls
        long stream = cuda.createStream();
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(4).kvHeads(1).headDim(64).maxQueryLength(1)
                .maxLength(64).build();
        KvCacheSpec cache = KvCacheSpec.paged(1, 1, 64, 64, 16);
        int kv = (int) cache.elements();
        LibraryTaskDescriptor d = CacheLibraryTasks.create(spec, cache).decodeWithLse(new HalfFloatArray(256),
                new HalfFloatArray(kv), new HalfFloatArray(kv), new IntArray(4), new IntArray(4), new HalfFloatArray(256),
                new FloatArray(4));
        long[] pointers = {cuda.malloc(512), cuda.malloc(2L * kv), cuda.malloc(2L * kv), cuda.malloc(16), cuda.malloc(16),
                cuda.malloc(512), cuda.malloc(16)};
        try (AttentionLibraryContext library = new AttentionLibraryContext(LibraryCuda.driver(), context, stream)) {
            long[] before = counts(count);
            library.prepare(d.getFunctionName(), d.getParameters(), d.getTuning());
            library.dispatch(d.getFunctionName(), d.getParameters(), pointers, d.getTuning());
            print("first", before, counts(count), cuda, context);
            before = counts(count);
            for (int i = 0; i < STEPS; i++) {
                library.dispatch(d.getFunctionName(), d.getParameters(), pointers.clone(), d.getTuning());
            }
            print("steady", before, counts(count), cuda, context);
            long other = cuda.primaryContext(cuda.device(0));   // the fake's handles are distinct
            cuda.setCurrent(other);
            before = counts(count);
            for (int i = 0; i < STEPS; i++) {
                library.dispatch(d.getFunctionName(), d.getParameters(), pointers, d.getTuning());
            }
            print("not-current", before, counts(count), cuda, other);
        }
    }

    private static long[] counts(MethodHandle count) throws Throwable {
        long[] c = new long[COUNTERS.size()];
        try (Arena arena = Arena.ofConfined()) {
            for (int i = 0; i < c.length; i++) {
                c[i] = (long) count.invokeExact(arena.allocateFrom(COUNTERS.get(i)));
            }
        }
        return c;
    }

    private static void print(String phase, long[] before, long[] after, CudaDriver cuda, long expectedCurrent) {
        StringBuilder line = new StringBuilder("[probe] " + phase);
        for (int i = 0; i < before.length; i++) {
            line.append(' ').append(COUNTERS.get(i)).append(' ').append(after[i] - before[i]);
        }
        try (Arena arena = Arena.ofConfined()) {
            line.append(" currentUnchanged ").append(cuda.currentContext(arena.allocate(8)) == expectedCurrent);
        }
        System.out.println(line);
    }
}
