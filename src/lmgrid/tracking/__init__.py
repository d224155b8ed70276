"""The MLflow mirror of the results folder and the pyfunc model it logs."""
