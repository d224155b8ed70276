"""Studies after training: per-study tables, figures, the gate-effect estimate and the MLflow sync.

`layout` says which files a study produces (light, used by Snakemake); `collect` reads the run
folders of docs/contracts.md into pandas; `tables`, `effects` and `plots` write the study outputs;
`tracking` mirrors runs and studies into MLflow; `cli` adds `lmgrid aggregate` and `lmgrid mlflow-sync`.
"""
