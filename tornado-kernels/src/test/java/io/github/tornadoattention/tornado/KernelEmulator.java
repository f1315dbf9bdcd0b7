package io.github.tornadoattention.tornado;

import java.io.IOException;
import java.io.InputStream;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassTransform;
import java.lang.classfile.CodeBuilder;
import java.lang.classfile.CodeElement;
import java.lang.classfile.CodeTransform;
import java.lang.classfile.Instruction;
import java.lang.classfile.Opcode;
import java.lang.classfile.instruction.ConstantInstruction;
import java.lang.classfile.instruction.InvokeInstruction;
import java.lang.constant.ClassDesc;
import java.lang.constant.MethodTypeDesc;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandleProxies;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.IntFunction;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.common.TornadoFunctions;
import uk.ac.manchester.tornado.api.enums.MMAShape;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;

/**
 * Runs a KernelContext kernel on the CPU, one Java thread per GPU thread, so that the kernels' index
 * arithmetic, layouts, masking and softmax can be tested where there is no GPU. Local arrays are shared by
 * the threads of a workgroup, {@code localBarrier()} is a barrier over them, and the MMA intrinsics are
 * emulated warp by warp with exactly the semantics of TornadoVM's PTX lowering:
 * <ul>
 *   <li>{@code mmaLoadA(tile, 16, byteOffset)}: {@code ldmatrix.x4} over a 16x16 fp16 tile, row-major with
 *       32-byte rows, at {@code byteOffset}; lane (g = lane / 4, t = lane % 4) gets a0..a7 =
 *       (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..). Each lane supplies one row address (with its
 *       own {@code byteOffset}, which may differ between lanes) and the rows are read from those addresses.</li>
 *   <li>{@code mmaLoadB(tile, 16, byteOffset)}: {@code ldmatrix.x2.trans} over a 16x8 fp16 tile [k][n],
 *       row-major with 16-byte rows; lane gets b0..b3 = (k = 2t..2t+1, n = g), (k = 2t+8.., n = g); lanes
 *       0..15 supply the row addresses.</li>
 *   <li>{@code mma}: D = A B + C for m16n8k16, fp32 accumulation; C/D element i of lane (g, t) is
 *       (row g + 8 (i / 2), column 2t + i % 2).</li>
 *   <li>{@code simdShuffleDown(v, delta)}, {@code simdBroadcastFirst(v)}: {@code shfl.sync.down} /
 *       {@code shfl.sync.idx} with clamp 31 and a full mask.</li>
 *   <li>{@code mmaStore(d, c, row, col, n)}: element (r, k) of the fragment to index (row + r) n + col + k,
 *       counted from 16 bytes into the array's memory (the Java heap float[] header that TornadoVM's lowering
 *       adds), so it is {@code c.get((row + r) n + col + k)} only with TornadoVM's default 16-byte array
 *       header ({@link #mmaStoreByteOffset}).</li>
 * </ul>
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"; TornadoVM's LdmatrixStmt and
 * MMAStoreStmt.) Fragments carry the 16-bit patterns as they are: {@code mma} decodes them as fp16, {@code mmaBF16} as
 * bf16. The CUDA backend's cp.async ({@code asyncCopyToLocal}: 4 bytes from 16 bytes past the array's memory, as its
 * {@code CpAsyncCopyStmt}; {@code asyncCopyCommit}, {@code asyncCopyWaitGroup}) lands at the first barrier after a wait
 * that covers it, or at issue ({@link CopyLanding}); a thread that ends with copies not landed fails its workgroup.
 * Races the kernel might have are not reliably detected.
 *
 * <p>Public (in tornado-kernels' test jar) for the examples' kernel tests.
 *
 * <p>The kernel's own Java code runs with Java's semantics, which differ from the PTX that TornadoVM generates
 * where a value is NaN: {@code Math.min}/{@code Math.max} of floats lower to {@code min.f32}/{@code max.f32}, which
 * return the other operand where one is NaN (Java's return NaN). {@link #ptxKernel} loads a kernel class with those
 * calls replaced by {@link #ptxMin}/{@link #ptxMax}. (The other float operations the kernels use agree on NaN and
 * infinities: the arithmetic, comparisons ({@code setp} is ordered, as Java's), {@code ex2.approx}/{@code lg2.approx}
 * for TornadoMath's exp/log, {@code cvt.rn.f16.f32} (NaN stays a NaN) and {@code mma} (IEEE products and sums).)
 * {@link #cudaKernel} loads one with those of TornadoVM's CUDA C, whose integer shifts and divisions also differ from
 * Java's ({@link CudaIntegerSemantics}).
 */
public final class KernelEmulator {
    /** A kernel body taking the emulated context. */
    public interface Kernel {
        void run(KernelContext kc);
    }

    private static volatile int lastLocalBytes;
    private static volatile List<Object> lastLocalArrays = List.of();

    /**
     * Where TornadoVM's {@code mmaStore} puts element {@code index}: past the Java heap's float[] header
     * (16 bytes), not past {@link uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray#ARRAY_HEADER}
     * as {@code FloatArray.get/set} do; the two differ under {@code -Dtornado.panama.objectHeader=128}.
     */
    static long mmaStoreByteOffset(int index) {
        return MmaKernels.MMA_STORE_HEADER_BYTES + 4L * index;
    }

    private KernelEmulator() {
    }

    /** {@code min.f32} (and CUDA's {@code fminf}): where one operand is NaN, the other (NaN only if both are). */
    public static float ptxMin(float a, float b) {
        return Float.isNaN(a) ? b : Float.isNaN(b) ? a : Math.min(a, b);
    }

    /** {@code max.f32} (and CUDA's {@code fmaxf}): where one operand is NaN, the other (NaN only if both are). */
    public static float ptxMax(float a, float b) {
        return Float.isNaN(a) ? b : Float.isNaN(b) ? a : Math.max(a, b);
    }

    /**
     * The static kernel method {@code name} of {@code kernels} (a class of this package) with the float semantics
     * of TornadoVM's PTX: every {@code Math.min(float, float)} and {@code Math.max(float, float)} call replaced by
     * {@link #ptxMin}/{@link #ptxMax}, in the kernel class and in the classes of this package it calls
     * ({@link #withGpuSemantics}).
     */
    @SuppressWarnings("unchecked")   // the raw Task18's apply: the handle checks every argument's type
    static MmaPlan.Kernel ptxKernel(Class<?> kernels, String name) {
        TornadoFunctions.Task18 kernel = gpuKernel(kernels, name, LongArray.class, false, null);
        return kernel::apply;
    }

    /**
     * The static kernel method {@code name} of {@code kernels} (TornadoVM's CUDA backend: {@link MmaCpAsyncKernels}; or
     * {@link MmaKernels}, which that backend also runs) with the semantics of the CUDA C that TornadoVM 5.2 generates for
     * it: {@code Math.min/max(float, float)} as {@code fminf/fmaxf} (as {@link #ptxMin}/{@link #ptxMax}: the other operand
     * where one is NaN), and its integer shifts and divisions as {@link CudaIntegerSemantics} describes ({@code >>>} as an
     * arithmetic shift, a mask Graal folds away dropped, division by a power of two rounding down for a negative
     * dividend), in the kernel class and in the classes of this package it calls, as Graal inlines them
     * ({@link #withGpuSemantics}).
     */
    static MmaPlan.CpAsyncKernel cudaKernel(Class<?> kernels, String name) {
        return cudaKernelWithout(kernels, name, null);
    }

    /** {@link #cudaKernel} for the kernels whose K and V are LongArrays ({@link MmaKernels}, as {@link #ptxKernel}). */
    @SuppressWarnings("unchecked")   // the raw Task18's apply: the handle checks every argument's type
    static MmaPlan.Kernel cudaLongKernel(Class<?> kernels, String name) {
        TornadoFunctions.Task18 kernel = gpuKernel(kernels, name, LongArray.class, true, null);
        return kernel::apply;
    }

    /**
     * {@link #cudaKernel} with every call to the KernelContext method {@code droppedCall} (one taking an int, such as
     * {@code asyncCopyWaitGroup}) removed, or none where null: the tests show that the emulator catches its absence.
     */
    @SuppressWarnings("unchecked")   // the raw Task18's apply: the handle checks every argument's type
    static MmaPlan.CpAsyncKernel cudaKernelWithout(Class<?> kernels, String name, String droppedCall) {
        TornadoFunctions.Task18 kernel = gpuKernel(kernels, name, HalfFloatArray.class, true, droppedCall);
        return kernel::apply;
    }

    /**
     * The static method {@code name} of {@code code} (a class of this package) with the semantics of TornadoVM's CUDA C
     * ({@link #cudaKernel}), for tests of the emulation itself.
     */
    static MethodHandle cudaMethod(Class<?> code, String name, MethodType type) {
        return gpuMethod(code, name, type, true, null);
    }

    /**
     * The kernel method {@code name} of {@code kernels} (K and V of type {@code kv}) loaded {@link #withGpuSemantics}, as
     * a Task18 that MmaPlan's kernel types adapt with {@code ::apply} (MethodHandleProxies: an unchecked exception passes
     * through as it is).
     */
    @SuppressWarnings("rawtypes")
    private static TornadoFunctions.Task18 gpuKernel(Class<?> kernels, String name, Class<?> kv, boolean cuda,
                                                     String droppedCall) {
        MethodType type = MethodType.methodType(void.class, KernelContext.class, LongArray.class, kv, kv, LongArray.class,
                FloatArray.class, FloatArray.class, int.class, int.class, int.class, int.class, int.class, int.class,
                int.class, float.class, int.class, IntArray.class, FloatArray.class);
        return MethodHandleProxies.asInterfaceInstance(TornadoFunctions.Task18.class,
                gpuMethod(kernels, name, type, cuda, droppedCall));
    }

    private static MethodHandle gpuMethod(Class<?> code, String name, MethodType type, boolean cuda, String droppedCall) {
        Class<?> loaded = withGpuSemantics(code, cuda, droppedCall);
        try {
            return MethodHandles.privateLookupIn(loaded, MethodHandles.lookup()).findStatic(loaded, name, type);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot load " + code.getName() + " with " + (cuda ? "CUDA C" : "PTX")
                    + " semantics", e);
        }
    }

    /**
     * {@code code} loaded again, with the classes of its package that it uses (its helpers, such as {@link MmaLayout}: on
     * the GPU Graal inlines them into the kernel, so their arithmetic is the kernel's), by a class loader of their own,
     * every method rewritten: float min/max as the GPU's ({@link #ptxMin}, {@link #ptxMax}), every call to the int-taking
     * KernelContext method {@code droppedCall} removed (where not null), and, {@code cuda}, the integer arithmetic of
     * {@link CudaIntegerSemantics}. KernelEmulator itself is shared with the caller.
     */
    private static Class<?> withGpuSemantics(Class<?> code, boolean cuda, String droppedCall) {
        ClassDesc math = ClassDesc.of("java.lang.Math");
        ClassDesc emulator = ClassDesc.of(KernelEmulator.class.getName());
        CodeTransform semantics = (builder, element) -> {
            if (element instanceof InvokeInstruction call && call.owner().asSymbol().equals(math)
                    && call.typeSymbol().descriptorString().equals("(FF)F")
                    && (call.name().equalsString("min") || call.name().equalsString("max"))) {
                builder.invokestatic(emulator, call.name().equalsString("min") ? "ptxMin" : "ptxMax", call.typeSymbol());
            } else if (droppedCall != null && element instanceof InvokeInstruction call && call.name().equalsString(droppedCall)
                    && call.typeSymbol().descriptorString().equals("(I)V")) {
                builder.pop().pop();   // its int argument and the context
            } else {
                builder.with(element);
            }
        };
        CodeTransform transform = cuda ? semantics.andThen(CodeTransform.ofStateful(CudaIntegerSemantics::new)) : semantics;
        ClassLoader loader = new RewritingLoader(code.getClassLoader(), transform);
        try {
            return loader.loadClass(code.getName());
        } catch (ClassNotFoundException e) {
            throw new IllegalStateException("cannot load " + code.getName(), e);
        }
    }

    /**
     * Loads the classes of this package (not its subpackages), except KernelEmulator and its nested classes, itself, from
     * its parent's class files, every method body rewritten by {@code transform}; every other class from its parent.
     */
    private static final class RewritingLoader extends ClassLoader {
        private static final String SHARED = KernelEmulator.class.getName();
        private static final String PACKAGE = KernelEmulator.class.getPackageName() + ".";
        private final CodeTransform transform;

        RewritingLoader(ClassLoader parent, CodeTransform transform) {
            super(parent);
            this.transform = transform;
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (!name.startsWith(PACKAGE) || name.indexOf('.', PACKAGE.length()) >= 0 || name.equals(SHARED)
                    || name.startsWith(SHARED + "$")) {
                return super.loadClass(name, resolve);
            }
            synchronized (getClassLoadingLock(name)) {
                Class<?> loaded = findLoadedClass(name);
                return loaded != null ? loaded : findClass(name);
            }
        }

        @Override
        protected Class<?> findClass(String name) throws ClassNotFoundException {
            byte[] bytes;
            try (InputStream in = getParent().getResourceAsStream(name.replace('.', '/') + ".class")) {
                if (in == null) {
                    throw new ClassNotFoundException(name);
                }
                bytes = in.readAllBytes();
            } catch (IOException e) {
                throw new ClassNotFoundException(name, e);
            }
            ClassFile files = ClassFile.of();
            byte[] rewritten = files.transformClass(files.parse(bytes), ClassTransform.transformingMethodBodies(transform));
            return defineClass(name, rewritten, 0, rewritten.length);
        }
    }

    /**
     * {@code (x >>> s) & m} as TornadoVM's CUDA C computes it ({@link CudaIntegerSemantics}): the mask gone where it has
     * every bit that {@code x >>> s} may have set, and {@code >>>} an arithmetic shift.
     */
    public static int cudaUnsignedShiftAnd(int x, int s, int m) {
        int mayBeSet = -1 >>> s;
        return (m & mayBeSet) == mayBeSet ? x >> s : (x >> s) & m;
    }

    /** {@code (x >>> s) & m} of a long as TornadoVM's CUDA C computes it: see {@link #cudaUnsignedShiftAnd(int, int, int)}. */
    public static long cudaUnsignedShiftAnd(long x, int s, long m) {
        long mayBeSet = -1L >>> s;
        return (m & mayBeSet) == mayBeSet ? x >> s : (x >> s) & m;
    }

    /** {@code (int) (x >>> s) & m} as TornadoVM's CUDA C computes it: see {@link #cudaUnsignedShiftAnd(int, int, int)}. */
    public static int cudaUnsignedShiftNarrowAnd(long x, int s, int m) {
        int mayBeSet = (int) (-1L >>> s);
        return (m & mayBeSet) == mayBeSet ? (int) (x >> s) : (int) (x >> s) & m;
    }

    /**
     * The integer arithmetic of the CUDA C that TornadoVM 5.2's CUDA backend generates, where it differs from Java's, as a
     * rewrite of a method's bytecode (a stateful CodeTransform: it holds back the instructions that may begin a pattern
     * until the pattern completes or breaks). Three behaviours, of the backend or of Graal (25.0.2) before it, checked
     * in the CUDA C it generated for tornado-simt and tornado-mma:
     * <ol>
     *   <li>{@code >>>} is C's {@code >>} on the value's signed type, an arithmetic shift
     *       ({@code CUDAArithmeticTool.emitUShr} writes {@code >>} for both shifts): every {@code IUSHR}/{@code LUSHR}
     *       becomes {@code ISHR}/{@code LSHR}.</li>
     *   <li>Graal drops a mask that it proves redundant ({@code AndNode}'s canonicalization, from its input's stamp):
     *       {@code (x >>> s) & m}, m a constant that has every bit {@code x >>> s} may have set ({@code -1 >>> s} of x's
     *       width; its low 32 bits where an {@code L2I} comes between, {@code (int) (x >>> s) & m}), is {@code x >>> s},
     *       which the backend then writes {@code x >> s}: so {@code (int) ((la >>> 48) & 0xFFFF)} is C's
     *       {@code (int) (la >> 48)}, sign-extended where la is negative. Such a mask-after-{@code >>>} becomes a call to
     *       {@link #cudaUnsignedShiftAnd}/{@link #cudaUnsignedShiftNarrowAnd}, which decide with the amount s that the
     *       shift has at run time: Graal inlines every helper, and the kernels call theirs with constant arguments, so
     *       an amount that the bytecode computes (as {@code 16 * c}) is in general a constant there too. (Where it truly
     *       varies, Graal folds only a mask that covers every amount it may take: there the emulator is stricter than
     *       the GPU.)</li>
     *   <li>Graal writes a signed division by a constant power of two, {@code x / 2^k} ({@code SignedDivNode}'s
     *       canonicalization), as {@code (x + ((x >> 31) >>> (32 - k))) >> k} (63 and 64 for a long; negated for a
     *       divisor -2^k), and the backend its {@code >>>} as {@code >>}: for a negative x that is
     *       {@code (x - 1) >> k}, floor((x - 1) / 2^k) rather than Java's truncation. Every {@code IDIV}/{@code LDIV} by
     *       a constant +-2^k (k >= 1; not the width's minimum value, which Graal leaves alone) becomes that sequence.
     *       (Graal writes a plain {@code x >> k} where x's stamp shows it non-negative, which agrees, or its low k bits
     *       zero, which the emulator cannot know: there it is stricter than the GPU.) A remainder by a power of two is
     *       left alone: Graal keeps it a C {@code %} (truncating, as Java's) unless x's sign is known or the result is
     *       only compared with 0, and then writes masks that agree with Java.</li>
     * </ol>
     */
    private static final class CudaIntegerSemantics implements CodeTransform {
        private static final ClassDesc EMULATOR = ClassDesc.of(KernelEmulator.class.getName());
        /** Instructions held back: a proper prefix of a pattern ({@code >>>}, L2I, mask constant; or a divisor). */
        private final List<Instruction> held = new ArrayList<>();

        @Override
        public void accept(CodeBuilder code, CodeElement element) {
            if (!(element instanceof Instruction instruction)) {   // a label, a line number: no pattern spans it
                atEnd(code);
                code.with(element);
                return;
            }
            held.add(instruction);
            while (!held.isEmpty() && !rewrote(code) && !isPrefix()) {
                emit(code, held.removeFirst());   // the first can begin no pattern here: the rest might
            }
        }

        @Override
        public void atEnd(CodeBuilder code) {
            held.forEach(i -> emit(code, i));
            held.clear();
        }

        private static void emit(CodeBuilder code, Instruction instruction) {
            switch (instruction.opcode()) {
                case IUSHR -> code.ishr();
                case LUSHR -> code.lshr();
                default -> code.with(instruction);
            }
        }

        private Object constant(int i) {
            return held.size() > i && held.get(i) instanceof ConstantInstruction c ? c.constantValue() : null;
        }

        private Opcode op(int i) {
            return held.size() > i ? held.get(i).opcode() : null;
        }

        /** The held instructions can begin a pattern (and do not complete one). */
        private boolean isPrefix() {
            int n = held.size();
            int mask = maskIndex();
            return n == 1 && (constant(0) instanceof Integer || constant(0) instanceof Long)
                    || mask > 0 && (n <= mask || n == mask + 1 && maskFits(mask));
        }

        /** Where the held instructions complete a pattern, writes them as CUDA C computes them and returns true. */
        private boolean rewrote(CodeBuilder code) {
            int n = held.size();
            int mask = maskIndex();
            if (n == 2 && (op(1) == Opcode.IDIV && constant(0) instanceof Integer d && d != Integer.MIN_VALUE
                    || op(1) == Opcode.LDIV && constant(0) instanceof Long) && powerOfTwo(((Number) constant(0)).longValue())) {
                divide(code, op(1) == Opcode.LDIV, ((Number) constant(0)).longValue());
            } else if (mask > 0 && n == mask + 2 && maskFits(mask) && op(n - 1) == and(mask)) {
                code.with(held.get(mask));   // the mask: x, s and m on the stack
                if (op(0) == Opcode.IUSHR) {
                    code.invokestatic(EMULATOR, "cudaUnsignedShiftAnd", MethodTypeDesc.ofDescriptor("(III)I"));
                } else if (mask == 1) {
                    code.invokestatic(EMULATOR, "cudaUnsignedShiftAnd", MethodTypeDesc.ofDescriptor("(JIJ)J"));
                } else {
                    code.invokestatic(EMULATOR, "cudaUnsignedShiftNarrowAnd", MethodTypeDesc.ofDescriptor("(JII)I"));
                }
            } else {
                return false;
            }
            held.clear();
            return true;
        }

        /**
         * Where the held instructions begin with a {@code >>>}, the index of the mask constant that may follow (2 after an
         * {@code L2I}, else 1); else -1.
         */
        private int maskIndex() {
            if (op(0) != Opcode.IUSHR && op(0) != Opcode.LUSHR) {
                return -1;
            }
            return op(0) == Opcode.LUSHR && op(1) == Opcode.L2I ? 2 : 1;
        }

        /** The and that applies the mask at {@code mask}: LAND after a long shift not narrowed, else IAND. */
        private Opcode and(int mask) {
            return op(0) == Opcode.LUSHR && mask == 1 ? Opcode.LAND : Opcode.IAND;
        }

        private boolean maskFits(int mask) {
            return and(mask) == Opcode.LAND ? constant(mask) instanceof Long : constant(mask) instanceof Integer;
        }

        /**
         * +-2^k with k >= 1, not the minimum value of its width (Graal leaves a division by that, whose absolute value
         * overflows, alone; the caller excludes the int's).
         */
        private static boolean powerOfTwo(long d) {
            long abs = Math.abs(d);
            return abs > 1 && (abs & (abs - 1)) == 0;
        }

        /** x / d on the stack, d = +-2^k: {@code (x + ((x >> (w - 1)) >> (w - k))) >> k}, negated for a negative d. */
        private static void divide(CodeBuilder code, boolean wide, long d) {
            int k = Long.numberOfTrailingZeros(Math.abs(d));
            if (wide) {
                code.dup2().loadConstant(63).lshr().loadConstant(64 - k).lshr().ladd().loadConstant(k).lshr();
            } else {
                code.dup().loadConstant(31).ishr().loadConstant(32 - k).ishr().iadd().loadConstant(k).ishr();
            }
            if (d < 0) {
                if (wide) {
                    code.lneg();
                } else {
                    code.ineg();
                }
            }
        }
    }

    /** Bytes of local memory one workgroup of the last {@link #launch} allocated (its static shared memory). */
    static int localBytesOfLastLaunch() {
        return lastLocalBytes;
    }

    /** Local array {@code index} (in allocation order) of the last workgroup of the last {@link #launch}, as it ended. */
    static Object localArrayOfLastLaunch(int index) {
        return lastLocalArrays.get(index);
    }

    /** Runs {@code groups} workgroups of {@code threads} threads, one workgroup after the other. */
    public static void launch(int groups, int threads, Kernel kernel) {
        for (int group = 0; group < groups; group++) {
            Workgroup workgroup = new Workgroup(threads);
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Thread> running = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                EmulatedContext kc = new EmulatedContext(workgroup, group, groups, t, threads);
                running.add(Thread.ofVirtual().start(() -> {
                    try {
                        kernel.run(kc);
                        kc.requireNoCopyInFlight();
                    } catch (Throwable e) {
                        if (failure.compareAndSet(null, e)) {
                            workgroup.abort();
                        }
                    }
                }));
            }
            for (Thread thread : running) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException(e);
                }
            }
            if (failure.get() != null) {
                throw new IllegalStateException("workgroup " + group + " failed", failure.get());
            }
            lastLocalBytes = workgroup.localBytes();
            lastLocalArrays = List.copyOf(workgroup.localArrays);
        }
    }

    /** State shared by the threads of one workgroup. */
    private static final class Workgroup {
        final CyclicBarrier barrier;
        final List<Object> localArrays = new ArrayList<>();
        final Warp[] warps;

        /** The cp.async copies that threads at the barrier waited for: they land as the last thread arrives. */
        private final List<Copy> landing = new ArrayList<>();

        Workgroup(int threads) {
            this.barrier = new CyclicBarrier(threads, this::land);
            this.warps = new Warp[(threads + 31) / 32];
            for (int w = 0; w < warps.length; w++) {
                warps[w] = new Warp(Math.min(32, threads - 32 * w));
            }
        }

        synchronized void landAtBarrier(List<Copy> copies) {
            landing.addAll(copies);
        }

        private synchronized void land() {
            landing.forEach(Copy::land);
            landing.clear();
        }

        synchronized Object localArray(int index, IntFunction<Object> create, int size) {
            while (localArrays.size() <= index) {
                localArrays.add(create.apply(size));
            }
            return localArrays.get(index);
        }

        synchronized int localBytes() {
            int bytes = 0;
            for (Object array : localArrays) {
                bytes += (array instanceof HalfFloat[] ? 2 : 4) * java.lang.reflect.Array.getLength(array);
            }
            return bytes;
        }

        void abort() {
            barrier.reset();
            for (Warp warp : warps) {
                warp.barrier.reset();
            }
        }
    }

    /** The 32 lanes' operands of one warp-wide mma. */
    private static final class Warp {
        final CyclicBarrier barrier;
        final int lanes;
        final HalfFloat[][] a = new HalfFloat[32][];
        final HalfFloat[][] b = new HalfFloat[32][];
        final float[] shuffled = new float[32];
        final int[] rowAddress = new int[32];

        Warp(int lanes) {
            this.barrier = new CyclicBarrier(lanes);
            this.lanes = lanes;
        }
    }

    /**
     * When an emulated cp.async copy ({@code asyncCopyToLocal}) lands in local memory. The hardware lands it at some
     * time between its issue and the {@code asyncCopyWaitGroup} that covers it, and other threads may rely on it only
     * after a barrier that follows that wait; the two extremes each expose one kind of mistake.
     */
    public enum CopyLanding {
        /**
         * At the first {@code localBarrier} after a wait that covers it (the default): a reader with no wait or no barrier
         * between the copy and its read sees the old contents.
         */
        AT_BARRIER_AFTER_WAIT,
        /** At issue: a copy into a buffer that other threads may still be reading (no barrier before it) overwrites it under them. */
        AT_ISSUE
    }

    private static volatile CopyLanding copyLanding = CopyLanding.AT_BARRIER_AFTER_WAIT;

    /** Sets when emulated cp.async copies land (until set again); see {@link CopyLanding}. */
    static void copiesLand(CopyLanding landing) {
        copyLanding = landing;
    }

    /** One emulated cp.async copy: the 32-bit value it read, for its destination. */
    private record Copy(int[] tile, int index, int value) {
        void land() {
            tile[index] = value;
        }
    }

    private static final class EmulatedContext extends KernelContext {
        private final Workgroup workgroup;
        private final int lane;
        private final Warp warp;
        private int allocations;
        /** This thread's cp.async copies: issued since the last commit, committed groups in flight, waited for. */
        private List<Copy> uncommitted = new ArrayList<>();
        private final java.util.ArrayDeque<List<Copy>> inFlight = new java.util.ArrayDeque<>();
        private final List<Copy> waited = new ArrayList<>();
        private final CopyLanding landing = copyLanding;

        EmulatedContext(Workgroup workgroup, int group, int groups, int t, int threads) {
            this.workgroup = workgroup;
            this.lane = t & 31;
            this.warp = workgroup.warps[t >> 5];
            set("localIdx", t);
            set("groupIdx", group);
            set("globalIdx", group * threads + t);
            set("localGroupSizeX", threads);
            set("globalGroupSizeX", groups * threads);
        }

        private void set(String field, int value) {
            try {
                Field f = KernelContext.class.getField(field);
                f.setAccessible(true);
                f.set(this, value);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot emulate KernelContext." + field, e);
            }
        }

        @Override
        public int[] allocateIntLocalArray(int size) {
            return (int[]) workgroup.localArray(allocations++, int[]::new, size);
        }

        @Override
        public float[] allocateFloatLocalArray(int size) {
            return (float[]) workgroup.localArray(allocations++, float[]::new, size);
        }

        @Override
        public HalfFloat[] allocateHalfFloatLocalArray(int size) {
            return (HalfFloat[]) workgroup.localArray(allocations++, HalfFloat[]::new, size);
        }

        @Override
        public void localBarrier() {
            workgroup.landAtBarrier(waited);   // visible to the workgroup after this barrier, not before every thread is at it
            waited.clear();
            await(workgroup.barrier);
        }

        /**
         * {@code cp.async.ca.shared.global [tile + 4 index], [src + 16 + 2 srcIndex], 4} as TornadoVM's CUDA backend lowers
         * it ({@code CpAsyncCopyStmt}: the source past the Java heap's short[] header, 16 bytes, not past
         * {@code ARRAY_HEADER}): elements srcIndex and srcIndex + 1, the first in the low half.
         */
        @Override
        public void asyncCopyToLocal(int[] tile, int index, HalfFloatArray src, int srcIndex) {
            long at = MmaCpAsyncKernels.CP_ASYNC_HEADER_BYTES + 2L * srcIndex;
            if (index < 0 || index >= tile.length || at < 0 || at + 4 > src.getSegmentWithHeader().byteSize()) {
                throw new IndexOutOfBoundsException("cp.async of element " + srcIndex + " into int " + index + " of "
                        + tile.length);
            }
            int value = src.getSegmentWithHeader().get(ValueLayout.JAVA_INT_UNALIGNED, at);
            Copy copy = new Copy(tile, index, value);
            if (landing == CopyLanding.AT_ISSUE) {
                copy.land();
            } else {
                uncommitted.add(copy);
            }
        }

        @Override
        public void asyncCopyCommit() {
            inFlight.addLast(uncommitted);
            uncommitted = new ArrayList<>();
        }

        /** {@code cp.async.wait_group groups}: every committed group but the {@code groups} newest has landed for this thread. */
        @Override
        public void asyncCopyWaitGroup(int groups) {
            while (inFlight.size() > groups) {
                waited.addAll(inFlight.removeFirst());
            }
        }

        /** A kernel that ends with copies not waited for, or waited for but never published by a barrier, lost them. */
        void requireNoCopyInFlight() {
            int pending = uncommitted.size() + waited.size() + inFlight.stream().mapToInt(List::size).sum();
            if (pending > 0) {
                throw new IllegalStateException(pending + " cp.async copies of thread " + localIdx
                        + " were never waited for and published by a barrier");
            }
        }

        private static void await(CyclicBarrier barrier) {
            try {
                barrier.await();
            } catch (InterruptedException | BrokenBarrierException e) {
                throw new IllegalStateException("barrier broken: another thread failed", e);
            }
        }

        /**
         * {@code shfl.sync.down.b32 d, val, delta, 31, 0xFFFFFFFF} (TornadoVM's lowering): the value of lane
         * lane + (delta & 31), or this lane's own where that is past lane 31.
         */
        @Override
        public float simdShuffleDown(float val, int delta) {
            warp.shuffled[lane] = val;
            await(warp.barrier);
            int from = lane + (delta & 31);
            float result = from < warp.lanes ? warp.shuffled[from] : val;
            await(warp.barrier);   // nobody overwrites the values before every lane has read them
            return result;
        }

        /** {@code shfl.sync.idx.b32 d, val, 0, 31, 0xFFFFFFFF}: lane 0's value. */
        @Override
        public float simdBroadcastFirst(float val) {
            warp.shuffled[lane] = val;
            await(warp.barrier);
            float result = warp.shuffled[0];
            await(warp.barrier);
            return result;
        }

        @Override
        public float simdSum(float val) {
            throw new UnsupportedOperationException("simdSum is not emulated");
        }

        @Override
        public float[] mmaFragment(float v) {
            return new float[] {v, v, v, v};
        }

        /** The 16 bits at a byte address of an int tile, as they are (fp16 or bf16: mma or mmaBF16 decodes them). */
        private static HalfFloat half(int[] tile, int byteAddress) {
            int word = tile[byteAddress >> 2];
            int bits = (byteAddress & 2) == 0 ? word & 0xFFFF : word >>> 16;
            return new HalfFloat((short) bits);
        }

        @Override
        public HalfFloat[] mmaLoadA(int[] tile, int wmmaK) {
            return mmaLoadA(tile, wmmaK, 0);
        }

        @Override
        public HalfFloat[] mmaLoadA(int[] tile, int wmmaK, int byteOffset) {
            // ldmatrix.x4 as TornadoVM lowers it: lane l supplies the address of row 8 ((l / 8) % 2) + l % 8, byte
            // 16 (l / 16) of that row; matrix j (register j) is read from the rows lanes 8 j .. 8 j + 7 supplied.
            int group = lane >> 3;
            int[] rows = exchangeRowAddresses(byteOffset + ((group & 1) * 8 + (lane & 7)) * 32 + (group >> 1) * 16);
            int g = lane >> 2;
            int t = lane & 3;
            HalfFloat[] fragment = new HalfFloat[8];
            for (int i = 0; i < 8; i++) {
                int matrix = i >> 1;
                fragment[i] = half(tile, rows[matrix * 8 + g] + (2 * t + (i & 1)) * 2);
            }
            return fragment;
        }

        /** Every lane's ldmatrix row address of this warp-wide load (each lane passes its own). */
        private int[] exchangeRowAddresses(int address) {
            warp.rowAddress[lane] = address;
            await(warp.barrier);
            int[] rows = warp.rowAddress.clone();
            await(warp.barrier);   // nobody overwrites the addresses before every lane has read them
            return rows;
        }

        @Override
        public HalfFloat[] mmaLoadB(int[] tile, int wmmaK) {
            return mmaLoadB(tile, wmmaK, 0);
        }

        @Override
        public HalfFloat[] mmaLoadB(int[] tile, int wmmaK, int byteOffset) {
            return loadTransposedB(byteOffset, false, address -> half(tile, address));
        }

        @Override
        public HalfFloat[] mmaLoadBSwizzled(HalfFloat[] tile, int wmmaK, int byteOffset) {
            return loadTransposedB(byteOffset, true, address -> {
                if ((address & 1) != 0) {
                    throw new IllegalStateException("unaligned fp16 address " + address);
                }
                return tile[address >> 1];
            });
        }

        /**
         * ldmatrix.x2.trans: lanes 0..15 supply rows k = lane % 16 (16-byte rows; matrix 1 = lanes 8..15, 128 bytes
         * on); lane (g, t) gets column g of rows 2 t, 2 t + 1 of each matrix. {@code swizzled}: each lane's in-tile byte
         * offset b is first replaced by b ^ (((b >> 7) & 7) << 4), as TornadoVM's X2_TRANS_SWIZZLE_FP16_STRIDE32 lowering
         * of {@code mmaLoadBSwizzled} does. {@code halfAt} reads the fp16 value at a byte address of the tile.
         */
        private HalfFloat[] loadTransposedB(int byteOffset, boolean swizzled, IntFunction<HalfFloat> halfAt) {
            int group = lane >> 3;
            int inTile = (lane & 7) * 16 + (group & 1) * 128;
            int swizzle = swizzled ? ((inTile >> 7) & 7) << 4 : 0;
            int[] rows = exchangeRowAddresses(byteOffset + (inTile ^ swizzle));
            int g = lane >> 2;
            int t = lane & 3;
            HalfFloat[] fragment = new HalfFloat[4];
            for (int i = 0; i < 4; i++) {
                int k = 2 * t + (i & 1) + 8 * (i >> 1);
                fragment[i] = halfAt.apply(rows[k] + g * 2);
            }
            return fragment;
        }

        @Override
        public float[] mma(HalfFloat[] fragA, HalfFloat[] fragB, float[] fragC, MMAShape shape) {
            return multiply(fragA, fragB, fragC, shape, HalfFloat::getFloat32);
        }

        /** {@code mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32}: the fragments' 16-bit elements are bf16. */
        @Override
        public float[] mmaBF16(HalfFloat[] fragA, HalfFloat[] fragB, float[] fragC, MMAShape shape) {
            return multiply(fragA, fragB, fragC, shape, h -> Float.intBitsToFloat((h.getHalfFloatValue() & 0xFFFF) << 16));
        }

        private float[] multiply(HalfFloat[] fragA, HalfFloat[] fragB, float[] fragC, MMAShape shape,
                                 java.util.function.Function<HalfFloat, Float> decode) {
            if (shape != MMAShape.M16N8K16) {
                throw new UnsupportedOperationException("only m16n8k16 is emulated");
            }
            warp.a[lane] = fragA;
            warp.b[lane] = fragB;
            await(warp.barrier);
            int g = lane >> 2;
            int t = lane & 3;
            float[] d = new float[4];
            for (int i = 0; i < 4; i++) {
                int m = g + 8 * (i >> 1);
                int n = 2 * t + (i & 1);
                float sum = fragC[i];
                for (int k = 0; k < 16; k++) {
                    HalfFloat a = warp.a[(m & 7) * 4 + ((k & 7) >> 1)][2 * ((m >> 3) + 2 * (k >> 3)) + (k & 1)];
                    HalfFloat b = warp.b[n * 4 + ((k & 7) >> 1)][2 * (k >> 3) + (k & 1)];
                    sum += decode.apply(a) * decode.apply(b);
                }
                d[i] = sum;
            }
            await(warp.barrier);   // nobody overwrites the operands before every lane has read them
            return d;
        }

        @Override
        public void mmaStore(float[] fragD, FloatArray c, int tileRow, int tileCol, int dimN) {
            int g = lane >> 2;
            int t = lane & 3;
            for (int i = 0; i < 4; i++) {
                int index = (tileRow + g + 8 * (i >> 1)) * dimN + tileCol + 2 * t + (i & 1);
                c.getSegmentWithHeader().set(ValueLayout.JAVA_FLOAT, mmaStoreByteOffset(index), fragD[i]);
            }
        }
    }
}
