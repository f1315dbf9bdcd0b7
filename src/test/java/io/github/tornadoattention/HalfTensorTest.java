package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
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
    void theDataIsAlignedAndNoLargerThanTheValues() {
        try (HalfTensor t = HalfTensor.of(1f, 2f)) {
            assertEquals(4, t.data().byteSize());
            assertEquals(0, t.data().address() % 64);
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
    void aLengthWhoseBytesOverflowIsRejectedByName() {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> HalfTensor.allocate(Long.MAX_VALUE));
        assertEquals("length", e.argument());
        assertEquals(String.valueOf(Long.MAX_VALUE), e.value());
        assertTrue(e.allowed().contains(String.valueOf(HalfTensor.MAX_LENGTH)), e.getMessage());
        assertThrows(InvalidArgumentException.class, () -> HalfTensor.allocate(HalfTensor.MAX_LENGTH + 1));
    }

    @Test
    void closeFreesTheMemory() {
        HalfTensor t = HalfTensor.allocate(8);
        t.close();
        assertFalse(t.isOpen());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> t.get(0));
        assertEquals("this HalfTensor (length 8) is closed", e.getMessage());
        assertThrows(IllegalStateException.class, t::toFloatArray);
        assertThrows(IllegalStateException.class, () -> t.fill(0f));
        t.close();
    }

    /** The safety net: a tensor dropped without close() has its memory freed once the GC finds it. */
    @Test
    void theCleanerFreesDroppedTensors() throws InterruptedException {
        long before = LeakGuard.leaksFreed();
        int dropped = 200;
        MemorySegment keptSegment = allocateAndDrop(dropped);
        for (int i = 0; i < 100 && (keptSegment.scope().isAlive() || LeakGuard.leaksFreed() - before < dropped); i++) {
            System.gc();
            Thread.sleep(50);
        }
        assertTrue(LeakGuard.leaksFreed() - before >= dropped,
                "freed " + (LeakGuard.leaksFreed() - before) + " of " + dropped);
        assertFalse(keptSegment.scope().isAlive(), "the dropped tensor's memory is still allocated");
    }

    /** Allocates {@code count} tensors and drops them unclosed; returns the data of the last one. */
    private static MemorySegment allocateAndDrop(int count) {
        MemorySegment last = null;
        for (int i = 0; i < count; i++) {
            last = HalfTensor.allocate(1024).data();
        }
        return last;
    }
}
