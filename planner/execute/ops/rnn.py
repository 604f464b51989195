"""Recurrent ONNX ops: RNN, GRU and LSTM (opsets 7-22), forward, reverse and bidirectional, `layout` 0 and 1,
`clip`, `linear_before_reset` (GRU), peepholes (LSTM), per-batch `sequence_lens` (steps past a sequence's length
leave its state unchanged and write zeros to Y), and the activations Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid,
Elu, Softsign, Softplus, Affine, ScaledTanh, ThresholdedRelu.  LSTM's `input_forget=1` is not supported.

Gate orders are ONNX's: LSTM i, o, f, c; GRU z, r, h.  One time step is one matmul per weight, in float32 (the
tensors' own dtype), which is what onnxruntime computes up to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from planner.execute.ops import int_list, register

_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activation(name: str, alpha: float | None, beta: float | None):
    n = name.lower()
    if n == "sigmoid":
        return torch.sigmoid
    if n == "tanh":
        return torch.tanh
    if n == "relu":
        return torch.relu
    if n == "leakyrelu":
        return lambda x: F.leaky_relu(x, 0.01 if alpha is None else alpha)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: torch.clamp(a * x + b, 0, 1)
    if n == "elu":
        return lambda x: F.elu(x, 1.0 if alpha is None else alpha)
    if n == "softsign":
        return F.softsign
    if n == "softplus":
        return F.softplus
    if n == "affine":
        return lambda x: (1.0 if alpha is None else alpha) * x + (0.0 if beta is None else beta)
    if n == "scaledtanh":
        return lambda x: (1.0 if alpha is None else alpha) * torch.tanh((1.0 if beta is None else beta) * x)
    if n == "thresholdedrelu":
        return lambda x: torch.where(x > (1.0 if alpha is None else alpha), x, torch.zeros_like(x))
    raise NotImplementedError(f"recurrent activation {name!r}")


def _activations(kind: str, attrs: dict, num_dir: int) -> list[list]:
    """Per direction, the activation functions of `kind` (f, g[, h])."""
    per = len(_DEFAULTS[kind])
    names = list(attrs.get("activations") or _DEFAULTS[kind] * num_dir)
    if len(names) == per and num_dir == 2:
        names = names * 2
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    fns = [_activation(n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
           for i, n in enumerate(names)]
    return [fns[d * per:(d + 1) * per] for d in range(num_dir)]


def _step_fn(kind: str, w, r, wb, rb, p, acts, clip, linear_before_reset, hidden):
    """The cell of one direction: (x_t, h, c) -> (h', c')."""
    def cl(v):
        return v.clamp(-clip, clip) if clip is not None else v

    if kind == "RNN":
        f = acts[0]

        def rnn(x, h, c):
            return f(cl(x @ w.T + h @ r.T + wb + rb)), c
        return rnn
    if kind == "GRU":
        f, g = acts
        wz, wr, wh = w.split(hidden)
        rz, rr, rh = r.split(hidden)
        wbz, wbr, wbh = wb.split(hidden)
        rbz, rbr, rbh = rb.split(hidden)

        def gru(x, h, c):
            z = f(cl(x @ wz.T + h @ rz.T + wbz + rbz))
            rt = f(cl(x @ wr.T + h @ rr.T + wbr + rbr))
            if linear_before_reset:
                hh = g(cl(x @ wh.T + rt * (h @ rh.T + rbh) + wbh))
            else:
                hh = g(cl(x @ wh.T + (rt * h) @ rh.T + rbh + wbh))
            return (1 - z) * hh + z * h, c
        return gru
    f, g, hfn = acts
    wi, wo, wf, wc = w.split(hidden)
    ri, ro, rf, rc = r.split(hidden)
    bi, bo, bf, bc = (wb + rb).split(hidden)
    pi, po, pf = p.split(hidden) if p is not None else (0, 0, 0)

    def lstm(x, h, c):
        i = f(cl(x @ wi.T + h @ ri.T + pi * c + bi))
        fg = f(cl(x @ wf.T + h @ rf.T + pf * c + bf))
        ct = g(cl(x @ wc.T + h @ rc.T + bc))
        c2 = fg * c + i * ct
        o = f(cl(x @ wo.T + h @ ro.T + po * c2 + bo))
        return o * hfn(c2), c2
    return lstm


def _recurrent(kind: str, ins: list, attrs: dict, ctx) -> list:
    x, w, r = ins[0], ins[1], ins[2]
    b = ins[3] if len(ins) > 3 else None
    seq_lens = ins[4] if len(ins) > 4 else None
    h0 = ins[5] if len(ins) > 5 else None
    c0 = ins[6] if kind == "LSTM" and len(ins) > 6 else None
    p = ins[7] if kind == "LSTM" and len(ins) > 7 else None
    if kind == "LSTM" and int(attrs.get("input_forget", 0)):
        raise NotImplementedError("LSTM with input_forget=1")
    layout = int(attrs.get("layout", 0))
    if layout:
        x = x.transpose(0, 1)  # -> [seq, batch, input]
        h0 = h0.transpose(0, 1) if h0 is not None else None
        c0 = c0.transpose(0, 1) if c0 is not None else None
    seq, batch, _ = x.shape
    num_dir, gates_h, _ = w.shape
    hidden = int(attrs.get("hidden_size") or r.shape[-1])
    direction = attrs.get("direction", "forward")
    clip = float(attrs["clip"]) if attrs.get("clip") is not None else None
    lbr = int(attrs.get("linear_before_reset", 0))
    acts = _activations(kind, attrs, num_dir)
    zeros = x.new_zeros(num_dir, batch, hidden)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    lens = int_list(seq_lens) if seq_lens is not None else [seq] * batch
    lens_t = torch.tensor(lens)
    ys, hs, cs = [], [], []
    for d in range(num_dir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        wb = b[d, :gates_h] if b is not None else x.new_zeros(gates_h)
        rb = b[d, gates_h:] if b is not None else x.new_zeros(gates_h)
        pd = p[d] if p is not None else None
        step = _step_fn(kind, w[d], r[d], wb, rb, pd, acts[d], clip, lbr, hidden)
        h, c = h0[d], c0[d]
        out = x.new_zeros(seq, batch, hidden)
        for k in range(seq):
            t = k if not reverse else seq - 1 - k
            if reverse:  # a reversed sequence starts at its own last valid step
                valid = (lens_t - 1 - k) >= 0
                idx = (lens_t - 1 - k).clamp(min=0)
                xt = x[idx, torch.arange(batch)]
            else:
                valid = lens_t > t
                xt = x[t]
            h2, c2 = step(xt, h, c)
            m = valid.unsqueeze(1)
            h = torch.where(m, h2, h)
            c = torch.where(m, c2, c)
            if reverse:
                out[idx, torch.arange(batch)] = torch.where(m, h2, out[idx, torch.arange(batch)])
            else:
                out[t] = torch.where(m, h2, torch.zeros_like(h2))
        ys.append(out)
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, dim=1)  # [seq, num_dir, batch, hidden]
    y_h = torch.stack(hs)
    y_c = torch.stack(cs)
    if layout:
        y = y.permute(2, 0, 1, 3)  # [batch, seq, num_dir, hidden]
        y_h = y_h.transpose(0, 1)
        y_c = y_c.transpose(0, 1)
    return [y, y_h, y_c][:max(1, ctx.num_outputs)]


@register("RNN")
def rnn(ins, attrs, ctx):
    return _recurrent("RNN", ins, attrs, ctx)


@register("GRU")
def gru(ins, attrs, ctx):
    return _recurrent("GRU", ins, attrs, ctx)


@register("LSTM")
def lstm(ins, attrs, ctx):
    return _recurrent("LSTM", ins, attrs, ctx)
