package io.github.tornadoattention.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.verify.CorrectnessSuite;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
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
        assertTrue(r.out().contains("FLOP/s"), r.out());
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
    void runPrintsTheSeedAndFourSignificantDigits() throws Exception {
        Result r = run("run", "--batch", "1", "--heads", "2", "--seq", "16", "--dim", "16", "--backend", "cpu-reference",
                "--seed", "42", "--warmup", "0", "--iters", "3", "--check", "--json");
        assertEquals(0, r.exit(), r.err());
        assertFalse(r.out().contains("on device"), "cpu-reference has no device:\n" + r.out());
        assertTrue(r.out().contains("GFLOP/s"), r.out()); // a tiny shape, not "0.000 TFLOP/s"
        assertFalse(r.out().contains(" 0.000 "), r.out());
        String[] lines = r.outLines();
        String jsonLine = lines[lines.length - 1];
        Map<String, Object> json = JSON.std.mapFrom(jsonLine);
        assertEquals(42L, ((Number) json.get("seed")).longValue());
        assertEquals("online-softmax reference", json.get("checked_against"));
        assertFalse(json.containsKey("device_median_ms"), jsonLine);
        Matcher number = Pattern.compile("\"(median_ms|ci95_low_ms|tflops|max_abs_error|rel_error)\":([-0-9.eE]+)")
                .matcher(jsonLine);
        int numbers = 0;
        while (number.find()) {
            numbers++;
            assertTrue(new BigDecimal(number.group(2)).stripTrailingZeros().precision() <= 4, number.group());
        }
        assertEquals(5, numbers, jsonLine);
    }

    @Test
    void runAcceptsTheScaleRangesEndsAndTheCheckPasses() {
        for (String scale : new String[] {Float.toString(Float.MIN_VALUE), Float.toString(Limits.maxScale(64))}) {
            Result r = run("run", "--batch", "1", "--heads", "2", "--kv-heads", "1", "--seq", "33", "--kv-seq", "70",
                    "--dim", "64", "--causal", "--scale", scale, "--backend", "cpu-reference", "--check", "--warmup", "0",
                    "--iters", "1", "--json");
            assertEquals(0, r.exit(), scale + ": " + r.out() + r.err());
            assertTrue(r.out().contains("check       PASS"), r.out());
        }
        Result over = run("run", "--batch", "1", "--heads", "2", "--seq", "33", "--dim", "64",
                "--scale", Float.toString(Math.nextUp(Limits.maxScale(64))));
        assertEquals(Main.EXIT_BAD_INPUT, over.exit(), over.err());
    }

    /** The issue's commands, in a JVM with a given heap: refused at once with one line. */
    @ParameterizedTest
    @CsvSource(delimiter = '|', quoteCharacter = '"', value = {
        "1g | run --batch 1 --heads 8 --seq 65536 --kv-seq 1 --dim 1024 --backend cpu-reference | --batch 1 --heads 8 --seq 65536 --kv-seq 1 --dim 1024 --warmup 3 --iters 10: needs about | of Java heap for the CPU reference, over the JVM's maximum of",
        "4g | run --seq 100000 --batch 1 --heads 8 --dim 64 --backend cpu-reference | --batch 1 --heads 8 --seq 100000 --dim 64 --warmup 3 --iters 10: needs about | FLOPs of CPU reference work, about",
        "1g | selftest --backend cpu-reference --random 1000000000 | --random 1000000000: needs about | FLOPs of CPU reference work",
    })
    void tooMuchWorkIsRefusedBeforeItStarts(String heap, String commandLine, String start, String estimate) throws Exception {
        List<String> command = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElseThrow(),
                "-Xmx" + heap.trim(), "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(List.of(commandLine.trim().split("\\s+")));
        Process p = new ProcessBuilder(command).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(Main.EXIT_BAD_INPUT, p.exitValue(), out + err);
        assertEquals("", out);
        String[] lines = err.strip().split("\\R");
        assertEquals(1, lines.length, err);
        assertTrue(lines[0].startsWith("error: " + start.trim()), err);
        assertTrue(lines[0].contains(estimate.trim()), err);
        assertTrue(lines[0].endsWith("; pass --force to run anyway"), err);
    }

    @Test
    void selftestSaysWhenItChecksTheOracleAndPrintsJson() throws Exception {
        int n = io.github.tornadoattention.verify.CorrectnessSuite.fullSuite().size();
        Result r = run("selftest", "--backend", "cpu-reference", "--random", "1", "--seed", "5", "--cases", (n - 1) + "-" + (n + 1),
                "--json");
        assertEquals(0, r.exit(), r.out() + r.err());
        assertTrue(r.outLines()[0].contains("cpu-reference is the CPU reference itself: checked against the independent"
                + " online-softmax reference instead"), r.out());
        String[] lines = r.outLines();
        assertEquals("3 passed, 0 failed", lines[lines.length - 2]);
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(5L, ((Number) json.get("seed")).longValue());
        assertEquals(3, ((Number) json.get("passed")).intValue());
        assertEquals(0, ((Number) json.get("failed")).intValue());
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> cases = (List<Map<String, Object>>) json.get("cases");
        assertEquals(3, cases.size());
        assertEquals(io.github.tornadoattention.verify.CorrectnessSuite.fullSuite().get(n - 1).name(), cases.get(1).get("name"));
        assertEquals(n + 1, ((Number) cases.get(2).get("number")).intValue());
        assertEquals("random-0", cases.get(2).get("name"));
        for (Map<String, Object> c : cases) {
            assertEquals("cpu-reference", c.get("ran_on"));
            assertEquals("online-softmax reference", c.get("checked_against"));
            assertEquals(Boolean.TRUE, c.get("check_passed"));
            assertTrue(((Number) c.get("max_abs_error")).doubleValue() < 1e-2);
        }
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> totals = (List<Map<String, Object>>) json.get("backends");
        assertEquals(List.of(Map.of("backend", "cpu-reference", "passed", 3, "failed", 0, "not_served", 0)), totals);
    }

    /** auto runs cpu-reference where nothing else is available: then it must not be compared with itself. */
    @Test
    void autoIsNeverComparedWithItself() throws Exception {
        Result r = run("selftest", "--backend", "auto", "--cases", "8", "--seed", "1", "--json");
        assertEquals(0, r.exit(), r.out() + r.err());
        String[] lines = r.outLines();
        @SuppressWarnings("unchecked")
        Map<String, Object> c = ((List<Map<String, Object>>) JSON.std.mapFrom(lines[lines.length - 1]).get("cases")).get(0);
        assertEquals(CorrectnessSuite.oracleName((String) c.get("ran_on")), c.get("checked_against"));
        if (c.get("ran_on").equals("cpu-reference")) {
            assertTrue(lines[0].contains("auto runs cpu-reference here, which is the CPU reference itself"), r.out());
        }
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
    @CsvSource(delimiter = '|', quoteCharacter = '"', value = {
        "run --heads 8 --seq 16 --dim 64                          | --batch",
        "run --batch 0 --heads 8 --seq 16 --dim 64                | --batch = 0: must be >= 1",
        "run --batch 1 --heads 8 --kv-heads 3 --seq 16 --dim 64   | --kv-heads = 3: must divide heads (8)",
        "run --batch 1 --heads 8 --seq -4 --dim 64                | --seq = -4: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --kv-seq 0 --dim 64      | --kv-seq = 0: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --dim 0                  | --dim = 0: must be >= 1",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale -1      | --scale = -1: must be a number > 0 and at most 6.195749E26 at --dim 64",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale NaN     | --scale = NaN: must be a number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale 1e40    | --scale = 1e40: must be a number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale 3.4e38  | --scale = 3.4e38: must be a number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 128 --scale 0x1p90 | --scale = 0x1p90: must be a number > 0 and at most 3.0978746E26 at --dim 128",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --scale big     | --scale = big: must be a number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --layout sbhd   | --layout",
        "run --batch x --heads 8 --seq 4 --dim 64                 | --batch",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --backend cuda  | --backend = cuda: must be one of",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --iters 0       | --iters = 0: must be in 1..1000000",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --iters 2147483647 | --iters = 2147483647: must be in 1..1000000",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --warmup 1000001 | --warmup = 1000001: must be in 0..1000000",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --bogus         | --bogus",
        "selftest --random -1                                     | --random = -1: must be >= 0",
        "selftest --backend cpu-reference,nope                    | --backend = nope: must be one of",
        "selftest --backend ,                                     | --backend = ',': must name one or more of",
        "selftest --backend cpu-reference,,auto                   | --backend = 'cpu-reference,,auto': must name one or more",
        "selftest --random 1000000000                             | --random 1000000000: needs about",
        "selftest --backend cpu-reference --cases 0               | --cases = 0: must be N or FROM-TO within 1..",
        "selftest --backend cpu-reference --cases 3-99            | --cases = 3-99: must be N or FROM-TO within 1..",
        "frobnicate                                               | frobnicate",
        "decode --batch 2 --heads 4 --dim 64 --context 16 --backend cpu-reference --page-size 3 | --page-size = 3: must be 0 (contiguous) or a power of two",
        "decode --batch 2 --heads 4 --dim 64 --context 16 --backend cpu-reference --page-size -1 | --page-size = -1: ",
        "decode --batch 2 --heads 4 --dim 64 --context 16 --backend cpu-reference --lanes 17   | --lanes = 17: must be 0..16",
        "decode --batch 0 --heads 4 --dim 64 --context 16 --backend cpu-reference              | --batch = 0: must be >= 1",
        "decode --batch 2 --heads 0 --dim 64 --context 16 --backend cpu-reference              | --heads = 0: must be >= 1",
        "decode --batch 2 --heads 4 --kv-heads 3 --dim 64 --context 16 --backend cpu-reference | --kv-heads = 3: must divide heads (4)",
        "prefill --heads 4 --dim 64 --lengths 3,5 --backend cpu-reference --page-size 3       | --page-size = 3: must be 0 (contiguous) or a power of two",
        "selftest --inference --backend cpu-reference --lanes -1                              | --lanes = -1: must be 0..16",
        "selftest --inference --backend cpu-reference --threads -1                            | --threads = -1: must be >= 0",
        "selftest --backend cpu-reference --threads 2                                         | --threads = 2: is for --inference",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --cuda-device -1  | --cuda-device = -1: must be >= 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --window -2        | --window = -2: must be LEFT or LEFT,RIGHT, each -1 (unbounded)",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --window 4,-3      | --window = 4,-3: must be LEFT or LEFT,RIGHT",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --window 1,2,3     | --window = 1,2,3: must be LEFT or LEFT,RIGHT",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --window wide      | --window = wide: must be LEFT or LEFT,RIGHT",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --softcap 0        | --softcap = 0: must be a finite number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --softcap -5       | --softcap = -5: must be a finite number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --softcap NaN      | --softcap = NaN: must be a finite number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --softcap Infinity | --softcap = Infinity: must be a finite number > 0",
        "selftest --backend cpu-reference --window x                 | --window = x: must be LEFT or LEFT,RIGHT",
        "selftest --backend cpu-reference --softcap 0                | --softcap = 0: must be a finite number > 0",
        "run --batch 1 --heads 8 --seq 4 --dim 64 --dtype fp32       | --dtype = fp32: must be fp16 or bf16",
        "selftest --backend cpu-reference --dtype half               | --dtype = half: must be fp16 or bf16",
        "decode --batch 2 --heads 4 --dim 64 --context 16 --backend cpu-reference --window -2 | --window = -2: must be LEFT or LEFT,RIGHT",
        "decode --batch 2 --heads 4 --dim 64 --context 16 --backend cpu-reference --softcap 0 | --softcap = 0: must be a finite number > 0",
        "prefill --heads 4 --dim 64 --lengths 3,5 --backend cpu-reference --window 1,2,3      | --window = 1,2,3: must be LEFT or LEFT,RIGHT",
        "prefill --heads 4 --dim 64 --lengths 3,5 --backend cpu-reference --softcap NaN       | --softcap = NaN: must be a finite number > 0",
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

    /**
     * One JSON vocabulary: the primary timing of every command is median_ms (with ci95_low_ms and
     * ci95_high_ms), a second timing gets a qualifier (kernel_median_ms); check_passed and
     * checked_against appear exactly when --check ran.
     */
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "run --batch 1 --heads 2 --seq 16 --dim 16 --warmup 0 --iters 2",
        "decode --batch 2 --heads 2 --dim 16 --context 20 --steps 2 --warmup 1",
        "prefill --heads 2 --dim 16 --lengths 3,9 --iters 2",
    })
    void jsonKeysMeanTheSameInEveryCommand(String commandLine) throws Exception {
        for (boolean check : new boolean[] {false, true}) {
            List<String> args = new ArrayList<>(List.of(commandLine.trim().split("\\s+")));
            args.addAll(List.of("--backend", "cpu-reference", "--seed", "3", "--json"));
            if (check) {
                args.add("--check");
            }
            Result r = run(args.toArray(String[]::new));
            assertEquals(0, r.exit(), r.out() + r.err());
            String[] lines = r.outLines();
            Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
            for (String key : new String[] {"median_ms", "ci95_low_ms", "ci95_high_ms"}) {
                assertTrue(((Number) json.get(key)).doubleValue() > 0, key + " in " + json);
            }
            for (String old : new String[] {"step_median_ms", "call_median_ms", "passed", "device_median_ms"}) {
                assertFalse(json.containsKey(old), old + " in " + json);
            }
            assertEquals(check, json.containsKey("check_passed"), json.toString());
            assertEquals(check, json.containsKey("checked_against"), json.toString());
            assertEquals(check, json.containsKey("max_abs_error"), json.toString());
            if (check) {
                assertEquals(Boolean.TRUE, json.get("check_passed"), json.toString());
            }
        }
    }

    /** --window, --softcap and --sinks reach the shape; --check compares cpu-reference with the online reference. */
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "--seq 64 --window 5                         | window=(5,-1)   | [5, -1] | 0    | false",
        "--seq 64 --window 3,2 --kv-seq 90           | window=(3,2)    | [3, 2]  | 0    | false",
        "--seq 70 --window -1,0 --kv-seq 30          | window=(-1,0)   | [-1, 0] | 0    | false",
        "--seq 64 --softcap 1.5                      | softcap=1.5     |         | 1.5  | false",
        "--seq 70 --sinks --causal --kv-seq 30       | sinks           |         | 0    | true",
        "--seq 64 --window 7,0 --causal --softcap 20 --sinks | window=(7,0) softcap=20.0 sinks | [7, 0] | 20 | true",
    })
    void runChecksWindowSoftcapAndSinks(String options, String inShape, String window, double softcap, boolean sinks)
            throws Exception {
        List<String> args = new ArrayList<>(List.of("run", "--batch", "2", "--heads", "4", "--kv-heads", "2",
                "--dim", "32", "--backend", "cpu-reference", "--check", "--warmup", "0", "--iters", "2", "--json"));
        args.addAll(List.of(options.trim().split("\\s+")));
        Result r = run(args.toArray(String[]::new));
        assertEquals(0, r.exit(), r.out() + r.err());
        assertTrue(r.out().contains("check       PASS"), r.out());
        assertTrue(r.out().contains(inShape.trim()), r.out());
        String[] lines = r.outLines();
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals(Boolean.TRUE, json.get("check_passed"), json.toString());
        assertEquals("online-softmax reference", json.get("checked_against"));
        assertEquals(window == null ? null : window.trim(), json.containsKey("window") ? json.get("window").toString() : null);
        assertEquals(softcap, json.containsKey("softcap") ? ((Number) json.get("softcap")).doubleValue() : 0.0, 1e-6);
        assertEquals(sinks, json.containsKey("sinks"), json.toString());
        if (sinks) {
            assertEquals(4, ((List<?>) json.get("sinks")).size(), json.toString());
        }
        assertTrue(((Number) json.get("median_ms")).doubleValue() > 0);
    }

    /** --dtype bf16: cpu-reference computes on bf16 inputs and --check holds it to the bf16 bound. */
    @Test
    void runAndSelftestTakeBf16() throws Exception {
        Result r = run("run", "--batch", "2", "--heads", "4", "--kv-heads", "2", "--seq", "33", "--kv-seq", "47", "--dim", "32",
                "--causal", "--backend", "cpu-reference", "--dtype", "bf16", "--check", "--warmup", "0", "--iters", "1", "--json");
        assertEquals(0, r.exit(), r.out() + r.err());
        assertTrue(r.out().contains("check       PASS"), r.out());
        assertTrue(r.out().contains("causal bhsd bf16"), r.out());
        String[] lines = r.outLines();
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals("bf16", json.get("dtype"));
        assertEquals(Boolean.TRUE, json.get("check_passed"), json.toString());
        Result auto = run("run", "--batch", "1", "--heads", "2", "--seq", "16", "--dim", "64", "--dtype", "bf16", "--check",
                "--warmup", "0", "--iters", "1", "--json");
        assertEquals(0, auto.exit(), auto.out() + auto.err());
        assertTrue(auto.out().contains("cpu-reference"), auto.out());
        Result self = run("selftest", "--backend", "cpu-reference", "--cases", "8-9", "--dtype", "bf16", "--json");
        assertEquals(0, self.exit(), self.out() + self.err());
        assertTrue(self.out().contains("2 passed, 0 failed"), self.out());
        String[] selfLines = self.outLines();
        assertEquals("bf16", JSON.std.mapFrom(selfLines[selfLines.length - 1]).get("dtype"));
    }

    /** The same seed draws the same sink logits; another seed others. */
    @Test
    void sinkLogitsComeFromTheSeed() throws Exception {
        String[] common = {"run", "--batch", "1", "--heads", "3", "--seq", "8", "--dim", "16", "--backend", "cpu-reference",
                "--sinks", "--warmup", "0", "--iters", "1", "--json", "--seed"};
        List<Object> first = sinks(run(append(common, "11")));
        assertEquals(first, sinks(run(append(common, "11"))));
        assertFalse(first.equals(sinks(run(append(common, "12")))));
    }

    private static String[] append(String[] args, String last) {
        String[] all = java.util.Arrays.copyOf(args, args.length + 1);
        all[args.length] = last;
        return all;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> sinks(Result r) throws Exception {
        String[] lines = r.outLines();
        return (List<Object>) JSON.std.mapFrom(lines[lines.length - 1]).get("sinks");
    }

    @Test
    void selftestAppliesTheFeaturesToEveryCase() throws Exception {
        Result r = run("selftest", "--backend", "cpu-reference", "--cases", "8-11", "--window", "16,0", "--softcap", "30",
                "--sinks", "--json");
        assertEquals(0, r.exit(), r.out() + r.err());
        assertTrue(r.out().contains("4 passed, 0 failed"), r.out());
        assertTrue(r.out().contains("window=(16,0) softcap=30.0 sinks"), r.out());
        String[] lines = r.outLines();
        Map<String, Object> json = JSON.std.mapFrom(lines[lines.length - 1]);
        assertEquals("[16, 0]", json.get("window").toString());
        assertEquals(Boolean.TRUE, json.get("sinks"));
    }

    /** Without a command the error names every command of the table, so a new one is never left out. */
    @Test
    void noCommandListsEveryCommand() {
        Result r = run();
        assertEquals(Main.EXIT_BAD_INPUT, r.exit(), r.err());
        assertEquals(1, r.err().strip().split("\\R").length, r.err());
        assertTrue(r.err().startsWith("error: Missing a command: "), r.err());
        java.util.Set<String> commands = new picocli.CommandLine(new Main()).getSubcommands().keySet();
        assertTrue(commands.containsAll(List.of("run", "backends", "selftest", "decode", "prefill")), commands.toString());
        for (String command : commands) {
            if (!command.equals("help")) {
                assertTrue(r.err().contains(command), command + " missing from " + r.err());
            }
        }
    }

    @Test
    void selftestRunsTheChosenCasesAndCounts() {
        int total = io.github.tornadoattention.verify.CorrectnessSuite.fullSuite().size() + 2;
        Result r = run("selftest", "--backend", "cpu-reference", "--random", "2", "--seed", "7", "--cases", "22-25");
        assertEquals(0, r.exit(), r.out() + r.err());
        String[] lines = r.outLines();
        assertTrue(lines[2].startsWith("[22/" + total + "] PASS custom-scale"), r.out());
        assertTrue(lines[3].startsWith("[23/" + total + "] PASS nan-in-one-key"), r.out());
        assertTrue(lines[5].startsWith("[25/" + total + "] PASS d32-odd"), r.out());
        assertEquals("4 passed, 0 failed", lines[lines.length - 1]);
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
