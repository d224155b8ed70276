"""The "n-gram MLP": Bengio et al. (2003)'s feed-forward language model, with GELU and a residual MLP stack.

A worked example of an lmgrid plug-in (docs/models.md, "Your own model"): a plain torch module, no lmgrid imports.
Add it to a study with `arch: [ffnn, examples/ngram_mlp.py:NGramMLP]`.

The n_step-1 context tokens' embeddings are concatenated (so the model knows which token sat where, unlike a bag of
words), projected to hidden_dim, and refined by `cfg.layers` residual blocks

    x <- x + Dropout(Linear(GELU(Linear(LayerNorm(x)))))

lmgrid puts its own output layer (softmax, adaptive softmax or tied weights) on the returned features.
"""
import torch
from torch import nn


class ResidualBlock(nn.Module):
    """Pre-LayerNorm MLP block.  The residual path (He et al. 2016) means a block starts close to the identity, so a
    deep stack trains like a shallow one instead of squashing its input a little more at every layer (the plain
    Bengio stack of tanh layers stops learning after a few); normalising the block's input rather than its output
    (pre-LN, as in GPT-2) keeps that identity path untouched."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, width)
        # GELU (Hendrycks & Gimpel 2016): a smooth ReLU, x * Phi(x); no dead units, and a usual choice in MLP blocks
        self.act = nn.GELU()
        self.down = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.down(self.act(self.up(self.norm(x)))))


class NGramMLP(nn.Module):
    lmgrid_name = "ngram_mlp"
    lmgrid_display = "n-gram MLP"
    lmgrid_regimes = ("window",)  # a fixed n_step-1 window: it has no state to carry along a stream
    lmgrid_gates = ()
    lmgrid_reference = "Bengio et al. 2003, with GELU (Hendrycks & Gimpel 2016) and residual blocks (He et al. 2016)"

    def __init__(self, cfg):
        super().__init__()
        self.context = cfg.n_step - 1
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim)  # the name lmgrid ties and exports
        # Small uniform init, like lmgrid's built-ins: nn.Embedding's N(0, 1) would, with tied weights, start the
        # output layer with large logits, far from the uniform prediction (loss log V) a fresh model should make.
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(self.context * cfg.emb_dim, cfg.hidden_dim)
        self.blocks = nn.ModuleList(ResidualBlock(cfg.hidden_dim, cfg.dropout) for _ in range(cfg.layers))
        # The blocks add to x without normalising it, so its scale grows with depth: one last LayerNorm hands the
        # output layer features of one scale whatever cfg.layers is (nanoGPT's ln_f).
        self.norm = nn.LayerNorm(cfg.hidden_dim)
        self.out_dim = cfg.hidden_dim

    def features(self, tokens, state=None, return_gates=False, last_only=False):
        """tokens [B, n_step-1] -> (hidden [B, 1, hidden_dim] for the token after the window, None, gates).
        Always one position, whatever last_only says: the window predicts only the token after it."""
        if tokens.dim() != 2 or tokens.shape[1] != self.context:
            raise ValueError(f"ngram_mlp: tokens of shape {tuple(tokens.shape)} are not "
                             f"[batch, n_step-1={self.context}]")
        x = self.drop(self.embedding(tokens).flatten(1))  # [B, (n_step-1) * emb_dim]: position kept by concatenation
        x = self.proj(x)
        for block in self.blocks:
            x = block(x)
        return self.norm(x).unsqueeze(1), None, ({} if return_gates else None)

    def detach_state(self, state):
        return None
