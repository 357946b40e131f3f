"""The in-repo multi-head attention stack: attention, architecture, corpus, trainer, probes and its adapter."""
