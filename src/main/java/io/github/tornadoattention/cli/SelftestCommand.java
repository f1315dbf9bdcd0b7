package io.github.tornadoattention.cli;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.verify.CorrectnessSuite;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
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
    @Spec
    CommandSpec spec;

    @Option(names = "--backend", paramLabel = "ID", split = ",", defaultValue = Backends.AUTO,
            description = "backend to test, or several separated by commas (default: ${DEFAULT-VALUE})")
    List<String> backendIds;

    @Option(names = "--random", paramLabel = "N", defaultValue = "0", description = "also run N random shapes (default: ${DEFAULT-VALUE})")
    int random;

    @Option(names = "--seed", paramLabel = "N", description = "seed of inputs and random shapes (default: fresh each run)")
    Long seed;

    @Option(names = "--cases", paramLabel = "FROM[-TO]",
            description = "run only these cases (1-based, of the suite then the random shapes), e.g. 5 or 3-9")
    String caseRange;

    @Option(names = "--inference", description = "instead: the inference API's scenarios (KV caches contiguous and paged,"
            + " varlen prefill, decode, rollback, shared prefixes, merge) on the backend's device, D=64 and 128")
    boolean inference;

    @Override
    public Integer call() {
        if (inference) {
            return inferenceSuite();
        }
        if (random < 0) {
            throw new InvalidArgumentException("--random", random, "must be >= 0");
        }
        List<AttentionBackend> backends = new ArrayList<>();
        for (String id : backendIds) {
            backends.add(Backends.require(id));
        }
        long baseSeed = seed != null ? seed : System.nanoTime();
        List<CorrectnessSuite.Case> cases = new ArrayList<>(CorrectnessSuite.fullSuite());
        cases.addAll(CorrectnessSuite.randomCases(random, baseSeed));
        int[] range = range(caseRange, cases.size());
        cases = cases.subList(range[0] - 1, range[1]);
        PrintWriter out = spec.commandLine().getOut();
        for (AttentionBackend backend : backends) {
            out.printf("selftest of %s (%s)%n", backend.id(), backend.availability().detail());
        }
        out.printf("seed %d, %d cases%n", baseSeed, cases.size());
        int[] passed = new int[backends.size()];
        for (int i = 0; i < cases.size(); i++) {
            int number = range[0] + i;
            List<CorrectnessSuite.Outcome> outcomes = CorrectnessSuite.check(backends, cases.get(i), baseSeed + number - 1);
            for (int b = 0; b < backends.size(); b++) {
                CorrectnessSuite.Outcome outcome = outcomes.get(b);
                String who = backends.size() > 1 ? backends.get(b).id() + " " : "";
                out.printf("[%d/%d] %s%s%n", number, range[2], who, outcome);
                passed[b] += outcome.passed() ? 1 : 0;
            }
            out.flush();
        }
        int failed = 0;
        int total = 0;
        for (int b = 0; b < backends.size(); b++) {
            if (backends.size() > 1) {
                out.printf("%s: %d passed, %d failed%n", backends.get(b).id(), passed[b], cases.size() - passed[b]);
            }
            failed += cases.size() - passed[b];
            total += passed[b];
        }
        out.printf("%d passed, %d failed%n", total, failed);
        return failed == 0 ? 0 : Main.EXIT_FAILED;
    }

    /** {from, to, total} of a 1-based inclusive range such as "5" or "3-9"; all cases when null. */
    private static int[] range(String spec, int total) {
        if (spec == null) {
            return new int[] {1, total, total};
        }
        try {
            String[] parts = spec.split("-", 2);
            int from = Integer.parseInt(parts[0].trim());
            int to = parts.length == 2 ? Integer.parseInt(parts[1].trim()) : from;
            if (from >= 1 && from <= to && to <= total) {
                return new int[] {from, to, total};
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new InvalidArgumentException("--cases", spec, "must be N or FROM-TO within 1.." + total);
    }

    /** The cache scenarios of {@link io.github.tornadoattention.verify.CacheSuite} on each backend's device. */
    private int inferenceSuite() {
        long baseSeed = seed != null ? seed : System.nanoTime();
        PrintWriter out = spec.commandLine().getOut();
        int failed = 0;
        int total = 0;
        for (String id : backendIds) {
            io.github.tornadoattention.AttentionDevice device = io.github.tornadoattention.Attention.device(id);
            out.printf("inference selftest of %s on %s, seed %d%n", device.backendId(), device.name(), baseSeed);
            for (int d : new int[] {64, 128}) {
                for (io.github.tornadoattention.verify.CacheSuite.CaseResult r
                        : io.github.tornadoattention.verify.CacheSuite.run(device, d, baseSeed)) {
                    total++;
                    failed += r.passed() ? 0 : 1;
                    out.printf("%s %s: %s%n", r.passed() ? "PASS" : "FAIL", r.name(), r.error());
                }
            }
        }
        out.printf("%d passed, %d failed%n", total - failed, failed);
        return failed == 0 ? 0 : Main.EXIT_FAILED;
    }
}
