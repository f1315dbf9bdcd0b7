package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.Availability;
import java.util.ServiceLoader;

/**
 * Run by {@link BackendAvailabilityTest} in a child JVM (without TornadoVM's argfile, or with it but without
 * {@code -Dtornado.recover.bailout}): loads every backend provider through ServiceLoader and prints
 * {@code id|available|detail} for the TornadoVM ones, then {@code bailout|<the property after the probes>}.
 */
public final class AvailabilityProbeMain {
    private AvailabilityProbeMain() {
    }

    public static void main(String[] args) {
        for (AttentionBackend backend : ServiceLoader.load(AttentionBackend.class)) {
            if (backend instanceof TornadoSimtBackend || backend instanceof TornadoMmaBackend) {
                Availability a = backend.availability();
                System.out.println(backend.id() + "|" + a.available() + "|" + a.detail());
            }
        }
        System.out.println("bailout|" + System.getProperty(TornadoBackendSupport.BAILOUT_PROPERTY));
    }
}
