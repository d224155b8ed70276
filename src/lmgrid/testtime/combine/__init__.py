"""Per-token score files of every cell and their combinations (issue 26).

scorefile.py  the score-file format: write, read, check (docs/contracts.md, "Score files")
cells.py      a cell's scores by mode (`base`: the run's own evaluation pass); test-time modes register in MODES
mixture.py    linear interpolation with weights fitted by EM on valid
table.py      a combination's result: result.json and its table (CSV, Markdown, HTML)
select.py     the config's `combine:` section: which cells and modes each combination takes
jobs.py       the combine stage's jobs: what each reads and is told (workflow/rules/combine.smk)
cli.py        `lmgrid token-scores` and `lmgrid combine`
"""
