"""A trained neural run as a `lmgrid.lm.LanguageModel`, for `lmgrid score` and `lmgrid generate`.

Scoring follows the run's regime, so per-sentence figures mean what the run's test PPL means:
* window: each target sees the last n_step-1 tokens of its sentence, left-padded with <s>;
* stream: a sentence is read on its own after one </s> (the stream's sentence separator), from a zero state.
  (The test PPL in metrics.json carries the state across sentences, so it can be lower than a score of the
  same file.) The transformer sees at most its max_len latest tokens.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from lmgrid.common.errors import LmgridError
from lmgrid.models import ModelConfig, build_model
from lmgrid.data.ppl import BOS, EOS
from lmgrid.data.vocab import Vocab

from lmgrid.neural.precision import autocast

WINDOW_BATCH = 1024


class NeuralLM:
    def __init__(self, model, vocab: Vocab, regime: str, n_step: int, max_len: int, precision: str = "32-true"):
        self.model, self.vocab, self.regime, self.n_step, self.max_len = model.eval(), vocab, regime, n_step, max_len
        self.bos, self.eos = vocab.index[BOS], vocab.index[EOS]
        self.precision = precision

    def _forward(self, *args, **kwargs):
        """The model's forward in the precision its run was scored in (bf16-mixed: the output layer in bf16)."""
        with autocast(self.precision, "cpu"):
            return self.model(*args, **kwargs)

    @torch.no_grad()
    def _logprobs(self, x: torch.Tensor) -> torch.Tensor:
        """log-softmax at every position of x [B, T] -> [B, T, V], in stream order (state carried over chunks)."""
        out, state = [], None
        # The transformer reads a stream in chunks of max_len - context_len tokens, each after the previous (as it
        # was trained).
        step = self.max_len - self.model.cfg.context_len if self.model_is_stateless else self.max_len
        for start in range(0, x.shape[1], step):
            logits, state, _ = self._forward(x[:, start:start + step], state)
            out.append(torch.log_softmax(logits.float(), -1))
        return torch.cat(out, 1)

    @torch.no_grad()
    def sentence_logprobs(self, sentences: list[list[str]]) -> list[list[float]]:
        ids = [self.vocab.encode(s) for s in sentences]
        if self.regime == "window":
            from lmgrid.neural.data import window_examples  # imports Lightning (~3 s): loading a model does not need it

            x, y = window_examples(ids, self.n_step, self.bos, self.eos)
            lp = []
            for i in range(0, len(y), WINDOW_BATCH):
                logits, _, _ = self._forward(x[i:i + WINDOW_BATCH], last_only=True)
                lp.append(torch.log_softmax(logits[:, -1].float(), -1).gather(1, y[i:i + WINDOW_BATCH, None])[:, 0])
            flat = torch.cat(lp).tolist()
            out, pos = [], 0
            for s in ids:
                out.append(flat[pos:pos + len(s) + 1])
                pos += len(s) + 1
            return out
        out = []
        for s in ids:
            x = torch.tensor([[self.eos, *s]])
            y = torch.tensor([*s, self.eos])
            out.append(self._logprobs(x)[0].gather(1, y[:, None])[:, 0].tolist())
        return out

    @torch.no_grad()
    def next_logprobs(self, context: list[str]) -> list[float]:
        ids = self.vocab.encode(context)
        if self.regime == "window":
            k = self.n_step - 1
            window = ([self.bos] * k + ids)[-k:]
            logits, _, _ = self._forward(torch.tensor([window]), last_only=True)
            return torch.log_softmax(logits[0, -1].float(), -1).tolist()
        x = torch.tensor([[self.eos, *ids]])
        if self.model_is_stateless:
            x = x[:, -self.max_len:]
        return self._logprobs(x)[0, -1].tolist()

    @property
    def model_is_stateless(self) -> bool:
        return self.model.cfg.arch == "transformer"


def corpus_vocab_path(run_dir: Path) -> Path | None:
    """results/<corpus>/vocab.json for a run folder results/<corpus>/runs/<arch>/<impl>/<cell>."""
    parents = run_dir.resolve().parents
    if len(parents) > 3 and parents[2].name == "runs":
        return parents[3] / "vocab.json"
    return None


def load_run(run_dir, plugin_file: str | None = None) -> NeuralLM:
    """`plugin_file`: for a plug-in's run, a copy of the class's source file to import it from (an MLflow model's)."""
    run_dir = Path(run_dir)
    path = run_dir / "model.ckpt"
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except Exception as e:  # a truncated or foreign file
        raise LmgridError(f"{path}: not a readable lmgrid checkpoint ({type(e).__name__})") from None
    if not isinstance(blob, dict) or blob.get("format") != "lmgrid-neural-1":
        raise LmgridError(f"{path}: not an lmgrid neural checkpoint (format {blob.get('format')!r})"
                          if isinstance(blob, dict) else f"{path}: not an lmgrid neural checkpoint")
    tokens = blob["vocab"]["tokens"]
    vocab = Vocab(tokens, dict(zip(tokens, blob["vocab"]["counts"])))
    corpus_vocab = corpus_vocab_path(run_dir)
    if corpus_vocab is not None and corpus_vocab.is_file():
        current = Vocab.load(corpus_vocab)
        if current.tokens != tokens:
            raise LmgridError(f"{path}: its vocabulary ({len(tokens)} entries) differs from the corpus's "
                              f"{corpus_vocab} ({len(current)} entries); retrain the run")
    values = blob["model_config"]
    if {f.name for f in dataclasses.fields(ModelConfig)} - set(values):
        # A model.ckpt written before a ModelConfig field existed lacks it: the value that field's absence computed
        # (the schema's neutral default) fills it.  Read only then: a model logged to MLflow carries lmgrid's source
        # but not the schema, and its model.ckpt has every field.
        from lmgrid.run.spec import model_config_values

        values = model_config_values(values)
    if blob.get("plugin"):  # a plug-in's class, imported again from the reference (or the file) its run used
        from lmgrid.models.plugin import ensure

        ensure(blob["plugin"], plugin_file)
    cfg = ModelConfig(**values)
    model = build_model(cfg)
    model.load_state_dict(blob["state_dict"])
    run = blob["run"]
    return NeuralLM(model, vocab, run["regime"], run["n_step"], cfg.max_len, blob.get("precision", "32-true"))
