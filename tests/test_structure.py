"""The package's import floors (between modules and between packages), the tree's shape and the workflow
profiles' places: checks that need no run."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


def _modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / "lmgrid").rglob("*.py"):
        parts = f.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the lmgrid modules it imports anywhere in its body (function-level imports included: an import
    deferred to call time is still a dependency)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, f in mods.items():
        package = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module
                found = [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            deps |= {m for m in found if m in mods and m != name and not name.startswith(m + ".")}
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, as the path that closes it (depth-first search; one path per circle found)."""
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_module_imports_a_floor_above_it():
    """Each module imports only from modules below it: no import circle, not even through a deferred import.

    kills: orchestration/warm.py importing lmgrid.cli (for main) while cli imports warm; orchestration/config.py and run/settings.py
    importing each other (the schema reader back in orchestration/config.py)."""
    assert cycles(import_graph()) == []


def test_the_check_sees_a_deferred_circle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b", "a"]]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto lmgrid's packages (`lmgrid.neural.train` -> `lmgrid.neural`); a module at the
    top (`lmgrid.cli`, `lmgrid.lm`) is a unit of its own.  Imports within a package are dropped."""
    def unit(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(unit(m), set()).update(unit(d) for d in deps if unit(d) != unit(m))
    return out


def test_no_package_imports_one_that_imports_it():
    """The packages form floors too: data below ngram and neural, the run contract below training, training below
    test time, analysis and tracking; no package reaches one that reaches it back.

    kills: a package loop put back, as before the folders were the stages: neural/cli importing the live-logging
    tags from the analysis layer, which reaches the models through the pyfunc model (the negative control adds that
    one import to the real graph and the check finds the loop)."""
    graph = import_graph()
    assert cycles(package_graph(graph)) == []
    mutant = {m: set(d) for m, d in graph.items()}
    mutant["lmgrid.neural.cli"].add("lmgrid.tracking.mirror")
    assert any("lmgrid.neural" in c and "lmgrid.tracking" in c for c in cycles(package_graph(mutant)))


# The top of src/lmgrid holds the entry points only; every other module sits in the package of its stage.
TOP_MODULES = {"__init__.py", "__main__.py", "cli.py", "lm.py"}


def test_the_top_level_holds_only_the_entry_points():
    """Kills: a module added loose at the top of src/lmgrid (the tree no longer reads as the pipeline's stages)."""
    loose = {f.name for f in (SRC / "lmgrid").glob("*.py")} - TOP_MODULES
    assert loose == set(), f"put {sorted(loose)} into the package of its stage (docs/architecture.md)"


def test_profiles_sit_where_snakemake_looks_for_them():
    """Workflow profiles: profiles/<name>/profile.yaml next to the Snakefile (`--workflow-profile <name>`);
    profiles/default is loaded by itself.  No profile elsewhere, and nothing names an old place."""
    assert (REPO / "Snakefile").is_file()
    names = sorted(p.parent.name for p in (REPO / "profiles").glob("*/profile.yaml"))
    assert names == ["default", "slurm"]
    assert yaml.safe_load((REPO / "profiles/slurm/profile.yaml").read_text())["executor"] == "slurm"
    assert not (REPO / "workflow" / "profiles").exists()
    for f in ["Makefile", "README.md", "config.yaml", *map(str, REPO.glob("docs/*.md")),
              *(str(p) for p in REPO.glob("tests/cluster/*") if p.is_file())]:  # not its __pycache__
        text = (REPO / f).read_text()
        assert "workflow/profiles" not in text and "profiles/default/config.yaml" not in text, f


# study_grids writes the config's studies with one printf: nothing worth timing.
NO_BENCHMARK = {"study_grids"}


def rules_without(text: str, directive: str) -> set[str]:
    """Names of the `rule` blocks of a .smk text with no `<directive>:` line (`use rule ... with:` inherits)."""
    blocks = re.split(r"^ *rule (\w+):\n", text, flags=re.M)  # scales.smk's rule sits inside an `if`
    return {name for name, body in zip(blocks[1::2], blocks[2::2])
            if not re.search(rf"^ +{directive}:", body.split("\n\n\n")[0], re.M)}


def test_every_rule_has_a_log_and_a_benchmark():
    """A log on every rule (the style guide), and a benchmark file, from which `make status` estimates and issue 26
    reads the minutes each stage adds.  Kills: a rule added or edited without them (the negative control: the
    combine rule's text with its benchmark line removed is caught)."""
    texts = {p.name: p.read_text() for p in sorted((REPO / "workflow" / "rules").glob("*.smk"))}
    for directive in ("log", "benchmark"):
        exempt = NO_BENCHMARK if directive == "benchmark" else set()
        missing = set().union(*(rules_without(t, directive) for t in texts.values())) - exempt
        assert not missing, f"rules without {directive}: {sorted(missing)}"
    mutant = re.sub(r'    benchmark:\n        "results/\{corpus\}/benchmarks/combine_\{combo\}\.tsv"\n', "",
                    texts["combine.smk"])
    assert mutant != texts["combine.smk"] and rules_without(mutant, "benchmark") == {"combine"}
    assert "scales" in rules_without(texts["scales.smk"].replace("benchmark:", "bench:"), "benchmark")


def test_every_rule_has_a_one_line_message():
    """Each job of `make run` starts with one line (`message: brief(...)`), not Snakemake's block of inputs and
    outputs.  Kills: a rule added without a message (the embeddings rule had none); the negative control, the
    embeddings rule's text with its message removed, is caught."""
    texts = {p.name: p.read_text() for p in sorted((REPO / "workflow" / "rules").glob("*.smk"))}
    missing = set().union(*(rules_without(t, "message") for t in texts.values()))
    assert not missing, f"rules without a message: {sorted(missing)}"
    mutant = re.sub(r"    message:\n        brief\(.*\)\n", "", texts["embed.smk"])
    assert mutant != texts["embed.smk"] and rules_without(mutant, "message") == {"embeddings"}


def test_import_paths_users_rely_on_survive_the_move(monkeypatch):
    """`lmgrid.lm` (load, score, sample) and the pyfunc class that MLflow models logged before the tree took its stage
    shape name in their pickle (`lmgrid.aggregate.pyfunc_model.LmgridPyfunc`; such a model, logged at ff3d80b,
    was loaded and scored with this tree).  Kills: the lmgrid/aggregate shim removed (the negative control hides it
    and the old pickle no longer loads)."""
    import importlib
    import pickle

    from lmgrid.tracking.pyfunc_model import LmgridPyfunc

    lm = importlib.import_module("lmgrid.lm")
    assert all(callable(getattr(lm, name)) for name in ("load", "score_file", "sample"))
    old_pickle = b"clmgrid.aggregate.pyfunc_model\nLmgridPyfunc\n."  # protocol 0: a reference to the class by name
    assert pickle.loads(old_pickle) is LmgridPyfunc
    monkeypatch.setitem(sys.modules, "lmgrid.aggregate.pyfunc_model", None)  # the shim gone
    with pytest.raises(ImportError):
        pickle.loads(old_pickle)
