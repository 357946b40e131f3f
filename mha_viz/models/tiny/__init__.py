"""The in-repo multi-head attention stack: attention, architecture, corpus, trainer, evidence and its adapter.
Its probe command (measuring every saved step) is mha_viz/tiny_probes.py, above models/ and analysis/."""
