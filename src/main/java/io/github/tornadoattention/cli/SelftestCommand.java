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

/** {@code selftest}: the correctness suite on one backend, printing {@code N passed, M failed}. */
@Command(name = "selftest", mixinStandardHelpOptions = true,
        description = "Run the correctness suite against the CPU reference; exit 1 if any case fails.")
final class SelftestCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Option(names = "--backend", paramLabel = "ID", defaultValue = Backends.AUTO, description = "backend to test (default: ${DEFAULT-VALUE})")
    String backend;

    @Option(names = "--random", paramLabel = "N", defaultValue = "0", description = "also run N random shapes (default: ${DEFAULT-VALUE})")
    int random;

    @Option(names = "--seed", paramLabel = "N", description = "seed of inputs and random shapes (default: fresh each run)")
    Long seed;

    @Override
    public Integer call() {
        if (random < 0) {
            throw new InvalidArgumentException("--random", random, "must be >= 0");
        }
        AttentionBackend target = Backends.require(backend);
        long baseSeed = seed != null ? seed : System.nanoTime();
        List<CorrectnessSuite.Case> cases = new ArrayList<>(CorrectnessSuite.fullSuite());
        cases.addAll(CorrectnessSuite.randomCases(random, baseSeed));
        PrintWriter out = spec.commandLine().getOut();
        out.printf("selftest of %s (%s), seed %d, %d cases%n", target.id(), target.availability().detail(), baseSeed,
                cases.size());
        int passed = 0;
        for (int i = 0; i < cases.size(); i++) {
            CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(target, cases.get(i), baseSeed + i);
            out.printf("[%d/%d] %s%n", i + 1, cases.size(), outcome);
            out.flush();
            if (outcome.passed()) {
                passed++;
            }
        }
        int failed = cases.size() - passed;
        out.printf("%d passed, %d failed%n", passed, failed);
        return failed == 0 ? 0 : Main.EXIT_FAILED;
    }
}
