package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.InvalidArgumentException;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Window, softcap and sinks on dense calls, decided at plan time with no device: tornado-simt and tornado-mma serve them
 * (their kernels are checked in SimtKernelsTest, MmaKernelsTest), ptx-tornado refuses each by its own name.
 */
class FeatureRefusalTest {
    private static final AttentionShape D64 = AttentionShape.builder().batch(1).heads(2).queryLength(64).headDim(64).build();

    @Test
    void everyTornadoBackendRefusesEachFeatureByName() {
        List<AttentionShape> shapes = List.of(D64.toBuilder().window(16, 0).build(), D64.toBuilder().softcap(30f).build(),
                D64.toBuilder().sinks(new float[] {0.5f, -0.5f}).build());
        for (AttentionBackend backend : List.of(new PtxTornadoBackend())) {
            backend.checkSupported(D64);
            for (AttentionShape shape : shapes) {
                String feature = shape.features().get(0);
                if (backend instanceof PtxTornadoBackend && twinServes(shape)) {
                    backend.checkSupported(shape);   // the shipped manifest lists the twin: served
                    continue;
                }
                InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> backend.checkSupported(shape),
                        backend.id() + " " + shape);
                assertEquals(feature, e.argument(), e.getMessage());
                assertEquals(shape.featureValue(feature), e.value());
                assertTrue(e.allowed().startsWith(backend.id() + " "), e.getMessage());
                assertTrue(e.allowed().contains("cpu-reference serves"), e.getMessage());
            }
        }
    }

    @Test
    void theJavaKernelsServeEveryFeature() {
        for (AttentionBackend backend : List.of(new TornadoSimtBackend(), new TornadoMmaBackend())) {
            for (AttentionShape shape : List.of(D64.toBuilder().window(16, 0).build(), D64.toBuilder().softcap(30f).build(),
                    D64.toBuilder().sinks(new float[] {0.5f, -0.5f}).build(), D64.toBuilder().headDim(128).causal(true)
                            .window(100, -1).softcap(50f).sinks(new float[] {1f, 2f}).build())) {
                backend.checkSupported(shape);
            }
        }
        for (AttentionBackend backend : List.of(new TornadoSimtBackend(), new TornadoMmaBackend())) {
            backend.checkSupported(D64.toBuilder().headDim(256).window(8, 8).softcap(30f).sinks(new float[] {1f, 2f}).build());
            backend.checkSupported(D64.toBuilder().headDim(192).window(8, 8).softcap(30f).sinks(new float[] {1f, 2f}).build());
        }
    }

    @Test
    void prebuiltTwinsAreSelectedWithTheShapesFeatures() {
        AttentionShape windowed = D64.toBuilder().window(16, 0).build();
        long header = io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.headerBytes().get(0);
        org.junit.jupiter.api.Assumptions.assumeFalse(twinServes(windowed), "the shipped manifest has windowed twins");
        assertThrows(InvalidArgumentException.class,
                () -> io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(windowed, header));
        io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.prefill(D64, header);
    }

    /** Whether the shipped manifest has the prefill twin with the shape's features (branch feat ships them). */
    private static boolean twinServes(AttentionShape shape) {
        return io.github.tornadoattention.ptx.KernelManifest.shipped().serves(io.github.tornadoattention.ptx.LaunchTable
                .variant(io.github.tornadoattention.ptx.KernelVariant.Kind.PREFILL, shape)
                .headerBytes(io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches.headerBytes().get(0))
                .features(io.github.tornadoattention.ptx.LaunchTable.features(shape)));
    }
}
