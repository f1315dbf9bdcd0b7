package io.github.tornadoattention.cuda;

import io.github.tornadoattention.Availability;
import java.util.HashMap;
import java.util.Map;

/**
 * The process-wide CUDA state of the ptx-cuda host: the driver binding, one device (ordinal from
 * the system property {@value #DEVICE_PROPERTY}, default 0), its primary context and the loaded
 * PTX modules. Made on first use; if the driver or a usable device is missing, {@link #get()}
 * throws and {@link #availability()} says why.
 */
public final class CudaContext {
    public static final String DEVICE_PROPERTY = "tornadoattention.cuda.device";
    /** mma.sync m16n8k16 with fp16, ldmatrix and cp.async need sm_80 or newer. */
    private static final int MIN_COMPUTE_CAPABILITY = 80;

    private static final Object LOCK = new Object();
    private static CudaContext instance;
    private static RuntimeException failure;

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
        if (ordinal < 0 || ordinal >= count) {
            throw new IllegalStateException(count == 0 ? "no CUDA device"
                    : DEVICE_PROPERTY + " = " + ordinal + ": this machine has CUDA devices 0.." + (count - 1));
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

    /** The context, made on first call. */
    public static CudaContext get() {
        synchronized (LOCK) {
            if (instance == null && failure == null) {
                try {
                    instance = new CudaContext(new CudaDriver(), Integer.getInteger(DEVICE_PROPERTY, 0));
                } catch (IllegalArgumentException e) {
                    failure = new IllegalStateException("no NVIDIA driver: " + e.getMessage(), e);
                } catch (RuntimeException e) {
                    failure = e;
                }
            }
            if (failure != null) {
                throw failure;
            }
            return instance;
        }
    }

    /** Available with the device's name, or unavailable with the reason. */
    public static Availability availability() {
        try {
            CudaContext c = get();
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

    /** The kernel {@code entry} of the PTX text {@code ptx} (loaded once per name and kept). */
    public long function(String moduleName, String ptx, String entry) {
        synchronized (LOCK) {
            makeCurrent();
            String key = moduleName + ":" + entry;
            Long function = functions.get(key);
            if (function == null) {
                long module = modules.computeIfAbsent(moduleName, n -> driver.loadModule(ptx));
                function = driver.function(module, entry);
                functions.put(key, function);
            }
            return function;
        }
    }
}
