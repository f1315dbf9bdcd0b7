package io.github.tornadoattention.cli;

import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.InvalidArgumentException;
import java.io.PrintWriter;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * The command line: {@code run}, {@code backends}, {@code selftest}, {@code decode}, {@code prefill}. Exit codes: 0 success, 1 a
 * check or the suite failed (or an unexpected error), 2 bad options, a bad shape or work over the
 * {@link Limits} without {@code --force} (one line, no stack trace), 3 the chosen backend cannot run here.
 */
@Command(name = "tornado-attention", mixinStandardHelpOptions = true, version = "tornado-attention 0.1.0",
        description = "FlashAttention forward for Java: CPU reference, TornadoVM kernels, hand-tuned PTX.",
        subcommands = {RunCommand.class, BackendsCommand.class, SelftestCommand.class, DecodeCommand.class, PrefillCommand.class,
                CommandLine.HelpCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    private static final Logger LOG = LoggerFactory.getLogger(Main.class);
    public static final int EXIT_FAILED = 1;
    public static final int EXIT_BAD_INPUT = 2;
    public static final int EXIT_UNAVAILABLE = 3;

    /**
     * API argument names and the command-line options that set them: an error from the API names the
     * option the user typed (where the command has it), never the Java name.
     */
    private static final Map<String, String> OPTION_OF_ARGUMENT = Map.ofEntries(
            Map.entry("batch", "--batch"), Map.entry("slots", "--batch"),
            Map.entry("heads", "--heads"), Map.entry("kvHeads", "--kv-heads"), Map.entry("queryLength", "--seq"),
            Map.entry("kvLength", "--kv-seq"), Map.entry("headDim", "--dim"), Map.entry("scale", "--scale"),
            Map.entry("layout", "--layout"), Map.entry("backend", "--backend"), Map.entry("pageSize", "--page-size"),
            Map.entry("lanes", "--lanes"), Map.entry("cudaDevice", "--cuda-device"),
            Map.entry("mmaJitFlags", "--mma-jit-flags"), Map.entry("layers", "--layers"),
            Map.entry("window.left", "--window"), Map.entry("window.right", "--window"), Map.entry("window", "--window"),
            Map.entry("softcap", "--softcap"), Map.entry("sinks", "--sinks"), Map.entry("dtype", "--dtype"));
    /** An API name inside an error's text (e.g. "must divide queryHeads (8)"). */
    private static final Pattern API_NAME = Pattern.compile("\\b[a-z]+(?:[A-Z][a-z]+)+\\b");

    @Override
    public void run() {
        throw new CommandLine.ParameterException(spec.commandLine(), "Missing a command: " + commandNames());
    }

    /** The commands of the command table (help aside), for the line that says one is missing. */
    private String commandNames() {
        List<String> names = spec.subcommands().keySet().stream().filter(name -> !name.equals("help")).toList();
        return String.join(", ", names.subList(0, names.size() - 1)) + " or " + names.getLast();
    }

    public static void main(String[] args) {
        System.exit(execute(args, new PrintWriter(System.out, true), new PrintWriter(System.err, true)));
    }

    /** Runs the command line with the given streams and returns the exit code (for tests and embedding). */
    public static int execute(String[] args, PrintWriter out, PrintWriter err) {
        CommandLine cli = new CommandLine(new Main());
        cli.setOut(out);
        cli.setErr(err);
        cli.setCaseInsensitiveEnumValuesAllowed(true);
        cli.setParameterExceptionHandler((e, a) -> {
            err.println("error: " + e.getMessage().replace(System.lineSeparator(), " ").trim()
                    + " (see --help)");
            return EXIT_BAD_INPUT;
        });
        cli.setExecutionExceptionHandler((e, commandLine, parseResult) -> {
            if (e instanceof InvalidArgumentException bad) {
                CommandLine.Model.CommandSpec command = commandLine.getCommandSpec();
                err.println("error: " + option(command, bad.argument()) + " = " + bad.value() + ": "
                        + API_NAME.matcher(bad.allowed()).replaceAll(m -> Matcher.quoteReplacement(option(command, m.group()))));
                return EXIT_BAD_INPUT;
            }
            if (e instanceof Limits.Exceeded tooMuch) {
                err.println("error: " + tooMuch.getMessage());
                return EXIT_BAD_INPUT;
            }
            if (e instanceof BackendUnavailableException unavailable) {
                err.println("error: " + unavailable.getMessage());
                return EXIT_UNAVAILABLE;
            }
            err.println("error: " + e);
            LOG.debug("stack trace (shown at debug level: JAVA_OPTS=-Dorg.slf4j.simpleLogger.defaultLogLevel=debug)", e);
            return EXIT_FAILED;
        });
        return cli.execute(args);
    }

    /** The option of {@code command} that sets the API argument {@code argument}, or the argument itself. */
    private static String option(CommandLine.Model.CommandSpec command, String argument) {
        String option = OPTION_OF_ARGUMENT.get(argument);
        return option != null && command.findOption(option) != null ? option : argument;
    }
}
