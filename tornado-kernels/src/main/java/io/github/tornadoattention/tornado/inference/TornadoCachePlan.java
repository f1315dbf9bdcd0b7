package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
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
        // The kernels' limits (head dim, dtype), checked now rather than at the first call.
        CacheAttentionTasks.check(device.backendId(), spec, cacheSpec);
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
