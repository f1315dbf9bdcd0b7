package io.github.tornadoattention.examples.llama;

import uk.ac.manchester.tornado.api.types.arrays.FloatArray;

/** Greedy decoding on the host: the best token, the runner-up and the gap between them, and a token hash. */
final class Greedy {
    private Greedy() {
    }

    /** The argmax (lowest index on ties), the second best and logit[best] - logit[second]; NaN logits never win. */
    record Pick(int token, int runnerUp, float margin) {
    }

    static Pick pick(FloatArray logits) {
        int best = -1;
        int second = -1;
        for (int i = 0; i < logits.getSize(); i++) {
            float v = logits.get(i);
            if (Float.isNaN(v)) {
                continue;
            }
            if (best < 0 || v > logits.get(best)) {
                second = best;
                best = i;
            } else if (second < 0 || v > logits.get(second)) {
                second = i;
            }
        }
        if (best < 0) {
            throw new IllegalStateException("every logit is NaN");
        }
        float margin = second < 0 ? Float.POSITIVE_INFINITY : logits.get(best) - logits.get(second);
        return new Pick(best, second, margin);
    }

    /** FNV-1a (64 bit) over the tokens, as 16 hex digits: equal sequences, equal hashes. */
    static String hash(int[] tokens) {
        long h = 0xcbf29ce484222325L;
        for (int t : tokens) {
            for (int b = 0; b < 4; b++) {
                h ^= (t >>> (8 * b)) & 0xFF;
                h *= 0x100000001b3L;
            }
        }
        return String.format("%016x", h);
    }
}
