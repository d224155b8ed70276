"""Test-time work on trained models: dynamic evaluation and caches (adapt), mixtures (combine)."""
