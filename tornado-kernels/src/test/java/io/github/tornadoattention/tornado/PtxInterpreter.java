package io.github.tornadoattention.tornado;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Runs one thread of a small PTX kernel as TornadoVM's PTX backend (or NVRTC, for its CUDA backend) writes it, with PTX's meaning of each instruction
 * (in particular: {@code shr.b32}/{@code shr.u32} fill with zeros, {@code shr.s32} with the sign; {@code cvt} between
 * integers sign- or zero-extends by the source type and chops to the destination; {@code setp} on floats is ordered),
 * so that a test can check, without a GPU, what the generated code computes rather than what the Java means. Only the
 * instructions such kernels use (integer and fp32 scalar arithmetic, compares, selects, branches, global loads and
 * stores); anything else throws. Kernel parameters are TornadoVM arrays: a 16-byte header, then the elements.
 */
final class PtxInterpreter {
    private static final int HEADER = 16;
    private static final long REGION = 1L << 40;

    private final List<String[]> code = new ArrayList<>();      // {predicate or null, opcode, operands...}
    private final Map<String, Integer> labels = new HashMap<>();
    private final List<String> params = new ArrayList<>();
    private final Map<String, ByteBuffer> memory = new HashMap<>();
    private final Map<String, Long> regs = new HashMap<>();
    private long steps;

    PtxInterpreter(String ptx) {
        String header = ptx.substring(ptx.indexOf(".entry"), ptx.indexOf('{', ptx.indexOf(".entry")));
        for (String p : header.substring(header.indexOf('(') + 1, header.lastIndexOf(')')).split(",")) {
            String[] words = p.trim().split("\\s+");
            params.add(words[words.length - 1]);
        }
        String body = ptx.substring(ptx.indexOf('{', ptx.indexOf(".entry")) + 1, ptx.lastIndexOf('}'));
        for (String raw : body.split("\n")) {
            String line = raw.trim();
            if (line.isEmpty() || line.startsWith(".reg") || line.startsWith("//")) {
                continue;
            }
            if (line.endsWith(":")) {
                labels.put(line.substring(0, line.length() - 1), code.size());
                continue;
            }
            if (!line.endsWith(";")) {
                throw new IllegalArgumentException("not understood: " + line);
            }
            line = line.substring(0, line.length() - 1).trim();
            String predicate = null;
            if (line.startsWith("@")) {
                int space = line.indexOf(' ');
                predicate = line.substring(1, space);
                line = line.substring(space + 1).trim();
            }
            String[] split = line.split("\\s+", 2);
            List<String> instruction = new ArrayList<>();
            instruction.add(predicate);
            instruction.add(split[0]);
            if (split.length > 1) {
                for (String operand : split[1].split(",")) {
                    instruction.add(operand.trim());
                }
            }
            code.add(instruction.toArray(String[]::new));
        }
    }

    /**
     * The names of the last {@code n} parameters: a kernel's arrays (TornadoVM's CUDA backend puts four words of its own
     * first, its PTX backend the kernel context; NVRTC names parameters {@code <entry>_param_<i>}).
     */
    List<String> lastParameters(int n) {
        return params.subList(params.size() - n, params.size());
    }

    /** The array behind parameter {@code name}: {@code bytes} of elements after TornadoVM's header, little-endian. */
    ByteBuffer array(String name, int bytes) {
        if (!params.contains(name)) {
            throw new IllegalArgumentException("no parameter " + name + " in " + params);
        }
        ByteBuffer buffer = ByteBuffer.allocate(HEADER + bytes).order(ByteOrder.LITTLE_ENDIAN);
        memory.put(name, buffer);
        return buffer;
    }

    /** Element {@code i} of a short array / float array parameter, as the kernel sees it. */
    static int shortAt(int i) {
        return HEADER + 2 * i;
    }

    static int floatAt(int i) {
        return HEADER + 4 * i;
    }

    /** Runs the thread with global index {@code thread} (a one-thread block per index) to its {@code ret}. */
    void run(int thread) {
        regs.clear();
        int pc = 0;
        long budget = 1_000_000;
        while (true) {
            if (budget-- == 0) {
                throw new IllegalStateException("ran past a million instructions");
            }
            steps++;
            String[] in = code.get(pc++);
            if (in[0] != null) {
                boolean negate = in[0].startsWith("!");
                boolean p = reg(negate ? in[0].substring(1) : in[0]) != 0;
                if (p == negate) {
                    continue;
                }
            }
            String op = in[1];
            String[] parts = op.split("\\.");
            String name = parts[0];
            String type = parts[parts.length - 1];
            switch (name) {
                case "ret" -> {
                    return;
                }
                case "bra" -> pc = target(in[2]);
                case "ld" -> {
                    String what = in[3].substring(1, in[3].length() - 1);
                    if (parts[1].equals("param")) {
                        set(in[2], base(what));
                    } else {
                        set(in[2], load(address(what), type));
                    }
                }
                case "st" -> store(address(in[2].substring(1, in[2].length() - 1)), type, value(in[3]));
                case "mov" -> set(in[2], special(in[3], thread));
                case "cvt" -> set(in[2], convert(parts, value(in[3])));
                case "cvta" -> set(in[2], value(in[3]));   // generic to global: one address space here
                case "setp" -> set(in[2], compare(parts[1], type, value(in[3]), value(in[4])) ? 1 : 0);
                case "testp" -> {
                    float f = Float.intBitsToFloat((int) value(in[3]));
                    if (!parts[1].equals("normal") || !type.equals("f32")) {
                        throw unsupported(in);
                    }
                    set(in[2], Float.isFinite(f) && Math.abs(f) >= Float.MIN_NORMAL ? 1 : 0);
                }
                case "selp" -> set(in[2], value(in[5]) != 0 ? value(in[3]) : value(in[4]));
                case "abs" -> set(in[2], type.equals("f32") ? f(Math.abs(fv(value(in[3])))) : integer(type, Math.abs(integer(type, value(in[3])))));
                case "not" -> set(in[2], integer(type, ~value(in[3])));
                case "neg" -> set(in[2], type.equals("f32") ? f(-fv(value(in[3]))) : integer(type, -value(in[3])));
                case "and", "or", "xor", "shl", "shr", "add", "sub", "mul", "div", "rem", "min", "max" ->
                        set(in[2], binary(name, parts, type, value(in[3]), value(in[4]), in));
                case "mad", "fma" -> {
                    long a = value(in[3]);
                    long b = value(in[4]);
                    long c = value(in[5]);
                    if (type.equals("f32")) {
                        set(in[2], f(Math.fma(fv(a), fv(b), fv(c))));     // mad.rn.f32 is a fused multiply-add
                    } else if (parts[1].equals("lo")) {
                        set(in[2], integer(type, a * b + c));
                    } else {
                        throw unsupported(in);
                    }
                }
                default -> throw unsupported(in);
            }
        }
    }

    long steps() {
        return steps;
    }

    private static IllegalArgumentException unsupported(String[] in) {
        return new IllegalArgumentException("PtxInterpreter does not know " + String.join(" ", java.util.Arrays.copyOfRange(in, 1, in.length)));
    }

    private int target(String label) {
        Integer at = labels.get(label);
        if (at == null) {
            throw new IllegalArgumentException("no label " + label);
        }
        return at;
    }

    private long base(String param) {
        return (params.indexOf(param) + 1L) * REGION;
    }

    private long address(String expression) {
        long a = value(expression.replace("+", " ").trim().split("\\s+")[0]);
        if (expression.contains("+")) {
            a += Long.parseLong(expression.substring(expression.indexOf('+') + 1).trim());
        }
        return a;
    }

    private ByteBuffer region(long address) {
        String param = params.get((int) (address / REGION) - 1);
        ByteBuffer buffer = memory.get(param);
        if (buffer == null) {
            throw new IllegalStateException("the kernel touches parameter " + param + ", which has no array");
        }
        return buffer;
    }

    private long load(long address, String type) {
        ByteBuffer b = region(address);
        int at = (int) (address % REGION);
        return switch (type) {
            case "s16" -> b.getShort(at);
            case "u16", "b16" -> b.getShort(at) & 0xFFFF;
            case "s32", "b32", "u32", "f32" -> integer(type, b.getInt(at));
            case "s64", "u64", "b64" -> b.getLong(at);
            default -> throw new IllegalArgumentException("load ." + type);
        };
    }

    private void store(long address, String type, long value) {
        ByteBuffer b = region(address);
        int at = (int) (address % REGION);
        switch (type) {
            case "s16", "u16", "b16" -> b.putShort(at, (short) value);
            case "s32", "b32", "u32", "f32" -> b.putInt(at, (int) value);
            case "s64", "u64", "b64" -> b.putLong(at, value);
            default -> throw new IllegalArgumentException("store ." + type);
        }
    }

    private long special(String operand, int thread) {
        return switch (operand) {
            case "%tid.x" -> thread;
            case "%ntid.x", "%nctaid.x" -> 1;
            case "%ctaid.x", "%tid.y", "%tid.z", "%ctaid.y", "%ctaid.z" -> 0;
            case "%ntid.y", "%ntid.z", "%nctaid.y", "%nctaid.z" -> 1;
            default -> value(operand);
        };
    }

    private long reg(String name) {
        Long v = regs.get(name);
        if (v == null) {
            throw new IllegalStateException("register " + name + " read before it is written");
        }
        return v;
    }

    private void set(String name, long value) {
        regs.put(name, value);
    }

    /** A register's bits, or an immediate: decimal integer, 0Fxxxxxxxx (f32 bits), 0Dxxxxxxxxxxxxxxxx (f64 bits). */
    private long value(String operand) {
        if ((operand.startsWith("0F") || operand.startsWith("0f")) && operand.length() == 10) {   // NVRTC: 0f
            return Long.parseLong(operand.substring(2), 16);
        }
        if ((operand.startsWith("0D") || operand.startsWith("0d")) && operand.length() == 18) {
            return Long.parseUnsignedLong(operand.substring(2), 16);
        }
        if (operand.matches("-?\\d+")) {
            return Long.parseLong(operand);
        }
        return reg(operand);
    }

    private static float fv(long bits) {
        return Float.intBitsToFloat((int) bits);
    }

    private static long f(float x) {
        return Float.floatToRawIntBits(x) & 0xFFFFFFFFL;
    }

    /** {@code v} held as a value of {@code type}: 32-bit signed sign-extended, 32-bit others zero-extended. */
    private static long integer(String type, long v) {
        return switch (type) {
            case "s32" -> (int) v;
            case "u32", "b32", "f32" -> v & 0xFFFFFFFFL;
            case "s16" -> (short) v;
            case "u16", "b16" -> v & 0xFFFF;
            case "s64", "u64", "b64" -> v;
            case "pred" -> v & 1;
            default -> throw new IllegalArgumentException("type ." + type);
        };
    }

    private static long binary(String name, String[] parts, String type, long a, long b, String[] in) {
        if (type.equals("f32")) {
            float x = fv(a);
            float y = fv(b);
            return switch (name) {
                case "add" -> f(x + y);
                case "sub" -> f(x - y);
                case "mul" -> f(x * y);
                case "div" -> f(x / y);   // div.full.f32 is within 2 ulp of this; exact for powers of two
                case "min" -> f(Math.min(x, y));
                case "max" -> f(Math.max(x, y));
                default -> throw unsupported(in);
            };
        }
        boolean is64 = type.endsWith("64");
        int width = is64 ? 64 : 32;
        switch (name) {
            case "shl":
                return integer(type, b >= width ? 0 : a << b);
            case "shr":
                if (type.startsWith("s")) {   // arithmetic
                    return integer(type, is64 ? a >> Math.min(b, 63) : (int) a >> Math.min(b, 31));
                }
                // .b and .u: zero fill
                return integer(type, b >= width ? 0 : is64 ? a >>> b : (a & 0xFFFFFFFFL) >>> b);
            case "and":
                return integer(type, a & b);
            case "or":
                return integer(type, a | b);
            case "xor":
                return integer(type, a ^ b);
            case "add":
                return integer(type, a + b);
            case "sub":
                return integer(type, a - b);
            case "mul":
                if (parts.length > 2 && parts[1].equals("lo")) {
                    return integer(type, a * b);
                }
                if (parts.length > 2 && parts[1].equals("wide") && !is64) {   // 32 x 32 -> 64 bits
                    return type.startsWith("s") ? (long) (int) a * (int) b : (a & 0xFFFFFFFFL) * (b & 0xFFFFFFFFL);
                }
                throw unsupported(in);
            case "div":
                if (type.equals("s32")) {
                    return integer(type, (int) a / (int) b);
                }
                throw unsupported(in);
            case "rem":
                if (type.equals("s32")) {
                    return integer(type, (int) a % (int) b);
                }
                throw unsupported(in);
            case "min":
                return type.startsWith("s") ? Math.min(a, b) : integer(type, Long.compareUnsigned(a, b) < 0 ? a : b);
            case "max":
                return type.startsWith("s") ? Math.max(a, b) : integer(type, Long.compareUnsigned(a, b) > 0 ? a : b);
            default:
                throw unsupported(in);
        }
    }

    private static boolean compare(String cmp, String type, long a, long b) {
        if (type.equals("f32")) {
            float x = fv(a);
            float y = fv(b);
            boolean unordered = Float.isNaN(x) || Float.isNaN(y);
            return switch (cmp) {
                case "eq" -> x == y;
                case "ne" -> !unordered && x != y;
                case "lt" -> x < y;
                case "le" -> x <= y;
                case "gt" -> x > y;
                case "ge" -> x >= y;
                case "equ" -> unordered || x == y;
                case "neu" -> unordered || x != y;
                case "ltu" -> unordered || x < y;
                case "leu" -> unordered || x <= y;
                case "gtu" -> unordered || x > y;
                case "geu" -> unordered || x >= y;
                case "num" -> !unordered;
                case "nan" -> unordered;
                default -> throw new IllegalArgumentException("setp." + cmp);
            };
        }
        long x = integer(type, a);
        long y = integer(type, b);
        int c = type.startsWith("s") ? Long.compare(x, y) : Long.compareUnsigned(x, y);
        return switch (cmp) {
            case "eq" -> c == 0;
            case "ne" -> c != 0;
            case "lt", "lo" -> c < 0;
            case "le", "ls" -> c <= 0;
            case "gt", "hi" -> c > 0;
            case "ge", "hs" -> c >= 0;
            default -> throw new IllegalArgumentException("setp." + cmp);
        };
    }

    /** cvt[.rounding].dst.src */
    private static long convert(String[] parts, long v) {
        String dst = parts[parts.length - 2];
        String src = parts[parts.length - 1];
        String rounding = parts.length > 3 ? parts[1] : "";
        boolean floatDst = dst.startsWith("f");
        boolean floatSrc = src.startsWith("f");
        if (!floatDst && !floatSrc) {
            return integer(dst, integer(src, v));   // extend by the source's signedness, chop to the destination
        }
        if (floatDst && !floatSrc && dst.equals("f32")) {
            long x = integer(src, v);
            if (!rounding.equals("rn")) {
                throw new IllegalArgumentException("cvt." + rounding + "." + dst + "." + src);
            }
            if (src.equals("u64")) {
                throw new IllegalArgumentException("cvt." + rounding + "." + dst + "." + src);
            }
            return f((float) x);
        }
        if (!floatDst && src.equals("f32")) {
            float x = fv(v);
            double r = switch (rounding) {
                case "rzi" -> x < 0 ? Math.ceil(x) : Math.floor(x);
                case "rni" -> Math.rint(x);
                case "rmi" -> Math.floor(x);
                case "rpi" -> Math.ceil(x);
                default -> throw new IllegalArgumentException("cvt." + rounding + "." + dst + "." + src);
            };
            if (Double.isNaN(r)) {
                return 0;
            }
            return switch (dst) {   // saturating, as PTX's float to integer conversions
                case "s32" -> integer(dst, (long) Math.max(Integer.MIN_VALUE, Math.min(Integer.MAX_VALUE, r)));
                case "u32" -> (long) Math.max(0, Math.min(4294967295.0, r));
                case "s64" -> (long) r;
                default -> throw new IllegalArgumentException("cvt." + rounding + "." + dst + "." + src);
            };
        }
        throw new IllegalArgumentException("cvt." + dst + "." + src);
    }
}
