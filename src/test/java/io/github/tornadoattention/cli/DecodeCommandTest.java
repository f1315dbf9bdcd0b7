package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.Map;
import org.junit.jupiter.api.Test;

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

    @Test
    void raggedLengthsSpreadFromASixteenthToTheContext() {
        int[] lengths = DecodeCommand.lengths(8, 4096, true, 3);
        assertEquals(256, java.util.Arrays.stream(lengths).min().orElseThrow());
        assertEquals(4096, java.util.Arrays.stream(lengths).max().orElseThrow());
    }

    @Test
    void aCpuRunThatWouldTakeMinutesIsRefusedUnlessForced() {
        Result r = run("decode", "--batch", "8", "--heads", "32", "--kv-heads", "8", "--dim", "128", "--context", "32768",
                "--backend", "cpu-reference");
        assertEquals(Main.EXIT_BAD_INPUT, r.exit());
        assertTrue(r.err().contains("--context") && r.err().contains("--force"), r.err());
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
