package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.lang.foreign.MemorySegment;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/** Moving tensors in and out of TornadoVM arrays for the emulated kernels, and checking the result. */
final class EmulatedInputs {
    private EmulatedInputs() {
    }

    static LongArray longs(HalfTensor tensor) {
        LongArray array = new LongArray(Math.toIntExact(tensor.length() / 4));
        MemorySegment.copy(tensor.data(), 0, array.getSegment(), 0, tensor.data().byteSize());
        return array;
    }

    static HalfFloatArray halves(HalfTensor tensor) {
        HalfFloatArray array = new HalfFloatArray(Math.toIntExact(tensor.length()));
        MemorySegment.copy(tensor.data(), 0, array.getSegment(), 0, tensor.data().byteSize());
        return array;
    }

    /** NaN everywhere (0x7FC0: a NaN in fp16 and in bf16), so that an element the kernel does not write fails the comparison. */
    static void poison(MemorySegment segment) {
        for (long i = 0; i < segment.byteSize() / 2; i++) {
            segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, i, (short) 0x7FC0);
        }
    }

    /** The tensor's 16-bit values (bf16 bits) in a ShortArray. */
    static ShortArray bits(HalfTensor tensor) {
        ShortArray array = new ShortArray(Math.toIntExact(tensor.length()));
        MemorySegment.copy(tensor.data(), 0, array.getSegment(), 0, tensor.data().byteSize());
        return array;
    }

    static FloatArray poisonedLse(AttentionShape shape) {
        FloatArray lse = new FloatArray(shape.logSumExpElements());
        lse.init(Float.NaN);
        return lse;
    }

    static ErrorStats compare(String backend, AttentionShape shape, RandomInputs in, MemorySegment output, FloatArray lse) {
        try (HalfTensor o = HalfTensor.allocate(shape.dtype(), shape.outputElements())) {
            MemorySegment.copy(output, 0, o.data(), 0, o.data().byteSize());
            o.markModified();
            float[] lseValues = lse.toHeapArray();
            return CorrectnessSuite.compareWithOracle(backend, shape, in, o, lseValues);
        }
    }

    static ShortArray shortsFor(AttentionShape shape) {
        return new ShortArray(Math.toIntExact(shape.outputElements()));
    }
}
