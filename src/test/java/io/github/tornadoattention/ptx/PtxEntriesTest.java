package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The one PTX-entry extraction: TornadoVM's renamed headerless entries and the CUDA driver's one-entry modules. */
class PtxEntriesTest {

    @Test
    void everyTwinAdaptsToOneRenamedEntryWithoutHeader() {
        for (KernelManifest.Kernel twin : selectable(true)) {
            String adapted = PtxEntries.adapt(KernelManifest.ptx(twin.module()), twin.entry(), "renamed_kernel");
            assertFalse(adapted.contains(".version") || adapted.contains(".target") || adapted.contains(".address_size"));
            assertEquals(1, adapted.split("\\.entry ", -1).length - 1, twin.entry());
            assertTrue(adapted.contains(".entry renamed_kernel("), twin.entry());
            assertEquals(adapted.chars().filter(c -> c == '{').count(), adapted.chars().filter(c -> c == '}').count());
        }
        assertThrows(IllegalArgumentException.class,
                () -> PtxEntries.adapt(KernelManifest.ptx(selectable(true).get(0).module()), "no_such_entry", "x"));
    }

    @Test
    void everyCudaDriverEntryBecomesAModuleOfItsOwnWithTheHeader() {
        for (KernelManifest.Kernel k : selectable(false)) {
            String one = PtxEntries.module(KernelManifest.ptx(k.module()), k.entry());
            assertTrue(one.startsWith(".version"), k.entry());
            assertTrue(one.contains(".target sm_80") && one.contains(".address_size 64"), k.entry());
            assertEquals(1, one.split("\\.entry ", -1).length - 1, k.entry());
            assertTrue(one.contains(".entry " + k.entry() + "("), k.entry());
        }
    }

    @Test
    void moduleScopeDeclarationsAndFunctionsStayWithTheEntry() {
        String module = """
                //
                .version 9.0
                .target sm_80
                .address_size 64
                .extern .shared .align 16 .b8 smem[];
                .func helper(.param .b32 x)
                {
                \tret;
                }
                .visible .entry first(
                \t.param .u64 a
                )
                {
                \tret;
                }
                .visible .entry second(
                \t.param .u64 a
                )
                {
                \tret;
                }
                """;
        String second = PtxEntries.module(module, "second");
        assertTrue(second.contains(".version 9.0") && second.contains("smem[]") && second.contains(".func helper"), second);
        assertTrue(second.contains(".entry second(") && !second.contains(".entry first("), second);
        String renamed = PtxEntries.adapt(module, "first", "s0_t0_first");
        assertTrue(renamed.contains(".entry s0_t0_first(") && !renamed.contains(".version"), renamed);
    }

    /** A module on the class path stored gzip-compressed (as branch hd ships them; a test resource here) is read. */
    @Test
    void aCompressedModuleOnTheClassPathIsRead() {
        String text = KernelManifest.ptx("classpath_probe.ptx");
        assertTrue(text.contains(".entry probe_from_gz("), text);
        assertTrue(PtxEntries.module(text, "probe_from_gz").startsWith(".version 9.0"));
        IllegalStateException missing = assertThrows(IllegalStateException.class, () -> KernelManifest.ptx("no_such.ptx"));
        assertTrue(missing.getMessage().contains("no_such.ptx.gz") && missing.getMessage().contains("class path"),
                missing.getMessage());
    }

    /** What TornadoVM 5.2 puts in front of a prebuilt PTX kernel on a CUDA 13 driver. */
    private static final String TORNADO_HEADER = ".version 7.6\n.target sm_86\n.address_size 64\n";

    @Test
    void extractedPtxAssembles(@TempDir Path dir) throws Exception {
        assumeTrue(onPath("ptxas"), "ptxas not on PATH: skipping the assembler check of the extracted PTX");
        for (boolean tornado : new boolean[] {true, false}) {
            // One entry per (module, kind, header): the cut is the same code for every entry, and ptxas on all ~380
            // would take CI minutes (generate.sh assembles every module whole on sm_89 and sm_90).
            java.util.Map<String, KernelManifest.Kernel> oneEach = new java.util.LinkedHashMap<>();
            for (KernelManifest.Kernel k : selectable(tornado)) {
                oneEach.putIfAbsent(k.module() + " " + k.kind() + " " + k.headerBytes(), k);
            }
            for (KernelManifest.Kernel k : oneEach.values()) {
                Path file = dir.resolve(k.entry() + ".ptx");
                String module = KernelManifest.ptx(k.module());
                Files.writeString(file, tornado ? TORNADO_HEADER + PtxEntries.adapt(module, k.entry(), "s0_t0_" + k.entry())
                        : PtxEntries.module(module, k.entry()));
                // One arch each: generate.sh checks the modules on sm_89 and sm_90; this checks the cut.
                for (String arch : tornado ? List.of("sm_86") : List.of("sm_89")) {
                    Process p = new ProcessBuilder("ptxas", "-arch=" + arch, file.toString(), "-o",
                            dir.resolve("out.cubin").toString()).redirectErrorStream(true).start();
                    String log = new String(p.getInputStream().readAllBytes());
                    assertTrue(p.waitFor(120, TimeUnit.SECONDS));
                    assertEquals(0, p.exitValue(), k.entry() + " on " + arch + ": " + log);
                }
            }
        }
    }

    /** The entries a host may select: TornadoVM twins or CUDA-driver entries. */
    private static List<KernelManifest.Kernel> selectable(boolean tornado) {
        List<KernelManifest.Kernel> list = KernelManifest.shipped().kernels().stream()
                .filter(k -> (k.headerBytes() > 0) == tornado && k.selectable()).toList();
        assertFalse(list.isEmpty());
        return list;
    }

    private static boolean onPath(String tool) {
        try {
            return new ProcessBuilder(tool, "--version").redirectErrorStream(true).start().waitFor(30, TimeUnit.SECONDS);
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }
}
