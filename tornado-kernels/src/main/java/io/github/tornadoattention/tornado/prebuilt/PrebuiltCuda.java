package io.github.tornadoattention.tornado.prebuilt;

import io.github.tornadoattention.ptx.PtxEntries;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Turns a shipped TornadoVM-twin PTX entry into what TornadoVM 5.2's CUDA backend takes as a prebuilt task: CUDA C
 * source, which it compiles with NVRTC ({@code CUDATornadoDevice.compilePreBuiltTask} passes the file to
 * {@code createProgramWithSource}; there is no path for PTX) and looks up by the entry's plain name
 * ({@code cuModuleGetFunction}), launching it with four words before the task's arguments (its kernel ABI,
 * {@code CUDAArchitecture.abiRegisters}: kernel context, constant region, local region, atomics).
 *
 * <p>The source is one {@code extern "C" __global__} function of that signature whose body is the twin's PTX body as
 * one inline-asm block, so the kernel that runs is the shipped PTX, not a recompilation of ptx-overrides' C++: the
 * twin's parameter loads become moves from the asm operands (its parameter 0, TornadoVM's kernel context, is the
 * context word; parameters 1.. the task's arguments), its registers and labels get a prefix of their own (an asm
 * block's declarations would otherwise shadow the registers NVRTC passes the operands in), the module-scope
 * {@code .shared} variables it uses move into the block, and {@code .maxntid}/{@code .minnctapersm} become
 * {@code __launch_bounds__}. Pure text work, tested without TornadoVM (and ptxas-checked where a CUDA toolkit is).
 */
public final class PrebuiltCuda {
    /** The CUDA backend's parameters before a task's arguments (8 bytes each). */
    static final List<String> ABI = List.of("long *_kernel_context", "unsigned char *_constant_region",
            "unsigned char *_local_region", "int *_atomics");
    /** GCC-style inline asm takes at most 30 operands. */
    static final int MAX_OPERANDS = 30;
    private static final String PREFIX = "ta_";
    private static final Pattern REG_DECL = Pattern.compile("\\.reg\\s+\\.\\w+\\s+%([A-Za-z_]+)<\\d+>\\s*;");
    private static final Pattern PARAM_DECL = Pattern.compile("\\.param\\s+\\.(\\w+)\\s+(\\w+)");
    private static final Pattern PARAM_LOAD = Pattern.compile("ld\\.param\\.(u64|b64|s64)\\s+(%\\w+)\\s*,\\s*\\[(\\w+)]\\s*;");
    private static final Pattern MAXNTID = Pattern.compile("\\.(?:maxntid|reqntid)\\s+(\\d+)(?:\\s*,\\s*(\\d+))?(?:\\s*,\\s*(\\d+))?");
    private static final Pattern MINCTAS = Pattern.compile("\\.minnctapersm\\s+(\\d+)");
    private static final Pattern SHARED_NAME = Pattern.compile("\\s(\\w+)\\s*(\\[\\d*])?\\s*;\\s*$");

    private PrebuiltCuda() {
    }

    /** CUDA C for TornadoVM's CUDA backend running {@code entry} of the PTX {@code module} under the same name. */
    public static String source(String module, String entry) {
        String[] lines = PtxEntries.adapt(module, entry, entry).split("\n");
        List<String> moduleScope = new ArrayList<>();
        int start = -1;
        for (int i = 0; i < lines.length && start < 0; i++) {
            String t = lines[i].strip();
            if (t.matches("(\\.visible\\s+|\\.weak\\s+)?\\.entry\\s+\\w+\\(.*")) {
                start = i;
            } else if (!t.isEmpty()) {
                moduleScope.add(t);
            }
        }
        // The entry's header: parameters and performance directives, up to its body's opening brace.
        List<String> params = new ArrayList<>();
        StringBuilder directives = new StringBuilder();
        int open = start;
        for (; !lines[open].strip().equals("{"); open++) {
            Matcher p = PARAM_DECL.matcher(lines[open]);
            if (p.find()) {
                if (!p.group(1).equals("u64") && !p.group(1).equals("b64")) {
                    throw new IllegalArgumentException(entry + ": parameter " + p.group(2) + " is ." + p.group(1)
                            + "; TornadoVM passes 64-bit words");
                }
                params.add(p.group(2));
            }
            directives.append(lines[open]).append(' ');
        }
        if (params.isEmpty() || params.size() > MAX_OPERANDS) {
            throw new IllegalArgumentException(entry + ": " + params.size() + " parameters; a TornadoVM twin has the"
                    + " kernel context and at most " + (MAX_OPERANDS - 1) + " arrays");
        }
        List<String> body = new ArrayList<>(List.of(lines).subList(open + 1, lines.length));
        while (!body.getLast().strip().equals("}")) {
            body.removeLast();
        }
        body.removeLast();

        Set<String> prefixes = new LinkedHashSet<>();
        for (String line : body) {
            Matcher m = REG_DECL.matcher(line);
            if (m.find()) {
                prefixes.add(m.group(1));
            }
        }
        // Longest first, so that %rd12 is never read as %r followed by "d12".
        Pattern register = Pattern.compile("%(" + String.join("|", prefixes.stream()
                .sorted((a, b) -> b.length() - a.length()).toList()) + ")(?=[0-9<])");

        List<String> asm = new ArrayList<>();
        List<String> inner = new ArrayList<>();
        for (String line : body) {
            String t = line.strip();
            int comment = t.indexOf("//");
            if (comment >= 0) {
                t = t.substring(0, comment).strip();
            }
            if (t.isEmpty() || t.startsWith(".loc") || t.startsWith(".file")) {
                continue;
            }
            if (prefixes.isEmpty()) {
                throw new IllegalArgumentException(entry + ": no register declarations");
            }
            t = register.matcher(t).replaceAll("%" + PREFIX + "$1").replace("$L__", "$" + PREFIX + "L__");
            Matcher load = PARAM_LOAD.matcher(t);
            if (load.matches()) {
                int index = params.indexOf(load.group(3));
                if (index < 0) {
                    throw new IllegalArgumentException(entry + ": loads an unknown parameter: " + t);
                }
                inner.add("mov.b64 " + escapePercent(load.group(2)) + ", %" + index + ";");
                continue;
            }
            if (t.contains(".param")) {
                throw new IllegalArgumentException(entry + ": parameter use other than a whole 64-bit load: " + t);
            }
            inner.add(escapePercent(t));
        }
        // The module-scope shared variables the body names, declared inside it after its own declarations (ptxas then
        // lays shared memory out as it did for the module: the same size); any other module-scope declaration it names
        // cannot move into an asm block.
        List<String> hoisted = new ArrayList<>();
        String joined = String.join("\n", inner);
        for (String declaration : moduleScope) {
            Matcher name = SHARED_NAME.matcher(declaration);
            if (!name.find()) {
                throw new IllegalArgumentException(entry + ": module-scope declaration not understood: " + declaration);
            }
            if (!Pattern.compile("\\b" + Pattern.quote(name.group(1)) + "\\b").matcher(joined).find()) {
                continue;
            }
            if (declaration.startsWith(".extern .shared")) {
                throw new IllegalArgumentException(entry + ": uses dynamic shared memory (" + declaration
                        + "); TornadoVM launches with none");
            }
            if (!declaration.startsWith(".shared")) {
                throw new IllegalArgumentException(entry + ": uses a module-scope declaration an inline-asm body cannot"
                        + " carry: " + declaration);
            }
            hoisted.add(declaration);
        }
        int declarations = 0;
        while (declarations < inner.size() && inner.get(declarations).startsWith(".")) {
            declarations++;
        }
        asm.addAll(inner.subList(0, declarations));
        asm.addAll(hoisted);
        asm.addAll(inner.subList(declarations, inner.size()));

        StringBuilder src = new StringBuilder();
        src.append("// ").append(entry).append(": the shipped PTX twin as TornadoVM's CUDA backend launches a prebuilt task\n");
        src.append("extern \"C\" __global__ void ").append(launchBounds(directives.toString())).append(entry).append('(');
        List<String> signature = new ArrayList<>(ABI);
        for (int i = 1; i < params.size(); i++) {
            signature.add("unsigned char *a" + i);
        }
        src.append(String.join(", ", signature)).append(") {\n    asm volatile(\"{\\n\"\n");
        for (String line : asm) {
            src.append("        \"").append(line.replace("\\", "\\\\").replace("\"", "\\\"")).append("\\n\"\n");
        }
        List<String> operands = new ArrayList<>(List.of("\"l\"(_kernel_context)"));
        for (int i = 1; i < params.size(); i++) {
            operands.add("\"l\"(a" + i + ")");
        }
        src.append("        \"}\\n\" :: ").append(String.join(", ", operands)).append(" : \"memory\");\n}\n");
        return src.toString();
    }

    private static String escapePercent(String ptx) {
        return ptx.replace("%", "%%");
    }

    private static String launchBounds(String directives) {
        Matcher threads = MAXNTID.matcher(directives);
        if (!threads.find()) {
            return "";
        }
        long n = 1;
        for (int g = 1; g <= 3; g++) {
            if (threads.group(g) != null) {
                n *= Long.parseLong(threads.group(g));
            }
        }
        Matcher ctas = MINCTAS.matcher(directives);
        return "__launch_bounds__(" + n + (ctas.find() ? ", " + ctas.group(1) : "") + ") ";
    }
}
