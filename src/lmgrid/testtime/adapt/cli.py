"""`lmgrid adapt`: a trained stream run's valid and test PPL with a continuous cache or dynamic evaluation, the
settings chosen on valid (tune.py), written as one JSON file (and optionally test's per-token log-probs)."""
from __future__ import annotations

import sys
from pathlib import Path

from lmgrid.common.argtypes import count
from lmgrid.common.errors import LmgridError


def split_stream(vocab, path):
    """The split file's stream </s> w1 .. </s> .. </s> as token ids (lmgrid.neural.data.stream_tokens)."""
    from lmgrid.data.corpus import load_split
    from lmgrid.neural.data import encode, stream_tokens
    from lmgrid.data.ppl import EOS

    if not Path(path).is_file():
        raise LmgridError(f"{path}: file not found")
    return stream_tokens(encode(vocab, load_split(path)), vocab.index[EOS])


def needs_train(method: str, grid: dict | None) -> bool:
    """Whether a method with this grid reads the training split: dynamic evaluation's rule rms (its MS_g)."""
    return "dynamic" in method and (grid or {}).get("rule", "sgd") == "rms"


def run_settings(run_dir: Path) -> dict:
    """The run's bptt and clip, from its checkpoint's training settings."""
    import torch

    hp = torch.load(run_dir / "model.ckpt", map_location="cpu", weights_only=True).get("hparams", {})
    return {"bptt": int(hp.get("bptt", 35)), "clip": float(hp.get("clip") or 0.0)}


def cmd_adapt(a) -> None:
    import numpy as np
    import torch

    from lmgrid.common.fileio import write_json
    from lmgrid.neural.allocator import keep_freed_blocks
    from lmgrid.neural.model_io import load_run

    from lmgrid.testtime.adapt.tune import adapt

    keep_freed_blocks()  # dynamic evaluation frees and reallocates the same gradients every segment, as training does
    if a.threads:
        torch.set_num_threads(a.threads)
    from lmgrid.testtime.adapt.tune import parse_grid

    grid = parse_grid(a.grid)
    run_dir = Path(a.run)
    lm = load_run(run_dir)
    if lm.regime != "stream":
        raise LmgridError(f"{run_dir}: a {lm.regime}-regime run; the cache and dynamic evaluation need a stream run")
    settings = run_settings(run_dir)
    valid, test = split_stream(lm.vocab, a.valid), split_stream(lm.vocab, a.test)
    if needs_train(a.method, grid) and not a.train:
        raise LmgridError(f"--method {a.method} with rule rms needs --train (its gradient statistics)")
    train = split_stream(lm.vocab, a.train) if needs_train(a.method, grid) else None
    result = adapt(lm.model, valid, test, a.method, grid=grid, train_ids=train, **settings)
    test_logp = result.pop("test_log_probs")
    result.pop("valid_log_probs")
    if a.log_probs:
        with open(a.log_probs, "wb") as fh:
            np.save(fh, test_logp)
    write_json(a.out, {"run": str(run_dir), **settings, "threads": torch.get_num_threads(), **result})
    print(f"{a.method}: chose {result['settings']} on valid; valid PPL {result['base_valid_ppl']:.2f} -> "
          f"{result['valid_ppl']:.2f}, test PPL {result['base_test_ppl']:.2f} -> {result['test_ppl']:.2f} "
          f"(tuning {result['tune_s']:.0f} s, test {result['test_s']:.0f} s)", file=sys.stderr)


def register(sub) -> None:
    s = sub.add_parser("adapt", help="a stream run's valid and test PPL with a neural cache or dynamic evaluation, "
                                     "tuned on valid")
    s.add_argument("--run", required=True, help="the run folder (holding model.ckpt) of a stream-regime run")
    s.add_argument("--valid", required=True, help="the valid split the settings are chosen on")
    s.add_argument("--test", required=True, help="the test split, scored once with the chosen settings")
    s.add_argument("--train", default="", help="the train split: dynamic evaluation's rule rms computes its "
                                               "gradient statistics on it (read only then)")
    s.add_argument("--method", required=True, choices=("cache", "dynamic", "dynamic+cache"),
                   help="cache (Grave et al. 2017), dynamic (Krause et al. 2018; SGD, or RMS with decay given "
                        "--grid '{\"rule\": \"rms\"}') or both")
    s.add_argument("--grid", default="", help="JSON {setting: [values]} replacing the default grid (docs/adapt.md)")
    s.add_argument("--out", required=True, help="the result JSON: settings, valid and test PPL, every grid point")
    s.add_argument("--log-probs", default="", help="also write test's per-token log-probs (float32 .npy)")
    s.add_argument("--threads", type=count(0), default=1, help="torch CPU threads (default 1; 0 = torch's default)")
    s.set_defaults(func=cmd_adapt)
