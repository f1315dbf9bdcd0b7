package io.github.tornadoattention.ptx;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * The launch table of the hand-tuned kernels: {@code ptx-overrides/ptx/manifest.tsv}, which
 * ptx-overrides/generate.sh writes from the kernels' tile configurations (their traits) and ptxas,
 * and which ships beside the PTX. One row per entry: its module, kind, the array header it expects,
 * which causal flag selects it for its head dim, and its tile (Br query rows per block, threads,
 * dynamic shared memory). Columns are found by name, so new columns do not break an old reader.
 */
public final class KernelManifest {
    public static final String PREFILL = "prefill";
    public static final String DECODE_SPLIT = "decode-split";
    public static final String DECODE_COMBINE = "decode-combine";
    private static final String RESOURCE_DIR = "/io/github/tornadoattention/ptx/";

    /**
     * One entry. {@code headerBytes}: 0 for the CUDA-driver ABI, else the bytes before each array's
     * data (a TornadoVM twin). {@code causal}: "0", "1" or "any", the causal flag that selects the
     * entry for its head dim, or "-" (no host selects it: a benchmark-only entry).
     * {@code rowsPerBlock}: query rows (Br) a block covers; decode: packed rows; combine: rows.
     */
    public record Kernel(String module, String entry, String kind, int headerBytes, String causal, int headDim,
                         int rowsPerBlock, int keysPerTile, int threads, int dynamicSharedBytes) {

        boolean selectedFor(int headDim, boolean causal) {
            return this.headDim == headDim && (this.causal.equals("any") || this.causal.equals(causal ? "1" : "0"));
        }
    }

    private static final class Shipped {
        static final KernelManifest INSTANCE = parse(resource("manifest.tsv"));
    }

    private final List<Kernel> kernels;

    private KernelManifest(List<Kernel> kernels) {
        this.kernels = List.copyOf(kernels);
    }

    /** The manifest in the jar. */
    public static KernelManifest shipped() {
        return Shipped.INSTANCE;
    }

    /** A manifest from its text: a header row of column names, then one tab-separated row per entry. */
    static KernelManifest parse(String text) {
        String[] lines = text.strip().split("\n");
        List<String> columns = Arrays.asList(lines[0].split("\t"));
        List<Kernel> kernels = new ArrayList<>();
        for (int i = 1; i < lines.length; i++) {
            String[] cells = lines[i].split("\t");
            if (cells.length != columns.size()) {
                throw new IllegalStateException("manifest row " + (i + 1) + " has " + cells.length + " cells, the header "
                        + columns.size() + ": " + lines[i]);
            }
            Row row = new Row(columns, cells);
            kernels.add(new Kernel(row.text("module"), row.text("entry"), row.text("kind"), row.number("header_bytes"),
                    row.text("causal"), row.number("head_dim"), row.number("br"), row.number("bc"), row.number("threads"),
                    row.number("smem_dynamic")));
        }
        return new KernelManifest(kernels);
    }

    private record Row(List<String> columns, String[] cells) {
        String text(String column) {
            int i = columns.indexOf(column);
            if (i < 0) {
                throw new IllegalStateException("manifest has no column " + column + ": " + columns);
            }
            return cells[i];
        }

        int number(String column) {
            return Integer.parseInt(text(column));
        }
    }

    public List<Kernel> kernels() {
        return kernels;
    }

    /**
     * The entry of {@code kind} that runs a call with this head dim and causal flag, for a host whose
     * arrays have {@code headerBytes} before their data (0: the CUDA driver).
     */
    public Kernel select(String kind, int headDim, boolean causal, long headerBytes) {
        List<Kernel> found = kernels.stream()
                .filter(k -> k.kind().equals(kind) && k.headerBytes() == headerBytes && k.selectedFor(headDim, causal))
                .toList();
        if (found.size() != 1) {
            throw new IllegalArgumentException(String.format(Locale.ROOT,
                    "the kernel manifest has %d %s entries for head dim %d, causal %b, %d header bytes%s", found.size(), kind,
                    headDim, causal, headerBytes, found.isEmpty() ? "" : ": " + found.stream().map(Kernel::entry).toList()));
        }
        return found.get(0);
    }

    /** The entry named {@code entry} (hosts that pick their entry by name, like the KV-cache host). */
    public Kernel entry(String entry) {
        return kernels.stream().filter(k -> k.entry().equals(entry)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("the kernel manifest has no entry " + entry));
    }

    /** The head dims whose calls of either causal flag have a CUDA-driver entry of {@code kind}, ascending. */
    public List<Integer> headDims(String kind) {
        return kernels.stream().filter(k -> k.kind().equals(kind) && k.headerBytes() == 0).map(Kernel::headDim)
                .distinct().sorted()
                .filter(d -> selects(kind, d, false) && selects(kind, d, true)).toList();
    }

    private boolean selects(String kind, int headDim, boolean causal) {
        return kernels.stream().anyMatch(k -> k.kind().equals(kind) && k.headerBytes() == 0 && k.selectedFor(headDim, causal));
    }

    /** The array header sizes of the selectable twins of {@code kind} (hosts whose arrays carry a header). */
    public List<Integer> headerBytes(String kind) {
        return kernels.stream().filter(k -> k.kind().equals(kind) && k.headerBytes() > 0 && !k.causal().equals("-"))
                .map(Kernel::headerBytes).distinct().sorted().toList();
    }

    /** The text of a shipped PTX module (a class-path resource built from ptx-overrides/ptx). */
    public static String ptx(String module) {
        return resource(module);
    }

    private static String resource(String name) {
        String path = RESOURCE_DIR + name;
        try (InputStream in = KernelManifest.class.getResourceAsStream(path)) {
            if (in == null) {
                throw new IllegalStateException("missing class-path resource " + path);
            }
            return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
