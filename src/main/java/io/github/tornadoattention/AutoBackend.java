package io.github.tornadoattention;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** {@code auto}: the first backend in {@link Backends#IDS} order that is available and supports the shape. */
final class AutoBackend implements AttentionBackend {
    private final Map<String, AttentionBackend> byId;

    AutoBackend(Map<String, AttentionBackend> byId) {
        this.byId = byId;
    }

    @Override
    public String id() {
        return Backends.AUTO;
    }

    @Override
    public String description() {
        return "the fastest available backend that supports the shape";
    }

    @Override
    public Availability availability() {
        List<String> usable = new ArrayList<>();
        for (AttentionBackend candidate : candidates()) {
            if (candidate.availability().available()) {
                usable.add(candidate.id());
            }
        }
        return usable.isEmpty() ? Availability.unavailable("no backend is available")
                : Availability.available("tries " + String.join(", then ", usable));
    }

    /** The backend {@code auto} would use for {@code shape}. */
    public AttentionBackend choose(AttentionShape shape) {
        InvalidArgumentException.requireNonNull("shape", shape);
        InvalidArgumentException lastRejection = null;
        for (AttentionBackend candidate : candidates()) {
            if (!candidate.availability().available()) {
                continue;
            }
            try {
                candidate.checkSupported(shape);
                return candidate;
            } catch (InvalidArgumentException e) {
                lastRejection = e;
            }
        }
        if (lastRejection != null) {
            throw lastRejection;
        }
        throw new BackendUnavailableException(id(), "no backend is available");
    }

    @Override
    public void checkSupported(AttentionShape shape) {
        choose(shape);
    }

    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        InvalidArgumentException.requireNonNull("options", options);
        return choose(shape).plan(shape, options);
    }

    /** The first available backend with an inference API. */
    @Override
    public AttentionDevice device() {
        return device(PlanOptions.defaults());
    }

    /** The first available backend with an inference API, on the device {@code options} name. */
    @Override
    public AttentionDevice device(PlanOptions options) {
        InvalidArgumentException.requireNonNull("options", options);
        for (AttentionBackend candidate : candidates()) {
            if (!candidate.availability().available()) {
                continue;
            }
            try {
                return candidate.device(options);
            } catch (UnsupportedOperationException e) {
                // next one
            }
        }
        throw new BackendUnavailableException(id(), "no available backend has a device-resident inference API");
    }

    private List<AttentionBackend> candidates() {
        List<AttentionBackend> candidates = new ArrayList<>();
        for (String id : Backends.IDS) {
            AttentionBackend backend = byId.get(id);
            if (backend != null && !(backend instanceof AutoBackend)) {
                candidates.add(backend);
            }
        }
        return candidates;
    }
}
