"""`lmgrid <command>`: what a user runs on a grid (status, plan, score, generate), and the commands the workflow's
Snakemake rules run, one job each.

A rule's command takes explicit paths and values (no config lookups), so the rule's inputs, outputs and params say
everything the job depends on.  User errors, a bad option included, print one line and exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from lmgrid import __version__
from lmgrid.common.argtypes import count
from lmgrid.common.errors import LmgridError

# What `lmgrid --help` lists first: the commands a user runs.  Every other command is one a rule runs.
USER_COMMANDS = ("status", "plan", "score", "generate", "embed", "docs")
GROUPS_HELP = """\
The whole grid runs through Snakemake: `make run` (or `snakemake --cores N`); see README.md.

commands you run:
{user}

commands the workflow's rules run (one job each; usable by hand, with explicit paths):
{rules}

`lmgrid COMMAND --help` describes a command's options."""


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints the usage first), naming the command."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive(text: str) -> float:
    """An argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k, v


def cmd_synth(a) -> None:
    from lmgrid.data.oracle import write_sample
    from lmgrid.data.synth import Grammar, GrammarConfig

    try:
        grammar = Grammar(GrammarConfig(**json.loads(a.grammar)))
    except (TypeError, ValueError) as e:
        raise LmgridError(f"corpus.synth.grammar: {e}") from None
    sizes = {"train": a.train, "valid": a.valid, "test": a.test}
    # One stream of sentences cut into splits: the splits are i.i.d. draws from the same grammar.
    sample = grammar.sample(sum(sizes.values()), a.seed)
    start = 0
    for split, n in sizes.items():
        write_sample(sample[start:start + n], f"{a.out_dir}/{split}.txt", f"{a.out_dir}/{split}.logprob")
        start += n


def cmd_verify(a) -> None:
    from lmgrid.data.rawdata import verified_copy

    verified_copy(a.src, a.out, a.sha256, a.name)


def cmd_corpus(a) -> None:
    from lmgrid.data.corpus import prepare
    from lmgrid.data.rawdata import verify

    inputs = dict(a.input)
    for split, want in a.sha256:
        if split not in inputs:
            raise LmgridError(f"--sha256 {split}: no --input {split}=PATH to check")
        verify(inputs[split], want)
    ratios = {"train": a.ratios[0], "valid": a.ratios[1], "test": a.ratios[2]} if a.ratios else None
    cut = {}
    for split, n in a.max_sentences:
        try:
            cut[split] = int(n)
        except ValueError:
            raise LmgridError(f"--max-sentences {split}: {n!r} is not a count of sentences") from None
    # After the sha256 checks above: the sums are of the whole files, which a cut leaves as they are.
    prepare(a.kind, inputs, a.out_dir, lowercase=a.lowercase, max_len=a.max_len, ratios=ratios, seed=a.seed,
            max_sentences=cut)


def cmd_vocab(a) -> None:
    from lmgrid.data.vocab import run

    run(a.train, a.valid, a.test, a.out, a.report, a.min_count, a.max_size)


def cmd_oracle(a) -> None:
    from lmgrid.data.oracle import run

    splits = {}
    for name, pair in a.split:
        corpus_path, logp_path = pair.split(",", 1)
        splits[name] = (corpus_path, logp_path)
    run(a.vocab, a.out, **splits)


def cmd_summary(a) -> None:
    from lmgrid.analysis.summary import write

    write(a.corpus, a.corpus_stats, a.vocab_report, a.oracle, a.metrics, a.csv, a.md, a.html, a.reset)


def cmd_reference(a) -> None:
    import json

    from lmgrid.analysis.reference import write

    write(json.loads(a.rows), a.metrics, a.csv, a.md, a.tex, a.html, a.combinations, a.reset)


def cmd_score(a) -> None:
    from lmgrid import lm

    summary = lm.score_file(lm.load(a.run), a.text, a.out)
    # The vocabulary maps unknown words to <unk> silently; a text of mostly <unk> scores a PPL that says little.
    share = summary["unknown"] / summary["tokens"] if summary["tokens"] else 0.0
    print(f"# {a.text}: {summary['unknown']} of {summary['tokens']} counted tokens ({share:.1%}) are not in the "
          f"run's vocabulary and were scored as <unk>", file=sys.stderr)
    print(f"# {summary['sentences']} sentences, {summary['tokens']} counted tokens, "
          f"nll {summary['nll_nats']:.2f} nats, PPL {summary['ppl']:.3f}", file=sys.stderr)


def cmd_generate(a) -> None:
    from lmgrid import lm

    for sent in lm.sample(lm.load(a.run), a.n, a.seed, a.temperature, a.top_k, a.max_tokens):
        print(" ".join(sent))


# Subcommands contributed by the stages (model families, test time, analysis, tracking, orchestration): each module
# has `register(subparsers)`.
PLUGINS = ("lmgrid.ngram.cli", "lmgrid.neural.cli", "lmgrid.analysis.cli", "lmgrid.tracking.cli", "lmgrid.embed.cli",
           "lmgrid.testtime.combine.cli", "lmgrid.testtime.adapt.cli", "lmgrid.testtime.reset",
           "lmgrid.orchestration.scales", "lmgrid.analysis.budget_cli")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="lmgrid", usage="lmgrid [-h] [--version] COMMAND ...",
               formatter_class=argparse.RawDescriptionHelpFormatter,
               description="lmgrid: reproducible language-model experiments over context-length and depth grids.")
    p.add_argument("--version", action="version", version=f"lmgrid {__version__}")
    # The commands' own listing is suppressed: the description lists them in two groups (_group_commands).
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS, prog="lmgrid")

    s = sub.add_parser("warm-server", help="fork training jobs from one process that imported torch once")
    s.add_argument("--socket", required=True, help="Unix socket path (exported as LMGRID_WARM_SOCKET)")
    s.add_argument("--parent-pid", type=int, required=True, help="exit when this process (the workflow) is gone")
    s.add_argument("--idle-s", type=float, default=600.0, help="exit after this long without a job")
    s.set_defaults(func=cmd_warm_server)

    s = sub.add_parser("synth", help="sample the synthetic corpus with per-sentence oracle log-probs")
    s.add_argument("--out-dir", required=True, help="folder for {train,valid,test}.txt and their .logprob files")
    s.add_argument("--seed", type=int, default=1, help="sampling seed")
    for split in ("train", "valid", "test"):
        s.add_argument(f"--{split}", type=int, required=True, help=f"sentences in the {split} split")
    s.add_argument("--grammar", default="{}", help="JSON overrides of the grammar settings")
    s.set_defaults(func=cmd_synth)

    s = sub.add_parser("verify", help="copy a file to OUT only when its sha256 is the expected one")
    s.add_argument("src", help="the file to check (e.g. Snakemake's local copy of a download)")
    s.add_argument("--out", required=True, help="where the checked copy goes")
    s.add_argument("--sha256", required=True, help="the expected sha256 (hex)")
    s.add_argument("--name", help="how an error names the file (default: SRC), e.g. its URL")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("corpus", help="normalise raw input into train/valid/test and corpus_stats.json")
    s.add_argument("--kind", choices=["synth", "ptb", "text"], required=True, help="corpus.kind")
    s.add_argument("--input", type=_kv, action="append", required=True, help="SPLIT=PATH (or text=PATH)")
    s.add_argument("--out-dir", required=True, help="folder for the normalised splits and corpus_stats.json")
    s.add_argument("--lowercase", action="store_true", help="lowercase every token (corpus.lowercase)")
    s.add_argument("--max-len", type=int, default=0, help="drop sentences longer than this (0: keep all)")
    s.add_argument("--ratios", type=float, nargs=3, metavar=("TRAIN", "VALID", "TEST"),
                   help="kind text: how one file is split")
    s.add_argument("--seed", type=int, default=1, help="kind text: the seed of the split")
    s.add_argument("--sha256", type=_kv, action="append", default=[], help="SPLIT=HEX: check that input first")
    s.add_argument("--max-sentences", type=_kv, action="append", default=[], metavar="SPLIT=N",
                   help="keep the first N sentences of that split, after the checks and max_len (corpus.max_sentences)")
    s.set_defaults(func=cmd_corpus)

    s = sub.add_parser("vocab", help="build the vocabulary from train; report OOV rates")
    for name, what in (("train", "the train split (the vocabulary's source)"), ("valid", "the valid split"),
                       ("test", "the test split"), ("out", "output: vocab.json"),
                       ("report", "output: vocab_report.json")):
        s.add_argument(f"--{name}", required=True, help=what)
    s.add_argument("--min-count", type=int, default=1, help="keep words seen at least this often in train")
    s.add_argument("--max-size", type=int, default=0, help="keep at most this many words (0: no limit)")
    s.set_defaults(func=cmd_vocab)

    s = sub.add_parser("oracle", help="oracle perplexity of the synthetic corpus")
    s.add_argument("--vocab", required=True, help="vocab.json")
    s.add_argument("--split", type=_kv, action="append", required=True, help="NAME=CORPUS_TXT,LOGPROB")
    s.add_argument("--out", required=True, help="output: oracle.json")
    s.set_defaults(func=cmd_oracle)

    s = sub.add_parser("summary", help="write summary.csv and summary.md for one corpus")
    s.add_argument("--corpus", required=True, help="corpus name")
    s.add_argument("--corpus-stats", required=True, help="corpus_stats.json")
    s.add_argument("--vocab-report", required=True, help="vocab_report.json")
    s.add_argument("--oracle", help="oracle.json (synthetic corpora)")
    s.add_argument("--metrics", nargs="*", default=[], help="every run's metrics.json")
    s.add_argument("--reset", nargs="*", default=[], help="the stream runs' reset_scores.json (lmgrid reset-scores)")
    s.add_argument("--csv", required=True, help="output: summary.csv")
    s.add_argument("--md", required=True, help="output: summary.md")
    s.add_argument("--html", help="also the tables as one HTML page (for the Snakemake report)")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("reference", help="published perplexities beside ours (config `reference:`)")
    s.add_argument("--rows", required=True, help="the config's reference list, as JSON")
    s.add_argument("--metrics", nargs="*", default=[], help="the metrics.json of the runs the rows name")
    s.add_argument("--combinations", nargs="*", default=[], help="result.json of the combinations rows name (combine:)")
    s.add_argument("--reset", nargs="*", default=[], help="the stream runs' reset_scores.json (lmgrid reset-scores)")
    for ext in ("csv", "md", "tex", "html"):
        s.add_argument(f"--{ext}", required=True, help=f"output: the table as {ext.upper()}")
    s.set_defaults(func=cmd_reference)

    s = sub.add_parser("score", help="per-sentence log-prob and PPL of a text file under a trained run")
    s.add_argument("--run", required=True, help="a run folder (results/<corpus>/runs/...)")
    s.add_argument("--text", required=True, help="sentences to score, one a line, tokens separated by blanks")
    s.add_argument("--out", help="TSV output (default: stdout)")
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("generate", help="sample sentences from a trained run")
    s.add_argument("--run", required=True, help="a run folder (results/<corpus>/runs/...)")
    s.add_argument("-n", type=count(1), default=10, help="how many sentences (default 10)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    s.add_argument("--temperature", type=positive, default=1.0,
                   help="divides the log-probabilities: below 1 sharper, above 1 flatter (default 1)")
    s.add_argument("--top-k", type=count(0), default=0, help="sample among the k likeliest tokens (0: all)")
    s.add_argument("--max-tokens", type=count(1), default=100,
                   help="stop a sentence after this many tokens without </s> (default 100)")
    s.set_defaults(func=cmd_generate)

    for name, what in (("status", "every cell of the config: done (its valid and test PPL), running (epoch, valid "
                                  "PPL, ETA), failed or pending; the time spent and an estimate of what is left"),
                       ("plan", "before a run: how many cells each study adds and roughly what they cost")):
        s = sub.add_parser(name, help=what)
        s.add_argument("--configfile", action="append", default=[], help="applied over config.yaml, as Snakemake does")
        s.add_argument("--set", default="", metavar="'KEY=VALUE ...'", help="overrides, as --config set=... takes")
        s.add_argument("--cores", type=count(1), default=os.cpu_count() or 1,
                       help="cores of the run, for the wall-time estimate (default: this machine's)")
        s.add_argument("--snakefile", help="the workflow to plan with (default: ./Snakefile, of this folder)")
        s.set_defaults(func=cmd_progress, command_name=name)

    import importlib
    for name in PLUGINS:
        importlib.import_module(name).register(sub)
    _group_commands(p, sub)
    return p


def _group_commands(p: argparse.ArgumentParser, sub) -> None:
    """`lmgrid --help` lists the user's commands apart from the rules' ones, each with its one-line help; a command's
    own --help starts with that line too.  (argparse keeps a subcommand's help only on its listing entry.)"""
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, parser in sub.choices.items():
        parser.description = parser.description or helps.get(name)
    import textwrap

    width = max(map(len, helps)) + 2

    def listing(names) -> str:
        return "\n".join(textwrap.fill(f"  {n:<{width}}{helps[n]}", 110, subsequent_indent=" " * (width + 2))
                         for n in names)

    p.epilog = GROUPS_HELP.format(user=listing(USER_COMMANDS),
                                  rules=listing(sorted(n for n in helps if n not in USER_COMMANDS)))


def cmd_progress(a) -> None:
    from lmgrid.orchestration.progress import main as progress_main

    progress_main(a.command_name, a.configfile, a.set, a.cores, a.snakefile)


def cmd_warm_server(a) -> None:
    from lmgrid.orchestration.warm import serve

    build_parser()  # its plugin modules, imported here once: each forked job builds the parser again, from them
    serve(a.socket, a.parent_pid, a.idle_s, run=main)  # orchestration/warm.py imports nothing of this module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        from lmgrid.orchestration.warm import run_via_server  # a training job runs in a warm process when the workflow started one

        status = run_via_server(argv)
        if status is not None:
            return status
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except LmgridError as e:
        print(f"lmgrid: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
