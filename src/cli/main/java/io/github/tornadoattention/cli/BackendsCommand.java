package io.github.tornadoattention.cli;

import io.github.tornadoattention.Backends;
import java.io.PrintWriter;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

/** {@code backends}: every backend id, whether it runs here and on what, or why not. */
@Command(name = "backends", mixinStandardHelpOptions = true,
        description = "List the backends: available ones with their devices, unavailable ones with the reason.")
final class BackendsCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        for (Backends.Status status : Backends.list()) {
            out.printf("%-14s %-11s %s%n", status.id(), status.availability().available() ? "available" : "unavailable",
                    status.availability().detail());
            out.printf("%-14s %-11s %s%n", "", "", status.description());
        }
        return 0;
    }
}
