package io.github.tornadoattention;

import java.util.OptionalDouble;

/**
 * Attention for one fixed {@link AttentionShape} on one backend, prepared once and reused: kernels
 * are compiled and device buffers allocated when the plan is made, not per call. This is what an
 * inference loop holds on to (one plan per layer shape).
 *
 * <p>Thread safety: a plan may be shared between threads, but its calls are serialised (every
 * public method is {@code synchronized}), because a plan owns one set of device buffers. Use one
 * plan per thread for parallel work. Close it to release device memory; a closed plan refuses
 * further calls.
 */
public abstract class AttentionPlan implements AutoCloseable {
    private static final java.util.concurrent.atomic.AtomicLong CREATED = new java.util.concurrent.atomic.AtomicLong();
    private final String backendId;
    private final AttentionShape shape;
    private boolean closed;
    private Call lastCall;
    private double lastDeviceMillis = Double.NaN;

    private record Call(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
    }

    protected AttentionPlan(String backendId, AttentionShape shape) {
        this.backendId = backendId;
        this.shape = InvalidArgumentException.requireNonNull("shape", shape);
        CREATED.incrementAndGet();
    }

    /** Plans made in this JVM so far. */
    static long created() {
        return CREATED.get();
    }

    public String backendId() {
        return backendId;
    }

    public AttentionShape shape() {
        return shape;
    }

    /**
     * Computes O = softmax(scale * Q K^T) V into {@code o}, and the per-row logsumexp into {@code lse}
     * when it is not null. Every argument is checked before anything is written.
     */
    public final synchronized void forward(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        ensureOpen();
        shape.checkTensors(q, k, v, o, lse);
        compute(q, k, v, o, lse);
        lastCall = new Call(q, k, v, o, lse);
    }

    /**
     * Stream-ordered attention on device tensors of the plan's {@link #device()}: enqueues the kernels
     * on the device's stream and returns without copying or synchronising; {@code o} (and {@code lse},
     * fp32 [batch, heads, queryLength], when not null) hold the result after
     * {@link AttentionDevice#synchronize()}. Tensors are of the shape's sizes and {@link AttentionShape#dtype()}.
     *
     * @throws UnsupportedOperationException if this backend has no device tensors yet
     */
    public final synchronized void forward(DeviceTensor q, DeviceTensor k, DeviceTensor v, DeviceTensor o,
                                           DeviceTensor lse) {
        ensureOpen();
        AttentionDevice device = device();
        if (device == null) {
            throw new UnsupportedOperationException(backendId + " plans take host tensors only (device tensors: ptx-cuda,"
                    + " cpu-reference)");
        }
        InvalidArgumentException.requireNonNull("q", q).require("q", device, shape.dtype(), shape.queryElements(),
                "batch*heads*queryLength*headDim");
        InvalidArgumentException.requireNonNull("k", k).require("k", device, shape.dtype(), shape.kvElements(),
                "batch*kvHeads*kvLength*headDim");
        InvalidArgumentException.requireNonNull("v", v).require("v", device, shape.dtype(), shape.kvElements(),
                "batch*kvHeads*kvLength*headDim");
        InvalidArgumentException.requireNonNull("o", o).require("o", device, shape.dtype(), shape.outputElements(),
                "batch*heads*queryLength*headDim");
        if (o == q || o == k || o == v) {
            throw new InvalidArgumentException("o", "the same tensor as an input", "must be a separate tensor");
        }
        if (lse != null) {
            lse.require("lse", device, DType.FP32, shape.logSumExpElements(), "batch*heads*queryLength");
        }
        computeOnDevice(q, k, v, o, lse);
    }

    /** The device whose tensors {@link #forward(DeviceTensor, DeviceTensor, DeviceTensor, DeviceTensor, DeviceTensor)} takes; null if none. */
    public AttentionDevice device() {
        return null;
    }

    /** See the device-tensor {@code forward}; arguments are validated. */
    protected void computeOnDevice(DeviceTensor q, DeviceTensor k, DeviceTensor v, DeviceTensor o, DeviceTensor lse) {
        throw new UnsupportedOperationException(backendId + " has no device-tensor path");
    }

    /** Computes attention into a new tensor, which the caller closes. */
    public final HalfTensor forward(HalfTensor q, HalfTensor k, HalfTensor v) {
        HalfTensor o = HalfTensor.allocate(shape.dtype(), shape.outputElements());
        try {
            forward(q, k, v, o, null);
            return o;
        } catch (RuntimeException e) {
            o.close();
            throw e;
        }
    }

    /**
     * The benchmark hooks of this plan (rerun on device-resident inputs, device-timed batches, the last call's device
     * time): {@link BenchmarkHooks}. Not needed for computing attention.
     */
    public final BenchmarkHooks benchmarkHooks() {
        return hooks;
    }

    private final BenchmarkHooks hooks = new BenchmarkHooks() {
        @Override
        public void rerunOnDevice() {
            synchronized (AttentionPlan.this) {
                ensureOpen();
                if (lastCall == null) {
                    throw new IllegalStateException("rerunOnDevice needs a forward call first");
                }
                if (!lastCall.q.isOpen() || !lastCall.k.isOpen() || !lastCall.v.isOpen() || !lastCall.o.isOpen()) {
                    throw new IllegalStateException("a tensor of the last forward call has been closed");
                }
                rerun(lastCall.q, lastCall.k, lastCall.v, lastCall.o, lastCall.lse);
            }
        }

        @Override
        public OptionalDouble timeOnDevice(int calls) {
            synchronized (AttentionPlan.this) {
                ensureOpen();
                if (calls < 1) {
                    throw new InvalidArgumentException("calls", calls, "must be >= 1");
                }
                if (lastCall == null) {
                    throw new IllegalStateException("timeOnDevice needs a forward call first");
                }
                return timeBackToBack(calls);
            }
        }

        @Override
        public OptionalDouble lastDeviceMillis() {
            synchronized (AttentionPlan.this) {
                return Double.isNaN(lastDeviceMillis) ? OptionalDouble.empty() : OptionalDouble.of(lastDeviceMillis);
            }
        }
    };

    /** See {@link BenchmarkHooks#timeOnDevice(int)}; backends that can launch back to back and time on the device override this. */
    protected OptionalDouble timeBackToBack(int calls) {
        return OptionalDouble.empty();
    }

    /** Backends that time their kernels on the device report each call's time here. */
    protected final void recordDeviceMillis(double millis) {
        lastDeviceMillis = millis;
    }

    @Override
    public final synchronized void close() {
        if (!closed) {
            closed = true;
            lastCall = null;
            release();
        }
    }

    public final synchronized boolean isClosed() {
        return closed;
    }

    /** The backend's work; arguments are already validated against {@link #shape()}. */
    protected abstract void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse);

    /**
     * See {@link BenchmarkHooks#rerunOnDevice()}: the last host-tensor {@code forward}'s computation again, on the
     * inputs already on the device. Device backends override this to launch their kernels without any host-device
     * copy; the default recomputes (the CPU reference has no device).
     */
    protected void rerun(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        compute(q, k, v, o, lse);
    }

    /** Frees device memory and other resources; called once. */
    protected void release() {
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("this " + backendId + " plan is closed");
        }
    }
}
