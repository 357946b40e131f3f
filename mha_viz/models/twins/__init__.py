"""Learned twins of the written models: the in-repo stack (models/tiny) trained from scratch on what a compiled
program computes, its own outputs as labels (`train.py`), loaded like the written model it copies (`adapter.py`)."""
