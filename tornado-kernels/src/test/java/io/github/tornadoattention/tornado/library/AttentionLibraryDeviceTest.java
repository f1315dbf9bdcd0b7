package io.github.tornadoattention.tornado.library;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The library tasks end to end on TornadoVM's default device: the shape-by-scalars decode in a TaskGraph of its
 * own against a plain-Java reference, and two of the GPU check's cache cases (paged decode, paged chunked prefill)
 * against the CPU reference. Runs only where the default device is on TornadoVM's CUDA backend; elsewhere (the PTX
 * SDK, no GPU) it is skipped with the reason.
 */
class AttentionLibraryDeviceTest {

    /**
     * Skips unless the default TornadoVM device is on the CUDA backend (TornadoVM turns a library task it cannot
     * place into a bailout without the reason: check the device first; only the CUDA backend's devices expose their
     * stream to library providers).
     */
    private static void requireCudaBackend() {
        TornadoVMBackendType backend;
        try {
            backend = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice().getTornadoVMBackend();
        } catch (RuntimeException | Error e) {
            Assumptions.abort("no TornadoVM device: " + e);
            return;
        }
        Assumptions.assumeTrue(backend == TornadoVMBackendType.CUDA,
                "the default TornadoVM device is on the " + backend + " backend; library tasks need the CUDA backend");
    }

    /** A paged decode and a paged chunked prefill of the GPU check ({@link LibraryGpuCheck.CacheRun}), three steps each. */
    @Test
    void cacheFunctionsMatchReference() {
        requireCudaBackend();
        for (String name : new String[] {"paged-decode-d128-gqa4", "paged-chunked-prefill-d128-gqa4"}) {
            LibraryGpuCheck.CacheCase c = LibraryGpuCheck.CACHE_CASES.stream().filter(k -> k.name().equals(name))
                    .findFirst().orElseThrow();
            LibraryGpuCheck.CacheRun run = new LibraryGpuCheck.CacheRun(c, 7);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(run.graph().snapshot())) {
                for (int s = 0; s < 3; s++) {
                    assertTrue(run.step(s, plan::execute), name + " step " + s + ": " + run.summary());
                }
            } catch (Exception e) {
                throw new AssertionError(name, e);
            }
        }
    }

    @Test
    void decodeTaskMatchesReference() throws Exception {
        requireCudaBackend();
        int batch = 2, heads = 4, kvHeads = 2, queries = 1, capacity = 700, d = 128;
        float scale = (float) (1 / Math.sqrt(d));
        int[] lengths = {333, 700};
        int[] newQueries = {1, 1};
        Random random = new Random(7);
        HalfFloatArray q = random(random, batch * heads * queries * d);
        HalfFloatArray k = random(random, batch * kvHeads * capacity * d);
        HalfFloatArray v = random(random, batch * kvHeads * capacity * d);
        HalfFloatArray o = new HalfFloatArray(batch * heads * queries * d);
        IntArray lens = new IntArray(2 * batch);
        AttentionLibraryTasks.fillLens(lens, lengths, newQueries);

        TaskGraph graph = new TaskGraph("attention")
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, q, k, v, lens)
                .libraryTask("decode", AttentionLibraryTasks::decode, q, k, v, o, lens, batch, heads, kvHeads, queries,
                        capacity, d, true, scale)
                .transferToHost(DataTransferMode.EVERY_EXECUTION, o);
        try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
            plan.execute();
        }
        int group = heads / kvHeads;
        double worst = 0;
        for (int b = 0; b < batch; b++) {
            for (int h = 0; h < heads; h++) {
                long qBase = ((long) (b * heads + h) * queries) * d;
                long kvBase = ((long) (b * kvHeads + h / group) * capacity) * d;
                double[] scores = new double[lengths[b]];
                double max = Double.NEGATIVE_INFINITY;
                for (int j = 0; j < lengths[b]; j++) {
                    double s = 0;
                    for (int x = 0; x < d; x++) {
                        s += q.get((int) (qBase + x)).getFloat32() * k.get((int) (kvBase + (long) j * d + x)).getFloat32();
                    }
                    scores[j] = s * scale;
                    max = Math.max(max, scores[j]);
                }
                double sum = 0;
                for (int j = 0; j < lengths[b]; j++) {
                    scores[j] = Math.exp(scores[j] - max);
                    sum += scores[j];
                }
                for (int x = 0; x < d; x++) {
                    double expected = 0;
                    for (int j = 0; j < lengths[b]; j++) {
                        expected += scores[j] / sum * v.get((int) (kvBase + (long) j * d + x)).getFloat32();
                    }
                    worst = Math.max(worst, Math.abs(expected - o.get((int) (qBase + x)).getFloat32()));
                }
            }
        }
        assertTrue(worst < 2e-3, "max abs error " + worst);
    }

    private static HalfFloatArray random(Random random, int n) {
        HalfFloatArray a = new HalfFloatArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, new HalfFloat((float) random.nextGaussian()));
        }
        return a;
    }
}
