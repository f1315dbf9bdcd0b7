package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class BackendsTest {

    @Test
    void listsEveryIdOfTheDesign() {
        List<String> ids = Backends.list().stream().map(Backends.Status::id).toList();
        assertEquals(List.of("ptx-cuda", "ptx-tornado", "tornado-mma", "tornado-simt", "cpu-reference", "auto"), ids);
        for (Backends.Status status : Backends.list()) {
            assertFalse(status.availability().detail().isBlank(), status.id() + " says nothing");
        }
    }

    @Test
    void cpuReferenceIsAlwaysAvailable() {
        assertTrue(Backends.get(Backends.CPU_REFERENCE).availability().available());
        assertTrue(Backends.get(Backends.AUTO).availability().available());
    }

    @Test
    void unknownIdsNameTheAllowedOnes() {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> Backends.get("cuda"));
        assertEquals("backend", e.argument());
        assertTrue(e.allowed().contains("cpu-reference") && e.allowed().contains("auto"), e.allowed());
    }

    @Test
    void unavailableBackendsSayWhyAndRefuseToPlan() {
        AttentionShape shape = AttentionShape.builder().batch(1).heads(1).queryLength(8).headDim(64).build();
        for (String id : Backends.IDS) {
            AttentionBackend backend = Backends.get(id);
            Availability availability = backend.availability();
            if (!availability.available()) {
                BackendUnavailableException e = assertThrows(BackendUnavailableException.class, () -> backend.plan(shape));
                assertTrue(e.getMessage().contains(id) && e.getMessage().contains(availability.detail()));
                assertThrows(BackendUnavailableException.class, () -> Backends.require(id));
            }
        }
    }

    @Test
    void autoPlansOnTheFirstAvailableBackendInPreferenceOrder() {
        AttentionShape shape = AttentionShape.builder().batch(1).heads(2).queryLength(16).headDim(64).build();
        String expected = Backends.IDS.stream().filter(id -> !id.equals(Backends.AUTO))
                .filter(id -> Backends.get(id).availability().available())
                .filter(id -> {
                    try {
                        Backends.get(id).checkSupported(shape);
                        return true;
                    } catch (InvalidArgumentException e) {
                        return false;
                    }
                }).findFirst().orElseThrow();
        try (AttentionPlan plan = Attention.plan(shape)) {
            assertEquals(expected, plan.backendId());
        }
    }
}
