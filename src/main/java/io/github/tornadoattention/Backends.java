package io.github.tornadoattention;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Finds backends at run time with {@link ServiceLoader}. Every id of the design is always listed:
 * one whose provider is not on the class path (tornado-kernels without TornadoVM) is reported
 * unavailable with the reason, never a crash.
 */
public final class Backends {
    public static final String CPU_REFERENCE = "cpu-reference";
    public static final String TORNADO_SIMT = "tornado-simt";
    public static final String TORNADO_MMA = "tornado-mma";
    public static final String PTX_TORNADO = "ptx-tornado";
    public static final String PTX_CUDA = "ptx-cuda";
    public static final String AUTO = "auto";

    /** Every id users may ask for; {@code auto} tries the others in this order, fastest first. */
    public static final List<String> IDS = List.of(PTX_CUDA, PTX_TORNADO, TORNADO_MMA, TORNADO_SIMT, CPU_REFERENCE, AUTO);

    private static final Logger LOG = LoggerFactory.getLogger(Backends.class);
    private static final Map<String, String> WHERE_TO_FIND = Map.of(
            TORNADO_SIMT, "tornado-kernels",
            TORNADO_MMA, "tornado-kernels",
            PTX_TORNADO, "tornado-kernels");

    private Backends() {
    }

    /** A backend id with its availability, for listings. */
    public record Status(String id, String description, Availability availability) {
    }

    private static final class Loaded {
        static final Map<String, AttentionBackend> BY_ID = load();
    }

    private static Map<String, AttentionBackend> load() {
        Map<String, AttentionBackend> byId = new LinkedHashMap<>();
        Iterator<AttentionBackend> it = ServiceLoader.load(AttentionBackend.class).iterator();
        while (true) {
            try {
                if (!it.hasNext()) {
                    break;
                }
                AttentionBackend backend = it.next();
                byId.putIfAbsent(backend.id(), backend);
            } catch (ServiceConfigurationError | LinkageError e) {
                LOG.warn("skipping a backend provider that failed to load: {}", e.toString());
            }
        }
        byId.put(AUTO, new AutoBackend(byId));
        return byId;
    }

    /** The backend with this id, available or not (check {@link AttentionBackend#availability()}). */
    public static AttentionBackend get(String id) {
        InvalidArgumentException.requireNonNull("backend", id);
        if (!IDS.contains(id)) {
            throw new InvalidArgumentException("backend", id, "must be one of " + String.join(", ", IDS));
        }
        AttentionBackend backend = Loaded.BY_ID.get(id);
        return backend != null ? backend : new Missing(id);
    }

    /** The backend with this id, or an exception saying why it cannot run here. */
    public static AttentionBackend require(String id) {
        AttentionBackend backend = get(id);
        Availability availability = backend.availability();
        if (!availability.available()) {
            throw new BackendUnavailableException(id, availability.detail());
        }
        return backend;
    }

    /** Every id of the design, in {@link #IDS} order, with its availability. */
    public static List<Status> list() {
        List<Status> statuses = new ArrayList<>();
        for (String id : IDS) {
            AttentionBackend backend = get(id);
            statuses.add(new Status(id, backend.description(), backend.availability()));
        }
        return statuses;
    }

    /** A placeholder for an id whose provider is not on the class path. */
    private record Missing(String id) implements AttentionBackend {
        @Override
        public String description() {
            return "(not installed)";
        }

        @Override
        public Availability availability() {
            String module = WHERE_TO_FIND.getOrDefault(id, "tornado-attention");
            return Availability.unavailable("no provider on the class path: needs the " + module
                    + " jar" + (module.equals("tornado-kernels")
                    ? " and TornadoVM (set TORNADOVM_HOME, build, and run through bin/tornado-attention)" : ""));
        }

        @Override
        public void checkSupported(AttentionShape shape) {
            throw new BackendUnavailableException(id, availability().detail());
        }

        @Override
        public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
            throw new BackendUnavailableException(id, availability().detail());
        }
    }
}
