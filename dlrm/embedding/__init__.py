"""Embedding tables: the planner (pure Python), the single-process layer and its sharded twin."""
