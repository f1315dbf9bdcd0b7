package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import java.util.Arrays;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The attention library's functions for one {@link CacheAttentionSpec} over one {@link KvCacheSpec} (the spec
 * classes of every host), as factories for TornadoVM 5.2.0's {@code TaskGraph.libraryTask}: the ptx-cuda cache
 * kernels run by {@link AttentionLibrary} (TornadoVM's CUDA backend) on the engine's own arrays, on TornadoVM's
 * stream, capturable in its CUDA graphs.
 *
 * <pre>{@code
 * CacheLibraryTasks att = CacheLibraryTasks.create(spec, cacheSpec);        // checked here, once
 * IntArray step = CacheAttentionTasks.newStepArray(slots);                   // lengths: run-time data
 * graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, step)
 *      .task("qkv", ...)                                                     // the engine's projection, RoPE, append
 *      .libraryTask("attn", att::decode, q, kCache, vCache, step, blockTable, o)
 *      .task("proj", ...);                                                   // reads o on the device
 * // per step: CacheAttentionTasks.setStep(step, lengthsAfterAppend, newTokens); plan.execute();
 * }</pre>
 *
 * <p><b>Arrays</b> (the order of every function: q, keys, values, step, blockTable, o[, lse]; append-decode puts
 * newKeys, newValues first):
 * <ul>
 * <li>16-bit tensors (q, K, V, o): {@code HalfFloatArray} for fp16, {@code BFloat16Array} for bf16, or the bits in a
 *     {@code ShortArray}.</li>
 * <li>K and V: contiguous [slots, kvHeads, capacity, headDim]; paged: the engine's page pool [pages, kvHeads, pageSize,
 *     headDim] (pageSize a power of two; key j of slot b is row j % pageSize of page blockTable[b * pagesPerSequence +
 *     j / pageSize]).</li>
 * <li>step: int32 [3*slots+1] ({@code CacheAttentionTasks.newStepArray}/{@code setStep}): L_b, each slot's length after
 *     this step's append; n_b, its new tokens (0: idle); their prefix sums; the total.</li>
 * <li>blockTable: int32 [slots, pagesPerSequence] page ids of a paged cache; a contiguous cache: one int, unread.</li>
 * <li>decode: q, o [slots, heads, min(maxQueryLength, 16), headDim] in the spec's layout, lse [slots, heads, that];
 *     prefill (packed varlen): q, o [maxTotalQueries, heads, headDim], slot b's n_b rows from its offset, lse
 *     [heads, maxTotalQueries].</li>
 * </ul>
 * Query j of slot b sits at position L_b - n_b + j (bottom-right: new tokens at the end of each sequence's keys) and
 * sees key k iff k &lt; L_b, causal k &lt;= L_b - n_b + j, inside the spec's window; GQA/MQA read each KV head once for
 * its query heads. Rows past n_b, idle slots and rows that see no key give O = 0 and lse = -inf (or the head's sink).
 * Only o and lse are written (write-only: TornadoVM copies neither in), and by append-decode the new rows of keys and
 * values.
 */
public final class CacheLibraryTasks {
    /** Function names (the descriptor's; TornadoVM shows them in its logs and NVTX ranges). */
    public static final String DECODE = "cacheDecode", DECODE_LSE = "cacheDecodeLse", PREFILL = "cachePrefill",
            PREFILL_LSE = "cachePrefillLse", APPEND_DECODE = "cacheAppendDecode",
            APPEND_DECODE_LSE = "cacheAppendDecodeLse";

    private final CacheAttentionSpec spec;
    private final KvCacheSpec cacheSpec;
    private final LibraryCall decode;
    private final LibraryCall decodeLse;
    private final LibraryCall prefill;
    private final LibraryCall prefillLse;
    private final LibraryCall appendDecode;
    private final LibraryCall appendDecodeLse;

    private CacheLibraryTasks(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        this.spec = spec;
        this.cacheSpec = cacheSpec;
        this.decode = LibraryCall.of(DECODE, LibraryCall.Op.DECODE, false, spec, cacheSpec);
        this.decodeLse = LibraryCall.of(DECODE_LSE, LibraryCall.Op.DECODE, true, spec, cacheSpec);
        this.prefill = LibraryCall.of(PREFILL, LibraryCall.Op.PREFILL, false, spec, cacheSpec);
        this.prefillLse = LibraryCall.of(PREFILL_LSE, LibraryCall.Op.PREFILL, true, spec, cacheSpec);
        this.appendDecode = LibraryCall.of(APPEND_DECODE, LibraryCall.Op.APPEND_DECODE, false, spec, cacheSpec);
        this.appendDecodeLse = LibraryCall.of(APPEND_DECODE_LSE, LibraryCall.Op.APPEND_DECODE, true, spec, cacheSpec);
    }

    /**
     * The functions of {@code spec} over caches of {@code cacheSpec}: checked together (the spec's cache, the grid
     * limits, and an entry of the kernel manifest for each function: element type, head dim, layout, features), an
     * {@code InvalidArgumentException} naming the first argument that rules them out.
     */
    public static CacheLibraryTasks create(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return new CacheLibraryTasks(spec, cacheSpec);
    }

    public CacheAttentionSpec spec() {
        return spec;
    }

    public KvCacheSpec cacheSpec() {
        return cacheSpec;
    }

    /** Split-KV decode of up to min(maxQueryLength, 16) new tokens per slot (speculative steps and chunks too). */
    public LibraryTaskDescriptor decode(TornadoNativeArray q, TornadoNativeArray keys, TornadoNativeArray values,
                                        IntArray step, IntArray blockTable, TornadoNativeArray o) {
        return descriptor(decode, q, keys, values, step, blockTable, o);
    }

    /** {@link #decode} that also writes the logsumexp (fp32, natural log) per query row. */
    public LibraryTaskDescriptor decodeWithLse(TornadoNativeArray q, TornadoNativeArray keys, TornadoNativeArray values,
                                               IntArray step, IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        return descriptor(decodeLse, q, keys, values, step, blockTable, o, lse);
    }

    /**
     * The step's new K/V rows appended to the cache, then {@link #decode}, in one task: the launches ptx-cuda's cache
     * decode makes (its append kernel, the split pass, the combine). newKeys, newValues: [batch, kvHeads,
     * min(maxQueryLength, 16), headDim] (BHSD), slot b's n_b rows first; they go to positions L_b - n_b .. L_b - 1.
     * The arguments in {@code CacheAttentionTasks.addAppendAndDecode}'s order; keys and values are read and written.
     */
    public LibraryTaskDescriptor appendAndDecode(TornadoNativeArray newKeys, TornadoNativeArray newValues,
                                                 TornadoNativeArray q, TornadoNativeArray keys, TornadoNativeArray values,
                                                 IntArray step, IntArray blockTable, TornadoNativeArray o) {
        return descriptor(appendDecode, newKeys, newValues, q, keys, values, step, blockTable, o);
    }

    /** {@link #appendAndDecode} that also writes the logsumexp (fp32, natural log) per query row. */
    public LibraryTaskDescriptor appendAndDecodeWithLse(TornadoNativeArray newKeys, TornadoNativeArray newValues,
                                                        TornadoNativeArray q, TornadoNativeArray keys,
                                                        TornadoNativeArray values, IntArray step, IntArray blockTable,
                                                        TornadoNativeArray o, FloatArray lse) {
        return descriptor(appendDecodeLse, newKeys, newValues, q, keys, values, step, blockTable, o, lse);
    }

    /**
     * Varlen (packed) prefill over the cache: each slot's n_b new tokens (prompts or chunks of them, up to
     * maxQueryLength per slot and maxTotalQueries in all) against its L_b keys, bottom-right causal when the spec is.
     * Append the tokens' K/V first (the engine's task).
     */
    public LibraryTaskDescriptor prefill(TornadoNativeArray q, TornadoNativeArray keys, TornadoNativeArray values,
                                         IntArray step, IntArray blockTable, TornadoNativeArray o) {
        return descriptor(prefill, q, keys, values, step, blockTable, o);
    }

    /** {@link #prefill} that also writes the logsumexp, [heads, maxTotalQueries]. */
    public LibraryTaskDescriptor prefillWithLse(TornadoNativeArray q, TornadoNativeArray keys, TornadoNativeArray values,
                                                IntArray step, IntArray blockTable, TornadoNativeArray o, FloatArray lse) {
        return descriptor(prefillLse, q, keys, values, step, blockTable, o, lse);
    }

    /** The call behind a function (tests, the GPU check's launch counts). */
    LibraryCall call(String function) {
        return switch (function) {
            case DECODE -> decode;
            case DECODE_LSE -> decodeLse;
            case PREFILL -> prefill;
            case PREFILL_LSE -> prefillLse;
            case APPEND_DECODE -> appendDecode;
            case APPEND_DECODE_LSE -> appendDecodeLse;
            default -> throw new IllegalArgumentException(function);
        };
    }

    private static LibraryTaskDescriptor descriptor(LibraryCall call, Object... args) {
        call.checkArguments(args);
        Access[] access = new Access[args.length];
        Arrays.fill(access, Access.READ_ONLY);
        access[call.positions().o()] = Access.WRITE_ONLY;
        if (call.positions().lse() >= 0) {
            access[call.positions().lse()] = Access.WRITE_ONLY;
        }
        if (call.op() == LibraryCall.Op.APPEND_DECODE) {
            access[call.positions().keys()] = Access.READ_WRITE;   // the append writes the cache
            access[call.positions().values()] = Access.READ_WRITE;
        }
        return new LibraryTaskDescriptor().withLibrary(AttentionLibraryTasks.LIBRARY_NAME).withFunction(call.function())
                .withParameters(args).withAccess(access).withTuning(call);
    }

    @Override
    public String toString() {
        return LibraryCall.HOST + " functions of " + spec + " over " + cacheSpec;
    }
}
