package io.github.tornadoattention.examples.llama;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Per-task kernel times out of TornadoVM 5.2's profiler log. With {@code withProfiler(ProfilerMode.SILENT)} every
 * execution of a task graph appends one JSON object to the graph's log ({@code TimeProfiler.createJson}: the graph's
 * timers, then one object per task, {@code "graph.task": {..., "TASK_KERNEL_TIME": "ns"}}), read back through
 * {@code TornadoProfilerResult.getProfileLog()}; the kernel time is the CUDA-event time of the launch (PTX backend,
 * {@code PTXDeviceContext}). The log only grows, so callers parse the part appended since they last looked.
 */
final class ProfileLog {
    private static final Pattern SECTION = Pattern.compile("^\\s*\"([^\"]+)\"\\s*:\\s*\\{\\s*$");
    private static final Pattern KERNEL_TIME = Pattern.compile("^\\s*\"TASK_KERNEL_TIME\"\\s*:\\s*\"(-?\\d+)\"");

    private ProfileLog() {
    }

    /**
     * Task id ({@code graph.task}) to kernel nanoseconds, summed where a task appears more than once; tasks
     * without a kernel time (not launched) are left out.
     */
    static Map<String, Long> kernelTimes(String log) {
        Map<String, Long> times = new LinkedHashMap<>();
        String section = null;
        for (String line : log.split("\n")) {
            Matcher open = SECTION.matcher(line);
            if (open.find()) {
                section = open.group(1);
                continue;
            }
            Matcher time = KERNEL_TIME.matcher(line);
            if (time.find() && section != null && section.contains(".")) {
                times.merge(section, Long.parseLong(time.group(1)), Long::sum);
            }
        }
        return times;
    }

    /** {@code layer_3.attn_decode} to {@code attn_decode}: the task's name in its graph. */
    static String taskName(String taskId) {
        int dot = taskId.indexOf('.');
        return dot < 0 ? taskId : taskId.substring(dot + 1);
    }
}
