package io.github.tornadoattention;

import com.sun.management.HotSpotDiagnosticMXBean;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.util.Locale;
import java.util.function.Supplier;

/**
 * The JVM's direct memory, where TornadoVM keeps its arrays: a TornadoVM array is an {@code Arena.ofAuto()} segment,
 * and on JDK 25 those (unlike {@code ofShared}/{@code ofConfined} ones) are reserved against
 * {@code -XX:MaxDirectMemorySize} (0 or unset: the maximum heap, {@link Runtime#maxMemory()}) and counted in the
 * "direct" buffer pool; over the limit the allocation throws {@code OutOfMemoryError: Cannot reserve ... bytes of
 * direct buffer memory}. The TornadoVM devices keep a host copy of every KV cache there, so a model's caches need
 * their size in direct memory as well as on the GPU.
 *
 * <p>{@link #allocate} is how code makes something large there: it checks the room first and turns an
 * {@code OutOfMemoryError} of the allocation itself into the same {@link InvalidArgumentException}, naming what was
 * asked for, the bytes it needs, the bytes the JVM allows and how to raise the limit.
 */
public final class DirectMemory {
    /** How long a refusal waits for the garbage collector to free unreachable segments (the JVM waits about 0.5 s). */
    private static final long COLLECT_WAIT_MILLIS = 1000;

    private DirectMemory() {
    }

    /** The most direct memory the JVM reserves: {@code MaxDirectMemorySize}, or the maximum heap where that is 0. */
    public static long limit() {
        long configured = 0;
        try {
            configured = Long.parseLong(ManagementFactory.getPlatformMXBean(HotSpotDiagnosticMXBean.class)
                    .getVMOption("MaxDirectMemorySize").getValue());
        } catch (RuntimeException notHotSpot) {
            // Another VM: the default below, as HotSpot's.
        }
        return configured > 0 ? configured : Runtime.getRuntime().maxMemory();
    }

    /** Direct memory reserved now (unreachable segments count until the garbage collector frees them). */
    public static long used() {
        for (BufferPoolMXBean pool : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (pool.getName().equals("direct")) {
                return pool.getMemoryUsed();
            }
        }
        return 0;
    }

    /** What the JVM can still reserve: {@link #limit()} less {@link #used()}. */
    public static long available() {
        return Math.max(0, limit() - used());
    }

    /**
     * Throws unless {@code bytes} more fit under the limit. When they do not, the garbage collector gets a chance to
     * free unreachable segments first (closed caches, dropped arrays), as the JVM's own reservation does.
     *
     * @param argument the argument the caller passed (e.g. {@code spec}), {@code value} its value as the API names it,
     *                 {@code what} what it is (e.g. "a KV cache on ptx-tornado")
     * @throws InvalidArgumentException naming them, the bytes needed, the bytes allowed and how to raise the limit
     */
    public static void requireRoom(String argument, Object value, String what, long bytes) {
        if (bytes <= 0 || bytes <= available()) {
            return;
        }
        System.gc();
        long deadline = System.nanoTime() + COLLECT_WAIT_MILLIS * 1_000_000;
        while (bytes > available() && System.nanoTime() < deadline) {
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        if (bytes > available()) {
            throw refusal(argument, value, what, bytes, null);
        }
    }

    /**
     * {@link #requireRoom}, then {@code allocation}. An {@code OutOfMemoryError} from it (another thread took the
     * room, or it needed more than {@code bytes}) becomes the same exception; the allocation must free what it had
     * allocated before it rethrows (as a constructor that allocates several arrays does).
     */
    public static <T> T allocate(String argument, Object value, String what, long bytes, Supplier<T> allocation) {
        requireRoom(argument, value, what, bytes);
        try {
            return allocation.get();
        } catch (OutOfMemoryError e) {
            InvalidArgumentException refused = refusal(argument, value, what, bytes, e.getMessage());
            refused.initCause(e);
            throw refused;
        }
    }

    /** The refusal: {@code failure} is the allocation's own error message (null when the estimate refused it). */
    static InvalidArgumentException refusal(String argument, Object value, String what, long bytes, String failure) {
        long limit = limit();
        long used = used();
        String room = bytes(Math.max(0, limit - used)) + " it can still reserve (limit " + bytes(limit) + ", "
                + bytes(used) + " in use)";
        String allowed = (failure == null
                ? what + " needs " + bytes(bytes) + " of the JVM's direct memory, more than the " + room
                : what + " (about " + bytes(bytes) + ") did not fit in the JVM's direct memory (" + failure + "); the JVM has "
                        + room)
                + "; raise the limit with -XX:MaxDirectMemorySize=" + suggestedLimit(used + bytes)
                + " or more (bin/tornado-attention sets it from the machine's memory), if the machine has the memory";
        return new InvalidArgumentException(argument, value, allowed);
    }

    /** A {@code -XX:MaxDirectMemorySize} value for {@code bytes}: whole GiB, rounded up, one more for what else runs. */
    public static String suggestedLimit(long bytes) {
        return ((bytes + (1L << 30) - 1) >> 30) + 1 + "g";
    }

    /** {@code bytes} for a message: "1.07 GiB (1149239424 bytes)", "64.0 MiB (67108916 bytes)", "52 bytes". */
    public static String bytes(long bytes) {
        if (bytes < (1L << 20)) {
            return bytes + " bytes";
        }
        boolean gib = bytes >= (1L << 30);
        return String.format(Locale.ROOT, "%.3g %s (%d bytes)", bytes / (double) (gib ? 1L << 30 : 1L << 20),
                gib ? "GiB" : "MiB", bytes);
    }
}
