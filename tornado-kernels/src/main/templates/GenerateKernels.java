import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Writes the Java kernel classes from their templates and the variant table ({@link KernelVariants}): every
 * {@code X.java.template} under the template folder becomes {@code X.java} at the same place under the output folder,
 * with its {@code //#each} block once per row of X's family. Maven runs it at generate-sources (tornado-kernels/pom.xml):
 * <pre>java GenerateKernels.java TEMPLATE_DIR OUTPUT_DIR</pre>
 *
 * <p>Why generated: TornadoVM sizes local and private arrays only from compile-time constants and reaches a local array
 * only in the method that allocates it, and tornado-mma's accumulator fragments are separate variables (one pair per 16
 * columns of D), so a kernel body cannot take its head dim as a parameter. The template holds the body once; each row
 * supplies its constants, and the unrolled statements repeat as many times as the row's sizes need.
 *
 * <p>The template language: Java with directive lines (a line that starts, after blanks, with {@code //#}; removed from
 * the output) and {@code ${...}} expressions.
 * <ul>
 *   <li>{@code //#each variant} ... {@code //#end}: the lines once per row of the family, with the row's names bound.</li>
 *   <li>{@code //#for i < N} ... {@code //#end} (or {@code //#for A <= i < N}): the lines for i = 0 (or A) .. N - 1.</li>
 *   <li>{@code //#if NAME}, {@code //#if !NAME}, {@code //#else}, {@code //#end}: by a row's trait (a boolean name).</li>
 *   <li>{@code ${EXPR}}: an integer expression over the bound names ({@code + - * / %}, parentheses, Java's int
 *       arithmetic), or a name bound to text; {@code ${+ EXPR}} is " + " and the value, or nothing where it is 0
 *       ({@code kvJ${+ 16 * i}}: {@code kvJ}, {@code kvJ + 16}, ...).</li>
 * </ul>
 * A file is rewritten only when its text changes, so that the compiler sees unchanged kernels as unchanged.
 */
public final class GenerateKernels {
    private static final String SUFFIX = ".template";

    private GenerateKernels() {
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: java GenerateKernels.java TEMPLATE_DIR OUTPUT_DIR");
            System.exit(2);
        }
        Path templates = Path.of(args[0]);
        Path output = Path.of(args[1]);
        List<Path> files;
        try (Stream<Path> walk = Files.walk(templates)) {
            files = walk.filter(p -> p.toString().endsWith(".java" + SUFFIX)).sorted().toList();
        }
        if (files.isEmpty()) {
            throw new IllegalStateException("no *.java" + SUFFIX + " under " + templates);
        }
        for (Path file : files) {
            String relative = templates.relativize(file).toString();
            String javaFile = relative.substring(0, relative.length() - SUFFIX.length());
            String className = file.getFileName().toString().replace(".java" + SUFFIX, "");
            List<Map<String, Object>> rows = KernelVariants.rowsOf(className);
            String header = "// Generated from " + relative + " and KernelVariants.java (tornado-kernels/src/main/templates)"
                    + " by GenerateKernels: edit those, not this file.\n";
            String text = header + render(relative, Files.readAllLines(file), rows);
            Path target = output.resolve(javaFile);
            if (!Files.exists(target) || !Files.readString(target).equals(text)) {
                Files.createDirectories(target.getParent());
                Files.writeString(target, text);
            }
        }
    }

    /** The template's text with its directives carried out, one {@code //#each} instance per row. */
    static String render(String source, List<String> lines, List<Map<String, Object>> rows) {
        List<Node> nodes = parse(source, lines);
        StringBuilder out = new StringBuilder();
        new Renderer(source, rows).render(nodes, new HashMap<>(), out);
        return out.toString();
    }

    // ---- parsing: the lines into a tree of directives ----

    sealed interface Node permits Text, Each, For, If {
    }

    record Text(int line, String text) implements Node {
    }

    record Each(int line, List<Node> body) implements Node {
    }

    record For(int line, String variable, String from, String to, List<Node> body) implements Node {
    }

    record If(int line, String name, boolean negated, List<Node> then, List<Node> otherwise) implements Node {
    }

    private static final Pattern FOR = Pattern.compile("for\\s+(?:(.+?)\\s*<=\\s*)?([A-Za-z_]\\w*)\\s*<\\s*(.+)");
    private static final Pattern IF = Pattern.compile("if\\s+(!?)\\s*([A-Za-z_]\\w*)");

    /** A directive block being read: its kind, where it started, and the lists its lines go to. */
    private static final class Open {
        final String kind;
        final int line;
        final Matcher match;
        final List<Node> body = new ArrayList<>();
        List<Node> otherwise;

        Open(String kind, int line, Matcher match) {
            this.kind = kind;
            this.line = line;
            this.match = match;
        }

        List<Node> current() {
            return otherwise != null ? otherwise : body;
        }
    }

    static List<Node> parse(String source, List<String> lines) {
        List<Node> top = new ArrayList<>();
        Deque<Open> open = new ArrayDeque<>();
        for (int i = 0; i < lines.size(); i++) {
            int number = i + 1;
            String line = lines.get(i);
            String stripped = line.strip();
            List<Node> into = open.isEmpty() ? top : open.peek().current();
            if (!stripped.startsWith("//#")) {
                into.add(new Text(number, line));
                continue;
            }
            String directive = stripped.substring(3).strip();
            Matcher m;
            if (directive.equals("each variant")) {
                open.push(new Open("each", number, null));
            } else if ((m = FOR.matcher(directive)).matches()) {
                open.push(new Open("for", number, m));
            } else if ((m = IF.matcher(directive)).matches()) {
                open.push(new Open("if", number, m));
            } else if (directive.equals("else")) {
                if (open.isEmpty() || !open.peek().kind.equals("if") || open.peek().otherwise != null) {
                    throw error(source, number, "//#else without its //#if");
                }
                open.peek().otherwise = new ArrayList<>();
            } else if (directive.equals("end")) {
                if (open.isEmpty()) {
                    throw error(source, number, "//#end without a block to end");
                }
                Open block = open.pop();
                Node node = switch (block.kind) {
                    case "each" -> new Each(block.line, block.body);
                    case "for" -> new For(block.line, block.match.group(2), block.match.group(1), block.match.group(3),
                            block.body);
                    default -> new If(block.line, block.match.group(2), !block.match.group(1).isEmpty(), block.body,
                            block.otherwise == null ? List.of() : block.otherwise);
                };
                (open.isEmpty() ? top : open.peek().current()).add(node);
            } else {
                throw error(source, number, "unknown directive //#" + directive);
            }
        }
        if (!open.isEmpty()) {
            throw error(source, open.peek().line, "//#" + open.peek().kind + " without //#end");
        }
        return top;
    }

    // ---- rendering ----

    private static final Pattern EXPRESSION = Pattern.compile("\\$\\{([^}]*)}");

    private record Renderer(String source, List<Map<String, Object>> rows) {
        void render(List<Node> nodes, Map<String, Object> names, StringBuilder out) {
            for (Node node : nodes) {
                switch (node) {
                    case Text text -> out.append(substitute(text.line(), text.text(), names)).append('\n');
                    case Each each -> {
                        if (!names.isEmpty()) {
                            throw error(source, each.line(), "//#each inside another block");
                        }
                        for (Map<String, Object> row : rows) {
                            render(each.body(), new HashMap<>(row), out);
                        }
                    }
                    case For loop -> {
                        int from = loop.from() == null ? 0 : new Expression(source, loop.line(), loop.from(), names).integer();
                        int to = new Expression(source, loop.line(), loop.to(), names).integer();
                        for (int i = from; i < to; i++) {
                            Map<String, Object> inner = new HashMap<>(names);
                            inner.put(loop.variable(), i);
                            render(loop.body(), inner, out);
                        }
                    }
                    case If test -> {
                        if (!(names.get(test.name()) instanceof Boolean value)) {
                            throw error(source, test.line(), "//#if " + test.name() + ": not a trait of this row");
                        }
                        render(value != test.negated() ? test.then() : test.otherwise(), names, out);
                    }
                }
            }
        }

        String substitute(int line, String text, Map<String, Object> names) {
            Matcher m = EXPRESSION.matcher(text);
            StringBuilder out = new StringBuilder();
            while (m.find()) {
                String expression = m.group(1).strip();
                Object named = names.get(expression);
                String value;
                if (named instanceof String s) {
                    value = s;
                } else if (expression.startsWith("+")) {
                    int term = new Expression(source, line, expression.substring(1), names).integer();
                    value = term == 0 ? "" : " + " + term;
                } else {
                    value = String.valueOf(new Expression(source, line, expression, names).integer());
                }
                m.appendReplacement(out, Matcher.quoteReplacement(value));
            }
            return m.appendTail(out).toString();
        }
    }

    /** An integer expression: {@code + - * / %}, unary minus, parentheses, literals and names bound to integers. */
    private static final class Expression {
        private final String source;
        private final int line;
        private final String text;
        private final Map<String, Object> names;
        private int at;

        Expression(String source, int line, String text, Map<String, Object> names) {
            this.source = source;
            this.line = line;
            this.text = text;
            this.names = names;
        }

        int integer() {
            int value = sum();
            skipBlanks();
            if (at != text.length()) {
                throw fail("unexpected '" + text.substring(at) + "'");
            }
            return value;
        }

        private int sum() {
            int value = product();
            while (true) {
                if (accept('+')) {
                    value += product();
                } else if (accept('-')) {
                    value -= product();
                } else {
                    return value;
                }
            }
        }

        private int product() {
            int value = unary();
            while (true) {
                if (accept('*')) {
                    value *= unary();
                } else if (accept('/')) {
                    value /= unary();
                } else if (accept('%')) {
                    value %= unary();
                } else {
                    return value;
                }
            }
        }

        private int unary() {
            if (accept('-')) {
                return -unary();
            }
            if (accept('(')) {
                int value = sum();
                if (!accept(')')) {
                    throw fail("missing ')'");
                }
                return value;
            }
            skipBlanks();
            int start = at;
            if (at < text.length() && Character.isDigit(text.charAt(at))) {
                while (at < text.length() && Character.isDigit(text.charAt(at))) {
                    at++;
                }
                return Integer.parseInt(text.substring(start, at));
            }
            while (at < text.length() && (Character.isLetterOrDigit(text.charAt(at)) || text.charAt(at) == '_')) {
                at++;
            }
            String name = text.substring(start, at);
            if (name.isEmpty()) {
                throw fail("expected a number or a name at '" + text.substring(start) + "'");
            }
            if (!(names.get(name) instanceof Integer value)) {
                throw fail(names.containsKey(name) ? name + " is not an integer" : "unknown name " + name);
            }
            return value;
        }

        private boolean accept(char c) {
            skipBlanks();
            if (at < text.length() && text.charAt(at) == c) {
                at++;
                return true;
            }
            return false;
        }

        private void skipBlanks() {
            while (at < text.length() && text.charAt(at) == ' ') {
                at++;
            }
        }

        private IllegalArgumentException fail(String why) {
            return error(source, line, "${" + text + "}: " + why);
        }
    }

    static IllegalArgumentException error(String source, int line, String message) {
        return new IllegalArgumentException(source + ":" + line + ": " + message);
    }
}
