"""What one grid cell is and how it runs: the run spec (`lmgrid.run.spec`), the one file a training job reads."""
