package io.github.tornadoattention.cli;

import java.math.BigDecimal;
import java.math.MathContext;
import java.util.Locale;

/** Numbers as the command line prints them: 4 significant digits, in text and in JSON. */
final class Numbers {
    private static final MathContext FOUR_DIGITS = new MathContext(4);

    private Numbers() {
    }

    /** {@code x} rounded to 4 significant digits for JSON; null where it is not finite (JSON has no NaN). */
    static Double json(double x) {
        return Double.isFinite(x) ? new BigDecimal(x).round(FOUR_DIGITS).doubleValue() : null;
    }

    /** {@code x} with 4 significant digits, e.g. 31.80, 0.002143, 1.230e-05. */
    static String text(double x) {
        return String.format(Locale.ROOT, "%.4g", x);
    }

    /** FLOPs per second at {@code millis} per call: TFLOP/s from 1 TFLOP/s up, GFLOP/s below. */
    static String throughput(double flops, double millis) {
        double perSecond = flops / (millis * 1e-3);
        return perSecond >= 1e12 ? text(perSecond / 1e12) + " TFLOP/s" : text(perSecond / 1e9) + " GFLOP/s";
    }
}
