package io.github.tornadoattention.cuda;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * The fake CUDA driver of tornado-kernels/tools/fakecuda (one fake H100, host memory as device memory, launches as
 * no-ops), built with gcc into target/fakecuda and bound in this JVM: the ptx-cuda host runs on it without a GPU,
 * and {@link #count} reads its counters (module loads, cuFuncSetAttribute calls).
 */
final class FakeDriver {
    private static Path library;
    private static MethodHandle count;

    private FakeDriver() {
    }

    /** The fake libcuda.so.1, built on first use; null where gcc, cuda.h or the source is missing. */
    static synchronized Path library() throws IOException, InterruptedException {
        if (library != null) {
            return library;
        }
        Path basedir = Path.of(System.getProperty("basedir", ".")).toAbsolutePath();
        Path source = basedir.resolve("../tornado-kernels/tools/fakecuda/fakecuda.c").normalize();
        Path include = Path.of(System.getenv().getOrDefault("CUDA_INCLUDE", "/usr/local/cuda/include"));
        if (!Files.isRegularFile(source) || !Files.isRegularFile(include.resolve("cuda.h"))) {
            return null;
        }
        Path out = basedir.resolve("target/fakecuda/libcuda.so.1");
        Files.createDirectories(out.getParent());
        Process gcc;
        try {
            gcc = new ProcessBuilder("gcc", "-shared", "-fPIC", "-O1", "-I" + include, "-Wl,-soname,libcuda.so.1", "-o",
                    out.toString(), source.toString()).redirectErrorStream(true).start();
        } catch (IOException noGcc) {
            return null;
        }
        String log = new String(gcc.getInputStream().readAllBytes());
        if (!gcc.waitFor(120, TimeUnit.SECONDS) || gcc.exitValue() != 0) {
            throw new IllegalStateException("gcc failed on " + source + ":\n" + log);
        }
        library = out;
        count = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(out, Arena.global()).find("fakecuda_count")
                .orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS));
        return library;
    }

    /** A fake-driver counter: "cuModuleLoadData", "cuFuncSetAttribute", "maxDynamicSharedBytes" (the last value set). */
    static long count(String what) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment name = arena.allocateFrom(what);
            return (long) count.invokeExact(name);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }
}
