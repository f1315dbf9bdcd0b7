"""The CUDA driver calls the harness needs (ctypes on libcuda.so.1): the calls the Java FFM host
(ptx-cuda) makes, on the primary context PyTorch makes current, launching on PyTorch's stream."""
import ctypes

import torch

import manifest

from report import log


class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # primary context, made current by PyTorch
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        assert ctx.value, "no current CUDA context"

    def check(self, err, what):
        if err != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(err, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {err} {s.value.decode() if s.value else ''}")

    def load(self, ptx_path):
        # each loading thread needs the context current
        ctx = ctypes.c_void_p()
        self.cu.cuCtxGetCurrent(ctypes.byref(ctx))
        if not ctx.value:
            dev = ctypes.c_int()
            self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
            pctx = ctypes.c_void_p()
            self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(pctx), dev), "cuDevicePrimaryCtxRetain")
            self.check(self.cu.cuCtxSetCurrent(pctx), "cuCtxSetCurrent")
        data = manifest.read_ptx(ptx_path) + b"\0"  # ptx/<module>.gz as shipped, or a plain .ptx
        mod = ctypes.c_void_p()
        logbuf = ctypes.create_string_buffer(1 << 16)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER(_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(logbuf, ctypes.c_void_p), ctypes.c_void_p(len(logbuf)))
        err = self.cu.cuModuleLoadDataEx(ctypes.byref(mod), data, 2, opts, vals)
        if err != 0:
            log("JIT error log:", logbuf.value.decode(errors="replace"))
        self.check(err, f"cuModuleLoadDataEx({ptx_path})")
        return mod

    def driver_version(self):
        v = ctypes.c_int()
        self.check(self.cu.cuDriverGetVersion(ctypes.byref(v)), "cuDriverGetVersion")
        return v.value

    def function(self, mod, name):
        f = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), f"cuModuleGetFunction({name})")
        return f

    def attr(self, f, a):
        v = ctypes.c_int()
        self.check(self.cu.cuFuncGetAttribute(ctypes.byref(v), a, f), "cuFuncGetAttribute")
        return v.value

    def set_max_dyn_smem(self, f, nbytes):
        self.check(self.cu.cuFuncSetAttribute(f, 8, nbytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED)")

    def occupancy(self, f, threads, dyn):
        n = ctypes.c_int()
        self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), f, threads, ctypes.c_size_t(dyn)),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def launch(self, f, grid, block, smem, args):
        vals = [ctypes.c_uint64(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(f, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, ptrs, None),
                   "cuLaunchKernel")
