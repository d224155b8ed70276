"""The address `make mlflow` prints (lmgrid.tracking.view): MLflow's UI on the experiment's training runs, with
valid and test PPL shown and sorted by valid PPL.

Seen working in MLflow 3.17.2's UI in headless Chromium (a server start and a page render take a minute on a busy
2-core machine, so no test starts one); what can break without a browser is checked here: every name the address
and the shared view use is one the installed UI's code reads, and the store's experiments carry the view.
"""
from __future__ import annotations

import json
import re
from importlib.util import find_spec
from pathlib import Path

from lmgrid.tracking import mirror, view


def _bundle() -> str:
    """The installed MLflow UI's JavaScript, as one text."""
    js = Path(find_spec("mlflow").origin).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(js.glob("*.js")))


def _string_lists(bundle: str, member: str) -> set[str]:
    """Every string of the bundle's literal string arrays that hold `member` (e.g. MLflow's list of URL facets)."""
    out: set[str] = set()
    for arr in re.findall(r'\[(?:"[A-Za-z]+",)*"' + member + r'"(?:,"[A-Za-z]+")*\]', bundle):
        out |= set(json.loads(arr))
    return out


def view_problems(bundle: str, training_view: dict, params: dict, tag: str) -> list[str]:
    """Names of the shared view, its tag and the address that the UI's code does not read."""
    problems = []
    facets, ui_state = _string_lists(bundle, "orderByKey"), _string_lists(bundle, "selectedColumns")
    problems += [f"view key {k!r}" for k in training_view if k not in facets | ui_state]
    if not tag.startswith('mlflow.sharedViewState.') or '"mlflow.sharedViewState."' not in bundle:
        problems.append(f"tag {tag!r}")
    share_key = next(k for k, v in params.items() if v == view.VIEW_KEY)
    if f'"{share_key}"' not in bundle:
        problems.append(f"URL parameter {share_key!r}")
    kind = next(k for k in params if k != share_key)
    if f'.get("{kind}")' not in bundle or f'MACHINE_LEARNING="{params[kind]}"' not in bundle:
        problems.append(f"URL parameter {kind}={params[kind]}")
    # a column or sort key is <type>.`<name>` (MLflow: e+".`"+t+"`"), of type metrics for PPL
    keys = [training_view["orderByKey"], *training_view["selectedColumns"]]
    problems += [f"column key {k!r}" for k in keys if not re.fullmatch(r"metrics\.`\w+`", k)]
    return problems


def test_every_name_of_the_view_is_one_mlflow_reads():
    """Kills: a misspelled view key (selectedColumn), the kind parameter with a value the UI ignores
    (workflowType=ml), a column key without MLflow's backticks.  Controls, run here: each of those fails."""
    bundle = _bundle()
    assert view_problems(bundle, view.TRAINING_VIEW, view.URL_PARAMS, view.VIEW_TAG) == []
    assert "valid_ppl" in view.TRAINING_VIEW["orderByKey"] and view.TRAINING_VIEW["orderByAsc"] is True
    assert {c.split("`")[1] for c in view.TRAINING_VIEW["selectedColumns"]} >= {"valid_ppl", "test_ppl"}
    misspelled = {**view.TRAINING_VIEW, "selectedColumn": view.TRAINING_VIEW["selectedColumns"]}
    assert view_problems(bundle, misspelled, view.URL_PARAMS, view.VIEW_TAG) == ["view key 'selectedColumn'"]
    ml = {**view.URL_PARAMS, "workflowType": "ml"}
    assert view_problems(bundle, view.TRAINING_VIEW, ml, view.VIEW_TAG) == ["URL parameter workflowType=ml"]
    bare = {**view.TRAINING_VIEW, "orderByKey": "metrics.valid_ppl"}
    assert view_problems(bundle, bare, view.URL_PARAMS, view.VIEW_TAG) == ["column key 'metrics.valid_ppl'"]


def test_every_lmgrid_experiment_gets_the_view_and_an_address(tmp_path, new_store, monkeypatch):
    """A synced experiment carries the view from its creation; one synced before the view existed (only the
    experiment-kind tag) gets it when the addresses are printed; an experiment of someone else is left alone.
    Kills: an address naming a shared view the experiment does not hold (MLflow then shows "share key does not
    exist").  Control, run here: with `ensure` a no-op the older experiment has no view."""
    from mlflow import MlflowClient

    uri = new_store(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    new = mirror.experiment_id(client, "synth", uri)
    older = client.create_experiment("ptb", tags=mirror.EXPERIMENT_KIND)
    other = client.create_experiment("someone-else")

    def tagged(exp_id: str) -> bool:
        return client.get_experiment(exp_id).tags.get(view.VIEW_TAG) == json.dumps(view.TRAINING_VIEW)

    assert tagged(new) and not tagged(older)
    with monkeypatch.context() as m:
        m.setattr(view, "ensure", lambda client, exp_id: None)
        view.urls(uri, "http://127.0.0.1:5000")
        assert not tagged(older)
    found = dict(view.urls(uri, "http://127.0.0.1:5000/"))
    assert found == {name: f"http://127.0.0.1:5000/#/experiments/{i}/runs?workflowType=machine_learning&"
                           f"viewStateShareKey={view.VIEW_KEY}" for name, i in (("synth", new), ("ptb", older))}
    assert tagged(older) and not tagged(other)
