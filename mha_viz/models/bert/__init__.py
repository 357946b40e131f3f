"""The in-repo BERT encoder, for MiniLM without transformers (see architecture.py for why)."""
