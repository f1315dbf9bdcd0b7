package io.github.tornadoattention.tornado.prebuilt;

import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.tornado.BackendTypes;
import io.github.tornadoattention.ptx.PtxEntries;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.AccessorParameters;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.WorkerGrid3D;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Adds a shipped PTX entry to a task graph as a TornadoVM prebuilt task (the one place that does), in the form the
 * device's backend loads: on the PTX backend the entry itself, renamed ({@link PrebuiltPtx}, {@link PtxEntries#adapt});
 * on the CUDA backend CUDA C for NVRTC that runs the same PTX ({@link PrebuiltCuda}). TornadoVM
 * loads a prebuilt task's file when the execution plan compiles, which for a task in an engine's own
 * graph happens whenever the engine decides; so the file (one per kernel name) is
 * written to a directory of this JVM that is removed at exit. TornadoVM 5.2.0 runs a prebuilt task correctly only
 * as the first (and only prebuilt) task of its graph: see tornado-kernels/README.md, "Known problems".
 */
public final class PrebuiltTasks {
    private static Path directory;

    private PrebuiltTasks() {
    }

    /** Whether {@link #add} serves devices of {@code backend}: TornadoVM's PTX and CUDA backends. */
    public static boolean serves(TornadoVMBackendType backend) {
        return BackendTypes.isNvidia(backend);
    }

    /**
     * Adds {@code kernel} as task {@code task} of {@code graph} (named {@code graphName}), for a device of TornadoVM's
     * {@code backend} (PTX or CUDA), over
     * {@code arrayAccessPairs} (each kernel argument after the kernel context, then its {@link Access}),
     * launched as a grid of {@code gridX x gridY x gridZ} blocks of the kernel's threads (TornadoVM's global
     * work is blocks times threads in x); the worker grid goes to {@code scheduler} under
     * {@code graphName + "." + task}. Returns the PTX file TornadoVM will load: a caller that knows when its plan has
     * compiled may delete it then (otherwise it goes when the JVM exits).
     */
    public static Path add(TaskGraph graph, GridScheduler scheduler, TornadoVMBackendType backend, String graphName,
                           String task, KernelManifest.Kernel kernel, int gridX, int gridY, int gridZ,
                           Object... arrayAccessPairs) {
        if (!serves(backend)) {
            throw new IllegalArgumentException("backend " + backend + ": ptx-tornado's prebuilt tasks run on TornadoVM's"
                    + " PTX or CUDA backend");
        }
        int n = arrayAccessPairs.length / 2;
        AccessorParameters accessors = new AccessorParameters(n);
        List<Class<?>> types = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            TornadoNativeArray array = (TornadoNativeArray) arrayAccessPairs[2 * i];
            accessors.set(i, array, (Access) arrayAccessPairs[2 * i + 1]);
            types.add(array.getClass());
        }
        Path file;
        if (backend == TornadoVMBackendType.CUDA) {
            // The CUDA backend looks the kernel up by the entry's own name, in a module of the task's own; the file is
            // still the task's own (a plan deletes its files once compiled).
            file = write(graphName + "." + task + "/" + kernel.entry(), ".cu", () -> PrebuiltCuda.source(KernelManifest.ptx(kernel.module()), kernel.entry()));
        } else {
            String kernelName = PrebuiltPtx.mangledName(graphName, task, kernel.entry(), types);
            file = write(kernelName, ".ptx", () -> PtxEntries.adapt(KernelManifest.ptx(kernel.module()), kernel.entry(), kernelName));
        }
        graph.prebuiltTask(task, kernel.entry(), file.toString(), accessors);
        WorkerGrid3D grid = new WorkerGrid3D(gridX * kernel.threads(), gridY, gridZ);
        grid.setLocalWork(kernel.threads(), 1, 1);
        scheduler.addWorkerGrid(graphName + "." + task, grid);
        return file;
    }

    private static synchronized Path write(String kernelName, String suffix, java.util.function.Supplier<String> text) {
        try {
            if (directory == null) {
                directory = Files.createTempDirectory("tornado-attention-ptx-");
                directory.toFile().deleteOnExit();
            }
            // Mangled names run long (one token per argument): name the file by a digest of the name instead.
            Path file = directory.resolve(digest(kernelName) + suffix);
            if (!Files.exists(file)) {
                Files.writeString(file, text.get());
                file.toFile().deleteOnExit();
            }
            return file;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static String digest(String name) {
        try {
            byte[] hash = java.security.MessageDigest.getInstance("SHA-256").digest(name.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return java.util.HexFormat.of().formatHex(hash, 0, 16);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
