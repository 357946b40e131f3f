"""Three heads side by side in one layer, on the same tokens, each with its own query, key and value projections,
their outputs combined by the MLPs after them: multi-head attention as the notes define it, written, not learned.

    previous   nearby context: each token reads the token before it (Tracr's lib.shift_by(1) on its (token, index))
    seen       repeated terms: each token reads whether its token occurred at an earlier position
    first      structure: each token reads the first token of the text, where its one segment starts (a pointer to
               a fixed position of the structure; no census measure names it, and the census must say so)
Layer 0 holds no head, only the MLP that pairs each token with its index: one Select then compares both (same token,
earlier position), which Tracr compiles (it does not compile `selector_and`). That pairing is also what the other
two heads read, so all three sit in layer 1. The output per position: whether its previous token equals the first
token, and whether its token was seen before.
"""
from tracr.compiler import lib
from tracr.rasp import rasp

name = "written: three heads"
vocab = {"a", "b", "c"}
max_seq_len = 8
causal = True

token_at = rasp.categorical(rasp.SequenceMap(lambda t, i: (t, i), rasp.tokens, rasp.indices)).named("token_at")
previous = lib.shift_by(1, token_at).named("previous")
earlier_same = rasp.Select(token_at, token_at, lambda k, q: k[0] == q[0] and k[1] < q[1]).named("earlier_same")
one = rasp.numerical(rasp.Map(lambda t: 1, rasp.tokens)).named("one")  # made by layer 0's MLP, beside token_at
seen = rasp.numerical(rasp.Aggregate(earlier_same, one, default=0)).named("seen")
first = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == 0).named("to_first"), token_at
                       ).named("first")
seen_flag = rasp.categorical(rasp.Map(lambda s: "seen" if s > 0.5 else "new", seen)).named("seen_flag")
# Each read item back to its token before comparing (a small MLP each), so the comparison's MLP is 4 x 4, not 25 x 25.
previous_token = rasp.categorical(rasp.Map(lambda p: p[0] if p is not None else "none", previous)
                                  ).named("previous_token")
first_token = rasp.categorical(rasp.Map(lambda p: p[0] if p is not None else "none", first)).named("first_token")
same_as_first = rasp.SequenceMap(lambda p, f: "prev=first" if p == f != "none" else "prev≠first", previous_token,
                                 first_token).named("same_as_first")
program = rasp.SequenceMap(lambda a, b: f"{a},{b}", same_as_first, seen_flag).named("three_heads")
