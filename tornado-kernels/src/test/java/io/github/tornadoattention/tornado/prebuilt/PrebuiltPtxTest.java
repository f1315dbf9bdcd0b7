package io.github.tornadoattention.tornado.prebuilt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.ptx.KernelManifest;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PrebuiltPtxTest {

    /** Stand-ins with TornadoVM's class names, so the test needs no TornadoVM. */
    static final class HalfFloatArray {
    }

    @Test
    void mangledNameFollowsTornadoVmsScheme() {
        // TornadoVM's own example: graph s0, task t0, entry add, three IntArrays.
        assertEquals("s0_t0_add_arrays_intarray_arrays_intarray_arrays_intarray",
                PrebuiltPtx.mangledName("s0", "t0", "add", List.of(IntArray.class, IntArray.class, IntArray.class))
                        .replace("io_github_tornadoattention_tornado_prebuilt_prebuiltptxtest$", "arrays_"));
        assertEquals("_1g_t0_k", PrebuiltPtx.mangledName("1g", "t0", "k", List.of()));
    }

    static final class IntArray {
    }

    @Test
    void everyTwinAdaptsToOneRenamedEntryWithoutHeader() {
        for (KernelManifest.Kernel twin : twins()) {
            String adapted = PrebuiltPtx.adapt(KernelManifest.ptx(twin.module()), twin.entry(), "renamed_kernel");
            assertFalse(adapted.contains(".version") || adapted.contains(".target") || adapted.contains(".address_size"));
            assertEquals(1, adapted.split("\\.entry ", -1).length - 1, twin.entry());
            assertTrue(adapted.contains(".entry renamed_kernel("), twin.entry());
            assertEquals(adapted.chars().filter(c -> c == '{').count(), adapted.chars().filter(c -> c == '}').count());
        }
        assertThrows(IllegalArgumentException.class,
                () -> PrebuiltPtx.adapt(KernelManifest.ptx(twins().get(0).module()), "no_such_entry", "x"));
    }

    /** What TornadoVM 5.2 puts in front of a prebuilt PTX kernel on a CUDA 13 driver. */
    private static final String TORNADO_HEADER = ".version 7.6\n.target sm_86\n.address_size 64\n";

    @Test
    void adaptedPtxAssemblesUnderTornadoVmsHeader(@TempDir Path dir) throws Exception {
        assumeTrue(onPath("ptxas"), "ptxas not on PATH: skipping the assembler check of the TornadoVM PTX");
        for (KernelManifest.Kernel twin : twins()) {
            Path file = dir.resolve(twin.entry() + ".ptx");
            Files.writeString(file, TORNADO_HEADER + PrebuiltPtx.adapt(KernelManifest.ptx(twin.module()),
                    twin.entry(), "s0_t0_" + twin.entry()));
            for (String arch : List.of("sm_86", "sm_89", "sm_90")) {
                Process p = new ProcessBuilder("ptxas", "-arch=" + arch, file.toString(), "-o",
                        dir.resolve("out.cubin").toString()).redirectErrorStream(true).start();
                String log = new String(p.getInputStream().readAllBytes());
                assertTrue(p.waitFor(120, TimeUnit.SECONDS));
                assertEquals(0, p.exitValue(), twin.entry() + " on " + arch + ": " + log);
            }
        }
    }

    /** Every TornadoVM twin a host may select: the ptx-tornado host's kernels. */
    private static List<KernelManifest.Kernel> twins() {
        List<KernelManifest.Kernel> twins = KernelManifest.shipped().kernels().stream()
                .filter(k -> k.headerBytes() > 0 && !k.causal().equals("-")).toList();
        assertFalse(twins.isEmpty());
        return twins;
    }

    private static boolean onPath(String tool) {
        try {
            return new ProcessBuilder(tool, "--version").redirectErrorStream(true).start().waitFor(30, TimeUnit.SECONDS);
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }
}
