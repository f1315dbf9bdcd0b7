package io.github.tornadoattention.ptx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.ptx.DecodeSplitPolicy.Splits;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class DecodeSplitPolicyTest {
    private static final Path HARNESS_POLICY = Path.of("..", "ptx-overrides", "harness", "split_policy.py");

    @Test
    void aFixedGridAimsForFourBlocksPerSmWithoutSlicesShorterThanAGranule() {
        // 64 one-warp blocks on 132 SMs: round(528 / 64) = 8 splits.
        assertEquals(8, DecodeSplitPolicy.gridSplits(32768, 64, 132));
        // 300 keys: two granules at most, however idle the GPU.
        assertEquals(2, DecodeSplitPolicy.gridSplits(300, 1, 132));
        // One block per split on a big GPU and a long cache: capped.
        assertEquals(DecodeSplitPolicy.MAX_SPLITS, DecodeSplitPolicy.gridSplits(1 << 20, 1, 132));
        // A grid already larger than the GPU wants: one split; no keys: still one.
        assertEquals(1, DecodeSplitPolicy.gridSplits(32768, 4096, 132));
        assertEquals(1, DecodeSplitPolicy.gridSplits(0, 8, 132));
    }

    @Test
    void perCallSplitsCoverTheLongestSequenceInGranules() {
        Random random = new Random(7);
        for (int i = 0; i < 2000; i++) {
            int capacity = 1 + random.nextInt(1 << 17);
            int maxLength = random.nextInt(capacity + 1);
            long granules = DecodeSplitPolicy.granules(maxLength) * (1 + random.nextInt(16));
            Splits s = DecodeSplitPolicy.forLengths(granules, maxLength, 1 + random.nextInt(64), 1 + random.nextInt(160), capacity);
            assertEquals(0, s.keysPerSplit() % DecodeSplitPolicy.GRANULE, s.toString());
            assertTrue((long) s.keysPerSplit() * s.count() >= maxLength, s + " covers " + maxLength);
            assertTrue(s.count() <= DecodeSplitPolicy.maxSplits(capacity), s + " within " + DecodeSplitPolicy.maxSplits(capacity));
            Splits fixed = DecodeSplitPolicy.fixedForCapacity(capacity);
            assertTrue((long) fixed.keysPerSplit() * fixed.count() >= capacity && fixed.count() <= DecodeSplitPolicy.MAX_SPLITS,
                    fixed + " for " + capacity);
            int splits = 1 + random.nextInt(128);
            int derived = DecodeSplitPolicy.derivedKeysPerSplit(maxLength, splits, 32);
            assertTrue((long) derived * splits >= maxLength && derived % 32 == 0, derived + " x " + splits);
        }
    }

    @Test
    void denseDecodeUsesThePolicy() {
        AttentionShape decode = AttentionShape.builder().batch(8).heads(32).kvHeads(8).queryLength(1).kvLength(32768)
                .headDim(128).build();
        assertEquals(DecodeSplitPolicy.gridSplits(32768, 8 * 8, 132), LaunchTable.decodeSplits(decode, 132));
    }

    @Test
    void aWindowedDecodeSplitsTheWindowsSpanNotTheContext() {
        AttentionShape windowed = AttentionShape.builder().batch(1).heads(8).kvHeads(8).queryLength(1).kvLength(32768)
                .headDim(128).causal(true).window(4095, 0).build();
        assertEquals(4096, DecodeSplitPolicy.keySpan(windowed));
        // 4096 keys in granules of 256: 16 splits, not the 32K context's 128 (LaunchTable's use: FakeDriverHostTest).
        assertEquals(16, DecodeSplitPolicy.gridSplits(DecodeSplitPolicy.keySpan(windowed), 8, 132));
        // Four packed queries widen the span by three keys; no window: the whole context; a short context clamps it.
        assertEquals(4099, DecodeSplitPolicy.keySpan(32768, 4, true, 4095, 0));
        assertEquals(32768, DecodeSplitPolicy.keySpan(32768, 4, true, -1, -1));
        assertEquals(100, DecodeSplitPolicy.keySpan(100, 1, false, 4095, 7));
        assertEquals(0, DecodeSplitPolicy.keySpan(0, 1, true, 10, 0));
        // A cache sequence: its own length and new tokens under the spec's window.
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(2).heads(8).kvHeads(2).headDim(128).maxQueryLength(2)
                .maxLength(65536).window(1023, 0).build();
        assertEquals(1025, DecodeSplitPolicy.keySpan(spec, 50000, 2));
    }

    /**
     * The cache split passes start at the first visible key rounded down to 64 keys, so the host's splits must cover
     * from there to the end: a 4095-key window at 32769 keys starts at 28672 and spans 4097 keys (from the first
     * visible key, 16 splits of 256 would leave the new token's own key unread).
     */
    @Test
    void cacheSplitsCoverTheSpanFromItsTileAlignedStartToTheLastKey() {
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(8).heads(32).kvHeads(8).headDim(128).maxQueryLength(1)
                .maxLength(65536).window(4095, -1).build();
        assertEquals(28672, DecodeSplitPolicy.cacheSpanStart(32769, 1, 4095));
        assertEquals(4097, DecodeSplitPolicy.cacheKeySpan(spec, 32769, 1));
        assertEquals(0, DecodeSplitPolicy.cacheSpanStart(32769, 1, -1));
        Random random = new Random(7);
        for (int i = 0; i < 20_000; i++) {
            int length = 1 + random.nextInt(70_000);
            int news = 1 + random.nextInt(Math.min(length, 16));
            int left = random.nextInt(4) == 0 ? -1 : random.nextInt(8192);
            CacheAttentionSpec s = CacheAttentionSpec.builder().batch(1).heads(4).kvHeads(1).headDim(64).maxQueryLength(16)
                    .maxLength(70_000).window(left, -1).build();
            int start = DecodeSplitPolicy.cacheSpanStart(length, news, left);
            int first = (int) AttentionShape.firstVisibleKey((long) length - news, length, left);
            assertTrue(start % DecodeSplitPolicy.SPAN_ALIGN == 0 && start <= Math.max(0, first), "start " + start);
            int span = DecodeSplitPolicy.cacheKeySpan(s, length, news);
            Splits splits = DecodeSplitPolicy.forLengths(DecodeSplitPolicy.granules(span), span, 8, 132, 70_000);
            assertTrue(start + (long) splits.count() * splits.keysPerSplit() >= length,
                    () -> "length " + length + ", news " + news + ", left " + left + ": " + splits + " from " + start);
        }
    }

    /**
     * The GPU harness runs the same policy (ptx-overrides/harness/split_policy.py): the same splits for every
     * input of a grid of them. Skipped, saying so, where python3 is missing.
     */
    @Test
    void theHarnessGivesTheSameSplitsAsEveryJavaHost() throws Exception {
        assumeTrue(Files.isRegularFile(HARNESS_POLICY), "no " + HARNESS_POLICY.toAbsolutePath());
        List<String> calls = new ArrayList<>();
        List<String> expected = new ArrayList<>();
        Random random = new Random(11);
        for (int i = 0; i < 400; i++) {
            int capacity = 1 + random.nextInt(1 << 17);
            int sms = 1 + random.nextInt(160);
            long blocks = 1 + random.nextInt(512);
            calls.add("grid_splits " + capacity + " " + blocks + " " + sms);
            expected.add(String.valueOf(DecodeSplitPolicy.gridSplits(capacity, blocks, sms)));
            Splits fixed = DecodeSplitPolicy.fixedForCapacity(capacity);
            calls.add("fixed_for_capacity " + capacity);
            expected.add(fixed.keysPerSplit() + " " + fixed.count());
            // Lengths of 1..8 sequences, some without queries (their lengths must not count).
            int n = 1 + random.nextInt(8);
            StringBuilder lens = new StringBuilder();
            StringBuilder news = new StringBuilder();
            long granules = 0;
            int maxLength = 0;
            for (int b = 0; b < n; b++) {
                int length = random.nextInt(capacity + 1);
                int queries = random.nextInt(3);
                lens.append(length).append(',');
                news.append(queries).append(',');
                if (queries > 0) {
                    granules += DecodeSplitPolicy.granules(length);
                    maxLength = Math.max(maxLength, length);
                }
            }
            int perGranule = 1 + random.nextInt(64);
            Splits s = DecodeSplitPolicy.forLengths(granules, maxLength, perGranule, sms, capacity);
            calls.add("for_lengths " + lens + " " + news + " " + perGranule + " " + sms + " " + capacity);
            expected.add(s.keysPerSplit() + " " + s.count());
            int length = random.nextInt(capacity + 1);
            int queries = 1 + random.nextInt(16);
            boolean causal = random.nextBoolean();
            int left = random.nextInt(4) == 0 ? -1 : random.nextInt(capacity + 1);
            int right = random.nextInt(3) == 0 ? -1 : random.nextInt(64);
            calls.add("key_span " + length + " " + queries + " " + (causal ? 1 : 0) + " " + left + " " + right);
            expected.add(String.valueOf(DecodeSplitPolicy.keySpan(length, queries, causal, left, right)));
            int splits = 1 + random.nextInt(128);
            int news2 = 1 + random.nextInt(16);
            calls.add("cache_span_start " + length + " " + news2 + " " + left);
            expected.add(String.valueOf(DecodeSplitPolicy.cacheSpanStart(length, news2, left)));
            calls.add("derived_keys_per_split " + maxLength + " " + splits + " 64");
            expected.add(String.valueOf(DecodeSplitPolicy.derivedKeysPerSplit(maxLength, splits, 64)));
        }
        assertEquals(expected, python(calls));
    }

    private static List<String> python(List<String> calls) throws IOException, InterruptedException {
        Process p;
        try {
            p = new ProcessBuilder("python3", HARNESS_POLICY.toString()).redirectErrorStream(true).start();
        } catch (IOException noPython) {
            assumeTrue(false, "python3 is not installed: the harness's split policy is not compared (" + noPython.getMessage() + ")");
            throw noPython;
        }
        try (var in = p.getOutputStream()) {
            in.write((String.join("\n", calls) + "\n").getBytes(StandardCharsets.US_ASCII));
        }
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.US_ASCII);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "python3 did not finish");
        assertEquals(0, p.exitValue(), out);
        return out.lines().toList();
    }
}
