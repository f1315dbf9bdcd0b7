package io.github.tornadoattention.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** bin/build's output into a pipe: no colour codes, and without TornadoVM the skipped line comes last. */
class BuildScriptTest {

    @Test
    void outputIsPlainAndEndsWithTheTornadoVmLine() throws Exception {
        Path root = Path.of("").toAbsolutePath().getParent(); // tests run in bench/
        assertTrue(Files.isExecutable(root.resolve("bin/build")), root.toString());
        ProcessBuilder build = new ProcessBuilder(root.resolve("bin/build").toString(), "-N", "validate")
                .directory(root.toFile()).redirectErrorStream(true);
        build.environment().remove("TORNADOVM_HOME");
        Process p = build.start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), output);
        assertTrue(output.contains("BUILD SUCCESS"), output);
        assertFalse(output.contains("\u001b"), "ANSI escape codes in:\n" + output);
        String[] lines = output.strip().split("\\R");
        assertTrue(lines[lines.length - 1].startsWith("TornadoVM parts skipped"), output);
    }
}
