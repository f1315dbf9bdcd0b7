package io.github.tornadoattention.cuda;

import io.github.tornadoattention.Availability;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.ptx.KernelManifest;
import java.util.HashMap;
import java.util.Map;

/**
 * The CUDA state of the ptx-cuda host for one device: the driver binding (one per process), the
 * device (by ordinal, {@link PlanOptions#cudaDevice()}), its primary context and the loaded PTX
 * modules. Made on first use per ordinal; if the driver or a usable device is missing,
 * {@link #get(int)} throws and {@link #availability(int)} says why.
 */
public final class CudaContext {
    /** mma.sync m16n8k16 with fp16, ldmatrix and cp.async need sm_80 or newer. */
    private static final int MIN_COMPUTE_CAPABILITY = 80;

    private static final Object LOCK = new Object();
    private static final Map<Integer, CudaContext> INSTANCES = new HashMap<>();
    private static final Map<Integer, RuntimeException> FAILURES = new HashMap<>();
    private static CudaDriver sharedDriver;
    private static RuntimeException driverFailure;

    private final CudaDriver driver;
    private final long context;
    private final String deviceName;
    private final int computeCapability;
    private final int multiprocessors;
    private final Map<String, Long> modules = new HashMap<>();
    private final Map<String, Long> functions = new HashMap<>();

    private CudaContext(CudaDriver driver, int ordinal) {
        this.driver = driver;
        driver.init();
        int count = driver.deviceCount();
        if (count == 0) {
            throw new IllegalStateException("no CUDA device");
        }
        if (ordinal >= count) {
            throw new InvalidArgumentException("cudaDevice", ordinal, "this machine has CUDA devices 0.." + (count - 1));
        }
        int device = driver.device(ordinal);
        deviceName = driver.deviceName(device);
        computeCapability = 10 * driver.deviceAttribute(device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                + driver.deviceAttribute(device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        if (computeCapability < MIN_COMPUTE_CAPABILITY) {
            throw new IllegalStateException(deviceName + " is sm_" + computeCapability
                    + "; the hand-tuned kernels need sm_80 or newer (mma.sync m16n8k16, ldmatrix, cp.async)");
        }
        multiprocessors = driver.deviceAttribute(device, CudaDriver.ATTRIBUTE_MULTIPROCESSOR_COUNT);
        context = driver.primaryContext(device);
    }

    /** The context of device 0. */
    public static CudaContext get() {
        return get(0);
    }

    /**
     * The context of device {@code ordinal}, made on first call.
     *
     * @throws InvalidArgumentException naming {@code cudaDevice} if the machine has no such device
     * @throws IllegalStateException if there is no driver or the device cannot run the kernels
     */
    public static CudaContext get(int ordinal) {
        if (ordinal < 0) {
            throw new InvalidArgumentException("cudaDevice", ordinal, "must be >= 0 (a CUDA device ordinal)");
        }
        synchronized (LOCK) {
            CudaContext context = INSTANCES.get(ordinal);
            if (context != null) {
                return context;
            }
            RuntimeException failure = FAILURES.get(ordinal);
            if (failure == null) {
                try {
                    context = new CudaContext(sharedDriver(), ordinal);
                    INSTANCES.put(ordinal, context);
                    return context;
                } catch (RuntimeException e) {
                    failure = e;
                    FAILURES.put(ordinal, e);
                }
            }
            throw failure;
        }
    }

    /** The driver binding, loaded once per process. */
    private static CudaDriver sharedDriver() {
        if (sharedDriver == null && driverFailure == null) {
            try {
                sharedDriver = new CudaDriver();
            } catch (IllegalArgumentException e) {
                driverFailure = new IllegalStateException("no NVIDIA driver: " + e.getMessage(), e);
            } catch (RuntimeException e) {
                driverFailure = e;
            }
        }
        if (driverFailure != null) {
            throw driverFailure;
        }
        return sharedDriver;
    }

    /** {@link #availability(int)} of device 0. */
    public static Availability availability() {
        return availability(0);
    }

    /** Available with the device's name, or unavailable with the reason. */
    public static Availability availability(int ordinal) {
        try {
            CudaContext c = get(ordinal);
            return Availability.available(c.deviceName + " (sm_" + c.computeCapability + ", " + c.multiprocessors
                    + " SMs, CUDA driver API)");
        } catch (RuntimeException e) {
            return Availability.unavailable(e.getMessage());
        }
    }

    public CudaDriver driver() {
        return driver;
    }

    public String deviceName() {
        return deviceName;
    }

    public int multiprocessors() {
        return multiprocessors;
    }

    /** Makes this context current on the calling thread; every host entry point calls it first. */
    public void makeCurrent() {
        driver.setCurrent(context);
    }

    /**
     * The kernel {@code entry} of the shipped PTX module {@code module} (e.g. {@code flash_fwd.ptx}).
     * Each module's text is read and JIT-compiled once per context, each function looked up once.
     */
    public long function(String module, String entry) {
        synchronized (LOCK) {
            makeCurrent();
            String key = module + ":" + entry;
            Long function = functions.get(key);
            if (function == null) {
                long loaded = modules.computeIfAbsent(module, m -> driver.loadModule(KernelManifest.ptx(m)));
                function = driver.function(loaded, entry);
                functions.put(key, function);
            }
            return function;
        }
    }
}
