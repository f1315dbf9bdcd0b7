package io.github.tornadoattention.inference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.CacheSuite;
import io.github.tornadoattention.verify.KvCacheModel;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The inference API on the CPU device: cache bookkeeping, paging, rollback, bad input and per-step counts. */
class KvCacheTest {
    private final AttentionDevice device = Attention.device("cpu-reference");

    @ParameterizedTest
    @ValueSource(ints = {64, 16})
    void everyScenarioMatchesTheOracle(int headDim) {
        List<CacheSuite.CaseResult> results = CacheSuite.run(device, headDim, 20261123L + headDim);
        assertTrue(results.size() > 40, "scenarios ran: " + results.size());
        for (CacheSuite.CaseResult r : results) {
            assertTrue(r.passed(), r.name() + ": " + r.error());
        }
    }

    /**
     * CacheSuite.runConcurrently on the oracle: three threads, two rounds each, every call checked (so the runner
     * itself compares each thread's calls with that thread's own model), named by thread and round; and a thread's
     * exception reaches the caller.
     */
    @Test
    void engineThreadsEachMatchTheOracle() {
        List<CacheSuite.CaseResult> results = CacheSuite.runConcurrently(List.of(device), 16, 3, 2, 20261126L);
        assertEquals(3 * 2 * 10, results.size(), "per thread and round: 9 scenario calls and a merge");
        for (CacheSuite.CaseResult r : results) {
            assertTrue(r.passed(), r.name() + ": " + r.error());
        }
        assertTrue(results.stream().anyMatch(r -> r.name().startsWith("thread 2 round 1 on cpu-reference: ")));
        IllegalStateException failed = assertThrows(IllegalStateException.class,
                () -> CacheSuite.runConcurrently(List.of(device), 0, 2, 1, 1L));   // head dim 0: refused
        assertTrue(failed.getMessage().startsWith("engine thread "), failed.getMessage());
    }

    @Test
    void raggedReferenceEqualsDenseAttentionForOneSequence() {
        // One slot holding 37 tokens, 5 of them new: the cache's definition is dense attention with
        // Sq = 5 and Skv = 37, bottom-right causal.
        Random random = new Random(7);
        int d = 16;
        KvCacheModel model = new KvCacheModel(1, 2, d);
        try (KvCache cache = device.kvCache(KvCacheSpec.contiguous(1, 2, 64, d))) {
            model.appendPacked(cache, device, random, new int[] {32});
            model.appendPacked(cache, device, random, new int[] {5});
        }
        for (boolean causal : new boolean[] {true, false}) {
            CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(4).kvHeads(2).headDim(d)
                    .maxQueryLength(5).maxLength(64).causal(causal).build();
            float[] q = KvCacheModel.randomFp16(random, 4 * 5 * d);
            float[] k = new float[2 * 37 * d];
            float[] v = new float[k.length];
            for (int h = 0; h < 2; h++) {
                for (int j = 0; j < 37; j++) {
                    System.arraycopy(model.keys.get(0).get(j)[h], 0, k, (h * 37 + j) * d, d);
                    System.arraycopy(model.values.get(0).get(j)[h], 0, v, (h * 37 + j) * d, d);
                }
            }
            AttentionShape shape = AttentionShape.builder().batch(1).heads(4).kvHeads(2).queryLength(5).kvLength(37)
                    .headDim(d).causal(causal).build();
            CpuReference.Result dense = CpuReference.compute(shape, q, k, v);
            CpuReference.Result cached = model.expected(spec, q, false);
            assertArrayEquals(dense.output(), cached.output(), 1e-12);
            assertArrayEquals(dense.logSumExp(), cached.logSumExp(), 1e-12);
        }
    }

    @Test
    void appendBeyondCapacityIsRefusedAndWritesNothing() {
        try (KvCache cache = device.kvCache(KvCacheSpec.contiguous(2, 1, 8, 8))) {
            Random random = new Random(1);
            KvCacheModel model = new KvCacheModel(2, 1, 8);
            model.appendPacked(cache, device, random, new int[] {6, 2});
            float[] before = KvCacheModel.download(device, cache.keys());
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> model.appendPacked(cache, device, random, new int[] {1, 7}));
            assertEquals("newTokens[1]", e.argument());
            assertTrue(e.getMessage().contains("at most 6 more"), e.getMessage());
            assertEquals(6, cache.length(0));
            assertEquals(2, cache.length(1));
            assertArrayEquals(before, KvCacheModel.download(device, cache.keys()));
        }
    }

    /** A caller closed one of the cache's own tensors: every call that would change the cache is refused and changes nothing. */
    @ParameterizedTest
    @ValueSource(strings = {"keys", "values", "stepInfo", "blockTable"})
    void aCacheWithAClosedStorageTensorRefusesEveryChangeAndKeepsItsLengths(String closedTensor) {
        int d = 8;
        try (KvCache cache = device.kvCache(KvCacheSpec.paged(2, 1, 64, d, 4));
             DeviceTensor k = device.allocate(DType.FP16, 2L * d); DeviceTensor v = device.allocate(DType.FP16, 2L * d);
             io.github.tornadoattention.HalfTensor hk = io.github.tornadoattention.HalfTensor.allocate(2L * d);
             io.github.tornadoattention.HalfTensor hv = io.github.tornadoattention.HalfTensor.allocate(2L * d)) {
            new KvCacheModel(2, 1, d).appendPacked(cache, device, new Random(4), new int[] {5, 3});
            int freeBefore = cache.freePages();
            int[] pages0 = cache.pages(0);
            switch (closedTensor) {
                case "keys" -> cache.keys().close();
                case "values" -> cache.values().close();
                case "stepInfo" -> cache.stepInfo().close();
                default -> cache.blockTable().close();
            }
            List<org.junit.jupiter.api.function.Executable> calls = List.of(
                    () -> cache.append(k, v, Layout.BHSD, 1, 1, 1),
                    () -> cache.append(hk, hv, Layout.BHSD, 1, 1, 1),
                    () -> cache.appendPacked(k, v, 1, 1),
                    () -> cache.appendPacked(hk, hv, 1, 1),
                    () -> cache.appendPacked(k, v, 0, 0),
                    () -> cache.truncate(0, 2),
                    () -> cache.reset(1),
                    cache::resetAll,
                    () -> cache.sharePrefix(0, 1, 0),
                    () -> cache.usePages(1, new int[0], 0));
            for (org.junit.jupiter.api.function.Executable call : calls) {
                InvalidArgumentException e = assertThrows(InvalidArgumentException.class, call);
                assertEquals("cache." + closedTensor + "()", e.argument());
                assertEquals(5, cache.length(0), e.getMessage());
                assertEquals(3, cache.length(1), e.getMessage());
                assertEquals(5, cache.newTokens(0), e.getMessage());
                assertEquals(3, cache.newTokens(1), e.getMessage());
                assertEquals(freeBefore, cache.freePages(), e.getMessage());
                assertArrayEquals(pages0, cache.pages(0), e.getMessage());
            }
        }
    }

    @Test
    void anExhaustedPagePoolIsRefusedAndWritesNothing() {
        try (KvCache cache = device.kvCache(KvCacheSpec.paged(2, 1, 64, 8, 4).withPages(3))) {
            Random random = new Random(2);
            KvCacheModel model = new KvCacheModel(2, 1, 8);
            model.appendPacked(cache, device, random, new int[] {5, 2}); // pages: 2 + 1
            assertEquals(0, cache.freePages());
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> model.appendPacked(cache, device, random, new int[] {0, 3}));
            assertEquals("newTokens", e.argument());
            assertEquals(2, cache.length(1));
            cache.truncate(0, 4); // frees the second page of slot 0
            assertEquals(1, cache.freePages());
            model.appendPacked(cache, device, new Random(3), new int[] {0, 3});
            assertEquals(5, cache.length(1));
        }
    }

    @Test
    void sharedPrefixPagesAreCopiedBeforeAWriteIntoThem() {
        try (KvCache cache = device.kvCache(KvCacheSpec.paged(2, 1, 64, 8, 4))) {
            Random random = new Random(4);
            KvCacheModel model = new KvCacheModel(2, 1, 8);
            model.appendPacked(cache, device, random, new int[] {10, 0});
            cache.sharePrefix(0, 1, 8);   // two whole pages, shared
            assertArrayEquals(cache.pages(0).length == 3 ? new int[] {cache.pages(0)[0], cache.pages(0)[1]} : null,
                    cache.pages(1));
            cache.truncate(0, 6);         // slot 0 now ends inside a shared page
            int shared = cache.pages(0)[1];
            model.truncate(0, 6);
            model.sharePrefix(0, 1, 0);
            model.keys.get(1).addAll(model.keys.get(0).subList(0, 0));
            model.appendPacked(cache, device, random, new int[] {1, 0});
            assertTrue(cache.pages(0)[1] != shared, "slot 0 wrote into a copy of the shared page");
            assertEquals(shared, cache.pages(1)[1], "slot 1 keeps the original");
        }
    }

    @Test
    void usePagesRejectsPagesOutsideThePoolAndRepeats() {
        try (KvCache cache = device.kvCache(KvCacheSpec.paged(2, 1, 64, 8, 4).withPages(6))) {
            InvalidArgumentException outside = assertThrows(InvalidArgumentException.class,
                    () -> cache.usePages(0, new int[] {1, 6}, 8));
            assertEquals("pageIds[1]", outside.argument());
            InvalidArgumentException twice = assertThrows(InvalidArgumentException.class,
                    () -> cache.usePages(0, new int[] {2, 2}, 8));
            assertEquals("pageIds[1]", twice.argument());
            assertEquals(6, cache.freePages());
            cache.usePages(0, new int[] {5, 1}, 7);
            assertEquals(7, cache.length(0));
            assertEquals(4, cache.freePages());
        }
    }

    @Test
    void badArgumentsNameThemselves() {
        KvCacheSpec spec = KvCacheSpec.contiguous(2, 2, 16, 8);
        CacheAttentionSpec attention = CacheAttentionSpec.builder().batch(2).heads(4).kvHeads(2).headDim(8)
                .maxQueryLength(1).maxLength(16).build();
        try (KvCache cache = device.kvCache(spec); CacheAttentionPlan plan = device.plan(attention, spec);
             DeviceTensor q = device.allocate(DType.FP16, attention.denseQueryElements());
             DeviceTensor wrongType = device.allocate(DType.FP32, attention.denseQueryElements());
             DeviceTensor o = device.allocate(DType.FP16, attention.denseQueryElements());
             DeviceTensor kv = device.allocate(DType.FP16, 2 * 2 * 8)) {
            assertEquals("newTokens[0]", assertThrows(InvalidArgumentException.class,
                    () -> cache.append(kv, kv, Layout.BHSD, 1, -1, 0)).argument());
            assertEquals("newKeys.length", assertThrows(InvalidArgumentException.class,
                    () -> cache.append(q, q, Layout.BHSD, 1, 1, 0)).argument());
            assertEquals("o.dtype", assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(q, cache, wrongType, null)).argument());
            assertEquals("length", assertThrows(InvalidArgumentException.class, () -> cache.truncate(0, 1)).argument());
            assertEquals("pageSize", assertThrows(InvalidArgumentException.class,
                    () -> KvCacheSpec.paged(1, 1, 16, 8, 12)).argument());
            DeviceTensor closed = device.allocate(DType.FP16, attention.denseQueryElements());
            closed.close();
            assertEquals("q", assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(closed, cache, o, null)).argument());
            try (KvCache other = device.kvCache(KvCacheSpec.contiguous(2, 2, 8, 8))) {
                assertEquals("cache.spec", assertThrows(InvalidArgumentException.class,
                        () -> plan.forward(q, other, o, null)).argument());
            }
            assertEquals("cache.slots", assertThrows(InvalidArgumentException.class,
                    () -> device.plan(attention, KvCacheSpec.contiguous(3, 2, 16, 8))).argument());
        }
    }

    @Test
    void decodeStepsAfterWarmUpCreateNoPlansAndAllocateNothing() {
        int slots = 3;
        KvCacheSpec spec = KvCacheSpec.paged(slots, 2, 128, 16, 16);
        CacheAttentionSpec attention = CacheAttentionSpec.builder().batch(slots).heads(4).kvHeads(2).headDim(16)
                .maxQueryLength(1).maxLength(128).build();
        Random random = new Random(5);
        try (KvCache cache = device.kvCache(spec); CacheAttentionPlan plan = device.plan(attention, spec);
             DeviceTensor q = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) attention.denseQueryElements()));
             DeviceTensor k = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, slots * 2 * 16));
             DeviceTensor v = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, slots * 2 * 16));
             DeviceTensor o = device.allocate(DType.FP16, attention.denseQueryElements())) {
            cache.append(k, v, Layout.BHSD, 1, 1, 1, 1);
            plan.forward(q, cache, o, null);
            long plans = Attention.plansCreated();
            long allocations = device.allocations();
            for (int step = 0; step < 40; step++) {
                cache.append(k, v, Layout.BHSD, 1, 1, 1, 1);
                plan.forward(q, cache, o, null);
            }
            device.synchronize();
            assertEquals(plans, Attention.plansCreated(), "plans created during 40 steps");
            assertEquals(allocations, device.allocations(), "device allocations during 40 steps");
            assertEquals(41, cache.length(2));
        }
    }
}
