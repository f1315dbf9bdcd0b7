package io.github.tornadoattention.bench;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.Backends;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code java -jar benchmarks.jar jmh|shapes|report}: runs the JMH benchmarks over the shape lists
 * of {@link BenchShape}, prints those lists for the PyTorch baseline, and writes the GPU report.
 */
@Command(name = "benchmarks", mixinStandardHelpOptions = true,
        subcommands = {BenchmarkRunner.Jmh.class, BenchmarkRunner.Shapes.class, GpuReport.class})
public final class BenchmarkRunner {

    public static void main(String[] args) {
        System.exit(new CommandLine(new BenchmarkRunner()).execute(args));
    }

    static List<BenchShape> shapes(String which) {
        return switch (which) {
            case "all" -> BenchShape.ALL;
            case "prefill" -> BenchShape.PREFILL;
            case "decode" -> BenchShape.DECODE;
            case "seeds" -> BenchShape.SEEDS;
            default -> {
                List<BenchShape> list = new ArrayList<>();
                for (String spec : which.split(";")) {
                    list.add(BenchShape.parse(spec));
                }
                yield list;
            }
        };
    }

    @Command(name = "jmh", mixinStandardHelpOptions = true,
            description = "Run the JMH benchmarks (kernel with device-resident data, and the whole Java call).")
    static final class Jmh implements Callable<Integer> {
        @Option(names = "--backends", split = ",", defaultValue = Backends.CPU_REFERENCE,
                description = "backend ids (default: ${DEFAULT-VALUE})")
        List<String> backends;

        @Option(names = "--shapes", defaultValue = "seeds",
                description = "all, prefill, decode, seeds, or B,Hq,Hkv,Sq,Skv,D,causal;... (default: ${DEFAULT-VALUE})")
        String shapes;

        @Option(names = "--modes", split = ",", defaultValue = "kernel,javaCall", description = "kernel, javaCall")
        List<String> modes;

        @Option(names = "--decode", paramLabel = "B,Hq,Hkv,D,N,L,P,R;...",
                description = "run DecodeBenchmark (decodeToken, varlenPrefill) instead, on these decode settings:"
                        + " batch, heads, kv heads, head dim, context, layers, page size (0: contiguous), ragged (0/1)")
        String decode;

        @Option(names = "--forks", defaultValue = "1")
        int forks;

        @Option(names = "--warmup-iterations", defaultValue = "2")
        int warmupIterations;

        @Option(names = "--iterations", defaultValue = "5")
        int iterations;

        @Option(names = "--iteration-ms", defaultValue = "500")
        int iterationMillis;

        @Option(names = "--out", defaultValue = "bench-out", description = "folder for the results and kernel-times/")
        Path out;

        @Option(names = "--name", defaultValue = "jmh", description = "results file name: <out>/<name>.json (default: ${DEFAULT-VALUE})")
        String name;

        @Override
        public Integer call() throws RunnerException, IOException {
            Files.createDirectories(out);
            // Forked JVMs get it through forkArguments(); with --forks 0 the benchmark runs in this JVM.
            System.setProperty(AttentionBenchmark.KERNEL_TIMES_PROPERTY, out.resolve("kernel-times").toAbsolutePath().toString());
            List<String> specs = shapes(shapes).stream().map(BenchShape::spec).toList();
            ChainedOptionsBuilder options = new OptionsBuilder().param("backend", backends.toArray(String[]::new));
            if (decode != null) {
                options.include(DecodeBenchmark.class.getName() + ".(decodeToken|varlenPrefill)$")
                        .param("decode", decode.split(";"));
            } else {
                options.include(AttentionBenchmark.class.getName() + ".(" + String.join("|", modes) + ")$")
                        .param("shape", specs.toArray(String[]::new));
            }
            options
                    .forks(forks)
                    .warmupIterations(warmupIterations)
                    .warmupTime(TimeValue.milliseconds(iterationMillis))
                    .measurementIterations(iterations)
                    .measurementTime(TimeValue.milliseconds(iterationMillis))
                    .shouldFailOnError(false)
                    // Forks run with this JVM's arguments (TornadoVM's argfile among them) plus the results folder.
                    .jvmArgs(forkArguments())
                    .resultFormat(ResultFormatType.JSON)
                    .result(out.resolve(name + ".json").toString());
            new Runner(options.build()).run();
            return 0;
        }
    }

    private static String[] forkArguments() {
        List<String> args = new ArrayList<>(java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments());
        args.add("-D" + AttentionBenchmark.KERNEL_TIMES_PROPERTY + "=" + System.getProperty(AttentionBenchmark.KERNEL_TIMES_PROPERTY));
        return args.toArray(String[]::new);
    }

    @Command(name = "shapes", mixinStandardHelpOptions = true,
            description = "Print the benchmarked shapes as JSON (for the PyTorch SDPA baseline).")
    static final class Shapes implements Callable<Integer> {
        @Option(names = "--shapes", defaultValue = "all")
        String shapes;

        @Override
        public Integer call() throws IOException {
            System.out.println(JSON.std.asString(shapes(shapes).stream().map(BenchShape::spec).toList()));
            return 0;
        }
    }
}
