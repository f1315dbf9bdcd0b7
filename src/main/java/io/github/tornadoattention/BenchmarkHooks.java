package io.github.tornadoattention;

import java.util.OptionalDouble;

/**
 * What benchmarks (the CLI's {@code run}, JMH) need of a plan beside {@code forward}: the computation again on
 * inputs already on the device, device-timed batches of launches, and the device time of the last call. Not part of
 * computing attention; a plan's calls and these are serialised alike.
 *
 * <pre>{@code
 * plan.forward(q, k, v, o, null);                      // sends the inputs
 * BenchmarkHooks hooks = plan.benchmarkHooks();
 * hooks.rerunOnDevice();                               // kernels only: no host<->device copy
 * OptionalDouble kernelMillis = hooks.lastDeviceMillis();
 * }</pre>
 */
public interface BenchmarkHooks {

    /**
     * Runs the computation of the plan's last host-tensor {@code forward} call again on the inputs already on the
     * device, waits for it and copies nothing, in either direction (TornadoVM backends: the plan's kernels on the
     * inputs of the last forward, already on the device; nothing is sent or copied back). Backends without a device
     * recompute.
     *
     * @throws IllegalStateException if there was no {@code forward} call yet, one of its tensors is closed, or the
     *                               plan is closed
     */
    void rerunOnDevice();

    /**
     * Launches the last {@code forward} call's computation {@code calls} times back to back on the inputs already on
     * the device and returns the device time per call in milliseconds, timed on the device around the whole batch
     * (host launch latency not counted, the way PyTorch's kernels are timed beside it). Empty where the backend
     * cannot (ptx-cuda can).
     */
    OptionalDouble timeOnDevice(int calls);

    /**
     * How long the device spent on the last call's kernels (a {@code forward} or a rerun), timed on the device (CUDA
     * events; TornadoVM's profiler, when the plan was made with {@code PlanOptions.profile}), without launch gaps or
     * host work; empty where the backend cannot tell.
     */
    OptionalDouble lastDeviceMillis();
}
