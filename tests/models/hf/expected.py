"""What the architecture matrix expects to fail today (test_architectures.py marks these xfail(strict=True);
docs/models.md's table is rendered from them by compat_table.py)."""

# Architectures of the matrix refused before any weights load, and why (what the refusal names).
NOT_LOADING: dict[str, str] = {}
# (architecture, check): why that check fails on an architecture that loads.
FAILING: dict[tuple[str, str], str] = {
    ("OLMo", "circuits"): "clip_qkv clamps q, k and v after the projection, which weights per head leave out: "
                          "values past the clip differ",
    **{(arch, "generate"): "the decoder of encoder-decoder models does not write a continuation yet (Continue is for "
                           "one-text causal models; issue 55's last item)" for arch in ("T5", "BART", "Marian")},
}
