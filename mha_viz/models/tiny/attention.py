"""The tiny model's attention is the shared in-repo one (mha_viz/models/attention.py, also under the BERT
encoder); this name stays for the tests and links that know it."""
from mha_viz.models.attention import MultiHeadSelfAttention, attention, check_stack_inputs  # noqa: F401
