"""The run contract: the schema's settings, run keys and folders, the RunRecord (metrics.json) and the facts about gated models that every stage shares."""
