"""Embeddings of the trained neural models: word vectors (exported in word2vec format), sentence vectors, their
evaluation against standard benchmarks beside a count-based baseline and a random control (docs/contracts.md).

* export: a run's word and sentence vectors, and the nearest sentences of a file to a query (`lmgrid embed`);
* ppmi: the baselines, PPMI-SVD over the training corpus and random vectors;
* evaluate: WordSim-353, SimLex-999 and the analogies shipped with gensim, and nearest neighbours;
* paired: a study's vector sets compared on their common pairs (paired bootstrap over pairs and words, seeds);
* pipeline: every neural cell of a config and the baselines, and each study's table and map (`lmgrid embeddings`).
"""
