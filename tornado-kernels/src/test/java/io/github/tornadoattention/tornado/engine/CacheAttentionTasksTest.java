package io.github.tornadoattention.tornado.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The engine facade's bad input, without a device: an engine's array of the wrong length, a cache array given twice,
 * a step array of another size, unsupported backends and specs are refused with an {@link InvalidArgumentException}
 * naming the argument, when the task is added (before anything runs); the step helper fills lengths, counts and offsets.
 */
class CacheAttentionTasksTest {
    private static final int SLOTS = 2;
    private static final int HQ = 8;
    private static final int HKV = 2;
    private static final int D = 64;
    private static final CacheAttentionSpec SPEC = CacheAttentionSpec.builder().batch(SLOTS).heads(HQ).kvHeads(HKV)
            .headDim(D).maxQueryLength(1).maxLength(128).causal(true).build();
    private static final KvCacheSpec PAGED = KvCacheSpec.paged(SLOTS, HKV, 128, D, 16);

    @Test
    void wrongArraysAreRefusedByName() {
        for (String backend : CacheAttentionTasks.BACKENDS) {
            CacheAttentionTasks att = CacheAttentionTasks.of(backend, SPEC, PAGED, 132);
            HalfFloatArray k = att.newCacheArray();
            HalfFloatArray v = att.newCacheArray();
            IntArray blocks = att.newBlockTable();
            IntArray step = CacheAttentionTasks.newStepArray(SLOTS);
            HalfFloatArray q = new HalfFloatArray(SLOTS * HQ * D);
            HalfFloatArray o = new HalfFloatArray(SLOTS * HQ * D);
            HalfFloatArray newRows = new HalfFloatArray(SLOTS * HKV * D);
            TaskGraph g = new TaskGraph("g");
            GridScheduler s = new GridScheduler();
            refused("q", () -> att.addDecode(g, "g", s, "a_", new HalfFloatArray(7), k, v, step, blocks, o, null));
            refused("o", () -> att.addDecode(g, "g", s, "a_", q, k, v, step, blocks, new HalfFloatArray(7), null));
            refused("lse", () -> att.addDecode(g, "g", s, "a_", q, k, v, step, blocks, o, new FloatArray(3)));
            refused("kCache", () -> att.addDecode(g, "g", s, "a_", q, new HalfFloatArray(5), v, step, blocks, o, null));
            refused("vCache", () -> att.addDecode(g, "g", s, "a_", q, k, k, step, blocks, o, null));
            refused("step", () -> att.addDecode(g, "g", s, "a_", q, k, v, new IntArray(4), blocks, o, null));
            refused("blockTable", () -> att.addDecode(g, "g", s, "a_", q, k, v, step, new IntArray(1), o, null));
            refused("newK", () -> att.addAppendAndDecode(g, "g", s, "a_", new HalfFloatArray(3), newRows, q, k, v, step,
                    blocks, o, null));
            refused("q", () -> att.addPrefill(g, "g", s, "a_", new HalfFloatArray(9), k, v, step, blocks, o, null));
            if (backend.equals("ptx-tornado")) {
                HalfFloatArray stage = new HalfFloatArray(att.stageLayout().halves());
                refused("stage", () -> att.addStagedAppendAndDecode(g, "g", s, "a_", new HalfFloatArray(8), k, v, blocks, o,
                        null));
                refused("blockTable", () -> att.addStagedAppendAndDecode(g, "g", s, "a_", stage, k, v, new IntArray(1), o,
                        null));
                refused("o", () -> att.addStagedAppendAndDecode(g, "g", s, "a_", stage, k, v, blocks, new HalfFloatArray(7),
                        null));
            } else {
                refused("backendId", () -> att.addStagedAppendAndDecode(g, "g", s, "a_",
                        new HalfFloatArray(att.stageLayout().halves()), k, v, blocks, o, null));
            }
        }
    }

    @Test
    void theStageHoldsTheStepWordsThenQAndTheNewRowsOn16ByteBoundaries() {
        CacheAttentionTasks att = CacheAttentionTasks.of("ptx-tornado", SPEC, PAGED, 132);
        CacheAttentionTasks.StageLayout at = att.stageLayout();
        // 3*2+1 step words = 14 halves, rounded up to 16; q [2, 8, 1, 64]; new K and V [2, 2, 1, 64] each.
        assertEquals(new CacheAttentionTasks.StageLayout(16, 16 + SLOTS * HQ * D, 16 + SLOTS * HQ * D + SLOTS * HKV * D,
                16 + SLOTS * HQ * D + 2 * SLOTS * HKV * D), at);
        HalfFloatArray stage = new HalfFloatArray(at.halves());
        stage.init(new uk.ac.manchester.tornado.api.types.HalfFloat(1.5f));
        att.setStagedStep(stage, new int[] {5, 9}, new int[] {1, 0});
        int[] words = stage.getSegment().asSlice(0, 4L * 7).toArray(java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED);
        assertEquals("[5, 9, 1, 0, 0, 1, 1]", java.util.Arrays.toString(words));
        assertEquals(1.5f, stage.get(at.qOffset()).getFloat32(), "the queries are not touched");
        refused("stage", () -> att.setStagedStep(new HalfFloatArray(3), new int[] {5, 9}, new int[] {1, 0}));
        refused("newTokens[0]", () -> att.setStagedStep(stage, new int[] {5, 9}, new int[] {6, 0}));
    }

    @Test
    void unsupportedBackendsAndSpecsAreRefused() {
        refused("backendId", () -> CacheAttentionTasks.check("ptx-cuda", SPEC, PAGED));
        // No kernel table has head dim 40.
        refused("spec.headDim", () -> CacheAttentionTasks.check("ptx-tornado",
                SPEC.toBuilder().headDim(40).build(), KvCacheSpec.paged(SLOTS, HKV, 128, 40, 16)));
        refused("headDim", () -> CacheAttentionTasks.check("tornado-simt",
                SPEC.toBuilder().headDim(40).build(), KvCacheSpec.paged(SLOTS, HKV, 128, 40, 16)));
        // bf16 caches are served (bf16 bits in ShortArrays); an array of the other type is refused by name.
        CacheAttentionSpec bf16 = SPEC.toBuilder().dtype(DType.BF16).build();
        KvCacheSpec bf16Cache = new KvCacheSpec(SLOTS, HKV, 128, D, DType.BF16, 16, PAGED.pages());
        CacheAttentionTasks.check("tornado-simt", bf16, bf16Cache);
        CacheAttentionTasks att = CacheAttentionTasks.of("tornado-simt", bf16, bf16Cache, 58);
        assertEquals(uk.ac.manchester.tornado.api.types.arrays.ShortArray.class, att.arrayType());
        uk.ac.manchester.tornado.api.types.arrays.ShortArray k = att.newCacheArray();
        uk.ac.manchester.tornado.api.types.arrays.ShortArray v = att.newCacheArray();
        int queries = SLOTS * HQ * D;
        refused("kCache", () -> att.addDecode(new uk.ac.manchester.tornado.api.TaskGraph("g"), "g",
                new uk.ac.manchester.tornado.api.GridScheduler(), "a_", new uk.ac.manchester.tornado.api.types.arrays.ShortArray(queries),
                new HalfFloatArray(Math.toIntExact(bf16Cache.elements())), v, CacheAttentionTasks.newStepArray(SLOTS),
                att.newBlockTable(), new uk.ac.manchester.tornado.api.types.arrays.ShortArray(queries), null));
        refused("q", () -> att.addDecode(new uk.ac.manchester.tornado.api.TaskGraph("g"), "g",
                new uk.ac.manchester.tornado.api.GridScheduler(), "a_", new HalfFloatArray(queries), k, v,
                CacheAttentionTasks.newStepArray(SLOTS), att.newBlockTable(),
                new uk.ac.manchester.tornado.api.types.arrays.ShortArray(queries), null));
    }

    @Test
    void setStepWritesLengthsCountsAndOffsets() {
        IntArray step = CacheAttentionTasks.newStepArray(3);
        CacheAttentionTasks.setStep(step, new int[] {5, 0, 9}, new int[] {2, 0, 3});
        assertEquals("[5, 0, 9, 2, 0, 3, 0, 2, 2, 5]", java.util.Arrays.toString(step.toHeapArray()));
        refused("newTokens[1]", () -> CacheAttentionTasks.setStep(step, new int[] {5, 0, 9}, new int[] {2, 1, 3}));
        refused("lengthsAfter/newTokens", () -> CacheAttentionTasks.setStep(step, new int[] {5}, new int[] {1}));
        assertEquals("[5, 0, 9, 2, 0, 3, 0, 2, 2, 5]", java.util.Arrays.toString(step.toHeapArray()),
                "a refused step writes nothing");
    }

    private static void refused(String argument, Executable call) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, call);
        assertEquals(argument, e.argument(), e.getMessage());
        assertTrue(e.getMessage().contains(argument), e.getMessage());
    }
}
