package io.github.tornadoattention.tornado.library;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.KernelParams;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The attention library's task descriptor, argument mapping and validation, and what its context asks
 * of the CUDA driver (a recording fake): everything short of a GPU and TornadoVM's CUDA backend.
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
            assertEquals(i == DecodeCall.ARG_O ? Access.WRITE_ONLY : Access.READ_ONLY, d.getAccess()[i], "argument " + i);
        }
        assertEquals(List.of(B, H, HKV, SQ, CAP, D, true, SCALE),
                List.of(d.getParameters()).subList(DecodeCall.ARG_BATCH, AttentionLibraryTasks.DECODE_ARGS));
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
        DecodeCall c = DecodeCall.of(args());
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(B).heads(H).kvHeads(HKV).headDim(D).maxQueryLength(SQ)
                .maxLength(CAP).causal(true).scale(SCALE).layout(Layout.BHSD).build();
        assertArrayEquals(KernelParams.forCache(spec, KvCacheSpec.contiguous(B, HKV, CAP, D), false), c.params());
        assertEquals("flash_cache_decode_split_d128", c.splitEntry());
        assertEquals("flash_cache_decode_combine_d128", c.combineEntry());
        assertEquals(256, c.keysPerSplit());
        assertEquals(4, c.splits());
        assertEquals(1, c.splitGridY()); // G * Sq = 4 query rows: one 16-row block
        assertEquals(B * HKV, c.splitGridZ());
        assertEquals(32, c.splitThreads());
        assertEquals(2, c.combineGridX()); // 16 rows, 8 per block at D = 128
        assertEquals(128, c.combineThreads());
        assertEquals(4L * B * H * SQ * D, c.partialOFloats());
        assertEquals(4L * B * H * SQ, c.partialLseFloats());
    }

    @Test
    void longCachesUseAtMost128SplitsOfWholeGranules() {
        DecodeCall c = DecodeCall.of(args(1, 2, 1, 1, 100_000, 64));
        assertEquals(1024, c.keysPerSplit());
        assertEquals(98, c.splits());
        assertTrue(c.splits() <= io.github.tornadoattention.ptx.DecodeSplitPolicy.MAX_SPLITS);
        assertEquals("flash_cache_decode_split_d64", c.splitEntry());
    }

    @Test
    void kernelArgumentsFollowTheKernelAbi() {
        DecodeCall c = DecodeCall.of(args());
        long[] pointers = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0, 0, 0, 0, 0, 0, 0, 0};
        assertArrayEquals(new long[] {0x1000, 0x2000, 0x3000, 0xa0, 0xb0, 0xc0, 0x5000, 0, 256},
                c.splitArguments(pointers, 0xa0, 0xb0, 0xc0));
        assertArrayEquals(new long[] {0xa0, 0xb0, 0x4000, 0, 0xc0, 4}, c.combineArguments(pointers, 0xa0, 0xb0, 0xc0));
    }

    @Test
    void badArgumentsAreNamed() {
        assertEquals("arguments", name(() -> DecodeCall.of(new Object[3])));
        assertEquals("headDim", name(() -> DecodeCall.of(args(B, H, HKV, SQ, CAP, 80)))); // no kernel table has 80
        assertEquals("queries", name(() -> DecodeCall.of(args(B, H, HKV, 17, CAP, D))));
        assertEquals("kvHeads", name(() -> DecodeCall.of(args(B, H, 3, SQ, CAP, D))));
        assertEquals("batch*heads", name(() -> DecodeCall.of(args(2, 32768, 1, 1, 1, 64))));
        Object[] a = args();
        a[DecodeCall.ARG_K] = new HalfFloatArray(16);
        assertEquals("keys", name(() -> DecodeCall.of(a)));
        Object[] b = args();
        b[DecodeCall.ARG_LENS] = new IntArray(2 * B - 1);
        assertEquals("lens", name(() -> DecodeCall.of(b)));
        Object[] c = args();
        c[DecodeCall.ARG_CAUSAL] = 1;
        assertEquals("causal", name(() -> DecodeCall.of(c)));
        Object[] d = args();
        d[DecodeCall.ARG_O] = new IntArray(1 << 20);
        assertEquals("o", name(() -> DecodeCall.of(d)));
    }

    @Test
    void devicePointersMustBePresentAndAligned() {
        assertEquals("values", name(() -> DecodeCall.checkPointers(new long[] {16, 32, 0, 48, 64})));
        assertEquals("lens", name(() -> DecodeCall.checkPointers(new long[] {16, 32, 48, 64, 72})));
        assertEquals("devicePointers", name(() -> DecodeCall.checkPointers(new long[] {16})));
        DecodeCall.checkPointers(new long[] {16, 32, 48, 64, 80, 0, 0});
    }

    private static String name(Runnable r) {
        return assertThrows(InvalidArgumentException.class, r::run).argument();
    }

    @Test
    void contextPreparesOncePerShapeAndDispatchesTwoLaunchesOnTornadoStream() {
        FakeCuda cuda = new FakeCuda(90);
        AttentionLibraryContext context = new AttentionLibraryContext(cuda, 0xc0ffee, 0x5eed);
        Object[] a = args();
        context.prepare(AttentionLibraryTasks.DECODE, a);
        context.prepare(AttentionLibraryTasks.DECODE, args()); // same shape: nothing more
        assertEquals(1, context.preparedShapes());
        // Each entry JIT-compiled as a module of its own, before any capture.
        assertEquals(List.of("push c0ffee", "cc", "load flash_cache_decode_split_d128", "function flash_cache_decode_split_d128",
                "load flash_cache_decode_combine_d128", "function flash_cache_decode_combine_d128", "malloc 128", "copy 32",
                "malloc 32768", "malloc 256", "pop"), cuda.calls);
        cuda.calls.clear();

        context.dispatch(AttentionLibraryTasks.DECODE, a, new long[] {16, 32, 48, 64, 80, 0, 0, 0, 0, 0, 0, 0, 0});
        assertEquals(List.of("push c0ffee",
                "launch flash_cache_decode_split_d128 grid 4x1x4 block 32 stream 5eed args [16, 32, 48, 1001, 1002, 1000, 80, 0, 256]",
                "launch flash_cache_decode_combine_d128 grid 2x1x1 block 128 stream 5eed args [1001, 1002, 64, 0, 1000, 4]",
                "pop"), cuda.calls);
        cuda.calls.clear();

        context.close();
        assertEquals(List.of("push c0ffee", "free 1000", "free 1001", "free 1002", "unload", "unload", "pop"), cuda.calls);
        assertThrows(IllegalStateException.class, () -> context.prepare(AttentionLibraryTasks.DECODE, a));
    }

    @Test
    void contextRefusesWhatItCannotRun() {
        assertEquals("context", name(() -> new AttentionLibraryContext(new FakeCuda(90), 0, 1)));
        assertEquals("stream", name(() -> new AttentionLibraryContext(new FakeCuda(90), 1, 0)));
        AttentionLibraryContext context = new AttentionLibraryContext(new FakeCuda(90), 1, 1);
        assertEquals("function", name(() -> context.prepare("cublasSgemm", args())));
        FakeCuda old = new FakeCuda(75);
        AttentionLibraryContext turing = new AttentionLibraryContext(old, 1, 1);
        assertThrows(IllegalStateException.class, () -> turing.prepare(AttentionLibraryTasks.DECODE, args()));
        assertEquals("pop", old.calls.getLast()); // the context is popped on failure too
    }

    /** Records the driver calls; device pointers are 1000, 1001, ... */
    static final class FakeCuda implements LibraryCuda {
        final List<String> calls = new ArrayList<>();
        final int cc;
        long next = 1000;

        FakeCuda(int cc) {
            this.cc = cc;
        }

        @Override
        public void pushContext(long context) {
            calls.add("push " + Long.toHexString(context));
        }

        @Override
        public void popContext() {
            calls.add("pop");
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
            return entry.hashCode();
        }

        @Override
        public void unloadModule(long module) {
            calls.add("unload");
        }

        @Override
        public long malloc(long bytes) {
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
        public void launch(long function, int gridX, int gridY, int gridZ, int blockX, long stream, long[] arguments) {
            String entry = function == "flash_cache_decode_split_d128".hashCode() ? "flash_cache_decode_split_d128"
                    : "flash_cache_decode_combine_d128";
            calls.add("launch " + entry + " grid " + gridX + "x" + gridY + "x" + gridZ + " block " + blockX + " stream "
                    + Long.toHexString(stream) + " args " + java.util.Arrays.toString(arguments));
        }
    }
}
