"""Cluster backends: where the broker's grants become running executors."""
