package io.github.tornadoattention.ptx;

import java.util.ArrayList;
import java.util.List;

/**
 * One entry cut out of a PTX module, for both hosts: the CUDA-driver host JITs one entry per module (a shipped
 * module holds dozens of entries, and the driver compiles every entry of a module it loads), and TornadoVM's
 * prebuilt-task loader takes one renamed entry without the header (it prepends its own). Either keeps the
 * module-scope declarations and {@code .func} bodies the entry may use. Pure text work, tested without a GPU.
 */
public final class PtxEntries {
    private PtxEntries() {
    }

    /** {@code module} reduced to {@code entry}, with its {@code .version/.target/.address_size} header: a module of its own. */
    public static String module(String module, String entry) {
        return extract(module, entry, entry, true);
    }

    /** {@code module} reduced to {@code entry}, renamed {@code newName}, without the PTX header directives (TornadoVM). */
    public static String adapt(String module, String entry, String newName) {
        return extract(module, entry, newName, false);
    }

    private static String extract(String module, String entry, String newName, boolean keepHeader) {
        List<String> out = new ArrayList<>();
        String[] lines = module.split("\n", -1);
        boolean found = false;
        for (int i = 0; i < lines.length; i++) {
            String line = lines[i];
            String trimmed = line.strip();
            if (trimmed.startsWith(".version") || trimmed.startsWith(".target") || trimmed.startsWith(".address_size")) {
                if (keepHeader) {
                    out.add(line);
                }
                continue;
            }
            if (trimmed.startsWith("//")) {
                continue;
            }
            if (isEntryStart(trimmed)) {
                boolean wanted = entryName(trimmed).equals(entry);
                int end = blockEnd(lines, i);
                if (wanted) {
                    out.add(newName.equals(entry) ? line
                            : line.replaceFirst("\\.entry\\s+" + entry + "\\(", ".entry " + newName + "("));
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
