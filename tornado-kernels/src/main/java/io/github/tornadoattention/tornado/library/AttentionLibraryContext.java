package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.PtxEntries;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

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
 *
 * <p>A dispatch's launches are made once per (call, device pointers) and kept ({@link #MAX_LAUNCH_SETS} of them, the
 * least recently used dropped first): entry handles, grids and each launch's {@code kernelParams}, marshalled into
 * host memory the set owns. TornadoVM keeps its buffers in place between executions, so a steady-state dispatch is the
 * arguments' type and size checks, one lookup, one cuCtxGetCurrent (TornadoVM's context is current on its thread:
 * pushed and popped only where it is not) and the cuLaunchKernel calls; nothing is allocated. With {@link DispatchTimer} on, a
 * dispatch outside a capture also records an event before and after its launches. New pointers are checked
 * (present, aligned) before their set is made, so a set only ever holds checked pointers. cuLaunchKernel copies the
 * argument values during the call, also when a CUDA graph captures it, so reusing (or, once dropped, freeing) the
 * marshalled arguments never changes a launch already enqueued or captured.
 */
public final class AttentionLibraryContext implements AutoCloseable {
    /** mma.sync m16n8k16, ldmatrix and cp.async: sm_80 or newer, as the ptx-cuda host requires. */
    static final int MIN_COMPUTE_CAPABILITY = 80;
    /** Launch sets kept per context: an engine's calls times its buffer sets, with room; past it the oldest goes. */
    static final int MAX_LAUNCH_SETS = 1024;
    /** Calls of descriptors made by hand (no tuning) kept, by their scalars. */
    static final int MAX_HAND_MADE_CALLS = 16;

    private final LibraryCuda cuda;
    private final long context;
    private final long stream;
    /** One module per entry used (only that entry is JIT-compiled: {@link PtxEntries#module}), and its function. */
    private final Map<String, Long> modules = new HashMap<>();
    private final Map<String, Long> functions = new HashMap<>();
    private boolean capabilityChecked;
    private final Map<LibraryCall.Key, LibraryCall.Workspace> prepared = new HashMap<>();
    /** {@link #prepared} by call object: the repeated {@link #prepare} of a descriptor is one identity lookup. */
    private final Map<LibraryCall, LibraryCall.Workspace> preparedCalls = new IdentityHashMap<>();
    /** The launch sets, by (call, pointers), in access order; dropping one closes its arguments' memory. */
    private final LinkedHashMap<LaunchKey, LaunchSet> launchSets = new LinkedHashMap<>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<LaunchKey, LaunchSet> eldest) {
            if (size() > MAX_LAUNCH_SETS) {
                eldest.getValue().arena().close();
                return true;
            }
            return false;
        }
    };
    /** The lookup key, refilled per dispatch (under the lock), so a lookup allocates nothing. */
    private final LaunchKey probe = new LaunchKey();
    /** Hand-made descriptors' calls with the scalars they were made from, newest last. */
    private final List<HandMade> handMade = new java.util.ArrayList<>();
    /** Event pairs of timed dispatches ({@link DispatchTimer}): all made, and those not awaiting a drain. */
    private final List<long[]> eventPairs = new java.util.ArrayList<>();
    private final java.util.ArrayDeque<long[]> freeEventPairs = new java.util.ArrayDeque<>();
    private boolean closed;

    /** A call and the device pointers of its arguments; compared by call identity and pointer values. */
    private static final class LaunchKey {
        private LibraryCall call;
        private long[] pointers;
        private int hash;

        LaunchKey set(LibraryCall call, long[] pointers) {
            this.call = call;
            this.pointers = pointers;
            this.hash = 31 * System.identityHashCode(call) + Arrays.hashCode(pointers);
            return this;
        }

        LaunchKey copy() {
            return new LaunchKey().set(call, pointers.clone());
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof LaunchKey k && k.call == call && Arrays.equals(k.pointers, pointers);
        }

        @Override
        public int hashCode() {
            return hash;
        }
    }

    /** A dispatch's launches, ready: entry handles, grid (x, y, z, block x, dynamic shared bytes per launch) and kernelParams. */
    private record LaunchSet(long[] functions, int[] geometry, MemorySegment[] kernelParams, Arena arena) {
    }

    /** A hand-made descriptor's call and its scalar arguments. */
    private record HandMade(Object[] scalars, LibraryCall call) {
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
                + AttentionLibraryTasks.DECODE + " (AttentionLibraryTasks), " + String.join(", ", CacheLibraryTasks.DECODE,
                CacheLibraryTasks.DECODE_LSE, CacheLibraryTasks.PREFILL, CacheLibraryTasks.PREFILL_LSE,
                CacheLibraryTasks.APPEND_DECODE, CacheLibraryTasks.APPEND_DECODE_LSE) + " (CacheLibraryTasks) and "
                + ForwardLibraryTask.FORWARD + " (ForwardLibraryTask), whose descriptors carry their call");
    }

    /**
     * {@link #call}, with a hand-made {@value AttentionLibraryTasks#DECODE} descriptor's call kept by its scalars (so
     * its launch set is found again): the same call object for the same scalars, its arrays checked each time.
     */
    private LibraryCall resolve(String function, Object[] args, Object tuning) {
        if (tuning == null && AttentionLibraryTasks.DECODE.equals(function) && args != null
                && args.length == AttentionLibraryTasks.DECODE_ARGS) {
            for (int i = handMade.size() - 1; i >= 0; i--) {
                HandMade h = handMade.get(i);
                if (sameScalars(h.scalars(), args)) {
                    h.call().checkArguments(args);
                    return h.call();
                }
            }
            LibraryCall call = call(function, args, null);
            if (handMade.size() == MAX_HAND_MADE_CALLS) {
                handMade.removeFirst();
            }
            handMade.add(new HandMade(Arrays.copyOfRange(args, AttentionLibraryTasks.ARG_BATCH,
                    AttentionLibraryTasks.DECODE_ARGS), call));
            return call;
        }
        return call(function, args, tuning);
    }

    private static boolean sameScalars(Object[] scalars, Object[] args) {
        for (int i = 0; i < scalars.length; i++) {
            if (!Objects.equals(scalars[i], args[AttentionLibraryTasks.ARG_BATCH + i])) {
                return false;
            }
        }
        return true;
    }

    /** Loads the call's entries and makes its buffers; idempotent (one lookup when already made). */
    public synchronized void prepare(String function, Object[] args, Object tuning) {
        requireOpen();
        prepare(resolve(function, args, tuning));
    }

    private LibraryCall.Workspace prepare(LibraryCall call) {
        LibraryCall.Workspace done = preparedCalls.get(call);
        if (done != null) {
            return done;
        }
        done = prepared.get(call.key());
        if (done != null) {
            preparedCall(call, done);
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
        done = prepared.get(call.key());
        preparedCall(call, done);
        return done;
    }

    /** Remembers {@code call}'s workspace by identity (a cache of {@link #prepared}: cleared when it grows large). */
    private void preparedCall(LibraryCall call, LibraryCall.Workspace workspace) {
        if (preparedCalls.size() >= MAX_LAUNCH_SETS) {
            preparedCalls.clear();
        }
        preparedCalls.put(call, workspace);
    }

    /**
     * Enqueues the call's launches on TornadoVM's stream. {@code pointers} are the device addresses TornadoVM
     * resolved for the arguments (0 for scalars).
     */
    public synchronized void dispatch(String function, Object[] args, long[] pointers, Object tuning) {
        requireOpen();
        LibraryCall call = resolve(function, args, tuning);
        LaunchSet set = launchSets.get(probe.set(call, pointers));
        probe.set(null, EMPTY);
        if (set == null) {
            set = launchSet(call, pointers);
        }
        boolean push = cuda.currentContext() != context;
        if (push) {
            cuda.pushContext(context);
        }
        try {
            long[] timed = (DispatchTimer.enabled() || call.timedOnDevice()) && !cuda.isCapturing(stream) ? eventPair() : null;
            if (timed != null) {
                cuda.recordEvent(timed[0], stream);
            }
            int[] g = set.geometry();
            for (int i = 0; i < set.functions().length; i++) {
                cuda.launch(set.functions()[i], g[5 * i], g[5 * i + 1], g[5 * i + 2], g[5 * i + 3], g[5 * i + 4], stream,
                        set.kernelParams()[i]);
            }
            if (timed != null) {
                cuda.recordEvent(timed[1], stream);
                DispatchTimer.add(new DispatchTimer.Timed(this, call, timed));
            }
        } finally {
            if (push) {
                cuda.popContext();
            }
        }
    }

    private static final long[] EMPTY = {};

    /** A free (start, end) event pair for a timed dispatch ({@link DispatchTimer}); made in the current context. */
    private long[] eventPair() {
        long[] pair = freeEventPairs.poll();
        if (pair == null) {
            pair = new long[] {cuda.createEvent(), cuda.createEvent()};
            eventPairs.add(pair);
        }
        return pair;
    }

    /** The device milliseconds between a timed dispatch's events (waits for it), NaN once closed; the pair is reused. */
    synchronized double elapsedAndRecycle(long[] pair) {
        if (closed) {
            return Double.NaN;
        }
        double[] ms = new double[1];
        inContext(() -> ms[0] = cuda.elapsedMillis(pair[0], pair[1]));
        freeEventPairs.push(pair);
        return ms[0];
    }

    /** Checks the pointers, then makes and keeps the call's launches on them. */
    private LaunchSet launchSet(LibraryCall call, long[] pointers) {
        call.checkPointers(pointers);
        // TornadoVM calls prepare first; a direct caller may not have (then this is not capture-safe).
        LibraryCall.Workspace workspace = prepare(call);
        List<LibraryCall.Launch> launches = call.launches(pointers, workspace);
        int n = launches.size();
        long[] handles = new long[n];
        int[] geometry = new int[5 * n];
        MemorySegment[] kernelParams = new MemorySegment[n];
        Arena arena = cuda.argumentArena();
        try {
            for (int i = 0; i < n; i++) {
                LibraryCall.Launch l = launches.get(i);
                handles[i] = functions.get(l.kernel().entry());
                geometry[5 * i] = l.gridX();
                geometry[5 * i + 1] = l.gridY();
                geometry[5 * i + 2] = l.gridZ();
                geometry[5 * i + 3] = l.kernel().threads();
                geometry[5 * i + 4] = l.kernel().dynamicSharedBytes();
                kernelParams[i] = cuda.kernelParams(arena, l.arguments());
            }
        } catch (RuntimeException | Error e) {
            arena.close();
            throw e;
        }
        LaunchSet set = new LaunchSet(handles, geometry, kernelParams, arena);
        launchSets.put(probe.set(call, pointers).copy(), set);
        probe.set(null, EMPTY);
        return set;
    }

    private void load(KernelManifest.Kernel kernel) {
        String entry = kernel.entry();
        if (!functions.containsKey(entry)) {
            long module = cuda.loadModule(PtxEntries.module(KernelManifest.ptx(kernel.module()), entry));
            modules.put(entry, module);
            long function = cuda.function(module, entry);
            if (kernel.dynamicSharedBytes() > 0) {
                cuda.allowDynamicShared(function, kernel.dynamicSharedBytes());   // past 48 KB only with the attribute
            }
            functions.put(entry, function);
        }
    }

    /** The provider's argument and pointer arrays, one of each per argument count (functions take 6, 7 or 13). */
    private final Object[][] scratchArguments = new Object[AttentionLibraryTasks.DECODE_ARGS + 1][];
    private final long[][] scratchPointers = new long[AttentionLibraryTasks.DECODE_ARGS + 1][];

    /** An argument array of {@code n} the provider fills for one dispatch (caller holds this context's lock). */
    Object[] scratchArguments(int n) {
        if (n >= scratchArguments.length) {
            return new Object[n];   // no function of ours: refused by the dispatch
        }
        Object[] a = scratchArguments[n];
        return a != null ? a : (scratchArguments[n] = new Object[n]);
    }

    /** A pointer array of {@code n} the provider fills for one dispatch (caller holds this context's lock). */
    long[] scratchPointers(int n) {
        if (n >= scratchPointers.length) {
            return new long[n];
        }
        long[] p = scratchPointers[n];
        return p != null ? p : (scratchPointers[n] = new long[n]);
    }

    /** Calls prepared so far (tests). */
    synchronized int preparedCalls() {
        return prepared.size();
    }

    /** Launch sets kept (tests). */
    synchronized int launchSets() {
        return launchSets.size();
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
        DispatchTimer.forget(this);
        launchSets.values().forEach(s -> s.arena().close());
        launchSets.clear();
        preparedCalls.clear();
        handMade.clear();
        inContext(() -> {
            for (LibraryCall.Workspace w : prepared.values()) {
                for (long b : new long[] {w.params(), w.partialO(), w.partialLse()}) {
                    if (b != 0) {
                        cuda.free(b);
                    }
                }
            }
            prepared.clear();
            for (long[] pair : eventPairs) {
                cuda.destroyEvent(pair[0]);
                cuda.destroyEvent(pair[1]);
            }
            eventPairs.clear();
            freeEventPairs.clear();
            modules.values().forEach(cuda::unloadModule);
            modules.clear();
            functions.clear();
        });
    }
}
