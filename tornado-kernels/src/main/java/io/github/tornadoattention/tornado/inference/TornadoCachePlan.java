package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;

/**
 * A cache plan on a TornadoVM device: a description the caches' task graphs are built for ({@link CacheGraph});
 * a call runs in the graph of the cache it is given. Made before a cache's first attention call, it is part of
 * that cache's graph from the start.
 */
final class TornadoCachePlan extends CacheAttentionPlan {
    private final DeviceState state;

    TornadoCachePlan(TornadoAttentionDevice device, DeviceState state, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        super(device, spec, cacheSpec);
        this.state = state;
        checkServed(device.backendId(), spec, cacheSpec);
    }

    /**
     * Throws an {@link InvalidArgumentException} unless the device of {@code backendId} serves every call of a plan of
     * {@code spec}, now rather than at the first call: the kernels' limits (element type, head dim, features) for
     * each task a cache's graph may run it with. On ptx-tornado only the dense plan that first attends over a cache runs the PTX twin
     * (a graph's one prebuilt task); the other plans and every packed call run the Java cache kernels
     * ({@link CacheGraph}), so a plan must suit both.
     */
    static void checkServed(String backendId, CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        CacheAttentionTasks.check(backendId, spec, cacheSpec);
        if (backendId.equals(Backends.PTX_TORNADO)) {
            try {
                CacheAttentionTasks.check(Backends.TORNADO_SIMT, spec, cacheSpec);
            } catch (InvalidArgumentException e) {
                throw new InvalidArgumentException(e.argument(), e.value(), e.allowed() + " (on ptx-tornado's inference "
                        + "device every plan but a cache's first decode plan, and every packed call, runs the Java cache "
                        + "kernels)");
            }
        }
    }

    @Override
    protected void runDense(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        state.attendDense(cache, spec(), q, o, lse);
    }

    @Override
    protected void runPacked(DeviceTensor q, KvCache cache, DeviceTensor o, DeviceTensor lse) {
        state.attendPacked(cache, spec(), q, o, lse);
    }

    @Override
    protected void release() {
        state.forgetPlan(this);
    }
}
