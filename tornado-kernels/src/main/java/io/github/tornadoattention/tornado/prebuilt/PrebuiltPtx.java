package io.github.tornadoattention.tornado.prebuilt;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Turns a shipped PTX module into what TornadoVM's prebuilt-task loader expects (PTX backend,
 * TornadoVM 5.2): TornadoVM prepends its own {@code .version/.target/.address_size} header, so
 * ours is removed; and it looks the kernel up by a mangled name, {@code <graph>_<task>_<entry>}
 * followed by one token per argument (see {@link #mangledName}), so the entry is renamed. Only the
 * one entry (plus the module-scope declarations it may use) is kept, which keeps TornadoVM's JIT
 * step short. Pure text work, tested without TornadoVM.
 */
public final class PrebuiltPtx {
    private static final String TORNADO_TYPES_PACKAGE = "uk_ac_manchester_tornado_api_types_";

    private PrebuiltPtx() {
    }

    /**
     * The name TornadoVM's PTX backend gives a prebuilt task's kernel (PTXCodeUtil.buildKernelName):
     * the task id {@code graph.task} with non-alphanumerics as '_', then '_' + entry point, then for
     * each TornadoVM array argument '_' + its class name with '.' as '_', the types package dropped,
     * all lower case.
     */
    public static String mangledName(String graph, String task, String entryPoint, List<Class<?>> argumentTypes) {
        StringBuilder sb = new StringBuilder();
        String id = graph + "." + task;
        for (int i = 0; i < id.length(); i++) {
            char c = id.charAt(i);
            if (i == 0 && Character.isDigit(c)) {
                sb.append('_').append(c);
            } else {
                sb.append(Character.isLetterOrDigit(c) ? c : '_');
            }
        }
        sb.append('_').append(entryPoint);
        for (Class<?> type : argumentTypes) {
            sb.append('_').append(type.getName().replace('.', '_'));
        }
        return sb.toString().replace(TORNADO_TYPES_PACKAGE, "").toLowerCase(Locale.ROOT);
    }

    /** {@code module} reduced to {@code entry}, renamed {@code newName}, without the PTX header directives. */
    public static String adapt(String module, String entry, String newName) {
        List<String> out = new ArrayList<>();
        String[] lines = module.split("\n", -1);
        boolean found = false;
        for (int i = 0; i < lines.length; i++) {
            String line = lines[i];
            String trimmed = line.strip();
            if (trimmed.startsWith(".version") || trimmed.startsWith(".target") || trimmed.startsWith(".address_size")
                    || trimmed.startsWith("//")) {
                continue;
            }
            if (isEntryStart(trimmed)) {
                boolean wanted = entryName(trimmed).equals(entry);
                int end = blockEnd(lines, i);
                if (wanted) {
                    out.add(line.replaceFirst("\\.entry\\s+" + entry + "\\(", ".entry " + newName + "("));
                    for (int j = i + 1; j <= end; j++) {
                        out.add(lines[j]);
                    }
                    found = true;
                }
                i = end;
            } else if (isFunctionStart(trimmed)) {
                int end = blockEnd(lines, i);
                for (int j = i; j <= end; j++) {
                    out.add(lines[j]);
                }
                i = end;
            } else if (line.startsWith(".")) {
                out.add(line); // module-scope declaration (.shared, .global, .const, .extern)
            }
        }
        if (!found) {
            throw new IllegalArgumentException("PTX module has no entry " + entry);
        }
        return String.join("\n", out) + "\n";
    }

    private static boolean isEntryStart(String trimmed) {
        return trimmed.matches("(\\.visible\\s+|\\.weak\\s+)?\\.entry\\s+\\w+\\(.*");
    }

    private static boolean isFunctionStart(String trimmed) {
        return trimmed.matches("(\\.visible\\s+|\\.weak\\s+|\\.extern\\s+)?\\.func\\b.*");
    }

    private static String entryName(String trimmed) {
        return trimmed.replaceFirst(".*\\.entry\\s+(\\w+)\\(.*", "$1");
    }

    /** The last line of the declaration starting at {@code start}: its body's closing '}' or a ';' ending a prototype. */
    private static int blockEnd(String[] lines, int start) {
        int depth = 0;
        boolean opened = false;
        for (int i = start; i < lines.length; i++) {
            for (char c : lines[i].toCharArray()) {
                if (c == '{') {
                    depth++;
                    opened = true;
                } else if (c == '}') {
                    depth--;
                }
            }
            if (opened && depth == 0) {
                return i;
            }
            if (!opened && lines[i].strip().endsWith(";") && i > start) {
                return i;
            }
        }
        throw new IllegalArgumentException("unterminated PTX declaration at line " + (start + 1));
    }
}
