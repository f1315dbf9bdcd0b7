package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class MainTest {

    private record Result(int exit, String out, String err) {
        String[] outLines() {
            return out.strip().split("\\R");
        }
    }

    private static Result run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        int exit = Main.execute(args, new PrintWriter(out, true), new PrintWriter(err, true));
        return new Result(exit, out.toString(), err.toString());
    }

    @Test
    void runChecksAndPrintsJsonOnTheLastLine() throws Exception {
        Result r = run("run", "--batch", "2", "--heads", "4", "--kv-heads", "2", "--seq", "64", "--kv-seq", "80",
                "--dim", "32", "--causal", "--layout", "BSHD", "--backend", "cpu-reference", "--check",
                "--warmup", "1", "--iters", "3", "--json");
        assertEquals(0, r.exit(), r.err());
        assertTrue(r.out().contains("TFLOP/s"), r.out());
        assertTrue(r.out().contains("check       PASS"), r.out());
        String[] lines = r.outLines();
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals("cpu-reference", json.get("backend"));
        assertEquals(2, ((Number) json.get("kv_heads")).intValue());
        assertEquals("bshd", json.get("layout"));
        assertEquals(Boolean.TRUE, json.get("check_passed"));
        assertTrue(((Number) json.get("median_ms")).doubleValue() > 0);
        assertTrue(((Number) json.get("tflops")).doubleValue() > 0);
        assertTrue(((Number) json.get("max_abs_error")).doubleValue() < 1e-2);
    }

    @Test
    void backendsListsEveryIdWithAReason() {
        Result r = run("backends");
        assertEquals(0, r.exit());
        for (String id : new String[] {"cpu-reference", "tornado-simt", "tornado-mma", "ptx-tornado", "ptx-cuda", "auto"}) {
            assertTrue(r.out().contains(id), id + " missing from\n" + r.out());
        }
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "run --heads 8 --seq 16 --dim 64                          | --batch",
        "run --batch 0 --heads 8 --seq 16 --dim 64                | --batch = 0: must be >= 1",
        "run --batch 1 --heads 8 --kv-heads 3 --seq 16 --dim 64   | --kv-heads = 3: must divide queryHeads (8)",
        "run --batch 1 --heads 8 --seq -4 --dim 64                | --seq = -4: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --kv-seq 0 --dim 64      | --kv-seq = 0: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --dim 0                  | --dim = 0: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale -1      | --scale = -1.0: must be finite and > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale NaN     | --scale = NaN: must be finite and > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --layout sbhd   | --layout",
        "run --batch x --heads 8 --seq 4 --dim 64                 | --batch",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --backend cuda  | --backend = cuda: must be one of",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --iters 0       | --iters = 0: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --bogus         | --bogus",
        "selftest --random -1                                     | --random = -1: must be >= 0",
        "selftest --backend cpu-reference,nope                    | --backend = nope: must be one of",
        "selftest --backend cpu-reference --cases 0               | --cases = 0: must be N or FROM-TO within 1..22",
        "selftest --backend cpu-reference --cases 3-99            | --cases = 3-99: must be N or FROM-TO within 1..22",
        "frobnicate                                               | frobnicate",
    })
    void badInputGetsOneLineAndExitCode2(String commandLine, String expected) {
        Result r = run(commandLine.trim().split("\\s+"));
        assertEquals(Main.EXIT_BAD_INPUT, r.exit(), r.err());
        assertEquals("", r.out());
        String[] errLines = r.err().strip().split("\\R");
        assertEquals(1, errLines.length, r.err());
        assertTrue(errLines[0].startsWith("error: "), r.err());
        assertTrue(errLines[0].contains(expected.trim()), r.err());
        assertFalse(r.err().contains("\tat "), "stack trace printed");
    }

    @Test
    void selftestRunsTheChosenCasesAndCounts() {
        Result r = run("selftest", "--backend", "cpu-reference", "--random", "2", "--seed", "7", "--cases", "22-24");
        assertEquals(0, r.exit(), r.out() + r.err());
        String[] lines = r.outLines();
        assertTrue(lines[2].startsWith("[22/24] PASS custom-scale"), r.out());
        assertTrue(lines[4].startsWith("[24/24] PASS random-1"), r.out());
        assertEquals("3 passed, 0 failed", lines[lines.length - 1]);
    }

    @Test
    void anUnavailableBackendExitsWith3() {
        Result r = run("run", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "64", "--backend", "tornado-mma");
        if (r.exit() == Main.EXIT_UNAVAILABLE) {
            assertTrue(r.err().startsWith("error: backend tornado-mma is unavailable: "), r.err());
        } else {
            assertEquals(0, r.exit(), "tornado-mma is available here, so it must run: " + r.err());
        }
    }
}
