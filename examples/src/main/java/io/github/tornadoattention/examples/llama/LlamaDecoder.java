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
 * token. The residual stream {@code x} stays on the device: {@code embed} owns it ({@code FIRST_EXECUTION},
 * {@code persistOnDevice}) and every later graph takes it from the graph run just before it
 * ({@code consumeFromDevice(previous, x)}, TornadoVM hands over that graph's buffer). Each graph owns its weights
 * ({@code FIRST_EXECUTION}: sent by the first token, resident after) and its scratch arrays; per token only the token
 * id (embed), the step metadata (each layer) and the logits (back, generated tokens only) cross the bus.
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
    private final int[] profileLogRead;
    private boolean profiling;

    LlamaDecoder(LlamaWeights weights, AttentionVariant attention) {
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

        for (int l = 0; l < config.layers(); l++) {
            all.add(layer(weights, l, scheduler).snapshot());
        }

        FloatArray normed = new FloatArray(dim);
        KernelContext context = new KernelContext();
        TaskGraph head = new TaskGraph(LOGITS)
                .consumeFromDevice(layerName(config.layers() - 1), x)
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, weights.finalNorm, weights.lmHead, normed)
                .task("final_norm", LlamaKernels::rmsNorm, context, x, weights.finalNorm, normed, dim, config.rmsEps())
                .task("lm_head", LlamaKernels::matvec, context, normed, weights.lmHead, logits, dim)
                .transferToHost(DataTransferMode.EVERY_EXECUTION, logits);
        scheduler.addWorkerGrid(LOGITS + ".final_norm", grid(LlamaKernels.RMS_THREADS, LlamaKernels.RMS_THREADS));
        scheduler.addWorkerGrid(LOGITS + ".lm_head", grid(config.vocab() * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        all.add(head.snapshot());

        graphs = all.size();
        profileLogRead = new int[graphs];
        plan = new TornadoExecutionPlan(all.toArray(new ImmutableTaskGraph[0]));
        try {
            plan.withGridScheduler(scheduler).withPreCompilation();
        } catch (RuntimeException | Error e) {
            close();
            throw e;
        }
    }

    private TaskGraph layer(LlamaWeights weights, int l, GridScheduler scheduler) {
        LlamaWeights.Layer w = weights.layers.get(l);
        int dim = config.dim();
        String name = layerName(l);
        FloatArray normed = new FloatArray(dim);
        FloatArray qkv = new FloatArray(config.qkvRows());
        KernelContext context = new KernelContext();
        TaskGraph graph = new TaskGraph(name)
                .consumeFromDevice(l == 0 ? EMBED : layerName(l - 1), x)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, attention.meta())
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, w.attentionNorm(), w.wqkv(), w.wo(),
                        weights.ropeCos, weights.ropeSin, normed, qkv)
                .task("rms_att", LlamaKernels::rmsNorm, context, x, w.attentionNorm(), normed, dim, config.rmsEps())
                .task("qkv", LlamaKernels::matvec, context, normed, w.wqkv(), qkv, dim);
        scheduler.addWorkerGrid(name + ".rms_att", grid(LlamaKernels.RMS_THREADS, LlamaKernels.RMS_THREADS));
        scheduler.addWorkerGrid(name + ".qkv", grid(config.qkvRows() * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        attention.addAttentionBlock(graph, name, scheduler, context, l, qkv, weights.ropeCos, weights.ropeSin, x, w.wo());
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
        return graph;
    }

    static String layerName(int l) {
        return "layer_" + l;
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
            TornadoExecutionResult result = run(1 + l, times);
            if (sample) {
                samples.add(attention.sample(result, l, length));
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
