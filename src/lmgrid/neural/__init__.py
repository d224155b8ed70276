"""Training neural language models with Lightning (models themselves live in lmgrid.models)."""
