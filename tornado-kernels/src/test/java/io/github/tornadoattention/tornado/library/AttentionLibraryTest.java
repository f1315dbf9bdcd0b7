package io.github.tornadoattention.tornado.library;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.BFloat16Array;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The attention library's task descriptors, argument mapping and validation, and what its context asks of the CUDA
 * driver (a recording stand-in): everything short of a GPU and TornadoVM's CUDA backend. The shape-by-scalars
 * {@link AttentionLibraryTasks#decode} first, then the functions of {@link CacheLibraryTasks}: paged decode, varlen
 * prefill, GQA, lse, bf16, the score features.
 */
class AttentionLibraryTest {
    static final int B = 2, H = 8, HKV = 2, SQ = 1, CAP = 1000, D = 128;
    static final float SCALE = (float) (1 / Math.sqrt(D));

    static Object[] args(int batch, int heads, int kvHeads, int queries, int capacity, int headDim) {
        long q = (long) batch * heads * queries * headDim;
        long kv = (long) batch * kvHeads * capacity * headDim;
        return AttentionLibraryTasks.decode(new HalfFloatArray((int) q), new HalfFloatArray((int) kv),
                new HalfFloatArray((int) kv), new HalfFloatArray((int) q), new IntArray(2 * batch), batch, heads,
                kvHeads, queries, capacity, headDim, true, SCALE).getParameters();
    }

    static Object[] args() {
        return args(B, H, HKV, SQ, CAP, D);
    }

    // ---- the shape-by-scalars decode (AttentionLibraryTasks.decode) ----

    @Test
    void decodeDescriptorNamesTheLibraryAndMarksOnlyTheOutputWritten() {
        Object[] a = args();
        LibraryTaskDescriptor d = AttentionLibraryTasks.decode((HalfFloatArray) a[0], (HalfFloatArray) a[1],
                (HalfFloatArray) a[2], (HalfFloatArray) a[3], (IntArray) a[4], B, H, HKV, SQ, CAP, D, true, SCALE);
        assertEquals("tornado-attention", d.getLibraryName());
        assertEquals("decodeAttention", d.getFunctionName());
        assertEquals(AttentionLibraryTasks.DECODE_ARGS, d.getParameters().length);
        assertEquals(AttentionLibraryTasks.DECODE_ARGS, d.getAccess().length);
        for (int i = 0; i < d.getAccess().length; i++) {
            assertEquals(i == AttentionLibraryTasks.ARG_O ? Access.WRITE_ONLY : Access.READ_ONLY, d.getAccess()[i], "argument " + i);
        }
        assertEquals(List.of(B, H, HKV, SQ, CAP, D, true, SCALE),
                List.of(d.getParameters()).subList(AttentionLibraryTasks.ARG_BATCH, AttentionLibraryTasks.DECODE_ARGS));
        assertEquals(AttentionLibraryTasks.DECODE, ((LibraryCall) d.getTuning()).function());
    }

    @Test
    void fillLensWritesLengthsThenNewQueries() {
        IntArray lens = new IntArray(4);
        AttentionLibraryTasks.fillLens(lens, new int[] {7, 300}, new int[] {1, 0});
        assertArrayEquals(new int[] {7, 300, 1, 0}, lens.toHeapArray());
        assertThrows(IllegalArgumentException.class, () -> AttentionLibraryTasks.fillLens(lens, new int[] {1}, new int[] {2}));
        assertThrows(IllegalArgumentException.class, () -> AttentionLibraryTasks.fillLens(new IntArray(3), new int[] {1, 1}, new int[] {1, 1}));
    }

    @Test
    void callMapsOntoTheCacheKernelsAsTheCudaHostDoes() {
        LibraryCall c = LibraryCall.legacyDecode(args());
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(B).heads(H).kvHeads(HKV).headDim(D).maxQueryLength(SQ)
                .maxLength(CAP).causal(true).scale(SCALE).layout(Layout.BHSD).build();
        assertArrayEquals(KernelParams.forCache(spec, KvCacheSpec.contiguous(B, HKV, CAP, D), false), c.params());
        assertEquals(List.of("flash_cache_decode_split_d128", "flash_cache_decode_combine_d128"), entries(c));
        assertEquals(256, c.keysPerSplit());
        assertEquals(4, c.splits());
        assertEquals(4L * B * H * SQ * D, c.partialOFloats());
        assertEquals(4L * B * H * SQ, c.partialLseFloats());
        // G * Sq = 4 query rows: one 16-row block; 16 combine rows, 8 per block at D = 128.
        assertEquals(List.of("flash_cache_decode_split_d128 4x1x4 t32", "flash_cache_decode_combine_d128 2x1x1 t128"),
                geometry(c));
    }

    @Test
    void longCachesUseAtMost128SplitsOfWholeGranules() {
        LibraryCall c = LibraryCall.legacyDecode(args(1, 2, 1, 1, 100_000, 64));
        assertEquals(1024, c.keysPerSplit());
        assertEquals(98, c.splits());
        assertTrue(c.splits() <= DecodeSplitPolicy.MAX_SPLITS);
        assertEquals("flash_cache_decode_split_d64", entries(c).get(0));
    }

    @Test
    void kernelArgumentsFollowTheKernelAbi() {
        LibraryCall c = LibraryCall.legacyDecode(args());
        long[] pointers = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0, 0, 0, 0, 0, 0, 0, 0};
        List<LibraryCall.Launch> l = c.launches(pointers, new LibraryCall.Workspace(0xc0, 0xa0, 0xb0));
        assertArrayEquals(new long[] {0x1000, 0x2000, 0x3000, 0xa0, 0xb0, 0xc0, 0x5000, 0, 256}, l.get(0).arguments());
        assertArrayEquals(new long[] {0xa0, 0xb0, 0x4000, 0, 0xc0, 4}, l.get(1).arguments());
    }

    @Test
    void badArgumentsAreNamed() {
        assertEquals("arguments", name(() -> LibraryCall.legacyDecode(new Object[3])));
        assertEquals("headDim", name(() -> LibraryCall.legacyDecode(args(B, H, HKV, SQ, CAP, 80)))); // no kernel table has 80
        assertEquals("queries", name(() -> LibraryCall.legacyDecode(args(B, H, HKV, 17, CAP, D))));
        assertEquals("kvHeads", name(() -> LibraryCall.legacyDecode(args(B, H, 3, SQ, CAP, D))));
        assertEquals("batch*heads", name(() -> LibraryCall.legacyDecode(args(2, 32768, 1, 1, 1, 64))));
        Object[] a = args();
        a[AttentionLibraryTasks.ARG_K] = new HalfFloatArray(16);
        assertEquals("keys", name(() -> LibraryCall.legacyDecode(a)));
        Object[] b = args();
        b[AttentionLibraryTasks.ARG_LENS] = new IntArray(2 * B - 1);
        assertEquals("lens", name(() -> LibraryCall.legacyDecode(b)));
        Object[] c = args();
        c[AttentionLibraryTasks.ARG_CAUSAL] = 1;
        assertEquals("causal", name(() -> LibraryCall.legacyDecode(c)));
        Object[] d = args();
        d[AttentionLibraryTasks.ARG_O] = new IntArray(1 << 20);
        assertEquals("o", name(() -> LibraryCall.legacyDecode(d)));
    }

    @Test
    void devicePointersMustBePresentAndAligned() {
        LibraryCall c = LibraryCall.legacyDecode(args());
        assertEquals("values", name(() -> c.checkPointers(pointers(16, 32, 0, 48, 64))));
        assertEquals("lens", name(() -> c.checkPointers(pointers(16, 32, 48, 64, 72))));
        assertEquals("devicePointers", name(() -> c.checkPointers(new long[] {16})));
        c.checkPointers(pointers(16, 32, 48, 64, 80));
    }

    /** The legacy decode's 13 pointers: five arrays, then scalars (0). */
    private static long[] pointers(long... arrays) {
        long[] p = new long[AttentionLibraryTasks.DECODE_ARGS];
        System.arraycopy(arrays, 0, p, 0, arrays.length);
        return p;
    }

    @Test
    void contextPreparesOncePerShapeAndDispatchesTwoLaunchesOnTornadoStream() {
        FakeCuda cuda = new FakeCuda(90);
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        Object[] a = args();
        context.prepare(AttentionLibraryTasks.DECODE, a, null); // a descriptor made by hand: no tuning
        context.prepare(AttentionLibraryTasks.DECODE, args(), LibraryCall.legacyDecode(args())); // same shape: nothing more
        assertEquals(1, context.preparedCalls());
        // Each entry JIT-compiled as a module of its own, before any capture.
        assertEquals(List.of("push c0ffee", "cc", "load flash_cache_decode_split_d128", "function flash_cache_decode_split_d128",
                "load flash_cache_decode_combine_d128", "function flash_cache_decode_combine_d128", "malloc 128", "copy 32",
                "malloc 32768", "malloc 256", "pop"), cuda.calls);
        cuda.calls.clear();

        context.dispatch(AttentionLibraryTasks.DECODE, a, pointers(16, 32, 48, 64, 80), null);
        assertEquals(List.of("push c0ffee",
                "launch flash_cache_decode_split_d128 grid 4x1x4 block 32 stream 5eed args [16, 32, 48, 1001, 1002, 1000, 80, 0, 256]",
                "launch flash_cache_decode_combine_d128 grid 2x1x1 block 128 stream 5eed args [1001, 1002, 64, 0, 1000, 4]",
                "pop"), cuda.calls);
        cuda.calls.clear();

        context.close();
        assertEquals(List.of("push c0ffee", "free 1000", "free 1001", "free 1002", "unload", "unload", "pop"), cuda.calls);
        assertThrows(IllegalStateException.class, () -> context.prepare(AttentionLibraryTasks.DECODE, a, null));
    }

    @Test
    void contextRefusesWhatItCannotRun() {
        assertEquals("context", name(() -> new AttentionLibraryContext(new FakeCuda(90), 0, 1)));
        assertEquals("stream", name(() -> new AttentionLibraryContext(new FakeCuda(90), 1, 0)));
        FakeCuda cuda = new FakeCuda(90);
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 1, 1);
        assertEquals("function", name(() -> context.prepare("cublasSgemm", args(), null)));
        assertEquals("function", name(() -> context.prepare("cublasSgemm", args(), LibraryCall.legacyDecode(args()))));
        assertTrue(cuda.calls.isEmpty(), "refused before any driver call: " + cuda.calls);
        FakeCuda old = new FakeCuda(75);
        AttentionLibraryContext turing = new AttentionLibraryContext(old, 1, 1);
        assertThrows(IllegalStateException.class, () -> turing.prepare(AttentionLibraryTasks.DECODE, args(), null));
        assertEquals("pop", old.calls.getLast()); // the context is popped on failure too
    }

    // ---- the functions of a spec over a cache (CacheLibraryTasks) ----

    static final int PAGE = 16, PAGES = 150;

    /** A GQA (4 query heads per KV head) spec: decode of up to 2 tokens, prompts of up to 300, 500 in all. */
    static CacheAttentionSpec.Builder spec(DType dtype, int headDim) {
        return CacheAttentionSpec.builder().batch(B).heads(H).kvHeads(HKV).headDim(headDim).maxQueryLength(2)
                .maxTotalQueries(500).maxLength(CAP).causal(true).dtype(dtype);
    }

    static KvCacheSpec paged(DType dtype, int headDim) {
        return KvCacheSpec.paged(B, HKV, CAP, headDim, PAGE).withPages(PAGES).withDtype(dtype);
    }

    /** Arrays of exactly the sizes a call needs (16-bit tensors of {@code tensor}'s kind). */
    record Arrays7(TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v, IntArray step, IntArray blocks,
                   TornadoNativeArray o, FloatArray lse) {
    }

    static Arrays7 arrays(CacheAttentionSpec spec, KvCacheSpec cache, boolean prefill) {
        long q = prefill ? spec.packedQueryElements() : (long) spec.batch() * spec.heads() * Math.min(spec.maxQueryLength(), 16) * spec.headDim();
        long lse = prefill ? spec.packedLseElements() : q / spec.headDim();
        int blocks = cache.paged() ? cache.slots() * cache.pagesPerSequence() : 1;
        return new Arrays7(tensor(spec.dtype(), q), tensor(spec.dtype(), cache.elements()), tensor(spec.dtype(), cache.elements()),
                new IntArray(3 * spec.batch() + 1), new IntArray(blocks), tensor(spec.dtype(), q), new FloatArray((int) lse));
    }

    static TornadoNativeArray tensor(DType dtype, long elements) {
        return dtype == DType.BF16 ? new BFloat16Array((int) elements) : new HalfFloatArray((int) elements);
    }

    @Test
    void functionsCarryTheirCallAndWriteOnlyTheOutputs() {
        CacheAttentionSpec spec = spec(DType.FP16, D).build();
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, paged(DType.FP16, D));
        Arrays7 a = arrays(spec, att.cacheSpec(), false);
        LibraryTaskDescriptor d = att.decodeWithLse(a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o(), a.lse());
        assertEquals("tornado-attention", d.getLibraryName());
        assertEquals(CacheLibraryTasks.DECODE_LSE, d.getFunctionName());
        assertSame(att.call(CacheLibraryTasks.DECODE_LSE), d.getTuning());
        assertEquals(List.of(Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY,
                Access.WRITE_ONLY, Access.WRITE_ONLY), List.of(d.getAccess()));
        assertEquals(List.of(a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o(), a.lse()), List.of(d.getParameters()));
        Arrays7 p = arrays(spec, att.cacheSpec(), true);
        LibraryTaskDescriptor prefill = att.prefill(p.q(), p.k(), p.v(), p.step(), p.blocks(), p.o());
        assertEquals(CacheLibraryTasks.PREFILL, prefill.getFunctionName());
        assertEquals(6, prefill.getAccess().length);
        assertEquals(Access.WRITE_ONLY, prefill.getAccess()[5]);
    }

    /**
     * Append-decode: ptx-cuda's append kernel (the arguments CudaDevice.appendToCache passes: caches, new rows, step,
     * block table, no packed offsets, slots, Hkv, D, max new rows, the new rows' BHSD strides, the cache's storage
     * strides, page size, pages per sequence; grid (rows / (128 / (D / 8)), Hkv, slots)), then the decode's two
     * launches; the caches read and written, the new rows read; new rows of the wrong size refused by name.
     */
    @Test
    void appendAndDecodeLaunchesTheCachesAppendKernelThenTheDecode() {
        CacheAttentionSpec spec = spec(DType.FP16, D).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        Arrays7 a = arrays(spec, cache, false);
        int maxNew = 2;
        TornadoNativeArray newK = tensor(DType.FP16, (long) B * HKV * maxNew * D), newV = tensor(DType.FP16, (long) B * HKV * maxNew * D);
        LibraryTaskDescriptor d = att.appendAndDecodeWithLse(newK, newV, a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o(), a.lse());
        assertEquals(CacheLibraryTasks.APPEND_DECODE_LSE, d.getFunctionName());
        assertEquals(List.of(Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY, Access.READ_WRITE, Access.READ_WRITE,
                Access.READ_ONLY, Access.READ_ONLY, Access.WRITE_ONLY, Access.WRITE_ONLY), List.of(d.getAccess()));
        LibraryCall c = (LibraryCall) d.getTuning();
        long[] ptr = {0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 0x700, 0x800, 0x900};
        List<LibraryCall.Launch> l = c.launches(ptr, new LibraryCall.Workspace(0xc0, 0xa0, 0xb0));
        assertEquals(3, l.size());
        assertEquals(KernelManifest.shipped().select(io.github.tornadoattention.ptx.KernelVariant.of(
                io.github.tornadoattention.ptx.KernelVariant.Kind.CACHE_APPEND, DType.FP16, D).paged(true)).entry(),
                l.get(0).kernel().entry());
        var storage = cache.strides();
        assertArrayEquals(new long[] {0x400, 0x500, 0x100, 0x200, 0x600, 0x700, 0, B, HKV, D, maxNew,
            (long) HKV * maxNew * D, (long) maxNew * D, D, storage.batch(), storage.head(), storage.row(), PAGE,
            cache.pagesPerSequence()}, l.get(0).arguments());
        assertEquals(List.of(1, HKV, B), List.of(l.get(0).gridX(), l.get(0).gridY(), l.get(0).gridZ()), "16 rows a block");
        // The decode's launches are decodeWithLse's on the same arrays.
        List<LibraryCall.Launch> decode = att.call(CacheLibraryTasks.DECODE_LSE).launches(
                new long[] {0x300, 0x400, 0x500, 0x600, 0x700, 0x800, 0x900}, new LibraryCall.Workspace(0xc0, 0xa0, 0xb0));
        for (int i = 0; i < 2; i++) {
            assertEquals(decode.get(i).kernel(), l.get(i + 1).kernel());
            assertArrayEquals(decode.get(i).arguments(), l.get(i + 1).arguments());
        }
        assertEquals(List.of(l.get(0).kernel(), l.get(1).kernel(), l.get(2).kernel()), c.kernels());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> att.appendAndDecode(
                tensor(DType.FP16, 5), newV, a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o()));
        assertEquals("newKeys", e.argument());
        assertEquals("newValues", name(() -> att.appendAndDecode(newK, tensor(DType.FP16, 7), a.q(), a.k(), a.v(),
                a.step(), a.blocks(), a.o())));
    }

    /**
     * ForwardLibraryTask (ptx-tornado's plans on the CUDA backend): a prefill shape runs the launch table's entry with
     * its dynamic shared memory (allowed once, when the entry is loaded; every launch passes it) on (q, k, v, o, lse,
     * params); a decode shape the split pass on the workspace, then the combine, split as ptx-cuda splits it for the
     * SM count; o and lse write-only; wrong arrays and SM counts refused by name.
     */
    @Test
    void forwardRunsPtxCudasLaunchesWithTheirDynamicSharedMemory() {
        io.github.tornadoattention.AttentionShape prefill = io.github.tornadoattention.AttentionShape.builder().batch(2)
                .heads(4).kvHeads(2).queryLength(300).headDim(256).causal(true).build();
        ForwardLibraryTask att = ForwardLibraryTask.create(prefill, 132);
        List<io.github.tornadoattention.ptx.LaunchTable.Launch> table = io.github.tornadoattention.ptx.LaunchTable.launches(
                prefill, 0, KernelManifest.shipped());
        assertEquals(1, table.size());
        int smem = table.get(0).dynamicSharedBytes();
        assertTrue(smem > 48 * 1024, "D=256's ptx-cuda tile uses more than 48 KB: " + smem);
        HalfFloatArray q = new HalfFloatArray((int) prefill.queryElements()), k = new HalfFloatArray((int) prefill.kvElements());
        HalfFloatArray v = new HalfFloatArray((int) prefill.kvElements()), o = new HalfFloatArray((int) prefill.outputElements());
        FloatArray lse = new FloatArray(prefill.logSumExpElements());
        LibraryTaskDescriptor d = att.forward(q, k, v, o, lse);
        assertEquals(ForwardLibraryTask.FORWARD, d.getFunctionName());
        assertEquals(List.of(Access.READ_ONLY, Access.READ_ONLY, Access.READ_ONLY, Access.WRITE_ONLY, Access.WRITE_ONLY),
                List.of(d.getAccess()));
        FakeCuda cuda = new FakeCuda(90);
        cuda.current = 0xc0ffee;
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        context.prepare(d.getFunctionName(), d.getParameters(), d.getTuning());
        String entry = table.get(0).entry();
        assertTrue(cuda.calls.contains("allow " + entry + " smem " + smem), cuda.calls.toString());
        cuda.calls.clear();
        long[] p = {16, 32, 48, 64, 80};
        context.dispatch(d.getFunctionName(), d.getParameters(), p, d.getTuning());
        long params = 1000;   // the fake driver's first cuMemAlloc: the params block
        assertEquals(List.of("launch " + entry + " grid " + table.get(0).gridX() + "x" + table.get(0).gridY() + "x"
                + table.get(0).gridZ() + " block " + table.get(0).threads() + " smem " + smem + " stream 5eed args "
                + java.util.Arrays.toString(new long[] {16, 32, 48, 64, 80, params})), cuda.calls);
        assertArrayEquals(KernelParams.of(prefill, 0), ((LibraryCall) d.getTuning()).params());

        io.github.tornadoattention.AttentionShape decode = io.github.tornadoattention.AttentionShape.builder().batch(2)
                .heads(8).kvHeads(2).queryLength(1).kvLength(5000).headDim(128).build();
        ForwardLibraryTask dec = ForwardLibraryTask.create(decode, 132);
        int splits = io.github.tornadoattention.ptx.LaunchTable.decodeSplits(decode, 132, KernelManifest.shipped());
        LibraryCall call = ((LibraryCall) dec.forward(new HalfFloatArray((int) decode.queryElements()),
                new HalfFloatArray((int) decode.kvElements()), new HalfFloatArray((int) decode.kvElements()),
                new HalfFloatArray((int) decode.outputElements()), new FloatArray(decode.logSumExpElements())).getTuning());
        List<LibraryCall.Launch> l = call.launches(new long[] {16, 32, 48, 64, 80}, new LibraryCall.Workspace(0xc0, 0xa0, 0xb0));
        assertEquals(2, l.size());
        assertArrayEquals(new long[] {16, 32, 48, 0xa0, 0xb0, 0xc0}, l.get(0).arguments());
        assertArrayEquals(new long[] {0xa0, 0xb0, 64, 80, 0xc0}, l.get(1).arguments());
        assertEquals(splits, call.splits());
        assertEquals(io.github.tornadoattention.ptx.LaunchTable.decodeWorkspace(decode, splits).partialOFloats(),
                call.partialOFloats());

        assertEquals("o", assertThrows(InvalidArgumentException.class,
                () -> att.forward(q, k, v, new HalfFloatArray(3), lse)).argument());
        assertEquals("lse", name(() -> att.forward(q, k, v, o, new FloatArray(1))));
        assertEquals("multiprocessors", name(() -> ForwardLibraryTask.create(prefill, 0)));
    }

    @Test
    void pagedDecodeReadsThePoolThroughTheBlockTable() {
        CacheAttentionSpec spec = spec(DType.FP16, D).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        LibraryCall c = CacheLibraryTasks.create(spec, cache).call(CacheLibraryTasks.DECODE_LSE);
        int[] params = c.params();
        assertArrayEquals(KernelParams.forCache(spec, cache, false), params);
        assertEquals(PAGE, params[KernelParams.P_PAGE_SIZE]);
        assertEquals(63, params[KernelParams.P_PAGES_PER_SEQ]);
        // The pool [pages, Hkv, pageSize, D]: page stride, head stride, row stride.
        assertEquals(List.of(HKV * PAGE * D, PAGE * D, D), List.of(params[KernelParams.P_K_STRIDE],
                params[KernelParams.P_K_STRIDE + 1], params[KernelParams.P_K_STRIDE + 2]));
        assertEquals(2, params[KernelParams.P_SQ]);
        // GQA: G * Sq = 8 packed rows per KV head, one 16-row block; the KV heads are grid z, not expanded.
        assertEquals(List.of("flash_cache_decode_split_paged_d128 4x1x4 t32", "flash_cache_decode_combine_d128 4x1x1 t128"),
                geometry(c));
        long[] ptr = {0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 0x700};
        List<LibraryCall.Launch> l = c.launches(ptr, new LibraryCall.Workspace(0xc0, 0xa0, 0xb0));
        assertArrayEquals(new long[] {0x100, 0x200, 0x300, 0xa0, 0xb0, 0xc0, 0x400, 0x500, 256}, l.get(0).arguments());
        assertArrayEquals(new long[] {0xa0, 0xb0, 0x600, 0x700, 0xc0, 4}, l.get(1).arguments());
        assertEquals(4L * B * H * 2 * D, c.partialOFloats());
    }

    @Test
    void varlenPrefillTakesTheOffsetsFromTheStepArray() {
        CacheAttentionSpec spec = spec(DType.FP16, D).maxQueryLength(300).build();
        KvCacheSpec cache = KvCacheSpec.contiguous(B, HKV, CAP, D);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        LibraryCall c = att.call(CacheLibraryTasks.PREFILL);
        assertArrayEquals(KernelParams.forCache(spec, cache, true), c.params());
        // Causal D=128: the 64-row causal tile; 300 queries per slot at most: 5 tiles; one block row per (slot, head).
        assertEquals(List.of("flash_cache_fwd_d128_causal 5x16x1 t128"), geometry(c));
        long[] ptr = {0x100, 0x200, 0x300, 0x400, 0x500, 0x600};
        List<LibraryCall.Launch> l = c.launches(ptr, new LibraryCall.Workspace(0xc0, 0, 0));
        // q, k, v, o, lse (none), params, q_offsets = step + 2*B ints, lens = step, block_table (contiguous: none)
        assertArrayEquals(new long[] {0x100, 0x200, 0x300, 0x600, 0, 0xc0, 0x400 + 4 * 2 * B, 0x400, 0}, l.get(0).arguments());
        assertEquals(0, c.partialOFloats());
        LibraryCall lse = att.call(CacheLibraryTasks.PREFILL_LSE);
        long[] withLse = {0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 0x700};
        assertEquals(0x700, lse.launches(withLse, new LibraryCall.Workspace(0xc0, 0, 0)).get(0).arguments()[4]);
        // Non-causal: the 128-row tile.
        LibraryCall full = CacheLibraryTasks.create(spec.toBuilder().causal(false).build(), cache).call(CacheLibraryTasks.PREFILL);
        assertEquals(List.of("flash_cache_fwd_d128 3x16x1 t128"), geometry(full));
    }

    @Test
    void bf16SelectsTheBf16ModuleAndTakesBf16Arrays() {
        CacheAttentionSpec spec = spec(DType.BF16, 64).build();
        KvCacheSpec cache = paged(DType.BF16, 64);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        LibraryCall decode = att.call(CacheLibraryTasks.DECODE);
        assertEquals(List.of("flash_cache_decode_split_paged_bf16_d64", "flash_cache_decode_combine_bf16_d64"), entries(decode));
        assertEquals(List.of("flash_cache_bf16.ptx", "flash_cache_bf16.ptx"),
                decode.kernels().stream().map(KernelManifest.Kernel::module).toList());
        assertEquals(List.of("flash_cache_fwd_paged_bf16_d64"), entries(att.call(CacheLibraryTasks.PREFILL)));
        Arrays7 a = arrays(spec, cache, false);
        att.decode(a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o());
        // bf16 bits in ShortArrays are taken too; an fp16 array is not.
        ShortArray bits = new ShortArray(a.q().getSize());
        att.decode(bits, a.k(), a.v(), a.step(), a.blocks(), a.o());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> att.decode(new HalfFloatArray(a.q().getSize()), a.k(), a.v(), a.step(), a.blocks(), a.o()));
        assertEquals("q", e.argument());
        assertTrue(e.allowed().contains("BFloat16Array"), e.allowed());
    }

    @Test
    void scoreFeaturesSelectTheFewestFeaturesEntryAndRideInTheParams() {
        float[] sinks = new float[H];
        java.util.Arrays.fill(sinks, 0.5f);
        CacheAttentionSpec spec = spec(DType.FP16, D).window(64, 0).softcap(30f).sinks(sinks).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        LibraryCall decode = att.call(CacheLibraryTasks.DECODE);
        assertEquals(List.of("flash_cache_decode_split_paged_d128_feat", "flash_cache_decode_combine_d128"), entries(decode));
        int[] params = decode.params();
        assertEquals(KernelParams.P_COUNT + H, params.length);
        assertEquals(64, params[KernelParams.P_WINDOW_LEFT]);
        assertEquals(Float.floatToRawIntBits(30f), params[KernelParams.P_SOFTCAP]);
        assertEquals(Float.floatToRawIntBits(0.5f), params[KernelParams.P_COUNT + H - 1]);
        assertEquals(List.of("flash_cache_fwd_paged_d128_causal_feat"), entries(att.call(CacheLibraryTasks.PREFILL)));
        // Without features the plain entries run, and with sinks alone too (a sink is the softmax's starting state, no loop code).
        assertEquals("flash_cache_decode_split_paged_d128",
                entries(CacheLibraryTasks.create(spec(DType.FP16, D).build(), cache).call(CacheLibraryTasks.DECODE)).get(0));
        CacheLibraryTasks sinksOnly = CacheLibraryTasks.create(spec(DType.FP16, D).sinks(sinks).build(), cache);
        assertEquals("flash_cache_decode_split_paged_d128", entries(sinksOnly.call(CacheLibraryTasks.DECODE)).get(0));
        assertEquals(List.of("flash_cache_fwd_paged_d128_causal"), entries(sinksOnly.call(CacheLibraryTasks.PREFILL)));
        assertEquals(KernelParams.P_COUNT + H, sinksOnly.call(CacheLibraryTasks.DECODE).params().length);
    }

    @Test
    void headDimsOfTheTableAreServed() {
        for (int d : new int[] {32, 64, 96, 128, 192, 256}) {
            CacheLibraryTasks att = CacheLibraryTasks.create(spec(DType.BF16, d).build(), paged(DType.BF16, d));
            assertEquals("flash_cache_decode_split_paged_bf16_d" + d, entries(att.call(CacheLibraryTasks.DECODE)).get(0));
        }
    }

    @Test
    void badSpecsAndArraysAreRefusedByName() {
        assertEquals("headDim", name(() -> CacheLibraryTasks.create(spec(DType.FP16, 80).build(), paged(DType.FP16, 80))));
        assertEquals("cache.kvHeads", name(() -> CacheLibraryTasks.create(spec(DType.FP16, D).build(),
                KvCacheSpec.paged(B, 4, CAP, D, PAGE))));
        assertEquals("cache.dtype", name(() -> CacheLibraryTasks.create(spec(DType.BF16, D).build(), paged(DType.FP16, D))));
        assertEquals("batch*heads", name(() -> CacheLibraryTasks.create(CacheAttentionSpec.builder().batch(2).heads(32768)
                .kvHeads(1).headDim(64).maxLength(16).build(), KvCacheSpec.contiguous(2, 1, 16, 64))));
        CacheAttentionSpec spec = spec(DType.FP16, D).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        Arrays7 a = arrays(spec, cache, false);
        assertEquals("blockTable", name(() -> att.decode(a.q(), a.k(), a.v(), a.step(), new IntArray(5), a.o())));
        assertEquals("step", name(() -> att.decode(a.q(), a.k(), a.v(), new IntArray(2 * B), a.blocks(), a.o())));
        assertEquals("values", name(() -> att.decode(a.q(), a.k(), new HalfFloatArray(16), a.step(), a.blocks(), a.o())));
        assertEquals("values", name(() -> att.decode(a.q(), a.k(), a.k(), a.step(), a.blocks(), a.o())));
        assertEquals("lse", name(() -> att.decodeWithLse(a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o(), new FloatArray(3))));
        // Prefill arrays are packed: the decode's q is the wrong size.
        assertEquals("q", name(() -> att.prefill(a.q(), a.k(), a.v(), a.step(), a.blocks(), a.o())));
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> att.decode(a.q(), a.k(), a.v(), a.step(), new IntArray(5), a.o()));
        assertTrue(e.getMessage().contains("126"), e.getMessage()); // batch * pagesPerSequence
    }

    @Test
    void everyGpuCheckCaseIsServedAndCoversWhatTheCheckClaims() {
        for (LibraryGpuCheck.CacheCase c : LibraryGpuCheck.CACHE_CASES) {
            CacheAttentionSpec spec = c.spec(new java.util.SplittableRandom(1));
            CacheLibraryTasks att = CacheLibraryTasks.create(spec, c.cacheSpec());
            String function = switch (c.op()) {
                case PREFILL -> c.lse() ? CacheLibraryTasks.PREFILL_LSE : CacheLibraryTasks.PREFILL;
                case DECODE -> c.lse() ? CacheLibraryTasks.DECODE_LSE : CacheLibraryTasks.DECODE;
                case APPEND_DECODE -> c.lse() ? CacheLibraryTasks.APPEND_DECODE_LSE : CacheLibraryTasks.APPEND_DECODE;
                case FORWARD -> throw new IllegalStateException(c.name() + ": the check's cases are cache functions");
            };
            assertEquals(c.op(), att.call(function).op(), c.name());
            assertEquals(c.initialLengths().length, c.batch(), c.name());
            assertTrue(spec.maxQueryLength() <= CacheAttentionSpec.MAX_DENSE_QUERIES || c.op() == LibraryCall.Op.PREFILL, c.name());
        }
        List<LibraryGpuCheck.CacheCase> cases = LibraryGpuCheck.CACHE_CASES;
        assertTrue(cases.stream().anyMatch(c -> c.pageSize() > 0 && c.op() == LibraryCall.Op.DECODE), "paged decode");
        assertTrue(cases.stream().anyMatch(c -> c.op() == LibraryCall.Op.PREFILL && c.initialLengths()[1] > 0), "chunked prefill");
        assertTrue(cases.stream().anyMatch(c -> c.kvHeads() == 1), "MQA");
        assertTrue(cases.stream().anyMatch(c -> c.kvHeads() > 1 && c.kvHeads() < c.heads()), "GQA");
        assertTrue(cases.stream().anyMatch(c -> c.dtype() == DType.BF16 && c.op() == LibraryCall.Op.DECODE), "bf16 decode");
        assertTrue(cases.stream().anyMatch(c -> c.dtype() == DType.BF16 && c.op() == LibraryCall.Op.PREFILL), "bf16 prefill");
        assertTrue(cases.stream().anyMatch(c -> c.features().sinks() && c.features().softcap() > 0), "features");
        assertTrue(cases.stream().anyMatch(c -> c.cudaGraph() && c.op() == LibraryCall.Op.DECODE), "graph decode");
        assertTrue(cases.stream().anyMatch(c -> c.cudaGraph() && c.op() == LibraryCall.Op.PREFILL), "graph prefill");
        assertTrue(cases.stream().anyMatch(c -> c.op() == LibraryCall.Op.APPEND_DECODE && c.pageSize() > 0), "paged append-decode");
        assertTrue(cases.stream().anyMatch(c -> c.op() == LibraryCall.Op.APPEND_DECODE && c.cudaGraph()), "graph append-decode");
        assertEquals(cases.size(), cases.stream().map(LibraryGpuCheck.CacheCase::name).distinct().count(), "unique names");
    }

    /**
     * The GPU check's cases, two steps each, with each execution an emulation of the launches' ABI
     * ({@link LaunchEmulation}): the check lays its arrays out as the kernels read them, its references and comparisons
     * hold; and a paged case whose emulated launches read the pool without the block table fails.
     */
    @Test
    void gpuCheckCasesPassAgainstAnEmulationOfTheLaunches() {
        for (LibraryGpuCheck.CacheCase c : LibraryGpuCheck.CACHE_CASES) {
            LibraryGpuCheck.CacheRun run = new LibraryGpuCheck.CacheRun(c, 1);
            LibraryTaskDescriptor d = run.descriptor();
            for (int s = 0; s < 2; s++) {
                assertTrue(run.step(s, () -> emulate(run, d, d.getParameters())), c.name() + " step " + s);
            }
        }
        LibraryGpuCheck.CacheCase paged = LibraryGpuCheck.CACHE_CASES.get(0);
        assertTrue(paged.pageSize() > 0);
        LibraryGpuCheck.CacheRun run = new LibraryGpuCheck.CacheRun(paged, 1);
        LibraryTaskDescriptor d = run.descriptor();
        Object[] identityPages = d.getParameters().clone();
        IntArray identity = new IntArray(run.blocks.getSize());
        for (int i = 0; i < identity.getSize(); i++) {
            identity.set(i, i);
        }
        identityPages[((LibraryCall) d.getTuning()).positions().blockTable()] = identity;
        assertTrue(!run.step(0, () -> emulate(run, d, identityPages)), "pages read in pool order must not pass");
        // An append-decode whose launches never write the new rows fails (its cache check and its output).
        LibraryGpuCheck.CacheCase appendCase = LibraryGpuCheck.CACHE_CASES.stream()
                .filter(c -> c.op() == LibraryCall.Op.APPEND_DECODE).findFirst().orElseThrow();
        LibraryGpuCheck.CacheRun appendRun = new LibraryGpuCheck.CacheRun(appendCase, 1);
        LibraryTaskDescriptor appendOnly = appendRun.descriptor();
        LibraryCall decodeOnly = CacheLibraryTasks.create(appendRun.spec, appendRun.cacheSpec).call(
                appendCase.lse() ? CacheLibraryTasks.DECODE_LSE : CacheLibraryTasks.DECODE);
        Object[] decodeArgs = java.util.Arrays.copyOfRange(appendOnly.getParameters(), 2, appendOnly.getParameters().length);
        assertTrue(!appendRun.step(0, () -> {
            LibraryGpuCheck.fillNaN(appendRun.o);
            appendRun.lse.init(Float.NaN);
            LaunchEmulation.run(decodeOnly, decodeArgs);
        }), "an append-decode that does not append must not pass");
    }

    /** One emulated execution: O and lse poisoned (as the GPU check's tasks do), then the launches' writes. */
    private static void emulate(LibraryGpuCheck.CacheRun run, LibraryTaskDescriptor d, Object[] args) {
        LibraryGpuCheck.fillNaN(run.o);
        run.lse.init(Float.NaN);
        LaunchEmulation.run((LibraryCall) d.getTuning(), args);
    }

    @Test
    void contextRunsPagedDecodeAndPrefillWithTheExactDriverCalls() {
        CacheAttentionSpec spec = spec(DType.FP16, D).maxQueryLength(16).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        CacheLibraryTasks att = CacheLibraryTasks.create(spec, cache);
        FakeCuda cuda = new FakeCuda(90);
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        Arrays7 d = arrays(spec, cache, false);
        LibraryTaskDescriptor decode = att.decodeWithLse(d.q(), d.k(), d.v(), d.step(), d.blocks(), d.o(), d.lse());
        Arrays7 p = arrays(spec, cache, true);
        LibraryTaskDescriptor prefill = att.prefill(p.q(), p.k(), p.v(), p.step(), p.blocks(), p.o());
        context.prepare(decode.getFunctionName(), decode.getParameters(), decode.getTuning());
        context.prepare(prefill.getFunctionName(), prefill.getParameters(), prefill.getTuning());
        context.prepare(decode.getFunctionName(), decode.getParameters(), decode.getTuning());
        assertEquals(2, context.preparedCalls());
        // 16 queries x G = 64 rows per KV head: 4 row blocks; workspace 4 splits x B*H*16 rows.
        assertEquals(List.of("push c0ffee", "cc", "load flash_cache_decode_split_paged_d128",
                "function flash_cache_decode_split_paged_d128", "load flash_cache_decode_combine_d128",
                "function flash_cache_decode_combine_d128", "malloc 128", "copy 32", "malloc " + 4L * 4 * B * H * 16 * D,
                "malloc " + 4L * 4 * B * H * 16, "pop",
                "push c0ffee", "load flash_cache_fwd_paged_d128_causal", "function flash_cache_fwd_paged_d128_causal",
                "malloc 128", "copy 32", "pop"), cuda.calls);
        cuda.calls.clear();

        context.dispatch(decode.getFunctionName(), decode.getParameters(), new long[] {16, 32, 48, 64, 80, 96, 112},
                decode.getTuning());
        context.dispatch(prefill.getFunctionName(), prefill.getParameters(), new long[] {16, 32, 48, 64, 128, 96},
                prefill.getTuning());
        assertEquals(List.of("push c0ffee",
                "launch flash_cache_decode_split_paged_d128 grid 4x4x4 block 32 stream 5eed args [16, 32, 48, 1001, 1002, 1000, 64, 80, 256]",
                "launch flash_cache_decode_combine_d128 grid 32x1x1 block 128 stream 5eed args [1001, 1002, 96, 112, 1000, 4]",
                "pop", "push c0ffee",
                "launch flash_cache_fwd_paged_d128_causal grid 1x16x1 block 128 stream 5eed args [16, 32, 48, 96, 0, 1003, 80, 64, 128]",
                "pop"), cuda.calls);
        cuda.calls.clear();

        // A misaligned or absent pointer is refused by name before anything is enqueued.
        assertEquals("lse", name(() -> context.dispatch(decode.getFunctionName(), decode.getParameters(),
                new long[] {16, 32, 48, 64, 80, 96, 120}, decode.getTuning())));
        assertEquals("blockTable", name(() -> context.dispatch(prefill.getFunctionName(), prefill.getParameters(),
                new long[] {16, 32, 48, 64, 0, 96}, prefill.getTuning())));
        // The descriptor's call and its function name must agree.
        assertEquals("function", name(() -> context.dispatch(CacheLibraryTasks.DECODE, decode.getParameters(),
                new long[] {16, 32, 48, 64, 80, 96, 112}, decode.getTuning())));
        assertTrue(cuda.calls.isEmpty(), "nothing launched: " + cuda.calls);

        context.close();
        assertEquals(List.of("push c0ffee", "free 1000", "free 1001", "free 1002", "free 1003", "unload", "unload", "unload",
                "pop"), sortedFrees(cuda.calls));
    }

    // ---- the steady-state dispatch: launch sets kept by (call, pointers) ----

    /** A paged decode with lse over the GQA spec, its descriptor, and a context whose TornadoVM context is current. */
    private record Steady(FakeCuda cuda, AttentionLibraryContext context, LibraryTaskDescriptor d, LibraryCall call) {
        void dispatch(long... pointers) {
            context.dispatch(d.getFunctionName(), d.getParameters(), pointers, d.getTuning());
        }
    }

    private static Steady steady() {
        CacheAttentionSpec spec = spec(DType.FP16, D).build();
        KvCacheSpec cache = paged(DType.FP16, D);
        Arrays7 a = arrays(spec, cache, false);
        LibraryTaskDescriptor d = CacheLibraryTasks.create(spec, cache).decodeWithLse(a.q(), a.k(), a.v(), a.step(),
                a.blocks(), a.o(), a.lse());
        FakeCuda cuda = new FakeCuda(90);
        cuda.current = 0xc0ffee;   // TornadoVM's CUDA backend makes its context current before its calls
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        context.prepare(d.getFunctionName(), d.getParameters(), d.getTuning());
        cuda.calls.clear();
        return new Steady(cuda, context, d, (LibraryCall) d.getTuning());
    }

    private static final long[] P = {16, 32, 48, 64, 80, 96, 112};

    @Test
    void aSecondDispatchOnTheSamePointersAllocatesNothingAndOnlyLaunches() {
        Steady s = steady();
        FakeCuda cuda = s.cuda();
        s.dispatch(P);
        List<String> first = List.copyOf(cuda.calls);
        // The first dispatch marshals its two launches into one arena of its own (one allocation each).
        assertEquals(List.of(1, 0, 2, 2, 3, 2), cuda.counts());
        assertEquals(1, s.context().launchSets());
        for (int step = 0; step < 3; step++) {
            cuda.calls.clear();
            List<Integer> before = cuda.counts();
            int queries = cuda.currentQueries;
            s.dispatch(P.clone());   // TornadoVM's pointer array is new each execution: compared by value
            List<Integer> after = cuda.counts();
            assertEquals(List.of(before.get(0), before.get(1), before.get(2), before.get(3), before.get(4), before.get(5) + 2),
                    after, "no arena, allocation, marshalling or cuMemAlloc: exactly the two launches");
            assertEquals(first, cuda.calls, "the same launches, no push/pop (the context is current)");
            assertEquals(queries + 1, cuda.currentQueries, "one cuCtxGetCurrent per dispatch");
        }
        // The kept launches are the call's launches on those pointers (the ABI kernelArgumentsFollowTheKernelAbi checks).
        List<String> expected = s.call().launches(P, new LibraryCall.Workspace(1000, 1001, 1002)).stream()
                .map(l -> "launch " + l.kernel().entry() + " grid " + l.gridX() + "x" + l.gridY() + "x" + l.gridZ()
                        + " block " + l.kernel().threads() + " stream 5eed args " + java.util.Arrays.toString(l.arguments()))
                .toList();
        assertEquals(expected, first);
        assertEquals(1, s.context().launchSets());
        s.context().close();
        assertEquals(cuda.arenasMade, cuda.arenasClosed, "close frees every launch set's arguments");
    }

    /**
     * The Java heap, too: 10000 steady-state dispatches (through the provider, as TornadoVM calls it, with one
     * invocation) allocate less than a byte each on this thread, i.e. nothing but the measurement's own objects.
     */
    @Test
    void aSteadyStateDispatchAllocatesNothingOnTheJavaHeap() {
        Steady s = steady();
        s.cuda().record = false;
        AttentionLibrary provider = new AttentionLibrary();
        boolean[] reference = {true, true, true, true, true, true, true};
        uk.ac.manchester.tornado.runtime.library.spi.LibraryInvocation invocation =
                new uk.ac.manchester.tornado.runtime.library.spi.LibraryInvocation(s.d().getParameters(), P.clone(),
                        reference, null, 1, new AttentionLibrary.Context(s.context()), s.d().getTuning());
        String function = s.d().getFunctionName();
        com.sun.management.ThreadMXBean threads =
                (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        assertTrue(threads.isThreadAllocatedMemorySupported() && threads.isThreadAllocatedMemoryEnabled());
        for (int i = 0; i < 100; i++) {
            provider.dispatch(function, invocation);   // the set made, classes loaded
        }
        int n = 10_000;
        int launches = s.cuda().launches;
        long before = threads.getCurrentThreadAllocatedBytes();
        for (int i = 0; i < n; i++) {
            provider.dispatch(function, invocation);
        }
        long bytes = threads.getCurrentThreadAllocatedBytes() - before;
        assertEquals(launches + 2 * n, s.cuda().launches);
        assertTrue(bytes < n, bytes + " bytes allocated by " + n + " dispatches");
        assertEquals(1, s.context().launchSets());
        assertEquals(1, s.cuda().arenasMade);
    }

    /**
     * DispatchTimer: off, a dispatch records nothing; on, it brackets its launches with two events on TornadoVM's
     * stream, a drain returns the device time per function and the events are reused; a capture is not timed; a
     * closed context's pending dispatches are dropped and its events destroyed.
     */
    @Test
    void theDispatchTimerBracketsTheLaunchesWithEventsOnlyWhenOnAndOutsideACapture() {
        Steady s = steady();
        FakeCuda cuda = s.cuda();
        s.dispatch(P);
        List<String> launches = List.copyOf(cuda.calls);
        cuda.calls.clear();
        s.dispatch(P);
        assertEquals(launches, cuda.calls, "off: only the launches");
        String function = s.call().function();
        try {
            DispatchTimer.enable(true);
            cuda.calls.clear();
            s.dispatch(P);
            assertEquals(6, cuda.calls.size(), cuda.calls.toString());
            String start = cuda.calls.get(0).substring("event ".length()), end = cuda.calls.get(1).substring("event ".length());
            assertEquals(List.of("record " + start + " stream 5eed"), cuda.calls.subList(2, 3));
            assertEquals(launches, cuda.calls.subList(3, 5), "the launches between the two records");
            assertEquals("record " + end + " stream 5eed", cuda.calls.get(5));
            cuda.calls.clear();
            s.dispatch(P);   // a second pair: the first awaits its drain
            assertEquals(2, cuda.calls.stream().filter(c -> c.startsWith("event ")).count());
            cuda.calls.clear();
            assertEquals(java.util.Map.of(function, new DispatchTimer.Totals(2, 0.25 + 0.5)), DispatchTimer.drain());
            assertEquals("elapsed " + start + " " + end + " in c0ffee", cuda.calls.get(1), "timed in the dispatch's context");
            assertEquals(java.util.Map.of(), DispatchTimer.drain(), "drained once");
            cuda.calls.clear();
            s.dispatch(P);
            assertTrue(cuda.calls.stream().noneMatch(c -> c.startsWith("event ")), "a drained pair is reused");
            cuda.capturing = true;
            cuda.calls.clear();
            s.dispatch(P);
            assertEquals(launches, cuda.calls, "captured into a CUDA graph: not timed");
            cuda.capturing = false;
            // A call that asks for it is timed with the timer off, and drained on its own.
            DispatchTimer.drain();   // the reuse check's dispatch
            DispatchTimer.enable(false);
            cuda.calls.clear();
            s.dispatch(P);
            assertEquals(launches, cuda.calls, "timer off: not timed");
            s.call().timeOnDevice(true);
            s.dispatch(P);
            s.dispatch(P);
            assertTrue(cuda.calls.stream().filter(c -> c.startsWith("record ")).count() == 4, cuda.calls.toString());
            int before = cuda.elapsedCalls;
            double ms = DispatchTimer.drainMillis(s.call());
            assertEquals(0.25 * (before + 1) + 0.25 * (before + 2), ms, 1e-9, "its two dispatches");
            assertTrue(Double.isNaN(DispatchTimer.drainMillis(s.call())), "drained once: NaN");
            s.call().timeOnDevice(false);
            DispatchTimer.enable(true);
            s.dispatch(P);   // pending for the close below
            s.context().close();
            assertEquals(4, cuda.calls.stream().filter(c -> c.startsWith("destroy ")).count(), "both pairs destroyed");
            assertEquals(java.util.Map.of(), DispatchTimer.drain(), "the closed context's pending dispatch is dropped");
        } finally {
            DispatchTimer.enable(false);
            DispatchTimer.drain();
        }
    }

    @Test
    void aContextNotCurrentIsPushedAndPoppedAroundTheLaunches() {
        Steady s = steady();
        s.cuda().current = 0xbeef;   // another context is current on this thread
        s.dispatch(P);
        s.cuda().calls.clear();
        s.dispatch(P);
        assertEquals("push c0ffee", s.cuda().calls.getFirst());
        assertEquals("pop", s.cuda().calls.getLast());
        assertEquals(4, s.cuda().calls.size());
        assertTrue(s.cuda().contexts.isEmpty(), "the caller's context is current again");
    }

    @Test
    void changedPointersMakeANewCheckedSetAndChangedArgumentsAreStillRefused() {
        Steady s = steady();
        FakeCuda cuda = s.cuda();
        s.dispatch(P);
        long[] moved = P.clone();
        moved[5] = 0x2000;   // o moved
        cuda.calls.clear();
        s.dispatch(moved);
        assertEquals(2, s.context().launchSets());
        assertEquals(2, cuda.arenasMade);
        assertTrue(cuda.calls.get(1).contains("args [1001, 1002, 8192, 112,"), cuda.calls.get(1));
        // A bad pointer never reaches a set: refused by name, nothing launched, nothing kept.
        long[] misaligned = P.clone();
        misaligned[6] = 120;
        cuda.calls.clear();
        assertEquals("lse", name(() -> s.dispatch(misaligned)));
        long[] absent = P.clone();
        absent[1] = 0;
        assertEquals("keys", name(() -> s.dispatch(absent)));
        assertTrue(cuda.calls.isEmpty(), cuda.calls.toString());
        assertEquals(2, s.context().launchSets());
        // The same pointers with a changed argument (an array of the wrong size): refused although their set is kept.
        Object[] changed = s.d().getParameters().clone();
        changed[s.call().positions().o()] = new HalfFloatArray(16);
        assertEquals("o", name(() -> s.context().dispatch(s.d().getFunctionName(), changed, P, s.d().getTuning())));
        assertEquals("devicePointers", name(() -> s.dispatch(16, 32)));
        assertTrue(cuda.calls.isEmpty(), cuda.calls.toString());
    }

    @Test
    void launchSetsAreBoundedAndTheOldestIsDroppedWithItsArguments() {
        Steady s = steady();
        FakeCuda cuda = s.cuda();
        int sets = AttentionLibraryContext.MAX_LAUNCH_SETS + 5;
        for (int i = 0; i < sets; i++) {
            long[] p = P.clone();
            p[0] = 16L * (i + 1);   // q at another buffer each time
            s.dispatch(p);
        }
        assertEquals(AttentionLibraryContext.MAX_LAUNCH_SETS, s.context().launchSets());
        assertEquals(sets, cuda.arenasMade);
        assertEquals(5, cuda.arenasClosed, "a dropped set's arguments are freed");
        assertEquals(3, cuda.mallocs, "launch sets never touch device memory: the one workspace (params, partials)");
        // The least recently used went first: the first pointer set is made again, the last one is still kept.
        int made = cuda.arenasMade;
        long[] last = P.clone();
        last[0] = 16L * sets;
        s.dispatch(last);
        assertEquals(made, cuda.arenasMade);
        long[] firstSet = P.clone();
        firstSet[0] = 16;
        s.dispatch(firstSet);
        assertEquals(made + 1, cuda.arenasMade);
        assertEquals(AttentionLibraryContext.MAX_LAUNCH_SETS, s.context().launchSets());
        s.context().close();
        assertEquals(cuda.arenasMade, cuda.arenasClosed);
    }

    @Test
    void aHandMadeDescriptorFindsItsLaunchesAgainByItsScalars() {
        FakeCuda cuda = new FakeCuda(90);
        cuda.current = 0xc0ffee;
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        context.dispatch(AttentionLibraryTasks.DECODE, args(), pointers(16, 32, 48, 64, 80), null);
        List<String> first = List.copyOf(cuda.calls.subList(cuda.calls.size() - 2, cuda.calls.size()));
        List<Integer> before = cuda.counts();
        cuda.calls.clear();
        // New arrays and boxes of the same sizes and scalars: the same call, its launch set found again.
        context.dispatch(AttentionLibraryTasks.DECODE, args(), pointers(16, 32, 48, 64, 80), null);
        assertEquals(first, cuda.calls);
        assertEquals(before.get(0), cuda.counts().get(0));
        assertEquals(before.get(3), cuda.counts().get(3));
        assertEquals(1, context.launchSets());
        // Other scalars: another call (another shape), refused arrays still named.
        Object[] other = args(B, H, HKV, SQ, 2000, D);
        context.dispatch(AttentionLibraryTasks.DECODE, other, pointers(16, 32, 48, 64, 80), null);
        assertEquals(2, context.launchSets());
        assertEquals(2, context.preparedCalls());
        Object[] small = args();
        small[AttentionLibraryTasks.ARG_O] = new HalfFloatArray(8);
        assertEquals("o", name(() -> context.dispatch(AttentionLibraryTasks.DECODE, small, pointers(16, 32, 48, 64, 80), null)));
        context.close();
    }

    @Test
    void kernelParamsHoldOneSlotPerArgumentAndTheDriversArrayOfPointersToThem() {
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
            long[] arguments = {0x7f00_0000_1000L, 0, 256, -1};
            java.lang.foreign.MemorySegment params = LibraryCuda.marshal(arena, arguments);
            assertEquals(8L * arguments.length, params.byteSize());
            assertArrayEquals(arguments, LibraryCuda.arguments(params));
            // An int argument is the low 4 bytes of its slot (little-endian): what the kernel reads for a .u32 param.
            assertEquals(256, params.getAtIndex(java.lang.foreign.ValueLayout.ADDRESS, 2).reinterpret(4)
                    .get(java.lang.foreign.ValueLayout.JAVA_INT, 0));
        }
    }

    /** The close's calls with its frees in address order (the prepared calls are kept in a hash map). */
    private static List<String> sortedFrees(List<String> calls) {
        List<String> frees = calls.stream().filter(c -> c.startsWith("free")).sorted().toList();
        List<String> out = new ArrayList<>();
        int next = 0;
        for (String c : calls) {
            out.add(c.startsWith("free") ? frees.get(next++) : c);
        }
        return out;
    }

    private static List<String> entries(LibraryCall c) {
        return c.kernels().stream().map(KernelManifest.Kernel::entry).toList();
    }

    /** Each launch as "entry XxYxZ tThreads" (pointer values are irrelevant to the geometry). */
    private static List<String> geometry(LibraryCall c) {
        long[] pointers = new long[c.argumentCount()];
        java.util.Arrays.fill(pointers, 16);
        return c.launches(pointers, new LibraryCall.Workspace(16, 16, 16)).stream()
                .map(l -> l.kernel().entry() + " " + l.gridX() + "x" + l.gridY() + "x" + l.gridZ() + " t" + l.kernel().threads())
                .toList();
    }

    private static String name(Runnable r) {
        return assertThrows(InvalidArgumentException.class, r::run).argument();
    }

    /**
     * Records the driver calls (device pointers are 1000, 1001, ...) and counts the host memory made for launch
     * arguments: argument arenas made and closed, allocations from them, kernelParams marshalled. It keeps the thread's
     * context stack as the driver does ({@link #current}: what TornadoVM made current with cuCtxSetCurrent, 0: none);
     * {@code currentContext} is not recorded in {@link #calls}, only counted.
     */
    static final class FakeCuda implements LibraryCuda {
        final List<String> calls = new ArrayList<>();
        final Map<Long, String> entries = new HashMap<>();
        final java.util.ArrayDeque<Long> contexts = new java.util.ArrayDeque<>();
        final int cc;
        long next = 1000;
        long current;
        int currentQueries, arenasMade, arenasClosed, arenaAllocations, marshalled, mallocs, launches;
        /** False: launches are counted, not recorded (a recording allocates its line). */
        boolean record = true;

        FakeCuda(int cc) {
            this.cc = cc;
        }

        /** The counters, for comparing before and after: arenas made, closed, allocations, marshals, mallocs, launches. */
        List<Integer> counts() {
            return List.of(arenasMade, arenasClosed, arenaAllocations, marshalled, mallocs, launches);
        }

        @Override
        public long currentContext() {
            currentQueries++;
            return contexts.isEmpty() ? current : contexts.peek();
        }

        @Override
        public void pushContext(long context) {
            calls.add("push " + Long.toHexString(context));
            contexts.push(context);
        }

        @Override
        public void popContext() {
            calls.add("pop");
            contexts.pop();
        }

        @Override
        public java.lang.foreign.Arena argumentArena() {
            arenasMade++;
            java.lang.foreign.Arena inner = java.lang.foreign.Arena.ofShared();
            return new java.lang.foreign.Arena() {
                @Override
                public java.lang.foreign.MemorySegment allocate(long byteSize, long byteAlignment) {
                    arenaAllocations++;
                    return inner.allocate(byteSize, byteAlignment);
                }

                @Override
                public java.lang.foreign.MemorySegment.Scope scope() {
                    return inner.scope();
                }

                @Override
                public void close() {
                    arenasClosed++;
                    inner.close();
                }
            };
        }

        @Override
        public java.lang.foreign.MemorySegment kernelParams(java.lang.foreign.SegmentAllocator allocator, long[] arguments) {
            marshalled++;
            return LibraryCuda.super.kernelParams(allocator, arguments);
        }

        @Override
        public int computeCapability() {
            calls.add("cc");
            return cc;
        }

        @Override
        public long loadModule(String ptx) {
            assertEquals(1, ptx.split("\\.entry ", -1).length - 1, "one entry of the shipped cache module");
            calls.add("load " + ptx.replaceFirst("(?s).*\\.entry (\\w+)\\(.*", "$1"));
            return 7;
        }

        @Override
        public long function(long module, String entry) {
            calls.add("function " + entry);
            long handle = 0x10000L + entries.size();
            entries.put(handle, entry);
            return handle;
        }

        @Override
        public void unloadModule(long module) {
            calls.add("unload");
        }

        @Override
        public long malloc(long bytes) {
            mallocs++;
            calls.add("malloc " + bytes);
            return next++;
        }

        @Override
        public void free(long pointer) {
            calls.add("free " + pointer);
        }

        @Override
        public void copyToDevice(long destination, int[] values) {
            calls.add("copy " + values.length);
        }

        @Override
        public void launch(long function, int gridX, int gridY, int gridZ, int blockX, int sharedBytes, long stream,
                           java.lang.foreign.MemorySegment kernelParams) {
            launches++;
            if (!record) {
                return;
            }
            calls.add("launch " + entries.get(function) + " grid " + gridX + "x" + gridY + "x" + gridZ + " block " + blockX
                    + (sharedBytes > 0 ? " smem " + sharedBytes : "") + " stream " + Long.toHexString(stream) + " args "
                    + java.util.Arrays.toString(LibraryCuda.arguments(kernelParams)));
        }

        @Override
        public void allowDynamicShared(long function, int bytes) {
            calls.add("allow " + entries.get(function) + " smem " + bytes);
        }

        /** Whether the stream is being captured (set by a test). */
        boolean capturing;
        /** The device time each elapsedMillis reports (the n-th pair drained gets n + 1 of these). */
        int elapsedCalls;

        @Override
        public boolean isCapturing(long stream) {
            return capturing;
        }

        @Override
        public long createEvent() {
            long event = 0xe000L + next++;
            calls.add("event " + Long.toHexString(event));
            return event;
        }

        @Override
        public void recordEvent(long event, long stream) {
            calls.add("record " + Long.toHexString(event) + " stream " + Long.toHexString(stream));
        }

        @Override
        public float elapsedMillis(long start, long end) {
            calls.add("elapsed " + Long.toHexString(start) + " " + Long.toHexString(end) + " in "
                    + Long.toHexString(contexts.isEmpty() ? current : contexts.peek()));
            return 0.25f * ++elapsedCalls;
        }

        @Override
        public void destroyEvent(long event) {
            calls.add("destroy " + Long.toHexString(event));
        }
    }
}
