package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TornadoPrebuiltPtxTest {

    /** Stand-ins with TornadoVM's class names, so the test needs no TornadoVM. */
    static final class HalfFloatArray {
    }

    @Test
    void mangledNameFollowsTornadoVmsScheme() {
        // TornadoVM's own example: graph s0, task t0, entry add, three IntArrays.
        assertEquals("s0_t0_add_arrays_intarray_arrays_intarray_arrays_intarray",
                TornadoPrebuiltPtx.mangledName("s0", "t0", "add", List.of(IntArray.class, IntArray.class, IntArray.class))
                        .replace("io_github_tornadoattention_ptx_tornadoprebuiltptxtest$", "arrays_"));
        assertEquals("_1g_t0_k", TornadoPrebuiltPtx.mangledName("1g", "t0", "k", List.of()));
    }

    static final class IntArray {
    }

    @Test
    void everyShippedEntryAdaptsToOneRenamedEntryWithoutHeader() {
        for (LaunchTable.Launch launch : allLaunches()) {
            String adapted = TornadoPrebuiltPtx.adapt(LaunchTable.ptx(launch.module()), launch.entry(), "renamed_kernel");
            assertFalse(adapted.contains(".version") || adapted.contains(".target") || adapted.contains(".address_size"));
            assertEquals(1, adapted.split("\\.entry ", -1).length - 1, launch.entry());
            assertTrue(adapted.contains(".entry renamed_kernel("), launch.entry());
            assertEquals(adapted.chars().filter(c -> c == '{').count(), adapted.chars().filter(c -> c == '}').count());
        }
        assertThrows(IllegalArgumentException.class,
                () -> TornadoPrebuiltPtx.adapt(LaunchTable.ptx(LaunchTable.FWD_MODULE), "no_such_entry", "x"));
    }

    /** What TornadoVM 5.2 puts in front of a prebuilt PTX kernel on a CUDA 13 driver. */
    private static final String TORNADO_HEADER = ".version 7.6\n.target sm_86\n.address_size 64\n";

    @Test
    void adaptedPtxAssemblesUnderTornadoVmsHeader(@TempDir Path dir) throws Exception {
        assumeTrue(onPath("ptxas"), "ptxas not on PATH: skipping the assembler check of the TornadoVM PTX");
        for (LaunchTable.Launch launch : allLaunches()) {
            Path file = dir.resolve(launch.entry() + ".ptx");
            Files.writeString(file, TORNADO_HEADER + TornadoPrebuiltPtx.adapt(LaunchTable.ptx(launch.module()),
                    launch.entry(), "s0_t0_" + launch.entry()));
            for (String arch : List.of("sm_86", "sm_89", "sm_90")) {
                Process p = new ProcessBuilder("ptxas", "-arch=" + arch, file.toString(), "-o",
                        dir.resolve("out.cubin").toString()).redirectErrorStream(true).start();
                String log = new String(p.getInputStream().readAllBytes());
                assertTrue(p.waitFor(120, TimeUnit.SECONDS));
                assertEquals(0, p.exitValue(), launch.entry() + " on " + arch + ": " + log);
            }
        }
    }

    private static List<LaunchTable.Launch> allLaunches() {
        AttentionShape.Builder b = AttentionShape.builder().batch(1).heads(8).kvHeads(2).queryLength(128).layout(Layout.BHSD);
        List<AttentionShape> shapes = List.of(b.headDim(64).build(), b.headDim(64).causal(true).build(),
                b.headDim(128).causal(false).build(), b.headDim(128).causal(true).build(),
                b.queryLength(1).kvLength(4096).headDim(64).build(), b.queryLength(1).kvLength(4096).headDim(128).build());
        return shapes.stream().flatMap(s -> java.util.stream.Stream.of("_tornado", "_tornado_h128")
                .map(suffix -> LaunchTable.prefillLaunch(s, suffix))).distinct().toList();
    }

    private static boolean onPath(String tool) {
        try {
            return new ProcessBuilder(tool, "--version").redirectErrorStream(true).start().waitFor(30, TimeUnit.SECONDS);
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }
}
