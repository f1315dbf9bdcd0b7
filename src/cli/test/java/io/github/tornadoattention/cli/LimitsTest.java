package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import org.junit.jupiter.api.Test;

class LimitsTest {
    private static final AttentionShape LONG = AttentionShape.builder().batch(1).heads(8).queryLength(100_000)
            .headDim(64).build();

    @Test
    void cpuTimeIsFlopsAtTheAssumedRate() {
        Limits.Work work = Limits.Work.of(LONG, 13);
        assertEquals(13 * LONG.flops(), work.cpuFlops());
        assertEquals(work.cpuFlops() / (Limits.CPU_FLOPS_PER_CORE * Limits.cores()), work.cpuSeconds(), 1e-9);
        assertEquals(2L * (2 * LONG.queryElements() + 2 * LONG.kvElements()), work.offHeapBytes());
        assertTrue(work.heapBytes() > 16 * LONG.queryElements(), "inputs as floats and O as doubles at least");
    }

    @Test
    void overTheLimitThrowsUnlessForced() {
        Limits.Work work = Limits.Work.of(LONG, 1).times(1e6);
        Limits.Exceeded e = assertThrows(Limits.Exceeded.class, () -> work.check("--seq 100000", false));
        assertTrue(e.getMessage().startsWith("--seq 100000: needs about "), e.getMessage());
        assertTrue(e.getMessage().contains("over the 10.0 min limit; pass --force to run anyway"), e.getMessage());
        assertDoesNotThrow(() -> work.check("--seq 100000", true));
        assertDoesNotThrow(() -> Limits.Work.of(LONG, 0).check("--seq 100000", false)); // no CPU reference, 410 MB
    }

    /**
     * decode on a TornadoVM device: 32 layers of an 8-slot, 8-KV-head, 32K-token D=128 cache (1.07 GB each, kept on the
     * host as TornadoVM arrays) over the JVM's direct-memory limit stop before any cache is made, --force or not
     * (the API would refuse the caches anyway), with the bytes, the limit and the option that raises it.
     */
    @Test
    void cachesOverTheDirectMemoryLimitAreRefusedEvenWithForce() {
        int[] lengths = new int[8];
        java.util.Arrays.fill(lengths, 32768);
        long perCache = 2 * (16L + 2L * 8 * 8 * 32857 * 128) + 16 + 4 * 25;   // K and V with headers, the step info
        long available = io.github.tornadoattention.DirectMemory.available();
        int layers = (int) Math.min(1024, available / perCache + 1);   // one layer more than fits
        Limits.Work work = Limits.Work.decode(lengths, 32, 8, 128, layers, 32857, 0, 88, 0, false, perCache);
        assertEquals(layers * perCache, work.directBytes());
        for (boolean force : new boolean[] {false, true}) {
            Limits.Exceeded e = assertThrows(Limits.Exceeded.class, () -> work.check("--context 32768 --layers " + layers, force));
            assertTrue(e.getMessage().startsWith("--context 32768 --layers " + layers + ": its " + layers + " KV cache(s) need "
                    + io.github.tornadoattention.DirectMemory.bytes(layers * perCache) + " of the JVM's direct memory"),
                    e.getMessage());
            assertTrue(e.getMessage().contains("(limit " + io.github.tornadoattention.DirectMemory.bytes(
                    io.github.tornadoattention.DirectMemory.limit()) + ")"), e.getMessage());
            assertTrue(e.getMessage().matches(".*; raise the limit with JAVA_OPTS=-XX:MaxDirectMemorySize=[0-9]+g or more,"
                    + " if the machine has the memory"), e.getMessage());
        }
        assertDoesNotThrow(() -> Limits.Work.decode(lengths, 32, 8, 128, 1, 32857, 0, 88, 0, false, 1 << 20)
                .check("--layers 1", false));
    }

    @Test
    void workInSequenceAddsTimeAndKeepsThePeakMemory() {
        AttentionShape small = AttentionShape.builder().batch(1).heads(1).queryLength(10).headDim(8).build();
        Limits.Work a = Limits.Work.of(small, 2);
        Limits.Work b = Limits.Work.of(LONG, 1);
        Limits.Work both = a.then(b);
        assertEquals(a.cpuFlops() + b.cpuFlops(), both.cpuFlops());
        assertEquals(b.heapBytes(), both.heapBytes());
        assertEquals(b.offHeapBytes(), both.offHeapBytes());
    }

    @Test
    void theScaleBoundKeepsTheLargestScoreWithinHalfTheFp32Range() {
        double largestScore = (double) Limits.maxScale(64) * 64 * 65504.0 * 65504.0;
        assertTrue(largestScore <= Float.MAX_VALUE / 2 * 1.000001, String.valueOf(largestScore));
        assertTrue(largestScore > Float.MAX_VALUE / 2 * 0.999999, String.valueOf(largestScore));
        assertEquals(0.125f, Limits.scale("0.125", 64));
        assertNull(Limits.scale(null, 64));
    }

    @Test
    void numbersKeepFourSignificantDigits() {
        assertEquals(31.80, Numbers.json(31.795312));
        assertEquals(0.002143, Numbers.json(0.0021428));
        assertNull(Numbers.json(Double.NaN));
        assertEquals("2.143 GFLOP/s", Numbers.throughput(2.143e9, 1000));
        assertEquals("321.4 TFLOP/s", Numbers.throughput(321.4e12, 1000));
        assertEquals("10.0 min", Limits.duration(600));
        assertEquals("3.00 h", Limits.duration(3 * 3600));
    }
}
