package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.ValueLayout;
import org.junit.jupiter.api.Test;

class HalfTensorTest {

    @Test
    void roundTripsFloatsThroughFp16() {
        float[] values = {0f, 1f, -2.5f, 65504f, 1e-3f, 3.14159f};
        try (HalfTensor t = HalfTensor.of(values)) {
            float[] back = t.toFloatArray();
            for (int i = 0; i < values.length; i++) {
                assertEquals(Float.float16ToFloat(Float.floatToFloat16(values[i])), back[i]);
            }
            assertEquals(3.140625f, t.get(5));
        }
    }

    @Test
    void roundTripsRawBits() {
        short[] bits = {0x3C00, (short) 0xC000, 0x7BFF, 0x0001};
        try (HalfTensor t = HalfTensor.ofBits(bits)) {
            assertArrayEquals(bits, t.toBitsArray());
            assertEquals(1f, t.get(0));
            assertEquals(-2f, t.get(1));
            assertEquals(bits[3], t.data().getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, 3));
        }
    }

    @Test
    void leavesRoomForTornadoVmsHeaderBeforeTheData() {
        try (HalfTensor t = HalfTensor.of(1f, 2f)) {
            assertEquals(HalfTensor.HEADER_BYTES + 4, t.dataWithHeaderRoom().byteSize());
            assertEquals(t.data().address(), t.dataWithHeaderRoom().address() + HalfTensor.HEADER_BYTES);
        }
    }

    @Test
    void everyWriteBumpsTheVersion() {
        try (HalfTensor t = HalfTensor.allocate(4)) {
            long v0 = t.version();
            t.set(0, 1f);
            t.fill(Float.NaN);
            t.copyFrom(new float[4]);
            t.markModified();
            assertEquals(v0 + 4, t.version());
            assertTrue(Float.isNaN(HalfTensor.of(Float.NaN).get(0)));
        }
    }

    @Test
    void rejectsBadLengthsAndIndices() {
        try (HalfTensor t = HalfTensor.allocate(3)) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> t.copyFrom(new float[2]));
            assertEquals("values.length", e.argument());
            assertThrows(InvalidArgumentException.class, () -> t.copyFrom((float[]) null));
            assertThrows(IndexOutOfBoundsException.class, () -> t.get(3));
            assertThrows(IndexOutOfBoundsException.class, () -> t.set(-1, 0f));
        }
        assertThrows(InvalidArgumentException.class, () -> HalfTensor.allocate(0));
    }

    @Test
    void closeFreesTheMemory() {
        HalfTensor t = HalfTensor.allocate(8);
        t.close();
        assertFalse(t.isOpen());
        assertThrows(IllegalStateException.class, () -> t.get(0));
        t.close();
    }
}
