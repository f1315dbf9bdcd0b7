package io.github.tornadoattention.tornado.library;

import java.util.Arrays;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * Library-task factories for TornadoVM 5.2.0's {@code TaskGraph.libraryTask}, in the style of TornadoVM's
 * {@code CuBlas}: each returns the descriptor (library, function, arguments, access, and the mapped call as its
 * tuning) that the {@code TornadoLibraryProvider} registered under {@value #LIBRARY_NAME} ({@link AttentionLibrary})
 * executes on TornadoVM's own device buffers and stream. Only tornado-api types: usable wherever tornado-kernels
 * compiles.
 *
 * <p>The functions of a spec over a cache (paged or contiguous, fp16 or bf16, decode or varlen prefill, lse, window,
 * softcap, sinks) are {@link CacheLibraryTasks}'. {@link #decode} here is the shape-by-scalars decode over a
 * contiguous fp16 cache, the same kernels:
 *
 * <pre>{@code
 * taskGraph.libraryTask("attention", AttentionLibraryTasks::decode,
 *         q, keys, values, o, lens, batch, heads, kvHeads, 1, capacity, 128, true, scale);
 * }</pre>
 */
public final class AttentionLibraryTasks {
    /** The provider's {@code libraryName()}. */
    public static final String LIBRARY_NAME = "tornado-attention";
    /** {@link #decode}'s function name. */
    public static final String DECODE = "decodeAttention";
    /** Argument count of {@link #decode}. */
    public static final int DECODE_ARGS = 13;
    /** Argument positions of {@link #decode}. */
    public static final int ARG_Q = 0, ARG_K = 1, ARG_V = 2, ARG_O = 3, ARG_LENS = 4, ARG_BATCH = 5, ARG_HEADS = 6,
            ARG_KV_HEADS = 7, ARG_QUERIES = 8, ARG_CAPACITY = 9, ARG_HEAD_DIM = 10, ARG_CAUSAL = 11, ARG_SCALE = 12;

    private AttentionLibraryTasks() {
    }

    /**
     * Decode attention over a contiguous fp16 cache (BHSD): for each sequence b, its {@code lens[batch + b]} (at most
     * {@code queries}) newest queries attend to the first {@code lens[b]} keys of its cache rows (bottom-right causal
     * when {@code causal}). The same as {@link CacheLibraryTasks#decode} for the spec these scalars make; the arguments
     * are checked here (an {@code InvalidArgumentException} naming the first bad one) and again by the provider.
     *
     * @param q        [batch, heads, queries, headDim]
     * @param keys     the K cache, [batch, kvHeads, capacity, headDim]
     * @param values   the V cache, same shape as {@code keys}
     * @param o        output, [batch, heads, queries, headDim]; rows past a sequence's new queries are 0
     * @param lens     int32 [2 * batch]: lens[b] = the sequence's KV length after this step's append,
     *                 lens[batch + b] = its new queries this step (0 = idle slot); see {@link #fillLens}
     * @param queries  queries per sequence the call is shaped for, 1..16 (1 = plain decode)
     * @param scale    softmax scale (usually 1/sqrt(headDim))
     */
    public static LibraryTaskDescriptor decode(HalfFloatArray q, HalfFloatArray keys, HalfFloatArray values,
                                               HalfFloatArray o, IntArray lens, int batch, int heads, int kvHeads,
                                               int queries, int capacity, int headDim, boolean causal, float scale) {
        Object[] args = {q, keys, values, o, lens, batch, heads, kvHeads, queries, capacity, headDim, causal, scale};
        Access[] access = new Access[DECODE_ARGS];
        Arrays.fill(access, Access.READ_ONLY);
        access[ARG_O] = Access.WRITE_ONLY;
        return new LibraryTaskDescriptor().withLibrary(LIBRARY_NAME).withFunction(DECODE).withParameters(args)
                .withAccess(access).withTuning(LibraryCall.legacyDecode(args));
    }

    /**
     * Writes the {@code lens} block of {@link #decode}: {@code lengths[b]} keys (after this step's
     * append) and {@code newQueries[b]} queries per sequence.
     */
    public static void fillLens(IntArray lens, int[] lengths, int[] newQueries) {
        if (lengths.length != newQueries.length) {
            throw new IllegalArgumentException("lengths (" + lengths.length + ") and newQueries ("
                    + newQueries.length + ") must have one entry per sequence");
        }
        if (lens.getSize() < 2 * lengths.length) {
            throw new IllegalArgumentException("lens holds " + lens.getSize() + " ints; " + 2 * lengths.length + " needed");
        }
        for (int b = 0; b < lengths.length; b++) {
            if (newQueries[b] < 0 || newQueries[b] > lengths[b]) {
                throw new IllegalArgumentException("newQueries[" + b + "] = " + newQueries[b] + " must be in [0, lengths["
                        + b + "] = " + lengths[b] + "]");
            }
            lens.set(b, lengths[b]);
            lens.set(lengths.length + b, newQueries[b]);
        }
    }
}
