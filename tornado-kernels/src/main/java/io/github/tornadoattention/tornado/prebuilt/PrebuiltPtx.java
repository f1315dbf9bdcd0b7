package io.github.tornadoattention.tornado.prebuilt;

import io.github.tornadoattention.ptx.PtxEntries;
import java.util.List;
import java.util.Locale;

/**
 * Turns a shipped PTX module into what TornadoVM's prebuilt-task loader expects (PTX backend,
 * TornadoVM 5.2): TornadoVM prepends its own {@code .version/.target/.address_size} header, so
 * ours is removed; and it looks the kernel up by a mangled name, {@code <graph>_<task>_<entry>}
 * followed by one token per argument (see {@link #mangledName}), so the entry is renamed. Only the
 * one entry (plus the module-scope declarations it may use) is kept, which keeps TornadoVM's JIT
 * step short: {@link PtxEntries#adapt}, the extraction the CUDA-driver host uses too. Pure text work,
 * tested without TornadoVM.
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
}
