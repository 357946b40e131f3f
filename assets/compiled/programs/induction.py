"""The induction circuit, written out (Olsson et al. 2022's two heads): a previous-token head in layer 0 copies each
token's predecessor into its position; an induction head in layer 1 looks for the positions whose predecessor is the
current token, and reads the token there: what followed the current token last time. Its keys come from the first
head's output, so this is the K-composition Circuits should find as its top pair.
"""
from tracr.compiler import lib
from tracr.rasp import rasp

name = "written: induction"
vocab = {"a", "b", "c", "d", "e"}
max_seq_len = 10
causal = True

previous = lib.shift_by(1, rasp.tokens).named("previous")
after_earlier = rasp.Select(previous, rasp.tokens, rasp.Comparison.EQ).named("after_earlier")
program = rasp.Aggregate(after_earlier, rasp.tokens, default=None).named("induction")
