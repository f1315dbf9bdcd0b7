package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.PtxEntries;
import java.util.HashMap;
import java.util.Map;

/**
 * The provider's state for one (TornadoVM device, execution plan): TornadoVM's CUcontext and CUstream
 * (from its CUDA backend's {@code TornadoNativeStreamSupport}), the cache kernels' entries it runs loaded into
 * that context, and per decode shape the uploaded params block and the split workspace. Plain types
 * only, so it compiles and is tested without TornadoVM's runtime; {@code AttentionLibrary} adapts it to
 * the {@code TornadoLibraryProvider} SPI.
 *
 * <p>{@link #prepare} (called by TornadoVM before any CUDA graph capture) loads, allocates and uploads;
 * {@link #dispatch} only enqueues two kernels on TornadoVM's stream, so it may be captured.
 */
public final class AttentionLibraryContext implements AutoCloseable {
    /** mma.sync m16n8k16 fp16, ldmatrix and cp.async: sm_80 or newer, as the ptx-cuda host requires. */
    static final int MIN_COMPUTE_CAPABILITY = 80;

    private final LibraryCuda cuda;
    private final long context;
    private final long stream;
    /** One module per entry used (only that entry is JIT-compiled: {@link PtxEntries#module}), and its function. */
    private final Map<String, Long> modules = new HashMap<>();
    private final Map<String, Long> functions = new HashMap<>();
    private boolean capabilityChecked;
    private final Map<DecodeCall.Shape, Prepared> prepared = new HashMap<>();
    private boolean closed;

    /** Device memory of one decode shape. */
    record Prepared(DecodeCall call, long params, long partialO, long partialLse) {
    }

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

    /** Loads the module and makes the shape's buffers; idempotent (one lookup when already made). */
    public synchronized void prepare(String function, Object[] args) {
        requireDecode(function);
        DecodeCall call = DecodeCall.of(args);
        if (prepared.containsKey(call.shape())) {
            return;
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
            load(call.splitEntry());
            load(call.combineEntry());
            long params = 0, partialO = 0, partialLse = 0;
            try {
                params = cuda.malloc(4L * call.params().length);
                cuda.copyToDevice(params, call.params());
                partialO = cuda.malloc(4L * call.partialOFloats());
                partialLse = cuda.malloc(4L * call.partialLseFloats());
            } catch (RuntimeException e) {
                for (long p : new long[] {params, partialO, partialLse}) {
                    if (p != 0) {
                        cuda.free(p);
                    }
                }
                throw e;
            }
            prepared.put(call.shape(), new Prepared(call, params, partialO, partialLse));
        });
    }

    /**
     * Enqueues the decode on TornadoVM's stream: split pass, then combine. {@code pointers} are the
     * device addresses TornadoVM resolved for the arguments (0 for scalars).
     */
    public synchronized void dispatch(String function, Object[] args, long[] pointers) {
        requireDecode(function);
        DecodeCall.checkPointers(pointers);
        DecodeCall call = DecodeCall.of(args);
        Prepared p = prepared.get(call.shape());
        if (p == null) {
            // TornadoVM calls prepare first; a direct caller may not have (not capture-safe then).
            prepare(function, args);
            p = prepared.get(call.shape());
        }
        Prepared state = p;
        inContext(() -> {
            cuda.launch(function(call.splitEntry()), call.splits(), call.splitGridY(), call.splitGridZ(),
                    call.splitThreads(), stream, call.splitArguments(pointers, state.partialO(), state.partialLse(), state.params()));
            cuda.launch(function(call.combineEntry()), call.combineGridX(), 1, 1, call.combineThreads(), stream,
                    call.combineArguments(pointers, state.partialO(), state.partialLse(), state.params()));
        });
    }

    private void load(String entry) {
        if (!functions.containsKey(entry)) {
            long module = cuda.loadModule(PtxEntries.module(KernelManifest.ptx(DecodeCall.MODULE), entry));
            modules.put(entry, module);
            functions.put(entry, cuda.function(module, entry));
        }
    }

    private long function(String entry) {
        return functions.get(entry);
    }

    /** Shapes prepared so far (tests). */
    synchronized int preparedShapes() {
        return prepared.size();
    }

    private void requireDecode(String function) {
        if (closed) {
            throw new IllegalStateException("the attention library context is closed");
        }
        if (!AttentionLibraryTasks.DECODE.equals(function)) {
            throw new InvalidArgumentException("function", function,
                    "the " + AttentionLibraryTasks.LIBRARY_NAME + " library has " + AttentionLibraryTasks.DECODE);
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
            for (Prepared p : prepared.values()) {
                cuda.free(p.params());
                cuda.free(p.partialO());
                cuda.free(p.partialLse());
            }
            prepared.clear();
            modules.values().forEach(cuda::unloadModule);
            modules.clear();
            functions.clear();
        });
    }
}
