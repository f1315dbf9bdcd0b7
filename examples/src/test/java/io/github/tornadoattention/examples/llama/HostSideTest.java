package io.github.tornadoattention.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.InvalidArgumentException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;

/** The host side: profiler log parsing, greedy picks, the config's and the command line's checks, the weights. */
class HostSideTest {
    /** Two executions of one graph as TornadoVM 5.2's TimeProfiler.createJson writes them (SILENT mode). */
    static final String LOG = """
            {
                "layer_0": {
                    "TOTAL_TASK_GRAPH_TIME": "912345",
                    "TOTAL_KERNEL_TIME": "5000",
                    "layer_0.attn_norm": {
                        "BACKEND": "PTX",
                        "METHOD": "LlamaKernels.rmsNorm",
                        "DEVICE_ID": "0:0",
                        "DEVICE": "NVIDIA H200",
                        "TASK_COMPILE_GRAAL_TIME": "100",
                        "TASK_KERNEL_TIME": "3000"
                    }, 
                    "layer_0.attn_decode": {
                        "BACKEND": "PTX",
                        "METHOD": "flash_cache_decode_fused_d128_tornado_h128",
                        "DEVICE_ID": "0:0",
                        "DEVICE": "NVIDIA H200",
                        "TASK_KERNEL_TIME": "2000"
                    }
                }
            }
            {
                "layer_0": {
                    "TOTAL_TASK_GRAPH_TIME": "45678",
                    "layer_0.attn_norm": {
                        "BACKEND": "PTX",
                        "TASK_KERNEL_TIME": "1000"
                    }
                }
            }
            """;

    @Test
    void profileLogGivesEachTasksKernelTimeSummedOverExecutions() {
        Map<String, Long> times = ProfileLog.kernelTimes(LOG);
        assertEquals(Map.of("layer_0.attn_norm", 4000L, "layer_0.attn_decode", 2000L), times);
        assertEquals("attn_decode", ProfileLog.taskName("layer_0.attn_decode"));
        assertEquals(Map.of(), ProfileLog.kernelTimes(""));
    }

    @Test
    void theTimingTableListsTasksInTheOrderTheyRun() {
        List<String> tasks = new ArrayList<>(List.of("lm_head", "attn_DecodeCombine", "out_proj", "rope", "attn_Append",
                "embed", "qkv", "rms_att", "unknown", "attn_DecodeSplit"));
        tasks.sort(LlamaDecoderDemo::graphOrder);
        assertEquals(List.of("embed", "rms_att", "qkv", "rope", "attn_Append", "attn_DecodeSplit", "attn_DecodeCombine",
                "out_proj", "lm_head", "unknown"), tasks);
        // ptx-tornado: one fused task where the Java backends have three
        tasks = new ArrayList<>(List.of("out_proj", "attn_decode", "rope"));
        tasks.sort(LlamaDecoderDemo::graphOrder);
        assertEquals(List.of("rope", "attn_decode", "out_proj"), tasks);
    }

    @Test
    void greedyPicksTheBestTokenAndTheGapToTheRunnerUp() {
        FloatArray logits = FloatArray.fromElements(0.5f, Float.NaN, 2.0f, 1.25f, 2.0f, -3f);
        Greedy.Pick pick = Greedy.pick(logits);
        assertEquals(2, pick.token(), "lowest index among equal best logits");
        assertEquals(4, pick.runnerUp());
        assertEquals(0.0f, pick.margin());
        Greedy.Pick clear = Greedy.pick(FloatArray.fromElements(0.5f, 3f, 1f));
        assertEquals(1, clear.token());
        assertEquals(2, clear.runnerUp());
        assertEquals(2.0f, clear.margin());
        assertThrows(IllegalStateException.class, () -> Greedy.pick(FloatArray.fromElements(Float.NaN)));
    }

    @Test
    void tokenHashTellsSequencesApart() {
        assertEquals(Greedy.hash(new int[] {1, 2, 3}), Greedy.hash(new int[] {1, 2, 3}));
        assertNotEquals(Greedy.hash(new int[] {1, 2, 3}), Greedy.hash(new int[] {1, 3, 2}));
        assertNotEquals(Greedy.hash(new int[] {256}), Greedy.hash(new int[] {1}));
        assertEquals(16, Greedy.hash(new int[0]).length());
    }

    @Test
    void configRefusesShapesTheKernelsCannotRun() {
        LlamaConfig ok = new LlamaConfig(4, 4096, 32, 8, 128, 0, 32000, 4096, 500000f, 1e-5f);
        assertEquals(1024, ok.kvDim());
        assertEquals(6144, ok.qkvRows());
        assertEquals(2L * (4 * (6144L * 4096 + 4096L * 4096) + 2L * 32000 * 4096), ok.weightBytes());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> new LlamaConfig(4, 4096, 32, 8, 256, 0, 32000, 4096, 500000f, 1e-5f));
        assertEquals("headDim", e.argument());
        assertEquals("heads", assertThrows(InvalidArgumentException.class,
                () -> new LlamaConfig(4, 4000, 32, 8, 128, 0, 32000, 4096, 500000f, 1e-5f)).argument());
        assertEquals("kvHeads", assertThrows(InvalidArgumentException.class,
                () -> new LlamaConfig(4, 4096, 32, 6, 128, 0, 32000, 4096, 500000f, 1e-5f)).argument());
        assertEquals("vocab", assertThrows(InvalidArgumentException.class,
                () -> new LlamaConfig(4, 4096, 32, 8, 128, 0, 600_000, 4096, 500000f, 1e-5f)).argument());
    }

    private static String[] run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        int status = LlamaDecoderDemo.execute(args, new PrintWriter(out, true), new PrintWriter(err, true));
        return new String[] {String.valueOf(status), out.toString(), err.toString()};
    }

    @Test
    void badOptionsAreRefusedBeforeAnythingRunsNamingTheOption() {
        String[][] cases = {
            {"--attention=ours,fast", "--attention = fast: each must be one of ours, scalar, library"},
            {"--attention=scalar,scalar", "--attention = scalar,scalar"},
            {"--backend=cuda", "--backend = cuda: must be one of [ptx-tornado, tornado-mma, tornado-simt]"},
            {"--head-dim=96", "--heads = 32: heads * headDim must equal dim = 4096"},
            {"--kv-heads=5", "--kv-heads = 5: must divide heads = 32"},
            {"--prompt=0", "--prompt = 0: must be >= 1"},
            {"--prefix=-1", "--prefix = -1: must be in [0, 2^20]"},
            {"--prefix=1048000", "--generate = 256: must be >= 1, with --prefix + --prompt + --generate <= 2^20"},
            {"--generate=32", "--profile-steps = 16: must be >= 0 with 2 x --profile-steps < --generate = 32"},
            {"--cuda-graph", "--profile-steps = 16: must be 0 with --cuda-graph"},
            {"--check-steps=-1", "--check-steps = -1"},
            {"--ffn-dim=-2", "--ffn-dim = -2"},
            {"--layers=x", "Invalid value for option '--layers'"},
        };
        for (String[] c : cases) {
            String[] result = run(c[0]);
            assertEquals("2", result[0], c[0] + ": " + result[2]);
            assertTrue(result[2].contains(c[1]), c[0] + " gave: " + result[2]);
        }
    }

    @Test
    void prefixRowsAreTheSameForEveryVariantFp16ExactAndDifferPerLayerAndKind() {
        AttentionVariant.PrefixRows rows = new AttentionVariant.PrefixRows(7, 2, 64);
        float[] k = rows.rows(1, false, 10);
        assertEquals(10 * 2 * 64, k.length);
        float[] firstRows = rows.rows(1, false, 3);
        for (int i = 0; i < firstRows.length; i++) {
            assertEquals(k[i], firstRows[i], "a shorter prefix is the start of a longer one");
        }
        for (float x : k) {
            assertEquals(x, Float.float16ToFloat(Float.floatToFloat16(x)), "fp16 caches hold the same values as fp32 ones");
            assertTrue(x >= -1 && x <= 1);
        }
        float[] position4 = rows.row(1, false, 4);
        for (int i = 0; i < position4.length; i++) {
            assertEquals(k[4 * 2 * 64 + i], position4[i], "row gives one position of rows");
        }
        assertNotEquals(k[0], rows.rows(1, true, 1)[0]);
        assertNotEquals(k[0], rows.rows(0, false, 1)[0]);
        assertNotEquals(k[0], new AttentionVariant.PrefixRows(8, 2, 64).rows(1, false, 1)[0]);
    }

    @Test
    void weightsAreTheSameForASeedAndHaveTheirScale() {
        LlamaConfig config = new LlamaConfig(1, 128, 2, 1, 64, 32, 300, 20, 10000f, 1e-5f);
        LlamaWeights a = new LlamaWeights(config, 5);
        LlamaWeights b = new LlamaWeights(config, 5);
        LlamaWeights c = new LlamaWeights(config, 6);
        assertEquals(a.embedding.get(777).getFloat32(), b.embedding.get(777).getFloat32());
        assertNotEquals(a.embedding.get(777).getFloat32(), c.embedding.get(777).getFloat32());
        double sum2 = 0;
        for (int i = 0; i < a.embedding.getSize(); i++) {
            float v = a.embedding.get(i).getFloat32();
            sum2 += v * v;
        }
        assertEquals(LlamaWeights.EMBEDDING_STD, Math.sqrt(sum2 / a.embedding.getSize()), 0.02);
        // q/k rows twice the v rows' scale (see LlamaWeights)
        LlamaWeights.Layer layer = a.layers.get(0);
        int dim = config.dim();
        double qk = 0;
        double v = 0;
        for (int i = 0; i < config.kvDim() * dim; i++) {
            qk += Math.pow(layer.wqkv().get(i).getFloat32(), 2);
            v += Math.pow(layer.wqkv().get((dim + config.kvDim()) * dim + i).getFloat32(), 2);
        }
        assertEquals(2.0, Math.sqrt(qk / v), 0.1);
        assertEquals(1.0f, a.ropeCos.get(0));
        assertEquals(0.0f, a.ropeSin.get(0));
        assertEquals((float) Math.cos(3 * Math.pow(10000, -2.0 * 5 / 64)), a.ropeCos.get(3 * 32 + 5), 1e-7);
        assertEquals(2 * config.ffnDim() * dim, layer.w13().getSize());
    }
}
