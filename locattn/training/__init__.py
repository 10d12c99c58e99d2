"""Pieces of one training run: batching, checkpoints, evaluation, recorders.

The public entry point is :func:`locattn.train.train`.
"""
