"""Aggregation of finished runs into study tables, figures, findings, the summary, the published reference comparison and the HTML report."""
