"""Runtimes: run a model for real to measure what graphmem predicts (they touch frameworks)."""
