package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * bin/tornado-attention's first run builds the jars: it says what it is doing and about how long, shows
 * Maven's steps (not its download lines), and later runs print nothing of it. Maven is replaced by a
 * bin/build that prints Maven's kind of lines and packs this build's classes, so the test takes seconds.
 */
class LauncherTest {
    private static final Path REPOSITORY = Path.of("").toAbsolutePath().getParent().getParent();

    private record Result(int exit, String out, String err) {
    }

    @Test
    void theFirstRunSaysWhatItBuildsAndLaterRunsAreQuiet(@TempDir Path tree) throws Exception {
        install(tree, "0");
        Result first = launch(tree);
        assertEquals(0, first.exit(), first.err());
        assertEquals("tornado-attention 0.1.0", first.out().strip());
        assertTrue(first.err().startsWith("building tornado-attention (first run): Maven compiles the core library, then the CLI"),
                first.err());
        assertTrue(first.err().contains("about 1-3 minutes"), first.err());
        assertTrue(first.err().contains("building tornado-attention CLI and verification suites 0.1.0"), first.err());
        assertTrue(first.err().contains("tornado-attention-cli: maven-compiler-plugin:3.13.0:compile"), first.err());
        assertTrue(first.err().contains("build SUCCESS"), first.err());
        assertFalse(first.err().contains("Downloading"), "Maven's download lines are not shown:\n" + first.err());

        Result second = launch(tree);
        assertEquals(0, second.exit(), second.err());
        assertEquals("", second.err(), "a normal run prints nothing about building");
    }

    @Test
    void aFailedFirstBuildShowsTheEndOfMavensOutput(@TempDir Path tree) throws Exception {
        install(tree, "1");
        Result r = launch(tree);
        assertEquals(1, r.exit(), r.err());
        assertTrue(r.err().contains("error: the build failed; the end of Maven's output:"), r.err());
        assertTrue(r.err().contains("[ERROR] COMPILATION ERROR"), r.err());
        assertEquals("", r.out());
    }

    /**
     * The launcher lets the JVM reserve the machine's memory less a margin (an eighth, at least 4 GiB) as direct memory,
     * where TornadoVM keeps its arrays (the KV caches' host copies); a -XX:MaxDirectMemorySize in JAVA_OPTS wins.
     */
    @Test
    void directMemoryIsTheMachinesMemoryLessAMarginUnlessJavaOptsSetsIt(@TempDir Path tree) throws Exception {
        install(tree, "0");
        long mib = 0;
        for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
            if (line.startsWith("MemTotal:")) {
                mib = Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024;
            }
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(mib > 4096, "/proc/meminfo gives the machine's memory (over 4 GiB)");
        long expected = (mib - Math.max(mib / 8, 4096)) << 20;
        assertEquals(expected, maxDirectMemorySize(launch(tree, "-XX:+PrintFlagsFinal")));
        assertEquals(64L << 20, maxDirectMemorySize(launch(tree, "-XX:MaxDirectMemorySize=64m -XX:+PrintFlagsFinal")));
    }

    /** The MaxDirectMemorySize line of -XX:+PrintFlagsFinal's table. */
    private static long maxDirectMemorySize(Result r) {
        assertEquals(0, r.exit(), r.err());
        return r.out().lines().filter(l -> l.matches("\\s*\\w+ MaxDirectMemorySize\\s+=.*")).findFirst()
                .map(l -> Long.parseLong(l.replaceAll(".*=\\s*([0-9]+).*", "$1"))).orElseThrow();
    }

    /** A copy of the launcher beside a stand-in bin/build that exits with {@code buildExit}. */
    private static void install(Path tree, String buildExit) throws IOException {
        Path bin = Files.createDirectories(tree.resolve("bin"));
        for (String script : new String[] {"tornado-attention", "jdk25.sh"}) {
            Files.copy(REPOSITORY.resolve("bin").resolve(script), bin.resolve(script), StandardCopyOption.COPY_ATTRIBUTES);
        }
        Path classes = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().getPath());
        // The core library as this test sees it: its jar (reactor, packaged) or its classes folder (packed here).
        Path core = Path.of(io.github.tornadoattention.AttentionPlan.class.getProtectionDomain().getCodeSource()
                .getLocation().getPath());
        StringBuilder libs = new StringBuilder();
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (entry.matches(".*/(picocli|jackson-[a-z-]+|slf4j-[a-z]+)-[0-9.]+\\.jar")) {
                libs.append(" '").append(entry).append("'");
            }
        }
        String coreCopy = Files.isDirectory(core)
                ? "\"$JAVA_HOME/bin/jar\" cf \"$here/src/cli/target/lib/tornado-attention.jar\" -C '" + core + "' ."
                : "cp '" + core + "' \"$here/src/cli/target/lib/\"";
        String build = """
                #!/usr/bin/env bash
                set -e
                here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
                echo "[INFO] Scanning for projects..."
                echo "[INFO] Downloading from central: https://repo.maven.apache.org/maven2/info/picocli/picocli/4.7.6/picocli-4.7.6.pom"
                echo "[INFO] Building tornado-attention CLI and verification suites 0.1.0-SNAPSHOT [3/4]"
                echo "[INFO] --- maven-compiler-plugin:3.13.0:compile (default-compile) @ tornado-attention-cli ---"
                echo "[INFO] Compiling 20 source files with javac [debug release 25] to target/classes"
                if [ "%s" != 0 ]; then
                  echo "[ERROR] COMPILATION ERROR :"
                  echo "[INFO] BUILD FAILURE"
                  exit %s
                fi
                mkdir -p "$here/src/cli/target/lib"
                "$JAVA_HOME/bin/jar" cf "$here/src/cli/target/tornado-attention-cli.jar" -C '%s' .
                %s
                cp %s "$here/src/cli/target/lib/"
                echo "[INFO] BUILD SUCCESS"
                echo "[INFO] Total time:  1.234 s"
                """.formatted(buildExit, buildExit, classes, coreCopy, libs);
        Files.writeString(bin.resolve("build"), build);
        Files.setPosixFilePermissions(bin.resolve("build"), PosixFilePermissions.fromString("rwxr-xr-x"));
    }

    private static Result launch(Path tree) throws Exception {
        return launch(tree, null);
    }

    /** Runs {@code tornado-attention --version} with {@code javaOpts} as JAVA_OPTS (null: none). */
    private static Result launch(Path tree, String javaOpts) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(List.of("bash", tree.resolve("bin/tornado-attention").toString(), "--version"));
        pb.environment().remove("TORNADOVM_HOME");
        pb.environment().remove("JAVA_OPTS");
        if (javaOpts != null) {
            pb.environment().put("JAVA_OPTS", javaOpts);
        }
        pb.environment().put("JAVA_HOME", System.getProperty("java.home"));
        Process p = pb.start();
        p.getOutputStream().close();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        return new Result(p.exitValue(), out, err);
    }
}
