"""Tracr's library program make_hist (Lindner et al. 2023): each position counts how many tokens of the text equal
its own. Its one head is a SelectorWidth over Select(tokens, tokens, EQ): it attends to every occurrence of the
query's token (itself and later ones included) and to BOS, and an MLP turns how much went to BOS into a count. No
census measure names that: a compiled head can do what no census category describes.
"""
from tracr.compiler import lib

name = "written: histogram"
vocab = {"a", "b", "c", "d"}
max_seq_len = 8
causal = False
program = lib.make_hist()
