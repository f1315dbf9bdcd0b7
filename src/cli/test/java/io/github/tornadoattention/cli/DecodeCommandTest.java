package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** {@code decode} on the CPU device: the engine's loop, its counters and its check. */
class DecodeCommandTest {

    private record Result(int exit, String out, String err) {
    }

    private static Result run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        int exit = Main.execute(args, new PrintWriter(out, true), new PrintWriter(err, true));
        return new Result(exit, out.toString(), err.toString());
    }

    @Test
    void pagedRaggedDecodeChecksAndCountsNothingPerStep() throws Exception {
        Result r = run("decode", "--batch", "3", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--context", "70",
                "--steps", "4", "--warmup", "2", "--layers", "2", "--ragged", "--page-size", "16",
                "--backend", "cpu-reference", "--check", "--json", "--seed", "11");
        assertEquals(0, r.exit(), r.err());
        String[] lines = r.out().strip().split("\n");
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(0, ((Number) json.get("plans_created")).intValue());
        assertEquals(0, ((Number) json.get("allocations_after_warmup")).intValue());
        assertEquals(Boolean.TRUE, json.get("steady_state"));
        assertEquals(Boolean.TRUE, json.get("check_passed"));
        // cpu-reference is the CPU reference: its check uses the independent online-softmax reference, as run does.
        assertEquals("online-softmax reference", json.get("checked_against"));
        assertTrue(r.out().contains("against the online-softmax reference"), r.out());
        assertEquals(11, ((Number) json.get("seed")).intValue());
        assertTrue(((Number) json.get("max_abs_error")).doubleValue() < 1e-2);
        assertTrue(((Number) json.get("median_ms")).doubleValue() > 0);
    }

    /** decode and prefill take --window, --softcap and --sinks; their --check on cpu-reference checks them. */
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "decode --batch 3 --heads 4 --kv-heads 2 --dim 32 --context 70 --ragged --page-size 16 --window 16 --softcap 20 --sinks | [16, -1] | true",
        "decode --batch 2 --heads 4 --dim 32 --context 40 --window 8,0                                                   | [8, 0]   | false",
        "prefill --heads 4 --kv-heads 2 --dim 32 --lengths 0,9,37 --page-size 16 --window 5,2 --softcap 30 --sinks          | [5, 2]   | true",
    })
    void decodeAndPrefillCheckWindowSoftcapAndSinks(String commandLine, String window, boolean capped) throws Exception {
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(commandLine.trim().split("\\s+")));
        args.addAll(java.util.List.of("--backend", "cpu-reference", "--check", "--json", "--seed", "5"));
        if (args.get(0).equals("decode")) {
            args.addAll(java.util.List.of("--steps", "2", "--warmup", "1"));
        } else {
            args.addAll(java.util.List.of("--iters", "1"));
        }
        Result r = run(args.toArray(String[]::new));
        assertEquals(0, r.exit(), r.err() + r.out());
        String[] lines = r.out().strip().split("\n");
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(Boolean.TRUE, json.get("check_passed"), r.out());
        assertEquals(window.trim(), json.get("window").toString());
        assertEquals(capped, json.containsKey("softcap"));
        assertEquals(capped, json.containsKey("sinks"));
        assertTrue(r.out().contains("features    window"), r.out());
    }

    /**
     * A Gemma-2-shaped loop: windowed and global layers alternate; two plans, both layer types' outputs checked,
     * and the bytes read follow the window on the windowed layers only.
     */
    @Test
    void alternatingWindowedAndGlobalLayersMakeTwoPlansAndCheckBoth() throws Exception {
        Result r = run("decode", "--batch", "2", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--context", "60",
                "--layers", "4", "--window", "8", "--window-layers", "LG", "--softcap", "50", "--steps", "2", "--warmup", "1",
                "--backend", "cpu-reference", "--check", "--json", "--seed", "3");
        assertEquals(0, r.exit(), r.err() + r.out());
        String[] lines = r.out().strip().split("\n");
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(Boolean.TRUE, json.get("check_passed"), r.out());
        assertEquals("LG", json.get("window_layers"));
        assertTrue(r.out().contains("2 plans"), r.out());
        // Per sequence: two windowed layers read 9 keys each, two global ones the whole cache.
        double perKey = 2.0 * 2 * 32 * 2; // K and V, kv heads, head dim, fp16 bytes
        double tokens = ((Number) json.get("kv_bytes_per_token")).doubleValue() / perKey;
        int length = 60 + 1 + 2 + 2 + 2 + 1; // context + warm-up + steps + kernel samples + checked steps + this one
        assertTrue(tokens > 2 * (2 * 9) && tokens < 2 * (2 * 9 + 2 * length), "tokens " + tokens);
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "--window 8 --window-layers LX | --window-layers | LX",
        "--window-layers LG            | --window-layers | needs --window",
        "--window 8 --window-layers '' | --window-layers | pattern",
    })
    void badWindowPatternsAreRefusedByName(String options, String argument, String says) {
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of("decode", "--batch", "1", "--heads", "2",
                "--dim", "16", "--context", "5", "--steps", "1", "--backend", "cpu-reference"));
        for (String o : options.trim().split("\\s+")) {
            args.add(o.equals("''") ? "" : o);
        }
        Result r = run(args.toArray(String[]::new));
        assertEquals(Main.EXIT_BAD_INPUT, r.exit(), r.out());
        assertTrue(r.err().contains(argument) && r.err().contains(says), r.err());
    }

    /** bf16 KV caches: decode and prefill keep every tensor in bf16 and --check holds them to the bf16 bound. */
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "decode --batch 2 --heads 4 --kv-heads 2 --dim 96 --context 50 --page-size 16 --steps 2 --warmup 1",
        "prefill --heads 4 --kv-heads 2 --dim 32 --lengths 3,40 --iters 1",
    })
    void bf16CachesDecodeAndPrefillAgainstTheOracle(String commandLine) throws Exception {
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(commandLine.trim().split("\\s+")));
        args.addAll(java.util.List.of("--dtype", "bf16", "--backend", "cpu-reference", "--check", "--json", "--seed", "8"));
        Result r = run(args.toArray(String[]::new));
        assertEquals(0, r.exit(), r.err() + r.out());
        String[] lines = r.out().strip().split("\n");
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals("bf16", json.get("dtype"));
        assertEquals(Boolean.TRUE, json.get("check_passed"), r.out());
    }

    @Test
    void raggedLengthsSpreadFromASixteenthToTheContext() {
        int[] lengths = DecodeCommand.lengths(8, 4096, true, 3);
        assertEquals(256, java.util.Arrays.stream(lengths).min().orElseThrow());
        assertEquals(4096, java.util.Arrays.stream(lengths).max().orElseThrow());
    }

    /**
     * decode and prefill estimate their work before any: over a limit they stop with one line giving the
     * numbers (exit 2), as run and selftest do. Caches grow by one token per step, so a million steps or
     * 100000 steps of 16 sequences in 10 layers are refused (they ran for hours, or ended in an
     * OutOfMemoryError).
     */
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "decode --batch 1 --heads 8 --dim 64 --context 128 --steps 1000000 | --batch 1 --heads 8 --dim 64 --context 128 --layers 1 --steps 1000000 --warmup 8: needs about",
        "decode --batch 16 --heads 8 --dim 64 --context 16 --steps 100000 --layers 10 | --batch 16 --heads 8 --dim 64 --context 16 --layers 10 --steps 100000 --warmup 8: needs about",
        "decode --batch 8 --heads 32 --kv-heads 8 --dim 128 --context 32768 --layers 4 | --context 32768 --layers 4 --steps 64 --warmup 8: needs about",
        "prefill --heads 32 --dim 128 --lengths 8000,8000 | --heads 32 --dim 128 --lengths 8000,8000 --iters 20: needs about",
        "prefill --heads 32 --dim 128 --lengths 100,20000 --check | --lengths 100,20000 --iters 20 --check: needs about",
    })
    void tooMuchWorkIsRefusedWithTheEstimate(String commandLine, String start) {
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(commandLine.trim().split("\\s+")));
        args.addAll(java.util.List.of("--backend", "cpu-reference"));
        Result r = run(args.toArray(String[]::new));
        assertEquals(Main.EXIT_BAD_INPUT, r.exit(), r.out() + r.err());
        assertEquals("", r.out());
        String[] lines = r.err().strip().split("\\R");
        assertEquals(1, lines.length, r.err());
        assertTrue(lines[0].startsWith("error: ") && lines[0].contains(start.trim()), r.err());
        assertTrue(lines[0].matches(".*needs about [0-9.e+]+ (FLOPs of CPU reference work, about [0-9.]+ (s|min|h|days|years)"
                + "|GiB \\([0-9]+ bytes\\) of (off-heap memory|Java heap)).*"), r.err());
        assertTrue(lines[0].endsWith("; pass --force to run anyway"), r.err());
    }

    @Test
    void theEstimatesGrowWithTheStepsAndForceRunsAnyway() {
        int[] lengths = {100, 100};
        Limits.Work few = Limits.Work.decode(lengths, 8, 8, 64, 2, 200, 0, 100, 0, true, 0);
        Limits.Work many = Limits.Work.decode(lengths, 8, 8, 64, 2, 200_100, 0, 200_000, 0, true, 0);
        assertTrue(many.cpuFlops() > 1000 * few.cpuFlops(), "each step attends over every token before it");
        assertTrue(many.offHeapBytes() > 100 * few.offHeapBytes(), "the caches hold every step's token");
        assertEquals(0, Limits.Work.decode(lengths, 8, 8, 64, 2, 200_100, 0, 200_000, 0, false, 0).cpuFlops(),
                "a GPU device does no CPU reference work without --check");
        org.junit.jupiter.api.Assertions.assertDoesNotThrow(() -> many.check("decode", true));
        Result r = run("prefill", "--heads", "2", "--dim", "16", "--lengths", "5,7", "--iters", "1", "--backend",
                "cpu-reference", "--force");
        assertEquals(0, r.exit(), r.err());
        Result d = run("decode", "--batch", "1", "--heads", "2", "--dim", "16", "--context", "5", "--steps", "1",
                "--warmup", "0", "--backend", "cpu-reference", "--force");
        assertEquals(0, d.exit(), d.err());
    }

    @Test
    void varlenPrefillOfRaggedPromptsMatchesTheOracle() throws Exception {
        Result r = run("prefill", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--lengths", "0,1,37,100",
                "--page-size", "16", "--iters", "2", "--backend", "cpu-reference", "--check", "--json", "--seed", "5");
        assertEquals(0, r.exit(), r.err());
        String[] lines = r.out().strip().split("\n");
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(Boolean.TRUE, json.get("check_passed"));
        assertTrue(((Number) json.get("max_abs_error")).doubleValue() < 1e-2);
    }
}
