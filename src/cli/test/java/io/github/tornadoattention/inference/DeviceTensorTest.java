package io.github.tornadoattention.inference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.verify.KvCacheModel;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Device tensors on the CPU device: copies, slices, bad ranges, and a plan's device-tensor call. */
class DeviceTensorTest {
    private final AttentionDevice device = Attention.device("cpu-reference");

    @Test
    void slicesCopyToAndFromTheRightElements() {
        try (DeviceTensor t = device.allocate(DType.FP16, 10); HalfTensor src = HalfTensor.of(1, 2, 3, 4, 5);
             HalfTensor dst = HalfTensor.allocate(4)) {
            t.copyFrom(src, 1, 6, 3);          // elements 6..8 = 2, 3, 4
            t.copyTo(dst, 5, 0, 4);            // elements 5..8
            device.synchronize();
            assertEquals(2f, dst.get(1));
            assertEquals(4f, dst.get(3));
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> t.copyFrom(src, 0, 8, 3));
            assertEquals("offset", e.argument());
        }
    }

    @Test
    void droppedTensorsAreFreedByTheLeakGuard() throws InterruptedException {
        long before = io.github.tornadoattention.LeakGuard.leaksFreed();
        for (int i = 0; i < 200; i++) {
            device.allocate(DType.FP16, 1024); // dropped unclosed
        }
        for (int i = 0; i < 50 && io.github.tornadoattention.LeakGuard.leaksFreed() - before < 200; i++) {
            System.gc();
            Thread.sleep(20);
        }
        long freed = io.github.tornadoattention.LeakGuard.leaksFreed() - before;
        org.junit.jupiter.api.Assertions.assertTrue(freed >= 200, "freed " + freed);
    }

    @Test
    void aClosedTensorIsRefusedByName() {
        DeviceTensor t = device.allocate(DType.FP16, 4);
        t.close();
        try (HalfTensor h = HalfTensor.allocate(4)) {
            assertThrows(InvalidArgumentException.class, () -> t.copyFrom(h));
        }
    }

    /** wrap of an address the device cannot vouch for is refused; before, the next copy crashed the JVM. */
    @Test
    void wrapAcceptsOnlyMemoryTheDeviceCanCheck() {
        InvalidArgumentException bad = assertThrows(InvalidArgumentException.class, () -> device.wrap(0x1000, DType.FP16, 16));
        assertEquals("address", bad.argument());
        org.junit.jupiter.api.Assertions.assertTrue(bad.getMessage().contains("cpu-reference"), bad.getMessage());
        float[] values = new float[16];
        for (int i = 0; i < values.length; i++) {
            values[i] = i + 1;
        }
        DeviceTensor owner = device.allocate(DType.FP16, 32);
        try (HalfTensor h = HalfTensor.of(values)) {
            DeviceTensor view = device.wrap(owner.address() + 2 * 8, DType.FP16, 16); // elements 8..23 of owner
            view.copyFrom(h);
            float[] all = KvCacheModel.download(device, owner);
            assertArrayEquals(values, java.util.Arrays.copyOfRange(all, 8, 24));
            assertThrows(InvalidArgumentException.class, () -> device.wrap(owner.address() + 2 * 24, DType.FP16, 16));
            owner.close();
            // The memory under the wrapped tensor is gone: a copy is refused, not a crash.
            assertThrows(InvalidArgumentException.class, () -> view.copyFrom(h));
            view.close(); // wrapped: frees nothing
        }
        UnsupportedOperationException unchecked = assertThrows(UnsupportedOperationException.class,
                () -> new OtherDevice().wrap(0x1000, DType.FP16, 16));
        org.junit.jupiter.api.Assertions.assertTrue(unchecked.getMessage().startsWith("other (another device) cannot check"),
                unchecked.getMessage());
    }

    @Test
    void aPlanComputesOnDeviceTensorsAsOnHostTensors() {
        AttentionShape shape = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(9).kvLength(13)
                .headDim(16).causal(true).build();
        Random random = new Random(9);
        float[] q = KvCacheModel.randomFp16(random, (int) shape.queryElements());
        float[] k = KvCacheModel.randomFp16(random, (int) shape.kvElements());
        float[] v = KvCacheModel.randomFp16(random, (int) shape.kvElements());
        try (AttentionPlan plan = Attention.plan(shape, "cpu-reference");
             HalfTensor hq = HalfTensor.of(q); HalfTensor hk = HalfTensor.of(k); HalfTensor hv = HalfTensor.of(v);
             HalfTensor expected = plan.forward(hq, hk, hv);
             DeviceTensor dq = KvCacheModel.upload(device, q); DeviceTensor dk = KvCacheModel.upload(device, k);
             DeviceTensor dv = KvCacheModel.upload(device, v);
             DeviceTensor o = device.allocate(DType.FP16, shape.outputElements())) {
            plan.forward(dq, dk, dv, o, null);
            assertArrayEquals(expected.toFloatArray(), KvCacheModel.download(device, o));
            assertEquals("o.length", assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(dq, dk, dv, dk, null)).argument());
        }
    }

    /** A second device (host memory, nothing implemented beyond allocation) to hand the CPU device a foreign tensor. */
    private static final class OtherDevice extends AttentionDevice {
        private final java.util.Map<Long, java.lang.foreign.Arena> arenas = new java.util.HashMap<>();

        OtherDevice() {
            super("other");
        }

        @Override
        public String name() {
            return "another device";
        }

        @Override
        public void synchronize() {
        }

        @Override
        protected long malloc(io.github.tornadoattention.DType dtype, long length) {
            java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofShared();
            long address = arena.allocate(length * dtype.bytes(), 64).address();
            arenas.put(address, arena);
            return address;
        }

        @Override
        protected void free(long address, long bytes) {
            arenas.remove(address).close();
        }

        @Override
        protected void copyToDevice(long destination, java.lang.foreign.MemorySegment source, long bytes) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void copyToHost(java.lang.foreign.MemorySegment destination, long source, long bytes) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void copyOnDevice(long destination, long source, long bytes) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void uploadInts(long destination, int[] values, int from, int count) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void appendToCache(io.github.tornadoattention.KvCache cache, io.github.tornadoattention.KvCache.Append append) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected io.github.tornadoattention.CacheAttentionPlan newCachePlan(io.github.tornadoattention.CacheAttentionSpec spec,
                                                                           io.github.tornadoattention.KvCacheSpec cacheSpec) {
            throw new UnsupportedOperationException();
        }

        @Override
        protected void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim, DeviceTensor o,
                             DeviceTensor lse) {
            throw new UnsupportedOperationException();
        }
    }

    @Test
    void aTensorOfAnotherDeviceIsRefusedBeforeAnythingIsWritten() {
        AttentionDevice other = new OtherDevice();
        io.github.tornadoattention.KvCacheSpec spec = io.github.tornadoattention.KvCacheSpec.contiguous(2, 1, 16, 8);
        io.github.tornadoattention.CacheAttentionSpec attention = io.github.tornadoattention.CacheAttentionSpec.builder()
                .batch(2).heads(2).kvHeads(1).headDim(8).maxQueryLength(1).maxLength(16).build();
        try (io.github.tornadoattention.KvCache cache = device.kvCache(spec);
             io.github.tornadoattention.CacheAttentionPlan plan = device.plan(attention, spec);
             DeviceTensor foreign = other.allocate(DType.FP16, 2 * 8);
             DeviceTensor local = device.allocate(DType.FP16, 2 * 8);
             DeviceTensor q = device.allocate(DType.FP16, attention.denseQueryElements());
             DeviceTensor foreignO = other.allocate(DType.FP16, attention.denseQueryElements())) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> cache.append(foreign, local, io.github.tornadoattention.Layout.BHSD, 1, 1, 1));
            assertEquals("newKeys", e.argument());
            assertEquals(0, cache.length(0), "nothing appended");
            assertEquals("o", assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(q, cache, foreignO, null)).argument());
            assertEquals("source", assertThrows(InvalidArgumentException.class,
                    () -> local.copyFrom(foreign, 0, 0, 4)).argument());
        }
    }
}
