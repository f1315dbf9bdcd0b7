package io.github.tornadoattention.measure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class TimingStatsTest {

    @Test
    void medianOfOddAndEvenCounts() {
        assertEquals(3, TimingStats.of(new double[] {5, 1, 3}).medianMillis());
        assertEquals(2.5, TimingStats.of(new double[] {4, 1, 2, 3}).medianMillis());
        assertEquals(1, TimingStats.of(new double[] {4, 1, 2, 3}).minMillis());
    }

    @Test
    void theIntervalBracketsTheMedianAndNarrowsWithMoreSamples() {
        double[] few = new double[9];
        double[] many = new double[999];
        for (int i = 0; i < many.length; i++) {
            double x = 10 + (i * 7919 % 101) / 100.0;
            many[i] = x;
            if (i < few.length) {
                few[i] = x;
            }
        }
        TimingStats a = TimingStats.of(few);
        TimingStats b = TimingStats.of(many);
        assertTrue(a.lowMillis() <= a.medianMillis() && a.medianMillis() <= a.highMillis());
        assertTrue(b.lowMillis() <= b.medianMillis() && b.medianMillis() <= b.highMillis());
        assertTrue(b.highMillis() - b.lowMillis() < a.highMillis() - a.lowMillis());
    }

    @Test
    void teraflopsAtTheMedian() {
        assertEquals(2.0, TimingStats.of(new double[] {1, 1, 1}).teraflops(2e9), 1e-12);
        assertThrows(IllegalArgumentException.class, () -> TimingStats.of(new double[0]));
    }
}
