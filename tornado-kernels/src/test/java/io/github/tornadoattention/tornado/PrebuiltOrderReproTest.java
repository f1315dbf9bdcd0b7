package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * tools/PrebuiltOrderRepro.java under the fake CUDA driver, which names the kernel of every launch: TornadoVM 5.2.0
 * launches the second prebuilt task of a graph with the first one's kernel (the reason ptx-tornado's cache work is one
 * fused prebuilt task, first in its graph; docs/tornadovm.md, "Known problems"), and launches each correctly from graphs
 * of their own; on both NVIDIA backends (the lookup is TornadoVM's interpreter's), with each backend's kernel names (PTX:
 * TornadoVM's mangled name; CUDA: the entry's own). The first assertion fails once TornadoVM looks prebuilt tasks up
 * correctly: then the restriction can go.
 */
class PrebuiltOrderReproTest {
    private static final Pattern LAUNCH = Pattern.compile("\\[fakecuda] launch (\\S+) grid");

    @Test
    void theSecondPrebuiltTaskOfAGraphRunsTheFirstOnesKernel() throws IOException, InterruptedException {
        Run together = run("together");
        Run apart = run("apart");
        boolean cuda = together.backend().equals("CUDA");
        assertEquals(cuda ? List.of("write1", "write1") : List.of("g_a_write1_arrays_floatarray", "g_a_write1_arrays_floatarray"),
                together.launches(), "TornadoVM 5.2.0 runs task b of graph g with task a's kernel (" + together.backend() + ")");
        assertEquals(cuda ? List.of("write1", "write2") : List.of("ga_a_write1_arrays_floatarray", "gb_b_write2_arrays_floatarray"),
                apart.launches(), "each prebuilt task first in a graph of its own runs its own kernel (" + apart.backend() + ")");
    }

    private record Run(String backend, List<String> launches) {
    }

    /** The backend the reproducer ran on in {@code mode}, and the kernels it launched, in order. */
    private static Run run(String mode) throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        Path classes = FakeCuda.compileTool("PrebuiltOrderRepro.java", "prebuilt-order-repro");
        Path cwd = Files.createTempDirectory("prebuilt-order-" + mode);   // the argfile puts "." on the module path
        Path out = cwd.resolve("repro.log");
        List<String> command = FakeCuda.toolJvm(argfile, classes, "PrebuiltOrderRepro", mode);
        int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKECUDA_VERBOSE", "1"));
        String log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, mode + ":\n" + log);
        return new Run(FakeCuda.backend(log), log.lines().map(LAUNCH::matcher).filter(Matcher::find).map(m -> m.group(1)).toList());
    }
}
