package io.github.tornadoattention.ptx;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.TensorStrides;

/**
 * The {@code params} array every hand-tuned kernel reads (see ptx-overrides/README.md): 32 int32
 * describing the call, so both hosts (ptx-cuda and ptx-tornado) pass the same thing.
 */
public final class KernelParams {
    public static final int LENGTH = 32;
    private static final double LOG2_E = 1.4426950408889634;

    private KernelParams() {
    }

    /** Params for {@code shape}; {@code splits} is the decode split count (0 for prefill). */
    public static int[] of(AttentionShape shape, int splits) {
        int[] p = new int[LENGTH];
        p[0] = shape.batch();
        p[1] = shape.queryHeads();
        p[2] = shape.kvHeads();
        p[3] = shape.queryLength();
        p[4] = shape.kvLength();
        p[5] = shape.headDim();
        p[6] = shape.causal() ? 1 : 0;
        p[7] = Float.floatToRawIntBits((float) (shape.scale() * LOG2_E));
        p[8] = 1; // always write logsumexp: it is tiny, and hosts copy it back only on request
        TensorStrides q = shape.queryStrides();
        TensorStrides kv = shape.kvStrides();
        put(p, 9, q);
        put(p, 12, kv);
        put(p, 15, kv);
        put(p, 18, q); // O has Q's shape and layout
        p[21] = splits;
        p[22] = Float.floatToRawIntBits(shape.scale());
        return p;
    }

    private static void put(int[] p, int at, TensorStrides s) {
        // Validated shapes keep every tensor under 2^31 elements, so strides fit in int32.
        p[at] = Math.toIntExact(s.batch());
        p[at + 1] = Math.toIntExact(s.head());
        p[at + 2] = Math.toIntExact(s.row());
    }
}
