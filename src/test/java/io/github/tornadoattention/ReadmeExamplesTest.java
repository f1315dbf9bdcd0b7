package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.PrintStream;
import java.io.ByteArrayOutputStream;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.tools.Diagnostic;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java examples of README.md and docs/*.md compile against the library, and the complete programs
 * among them run on the CPU reference.
 *
 * <p>Conventions for a fenced block whose info string is {@code java}:
 * <ul>
 *   <li>a block that declares a top-level type ({@code class}, {@code record}, {@code interface},
 *       {@code enum}, optionally {@code public}/{@code final}) is a compilation unit, compiled as it
 *       stands; if it has {@code public static void main(String[] args)} it is also run with no
 *       arguments (examples default to {@code cpu-reference}, so they run anywhere) and must end
 *       without an exception;</li>
 *   <li>any other block is a list of statements: its {@code import} lines are hoisted and the rest
 *       becomes the body of a method that {@code throws Exception}, so it must declare what it uses;</li>
 *   <li>{@code java excerpt} marks a fragment that needs context the page does not show (code inside
 *       a TornadoVM engine's task graph): counted, not compiled; README.md has none.</li>
 * </ul>
 * Blocks of other languages are ignored.
 */
class ReadmeExamplesTest {
    private static final Path ROOT = Path.of("..");
    private static final Pattern FENCE = Pattern.compile("^```\\s*(\\S*)\\s*(.*)$");
    private static final Pattern TYPE_DECLARATION = Pattern.compile(
            "(?m)^(public\\s+)?(final\\s+|abstract\\s+)?(class|record|interface|enum)\\s+(\\w+)");
    private static final Pattern MAIN = Pattern.compile("public\\s+static\\s+void\\s+main\\s*\\(\\s*String");

    /** One fenced block: where it is and what it says. */
    record Block(String file, int line, String info, String code) {
        boolean excerpt() {
            return info.toLowerCase(Locale.ROOT).contains("excerpt");
        }

        String where() {
            return file + ":" + line;
        }
    }

    @Test
    void everyJavaExampleCompilesAndEveryProgramRuns(@TempDir Path out) throws Exception {
        List<Block> blocks = new ArrayList<>(javaBlocks(ROOT.resolve("README.md")));
        Path docs = ROOT.resolve("docs");
        if (Files.isDirectory(docs)) {
            try (Stream<Path> pages = Files.list(docs)) {
                for (Path page : pages.filter(p -> p.toString().endsWith(".md")).sorted().toList()) {
                    blocks.addAll(javaBlocks(page));
                }
            }
        }
        List<Block> readme = blocks.stream().filter(b -> b.file().equals("README.md")).toList();
        assertTrue(readme.size() >= 2, "README.md should show a dense call and a decode loop, found " + readme.size() + " java blocks");
        assertTrue(readme.stream().noneMatch(Block::excerpt), "README.md examples must be complete: no `java excerpt` blocks");

        List<Block> compiled = blocks.stream().filter(b -> !b.excerpt()).toList();
        List<String> programs = new ArrayList<>();
        List<SimpleJavaFileObject> sources = new ArrayList<>();
        for (int i = 0; i < compiled.size(); i++) {
            Block b = compiled.get(i);
            Source s = toSource(b, i);
            sources.add(s.file());
            if (s.mainClass() != null) {
                programs.add(s.mainClass());
            }
        }
        String errors = compile(sources, out);
        if (!errors.isEmpty()) {
            fail("README/docs examples do not compile:\n" + errors);
        }
        assertTrue(programs.size() >= 2, "README.md's dense call and decode loop should be complete programs");

        try (URLClassLoader loader = new URLClassLoader(new URL[] {out.toUri().toURL()}, getClass().getClassLoader())) {
            for (String program : programs) {
                Method main = loader.loadClass(program).getMethod("main", String[].class);
                assertTrue(Modifier.isStatic(main.getModifiers()));
                PrintStream saved = System.out;
                ByteArrayOutputStream printed = new ByteArrayOutputStream();
                System.setOut(new PrintStream(printed, true, StandardCharsets.UTF_8));
                try {
                    main.invoke(null, (Object) new String[0]);
                } catch (java.lang.reflect.InvocationTargetException e) {
                    throw new AssertionError("example " + program + " failed on cpu-reference: " + e.getCause(), e.getCause());
                } finally {
                    System.setOut(saved);
                }
            }
        }
    }

    /** The harness itself: a broken example (the old README's try-with-resources with ',') is reported with its place. */
    @Test
    void aBrokenExampleIsReportedWithItsPlace(@TempDir Path out) throws Exception {
        Block broken = new Block("README.md", 42, "java", """
                import io.github.tornadoattention.*;
                AttentionDevice gpu = Attention.device("cpu-reference");
                try (DeviceTensor q = gpu.allocate(DType.FP16, 8),
                     DeviceTensor o = gpu.allocate(DType.FP16, 8)) {
                    q.copyTo(HalfTensor.allocate(8));
                }
                """);
        String errors = compile(List.of(toSource(broken, 0).file()), out);
        assertFalse(errors.isEmpty(), "a try-with-resources separated by ',' must not compile");
        assertTrue(Pattern.compile("README\\.md:4[45]: ").matcher(errors).find(), errors);

        Block fixed = new Block("README.md", 42, "java", broken.code().replace("8),\n", "8);\n"));
        assertEquals("", compile(List.of(toSource(fixed, 0).file()), out));
    }

    @Test
    void blocksAreFoundWithTheirLanguageAndLine(@TempDir Path dir) throws IOException {
        Path page = dir.resolve("page.md");
        Files.writeString(page, """
                # t
                ```bash
                bin/build verify
                ```
                ```java
                int x = 1;
                ```
                ```java excerpt
                graph.task(x);
                ```
                """);
        List<Block> blocks = javaBlocks(page);
        assertEquals(2, blocks.size());
        assertEquals(6, blocks.get(0).line());
        assertEquals("int x = 1;\n", blocks.get(0).code());
        assertTrue(blocks.get(1).excerpt());
    }

    static List<Block> javaBlocks(Path page) throws IOException {
        List<String> lines = Files.readAllLines(page, StandardCharsets.UTF_8);
        List<Block> blocks = new ArrayList<>();
        String name = ROOT.toAbsolutePath().normalize().relativize(page.toAbsolutePath().normalize()).toString();
        if (name.startsWith("..")) {
            name = page.getFileName().toString();
        }
        for (int i = 0; i < lines.size(); i++) {
            Matcher m = FENCE.matcher(lines.get(i).strip());
            if (!m.matches()) {
                continue;
            }
            String language = m.group(1);
            int start = i + 1;
            StringBuilder code = new StringBuilder();
            i++;
            while (i < lines.size() && !lines.get(i).strip().equals("```")) {
                code.append(lines.get(i)).append('\n');
                i++;
            }
            if (language.equals("java")) {
                blocks.add(new Block(name, start + 1, m.group(2).strip(), code.toString()));
            }
        }
        return blocks;
    }

    /** A block as a source file; its lines keep their numbers, so a diagnostic names the line in the page. */
    record Source(SimpleJavaFileObject file, String mainClass) {
    }

    static Source toSource(Block block, int index) {
        String code = block.code();
        Matcher type = TYPE_DECLARATION.matcher(code);
        if (type.find()) {
            String name = type.group(1) != null ? type.group(4) : "Example" + index;
            String main = MAIN.matcher(code).find() && type.group(1) != null ? name : null;
            return new Source(new BlockSource(name, block, code, 0), main);
        }
        // Statements: imports stay where they are (so line numbers hold), the rest goes into a method.
        String[] lines = code.split("\n", -1);
        StringBuilder imports = new StringBuilder();
        StringBuilder body = new StringBuilder();
        for (String line : lines) {
            if (line.strip().startsWith("import ")) {
                imports.append(line).append(' ');
                body.append('\n');
            } else {
                body.append(line).append('\n');
            }
        }
        String name = "Example" + index;
        // The imports and the class header share the first line, so the block's line k is the unit's line k + 1.
        String unit = imports + "class " + name + " { void run() throws Exception {\n" + body + "}}\n";
        return new Source(new BlockSource(name, block, unit, 1), null);
    }

    /** In-memory source named after its class; {@code shift} lines were added before the block's first line. */
    static final class BlockSource extends SimpleJavaFileObject {
        final Block block;
        final String code;
        final int shift;

        BlockSource(String className, Block block, String code, int shift) {
            super(URI.create("string:///" + className + Kind.SOURCE.extension), Kind.SOURCE);
            this.block = block;
            this.code = code;
            this.shift = shift;
        }

        @Override
        public CharSequence getCharContent(boolean ignoreEncodingErrors) {
            return code;
        }
    }

    /** Compiles against the test class path; returns the errors, each with its file and line in the page. */
    static String compile(List<SimpleJavaFileObject> sources, Path out) throws IOException {
        JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
        assertNotNull(compiler, "a JDK (javax.tools.JavaCompiler) is needed to compile the examples");
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        try (StandardJavaFileManager files = compiler.getStandardFileManager(diagnostics, Locale.ROOT, StandardCharsets.UTF_8)) {
            List<String> options = List.of("-classpath", System.getProperty("java.class.path"), "-d", out.toString(),
                    "-proc:none", "-Xlint:none", "-nowarn");
            boolean ok = compiler.getTask(null, files, diagnostics, options, null, sources).call();
            StringBuilder errors = new StringBuilder();
            for (Diagnostic<? extends JavaFileObject> d : diagnostics.getDiagnostics()) {
                if (d.getKind() != Diagnostic.Kind.ERROR) {
                    continue;
                }
                String where = "?";
                if (d.getSource() instanceof BlockSource s) {
                    long line = d.getLineNumber() - s.shift;
                    where = s.block.file() + ":" + (s.block.line() + Math.max(0, line - 1));
                }
                errors.append(where).append(": ").append(d.getMessage(Locale.ROOT)).append('\n');
            }
            if (!ok && errors.isEmpty()) {
                errors.append("javac failed without an error diagnostic\n");
            }
            return errors.toString();
        }
    }
}
