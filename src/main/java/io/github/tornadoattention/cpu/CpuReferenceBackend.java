package io.github.tornadoattention.cpu;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;

/** {@code cpu-reference}: the oracle as a backend. Any head dim, both layouts, fp16 and bf16, runs anywhere. */
public final class CpuReferenceBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.CPU_REFERENCE;
    }

    @Override
    public String description() {
        return "plain Java, double accumulation: the correctness oracle";
    }

    @Override
    public Availability availability() {
        return Availability.available("CPU (" + Runtime.getRuntime().availableProcessors() + " threads)");
    }

    @Override
    public void checkSupported(AttentionShape shape) {
        // Every valid shape.
    }

    /** Host memory standing in for a device: the inference API's semantics, checked against the oracle. */
    @Override
    public AttentionDevice device() {
        return CpuDevice.INSTANCE;
    }

    /** No option concerns the CPU reference. */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        return new AttentionPlan(id(), shape) {
            @Override
            public AttentionDevice device() {
                return CpuDevice.INSTANCE;
            }

            @Override
            protected void computeOnDevice(DeviceTensor q, DeviceTensor k, DeviceTensor v, DeviceTensor o, DeviceTensor lse) {
                CpuDevice d = CpuDevice.INSTANCE;
                CpuReference.Result result = CpuReference.compute(shape, d.floats16(q), d.floats16(k), d.floats16(v));
                d.writeHalves(o, result.output());
                if (lse != null) {
                    d.writeFloats(lse, result.logSumExp());
                }
            }

            @Override
            protected void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
                CpuReference.Result result = CpuReference.compute(shape, q, k, v);
                double[] out = result.output();
                short[] rounded = new short[out.length];
                for (int i = 0; i < out.length; i++) {
                    rounded[i] = o.dtype().fromDouble(out[i]);
                }
                o.copyFromBits(rounded);
                if (lse != null) {
                    for (int i = 0; i < lse.length; i++) {
                        lse[i] = (float) result.logSumExp()[i];
                    }
                }
            }
        };
    }
}
