package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DirectMemory;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import io.github.tornadoattention.verify.KvCacheModel;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * A TornadoVM device keeps each KV cache's arrays on the host (TornadoVM arrays: the JVM's direct memory) as well as on
 * the GPU. Under the fake CUDA driver, in a child JVM with {@code -XX:MaxDirectMemorySize=64m}: a cache that fits is
 * made, attended over and closed; one that does not (64 MiB of K and V and its step info) is refused with an
 * {@link InvalidArgumentException} naming the cache, the bytes needed and allowed and the option that raises the limit,
 * having allocated nothing (the device's allocation counter, the driver's buffers) and leaving the direct pool where
 * it was; so is an engine's cache array ({@link CacheAttentionTasks#newCacheArray}).
 */
class DirectMemoryFakeDriverTest {
    private static final KvCacheSpec FITS = KvCacheSpec.contiguous(2, 2, 256, 64);
    private static final KvCacheSpec TOO_BIG = KvCacheSpec.contiguous(4, 8, 4096, 128);
    private static String log;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        log = FakeCuda.runProbe(Probe.class, "fake-direct-memory", Map.of("FAKECUDA_VERBOSE", "1"),
                List.of("-XX:MaxDirectMemorySize=64m"), "ptx-tornado", "tornado-simt");
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt"})
    void aCacheOverTheLimitIsRefusedWithItsNumbersAndLeavesNothingBehind(String id) {
        Map<String, List<String>> steps = FakeCuda.steps(log, id);
        assertTrue(found(steps.get("fits"), "[direct] fits ").equals("ok"), "a cache that fits works: " + steps.get("fits"));
        List<String> refused = steps.get("refused");
        String where = id + ":\n" + String.join("\n", refused);
        long needed = 2 * (TornadoNativeArray.ARRAY_HEADER + 2 * TOO_BIG.elements()) + TornadoNativeArray.ARRAY_HEADER + 4 * 13;
        String message = found(refused, "[direct] refused ");
        assertTrue(message.startsWith("spec = slots 4, kvHeads 8, capacity 4096, headDim 128, dtype fp16: a KV cache on "
                + id + " needs " + DirectMemory.bytes(needed) + " of the JVM's direct memory, more than the "), where);
        assertTrue(message.contains("(limit " + DirectMemory.bytes(64L << 20) + ", "), where);
        assertTrue(message.contains("; raise the limit with -XX:MaxDirectMemorySize="), where);
        assertEquals("0", found(refused, "[direct] allocations "), "the device counted no allocation: " + where);
        assertEquals(0, refused.stream().filter(l -> FakeCuda.ALLOC.matcher(l).find()).count(), "no device buffer: " + where);
        assertEquals("true", found(refused, "[direct] pool-back "), "the direct pool is where it was: " + where);
        String engine = found(steps.get("engine"), "[direct] engine ");
        assertTrue(engine.startsWith("cacheSpec = " + TOO_BIG + ": a K or V cache array needs "
                + DirectMemory.bytes(TornadoNativeArray.ARRAY_HEADER + 2 * TOO_BIG.elements()) + " of the JVM's direct memory"),
                engine);
    }

    private static String found(List<String> lines, String prefix) {
        return lines.stream().filter(l -> l.startsWith(prefix)).map(l -> l.substring(prefix.length())).findFirst()
                .orElse("(no line " + prefix + ")");
    }

    /** The child JVM's part. */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            FakeCuda.probeEach(args, Probe::run);
        }

        private static void run(String id) {
            AttentionDevice device = Attention.device(id);
            FakeCuda.mark(id, "fits");
            CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(FITS.slots()).heads(4).kvHeads(FITS.kvHeads())
                    .headDim(FITS.headDim()).maxQueryLength(1).maxLength(FITS.capacity()).causal(true).build();
            Random random = new Random(5);
            int[] one = new int[FITS.slots()];
            Arrays.fill(one, 1);
            int rows = FITS.slots() * FITS.kvHeads() * FITS.headDim();
            try (CacheAttentionPlan plan = device.plan(spec, FITS);
                 KvCache cache = device.kvCache(FITS);
                 DeviceTensor q = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) spec.denseQueryElements()));
                 DeviceTensor k = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, rows));
                 DeviceTensor v = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, rows));
                 DeviceTensor o = device.allocate(spec.dtype(), spec.denseQueryElements())) {
                cache.append(k, v, Layout.BHSD, 1, one);
                plan.forward(q, cache, o, null);
                device.synchronize();
                System.err.println("[direct] fits ok");
            }
            FakeCuda.mark(id, "refused");
            long before = DirectMemory.used();
            long allocations = device.allocations();
            try {
                device.kvCache(TOO_BIG).close();
                System.err.println("[direct] refused none");
            } catch (InvalidArgumentException e) {
                System.err.println("[direct] refused " + e.getMessage());
            }
            System.err.println("[direct] allocations " + (device.allocations() - allocations));
            System.err.println("[direct] pool-back " + (DirectMemory.used() <= before));
            FakeCuda.mark(id, "engine");
            CacheAttentionSpec big = CacheAttentionSpec.builder().batch(TOO_BIG.slots()).heads(8).kvHeads(TOO_BIG.kvHeads())
                    .headDim(TOO_BIG.headDim()).maxQueryLength(1).maxLength(TOO_BIG.capacity()).causal(true).build();
            CacheAttentionTasks tasks = CacheAttentionTasks.create(id, big, TOO_BIG,
                    TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice());
            try {
                TornadoNativeArray a = tasks.newCacheArray();
                TornadoNativeArray b = tasks.newCacheArray();
                System.err.println("[direct] engine none " + a.getSize() + b.getSize());
            } catch (InvalidArgumentException e) {
                System.err.println("[direct] engine " + e.getMessage());
            }
        }
    }
}
