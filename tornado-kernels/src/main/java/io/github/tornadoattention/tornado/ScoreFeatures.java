package io.github.tornadoattention.tornado;

import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The run-time score features of the Java kernels (window, softcap, sinks; AttentionShape's definitions) as the kernels
 * read them: from device arrays, never from scalar arguments (TornadoVM compiles scalars into the kernel as constants,
 * and an {@code if} on a folded constant has been mis-compiled; tornado-kernels/README). Off, each costs a uniform
 * branch or a min/max per row, not per score: the window bounds the tiles a workgroup visits (keys outside it are
 * never loaded), the softcap runs only where {@code softcap > 0}, the sink joins once per row at the end.
 *
 * <ul>
 *   <li>window words ({@link #WINDOW_LEFT}, {@link #WINDOW_RIGHT}): -1 unbounded, otherwise clamped to
 *       {@link #windowBound} (a side at least that long reaches every key, so the clamp changes nothing and keeps the
 *       kernels' {@code position - left} and {@code position + right} inside 32 bits);</li>
 *   <li>score words: {@link #SOFTCAP} (0: off), then one sink logit per query head from {@link #SINKS}
 *       (-infinity: no sink).</li>
 * </ul>
 */
public final class ScoreFeatures {
    /** Index of the window's left side (keys before the query's position) in a window/params array. */
    public static final int WINDOW_LEFT = 0;
    /** Index of the window's right side. */
    public static final int WINDOW_RIGHT = 1;
    public static final int WINDOW_WORDS = 2;
    /** Index of the softcap in a scores array (0: off). */
    public static final int SOFTCAP = 0;
    /** Index of query head 0's sink logit in a scores array (-infinity: no sink). */
    public static final int SINKS = 1;

    private ScoreFeatures() {
    }

    /** The longest window side the kernels get: a side this long already reaches every key of every query. */
    public static int windowBound(long queryLength, long kvLength) {
        return (int) Math.min(Integer.MAX_VALUE / 4, queryLength + kvLength);
    }

    /** A window side as the kernels read it: -1 (unbounded) or at most {@link #windowBound}. */
    public static int windowSide(int side, int bound) {
        return side < 0 ? -1 : Math.min(side, bound);
    }

    /** The window words {left, right}, each clamped ({@link #windowSide}). */
    public static IntArray window(int left, int right, int bound) {
        return IntArray.fromElements(windowSide(left, bound), windowSide(right, bound));
    }

    /** The score words: softcap (0: off), then {@code heads} sink logits ({@code sinks} null: none, -infinity each). */
    public static FloatArray scores(float softcap, float[] sinks, int heads) {
        FloatArray a = new FloatArray(SINKS + heads);
        a.set(SOFTCAP, softcap);
        for (int h = 0; h < heads; h++) {
            a.set(SINKS + h, sinks == null ? Float.NEGATIVE_INFINITY : sinks[h]);
        }
        return a;
    }

    /**
     * {@code c * tanh(y / c)} for {@code c > 0}, as {@code c - 2c / (e^(2y/c) + 1)}: only the exp the kernels already
     * use (TornadoMath.exp, ex2.approx on PTX), exact at the limits (c for y = +infinity or e^(2y/c) overflowing, -c
     * below), NaN for NaN; absolute error a few ulp of c near 0.
     */
    public static float cap(float y, float c) {
        return c - 2.0f * c / (TornadoMath.exp(2.0f * y / c) + 1.0f);
    }
}
