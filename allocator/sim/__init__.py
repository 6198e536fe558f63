"""Discrete-event simulation of job batches and traces over the online engine."""
