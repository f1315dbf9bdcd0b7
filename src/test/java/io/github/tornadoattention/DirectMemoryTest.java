package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * {@link DirectMemory} and the KV cache's use of it. The arithmetic here; the limit, the pool and a cache that does or
 * does not fit in a child JVM with {@code -XX:MaxDirectMemorySize=64m}, on a device whose memory is
 * {@code Arena.ofAuto()} segments as TornadoVM's arrays are (tornado-kernels' DirectMemoryFakeDriverTest does the
 * same on the TornadoVM devices).
 */
class DirectMemoryTest {
    private static final long MIB = 1 << 20;

    @Test
    void theSuggestedLimitCoversTheBytesInWholeGibibytesWithOneToSpare() {
        assertEquals("2g", DirectMemory.suggestedLimit(1));
        assertEquals("2g", DirectMemory.suggestedLimit(1L << 30));
        assertEquals("3g", DirectMemory.suggestedLimit((1L << 30) + 1));
        // 32 layers of an 8 x 8 x 32857 x 128 fp16 cache (K and V): 32.1 GiB.
        assertEquals("34g", DirectMemory.suggestedLimit(32 * 2 * (2L * 8 * 8 * 32857 * 128)));
        assertEquals("1.00 GiB (1073741824 bytes)", DirectMemory.bytes(1L << 30));
        assertEquals("64.0 MiB (67108916 bytes)", DirectMemory.bytes(64 * MIB + 52));
        assertEquals("52 bytes", DirectMemory.bytes(52));
    }

    @Test
    void theLimitIsMaxDirectMemorySizeOrTheMaximumHeapAndTheAvailableRoomIsWhatIsLeft() {
        long limit = DirectMemory.limit();
        assertTrue(limit > 0);
        assertTrue(DirectMemory.available() <= limit - DirectMemory.used() || DirectMemory.available() == 0);
        MemorySegment held = Arena.ofAuto().allocate(4 * MIB, 1);   // as a TornadoVM array is made
        assertTrue(DirectMemory.used() >= 4 * MIB, "an ofAuto segment counts in the direct pool: " + DirectMemory.used());
        assertEquals(4 * MIB, held.byteSize());
    }

    @Test
    void moreThanTheRoomIsRefusedWithTheNumbersAndHowToRaiseTheLimit() {
        long bytes = DirectMemory.limit() + 1;
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> DirectMemory.requireRoom("spec", "slots 8, kvHeads 8", "a KV cache on test", bytes));
        assertEquals("spec", e.argument());
        assertEquals("slots 8, kvHeads 8", e.value());
        assertTrue(e.allowed().startsWith("a KV cache on test needs " + DirectMemory.bytes(bytes)
                + " of the JVM's direct memory, more than the "), e.getMessage());
        assertTrue(e.allowed().contains("(limit " + DirectMemory.bytes(DirectMemory.limit()) + ", "), e.getMessage());
        assertTrue(e.allowed().contains("-XX:MaxDirectMemorySize=" + DirectMemory.suggestedLimit(DirectMemory.used() + bytes)),
                e.getMessage());
        DirectMemory.requireRoom("spec", "small", "a small cache", 1);   // what fits passes
    }

    @Test
    void anOutOfMemoryErrorOfTheAllocationBecomesTheSameRefusal() {
        // The estimate (1 byte) misses what the allocation takes: the JVM's own refusal is turned into ours.
        long tooMuch = DirectMemory.limit() + 1;
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> DirectMemory.allocate(
                "cacheSpec", "KvCacheSpec[...]", "a K or V cache array", 1, () -> Arena.ofAuto().allocate(tooMuch, 1)));
        assertEquals("cacheSpec", e.argument());
        assertInstanceOf(OutOfMemoryError.class, e.getCause());
        assertTrue(e.allowed().startsWith("a K or V cache array (about 1 bytes) did not fit in the JVM's direct memory"
                + " (Cannot reserve "), e.getMessage());
        assertTrue(e.allowed().contains(" bytes of direct buffer memory (allocated: "), e.getMessage());
        Object made = new Object();
        assertSame(made, DirectMemory.allocate("x", 1, "y", 1, () -> made));
    }

    /** The child JVM's findings, one "key value" line each. */
    @Test
    void underASmallLimitACacheThatDoesNotFitIsRefusedAndLeavesNothingBehind() throws Exception {
        Map<String, String> found = runChild(Child.class, "-XX:MaxDirectMemorySize=64m");
        assertEquals(String.valueOf(64 * MIB), found.get("limit"), found.toString());
        assertEquals("ok", found.get("fits"), "a 32 MiB cache fits under 64 MiB: " + found);
        String refused = found.get("refused");
        long needed = 2 * 2L * 4 * 8 * 4096 * 128 + 4 * 13;   // K and V in fp16, the step info
        assertTrue(refused.startsWith("spec = slots 4, kvHeads 8, capacity 4096, headDim 128, dtype fp16: a KV cache on"
                + " ofauto needs " + DirectMemory.bytes(needed) + " of the JVM's direct memory, more than the "), refused);
        assertTrue(refused.contains("(limit " + DirectMemory.bytes(64 * MIB) + ", "), refused);
        assertTrue(refused.contains("; raise the limit with -XX:MaxDirectMemorySize=2g or more"), refused);
        assertEquals("0 0", found.get("refused-left"), "no allocation made, none live: " + found);
        assertTrue(found.get("raced").contains("Cannot reserve"), "the allocation's own error is named: " + found);
        assertEquals("1 0", found.get("raced-left"), "K was allocated, then freed when V failed: " + found);
        assertEquals("true", found.get("pool-back"), "the direct pool returns to where it was: " + found);
    }

    /** Runs {@code main} in a JVM with {@code options} and the test class path; its "key value" lines. */
    static Map<String, String> runChild(Class<?> main, String... options) throws IOException, InterruptedException {
        List<String> command = new java.util.ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java")
                .toString(), "-cp", System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"))));
        command.addAll(List.of(options));
        command.add(main.getName());
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        p.getOutputStream().close();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), out);
        assertEquals(0, p.exitValue(), out);
        Map<String, String> found = new HashMap<>();
        for (String line : out.split("\\R")) {
            int space = line.indexOf(' ');
            if (line.startsWith("@") && space > 0) {
                found.put(line.substring(1, space), line.substring(space + 1));
            }
        }
        return found;
    }

    /** In the child: a cache that fits, one that does not, and one whose estimate misses. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            System.out.println("@limit " + DirectMemory.limit());
            long before = DirectMemory.used();
            OfAutoDevice device = new OfAutoDevice(false);
            try (KvCache cache = device.kvCache(KvCacheSpec.contiguous(1, 8, 8192, 128))) {   // 2 x 16 MiB
                System.out.println("@fits " + (cache.isOpen() ? "ok" : "closed"));
            }
            long made = device.allocations();
            try {
                device.kvCache(KvCacheSpec.contiguous(4, 8, 4096, 128));   // 2 x 32 MiB and the step info
                System.out.println("@refused none");
            } catch (InvalidArgumentException e) {
                System.out.println("@refused " + e.getMessage());
            }
            System.out.println("@refused-left " + (device.allocations() - made) + " " + device.live.size());
            // Under-reported (as if another thread took the room): K (40 MiB) fits, V does not.
            OfAutoDevice racing = new OfAutoDevice(true);
            try {
                racing.kvCache(KvCacheSpec.contiguous(5, 8, 4096, 128));
                System.out.println("@raced none");
            } catch (InvalidArgumentException e) {
                System.out.println("@raced " + e.getMessage());
            }
            System.out.println("@raced-left " + racing.allocations() + " " + racing.live.size());
            boolean back = false;
            for (int i = 0; i < 50 && !back; i++) {
                System.gc();
                Thread.sleep(20);
                back = DirectMemory.used() <= before;
            }
            System.out.println("@pool-back " + back);
        }
    }

    /** A device whose memory is Arena.ofAuto() segments, as TornadoVM's arrays are (freed by the collector). */
    static final class OfAutoDevice extends AttentionDevice {
        final Map<Long, MemorySegment> live = new HashMap<>();
        private final boolean underReports;

        OfAutoDevice(boolean underReports) {
            super("ofauto");
            this.underReports = underReports;
        }

        @Override
        public String name() {
            return "ofAuto segments";
        }

        @Override
        public void synchronize() {
        }

        @Override
        protected long directBytes(DType dtype, long length) {
            return underReports ? 0 : length * dtype.bytes();
        }

        @Override
        protected long malloc(DType dtype, long length) {
            MemorySegment s = Arena.ofAuto().allocate(length * dtype.bytes(), 1);
            live.put(s.address(), s);
            return s.address();
        }

        @Override
        protected void free(long address, long bytes) {
            live.remove(address);
        }

        @Override
        protected void copyToDevice(long destination, MemorySegment source, long bytes) {
            MemorySegment.copy(source, 0, MemorySegment.ofAddress(destination).reinterpret(bytes), 0, bytes);
        }

        @Override
        protected void copyToHost(MemorySegment destination, long source, long bytes) {
            MemorySegment.copy(MemorySegment.ofAddress(source).reinterpret(bytes), 0, destination, 0, bytes);
        }

        @Override
        protected void copyOnDevice(long destination, long source, long bytes) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void uploadInts(long destination, int[] values, int from, int count) {
            MemorySegment.copy(values, from, MemorySegment.ofAddress(destination).reinterpret(4L * count),
                    java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED, 0, count);
        }

        @Override
        protected void appendToCache(KvCache cache, KvCache.Append append) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim, DeviceTensor o,
                             DeviceTensor lse) {
            throw new UnsupportedOperationException();
        }
    }
}
