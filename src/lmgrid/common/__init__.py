"""Shared plumbing with no knowledge of language models: errors, atomic file I/O, resource usage."""
