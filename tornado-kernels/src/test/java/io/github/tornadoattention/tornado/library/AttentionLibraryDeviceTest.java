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
 * The decode library task end to end: a TaskGraph with one {@code libraryTask} on TornadoVM's default
 * device, against a plain-Java reference. Runs only where the provider is enabled (AttentionLibrary on
 * the class path with its services entry) and the default device is on TornadoVM's CUDA backend;
 * elsewhere (the PTX SDK, no GPU) it is skipped with the reason.
 */
class AttentionLibraryDeviceTest {

    @Test
    void decodeTaskMatchesReference() throws Exception {
        try {
            Class.forName("io.github.tornadoattention.tornado.library.AttentionLibrary");
        } catch (ClassNotFoundException e) {
            Assumptions.abort("the AttentionLibrary provider is not enabled in this build (LIBRARY-TASKS.md)");
        }
        // TornadoVM turns a library task it cannot place into a bailout without the reason: check the
        // device first. Only the CUDA backend's devices expose their stream to library providers.
        TornadoVMBackendType backend;
        try {
            backend = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice().getTornadoVMBackend();
        } catch (RuntimeException | Error e) {
            Assumptions.abort("no TornadoVM device: " + e);
            return;
        }
        Assumptions.assumeTrue(backend == TornadoVMBackendType.CUDA,
                "the default TornadoVM device is on the " + backend + " backend; library tasks need the CUDA backend");
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
