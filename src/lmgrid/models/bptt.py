"""One layer of the hand-written LSTM and GRU cells over a whole chunk, with its backward through time written out.

Why: at the sizes lmgrid trains (B = 20, H = 200) a cell's step is a handful of small operations whose cost is
dispatching them and, under autograd, recording each one and replaying its backward node by node, not their
arithmetic.  Here the forward loop runs with autograd off (every result written in place into tensors allocated
once for the chunk), and one autograd node holds the whole layer: its backward runs the recursion of the state
gradients step by step (5-6 operations a step) and everything else at once for the chunk: the activations'
derivatives before the loop, and after it the gradients of W_hh (one [G, T B] x [T B, H] product instead of T
small ones), of b_hh and of the input projection.  The forward computes the documented equations of models/lstm.py
and models/gru.py in the same order of operations (`lerp` for the GRU's n + z (h - n)); the gradients are the chain
rule of those equations, checked against autograd of the step-by-step cells (tests/test_models_bptt.py) and against
nn.LSTM / nn.GRU (tests/test_models.py).

Inputs are the input projections of every step, computed by the caller in one product (x W_ih^T + biases, as
autograd sees it, so the gradients of W_ih, the biases and x flow from there), the initial state, and the
recurrent weights.  Tensors are kept time-major [T, B, .] inside, so that step t is a contiguous slice.
"""
from __future__ import annotations

import torch


def runs_whole_layer(hand_bptt: bool, return_gates: bool, compiled: bool) -> bool:
    """Whether a hand-written stack runs its layers here: asked for (`hand_bptt`, False only for the tests'
    step-by-step reference), and neither gates (which the step functions return) nor torch.compile (which compiles
    the step functions) wanted."""
    return hand_bptt and not return_gates and not compiled


def previous(states: torch.Tensor) -> torch.Tensor:
    """The state each step starts from, s_{t-1} for t = 1..T, out of [s_0, .., s_T] (time-major)."""
    return states[:-1]


class LSTMLayer(torch.autograd.Function):
    """(x_proj [B, T, 4H] = W_ih x_t + b_ih + b_hh, h0 [B, H], c0 [B, H], w_hh [4H, H]) -> (out [B, T, H], h_T, c_T);
    gates in nn.LSTM's row order (i, f, g, o)."""

    @staticmethod
    def forward(ctx, x_proj, h0, c0, w_hh):
        h0, c0, w_hh = (v.to(x_proj.dtype) for v in (h0, c0, w_hh))  # one dtype, as autocast would cast them
        B, T, G = x_proj.shape
        H = G // 4
        xp, w_t = x_proj.transpose(0, 1), w_hh.t()
        acts = x_proj.new_empty(T, B, G)  # i, f, g, o after their non-linearities
        hs, cs, tanh_cs = x_proj.new_empty(T + 1, B, H), x_proj.new_empty(T + 1, B, H), x_proj.new_empty(T, B, H)
        hs[0], cs[0] = h0, c0
        # Every step's views made before the loop (one unbind each), so that a step indexes Python lists.
        x_t, a_t, h_t, c_t, tc_t = xp.unbind(0), acts.unbind(0), hs.unbind(0), cs.unbind(0), tanh_cs.unbind(0)
        if_t, i_t, f_t, g_t, o_t = (acts[..., j * H:k * H].unbind(0) for j, k in ((0, 2), (0, 1), (1, 2), (2, 3),
                                                                                 (3, 4)))
        for t in range(T):
            torch.addmm(x_t[t], h_t[t], w_t, out=a_t[t])
            if_t[t].sigmoid_()
            g_t[t].tanh_()
            o_t[t].sigmoid_()
            torch.mul(f_t[t], c_t[t], out=c_t[t + 1]).addcmul_(i_t[t], g_t[t])  # f * c + i * g
            torch.mul(o_t[t], torch.tanh(c_t[t + 1], out=tc_t[t]), out=h_t[t + 1])  # o * tanh(c')
        ctx.save_for_backward(w_hh, acts, hs, cs, tanh_cs)
        return hs[1:].transpose(0, 1).contiguous(), hs[T].clone(), cs[T].clone()

    @staticmethod
    def backward(ctx, d_out, d_hT, d_cT):
        w_hh, acts, hs, cs, tanh_cs = ctx.saved_tensors
        T, B, G = acts.shape
        H = G // 4
        i, f, g, o = acts.view(T, B, 4, H).unbind(2)
        # What each gate's pre-activation gradient is dc (i, f, g) or dh (o) times, for every step at once.
        by_dc = torch.stack([g * i * (1 - i), previous(cs) * f * (1 - f), i * (1 - g * g)], 2)  # [T, B, 3, H]
        o_by_dh = tanh_cs * o * (1 - o)
        dc_by_dh = o * (1 - tanh_cs * tanh_cs)
        dz = acts.new_empty(T, B, G)
        dz4 = dz.view(T, B, 4, H)
        d_out = d_out.transpose(0, 1).unbind(0)
        dz_t, dz_ifg, dz_o = dz.unbind(0), dz4[:, :, :3].unbind(0), dz4[:, :, 3].unbind(0)
        by_dc, o_by_dh, dc_by_dh, f = by_dc.unbind(0), o_by_dh.unbind(0), dc_by_dh.unbind(0), f.unbind(0)
        dh, dc = d_hT + d_out[T - 1], d_cT.clone()
        for t in range(T - 1, -1, -1):
            if t < T - 1:
                dh = dh.add_(d_out[t])
            dc.addcmul_(dh, dc_by_dh[t])
            torch.mul(dc.unsqueeze(1), by_dc[t], out=dz_ifg[t])
            torch.mul(dh, o_by_dh[t], out=dz_o[t])
            dc.mul_(f[t])
            if t > 0 or ctx.needs_input_grad[1]:
                dh = torch.mm(dz_t[t], w_hh)
        flat = dz.view(T * B, G)
        d_w = flat.t().mm(previous(hs).reshape(T * B, H)) if ctx.needs_input_grad[3] else None
        return dz.transpose(0, 1), dh if ctx.needs_input_grad[1] else None, dc, d_w


class GRULayer(torch.autograd.Function):
    """(x_proj [B, T, 3H] = W_ih x_t + b_ih, h0 [B, H], w_hh [3H, H], b_hh [3H]) -> (out [B, T, H], h_T); rows in
    nn.GRU's order (r, z, n), and n = tanh(x_n + r * (W_hn h + b_hn)) as nn.GRU computes it."""

    @staticmethod
    def forward(ctx, x_proj, h0, w_hh, b_hh):
        h0, w_hh, b_hh = (v.to(x_proj.dtype) for v in (h0, w_hh, b_hh))  # one dtype, as autocast would cast them
        B, T, G = x_proj.shape
        H = G // 3
        xp, w_t = x_proj.transpose(0, 1), w_hh.t()
        hp = x_proj.new_empty(T, B, G)  # W_h* h_{t-1} + b_h*
        rz, n = x_proj.new_empty(T, B, 2 * H), x_proj.new_empty(T, B, H)
        hs = x_proj.new_empty(T + 1, B, H)
        hs[0] = h0
        # Every step's views made before the loop (one unbind each), so that a step indexes Python lists.
        xrz_t, xn_t = xp[..., :2 * H].unbind(0), xp[..., 2 * H:].unbind(0)
        p_t, prz_t, pn_t = hp.unbind(0), hp[..., :2 * H].unbind(0), hp[..., 2 * H:].unbind(0)
        rz_t, r_t, z_t, n_t, h_t = rz.unbind(0), rz[..., :H].unbind(0), rz[..., H:].unbind(0), n.unbind(0), hs.unbind(0)
        for t in range(T):
            torch.addmm(b_hh, h_t[t], w_t, out=p_t[t])
            torch.add(xrz_t[t], prz_t[t], out=rz_t[t]).sigmoid_()
            torch.addcmul(xn_t[t], r_t[t], pn_t[t], out=n_t[t]).tanh_()
            torch.lerp(n_t[t], h_t[t], z_t[t], out=h_t[t + 1])  # n + z * (h - n)
        ctx.save_for_backward(w_hh, hp, rz, n, hs)
        return hs[1:].transpose(0, 1).contiguous(), hs[T].clone()

    @staticmethod
    def backward(ctx, d_out, d_hT):
        w_hh, hp, rz, n, hs = ctx.saved_tensors
        T, B, G = hp.shape
        H = G // 3
        r, z = rz[..., :H], rz[..., H:]
        # d[t] = (da_n, da_z, da_r, d(W_hn h + b_hn)): da_n and da_z are dh times, da_r and the last da_n times,
        # these factors; d[t, :, 1:] is then the gradient of the hidden projection in (z, r, n) row order.
        by_dh = torch.stack([(1 - z) * (1 - n * n), (previous(hs) - n) * z * (1 - z)], 2)
        by_dan = torch.stack([hp[..., 2 * H:] * r * (1 - r), r], 2)
        zrn = [w_hh[H:2 * H], w_hh[:H], w_hh[2 * H:]]
        w_zrn = torch.cat(zrn)
        d = hp.new_empty(T, B, 4, H)
        d_out = d_out.transpose(0, 1).unbind(0)
        d_nz, d_an, d_rn, d_zrn = d[:, :, :2].unbind(0), d[:, :, :1].unbind(0), d[:, :, 2:].unbind(0), \
            d[:, :, 1:].view(T, B, G).unbind(0)  # views: the loop writes through them
        by_dh, by_dan, z = by_dh.unbind(0), by_dan.unbind(0), z.unbind(0)
        dh = d_hT + d_out[T - 1]
        for t in range(T - 1, -1, -1):
            if t < T - 1:
                dh = dh.add_(d_out[t])
            torch.mul(dh.unsqueeze(1), by_dh[t], out=d_nz[t])
            torch.mul(d_an[t], by_dan[t], out=d_rn[t])
            if t > 0 or ctx.needs_input_grad[1]:
                dh = torch.addmm(dh.mul_(z[t]), d_zrn[t], w_zrn)
        d_hidden = d[:, :, 1:].reshape(T * B, G)  # (z, r, n) order
        d_w = d_b = None
        if ctx.needs_input_grad[2]:
            d_w = d_hidden.t().mm(previous(hs).reshape(T * B, H)).view(3, H, H)[[1, 0, 2]].reshape(G, H)
        if ctx.needs_input_grad[3]:
            d_b = d_hidden.sum(0).view(3, H)[[1, 0, 2]].reshape(G)
        d_x = torch.cat([d[:, :, 2], d[:, :, 1], d[:, :, 0]], 2).transpose(0, 1)  # (r, z, n)
        return d_x, dh if ctx.needs_input_grad[1] else None, d_w, d_b
