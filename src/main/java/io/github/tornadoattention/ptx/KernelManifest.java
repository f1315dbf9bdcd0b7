package io.github.tornadoattention.ptx;

import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.ptx.KernelVariant.CacheLayout;
import io.github.tornadoattention.ptx.KernelVariant.Feature;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;
import java.util.zip.GZIPInputStream;

/**
 * The launch table of the hand-tuned kernels: {@code ptx-overrides/ptx/manifest.tsv}, which
 * ptx-overrides/generate.sh writes from the kernel table, the kernels' tile configurations (their traits) and
 * ptxas, and which ships beside the PTX. One row per entry: its module, the variant it serves (kind, element
 * type, head dim, which causal flag selects it, cache layout, run-time features, array header, architecture
 * family) and its tile (Br query rows per block, threads, dynamic shared memory). Hosts find an entry through
 * {@link #select(KernelVariant)}, the one lookup; columns are found by name, so new columns do not break an old
 * reader.
 */
public final class KernelManifest {
    private static final String RESOURCE_DIR = "/io/github/tornadoattention/ptx/";
    private static final Source CLASS_PATH = new Source(null);

    /**
     * One entry. {@code headDim} 0: any head dim (append, merge). {@code causal}: "0", "1" or "any", the causal
     * flag that selects the entry, or "-" (no host selects it: a benchmark-only entry). {@code layout}: "none",
     * "contiguous", "paged" or "any" (either cache layout). {@code headerBytes}: 0 for the CUDA-driver ABI, else
     * the bytes before each array's data (a TornadoVM twin). {@code rowsPerBlock}: query rows (Br) a block covers;
     * decode: packed rows; combine: rows.
     */
    public record Kernel(String module, String entry, Kind kind, DType dtype, int headDim, String causal, String layout,
                         Set<Feature> features, int headerBytes, String arch, int rowsPerBlock, int keysPerTile,
                         int threads, int dynamicSharedBytes) {

        /** True when a host asking for {@code v} may run this entry. */
        public boolean serves(KernelVariant v) {
            return kind == v.kind() && dtype == v.dtype() && (headDim == 0 || headDim == v.headDim())
                    && (causal.equals("any") || causal.equals(v.causal() ? "1" : "0"))
                    && servesLayout(v.layout())
                    && features.containsAll(v.features()) && headerBytes == v.headerBytes() && arch.equals(v.arch());
        }

        boolean servesLayout(CacheLayout l) {
            return layout.equals(l.column()) || layout.equals("any") && l != CacheLayout.NONE;
        }

        /** Selected by some host (benchmark-only entries are not). */
        public boolean selectable() {
            return !causal.equals("-");
        }

        /** What the entry serves, as a refusal lists it. */
        String describe() {
            return dtype.name().toLowerCase(Locale.ROOT) + " D=" + (headDim == 0 ? "any" : headDim)
                    + (causal.equals("any") ? "" : causal.equals("1") ? " causal" : " non-causal")
                    + (layout.equals("none") ? "" : " " + layout + " cache")
                    + (features.isEmpty() ? "" : " " + features.stream().map(Feature::column).sorted().toList());
        }
    }

    private static final class Shipped {
        static final KernelManifest INSTANCE = parse(resource("manifest.tsv"), CLASS_PATH);
    }

    private final List<Kernel> kernels;
    private final Source source;
    /** Lookups done: hosts may select per call (the manifest never changes). */
    private final Map<KernelVariant, Kernel> selected = new ConcurrentHashMap<>();

    private KernelManifest(List<Kernel> kernels, Source source) {
        this.kernels = List.copyOf(kernels);
        this.source = source;
    }

    /** The manifest in the jar. */
    public static KernelManifest shipped() {
        return Shipped.INSTANCE;
    }

    /** A manifest from its text: a header row of column names, then one tab-separated row per entry. */
    static KernelManifest parse(String text) {
        return parse(text, CLASS_PATH);
    }

    private static KernelManifest parse(String text, Source source) {
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
            kernels.add(new Kernel(row.text("module"), row.text("entry"), Kind.ofColumn(row.text("kind")),
                    DType.valueOf(row.text("dtype").toUpperCase(Locale.ROOT)), row.number("head_dim"), row.text("causal"),
                    row.text("layout"), Feature.ofColumn(row.text("features")), row.number("header_bytes"), row.text("arch"),
                    row.number("br"), row.number("bc"), row.number("threads"), row.number("smem_dynamic")));
        }
        return new KernelManifest(kernels, source);
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
     * The entry that serves {@code variant}: an entry serves the features it lists and any subset of them, and of
     * several that serve a variant the one with the fewest features runs. A variant no entry serves is refused naming the first field
     * that rules it out (dtype, headDim, layout, features, causal) and listing what the manifest serves for its
     * kind and ABI.
     */
    public Kernel select(KernelVariant variant) {
        Kernel cached = selected.get(variant);
        return cached != null ? cached : selected.computeIfAbsent(variant, this::find);
    }

    private Kernel find(KernelVariant variant) {
        List<Kernel> found = kernels.stream().filter(k -> k.serves(variant)).toList();
        if (found.isEmpty()) {
            throw refusal(variant);
        }
        // An entry serves any subset of its features: the one with the fewest runs, so a call without features
        // keeps the plain kernel where a feature-capable one exists beside it.
        int fewest = found.stream().mapToInt(k -> k.features().size()).min().orElseThrow();
        List<Kernel> best = found.stream().filter(k -> k.features().size() == fewest).toList();
        if (best.size() > 1) {
            throw new IllegalStateException("the kernel manifest has " + best.size() + " entries for " + variant + ": "
                    + best.stream().map(Kernel::entry).toList());
        }
        Kernel kernel = best.get(0);
        if (variant.headerBytes() > 0 && kernel.dynamicSharedBytes() > 0) {
            // TornadoVM launches prebuilt tasks with 0 bytes of dynamic shared memory.
            throw new IllegalStateException("the kernel manifest's TornadoVM twin " + kernel.entry() + " for " + variant
                    + " needs " + kernel.dynamicSharedBytes() + " bytes of dynamic shared memory; TornadoVM launches with none");
        }
        return kernel;
    }

    /** True when some entry serves {@code variant}. */
    public boolean serves(KernelVariant variant) {
        return kernels.stream().anyMatch(k -> k.serves(variant));
    }

    private InvalidArgumentException refusal(KernelVariant v) {
        List<Kernel> abi = kernels.stream().filter(k -> k.selectable() && k.kind() == v.kind()
                && k.headerBytes() == v.headerBytes() && k.arch().equals(v.arch())).toList();
        String served = "served " + v.kind().column() + " variants"
                + (v.headerBytes() == 0 ? " (CUDA driver, " : " (TornadoVM " + v.headerBytes() + "-byte header, ") + v.arch()
                + "): " + (abi.isEmpty() ? "none" : String.join(", ", abi.stream().map(Kernel::describe).distinct().toList()));
        List<Kernel> typed = abi.stream().filter(k -> k.dtype() == v.dtype()).toList();
        List<Kernel> sized = typed.stream().filter(k -> k.headDim() == 0 || k.headDim() == v.headDim()).toList();
        List<Kernel> laid = sized.stream().filter(k -> k.servesLayout(v.layout())).toList();
        if (typed.isEmpty()) {
            return new InvalidArgumentException("dtype", v.dtype(), served);
        } else if (sized.isEmpty()) {
            return new InvalidArgumentException("headDim", v.headDim(), served);
        } else if (laid.isEmpty()) {
            return new InvalidArgumentException("layout", v.layout().column(), served);
        } else if (laid.stream().noneMatch(k -> k.features().containsAll(v.features()))) {
            return new InvalidArgumentException("features", v.features(), served);
        }
        return new InvalidArgumentException("causal", v.causal(), served);
    }

    /**
     * The head dims for which {@code variant}'s kind, dtype, layout and ABI have an entry for either causal flag,
     * ascending (the variant's own head dim and causal flag are ignored).
     */
    public List<Integer> headDims(KernelVariant variant) {
        return kernels.stream().filter(k -> k.selectable() && k.headDim() > 0).map(Kernel::headDim).distinct().sorted()
                .filter(d -> serves(new KernelVariant(variant.kind(), variant.dtype(), d, false, variant.layout(),
                        variant.features(), variant.headerBytes(), variant.arch()))
                        && serves(new KernelVariant(variant.kind(), variant.dtype(), d, true, variant.layout(),
                        variant.features(), variant.headerBytes(), variant.arch())))
                .toList();
    }

    /** The element types some selectable entry of {@code kind} has. */
    public Set<DType> dtypes(Kind kind) {
        return kernels.stream().filter(k -> k.selectable() && k.kind() == kind).map(Kernel::dtype)
                .collect(Collectors.toCollection(() -> EnumSet.noneOf(DType.class)));
    }

    /** The array header sizes of the selectable twins of {@code kind} (hosts whose arrays carry a header). */
    public List<Integer> headerBytes(Kind kind) {
        return kernels.stream().filter(k -> k.kind() == kind && k.headerBytes() > 0 && k.selectable())
                .map(Kernel::headerBytes).distinct().sorted().toList();
    }

    /**
     * The text of a shipped PTX module (a class-path resource built from ptx-overrides/ptx): {@code <module>.gz}
     * (gzip) where it ships compressed, else {@code <module>}.
     */
    public static String ptx(String module) {
        return shipped().ptxText(module);
    }

    /** The text of PTX module {@code module} from where this manifest was read (class path or directory). */
    public String ptxText(String module) {
        if (!module.matches("[A-Za-z0-9_.-]+")) {
            throw new IllegalArgumentException("not a PTX module name: " + module);
        }
        try (InputStream gz = source.open(module + ".gz")) {
            if (gz != null) {
                try (InputStream in = new GZIPInputStream(gz)) {
                    return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + module + ".gz", e);
        }
        try (InputStream in = source.open(module)) {
            if (in == null) {
                throw new IllegalStateException("no PTX module " + module + " (nor " + module + ".gz) in " + source);
            }
            return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + module, e);
        }
    }

    /**
     * The manifest {@code dir/manifest.tsv} whose PTX modules are files of {@code dir} (e.g. ptx-overrides/ptx in a
     * checkout, or a test's hand-made table).
     */
    public static KernelManifest load(Path dir) {
        Source source = new Source(dir);
        try (InputStream in = source.open("manifest.tsv")) {
            if (in == null) {
                throw new IllegalStateException("no manifest.tsv in " + dir);
            }
            return parse(new String(in.readAllBytes(), StandardCharsets.US_ASCII), source);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Where the manifest and its modules are read: a class-path folder ({@code dir} null) or a directory. */
    private record Source(Path dir) {
        InputStream open(String name) throws IOException {
            if (dir == null) {
                return KernelManifest.class.getResourceAsStream(RESOURCE_DIR + name);
            }
            Path file = dir.resolve(name);
            return Files.isRegularFile(file) ? Files.newInputStream(file) : null;
        }

        @Override
        public String toString() {
            return dir == null ? "the class path (" + RESOURCE_DIR + ")" : dir.toString();
        }
    }

    private static String resource(String name) {
        try (InputStream in = CLASS_PATH.open(name)) {
            if (in == null) {
                throw new IllegalStateException("missing class-path resource " + RESOURCE_DIR + name);
            }
            return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
