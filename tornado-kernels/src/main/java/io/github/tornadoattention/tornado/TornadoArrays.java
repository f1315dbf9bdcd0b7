package io.github.tornadoattention.tornado;

import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The TornadoVM arrays behind our tensors and caches, and their host size. A TornadoVM array is one
 * {@code Arena.ofAuto()} segment of its header ({@code tornado.panama.objectHeader} bytes) and its data, reserved
 * against the JVM's direct-memory limit ({@link io.github.tornadoattention.DirectMemory}) and freed by the garbage
 * collector once unreachable.
 */
public final class TornadoArrays {
    private TornadoArrays() {
    }

    /**
     * A zeroed array of {@code length} elements of {@code dtype}: fp16 in a {@link HalfFloatArray}, bf16 bits in a
     * {@link ShortArray} (as the Java kernels read them; copies and the prebuilt kernels move bits, never convert),
     * fp32 in a {@link FloatArray}, int32 in an {@link IntArray}.
     */
    public static TornadoNativeArray allocate(DType dtype, int length) {
        return switch (dtype) {
            case FP16 -> new HalfFloatArray(length);
            case BF16 -> new ShortArray(length);
            case FP32 -> new FloatArray(length);
            case INT32 -> new IntArray(length);
            default -> throw new InvalidArgumentException("dtype", dtype, "TornadoVM devices hold fp16, bf16, fp32 and int32 tensors");
        };
    }

    /** Host bytes (the JVM's direct memory) of an array of {@code length} elements of {@code dtype}: header and data. */
    public static long bytes(DType dtype, long length) {
        return TornadoNativeArray.ARRAY_HEADER + length * dtype.bytes();
    }
}
