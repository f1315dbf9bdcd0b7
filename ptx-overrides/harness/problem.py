"""One attention problem on the GPU: fresh N(0,1) fp16 or bf16 inputs in BHSD or BSHD storage, poisoned
outputs, its params block (the score features' words included), the float64 reference of the project's
semantics (window, softcap and sinks included, on the rounded inputs) and the comparison with it (the
tolerances of the Java suite, per element type)."""
import torch

import manifest
from features import NO_FEATURES, Features, feature_tag, feature_words, f32_bits, scale_for  # noqa: F401 (re-exported)

P = manifest.param_index()
DEVICE = "cuda"  # "cpu" runs the references and checks of this module without a GPU
LOG2E = 1.4426950408889634


def torch_dtype(dtype):
    """The torch type of a manifest dtype."""
    return {"fp16": torch.half, "bf16": torch.bfloat16}[dtype]


def scores_to_probs(s, visible, softcap, sink):
    """The definition (CpuReference.softmaxRow) on float64 scores s [..., Sq, Skv] = scale*q.k with
    the visibility mask `visible` (broadcast to s), softcap c (0: off) and per-row sink logits
    `sink` (broadcast to s[..., 0], -inf: none).  Returns (weights p, lse): p_j = e^s_j / (e^z +
    sum e^s_j), lse = log(e^z + sum e^s_j); a row that sees no key: p = 0, lse = z."""
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible, float("-inf"))
    sink = torch.as_tensor(sink, dtype=s.dtype, device=s.device).expand(s.shape[:-1])
    lse = torch.logsumexp(torch.cat([s, sink[..., None]], -1), dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    return p, lse


def visible_keys(pos, Skv, causal, left, right):
    """[len(pos), Skv] bool: a query at position pos (dense i + Skv - Sq; cache L - n + j) sees key j iff
    pos - left <= j (left >= 0) and j <= pos + right (right >= 0), j <= pos when causal
    (AttentionShape.firstVisibleKey / lastVisibleKey)."""
    j = torch.arange(Skv, device=pos.device)[None, :]
    pos = pos[:, None]
    vis = torch.ones(pos.shape[0], Skv, dtype=torch.bool, device=pos.device)
    if causal:
        vis &= j <= pos
    if left >= 0:
        vis &= j >= pos - left
    if right >= 0:
        vis &= j <= pos + right
    return vis


class Problem:
    """Q, K, V (fp16 or bf16, N(0,1) rounded to the type) as logical [B, H, S, D] views of BHSD or BSHD storage;
    `feat` (features.Features: window left, window right, softcap, sinks?; -1 = unbounded side, 0 = no softcap);
    sinks: one float32 logit per query head (~N(0, 4), some large enough to dominate a row).  scale None: the
    problem's default, 1/sqrt(D), or features.SOFTCAP_SCALE with a softcap (so that the cap bites)."""

    def __init__(self, B, Hq, Hkv, Sq, Skv, D, causal, layout="bhsd", scale=None, lse=True, gen=None, dtype="fp16",
                 feat=NO_FEATURES):
        self.B, self.Hq, self.Hkv, self.Sq, self.Skv, self.D = B, Hq, Hkv, Sq, Skv, D
        self.dtype, self.tdt = dtype, torch_dtype(dtype)
        self.causal, self.layout, self.want_lse = causal, layout, lse
        self.feat = Features(*feat)
        self.scale = scale if scale is not None else scale_for(D, self.feat)
        self.q = self._rand(B, Hq, Sq, D, gen)
        self.k = self._rand(B, Hkv, Skv, D, gen)
        self.v = self._rand(B, Hkv, Skv, D, gen)
        self.sinks = (torch.randn(Hq, device=DEVICE, dtype=torch.float32, generator=gen) * 2) if self.feat.sinks else None

    def _rand(self, B, H, S, D, gen):
        if self.layout == "bhsd":
            return torch.randn(B, H, S, D, device=DEVICE, dtype=torch.float32, generator=gen).to(self.tdt)
        return torch.randn(B, S, H, D, device=DEVICE, dtype=torch.float32, generator=gen).to(self.tdt).permute(0, 2, 1, 3)

    def new_out(self):
        o = torch.empty(self.B, self.Hq, self.Sq, self.D, device=DEVICE, dtype=self.tdt) if self.layout == "bhsd" else \
            torch.empty(self.B, self.Sq, self.Hq, self.D, device=DEVICE, dtype=self.tdt).permute(0, 2, 1, 3)
        o.fill_(float("nan"))
        lse = torch.full((self.B, self.Hq, self.Sq), float("nan"), device=DEVICE, dtype=torch.float32)
        return o, lse

    def params(self, o, splits=0, header=0):
        """The params block (flash_params.cuh), behind `header` zero bytes for a TornadoVM entry."""
        p = [0] * P["P_COUNT"]
        for name, value in (("P_B", self.B), ("P_HQ", self.Hq), ("P_HKV", self.Hkv), ("P_SQ", self.Sq),
                            ("P_SKV", self.Skv), ("P_D", self.D), ("P_CAUSAL", int(self.causal)),
                            ("P_SCALE_LOG2", f32_bits(self.scale * LOG2E)), ("P_WRITE_LSE", int(self.want_lse)),
                            ("P_NUM_SPLITS", splits), ("P_SCALE", f32_bits(self.scale))):
            p[P[name]] = value
        for name, t in (("P_Q_STRIDE", self.q), ("P_K_STRIDE", self.k), ("P_V_STRIDE", self.v), ("P_O_STRIDE", o)):
            p[P[name]:P[name] + 3] = [t.stride(0), t.stride(1), t.stride(2)]
        words, tail = feature_words(self.feat, self.sinks)
        for name, value in words.items():
            p[P[name]] = value
        p += tail  # P_COUNT + Hq words with sinks
        if header:
            p = [0] * (header // 4) + p
        return torch.tensor(p, dtype=torch.int32, device=DEVICE)

    def flops(self):
        f = 4.0 * self.B * self.Hq * self.Sq * self.Skv * self.D
        return f / 2 if (self.causal and self.Sq == self.Skv) else f

    def visible_span(self):
        """Keys of the decode span: from query 0's first visible key (the window's left side) to Skv."""
        left = self.feat.left
        return self.Skv - (max(0, self.Skv - self.Sq - left) if left >= 0 else 0)

    def reference(self):
        """float64 reference (CpuReference's definition) on the inputs as rounded to the element type; rows
        that see no key give O = 0 and lse = the sink (-inf without sinks)."""
        left, right, cap, _ = self.feat
        pos = torch.arange(self.Sq, device=DEVICE) + (self.Skv - self.Sq)
        vis = visible_keys(pos, self.Skv, self.causal, left, right)
        G = self.Hq // self.Hkv
        os_, lses = [], []
        hstep = max(1, min(self.Hq, int(2e8 // max(1, self.Sq * self.Skv * self.B))))
        for h0 in range(0, self.Hq, hstep):
            h1 = min(self.Hq, h0 + hstep)
            q = self.q[:, h0:h1].double()
            kv_idx = torch.arange(h0, h1, device=DEVICE) // G
            k = self.k[:, kv_idx].double()
            v = self.v[:, kv_idx].double()
            s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            sink = (self.sinks[h0:h1].double()[None, :, None] if self.sinks is not None
                    else torch.tensor(float("-inf"), dtype=torch.float64, device=DEVICE))
            p, lse = scores_to_probs(s, vis, cap, sink)
            os_.append(torch.matmul(p, v))
            lses.append(lse)
        return torch.cat(os_, 1), torch.cat(lses, 1)


def with_header(t, header=16):
    """Copy a tensor's storage behind a TornadoVM-style header; returns (buffer, view)."""
    n = t.numel()
    el = t.element_size()
    buf = torch.empty(n + header // el, device=DEVICE, dtype=t.dtype)
    body = buf[header // el:]
    # keep the same (contiguous) storage order as t
    base = t.permute(0, 2, 1, 3).contiguous() if not t.is_contiguous() else t.contiguous()
    body.copy_(base.reshape(-1))
    view = body.view(base.shape)
    if not t.is_contiguous():
        view = view.permute(0, 2, 1, 3)
    return buf, view


def compare(pb, o, lse, oref, lref):
    od = o.double()
    if torch.isnan(o).any():
        return dict(ok=False, why="NaN in O", max_abs=float("nan"), rel=float("nan"), lse_err=float("nan"))
    err = od - oref
    max_abs = err.abs().max().item() if err.numel() else 0.0
    nref = oref.norm().item()
    rel = err.norm().item() / nref if nref > 0 else (0.0 if max_abs == 0 else float("inf"))
    tol_abs, tol_rel = manifest.TOLERANCE[pb.dtype]
    ok = max_abs <= tol_abs and rel <= tol_rel
    why = "" if ok else f"O err max {max_abs:.3g} rel {rel:.3g}"
    lse_err = 0.0
    if pb.want_lse:
        fin = torch.isfinite(lref)
        if torch.isnan(lse).any():
            ok, why = False, why + " NaN in lse"
        elif not torch.equal(torch.isneginf(lse), torch.isneginf(lref)):
            ok, why = False, why + " lse -inf mismatch"
        else:
            lse_err = (lse.double()[fin] - lref[fin]).abs().max().item() if fin.any() else 0.0
            if lse_err > manifest.LSE_TOLERANCE:
                ok, why = False, why + f" lse err {lse_err:.3g}"
    return dict(ok=ok, why=why.strip(), max_abs=max_abs, rel=rel, lse_err=lse_err)
