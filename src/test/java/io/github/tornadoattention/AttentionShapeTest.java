package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class AttentionShapeTest {

    private static AttentionShape.Builder valid() {
        return AttentionShape.builder().batch(2).heads(8).queryLength(16).headDim(64);
    }

    private static void assertRejected(String argument, String value, Runnable build) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, build::run);
        assertEquals(argument, e.argument());
        assertEquals(value, e.value());
        assertTrue(e.getMessage().startsWith(argument + " = " + value + ": "), e.getMessage());
        assertTrue(!e.allowed().isBlank());
    }

    @Test
    void defaultsFollowTheQuery() {
        AttentionShape s = valid().build();
        assertEquals(8, s.kvHeads());
        assertEquals(16, s.kvLength());
        assertEquals(0.125f, s.scale());
        assertEquals(Layout.BHSD, s.layout());
        assertEquals(2L * 8 * 16 * 64, s.queryElements());
    }

    @ParameterizedTest
    @ValueSource(ints = {0, -1, Integer.MIN_VALUE})
    void everySizeMustBePositive(int bad) {
        String v = String.valueOf(bad);
        assertRejected("batch", v, () -> valid().batch(bad).build());
        assertRejected("heads", v, () -> valid().heads(bad).build());
        assertRejected("kvHeads", v, () -> valid().kvHeads(bad).build());
        assertRejected("queryLength", v, () -> valid().queryLength(bad).build());
        assertRejected("kvLength", v, () -> valid().kvLength(bad).build());
        assertRejected("headDim", v, () -> valid().headDim(bad).build());
    }

    @Test
    void queryHeadsMustBeAMultipleOfKvHeads() {
        assertRejected("kvHeads", "3", () -> valid().kvHeads(3).build());
        assertEquals(4, valid().kvHeads(2).build().groupSize());
        assertEquals(8, valid().kvHeads(1).build().groupSize());
    }

    @Test
    void scaleMustBeFiniteAndPositive() {
        assertRejected("scale", "NaN", () -> valid().scale(Float.NaN).build());
        assertRejected("scale", "Infinity", () -> valid().scale(Float.POSITIVE_INFINITY).build());
        assertRejected("scale", "0.0", () -> valid().scale(0f).build());
        assertRejected("scale", "-0.5", () -> valid().scale(-0.5f).build());
        assertEquals(3.5f, valid().scale(3.5f).build().scale());
        float max = AttentionShape.maxScale(64);
        assertEquals(max, valid().headDim(64).scale(max).build().scale());
        assertRejected("scale", Float.toString(Math.nextUp(max)), () -> valid().headDim(64).scale(Math.nextUp(max)).build());
    }

    @Test
    void layoutMustNotBeNull() {
        assertRejected("layout", "null", () -> valid().layout(null).build());
    }

    @Test
    void tensorsMustBeAddressableWith32BitOffsets() {
        assertRejected("q elements", String.valueOf(4L * 32 * 65536 * 256),
                () -> valid().batch(4).heads(32).queryLength(65536).kvLength(16).headDim(256).build());
    }

    @Test
    void bottomRightCausalVisibility() {
        AttentionShape square = valid().queryLength(4).causal(true).build();
        assertEquals(0, square.lastVisibleKey(0));
        assertEquals(3, square.lastVisibleKey(3));
        AttentionShape moreKeys = valid().queryLength(2).kvLength(5).causal(true).build();
        assertEquals(3, moreKeys.lastVisibleKey(0));
        assertEquals(4, moreKeys.lastVisibleKey(1));
        AttentionShape moreQueries = valid().queryLength(5).kvLength(2).causal(true).build();
        assertEquals(-1, moreQueries.lastVisibleKey(0));
        assertEquals(-1, moreQueries.lastVisibleKey(2));
        assertEquals(0, moreQueries.lastVisibleKey(3));
        assertEquals(1, moreQueries.lastVisibleKey(4));
        assertEquals(4, valid().queryLength(2).kvLength(5).build().lastVisibleKey(0));
    }

    @Test
    void flopsFollowTheConvention() {
        AttentionShape full = valid().build();
        assertEquals(4.0 * 2 * 8 * 16 * 16 * 64, full.flops());
        assertEquals(full.flops() / 2, valid().causal(true).build().flops());
        // Sq=2, Skv=5, causal: rows see 4 and 5 keys.
        assertEquals(4.0 * 2 * 8 * 64 * 9, valid().queryLength(2).kvLength(5).causal(true).build().flops());
    }

    @Test
    void layoutsGiveTheirStrides() {
        AttentionShape bhsd = valid().build();
        assertEquals(new TensorStrides(8 * 16 * 64, 16 * 64, 64), bhsd.queryStrides());
        AttentionShape bshd = valid().layout(Layout.BSHD).kvHeads(2).kvLength(10).build();
        assertEquals(new TensorStrides(16 * 8 * 64, 64, 8 * 64), bshd.queryStrides());
        assertEquals(new TensorStrides(10 * 2 * 64, 64, 2 * 64), bshd.kvStrides());
    }
}
