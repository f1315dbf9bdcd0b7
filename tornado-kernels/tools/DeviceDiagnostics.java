import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.util.SplittableRandom;

/**
 * Step-by-step device checks of one plan's life (first call, repeated call, rerun, changed Q, changed
 * K/V, a fresh output tensor), then a series of plans created and closed in one JVM. Prints one line per
 * step. Dev tool for tornado-kernels/gpu-check.sh; compiled against the built jars, not by Maven.
 *   java ... DeviceDiagnostics BACKEND
 */
public final class DeviceDiagnostics {
    public static void main(String[] args) {
        String backend = args[0];
        steps(backend, shape(8, 8, 8, 128, 128, 64, false, Layout.BHSD));
        steps(backend, shape(2, 8, 2, 300, 517, 128, true, Layout.BSHD));
        int[][] lifecycle = {{1, 4, 4, 2048, 2048, 64}, {2, 8, 8, 512, 512, 128}, {2, 4, 4, 200, 777, 64},
            {1, 3, 3, 1000, 1001, 128}, {4, 32, 8, 1, 4096, 128}, {3, 5, 5, 77, 77, 64}, {16, 8, 8, 512, 512, 64}};
        for (int i = 0; i < lifecycle.length; i++) {
            int[] s = lifecycle[i];
            AttentionShape shape = shape(s[0], s[1], s[2], s[3], s[4], s[5], i % 2 == 1, Layout.BHSD);
            try (RandomInputs in = RandomInputs.generate(shape, 100 + i);
                 HalfTensor o = RandomInputs.poisonedOutput(shape);
                 AttentionPlan plan = Backends.get(backend).plan(shape)) {
                float[] lse = RandomInputs.poisonedLogSumExp(shape);
                plan.forward(in.q(), in.k(), in.v(), o, lse);
                report("plan " + (i + 1) + " of " + lifecycle.length + " " + shape, CorrectnessSuite.compareWithOracle(backend, shape, in, o, lse));
            } catch (RuntimeException e) {
                System.out.println("FAIL plan " + (i + 1) + " " + shape + ": " + e);
            }
        }
    }

    private static void steps(String backend, AttentionShape shape) {
        System.out.println("== " + backend + " " + shape);
        try (RandomInputs in = RandomInputs.generate(shape, 1);
             HalfTensor o = RandomInputs.poisonedOutput(shape);
             AttentionPlan plan = Backends.get(backend).plan(shape)) {
            float[] lse = RandomInputs.poisonedLogSumExp(shape);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            report("first call", CorrectnessSuite.compareWithOracle(backend, shape, in, o, lse));
            o.fill(Float.NaN);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            report("same inputs again", CorrectnessSuite.compareWithOracle(backend, shape, in, o, lse));
            plan.benchmarkHooks().rerunOnDevice();
            SplittableRandom random = new SplittableRandom(2);
            in.q().copyFrom(gaussian(in.q().length(), random));
            o.fill(Float.NaN);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            report("changed Q", CorrectnessSuite.compareWithOracle(backend, shape, in, o, lse));
            in.k().copyFrom(gaussian(in.k().length(), random));
            in.v().copyFrom(gaussian(in.v().length(), random));
            o.fill(Float.NaN);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            report("changed K and V", CorrectnessSuite.compareWithOracle(backend, shape, in, o, lse));
            try (HalfTensor o2 = plan.forward(in.q(), in.k(), in.v())) {
                report("fresh output tensor", CorrectnessSuite.compareWithOracle(backend, shape, in, o2, null));
            }
        } catch (RuntimeException e) {
            System.out.println("FAIL " + e);
        }
    }

    private static float[] gaussian(long n, SplittableRandom random) {
        float[] values = new float[Math.toIntExact(n)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) random.nextGaussian();
        }
        return values;
    }

    private static void report(String step, ErrorStats errors) {
        System.out.println((errors.passes() ? "PASS " : "FAIL ") + step + ": " + errors);
    }

    private static AttentionShape shape(int b, int hq, int hkv, int sq, int skv, int d, boolean causal, Layout layout) {
        return AttentionShape.builder().batch(b).heads(hq).kvHeads(hkv).queryLength(sq).kvLength(skv).headDim(d)
                .causal(causal).layout(layout).build();
    }
}
