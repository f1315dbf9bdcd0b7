package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.AttentionShape;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Dense attention of one {@link AttentionShape} as a TornadoVM 5.2.0 library task (CUDA backend): the launches
 * ptx-cuda's plan makes for the shape (the launch table's prefill entry, or for a decode shape the split pass and the
 * combine), with the entries' dynamic shared memory, on TornadoVM's buffers and stream ({@link AttentionLibrary}).
 * ptx-tornado's plans run it on the CUDA backend: TornadoVM launches a prebuilt task with no dynamic shared memory,
 * which holds its tiles to 48 KB, where a library task launches ptx-cuda's own tiles.
 *
 * <pre>{@code
 * ForwardLibraryTask att = ForwardLibraryTask.create(shape, device.getPhysicalDevice().getDeviceMaxComputeUnits());
 * graph.libraryTask("attn", att::forward, q, k, v, o, lse);
 * }</pre>
 * q, k, v, o: 16-bit arrays ({@code HalfFloatArray}, {@code BFloat16Array} or {@code ShortArray}; the shape's dtype
 * says what the bits are) of exactly the shape's sizes, in its layout; lse: a {@code FloatArray} [batch, heads,
 * queryLength], natural log. o and lse are write-only.
 */
public final class ForwardLibraryTask {
    /** The function name (TornadoVM shows it in its logs and NVTX ranges). */
    public static final String FORWARD = "forward";

    private final LibraryCall call;

    private ForwardLibraryTask(LibraryCall call) {
        this.call = call;
    }

    /**
     * The task of {@code shape} on a device of {@code multiprocessors} SMs (a decode shape's split count, as
     * ptx-cuda picks it); a shape no shipped entry serves is refused with an {@code InvalidArgumentException} naming
     * the argument.
     */
    public static ForwardLibraryTask create(AttentionShape shape, int multiprocessors) {
        return new ForwardLibraryTask(LibraryCall.forward(FORWARD, shape, multiprocessors));
    }

    public AttentionShape shape() {
        return call.shape();
    }

    /** The descriptor of one forward over the arrays, checked (type and exact size). */
    public LibraryTaskDescriptor forward(TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                                         TornadoNativeArray o, FloatArray lse) {
        Object[] args = {q, k, v, o, lse};
        call.checkArguments(args);
        return new LibraryTaskDescriptor().withLibrary(AttentionLibraryTasks.LIBRARY_NAME).withFunction(FORWARD)
                .withParameters(args).withAccess(new Access[] {Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY,
                    Access.WRITE_ONLY, Access.WRITE_ONLY}).withTuning(call);
    }

    /**
     * Times this task's dispatches with CUDA events around its launches (not those captured into a CUDA graph), for
     * {@link #drainDeviceMillis}; TornadoVM's profiler times a library task on the host only.
     */
    public void timeOnDevice(boolean on) {
        call.timeOnDevice(on);
    }

    /** The device milliseconds of this task's dispatches timed since the last drain, waited for; NaN: none. */
    public double drainDeviceMillis() {
        return DispatchTimer.drainMillis(call);
    }

    /** The call behind the task (tests). */
    LibraryCall call() {
        return call;
    }

    @Override
    public String toString() {
        return call.toString();
    }
}
