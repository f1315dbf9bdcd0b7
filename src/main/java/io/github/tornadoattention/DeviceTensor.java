package io.github.tornadoattention;

import java.lang.foreign.MemorySegment;

/**
 * A flat array of {@link #dtype()} elements in one {@link AttentionDevice}'s memory: allocated by the
 * library ({@link AttentionDevice#allocate}) or wrapping memory the engine owns
 * ({@link AttentionDevice#wrap}, never freed by us).
 *
 * <p>Copies are stream ordered: {@code copyFrom} and {@code copyTo} are enqueued on the device's
 * stream and return; a host source may be reused as soon as the call returns, a host destination
 * holds the data after {@link AttentionDevice#synchronize()}. Offsets and counts are in elements.
 */
public final class DeviceTensor implements AutoCloseable {
    private final AttentionDevice device;
    private final DType dtype;
    private final long length;
    private final long address;
    private final LeakGuard guard;
    private boolean closed;

    DeviceTensor(AttentionDevice device, DType dtype, long length, long address, boolean owned) {
        this.device = device;
        this.dtype = dtype;
        this.length = length;
        this.address = address;
        long bytes = length * dtype.bytes();
        this.guard = owned ? LeakGuard.register(this, "a " + dtype + " DeviceTensor of length " + length + " on "
                + device.backendId(), () -> device.free(address, bytes)) : null;
    }

    public AttentionDevice device() {
        return device;
    }

    public DType dtype() {
        return dtype;
    }

    public long length() {
        return length;
    }

    public long byteSize() {
        return length * dtype.bytes();
    }

    /** The device address of element 0 (a CUdeviceptr on CUDA devices). */
    public long address() {
        requireOpen("tensor");
        return address;
    }

    public boolean isOpen() {
        return !closed;
    }

    /** Copies all of {@code source} (fp16) into elements [0, source.length()). */
    public void copyFrom(HalfTensor source) {
        copyFrom(source, 0, 0, checkOpenHost("source", source).length());
    }

    /** Copies {@code count} elements of {@code source} (of this tensor's type) starting at {@code sourceOffset} to {@code offset}. */
    public void copyFrom(HalfTensor source, long sourceOffset, long offset, long count) {
        checkOpenHost("source", source);
        checkRange("sourceOffset", sourceOffset, count, source.length());
        copyFrom(source.data().asSlice(2 * sourceOffset, 2 * count), offset);
    }

    /** Copies the bytes of {@code source} (a whole number of elements) to element {@code offset}. */
    public void copyFrom(MemorySegment source, long offset) {
        InvalidArgumentException.requireNonNull("source", source);
        long count = elementsOf(source);
        checkRange("offset", offset, count, length);
        requireOpen("tensor");
        device.copyToDevice(address + offset * dtype.bytes(), source, source.byteSize());
    }

    /** Copies {@code count} elements from {@code offset} of {@code source}, a tensor on the same device. */
    public void copyFrom(DeviceTensor source, long sourceOffset, long offset, long count) {
        InvalidArgumentException.requireNonNull("source", source);
        source.requireOpen("source");
        device.requireSame("source", source);
        if (source.dtype != dtype) {
            throw new InvalidArgumentException("source.dtype", source.dtype, "must equal this tensor's " + dtype);
        }
        checkRange("sourceOffset", sourceOffset, count, source.length);
        checkRange("offset", offset, count, length);
        requireOpen("tensor");
        device.copyOnDevice(address + offset * dtype.bytes(), source.address + sourceOffset * dtype.bytes(),
                count * dtype.bytes());
    }

    /** Copies all elements into {@code destination} (of this tensor's type); valid after {@link AttentionDevice#synchronize()}. */
    public void copyTo(HalfTensor destination) {
        copyTo(destination, 0, 0, length);
    }

    /** Copies {@code count} elements from {@code offset} into {@code destination} at {@code destinationOffset}. */
    public void copyTo(HalfTensor destination, long offset, long destinationOffset, long count) {
        checkOpenHost("destination", destination);
        checkRange("destinationOffset", destinationOffset, count, destination.length());
        copyTo(destination.data().asSlice(2 * destinationOffset, 2 * count), offset);
        destination.markModified();
    }

    /** Copies {@code destination.byteSize()} bytes from element {@code offset} into {@code destination}. */
    public void copyTo(MemorySegment destination, long offset) {
        InvalidArgumentException.requireNonNull("destination", destination);
        long count = elementsOf(destination);
        checkRange("offset", offset, count, length);
        requireOpen("tensor");
        device.copyToHost(destination, address + offset * dtype.bytes(), destination.byteSize());
    }

    /** Frees the memory (not for wrapped memory, which stays the engine's); later use throws. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            if (guard != null) {
                guard.close();
            }
        }
    }

    void requireOpen(String argument) {
        if (closed) {
            throw new InvalidArgumentException(argument, "a closed " + dtype + " DeviceTensor of length " + length,
                    "must be open");
        }
    }

    /** Throws unless this tensor is open, on {@code on}, of {@code type} and exactly {@code elements} long. */
    void require(String argument, AttentionDevice on, DType type, long elements, String formula) {
        requireOpen(argument);
        on.requireSame(argument, this);
        if (dtype != type) {
            throw new InvalidArgumentException(argument + ".dtype", dtype, "must be " + type);
        }
        if (length != elements) {
            throw new InvalidArgumentException(argument + ".length", length, "must equal " + formula + " = " + elements);
        }
    }

    /** An open host tensor of this tensor's element type: copies move bits, so fp16 and bf16 never meet. */
    private HalfTensor checkOpenHost(String argument, HalfTensor tensor) {
        InvalidArgumentException.requireNonNull(argument, tensor);
        if (!tensor.isOpen()) {
            throw new InvalidArgumentException(argument, "a closed HalfTensor", "must be open");
        }
        if (tensor.dtype() != dtype) {
            throw new InvalidArgumentException(argument + ".dtype", tensor.dtype().label(),
                    "must equal this device tensor's " + dtype.label());
        }
        return tensor;
    }

    private long elementsOf(MemorySegment segment) {
        if (segment.byteSize() % dtype.bytes() != 0) {
            throw new InvalidArgumentException("segment.byteSize", segment.byteSize(),
                    "must be a whole number of " + dtype + " elements (" + dtype.bytes() + " bytes each)");
        }
        return segment.byteSize() / dtype.bytes();
    }

    private static void checkRange(String argument, long offset, long count, long limit) {
        if (count < 0) {
            throw new InvalidArgumentException("count", count, "must be >= 0");
        }
        if (offset < 0 || offset > limit - count) {
            throw new InvalidArgumentException(argument, offset,
                    "must be in [0, " + (limit - count) + "] to copy " + count + " elements within " + limit);
        }
    }

    @Override
    public String toString() {
        return dtype + "[" + length + "] on " + device.name() + (closed ? " (closed)" : "");
    }
}
