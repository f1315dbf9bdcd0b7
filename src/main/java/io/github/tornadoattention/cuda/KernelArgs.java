package io.github.tornadoattention.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * A kernel's argument block for cuLaunchKernel, made once per launch site and rewritten per call:
 * one 8-byte slot per argument (a device pointer or an int) and the {@code void**} array pointing
 * at them. The driver copies the values at launch, so a slot may change right after.
 */
final class KernelArgs {
    private final MemorySegment values;
    private final MemorySegment pointers;

    KernelArgs(Arena arena, int count) {
        values = arena.allocate(JAVA_LONG, count);
        pointers = arena.allocate(ADDRESS, count);
        for (int i = 0; i < count; i++) {
            pointers.setAtIndex(ADDRESS, i, values.asSlice(8L * i, 8));
        }
    }

    KernelArgs pointer(int index, long address) {
        values.setAtIndex(JAVA_LONG, index, address);
        return this;
    }

    KernelArgs int64(int index, long value) {
        values.setAtIndex(JAVA_LONG, index, value);
        return this;
    }

    KernelArgs integer(int index, int value) {
        values.set(JAVA_INT, 8L * index, value);
        return this;
    }

    MemorySegment segment() {
        return pointers;
    }
}
