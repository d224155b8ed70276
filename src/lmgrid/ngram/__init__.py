"""N-gram language models: vectorised counting, add-k / Katz / Kneser-Ney / modified Kneser-Ney
estimation, ARPA export and back-off scoring.

counts.py   sentences -> id stream -> n-gram tables (counts.npz), in memory
external.py the same tables from a file of any size, counted on disk within a memory budget
store.py    on-disk tables read and written in slices (Tables, Filler)
estimate.py count tables -> back-off tables (log-prob and back-off weight per n-gram)
arpa.py     back-off tables <-> ARPA text
model.py    scoring by the shared convention (lmgrid.data.ppl), a run's training job, `load_run`
cli.py      the `ngram-counts` and `ngram` subcommands
"""
