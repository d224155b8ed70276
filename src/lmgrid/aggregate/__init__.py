"""The old home of the analysis and tracking modules, kept only so that MLflow models logged before the source tree
took its stage shape (docs/architecture.md) still load: their pickled pyfunc model names
`lmgrid.aggregate.pyfunc_model.LmgridPyfunc`. New code imports lmgrid.analysis and lmgrid.tracking."""
