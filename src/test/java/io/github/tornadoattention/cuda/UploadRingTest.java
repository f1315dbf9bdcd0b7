package io.github.tornadoattention.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/** The page-locked upload ring's placement: every upload inside one half of the ring, halves taken in turn. */
class UploadRingTest {

    @Test
    void uploadsStayInsideTheirHalfAndAlternateHalves() {
        long half = CudaDevice.UploadRing.BYTES / 2;
        Random random = new Random(1);
        int current = 0;
        long offset = 0;
        int switches = 0;
        for (int i = 0; i < 200_000; i++) {
            // Mostly step-info sized uploads, now and then a whole block table piece.
            long bytes = random.nextInt(20) == 0 ? 4L * (1 + random.nextInt(CudaDevice.UploadRing.MAX_INTS))
                    : 4L * (1 + random.nextInt(200));
            CudaDevice.UploadRing.Place p = CudaDevice.UploadRing.place(current, offset, bytes);
            assertTrue(p.at() >= p.half() * half && p.at() + bytes <= (p.half() + 1) * half,
                    "upload " + i + " of " + bytes + " bytes at " + p.at() + " leaves half " + p.half());
            assertEquals(0, p.at() % 16, "16-byte aligned");
            if (p.half() != current) {
                assertEquals(1 - current, p.half());
                switches++;
            }
            current = p.half();
            offset = p.next();
        }
        assertTrue(switches > 10, "the ring wrapped " + switches + " times");
    }

    @Test
    void anUploadThatEndsExactlyAtTheRingsEndIsFollowedByTheFirstHalf() {
        long half = CudaDevice.UploadRing.BYTES / 2;
        CudaDevice.UploadRing.Place p = CudaDevice.UploadRing.place(1, 2 * half - 64, 64);
        assertEquals(1, p.half());
        assertEquals(2 * half, p.next());
        CudaDevice.UploadRing.Place q = CudaDevice.UploadRing.place(1, p.next(), 16);
        assertEquals(0, q.half());
        assertEquals(0, q.at());
    }
}
