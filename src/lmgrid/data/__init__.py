"""The data stage: the synthetic corpus, raw data, the corpus splits, the vocabulary, the oracle and the perplexity convention."""
