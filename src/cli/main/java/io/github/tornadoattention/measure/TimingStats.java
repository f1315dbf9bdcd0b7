package io.github.tornadoattention.measure;

import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * Summary of repeated timings: the median and a bootstrap 95% confidence interval of the median.
 * The one place timing statistics are computed (CLI, benchmarks, GPU report).
 */
public record TimingStats(int samples, double medianMillis, double lowMillis, double highMillis, double minMillis) {
    private static final int RESAMPLES = 2000;

    public static TimingStats of(double[] millis) {
        if (millis == null || millis.length == 0) {
            throw new IllegalArgumentException("millis: need at least one sample");
        }
        double[] sorted = millis.clone();
        Arrays.sort(sorted);
        // Fixed seed: the same samples always give the same interval.
        SplittableRandom random = new SplittableRandom(42);
        double[] medians = new double[RESAMPLES];
        double[] resample = new double[sorted.length];
        for (int r = 0; r < RESAMPLES; r++) {
            for (int i = 0; i < resample.length; i++) {
                resample[i] = sorted[random.nextInt(sorted.length)];
            }
            Arrays.sort(resample);
            medians[r] = median(resample);
        }
        Arrays.sort(medians);
        return new TimingStats(sorted.length, median(sorted), medians[(int) (0.025 * (RESAMPLES - 1))],
                medians[(int) Math.ceil(0.975 * (RESAMPLES - 1))], sorted[0]);
    }

    /** TFLOP/s at the median time. */
    public double teraflops(double flops) {
        return flops / (medianMillis * 1e-3) / 1e12;
    }

    private static double median(double[] sorted) {
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
