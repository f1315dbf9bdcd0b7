package io.github.tornadoattention.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class BenchShapeTest {

    @Test
    void specRoundTrips() {
        for (BenchShape s : BenchShape.ALL) {
            assertEquals(s, BenchShape.parse(s.spec()));
        }
        assertThrows(IllegalArgumentException.class, () -> BenchShape.parse("1,2,3"));
    }

    @Test
    void listsTheIssuesShapes() {
        assertEquals(12, BenchShape.PREFILL.size());
        assertEquals(6, BenchShape.PREFILL.stream().filter(BenchShape::causal).count());
        assertTrue(BenchShape.PREFILL.contains(new BenchShape(4, 16, 16, 2048, 2048, 128, false)));
        assertTrue(BenchShape.PREFILL.contains(new BenchShape(1, 32, 32, 4096, 4096, 128, true)));
        assertEquals(4, BenchShape.DECODE.size());
        assertTrue(BenchShape.DECODE.stream().allMatch(s -> s.batch() == 8 && s.heads() == 32 && s.kvHeads() == 8
                && s.seq() == 1 && s.dim() == 128));
        assertEquals(4096, BenchShape.DECODE.get(0).kvSeq());
        assertEquals(32768, BenchShape.DECODE.get(3).kvSeq());
        assertTrue(BenchShape.SEEDS.stream().allMatch(s -> s.seq() <= 512));
    }

    @Test
    void labelsAreReadable() {
        assertEquals("(16,8,512,64) causal", new BenchShape(16, 8, 8, 512, 512, 64, true).label());
        assertEquals("decode B=8 Hq=32 Hkv=8 Skv=4096 D=128", BenchShape.DECODE.get(0).label());
    }
}
