package io.github.tornadoattention.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.cli.Main;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.jar.Attributes;
import java.util.jar.JarFile;
import org.junit.jupiter.api.Test;

/**
 * The CLI jar as the reactor built it (src/cli; this module depends on it, so it is packaged before these
 * tests run): {@code java -jar} runs the CLI without the restricted-method warning of java.lang.foreign.
 */
class CliJarTest {

    private static Path cliJar() throws Exception {
        Path jar = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        assertTrue(jar.toString().endsWith(".jar"), "expected the packaged CLI jar on the class path, got " + jar);
        return jar;
    }

    @Test
    void theManifestEnablesNativeAccessAndNamesTheCli() throws Exception {
        try (JarFile jar = new JarFile(cliJar().toFile())) {
            Attributes main = jar.getManifest().getMainAttributes();
            assertEquals("ALL-UNNAMED", main.getValue("Enable-Native-Access"));
            assertEquals(Main.class.getName(), main.getValue("Main-Class"));
        }
    }

    @Test
    void javaDashJarPrintsNoNativeAccessWarning() throws Exception {
        String java = ProcessHandle.current().info().command().orElseThrow();
        Process p = new ProcessBuilder(java, "-jar", cliJar().toString(), "backends").redirectErrorStream(true).start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), output);
        assertTrue(output.contains("ptx-cuda"), output); // ptx-cuda's probe calls the restricted methods
        assertFalse(output.contains("restricted method"), output);
    }
}
