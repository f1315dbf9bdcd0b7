package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;

/**
 * tornado-mma's dense kernels on a GPU under whichever TornadoVM backend the SDK has, each kernel family the backend
 * compiles (on the CUDA backend also the cp.async family, fp16 and bf16), planned directly so that the plan's choice of
 * family does not hide one: each shape against the CPU reference, three runs of one plan with the output poisoned before
 * each, and where elements are wrong, where they are (query row within its 64-row tile, head-dim column, NaN/unwritten or
 * a wrong finite value). Then, with {@code --time}, each family's kernel time (TornadoVM's profiler, median of 30 calls
 * after 20) at the prefill shapes. A diagnosis tool for a GPU machine; prints "RESULT PASS" or "RESULT FAIL" last.
 * Arguments: [--time] [B,Hq,Hkv,Sq,Skv,D[,c] ...] (c: causal).
 */
public final class MmaGpuCheck {
    private MmaGpuCheck() {
    }

    public static void main(String[] args) {
        List<AttentionShape> shapes = new ArrayList<>();
        boolean time = args.length > 0 && args[0].equals("--time");
        List<String> given = List.of(args).subList(time ? 1 : 0, args.length);
        for (String a : !given.isEmpty() ? given : List.of("2,2,2,1,1,64", "1,1,1,64,64,64", "1,2,2,128,128,64",
                "8,8,8,128,128,64", "2,8,8,512,512,128,c", "2,4,2,300,129,64,c", "1,3,3,1000,1001,128", "2,4,4,200,200,32",
                "2,4,4,200,200,96,c", "1,4,4,256,256,256,c")) {
            shapes.add(shape(a));
        }
        TornadoDevice device = TornadoDevices.nvidiaDevice().require(io.github.tornadoattention.Backends.TORNADO_MMA);
        List<MmaTileConfig.Loads> families = device.getTornadoVMBackend() == TornadoVMBackendType.CUDA
                ? List.of(MmaTileConfig.Loads.REGISTERS, MmaTileConfig.Loads.CP_ASYNC) : List.of(MmaTileConfig.Loads.REGISTERS);
        System.out.println("device " + device + " (" + device.getTornadoVMBackend() + "), families " + families);
        boolean all = true;
        for (AttentionShape shape : shapes) {
            for (MmaTileConfig.Loads family : families) {
                for (DType dtype : family == MmaTileConfig.Loads.CP_ASYNC ? List.of(DType.FP16, DType.BF16) : List.of(DType.FP16)) {
                    all &= check(shape.toBuilder().dtype(dtype).build(), device, family);
                }
            }
        }
        if (time) {
            for (String t : List.of("16,8,8,512,512,64", "16,8,8,512,512,64,c", "4,16,16,2048,2048,128", "4,16,16,2048,2048,128,c")) {
                AttentionShape s = shape(t);
                for (MmaTileConfig.Loads family : families) {
                    System.out.println("TIME " + t + " " + family + " kernel_median_ms " + kernelMillis(s, device, family));
                }
            }
        }
        System.out.println(all ? "RESULT PASS" : "RESULT FAIL");
    }

    /** B,Hq,Hkv,Sq,Skv,D[,c]: a BHSD shape, causal with the trailing c. */
    private static AttentionShape shape(String text) {
        String[] p = text.split(",");
        return AttentionShape.builder().batch(Integer.parseInt(p[0])).heads(Integer.parseInt(p[1]))
                .kvHeads(Integer.parseInt(p[2])).queryLength(Integer.parseInt(p[3])).kvLength(Integer.parseInt(p[4]))
                .headDim(Integer.parseInt(p[5])).causal(p.length > 6 && p[6].equals("c")).layout(Layout.BHSD).build();
    }

    private static double kernelMillis(AttentionShape s, TornadoDevice device, MmaTileConfig.Loads family) {
        try (RandomInputs in = RandomInputs.generate(s, 7);
             AttentionPlan plan = new MmaPlan(s, device, PlanOptions.builder().profile(true).build(), family)) {
            HalfTensor o = RandomInputs.poisonedOutput(s);
            float[] lse = RandomInputs.poisonedLogSumExp(s);
            double[] ms = new double[30];
            for (int i = 0; i < 20 + ms.length; i++) {
                plan.forward(in.q(), in.k(), in.v(), o, lse);
                if (i >= 20) {
                    ms[i - 20] = plan.benchmarkHooks().lastDeviceMillis().orElse(Double.NaN);
                }
            }
            o.close();
            java.util.Arrays.sort(ms);
            return ms[ms.length / 2];
        } catch (RuntimeException e) {
            System.out.println("TIME " + s + " " + family + ": " + e);
            return Double.NaN;
        }
    }

    private static boolean check(AttentionShape s, TornadoDevice device, MmaTileConfig.Loads family) {
        boolean all = true;
        {
            try (RandomInputs in = RandomInputs.generate(s, 20261126L + s.hashCode());
                 AttentionPlan plan = new MmaPlan(s, device, PlanOptions.defaults(), family)) {
                CpuReference.Result ref = CpuReference.compute(s, in.q(), in.k(), in.v());
                for (int run = 0; run < 3; run++) {
                    HalfTensor o = RandomInputs.poisonedOutput(s);
                    float[] lse = RandomInputs.poisonedLogSumExp(s);
                    plan.forward(in.q(), in.k(), in.v(), o, lse);
                    ErrorStats stats = ErrorStats.compare(o, ref.output(), lse, ref.logSumExp());
                    all &= stats.passes();
                    System.out.println(family + " " + s + " run " + run + ": " + (stats.passes() ? "PASS " : "FAIL ") + stats);
                    if (!stats.passes()) {
                        where(s, o, ref.output());
                    }
                    o.close();
                }
            } catch (RuntimeException e) {
                all = false;
                System.out.println(family + " " + s + ": " + e);
                e.printStackTrace(System.out);
            }
        }
        return all;
    }

    /** Counts of wrong elements by query row mod 64 and by column, and the first few wrong elements. */
    private static void where(AttentionShape s, HalfTensor o, double[] expected) {
        int d = s.headDim();
        long[] byRow = new long[64];
        long[] byCol = new long[d];
        long nan = 0;
        long wrong = 0;
        StringBuilder first = new StringBuilder();
        TensorStrides st = s.queryStrides();
        for (int b = 0; b < s.batch(); b++) {
            for (int h = 0; h < s.heads(); h++) {
                for (int i = 0; i < s.queryLength(); i++) {
                    for (int c = 0; c < d; c++) {
                        long at = st.rowStart(b, h, i) + c;
                        double actual = o.get(at);
                        boolean bad = !Double.isFinite(actual) || Math.abs(actual - expected[(int) at]) > 0.05;
                        if (bad) {
                            if (Double.isFinite(actual)) {
                                wrong++;
                            } else {
                                nan++;
                            }
                            byRow[i % 64]++;
                            byCol[c]++;
                            if (first.length() < 600) {
                                first.append(String.format(" (b%d h%d q%d c%d: %s vs %.4f)", b, h, i, c, actual, expected[(int) at]));
                            }
                        }
                    }
                }
            }
        }
        System.out.println("  nan/unwritten " + nan + ", wrong finite " + wrong);
        System.out.println("  by row mod 64: " + java.util.Arrays.toString(byRow));
        System.out.println("  by column:     " + java.util.Arrays.toString(byCol));
        System.out.println("  first:" + first);
    }
}
