"""The address that opens an lmgrid experiment in MLflow's UI on its training runs, valid and test PPL shown.

MLflow 3.17's UI does not read the experiment tag `mlflow.experimentKind` to pick its view: a global switch
(GenAI / Model training, kept in the browser's localStorage as `mlflow.workflowType`, GenAI by default) decides,
and an experiment opens on the GenAI overview (traces, token usage).  The URL parameter `workflowType=
machine_learning`, read from the hash route's query (`#/experiments/<id>/runs?workflowType=...`), overrides it.
Which columns the runs table shows is browser state too (none of the metrics by default); a *shared view* carries
it: the experiment tag `mlflow.sharedViewState.<key>` holds the view as JSON (search facets: filter, sort; UI state:
the selected columns), and `viewStateShareKey=<key>` in the URL opens it.  Checked in MLflow 3.17.2's UI in
headless Chromium (screenshots in the session's notes): the runs table of the cells only, sorted by valid PPL
(ascending; the choice is on valid, never test), with the valid_ppl and test_ppl columns.

`python -m lmgrid.tracking.view --tracking-uri sqlite:///results/mlflow.db` (`make mlflow`) makes sure every lmgrid
experiment of the store carries the view (stores synced before it existed get it) and prints one address per
experiment.
"""
from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import urlencode

# The UI's own value for classic model training (its experiment-kind selector sets the same tag); the UI does not
# open an experiment by it (see above), but it marks lmgrid's experiments.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# The shared view's key (in the tag's name and the URL) and its content: MLflow's own names for the search facets
# (searchFilter, orderByKey, orderByAsc) and the UI state (selectedColumns); a column's key is `<type>.\`<name>\``.
VIEW_KEY = "lmgrid-training"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
TRAINING_VIEW = {
    "searchFilter": "tags.`lmgrid.kind` = 'cell'",
    "orderByKey": "metrics.`valid_ppl`",
    "orderByAsc": True,
    "selectedColumns": ["metrics.`valid_ppl`", "metrics.`test_ppl`"],
}
VIEW_TAGS = {VIEW_TAG: json.dumps(TRAINING_VIEW)}
URL_PARAMS = {"workflowType": "machine_learning", "viewStateShareKey": VIEW_KEY}


def url(base: str, experiment_id: str) -> str:
    """The address of the experiment's training runs view on a UI at `base` (e.g. http://127.0.0.1:5000)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{urlencode(URL_PARAMS)}"


def ensure(client, experiment_id: str) -> None:
    """Give the experiment the shared training view (idempotent)."""
    exp = client.get_experiment(experiment_id)
    for k, v in VIEW_TAGS.items():
        if exp.tags.get(k) != v:
            client.set_experiment_tag(experiment_id, k, v)


def urls(tracking_uri: str, base: str) -> list[tuple[str, str]]:
    """(experiment name, address) for every active lmgrid experiment of the store (those with the experiment-kind
    tag the mirror sets), each given the view first, under the store's writer lock (it writes tags, and opening a
    fresh or older store creates or migrates its schema)."""
    from mlflow import MlflowClient

    from lmgrid.tracking import store_lock

    with store_lock.writing(tracking_uri):
        client = MlflowClient(tracking_uri=tracking_uri)
        out = []
        for exp in client.search_experiments():
            if all(exp.tags.get(k) == v for k, v in EXPERIMENT_KIND.items()):
                ensure(client, exp.experiment_id)
                out.append((exp.name, url(base, exp.experiment_id)))
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default="sqlite:///results/mlflow.db")
    p.add_argument("--base", default="http://127.0.0.1:5000", help="where the UI will listen")
    a = p.parse_args(argv)
    found = urls(a.tracking_uri, a.base)
    if not found:
        print(f"make mlflow: no lmgrid experiment in {a.tracking_uri} yet (run make run first)", file=sys.stderr)
    for name, address in found:
        print(f"MLflow: experiment {name!r}, its training runs (valid and test PPL, sorted by valid PPL): {address}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
