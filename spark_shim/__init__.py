"""Spark driver shim: per-executor demand vectors from Spark confs, and the submit wrapper."""
