package io.github.tornadoattention.cli;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import java.io.IOException;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code selftest}: the correctness suite on one backend (or several, sharing each case's inputs
 * and reference), printing {@code N passed, M failed}.
 */
@Command(name = "selftest", mixinStandardHelpOptions = true,
        description = "Run the correctness suite against the CPU reference; exit 1 if any case fails.")
final class SelftestCommand implements Callable<Integer> {
    /** Random cases drawn to estimate the work of --random N (all of them when N is smaller). */
    private static final int RANDOM_SAMPLE = 1000;

    @Spec
    CommandSpec spec;

    @Option(names = "--backend", paramLabel = "ID[,ID...]", defaultValue = Backends.AUTO,
            description = "backend to test, or several separated by commas (default: ${DEFAULT-VALUE})")
    String backendOption;

    @Option(names = "--random", paramLabel = "N", defaultValue = "0", description = "also run N random shapes (default: ${DEFAULT-VALUE})")
    int random;

    @Option(names = "--seed", paramLabel = "N", description = "seed of inputs and random shapes (default: fresh each run)")
    Long seed;

    @Option(names = "--cases", paramLabel = "FROM[-TO]",
            description = "run only these cases (1-based, of the suite then the random shapes), e.g. 5 or 3-9")
    String caseRange;

    @Mixin
    FeatureOptions features = new FeatureOptions();

    @Option(names = "--inference", description = "instead: the inference API's scenarios (KV caches contiguous and paged,"
            + " varlen prefill, decode, rollback, shared prefixes, merge) on the backend's device, every head dim, fp16 and"
            + " bf16 caches, with and without window, softcap and sinks")
    boolean inference;

    @Option(names = "--cuda-graph", description = "with --inference on the TornadoVM backends: the caches' task graphs run as"
            + " CUDA graphs (PlanOptions.cudaGraph)")
    boolean cudaGraph;

    @Option(names = "--lanes", paramLabel = "N", description = "with --inference on the TornadoVM backends: N host threads"
            + " run the caches' executions (PlanOptions.lanes)")
    int lanes;

    @Option(names = "--threads", paramLabel = "N", description = "with --inference: instead, N engine threads at once on"
            + " the device, each with its own caches and plans (prefill, decode, rollback, speculative steps, merge; two"
            + " rounds each), fp16, every head dim")
    int threads;

    @Option(names = "--json", description = "also print one JSON object on the last line: every case, the totals, the seed")
    boolean json;

    @Option(names = "--force", description = "run even when the estimated CPU time or memory is over the limits")
    boolean force;

    @Override
    public Integer call() throws IOException {
        if (threads != 0 && !inference) {
            throw new InvalidArgumentException("--threads", threads, "is for --inference (engine threads on a device)");
        }
        if (inference) {
            return inferenceSuite();
        }
        if (random < 0) {
            throw new InvalidArgumentException("--random", random, "must be >= 0");
        }
        features.validate();
        List<AttentionBackend> backends = backends();
        long baseSeed = seed != null ? seed : System.nanoTime();
        List<CorrectnessSuite.Case> suite = CorrectnessSuite.fullSuite().stream()
                .map(c -> withFeatures(c, baseSeed)).toList();
        long total = (long) suite.size() + random;
        long[] range = range(caseRange, total);
        long from = range[0];
        long count = range[1] - range[0] + 1;
        estimate(backends, suite, from, count, baseSeed).check(random > 0 ? "--random " + random : "selftest", force);

        PrintWriter out = spec.commandLine().getOut();
        for (AttentionBackend backend : backends) {
            out.printf("selftest of %s (%s), %s%n", backend.id(), backend.availability().detail(), checkedAgainst(backend));
        }
        out.printf("seed %d, %d cases%n", baseSeed, count);
        // Random cases are drawn as they are run, so --random N needs no memory for N cases.
        Iterator<CorrectnessSuite.Case> cases = Stream.concat(suite.stream(),
                        CorrectnessSuite.randomCases(baseSeed).map(c -> withFeatures(c, baseSeed)))
                .skip(from - 1).limit(count).iterator();
        int[] passed = new int[backends.size()];
        int[] notServed = new int[backends.size()];
        List<Map<String, Object>> caseResults = new ArrayList<>();
        for (long number = from; cases.hasNext(); number++) {
            List<CorrectnessSuite.Outcome> outcomes = CorrectnessSuite.check(backends, cases.next(), baseSeed + number - 1);
            for (int b = 0; b < backends.size(); b++) {
                CorrectnessSuite.Outcome outcome = outcomes.get(b);
                String who = backends.size() > 1 ? backends.get(b).id() + " " : "";
                out.printf("[%d/%d] %s%s%n", number, total, who, outcome);
                passed[b] += outcome.passed() ? 1 : 0;
                notServed[b] += outcome.served() ? 0 : 1;
                if (json) {
                    caseResults.add(caseJson(number, backends.get(b).id(), outcome));
                }
            }
            out.flush();
        }
        long failed = 0;
        long passedAll = 0;
        long skippedAll = 0;
        List<Map<String, Object>> totals = new ArrayList<>();
        for (int b = 0; b < backends.size(); b++) {
            long failedHere = count - passed[b] - notServed[b];
            if (backends.size() > 1) {
                out.printf("%s: %d passed, %d failed%s%n", backends.get(b).id(), passed[b], failedHere, notServedText(notServed[b]));
            }
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("backend", backends.get(b).id());
            t.put("passed", passed[b]);
            t.put("failed", failedHere);
            t.put("not_served", notServed[b]);
            totals.add(t);
            failed += failedHere;
            passedAll += passed[b];
            skippedAll += notServed[b];
        }
        out.printf("%d passed, %d failed%s%n", passedAll, failed, notServedText(skippedAll));
        if (json) {
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("seed", baseSeed);
            result.put("random", random);
            result.putAll(features.typedJson());
            result.put("cases_run", count);
            result.put("passed", passedAll);
            result.put("failed", failed);
            result.put("not_served", skippedAll);
            result.put("backends", totals);
            result.put("cases", caseResults);
            out.println(JSON.std.asString(result));
        }
        return failed == 0 ? 0 : Main.EXIT_FAILED;
    }

    /** ", K not served (refused at plan time: no kernel for that head dim, element type or feature)", or nothing. */
    private static String notServedText(long count) {
        return count == 0 ? "" : ", " + count + " not served (refused at plan time: see SKIP lines)";
    }

    /** {@code testCase} with --window, --softcap and --sinks applied (sink logits drawn from the seed and the case name). */
    private CorrectnessSuite.Case withFeatures(CorrectnessSuite.Case testCase, long baseSeed) {
        return new CorrectnessSuite.Case(testCase.name(), features.apply(testCase.shape(), baseSeed ^ testCase.name().hashCode()));
    }

    /** The ids named by --backend; an empty one (as in "--backend ,") is an error. */
    private List<String> backendIds() {
        List<String> ids = List.of(backendOption.split(",", -1));
        if (ids.stream().anyMatch(String::isBlank)) {
            throw new InvalidArgumentException("--backend", "'" + backendOption + "'",
                    "must name one or more of " + String.join(", ", Backends.IDS) + ", separated by commas");
        }
        return ids.stream().map(String::trim).toList();
    }

    private List<AttentionBackend> backends() {
        return backendIds().stream().map(Backends::require).toList();
    }

    /** Says what the backend's results are compared with, and when it is the oracle itself. */
    private static String checkedAgainst(AttentionBackend backend) {
        if (!CorrectnessSuite.usesCpuReference(backend)) {
            return "checked against the " + CorrectnessSuite.oracleName(backend.id());
        }
        String who = backend.id().equals(Backends.CPU_REFERENCE) ? "cpu-reference" : "auto runs cpu-reference here, which";
        return who + " is the CPU reference itself: checked against the independent "
                + CorrectnessSuite.oracleName(Backends.CPU_REFERENCE) + " instead";
    }

    /**
     * The CPU work of the chosen cases: per case one oracle pass (the CPU reference, and the
     * online-softmax reference where cpu-reference is tested) plus a pass per backend that is the CPU
     * reference. Random cases count at the mean of the first {@value #RANDOM_SAMPLE}.
     */
    private static Limits.Work estimate(List<AttentionBackend> backends, List<CorrectnessSuite.Case> suite, long from,
                                        long count, long baseSeed) {
        long onCpu = backends.stream().filter(CorrectnessSuite::usesCpuReference).count();
        long passes = (onCpu < backends.size() ? 1 : 0) + (onCpu > 0 ? 1 : 0) + onCpu;
        Limits.Work work = Limits.Work.NONE;
        long end = from - 1 + count; // cases from..end, 1-based
        for (int i = (int) Math.min(from - 1, suite.size()); i < Math.min(end, suite.size()); i++) {
            work = work.then(Limits.Work.of(suite.get(i).shape(), passes));
        }
        long randomCount = end - Math.max(from - 1, suite.size());
        if (randomCount > 0) {
            List<CorrectnessSuite.Case> sample = CorrectnessSuite.randomCases((int) Math.min(randomCount, RANDOM_SAMPLE),
                    baseSeed);
            Limits.Work sampled = Limits.Work.NONE;
            for (CorrectnessSuite.Case c : sample) {
                sampled = sampled.then(Limits.Work.of(c.shape(), passes));
            }
            work = work.then(sampled.times((double) randomCount / sample.size()));
        }
        return work;
    }

    private static Map<String, Object> caseJson(long number, String backendId, CorrectnessSuite.Outcome outcome) {
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("number", number);
        c.put("name", outcome.testCase().name());
        c.put("shape", outcome.testCase().shape().toString());
        c.put("backend", backendId);
        c.put("ran_on", outcome.backendId());
        c.put("checked_against", outcome.oracle());
        if (!outcome.served()) {
            c.put("not_served", outcome.notServed());
            return c;
        }
        c.put("check_passed", outcome.passed());
        ErrorStats e = outcome.errors();
        if (e != null) {
            c.put("max_abs_error", Numbers.json(e.maxAbsError()));
            c.put("rel_error", Numbers.json(e.relativeError()));
            c.put("lse_error", Numbers.json(e.maxLseError()));
            c.put("bad_values", e.badValues());
        }
        if (outcome.failure() != null) {
            c.put("failure", outcome.failure());
        }
        return c;
    }

    /** {from, to} of a 1-based inclusive range such as "5" or "3-9"; all cases when null. */
    private static long[] range(String spec, long total) {
        if (spec == null) {
            return new long[] {1, total};
        }
        try {
            String[] parts = spec.split("-", 2);
            long from = Long.parseLong(parts[0].trim());
            long to = parts.length == 2 ? Long.parseLong(parts[1].trim()) : from;
            if (from >= 1 && from <= to && to <= total) {
                return new long[] {from, to};
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new InvalidArgumentException("--cases", spec, "must be N or FROM-TO within 1.." + total);
    }

    /**
     * The cache scenarios of {@link io.github.tornadoattention.verify.CacheSuite} on each backend's device: every head
     * dim, without and with the score features; a head dim or feature set the device refuses at plan time is reported
     * as not served.
     */
    private int inferenceSuite() {
        if (threads < 0) {
            throw new InvalidArgumentException("--threads", threads, "must be >= 0 (0: the scenarios one after the other)");
        }
        long baseSeed = seed != null ? seed : System.nanoTime();
        PrintWriter out = spec.commandLine().getOut();
        int failed = 0;
        int total = 0;
        int skipped = 0;
        for (String id : backendIds()) {
            io.github.tornadoattention.AttentionDevice device = io.github.tornadoattention.Attention.device(id,
                    io.github.tornadoattention.PlanOptions.builder().cudaGraph(cudaGraph).lanes(lanes).build());
            out.printf("inference selftest of %s on %s, seed %d%s%n", device.backendId(), device.name(), baseSeed,
                    threads > 0 ? ", " + threads + " engine threads" : "");
            if (threads > 0) {
                for (int d : CorrectnessSuite.HEAD_DIMS) {
                    for (io.github.tornadoattention.verify.CacheSuite.CaseResult r
                            : io.github.tornadoattention.verify.CacheSuite.runConcurrently(List.of(device), d, threads, 2,
                                    baseSeed)) {
                        total++;
                        failed += r.passed() ? 0 : 1;
                        out.printf("%s %s: %s%n", r.passed() ? "PASS" : "FAIL", r.name(), r.error());
                    }
                    out.flush();
                }
                continue;
            }
            for (int d : CorrectnessSuite.HEAD_DIMS) {
                for (String kind : new String[] {"fp16", "bf16", "features"}) {
                    String group = "D=" + d + (kind.equals("features") ? " with window, softcap, sinks" : " " + kind);
                    List<io.github.tornadoattention.verify.CacheSuite.CaseResult> results;
                    try {
                        results = kind.equals("features") ? io.github.tornadoattention.verify.CacheSuite.runWithFeatures(device, d, baseSeed)
                                : io.github.tornadoattention.verify.CacheSuite.run(device, d, FeatureOptions.dtype(kind), baseSeed);
                    } catch (InvalidArgumentException refused) {
                        skipped++;
                        out.printf("SKIP %s: not served: %s%n", group, refused.getMessage());
                        out.flush();
                        continue;
                    }
                    for (io.github.tornadoattention.verify.CacheSuite.CaseResult r : results) {
                        total++;
                        failed += r.passed() ? 0 : 1;
                        out.printf("%s %s: %s%n", r.passed() ? "PASS" : "FAIL", r.name(), r.error());
                    }
                    out.flush();
                }
            }
        }
        out.printf("%d passed, %d failed%s%n", total - failed, failed,
                skipped == 0 ? "" : ", " + skipped + " groups not served (refused at plan time: see SKIP lines)");
        return failed == 0 ? 0 : Main.EXIT_FAILED;
    }
}
