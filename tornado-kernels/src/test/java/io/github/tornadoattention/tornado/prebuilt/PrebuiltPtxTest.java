package io.github.tornadoattention.tornado.prebuilt;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

/** TornadoVM's kernel names (the entry extraction is the core's PtxEntries, tested there). */
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

}
