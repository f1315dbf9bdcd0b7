"""The manifest's entries loaded on the GPU and their launches: each grid from the entry's tile in
the manifest (Br, threads, dynamic shared memory), the arguments in the entry's ABI (CUDA driver,
or TornadoVM's: a kernel-context word first and every array behind its header)."""
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import manifest
from problem import with_header
from report import log

# cuFuncGetAttribute
ATTR_STATIC_SMEM, ATTR_LOCAL_BYTES, ATTR_REGISTERS = 1, 3, 4


class Kernel:
    """A manifest entry with its function handle and what the driver's JIT made of it on this GPU."""

    def __init__(self, drv, mod, m):
        self.m = m
        self.name, self.module, self.kind = m.entry, m.module, m.kind
        self.D, self.Br, self.Bc, self.threads = m.head_dim, m.br, m.bc, m.threads
        self.tornado, self.header, self.ablation = m.tornado, m.header_bytes, m.ablation
        self.dyn = m.smem_dynamic
        self.f = drv.function(mod, m.entry)
        self.regs = drv.attr(self.f, ATTR_REGISTERS)
        self.static_smem = drv.attr(self.f, ATTR_STATIC_SMEM)
        self.local = drv.attr(self.f, ATTR_LOCAL_BYTES)
        if self.static_smem != m.smem_static:
            log(f"  note: {self.name}: the driver's JIT gives {self.static_smem} bytes of static shared memory, "
                f"ptxas {m.smem_static} (manifest)")
        if self.dyn:
            drv.set_max_dyn_smem(self.f, self.dyn)
        self.occ = drv.occupancy(self.f, self.threads, self.dyn)

    def row(self):
        return dict(name=self.name, file=self.module, regs=self.regs, static_smem=self.static_smem,
                    dyn_smem=self.dyn, local=self.local, ctas_per_sm=self.occ)


def load_kernels(drv, entries):
    """JIT the modules of `entries` (in parallel threads: ctypes drops the GIL) and wrap each entry."""
    modules = list(dict.fromkeys(e.module for e in entries))
    t0 = time.time()
    with ThreadPoolExecutor(len(modules)) as ex:
        loaded = dict(zip(modules, ex.map(lambda fn: drv.load(os.path.join(manifest.PTX_DIR, fn)), modules)))
    kernels = [Kernel(drv, loaded[e.module], e) for e in entries]
    for fn in modules:
        log(f"loaded {fn}: {sum(e.module == fn for e in entries)} entries")
    log(f"JIT of {len(modules)} files: {time.time() - t0:.1f}s")
    return kernels


class Runner:
    def __init__(self, drv, kernels, num_sms):
        self.drv, self.num_sms = drv, num_sms
        self.by_name = {k.name: k for k in kernels}

    def launch(self, k, grid, args):
        self.drv.launch(k.f, grid, k.threads, k.dyn, args)

    @staticmethod
    def prefill_grid(k, pb):
        return (math.ceil(pb.Sq / k.Br), pb.B * pb.Hq, 1)

    @staticmethod
    def split_grid(k, pb, splits):
        """Split-KV decode (and fused decode): packed rows of the query heads of one KV head x Sq."""
        return (splits, math.ceil(pb.Hq // pb.Hkv * pb.Sq / k.Br), pb.B * pb.Hkv)

    def run_fwd(self, e, pb, o, lse):
        grid = self.prefill_grid(e, pb)
        if e.tornado:
            qb, _ = with_header(pb.q, e.header)
            kb, _ = with_header(pb.k, e.header)
            vb, _ = with_header(pb.v, e.header)
            ob, ov = with_header(o, e.header)
            lb, lv = with_header(lse, e.header)
            prm = pb.params(ov, header=e.header)
            self.launch(e, grid, [0, qb.data_ptr(), kb.data_ptr(), vb.data_ptr(), ob.data_ptr(), lb.data_ptr(),
                                  prm.data_ptr()])
            torch.cuda.synchronize()
            o.copy_(ov)
            lse.copy_(lv)
        else:
            prm = pb.params(o)
            self.launch(e, grid, [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                  prm.data_ptr()])
            return prm

    def decode_launcher(self, es, ec, pb, o, lse, splits):
        """Returns a closure launching split + combine (CUDA-driver entries, device-resident) and the
        buffers it needs kept alive."""
        assert not es.tornado and not ec.tornado, "split and combine are CUDA-driver entries"
        rows = pb.B * pb.Hq * pb.Sq
        op = torch.full((splits * rows * pb.D,), float("nan"), device="cuda", dtype=torch.float32)
        lp = torch.full((splits * rows,), float("nan"), device="cuda", dtype=torch.float32)
        prm = pb.params(o, splits=splits)
        g1 = self.split_grid(es, pb, splits)
        g2 = (math.ceil(rows / ec.Br), 1, 1)
        a1 = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), op.data_ptr(), lp.data_ptr(), prm.data_ptr()]
        a2 = [op.data_ptr(), lp.data_ptr(), o.data_ptr(), lse.data_ptr(), prm.data_ptr()]

        def go():
            self.launch(es, g1, a1)
            self.launch(ec, g2, a2)
        return go, (op, lp, prm)

    def fused_launcher(self, e, pb, o, lse, splits):
        """Returns a closure launching the fused split-KV decode kernel, and its buffers. The zeroed
        tickets are kept across launches: the kernel must leave them zero."""
        rows = pb.B * pb.Hq * pb.Sq
        grid = self.split_grid(e, pb, splits)
        op = torch.full((1, 1, 1, splits * rows * pb.D), float("nan"), device="cuda", dtype=torch.float32)
        lp = torch.full((1, 1, 1, splits * rows), float("nan"), device="cuda", dtype=torch.float32)
        tickets = torch.zeros((1, 1, 1, grid[1] * grid[2]), device="cuda", dtype=torch.int32)
        if not e.tornado:
            prm = pb.params(o, splits=splits)
            args = [pb.q.data_ptr(), pb.k.data_ptr(), pb.v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                    op.data_ptr(), lp.data_ptr(), tickets.data_ptr(), prm.data_ptr()]

            def go():
                self.launch(e, grid, args)
            return go, (op, lp, tickets, prm)
        bufs = [with_header(t, e.header) for t in (pb.q, pb.k, pb.v, o, lse, op, lp, tickets)]
        ov, lv = bufs[3][1], bufs[4][1]
        prm = pb.params(ov, splits=splits, header=e.header)
        args = [0] + [b.data_ptr() for b, _ in bufs] + [prm.data_ptr()]

        def go():
            ov.fill_(float("nan"))  # poisoned on the device too, before every launch
            lv.fill_(float("nan"))
            self.launch(e, grid, args)
            torch.cuda.synchronize()
            o.copy_(ov)
            lse.copy_(lv)
        return go, (bufs, prm)
