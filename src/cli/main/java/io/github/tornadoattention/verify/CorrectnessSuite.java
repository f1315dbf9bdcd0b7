package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;

/**
 * The correctness suite every backend must pass: the seven seed cases (128 to 2048 tokens, causal
 * and not, D = 64), then D = 128, Sq != Skv both ways, odd lengths, GQA, MQA, BSHD, decode and a NaN
 * in one key ({@link NanCheck}), plus optional random shapes. Each case runs on fresh random inputs into a NaN-poisoned output and is
 * compared with the CPU reference; the CPU reference itself is compared with
 * {@link OnlineSoftmaxReference}.
 */
public final class CorrectnessSuite {
    private CorrectnessSuite() {
    }

    public record Case(String name, AttentionShape shape) {
    }

    /**
     * One case's result. {@code backendId} is the backend that ran it (what {@code auto} chose);
     * {@code failure} is set when the backend threw instead of answering; {@code notServed} when its plan refused
     * the (valid) shape by name, as a backend does for a head dim, element type or feature it has no kernel for.
     */
    public record Outcome(Case testCase, long seed, String backendId, ErrorStats errors, String failure, String notServed) {
        public Outcome(Case testCase, long seed, String backendId, ErrorStats errors, String failure) {
            this(testCase, seed, backendId, errors, failure, null);
        }

        public boolean passed() {
            return notServed == null && failure == null && errors.passes();
        }

        /** True unless the backend refused the case at plan time (then it neither passed nor failed). */
        public boolean served() {
            return notServed == null;
        }

        /** What the result was compared with: see {@link #oracleName(String)}. */
        public String oracle() {
            return oracleName(backendId);
        }

        @Override
        public String toString() {
            if (!served()) {
                return "SKIP " + testCase.name() + " [" + testCase.shape() + "] not served: " + notServed;
            }
            return (passed() ? "PASS " : "FAIL ") + testCase.name() + " [" + testCase.shape() + "] "
                    + (failure != null ? failure : errors.toString());
        }
    }

    /** The seeds' cases: 128 to 2048 tokens, causal and non-causal, D = 64. */
    public static List<Case> seedCases() {
        return List.of(
                new Case("seed-8x8x128", shape(8, 8, 8, 128, 128, 64, false, Layout.BHSD)),
                new Case("seed-1x8x512-causal", shape(1, 8, 8, 512, 512, 64, true, Layout.BHSD)),
                new Case("seed-16x8x512", shape(16, 8, 8, 512, 512, 64, false, Layout.BHSD)),
                new Case("seed-16x8x512-causal", shape(16, 8, 8, 512, 512, 64, true, Layout.BHSD)),
                new Case("seed-2x8x1024", shape(2, 8, 8, 1024, 1024, 64, false, Layout.BHSD)),
                new Case("seed-1x4x2048", shape(1, 4, 4, 2048, 2048, 64, false, Layout.BHSD)),
                new Case("seed-1x4x2048-causal", shape(1, 4, 4, 2048, 2048, 64, true, Layout.BHSD)));
    }

    /** The seeds plus the cases that exercise every other part of the semantics. */
    public static List<Case> fullSuite() {
        List<Case> cases = new ArrayList<>(seedCases());
        cases.addAll(List.of(
                new Case("d128", shape(2, 8, 8, 512, 512, 128, false, Layout.BHSD)),
                new Case("d128-causal", shape(2, 8, 8, 512, 512, 128, true, Layout.BHSD)),
                new Case("sq<skv-causal", shape(2, 4, 4, 200, 777, 64, true, Layout.BHSD)),
                new Case("sq>skv-causal-empty-rows", shape(2, 4, 4, 300, 129, 64, true, Layout.BHSD)),
                new Case("sq>skv", shape(1, 4, 4, 257, 100, 128, false, Layout.BHSD)),
                new Case("odd-lengths-causal", shape(3, 5, 5, 77, 77, 64, true, Layout.BHSD)),
                new Case("odd-lengths-d128", shape(1, 3, 3, 1000, 1001, 128, false, Layout.BHSD)),
                new Case("single-token", shape(2, 2, 2, 1, 1, 64, true, Layout.BHSD)),
                new Case("gqa-causal", shape(2, 8, 2, 256, 256, 64, true, Layout.BHSD)),
                new Case("mqa", shape(2, 8, 1, 333, 333, 128, false, Layout.BHSD)),
                new Case("bshd-causal", shape(2, 4, 4, 128, 128, 64, true, Layout.BSHD)),
                new Case("bshd-gqa-d128", shape(1, 8, 2, 300, 500, 128, false, Layout.BSHD)),
                new Case("decode-gqa", shape(4, 32, 8, 1, 4096, 128, true, Layout.BHSD)),
                new Case("decode-16-queries", shape(1, 16, 4, 16, 3000, 128, true, Layout.BSHD)),
                new Case("custom-scale", AttentionShape.builder().batch(1).heads(4).queryLength(130)
                        .headDim(64).causal(true).scale(0.3f).build()),
                NanCheck.testCase()));
        cases.addAll(coverageCases());
        return cases;
    }

    /** Head dims every backend may serve (the kernels' table decides which each one does). */
    public static final int[] HEAD_DIMS = {32, 64, 96, 128, 192, 256};

    /**
     * Model coverage: every head dim (prefill causal and not, GQA decode), bf16, and the score features (windows
     * of several kinds, softcap, sinks, all together, on prefill and decode). A backend that has no kernel for a
     * case refuses it at plan time: reported as not served.
     */
    public static List<Case> coverageCases() {
        List<Case> cases = new ArrayList<>();
        for (int d : HEAD_DIMS) {
            if (d == 64 || d == 128) {
                continue; // the cases above
            }
            cases.add(new Case("d" + d + "-causal-gqa", shape(2, 4, 2, 300, 300, d, true, Layout.BHSD)));
            cases.add(new Case("d" + d + "-odd", shape(1, 2, 2, 129, 257, d, false, Layout.BSHD)));
            cases.add(new Case("d" + d + "-decode-gqa", shape(2, 8, 2, 1, 1000, d, true, Layout.BHSD)));
        }
        for (int d : HEAD_DIMS) {
            cases.add(new Case("bf16-d" + d + "-causal", shape(2, 4, 2, 200, 333, d, true, Layout.BHSD).toBuilder()
                    .dtype(DType.BF16).build()));
        }
        cases.add(new Case("bf16-decode-gqa", shape(4, 32, 8, 1, 2048, 128, true, Layout.BHSD).toBuilder().dtype(DType.BF16).build()));
        cases.add(new Case("bf16-odd-bshd", shape(1, 3, 3, 77, 1001, 64, false, Layout.BSHD).toBuilder().dtype(DType.BF16).build()));
        cases.add(new Case("window-left-causal", shape(1, 4, 4, 700, 700, 64, true, Layout.BHSD).toBuilder().window(128, -1).build()));
        cases.add(new Case("window-both-sq<skv", shape(2, 4, 2, 150, 500, 128, false, Layout.BHSD).toBuilder().window(50, 30).build()));
        cases.add(new Case("window-smaller-than-a-tile", shape(1, 2, 2, 300, 300, 64, true, Layout.BSHD).toBuilder().window(5, 0).build()));
        cases.add(new Case("window-right-only", shape(1, 2, 1, 257, 257, 128, false, Layout.BHSD).toBuilder().window(-1, 17).build()));
        cases.add(new Case("softcap-30", shape(2, 4, 4, 256, 256, 128, true, Layout.BHSD).toBuilder().softcap(30f).build()));
        cases.add(new Case("softcap-small", shape(1, 4, 2, 200, 300, 64, false, Layout.BHSD).toBuilder().softcap(2f).build()));
        cases.add(new Case("sinks-gqa", shape(2, 8, 2, 199, 199, 64, true, Layout.BHSD).toBuilder().sinks(sinkLogits(8, 1)).build()));
        cases.add(new Case("sinks-empty-rows", shape(1, 4, 4, 300, 129, 128, true, Layout.BHSD).toBuilder().sinks(sinkLogits(4, 2)).build()));
        cases.add(new Case("decode-window", shape(4, 8, 2, 1, 3000, 128, true, Layout.BHSD).toBuilder().window(512, 0).build()));
        cases.add(new Case("decode-window-softcap-sinks", shape(2, 8, 4, 1, 2500, 256, true, Layout.BHSD).toBuilder()
                .window(300, 0).softcap(50f).sinks(sinkLogits(8, 3)).build()));
        cases.add(new Case("all-features-bf16-d96", shape(2, 4, 2, 333, 333, 96, true, Layout.BSHD).toBuilder().dtype(DType.BF16)
                .window(64, 0).softcap(50f).sinks(sinkLogits(4, 4)).build()));
        cases.add(new Case("all-features-d256", shape(1, 4, 2, 260, 400, 256, false, Layout.BHSD).toBuilder()
                .window(100, 20).softcap(30f).sinks(sinkLogits(4, 5)).build()));
        return cases;
    }

    /** Sink logits of {@code heads} query heads, N(0,1) from {@code seed} (the suite's are fixed). */
    static float[] sinkLogits(int heads, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        float[] logits = new float[heads];
        for (int h = 0; h < heads; h++) {
            logits[h] = (float) random.nextGaussian();
        }
        return logits;
    }

    /**
     * {@code count} random shapes (every head dim of {@link #HEAD_DIMS}, lengths up to 1500, GQA/MQA, both layouts,
     * odd scales; a quarter bf16, a quarter with a window, softcap or sinks).
     */
    public static List<Case> randomCases(int count, long seed) {
        return randomCases(seed).limit(count).toList();
    }

    /** The random shapes of {@link #randomCases(int, long)} one at a time, as many as are taken. */
    public static Stream<Case> randomCases(long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        int[] n = {0};
        return Stream.generate(() -> {
            int kvHeads = 1 << random.nextInt(3);
            int queryHeads = kvHeads * (1 << random.nextInt(2));
            int queryLength = 1 + random.nextInt(700);
            int kvLength = random.nextBoolean() ? queryLength : 1 + random.nextInt(1500);
            AttentionShape.Builder b = AttentionShape.builder().batch(1 + random.nextInt(3)).heads(queryHeads)
                    .kvHeads(kvHeads).queryLength(queryLength).kvLength(kvLength)
                    .headDim(HEAD_DIMS[random.nextInt(HEAD_DIMS.length)]).causal(random.nextBoolean())
                    .layout(random.nextBoolean() ? Layout.BHSD : Layout.BSHD)
                    .scale(random.nextInt(4) == 0 ? (float) (0.05 + 0.45 * random.nextDouble()) : null)
                    .dtype(random.nextInt(4) == 0 ? DType.BF16 : DType.FP16);
            if (random.nextInt(4) == 0) {
                switch (random.nextInt(3)) {
                    case 0 -> b.window(random.nextInt(400), random.nextBoolean() ? -1 : random.nextInt(100));
                    case 1 -> b.softcap((float) (5 + 50 * random.nextDouble()));
                    default -> b.sinks(sinkLogits(queryHeads, random.nextLong()));
                }
            }
            AttentionShape shape = b.build();
            return new Case("random-" + n[0]++, shape);
        });
    }

    /**
     * Runs {@code testCase} on {@code backend} with inputs drawn from {@code seed}, output and
     * logsumexp poisoned with NaN, and compares with the oracle.
     */
    public static Outcome check(AttentionBackend backend, Case testCase, long seed) {
        return check(List.of(backend), testCase, seed).get(0);
    }

    /** As {@link #check(AttentionBackend, Case, long)} for several backends on the same inputs; the oracle runs once. */
    public static List<Outcome> check(List<AttentionBackend> backends, Case testCase, long seed) {
        AttentionShape shape = testCase.shape();
        List<Outcome> outcomes = new ArrayList<>();
        boolean nan = NanCheck.isNanCase(testCase);
        try (RandomInputs in = RandomInputs.generate(shape, seed)) {
            if (nan) {
                NanCheck.poison(shape, in.k());
            }
            // The oracle runs before any backend, so a backend that wrote into its inputs cannot hide it.
            Oracle oracle = new Oracle(shape, in);
            backends.forEach(backend -> oracle.expectedFor(usesCpuReference(backend) ? Backends.CPU_REFERENCE : backend.id()));
            for (AttentionBackend backend : backends) {
                String ranOn = backend.id();
                AttentionPlan planned;
                try {
                    planned = backend.plan(shape);
                } catch (InvalidArgumentException refused) {
                    outcomes.add(new Outcome(testCase, seed, ranOn, null, null, refused.getMessage()));
                    continue;
                } catch (RuntimeException e) {
                    outcomes.add(new Outcome(testCase, seed, ranOn, null, e.getClass().getSimpleName() + ": " + e.getMessage()));
                    continue;
                }
                try (HalfTensor o = RandomInputs.poisonedOutput(shape); AttentionPlan plan = planned) {
                    ranOn = plan.backendId(); // auto's choice: cpu-reference must not be compared with itself
                    float[] lse = RandomInputs.poisonedLogSumExp(shape);
                    if (nan) {
                        NanCheck.prepare(o, lse);
                    }
                    plan.forward(in.q(), in.k(), in.v(), o, lse);
                    double[][] expected = oracle.expectedFor(ranOn);
                    outcomes.add(new Outcome(testCase, seed, ranOn, nan ? NanCheck.compare(shape, o, expected[0], lse,
                            expected[1]) : ErrorStats.compare(o, expected[0], lse, expected[1]), null));
                } catch (RuntimeException e) {
                    outcomes.add(new Outcome(testCase, seed, ranOn, null, e.getClass().getSimpleName() + ": " + e.getMessage()));
                }
            }
        }
        return outcomes;
    }

    /**
     * What a backend's results are compared with: the CPU reference, or, for {@code cpu-reference}
     * itself (never compared with itself), the independent {@link OnlineSoftmaxReference}.
     */
    public static String oracleName(String backendId) {
        return backendId.equals(Backends.CPU_REFERENCE) ? "online-softmax reference" : "CPU reference";
    }

    /** True when {@code backend} computes with the CPU reference: cpu-reference, or auto where nothing else is available. */
    public static boolean usesCpuReference(AttentionBackend backend) {
        if (backend.id().equals(Backends.AUTO)) {
            return Backends.list().stream().filter(s -> s.availability().available())
                    .allMatch(s -> s.id().equals(Backends.CPU_REFERENCE) || s.id().equals(Backends.AUTO));
        }
        return backend.id().equals(Backends.CPU_REFERENCE);
    }

    /**
     * Compares a backend's output for {@code in} with the oracle named by {@link #oracleName(String)}.
     * {@code lse} may be null.
     */
    public static ErrorStats compareWithOracle(String backendId, AttentionShape shape, RandomInputs in,
                                               HalfTensor o, float[] lse) {
        double[][] expected = new Oracle(shape, in).expectedFor(backendId);
        return ErrorStats.compare(o, expected[0], lse, expected[1]);
    }

    /** The expected O and logsumexp for one set of inputs, each formulation computed at most once. */
    private static final class Oracle {
        private final AttentionShape shape;
        private final RandomInputs in;
        private double[][] reference;
        private double[][] secondFormulation;

        Oracle(AttentionShape shape, RandomInputs in) {
            this.shape = shape;
            this.in = in;
        }

        double[][] expectedFor(String backendId) {
            if (backendId.equals(Backends.CPU_REFERENCE)) {
                if (secondFormulation == null) {
                    secondFormulation = OnlineSoftmaxReference.compute(shape, in.q(), in.k(), in.v());
                }
                return secondFormulation;
            }
            if (reference == null) {
                CpuReference.Result ref = CpuReference.compute(shape, in.q(), in.k(), in.v());
                reference = new double[][] {ref.output(), ref.logSumExp()};
            }
            return reference;
        }
    }

    private static AttentionShape shape(int batch, int queryHeads, int kvHeads, int queryLength, int kvLength,
                                        int headDim, boolean causal, Layout layout) {
        return AttentionShape.builder().batch(batch).heads(queryHeads).kvHeads(kvHeads).queryLength(queryLength)
                .kvLength(kvLength).headDim(headDim).causal(causal).layout(layout).build();
    }
}
