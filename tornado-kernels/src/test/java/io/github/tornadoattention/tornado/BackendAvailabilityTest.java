package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Availability reporting, shape validation and the refusal to plan, for both TornadoVM backends; none of
 * it needs a device (on a GPU machine the availability tests check the device name instead).
 */
class BackendAvailabilityTest {
    private static final AttentionShape D64 = AttentionShape.builder().batch(1).heads(2).queryLength(64).headDim(64).build();

    @Test
    void providersAreRegistered() {
        assertInstanceOf(TornadoSimtBackend.class, Backends.get(Backends.TORNADO_SIMT));
        assertInstanceOf(TornadoMmaBackend.class, Backends.get(Backends.TORNADO_MMA));
    }

    @Test
    void availabilityNeverThrowsAndExplainsItself() {
        for (AttentionBackend backend : List.of(new TornadoSimtBackend(), new TornadoMmaBackend())) {
            Availability a = backend.availability();
            assertFalse(a.detail() == null || a.detail().isBlank(), backend.id() + ": empty detail");
            if (a.available()) {
                // e.g. "NVIDIA H100 80GB HBM3 (PTX)"
                assertTrue(a.detail().endsWith(")"), a.detail());
                if (backend instanceof TornadoMmaBackend) {
                    assertTrue(a.detail().endsWith("(PTX)"), a.detail());
                }
            }
            assertEquals(a, backend.availability(), "availability is probed once");
        }
    }

    @Test
    void mmaRejectsHeadDimsWithoutAKernel() {
        TornadoMmaBackend mma = new TornadoMmaBackend();
        mma.checkSupported(D64);
        mma.checkSupported(D64.toBuilder().headDim(128).build());
        mma.checkSupported(D64.toBuilder().headDim(32).build());
        mma.checkSupported(D64.toBuilder().headDim(96).build());
        mma.checkSupported(D64.toBuilder().headDim(192).build());
        mma.checkSupported(D64.toBuilder().headDim(256).build());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> mma.checkSupported(D64.toBuilder().headDim(80).build()));
        assertEquals("headDim = 80: tornado-mma supports 32, 64, 96, 128, 192, 256" + MmaTileConfig.HEAD_DIM_NOTE, e.getMessage());
    }

    @Test
    void simtRejectsHeadDimsAbove256() {
        TornadoSimtBackend simt = new TornadoSimtBackend();
        simt.checkSupported(D64.toBuilder().headDim(80).build());
        simt.checkSupported(D64.toBuilder().headDim(256).build());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> simt.checkSupported(D64.toBuilder().headDim(264).scale(0.05f).build()));
        assertEquals("headDim", e.argument());
        assertEquals("headDim = 264: tornado-simt supports 1..256", e.getMessage());
    }

    @Test
    void planRefusesWhereThereIsNoDevice() {
        for (AttentionBackend backend : List.of(new TornadoSimtBackend(), new TornadoMmaBackend())) {
            Availability a = backend.availability();
            assumeFalse(a.available(), "a device is present: planning is covered by TornadoDeviceTest");
            BackendUnavailableException e = assertThrows(BackendUnavailableException.class, () -> backend.plan(D64));
            assertTrue(e.getMessage().contains(a.detail()), e.getMessage());
            // Availability is checked before the shape.
            assertThrows(BackendUnavailableException.class, () -> backend.plan(D64.toBuilder().headDim(256).build()));
        }
    }

    @Test
    void bailoutToPlainJavaIsRefused() {
        String before = System.getProperty(TornadoBackendSupport.BAILOUT_PROPERTY);
        try {
            System.setProperty(TornadoBackendSupport.BAILOUT_PROPERTY, "True");
            BackendUnavailableException e = assertThrows(BackendUnavailableException.class,
                    () -> TornadoBackendSupport.requireNoBailout(Backends.TORNADO_MMA));
            assertTrue(e.getMessage().contains("-Dtornado.recover.bailout=False"), e.getMessage());
            System.setProperty(TornadoBackendSupport.BAILOUT_PROPERTY, "False");
            TornadoBackendSupport.requireNoBailout(Backends.TORNADO_MMA);
        } finally {
            if (before == null) {
                System.clearProperty(TornadoBackendSupport.BAILOUT_PROPERTY);
            } else {
                System.setProperty(TornadoBackendSupport.BAILOUT_PROPERTY, before);
            }
        }
    }

    @Test
    void failuresToStartTornadoVmBecomeReasons() {
        assertTrue(TornadoDevices.describe(new UnsatisfiedLinkError("libcuda.so.1: cannot open shared object file"))
                .contains("CUDA driver"));
        assertTrue(TornadoDevices.describe(new NoClassDefFoundError("uk/ac/manchester/tornado/api/TornadoRuntime"))
                .startsWith(TornadoDevices.NOT_INITIALISED));
        assertTrue(TornadoBackendSupport.availability(() -> {
            throw new NoClassDefFoundError("uk/ac/manchester/tornado/api/TornadoRuntime");
        }).detail().startsWith("TornadoVM runtime not initialised"));
    }

    /**
     * The jar on the class path of a JVM started without TornadoVM's argfile, with and without tornado-api:
     * the providers load and report why they cannot run, nothing throws.
     */
    @Test
    void withoutTornadoVmsArgfileBothReportTheRuntimeNotInitialised() throws Exception {
        String classPath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> classPaths = new ArrayList<>(List.of(classPath));
        String home = System.getenv("TORNADOVM_HOME");
        if (home != null) {
            try (Stream<Path> jars = Files.list(Path.of(home, "share", "java", "tornado"))) {
                jars.filter(p -> p.getFileName().toString().startsWith("tornado-api")).findFirst()
                        .ifPresent(api -> classPaths.add(classPath + File.pathSeparator + api));
            }
        }
        for (String cp : classPaths) {
            List<String> lines = runWithoutArgfile(cp);
            assertEquals(2, lines.size(), "output: " + lines);
            for (String line : lines) {
                String[] parts = line.split("\\|", 3);
                assertEquals("false", parts[1], line);
                assertTrue(parts[2].startsWith("TornadoVM runtime not initialised: run under TornadoVM"
                        + " (bin/tornado-attention with TORNADOVM_HOME set)"), line);
            }
        }
    }

    /**
     * The probe changes no global setting: under TornadoVM (with the fake driver where it can be built, so that a
     * device is found) but without -Dtornado.recover.bailout, the property stays unset after both backends probed,
     * and a device found is reported unavailable, saying that the flag is needed.
     */
    @Test
    void theProbeSetsNoSystemPropertyAndAsksForTheBailoutFlag() throws Exception {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        Path out = Files.createTempDirectory("probe").resolve("probe.log");
        int exit = FakeCuda.run(FakeCuda.tornadoJvm(argfile, AvailabilityProbeMain.class.getName()), out,
                lib == null ? Map.of() : Map.of("LD_LIBRARY_PATH", lib.toString()));
        String output = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, output);
        assertTrue(output.lines().anyMatch(l -> l.equals("bailout|null")), output);
        List<String> backends = output.lines().filter(l -> l.startsWith("tornado-")).toList();
        assertEquals(2, backends.size(), output);
        for (String line : backends) {
            assertTrue(line.contains("|false|"), line);
            if (lib != null) {
                assertTrue(line.contains("-Dtornado.recover.bailout=False"), line);
            }
        }
    }

    private static List<String> runWithoutArgfile(String classPath) throws IOException, InterruptedException {
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process process = new ProcessBuilder(java.toString(), "-cp", classPath,
                AvailabilityProbeMain.class.getName()).redirectErrorStream(true).start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(process.waitFor(60, TimeUnit.SECONDS), "child JVM did not finish");
        assertEquals(0, process.exitValue(), output);
        return output.lines().filter(l -> l.startsWith("tornado-")).toList();
    }
}
