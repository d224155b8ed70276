"""`lmgrid token-scores` (one cell, one mode: rule token_scores), `lmgrid combine` (one run of a combination: rule
combine), `lmgrid combinations` (every combination in one table, and the paired bootstraps of compare.py)."""
from __future__ import annotations



def cmd_token_scores(a) -> None:
    from lmgrid.testtime.adapt.tune import parse_grid

    from lmgrid.testtime.combine.cells import write_scores

    grid = parse_grid(a.grid)
    out = write_scores(a.run_dir, a.valid, a.test, a.vocab, a.mode, a.out_dir, grid, train=a.train)
    print(f"{a.run_dir} ({a.mode}): " + ", ".join(f"{s} {v.count} tokens, PPL {v.file_ppl():.3f} (the run's "
                                                  f"{v.ppl:.3f})" for s, v in out.items()), flush=True)


def cmd_combine(a) -> None:
    from lmgrid.common.errors import LmgridError

    from lmgrid.testtime.combine import scorefile, table
    from lmgrid.testtime.combine.adapted import read_settings
    from lmgrid.testtime.combine.mixture import combine
    from lmgrid.neural.allocator import keep_freed_blocks

    # EM's thousands of steps each allocate and free arrays of components x tokens (logsumexp's temporaries): with
    # glibc's defaults every step faulted in fresh pages, as much system time as arithmetic (as in training).
    keep_freed_blocks()
    labels, dirs = zip(*a.component)
    valid = [scorefile.read(d, "valid") for d in dirs]
    test = [scorefile.read(d, "test") for d in dirs]
    m = combine(list(labels), valid, test)
    components = [{"label": label, "score_dir": d, "run_dir": s.run_dir, "mode": s.mode} for label, d, s in
                  zip(labels, dirs, valid)]
    for c in components:  # a test-time mode's choice on valid (adapt.json), with the combination's result
        record = read_settings(c["score_dir"])
        if record is None and c["mode"] != "base":
            raise LmgridError(f"{c['score_dir']}: scores of mode {c['mode']} without its adapt.json (the settings "
                              f"chosen on valid)")
        if record is not None:
            c["adapt"] = {k: record[k] for k in ("method", "settings", "valid_ppl", "test_ppl", "base_valid_ppl",
                                                 "base_test_ppl", "grid", "tune_s", "test_s") if k in record}
    table.write(a.out_dir, a.name, m, components, a.description, seed=a.seed, run=a.run or a.name)
    weights = ", ".join(f"{label} {w:.3f}" for label, w in zip(labels, m.weights))
    print(f"{a.name}: valid PPL {m.valid_ppl:.3f}, test PPL {m.test_ppl:.3f}; weights {weights}", flush=True)


def cmd_combinations(a) -> None:
    from lmgrid.common.errors import LmgridError
    from lmgrid.testtime.combine.table import summary

    summary(a.results, a.csv, a.md, a.html, a.by_seed_csv)
    if not a.pair:
        return
    missing = [o for o in ("test", "vocab", "compare_csv", "compare_md", "compare_html") if not getattr(a, o)]
    if missing:
        raise LmgridError(f"combinations --pair: give --{missing[0].replace('_', '-')} too")
    from lmgrid.testtime.combine.compare import RESAMPLES, run

    table = run(a.pair, a.results, a.test, a.vocab, a.compare_csv, a.compare_md, a.compare_html,
                a.resamples or RESAMPLES)
    for r in table.itertuples():
        print(f"{r.combination} - {r.compare_with} (seed {r.seed}): test PPL difference {r.difference:+.3f}, "
              f"95% bootstrap CI [{r.ci95_low:+.3f}, {r.ci95_high:+.3f}]", flush=True)


def _component(text: str) -> tuple[str, str]:
    import argparse

    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected LABEL=SCORE_DIR, got {text!r}")
    label, folder = text.rsplit("=", 1)
    return label, folder


def _pair(text: str) -> tuple[str, str]:
    import argparse

    if text.count("=") != 1 or not all(text.split("=")):
        raise argparse.ArgumentTypeError(f"expected NAME=COMPARE_WITH, got {text!r}")
    name, other = text.split("=")
    return name, other


def register(sub) -> None:
    s = sub.add_parser("token-scores", help="per-token log-probs of valid and test of one cell (score files)")
    s.add_argument("--run-dir", required=True, help="the cell's run folder (results/<corpus>/runs/...)")
    s.add_argument("--valid", required=True, help="the valid split")
    s.add_argument("--test", required=True, help="the test split")
    s.add_argument("--train", default="", help="the train split, for a test-time mode that reads it (dynamic "
                                               "evaluation's rule rms: its gradient statistics); never scored")
    s.add_argument("--vocab", required=True, help="vocab.json (the target ids of the checksum)")
    s.add_argument("--mode", default="base", help="base (the run's own evaluation pass) or a test-time mode: "
                                                  "cache, dynamic, dynamic+cache (docs/adapt.md)")
    s.add_argument("--grid", default="", help="a test-time mode's grid, JSON {setting: [values]} (default: "
                                              "lmgrid.testtime.adapt.tune's)")
    s.add_argument("--out-dir", required=True, help="output folder: {valid,test}.{npy,json}")
    s.set_defaults(func=cmd_token_scores)

    s = sub.add_parser("combine", help="linear interpolation of cells' score files, weights fitted by EM on valid")
    s.add_argument("--name", required=True, help="the combination's name (config combine.<name>)")
    s.add_argument("--component", type=_component, action="append", required=True, metavar="LABEL=SCORE_DIR",
                   help="a component: its label and its score folder (repeat)")
    s.add_argument("--description", default="", help="a line for the table's caption")
    s.add_argument("--seed", type=int, default=None, help="the seed its components that pin none were taken from "
                                                           "(absent: a combination of one run)")
    s.add_argument("--run", default="", help="the run's folder name under combine/ (<name> or <name>/s<seed>; "
                                             "default: the name), its MLflow run")
    s.add_argument("--out-dir", required=True, help="output folder: result.json, table.{csv,md,html}")
    s.set_defaults(func=cmd_combine)

    s = sub.add_parser("combinations", help="every combination's result in one table (CSV, Markdown, HTML)")
    s.add_argument("--results", nargs="*", default=[], help="the combinations' result.json files")
    for ext in ("csv", "md", "html"):
        s.add_argument(f"--{ext}", required=True, help=f"output: the table as {ext.upper()}")
    s.add_argument("--by-seed-csv", default="", help="output: one row per run (combination and seed), CSV")
    # The paired bootstraps (compare.py) ride on this command: they read the same result files.
    s.add_argument("--pair", type=_pair, action="append", default=[], metavar="NAME=COMPARE_WITH",
                   help="a combination and the one it is compared with by a paired bootstrap over test sentences "
                        "(repeat; needs --test, --vocab and the --compare-* outputs)")
    s.add_argument("--test", default="", help="the test split (its sentence boundaries), with --pair")
    s.add_argument("--vocab", default="", help="vocab.json (the targets' checksum against the score files), "
                                               "with --pair")
    s.add_argument("--resamples", type=int, default=0, help="bootstrap resamples (0: compare.RESAMPLES)")
    for ext in ("csv", "md", "html"):
        s.add_argument(f"--compare-{ext}", default="", help=f"output, with --pair: the comparisons as {ext.upper()}")
    s.set_defaults(func=cmd_combinations)

