package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class KernelParamsTest {
    /** The kernels' side of the ABI; Maven runs the tests in the src module's directory. */
    private static final Path FLASH_PARAMS = Path.of("../ptx-overrides/src/flash_params.cuh");

    @Test
    void indicesAreFlashParamsParamIndexNameForName() throws Exception {
        Map<String, Integer> kernels = paramIndex(Files.readString(FLASH_PARAMS));
        assertTrue(kernels.containsKey("P_NUM_SPLITS"), "parsed " + kernels);
        Map<String, Integer> java = new TreeMap<>();
        for (Field f : KernelParams.class.getFields()) {
            if (f.getName().startsWith("P_") && Modifier.isStatic(f.getModifiers()) && f.getType() == int.class) {
                java.put(f.getName(), f.getInt(null));
            }
        }
        // Both ways: an index the kernels read is declared in Java (and then set by the hosts), and
        // Java declares nothing the kernels do not read.
        assertEquals(kernels, java, "KernelParams must declare flash_params.cuh's ParamIndex, name for name");
        assertEquals(KernelParams.P_COUNT, KernelParams.LENGTH);
    }

    /** The {@code NAME = value} pairs of {@code enum ParamIndex { ... }}, comments stripped. */
    static Map<String, Integer> paramIndex(String header) {
        Matcher body = Pattern.compile("enum\\s+ParamIndex\\s*\\{(.*?)\\}", Pattern.DOTALL).matcher(header);
        assertTrue(body.find(), "flash_params.cuh has no enum ParamIndex");
        String text = body.group(1).replaceAll("//[^\n]*", "").replaceAll("/\\*.*?\\*/", "");
        Map<String, Integer> out = new TreeMap<>();
        for (String item : text.split(",")) {
            if (item.isBlank()) {
                continue;
            }
            Matcher m = Pattern.compile("\\s*(\\w+)\\s*=\\s*(\\d+)\\s*").matcher(item);
            assertTrue(m.matches(), "ParamIndex items must be NAME = number: '" + item.strip() + "'");
            out.put(m.group(1), Integer.parseInt(m.group(2)));
        }
        return out;
    }

    @Test
    void paramsDescribeTheShapeAtTheirIndices() {
        AttentionShape s = AttentionShape.builder().batch(2).heads(8).kvHeads(2).queryLength(5).kvLength(300).headDim(64)
                .causal(true).layout(Layout.BSHD).build();
        int[] p = KernelParams.of(s, 7);
        assertEquals(KernelParams.LENGTH, p.length);
        assertEquals(java.util.List.of(2, 8, 2, 5, 300, 64, 1, 1, 7), java.util.List.of(p[KernelParams.P_B],
                p[KernelParams.P_HQ], p[KernelParams.P_HKV], p[KernelParams.P_SQ], p[KernelParams.P_SKV],
                p[KernelParams.P_D], p[KernelParams.P_CAUSAL], p[KernelParams.P_WRITE_LSE], p[KernelParams.P_NUM_SPLITS]));
        // BSHD: batch stride S*H*D, head stride D, row stride H*D.
        assertEquals(java.util.List.of(5 * 8 * 64, 64, 8 * 64), java.util.List.of(p[KernelParams.P_Q_STRIDE],
                p[KernelParams.P_Q_STRIDE + 1], p[KernelParams.P_Q_STRIDE + 2]));
        assertEquals(java.util.List.of(300 * 2 * 64, 64, 2 * 64), java.util.List.of(p[KernelParams.P_V_STRIDE],
                p[KernelParams.P_V_STRIDE + 1], p[KernelParams.P_V_STRIDE + 2]));
        assertEquals(s.scale(), Float.intBitsToFloat(p[KernelParams.P_SCALE]));
        assertEquals(s.scale() * 1.4426950408889634, Float.intBitsToFloat(p[KernelParams.P_SCALE_LOG2]), 1e-6);
    }

    @Test
    void withoutFeaturesTheFeatureWordsSayOff() {
        int[] p = KernelParams.of(AttentionShape.builder().heads(4).queryLength(3).kvLength(9).build(), 0);
        assertEquals(java.util.List.of(-1, -1, 0, 0), java.util.List.of(p[KernelParams.P_WINDOW_LEFT],
                p[KernelParams.P_WINDOW_RIGHT], p[KernelParams.P_SOFTCAP], p[KernelParams.P_SINKS]));
    }

    @Test
    void windowSoftcapAndSinksFillTheirWordsAndSinksFollowTheBlock() {
        float[] sinks = {0.5f, -1.25f, 3f, 0f};
        AttentionShape s = AttentionShape.builder().heads(4).kvHeads(2).queryLength(1).kvLength(4096).headDim(64)
                .causal(true).window(127, 0).softcap(30f).sinks(sinks).dtype(io.github.tornadoattention.DType.BF16).build();
        int[] p = KernelParams.of(s, 3);
        assertEquals(KernelParams.P_COUNT + 4, p.length);
        assertEquals(127, p[KernelParams.P_WINDOW_LEFT]);
        assertEquals(0, p[KernelParams.P_WINDOW_RIGHT]);
        assertEquals(30f, Float.intBitsToFloat(p[KernelParams.P_SOFTCAP]));
        assertEquals(1, p[KernelParams.P_SINKS]);
        for (int h = 0; h < 4; h++) {
            assertEquals(sinks[h], Float.intBitsToFloat(p[KernelParams.P_COUNT + h]));
        }
        for (int i = KernelParams.P_SINKS + 1; i < KernelParams.P_COUNT; i++) {
            assertEquals(0, p[i], "reserved word " + i);
        }
    }

    @Test
    void cacheParamsCarryTheSpecsFeaturesForDenseAndPackedCalls() {
        io.github.tornadoattention.CacheAttentionSpec spec = io.github.tornadoattention.CacheAttentionSpec.builder()
                .batch(2).heads(4).kvHeads(2).headDim(64).maxQueryLength(2).maxTotalQueries(64).maxLength(1024)
                .window(31, -1).softcap(50f).sinks(new float[] {1, 2, 3, 4}).build();
        io.github.tornadoattention.KvCacheSpec cache = io.github.tornadoattention.KvCacheSpec.paged(2, 2, 1024, 64, 16);
        for (boolean packed : new boolean[] {false, true}) {
            int[] p = KernelParams.forCache(spec, cache, packed);
            assertEquals(KernelParams.P_COUNT + 4, p.length);
            assertEquals(java.util.List.of(31, -1, Float.floatToRawIntBits(50f), 1), java.util.List.of(p[KernelParams.P_WINDOW_LEFT],
                    p[KernelParams.P_WINDOW_RIGHT], p[KernelParams.P_SOFTCAP], p[KernelParams.P_SINKS]));
            assertEquals(4f, Float.intBitsToFloat(p[KernelParams.P_COUNT + 3]));
            assertEquals(16, p[KernelParams.P_PAGE_SIZE]);
        }
    }
}
