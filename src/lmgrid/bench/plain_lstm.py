"""A plain PyTorch LSTM LM script, the baseline `python -m lmgrid.bench vs-plain` runs `lmgrid train` against.

It is what a user would write by hand for the job (in the manner of pytorch/examples' word_language_model,
written here): nn.Embedding, nn.LSTM, nn.Linear; the training text as one stream cut into `batch` contiguous
rows; truncated BPTT over `bptt` steps with the state carried; SGD with gradient-norm clipping; one epoch; then
valid and test scored the same way with no gradients. Deliberately no lmgrid imports, so that its start-up is
that of torch alone. It prints one JSON line of figures.

Two options train on lmgrid's way instead, to measure what each of the two differences costs (docs/benchmarks.md):
`--layout sentences` cuts the training text into rows of whole sentences as lmgrid's stream regime does
(lmgrid.neural.data.sentence_rows, imported only then), and `--tail full-chunk` weighs a short last chunk's targets
as in a full chunk (its loss summed over `batch` x `bptt` positions) instead of averaging it on its own.

    python -m lmgrid.bench.plain_lstm --train ptb.train.txt --valid ptb.valid.txt --test ptb.test.txt
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import time

import torch
from torch import nn

IGNORE = -100  # cross_entropy's default ignore_index: the target of a padded position (--layout sentences)


def read_lines(path: str) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return [line.split() + ["</s>"] for line in f if line.strip()]


def stream(lines: list[list[str]], index: dict[str, int], batch: int) -> torch.Tensor:
    ids = torch.tensor([index.get(w, index["<unk>"]) for line in lines for w in line], dtype=torch.long)
    rows = ids.numel() // batch
    return ids[: rows * batch].view(batch, rows)  # [batch, rows]: each row a contiguous piece of the text


class LSTMLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, layers, batch_first=True)
        self.out = nn.Linear(width, vocab)
        # Embedding and output weights uniform in +-0.1, output bias 0: the usual LM initialisation, and lmgrid's
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        nn.init.uniform_(self.out.weight, -0.1, 0.1)
        nn.init.zeros_(self.out.bias)
        init_recurrence(self.rnn, width)

    def forward(self, x, state):
        h, state = self.rnn(self.emb(x), state)
        return self.out(h), state


@torch.no_grad()
def init_recurrence(rnn: nn.LSTM, width: int) -> None:
    """lmgrid's recipe for the recurrence (README, Depth; lmgrid.models.common.init_recurrence), written here so
    that the two sides train the same model: each gate's block of weight_hh orthogonal, weight_ih uniform in
    +-1/sqrt(width) (nn.LSTM's own), biases 0 but the forget gate's, whose b_ih + b_hh is 1.  nn.LSTM's default
    (every weight and bias uniform in +-1/sqrt(width)) would make the two sides two recipes, not one model."""
    bound = 1.0 / math.sqrt(width)
    for name, p in rnn.named_parameters():
        if name.startswith("weight_hh"):
            for block in p.split(width, 0):
                nn.init.orthogonal_(block)
        elif name.startswith("weight_ih"):
            nn.init.uniform_(p, -bound, bound)
        else:
            p.zero_()
            if name.startswith("bias_ih"):
                p[width:2 * width] = 1.0  # nn.LSTM's gate order i, f, g, o: rows width..2*width are f's


def sentence_rows(lines: list[list[str]], index: dict[str, int], batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets [batch, S] as lmgrid's stream regime lays them out: rows of whole sentences, tail padding
    (input </s>, target IGNORE)."""
    from lmgrid.neural.data import sentence_rows as lmgrid_rows  # only here: the default start-up stays lmgrid-free

    eos = index["</s>"]
    return lmgrid_rows([[index.get(w, index["<unk>"]) for w in line[:-1]] for line in lines], batch, eos, eos)


def run_epoch(model, data, bptt, autocast, opt=None, clip=0.25, tail_full_chunk=False) -> tuple[float, int]:
    """Summed NLL and target count over `data` (one stream [batch, cols], or (inputs, targets) [batch, S]); a
    training step when `opt` is given."""
    x_all, y_all = data if isinstance(data, tuple) else (data[:, :-1], data[:, 1:])
    total, count, state = 0.0, 0, None
    for i in range(0, x_all.shape[1], bptt):
        x, y = x_all[:, i:i + bptt], y_all[:, i:i + bptt]
        if state is not None:
            state = tuple(s.detach() for s in state)
        with autocast():
            logits, state = model(x, state)
        nll = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                                          reduction="sum")
        n = int((y != IGNORE).sum())
        loss = nll / (y.shape[0] * bptt if tail_full_chunk else n)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        total += float(nll.detach())
        count += n
    return total, count


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--valid", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--lines", type=int, default=10000, help="first N lines of train (0 = all)")
    p.add_argument("--width", type=int, default=200)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--eval-batch", type=int, default=10)
    p.add_argument("--lr", type=float, default=20.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="torch.autocast('cpu', torch.bfloat16)")
    p.add_argument("--seed", type=int, default=0, help="torch's seed: the initial weights (default 0)")
    p.add_argument("--layout", choices=["contiguous", "sentences"], default="contiguous",
                   help="training rows: contiguous cuts of the text (default) or lmgrid's rows of whole sentences")
    p.add_argument("--tail", choices=["own-mean", "full-chunk"], default="own-mean",
                   help="a short last chunk's loss: its own mean (default) or weighed as in a full chunk (lmgrid's)")
    a = p.parse_args(argv)
    if a.bf16:
        from lmgrid.neural.precision import native_cpu_bf16  # only here: the plain script's start-up stays lmgrid-free

        if not native_cpu_bf16():
            # The plain script runs nn.LSTM itself under autocast, which needs oneDNN's bf16 LSTM primitive.
            p.error("--bf16: this CPU has no native bf16 (avx512_bf16 or amx_bf16): nn.LSTM cannot run in bf16 here")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    # The vocabulary is the whole training file's (PTB: 10,000 words with <unk>), as lmgrid's vocab stage makes it.
    full_train = read_lines(a.train)
    train = full_train[: a.lines] if a.lines else full_train
    words = sorted({w for line in full_train for w in line} | {"<unk>"})
    index = {w: i for i, w in enumerate(words)}
    model = LSTMLM(len(words), a.width, a.layers)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext
    model.train()
    t0 = time.perf_counter()
    rows = sentence_rows(train, index, a.batch) if a.layout == "sentences" else stream(train, index, a.batch)
    _, train_tokens = run_epoch(model, rows, a.bptt, autocast, opt, tail_full_chunk=a.tail == "full-chunk")
    train_s = time.perf_counter() - t0
    model.eval()
    out = {"train_tokens": train_tokens, "train_tokens_per_s": train_tokens / train_s}
    t0 = time.perf_counter()
    eval_tokens = 0
    with torch.no_grad():
        for split in ("valid", "test"):
            nll, n = run_epoch(model, stream(read_lines(getattr(a, split)), index, a.eval_batch), a.bptt, autocast)
            out[f"{split}_ppl"] = math.exp(nll / n)
            eval_tokens += n
    out["eval_tokens_per_s"] = eval_tokens / (time.perf_counter() - t0)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
