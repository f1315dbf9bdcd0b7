package io.github.tornadoattention.cpu;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.concurrent.ConcurrentSkipListMap;

/**
 * The cpu-reference backend's device: "device" memory is off-heap host memory, every call runs to
 * completion before it returns, and attention is the oracle ({@link CpuReference#cached}) over
 * what the cache's storage, lengths and block tables hold. It runs the whole inference API without
 * a GPU, so the cache bookkeeping that every backend shares is tested everywhere.
 */
final class CpuDevice extends AttentionDevice {
    static final CpuDevice INSTANCE = new CpuDevice();

    /**
     * Live allocations by address: every access resolves its address here, so a wrapped address outside
     * them, or memory already freed, is refused with an exception instead of crashing the JVM.
     */
    private final ConcurrentSkipListMap<Long, Allocation> allocations = new ConcurrentSkipListMap<>();

    private record Allocation(Arena arena, MemorySegment memory) {
    }

    private CpuDevice() {
        super(Backends.CPU_REFERENCE);
    }

    @Override
    public String name() {
        return "CPU (host memory)";
    }

    @Override
    public void synchronize() {
        // Every call has completed.
    }

    @Override
    protected long malloc(DType dtype, long length) {
        long bytes = length * dtype.bytes();
        Arena arena = Arena.ofShared();
        MemorySegment memory = arena.allocate(bytes, 64);
        allocations.put(memory.address(), new Allocation(arena, memory));
        return memory.address();
    }

    @Override
    protected void free(long address, long bytes) {
        Allocation allocation = allocations.remove(address);
        if (allocation != null) {
            allocation.arena().close();
        }
    }

    @Override
    protected void checkWrappable(long address, long bytes) {
        memory(address, bytes);
    }

    @Override
    protected void copyToDevice(long destination, MemorySegment source, long bytes) {
        MemorySegment.copy(source, 0, memory(destination, bytes), 0, bytes);
    }

    @Override
    protected void copyToHost(MemorySegment destination, long source, long bytes) {
        MemorySegment.copy(memory(source, bytes), 0, destination, 0, bytes);
    }

    @Override
    protected void copyOnDevice(long destination, long source, long bytes) {
        MemorySegment.copy(memory(source, bytes), 0, memory(destination, bytes), 0, bytes);
    }

    @Override
    protected void uploadInts(long destination, int[] values, int from, int count) {
        MemorySegment.copy(values, from, memory(destination, 4L * count), JAVA_INT_UNALIGNED, 0, count);
    }

    @Override
    protected void appendToCache(KvCache cache, KvCache.Append append) {
        HostCacheOps.append(cache.spec(), tensor(cache.stepInfo()), blockTable(cache), append, tensor(append.keys()),
                tensor(append.values()), tensor(cache.keys()), tensor(cache.values()));
    }

    /** The cache's block table as it is on the device (read once per call); null for a contiguous cache. */
    int[] blockTable(KvCache cache) {
        return cache.spec().paged() ? tensor(cache.blockTable()).toArray(JAVA_INT_UNALIGNED) : null;
    }

    @Override
    protected CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        return new CpuCachePlan(this, spec, cacheSpec);
    }

    @Override
    protected void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim, DeviceTensor o,
                         DeviceTensor lse) {
        CpuReference.Result r = CpuReference.merge(floats16(oParts), floats32(lseParts), parts, Math.toIntExact(rows), headDim);
        writeHalves(o, r.output());
        if (lse != null) {
            writeFloats(lse, r.logSumExp());
        }
    }

    MemorySegment tensor(DeviceTensor t) {
        return memory(t.address(), t.byteSize());
    }

    float[] floats16(DeviceTensor t) {
        MemorySegment m = tensor(t);
        float[] out = new float[Math.toIntExact(t.length())];
        for (int i = 0; i < out.length; i++) {
            out[i] = t.dtype().toFloat(m.getAtIndex(JAVA_SHORT_UNALIGNED, i));
        }
        return out;
    }

    float[] floats32(DeviceTensor t) {
        float[] out = new float[Math.toIntExact(t.length())];
        MemorySegment.copy(tensor(t), JAVA_FLOAT_UNALIGNED, 0, out, 0, out.length);
        return out;
    }

    void writeHalves(DeviceTensor t, double[] values) {
        MemorySegment m = tensor(t);
        for (int i = 0; i < values.length; i++) {
            m.setAtIndex(JAVA_SHORT_UNALIGNED, i, t.dtype().fromDouble(values[i]));
        }
    }

    void writeFloats(DeviceTensor t, double[] values) {
        MemorySegment m = tensor(t);
        for (int i = 0; i < values.length; i++) {
            m.setAtIndex(JAVA_FLOAT_UNALIGNED, i, (float) values[i]);
        }
    }

    /** [address, address + bytes) inside one live allocation of this device; throws for anything else. */
    private MemorySegment memory(long address, long bytes) {
        Map.Entry<Long, Allocation> e = allocations.floorEntry(address);
        if (e != null) {
            MemorySegment memory = e.getValue().memory();
            long offset = address - memory.address();
            if (bytes >= 0 && offset <= memory.byteSize() - bytes) {
                return memory.asSlice(offset, bytes);
            }
        }
        throw new InvalidArgumentException("address", "0x" + Long.toHexString(address) + " (" + bytes + " bytes)",
                "must lie inside one live allocation of the " + Backends.CPU_REFERENCE + " device (" + name()
                        + "): it checks every address, and wraps only memory it allocated (allocate() makes tensors)");
    }
}
