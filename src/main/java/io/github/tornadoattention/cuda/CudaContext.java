package io.github.tornadoattention.cuda;

import io.github.tornadoattention.Availability;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.PtxEntries;
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
    private final KernelManifest manifest;
    /** PTX module texts read so far (each entry is cut out of its module's text). */
    private final Map<String, String> moduleTexts = new HashMap<>();
    /** Function handles by module:entry; each entry is JIT-compiled as a module of its own, once. */
    private final Map<String, Long> functions = new HashMap<>();
    private long moduleLoads;

    private CudaContext(CudaDriver driver, int ordinal) {
        this(driver, ordinal, KernelManifest.shipped());
    }

    /** A context over {@code driver} whose kernels come from {@code manifest} (tests: a fake driver, a hand-made table). */
    CudaContext(CudaDriver driver, int ordinal, KernelManifest manifest) {
        this.driver = driver;
        this.manifest = manifest;
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

    /** The launch table this context's hosts select their kernels from (the shipped one outside tests). */
    public KernelManifest manifest() {
        return manifest;
    }

    /**
     * The function of {@code kernel}, an entry of this context's manifest. Only that entry is JIT-compiled (a
     * module of its own, cut out by {@link PtxEntries#module}): a shipped module holds dozens of entries and the
     * driver compiles all of a module it loads. An entry that launches with dynamic shared memory gets its
     * maximum set here, once with the function (needed above 48 KB).
     */
    public long function(KernelManifest.Kernel kernel) {
        synchronized (LOCK) {
            makeCurrent();
            String key = kernel.module() + ":" + kernel.entry();
            Long function = functions.get(key);
            if (function == null) {
                String text = moduleTexts.computeIfAbsent(kernel.module(), manifest::ptxText);
                long loaded = driver.loadModule(PtxEntries.module(text, kernel.entry()));
                moduleLoads++;
                function = driver.function(loaded, kernel.entry());
                if (kernel.dynamicSharedBytes() > 0) {
                    driver.setMaxDynamicSharedBytes(function, kernel.dynamicSharedBytes());
                }
                functions.put(key, function);
            }
            return function;
        }
    }

    /** Modules JIT-compiled in this context so far: one per entry used. */
    public long moduleLoads() {
        synchronized (LOCK) {
            return moduleLoads;
        }
    }
}
