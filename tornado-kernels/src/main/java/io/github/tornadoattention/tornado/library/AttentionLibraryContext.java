package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.PtxEntries;
import java.util.HashMap;
import java.util.Map;

/**
 * The provider's state for one (TornadoVM device, execution plan): TornadoVM's CUcontext and CUstream
 * (from its CUDA backend's {@code TornadoNativeStreamSupport}), the cache kernels' entries it runs loaded into
 * that context, and per call ({@link LibraryCall#key()}: function, spec, cache) the uploaded params block and
 * the decode's split workspace. Plain types only, so it compiles and is tested without TornadoVM's runtime;
 * {@code AttentionLibrary} adapts it to the {@code TornadoLibraryProvider} SPI.
 *
 * <p>{@link #prepare} (called by TornadoVM before any CUDA graph capture) loads, allocates and uploads;
 * {@link #dispatch} only enqueues the call's launches (decode: split pass + combine; prefill: one) on TornadoVM's
 * stream, with the same grids and arguments every step, so it may be captured.
 */
public final class AttentionLibraryContext implements AutoCloseable {
    /** mma.sync m16n8k16, ldmatrix and cp.async: sm_80 or newer, as the ptx-cuda host requires. */
    static final int MIN_COMPUTE_CAPABILITY = 80;

    private final LibraryCuda cuda;
    private final long context;
    private final long stream;
    /** One module per entry used (only that entry is JIT-compiled: {@link PtxEntries#module}), and its function. */
    private final Map<String, Long> modules = new HashMap<>();
    private final Map<String, Long> functions = new HashMap<>();
    private boolean capabilityChecked;
    private final Map<LibraryCall.Key, LibraryCall.Workspace> prepared = new HashMap<>();
    private boolean closed;

    public AttentionLibraryContext(LibraryCuda cuda, long context, long stream) {
        if (context == 0) {
            throw new InvalidArgumentException("context", 0, "must be TornadoVM's CUcontext (its CUDA backend gave none)");
        }
        if (stream == 0) {
            throw new InvalidArgumentException("stream", 0, "must be TornadoVM's CUstream (the legacy default stream is not used)");
        }
        this.cuda = cuda;
        this.context = context;
        this.stream = stream;
    }

    public long stream() {
        return stream;
    }

    /**
     * The call of a task: the one its descriptor carries ({@code tuning}, made by {@link CacheLibraryTasks} or
     * {@link AttentionLibraryTasks#decode}), or for a {@value AttentionLibraryTasks#DECODE} descriptor made by hand
     * the one its scalars describe; its arguments checked against it.
     */
    static LibraryCall call(String function, Object[] args, Object tuning) {
        if (tuning instanceof LibraryCall call) {
            if (!call.function().equals(function)) {
                throw new InvalidArgumentException("function", function, "the descriptor's call is " + call.function());
            }
            call.checkArguments(args);
            return call;
        }
        if (AttentionLibraryTasks.DECODE.equals(function)) {
            return LibraryCall.legacyDecode(args);
        }
        throw new InvalidArgumentException("function", function, "the " + AttentionLibraryTasks.LIBRARY_NAME + " library has "
                + AttentionLibraryTasks.DECODE + " (AttentionLibraryTasks) and " + String.join(", ", CacheLibraryTasks.DECODE,
                CacheLibraryTasks.DECODE_LSE, CacheLibraryTasks.PREFILL, CacheLibraryTasks.PREFILL_LSE)
                + " (CacheLibraryTasks, whose descriptors carry their call)");
    }

    /** Loads the call's entries and makes its buffers; idempotent (one lookup when already made). */
    public synchronized void prepare(String function, Object[] args, Object tuning) {
        requireOpen();
        prepare(call(function, args, tuning));
    }

    private LibraryCall.Workspace prepare(LibraryCall call) {
        LibraryCall.Workspace done = prepared.get(call.key());
        if (done != null) {
            return done;
        }
        inContext(() -> {
            if (!capabilityChecked) {
                int cc = cuda.computeCapability();
                if (cc < MIN_COMPUTE_CAPABILITY) {
                    throw new IllegalStateException("the device is sm_" + cc + "; the cache kernels need sm_80 or newer");
                }
                capabilityChecked = true;
            }
            // Loaded here, before any capture: dispatch only looks the functions up.
            call.kernels().forEach(this::load);
            int[] params = call.params();
            long p = 0, partialO = 0, partialLse = 0;
            try {
                p = cuda.malloc(4L * params.length);
                cuda.copyToDevice(p, params);
                if (call.partialOFloats() > 0) {
                    partialO = cuda.malloc(4L * call.partialOFloats());
                    partialLse = cuda.malloc(4L * call.partialLseFloats());
                }
            } catch (RuntimeException e) {
                for (long b : new long[] {p, partialO, partialLse}) {
                    if (b != 0) {
                        cuda.free(b);
                    }
                }
                throw e;
            }
            prepared.put(call.key(), new LibraryCall.Workspace(p, partialO, partialLse));
        });
        return prepared.get(call.key());
    }

    /**
     * Enqueues the call's launches on TornadoVM's stream. {@code pointers} are the device addresses TornadoVM
     * resolved for the arguments (0 for scalars).
     */
    public synchronized void dispatch(String function, Object[] args, long[] pointers, Object tuning) {
        requireOpen();
        LibraryCall call = call(function, args, tuning);
        call.checkPointers(pointers);
        // TornadoVM calls prepare first; a direct caller may not have (then this is not capture-safe).
        LibraryCall.Workspace workspace = prepare(call);
        inContext(() -> {
            for (LibraryCall.Launch l : call.launches(pointers, workspace)) {
                cuda.launch(functions.get(l.kernel().entry()), l.gridX(), l.gridY(), l.gridZ(), l.kernel().threads(), stream,
                        l.arguments());
            }
        });
    }

    private void load(KernelManifest.Kernel kernel) {
        String entry = kernel.entry();
        if (!functions.containsKey(entry)) {
            long module = cuda.loadModule(PtxEntries.module(KernelManifest.ptx(kernel.module()), entry));
            modules.put(entry, module);
            functions.put(entry, cuda.function(module, entry));
        }
    }

    /** Calls prepared so far (tests). */
    synchronized int preparedCalls() {
        return prepared.size();
    }

    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("the attention library context is closed");
        }
    }

    private void inContext(Runnable work) {
        cuda.pushContext(context);
        try {
            work.run();
        } finally {
            cuda.popContext();
        }
    }

    /** Frees the buffers and unloads the modules (TornadoVM: when the execution plan is freed). */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        inContext(() -> {
            for (LibraryCall.Workspace w : prepared.values()) {
                for (long b : new long[] {w.params(), w.partialO(), w.partialLse()}) {
                    if (b != 0) {
                        cuda.free(b);
                    }
                }
            }
            prepared.clear();
            modules.values().forEach(cuda::unloadModule);
            modules.clear();
            functions.clear();
        });
    }
}
