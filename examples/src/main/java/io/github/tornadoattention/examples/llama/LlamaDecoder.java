package io.github.tornadoattention.examples.llama;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.ImmutableTaskGraph;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.WorkerGrid;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The decoder as TornadoVM task graphs, GPULlama3.java's layout: one execution plan holding
 * {@code embed, layer_0 .. layer_{L-1}, logits}, run graph by graph with {@code withGraph(i).execute()} for every
 * token. A layer is one graph ({@code layer_l}: the scalar variant) or two ({@code layer_l_a}: RMSNorm, QKV, RoPE;
 * {@code layer_l_b}: attention first, output projection, FFN; our variant, see {@link AttentionVariant}); they run in
 * that order. The residual stream {@code x} stays on the device: {@code embed} owns it ({@code FIRST_EXECUTION},
 * {@code persistOnDevice}) and every later graph takes it from the graph run just before it
 * ({@code consumeFromDevice(previous, x)}, TornadoVM hands over that graph's buffer; {@code layer_l_b} takes it from
 * {@code layer_l_a}, which relays it). RoPE's outputs go from {@code layer_l_a} (owner, persists) to
 * {@code layer_l_b} (consumes) the same way. Each graph owns its weights ({@code FIRST_EXECUTION}: sent by the first
 * token, resident after) and its scratch arrays; per token only the token id (embed), the step metadata (each layer
 * graph sends its own copy, 16 bytes) and the logits (back, generated tokens only) cross the bus.
 *
 * <p>Residency rules from tornado-kernels/README.md ("Device residency in TornadoVM 5.2.0") kept: every array is
 * transferred (so freed) by exactly one graph, consumers never persist what they consume, and {@link #close} selects
 * all graphs before closing the plan (otherwise only the graph selected last is freed). The weights are shared by the
 * decoders of one JVM and outlive them.
 */
final class LlamaDecoder implements AutoCloseable {
    static final String EMBED = "embed";
    static final String LOGITS = "logits";

    private final LlamaConfig config;
    private final AttentionVariant attention;
    private final IntArray token = new IntArray(1);
    private final FloatArray x;
    private final FloatArray logits;
    private final TornadoExecutionPlan plan;
    private final int graphs;
    /** The graphs' names in plan (and run) order. */
    private final List<String> graphNames = new ArrayList<>();
    /** Per layer: the index of its first graph in the plan. */
    private final int[] layerGraph;
    private final int[] profileLogRead;
    private boolean profiling;

    /**
     * The decoder's plan for {@code attention}; {@code cudaGraph}: the plan runs {@code withCUDAGraph()} (each graph
     * captured at its first execution and replayed after: no per-task host work, and no per-task profiler times).
     */
    LlamaDecoder(LlamaWeights weights, AttentionVariant attention, boolean cudaGraph) {
        this.config = weights.config;
        this.attention = attention;
        int dim = config.dim();
        x = new FloatArray(dim);
        logits = new FloatArray(config.vocab());
        GridScheduler scheduler = new GridScheduler();
        List<ImmutableTaskGraph> all = new ArrayList<>();

        TaskGraph embed = new TaskGraph(EMBED)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, token)
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, weights.embedding, x)
                .task("embed", LlamaKernels::embed, new KernelContext(), token, weights.embedding, x, dim)
                .persistOnDevice(x);
        scheduler.addWorkerGrid(EMBED + ".embed", grid(dim, localSize(dim, 256)));
        all.add(embed.snapshot());
        graphNames.add(EMBED);

        layerGraph = new int[config.layers()];
        for (int l = 0; l < config.layers(); l++) {
            layerGraph[l] = all.size();
            for (TaskGraph graph : layer(weights, l, graphNames.getLast(), scheduler)) {
                all.add(graph.snapshot());
                graphNames.add(graph.getTaskGraphName());
            }
        }

        FloatArray normed = new FloatArray(dim);
        KernelContext context = new KernelContext();
        TaskGraph head = new TaskGraph(LOGITS)
                .consumeFromDevice(graphNames.getLast(), x)
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, weights.finalNorm, weights.lmHead, normed)
                .task("final_norm", LlamaKernels::rmsNorm, context, x, weights.finalNorm, normed, dim, config.rmsEps())
                .task("lm_head", LlamaKernels::matvec, context, normed, weights.lmHead, logits, dim)
                .transferToHost(DataTransferMode.EVERY_EXECUTION, logits);
        scheduler.addWorkerGrid(LOGITS + ".final_norm", grid(LlamaKernels.RMS_THREADS, LlamaKernels.RMS_THREADS));
        scheduler.addWorkerGrid(LOGITS + ".lm_head", grid(config.vocab() * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        all.add(head.snapshot());
        graphNames.add(LOGITS);

        graphs = all.size();
        profileLogRead = new int[graphs];
        plan = new TornadoExecutionPlan(all.toArray(new ImmutableTaskGraph[0]));
        try {
            plan.withGridScheduler(scheduler);
            if (cudaGraph) {
                plan.withCUDAGraph();
            }
            plan.withPreCompilation();
        } catch (RuntimeException | Error e) {
            close();
            throw e;
        }
    }

    /**
     * Layer {@code l}'s graphs in run order: one, or two when the attention variant asks for them (RoPE's graph,
     * then attention's, which begins with attention); x comes from {@code previous}.
     */
    private List<TaskGraph> layer(LlamaWeights weights, int l, String previous, GridScheduler scheduler) {
        LlamaWeights.Layer w = weights.layers.get(l);
        int dim = config.dim();
        boolean split = attention.twoGraphsPerLayer();
        String name = split ? layerName(l) + "_a" : layerName(l);
        FloatArray normed = new FloatArray(dim);
        FloatArray qkv = new FloatArray(config.qkvRows());
        KernelContext context = new KernelContext();
        TaskGraph graph = new TaskGraph(name)
                .consumeFromDevice(previous, x)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, attention.meta())
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, w.attentionNorm(), w.wqkv(),
                        weights.ropeCos, weights.ropeSin, normed, qkv)
                .task("rms_att", LlamaKernels::rmsNorm, context, x, w.attentionNorm(), normed, dim, config.rmsEps())
                .task("qkv", LlamaKernels::matvec, context, normed, w.wqkv(), qkv, dim);
        scheduler.addWorkerGrid(name + ".rms_att", grid(LlamaKernels.RMS_THREADS, LlamaKernels.RMS_THREADS));
        scheduler.addWorkerGrid(name + ".qkv", grid(config.qkvRows() * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        attention.addRope(graph, name, scheduler, context, l, qkv, weights.ropeCos, weights.ropeSin);
        List<TaskGraph> graphs = new ArrayList<>(List.of(graph));
        String ropeGraph = name;
        if (split) {
            // x relayed by the RoPE graph (it only consumed x: it neither owns nor persists it).
            name = layerName(l) + "_b";
            context = new KernelContext();
            graph = new TaskGraph(name)
                    .consumeFromDevice(ropeGraph, x)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, attention.meta());
            graphs.add(graph);
        }
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, w.wo());
        attention.addAttention(graph, name, ropeGraph, scheduler, context, l, x, w.wo());
        if (config.ffnDim() > 0) {
            FloatArray ffnNormed = new FloatArray(dim);
            FloatArray hidden = new FloatArray(config.ffnDim());
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, w.ffnNorm(), w.w13(), w.w2(), ffnNormed, hidden)
                    .task("rms_ffn", LlamaKernels::rmsNorm, context, x, w.ffnNorm(), ffnNormed, dim, config.rmsEps())
                    .task("ffn_gate_up", LlamaKernels::ffnGateUp, context, ffnNormed, w.w13(), hidden, dim,
                            config.ffnDim())
                    .task("ffn_down", LlamaKernels::matvecResidual, context, hidden, w.w2(), x, config.ffnDim());
            scheduler.addWorkerGrid(name + ".rms_ffn", grid(LlamaKernels.RMS_THREADS, LlamaKernels.RMS_THREADS));
            scheduler.addWorkerGrid(name + ".ffn_gate_up", grid(config.ffnDim() * LlamaKernels.MATVEC_THREADS,
                    LlamaKernels.MATVEC_THREADS));
            scheduler.addWorkerGrid(name + ".ffn_down", grid(dim * LlamaKernels.MATVEC_THREADS,
                    LlamaKernels.MATVEC_THREADS));
        }
        return graphs;
    }

    static String layerName(int l) {
        return "layer_" + l;
    }

    /** The plan's graphs by name, in run order ({@code embed, layer_0[_a, layer_0_b], ..., logits}). */
    List<String> graphNames() {
        return List.copyOf(graphNames);
    }

    static WorkerGrid grid(int global, int local) {
        WorkerGrid grid = new WorkerGrid1D(global);
        grid.setLocalWork(local, 1, 1);
        return grid;
    }

    /** The largest power of two <= max dividing n (a workgroup size for a grid of exactly n threads). */
    static int localSize(int n, int max) {
        int size = max;
        while (n % size != 0) {
            size /= 2;
        }
        return size;
    }

    /** Turns TornadoVM's profiler on (SILENT: per-task kernel times into the log) or off for the next steps. */
    void profile(boolean on) {
        if (on != profiling) {
            if (on) {
                plan.withProfiler(ProfilerMode.SILENT);
            } else {
                plan.withoutProfiler();
            }
            profiling = on;
        }
    }

    /** What one step gave: the logits (only when asked for), per-task kernel ns (only while profiling), samples. */
    record StepResult(FloatArray logits, Map<String, Long> kernelNanos, List<AttentionVariant.Sample> samples) {
    }

    /**
     * Runs one token through the model: {@code tok} at position {@code length - 1}. {@code withLogits}: also the
     * logits graph (the logits then come back to the host). {@code sample}: every layer's attention inputs and
     * output are downloaded after its graph (for the check; costs copies, so such steps are not timed).
     */
    StepResult step(int tok, int length, boolean withLogits, boolean sample) {
        token.set(0, tok);
        attention.setStep(length);
        Map<String, Long> times = profiling ? new LinkedHashMap<>() : null;
        List<AttentionVariant.Sample> samples = sample ? new ArrayList<>() : null;
        run(0, times);
        for (int l = 0; l < config.layers(); l++) {
            // A sample's downloads go right after the graph that owns the arrays: a result transfers from the graph
            // selected now.
            TornadoExecutionResult result = run(layerGraph[l], times);
            if (sample) {
                attention.download(result, l, AttentionVariant.Part.ROPE);
            }
            if (attention.twoGraphsPerLayer()) {
                result = run(layerGraph[l] + 1, times);
            }
            if (sample) {
                attention.download(result, l, AttentionVariant.Part.ATTENTION);
                samples.add(attention.sample(l));
            }
        }
        if (withLogits) {
            run(graphs - 1, times);
        }
        return new StepResult(withLogits ? logits : null, times, samples);
    }

    private TornadoExecutionResult run(int graph, Map<String, Long> times) {
        TornadoExecutionResult result = plan.withGraph(graph).execute();
        if (times != null) {
            String log = result.getProfilerResult().getProfileLog();
            times.putAll(ProfileLog.kernelTimes(log.substring(Math.min(profileLogRead[graph], log.length()))));
            profileLogRead[graph] = log.length();
        }
        return result;
    }

    @Override
    public void close() {
        // withAllGraphs first: close() frees only the graphs selected, and withGraph left one selected.
        plan.withAllGraphs();
        try {
            plan.close();
        } catch (TornadoExecutionPlanException e) {
            throw new IllegalStateException("closing the decoder's execution plan failed", e);
        }
    }
}
