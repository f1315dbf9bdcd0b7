package io.github.tornadoattention;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.ref.Reference;

/**
 * A flat array of 16-bit floats in off-heap memory (a {@link MemorySegment}): IEEE fp16 (the default) or bf16,
 * the tensor's {@link #dtype()}. Floats in are rounded to nearest even in that type; values out are exact.
 *
 * <p>The data starts 64-byte aligned; GPU hosts copy straight from {@link #data()} to the device.
 *
 * <p>Every write through this class bumps {@link #version()}, which GPU plans use to skip
 * re-sending inputs that are already on the device (a KV cache). Whoever writes through
 * {@link #data()} directly must call {@link #markModified()} afterwards.
 *
 * <p>Not safe for concurrent writes. Closing frees the memory; a tensor may be shared by threads
 * for reading. {@link #close()} is the contract: a tensor that becomes unreachable unclosed has its
 * memory freed by a {@link LeakGuard} when the garbage collector notices, and the leak is logged (a
 * warning the first time, debug level after that). Keep the tensor itself reachable for as long as
 * its {@link #data()} is in use.
 */
public final class HalfTensor implements AutoCloseable {
    private static final long ALIGNMENT = 64;
    private static final ValueLayout.OfShort BITS16 = ValueLayout.JAVA_SHORT_UNALIGNED;
    /** The most elements a tensor can hold: its bytes, with room for the alignment, must fit in a {@code long}. */
    public static final long MAX_LENGTH = (Long.MAX_VALUE - ALIGNMENT) / Short.BYTES;

    private final Arena arena;
    private final LeakGuard guard;
    private final MemorySegment data;
    private final long length;
    private final DType dtype;
    private long version;

    private HalfTensor(long length, DType dtype) {
        InvalidArgumentException.requireNonNull("dtype", dtype);
        if (dtype != DType.FP16 && dtype != DType.BF16) {
            throw new InvalidArgumentException("dtype", dtype.label(), "a HalfTensor holds fp16 or bf16");
        }
        if (length <= 0 || length > MAX_LENGTH) {
            throw new InvalidArgumentException("length", length, "must be in 1.." + MAX_LENGTH);
        }
        Arena memory = Arena.ofShared();
        try {
            this.data = memory.allocate(2 * length, ALIGNMENT);
        } catch (RuntimeException | OutOfMemoryError e) {
            memory.close();
            throw e;
        }
        this.arena = memory;
        this.length = length;
        this.dtype = dtype;
        this.guard = LeakGuard.register(this, "a " + dtype.label() + " HalfTensor of length " + length, memory::close);
    }

    /** An fp16 tensor of {@code length} zeros. */
    public static HalfTensor allocate(long length) {
        return allocate(DType.FP16, length);
    }

    /** A tensor of {@code length} zeros of {@code dtype} (fp16 or bf16). */
    public static HalfTensor allocate(DType dtype, long length) {
        return new HalfTensor(length, dtype);
    }

    /** An fp16 tensor holding {@code values} rounded to fp16. */
    public static HalfTensor of(float... values) {
        return of(DType.FP16, values);
    }

    /** A tensor of {@code dtype} holding {@code values} rounded to it. */
    public static HalfTensor of(DType dtype, float... values) {
        InvalidArgumentException.requireNonNull("values", values);
        HalfTensor t = new HalfTensor(values.length, dtype);
        t.copyFrom(values);
        return t;
    }

    /** An fp16 tensor holding raw fp16 bit patterns. */
    public static HalfTensor ofBits(short... bits) {
        return ofBits(DType.FP16, bits);
    }

    /** A tensor of {@code dtype} holding raw bit patterns of that type. */
    public static HalfTensor ofBits(DType dtype, short... bits) {
        InvalidArgumentException.requireNonNull("bits", bits);
        HalfTensor t = new HalfTensor(bits.length, dtype);
        t.copyFromBits(bits);
        return t;
    }

    /** The element type: {@link DType#FP16} or {@link DType#BF16}. */
    public DType dtype() {
        return dtype;
    }

    public long length() {
        return length;
    }

    public boolean isOpen() {
        return arena.scope().isAlive();
    }

    public float get(long index) {
        return dtype.toFloat(getBits(index));
    }

    public short getBits(long index) {
        ensureOpen();
        short bits = data.getAtIndex(BITS16, checkIndex(index));
        Reference.reachabilityFence(this); // the cleaner must not free the memory while it is read
        return bits;
    }

    public void set(long index, float value) {
        setBits(index, dtype.fromFloat(value));
    }

    public void setBits(long index, short bits) {
        ensureOpen();
        data.setAtIndex(BITS16, checkIndex(index), bits);
        version++;
    }

    /** Sets every element to {@code value}; NaN is the usual poison for outputs under test. */
    public void fill(float value) {
        ensureOpen();
        short bits = dtype.fromFloat(value);
        for (long i = 0; i < length; i++) {
            data.setAtIndex(BITS16, i, bits);
        }
        version++;
    }

    /** Copies {@code values} (rounded to nearest, ties to even, in this tensor's type) into this tensor; lengths must match. */
    public void copyFrom(float[] values) {
        ensureOpen();
        checkSameLength("values", values == null ? -1 : values.length);
        for (int i = 0; i < values.length; i++) {
            data.setAtIndex(BITS16, i, dtype.fromFloat(values[i]));
        }
        version++;
    }

    public void copyFromBits(short[] bits) {
        ensureOpen();
        checkSameLength("bits", bits == null ? -1 : bits.length);
        MemorySegment.copy(bits, 0, data, BITS16, 0, bits.length);
        version++;
    }

    public float[] toFloatArray() {
        ensureOpen();
        float[] out = new float[checkedArrayLength()];
        for (int i = 0; i < out.length; i++) {
            out[i] = dtype.toFloat(data.getAtIndex(BITS16, i));
        }
        Reference.reachabilityFence(this);
        return out;
    }

    public short[] toBitsArray() {
        ensureOpen();
        short[] out = new short[checkedArrayLength()];
        MemorySegment.copy(data, BITS16, 0, out, 0, out.length);
        Reference.reachabilityFence(this);
        return out;
    }

    /** The raw 16-bit data, {@code 2 * length()} bytes. */
    public MemorySegment data() {
        return data;
    }

    /** Incremented by every write through this class and by {@link #markModified()}. */
    public long version() {
        return version;
    }

    /** Call after writing through {@link #data()}, so plans re-send the tensor to the device. */
    public void markModified() {
        version++;
    }

    /** Frees the memory; closing again does nothing. */
    @Override
    public void close() {
        guard.close();
    }

    private void ensureOpen() {
        if (!isOpen()) {
            throw new IllegalStateException("this HalfTensor (length " + length + ") is closed");
        }
    }

    private long checkIndex(long index) {
        if (index < 0 || index >= length) {
            throw new IndexOutOfBoundsException("index = " + index + ": must be in [0, " + length + ")");
        }
        return index;
    }

    private void checkSameLength(String argument, int actual) {
        if (actual != length) {
            throw new InvalidArgumentException(argument + ".length", actual == -1 ? "null" : actual,
                    "must equal the tensor's length " + length);
        }
    }

    private int checkedArrayLength() {
        if (length > Integer.MAX_VALUE - 8) {
            throw new IllegalStateException("length = " + length + ": too large for a Java array");
        }
        return (int) length;
    }
}
