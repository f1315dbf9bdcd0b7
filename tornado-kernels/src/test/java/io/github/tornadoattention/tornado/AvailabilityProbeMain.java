package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.Availability;
import java.util.ServiceLoader;

/**
 * Run by {@link BackendAvailabilityTest} in a JVM started without TornadoVM's argfile: loads every backend
 * provider through ServiceLoader and prints {@code id|available|detail} for the TornadoVM ones.
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
    }
}
