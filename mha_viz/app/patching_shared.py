"""What the Patching view (views/patching.py) reads beside its drawing, for one-text and encoder-decoder models: the
default answer tokens, a token as a text box shows it, the second sentence's session key, the baseline a patch is
read against, where the metric is read (`read_position`) and the example pairs a model can run (`example_pair`)."""
from __future__ import annotations

import streamlit as st

from mha_viz.analysis.patching import Metric
from mha_viz.app import cache
from mha_viz.app.common import md_safe, quoted, where
from mha_viz.app.context import ViewContext
from mha_viz.app.name_swap import changed_words, final_name
from mha_viz.contract import Ablation, AttentionRun, InputError, Model


def source_key(text: str) -> str:
    return f"patch_source|{hash(text)}"


_ESCAPES = (("\n", "\\n"), ("\t", "\\t"), ("\r", "\\r"))


def shown_token(token: str) -> str:
    """A token as a one-line text box can hold it: a box drops a newline, so a predicted newline would read as
    nothing (and the metric would compare the wrong tokens). Newline, tab and return are written as \\n, \\t, \\r."""
    for char, escaped in _ESCAPES:
        token = token.replace(char, escaped)
    return token


def typed_token(text: str) -> str:
    """`shown_token` undone on what the visitor typed or kept."""
    for char, escaped in _ESCAPES:
        text = text.replace(escaped, char)
    return text


def answer_tokens(model: Model, base: AttentionRun, other: AttentionRun, position: int, text: str,
                  source: str, names: tuple[str, str] | None = None) -> tuple[str, str]:
    """The default answer and "against" tokens: the swapped words themselves (as the model writes them at the
    prediction position, with a leading space where that is one token), answer being the one the first sentence
    prefers; where the sentences differ in more than one word, each sentence's top prediction. `names`: (the
    text's final name, the other name) when the metric is read before that final name: answer and against in
    that order, the name the text goes on with being the answer."""
    # A name of several words is predicted from its first: " Mary" of "Mary Smith".
    words = tuple(n.split()[0] for n in names) if names else changed_words(text, source)
    if words:
        pieces = []
        for word in words:
            for piece in (" " + word, word, " " + word.lower(), word.lower()):
                try:
                    pieces.append((piece, model.token_id(piece)))
                    break
                except InputError:
                    continue
        if len(pieces) == 2 and pieces[0][1] != pieces[1][1]:
            (a, ia), (b, ib) = pieces
            logits = base.logits[position]
            return (a, b) if names or float(logits[ia]) >= float(logits[ib]) else (b, a)
    first, second = int(base.logits[position].argmax()), int(other.logits[position].argmax())
    if first == second:
        second = int(base.logits[position].topk(2).indices[1])
    return model.decode(first), model.decode(second)


def off_baseline(ctx: ViewContext, column, heads, metric, before: float) -> None:
    """The baseline a patch is read against: the same heads switched off as the sidebar's "off" means (zero, mean,
    resample, ...), so a patch that moves the metric no further than switching the heads off says little about
    the second sentence."""
    off = Ablation.of(ctx.ablation)
    try:
        run = cache.get_run(ctx.name, ctx.text, off=heads, ablation=off)
    except InputError as err:  # e.g. no reference text to take outputs from
        column.caption(md_safe(str(err)))
        return
    value = float(metric(run.output, run.logits))
    column.metric(f"Baseline: the same head(s) {off.adjective}", f"{value:.3f}", delta=f"{value - before:+.3f}",
                  help=f"Off as the sidebar says: {off.help}")


def read_position(model: Model, base: AttentionRun, text: str,
                  name: str) -> tuple[int | None, tuple[str, str] | None]:
    """(where the metric is read, the (final name, other name) read there or None). On a causal LM whose text ends
    with one of the swapped names, the token before that name (where the name is predicted), when the text up to
    it has the same first tokens; otherwise the model's prediction position, and no names."""
    position = model.prediction_position(base)
    ending = final_name(text, model.name_words())
    if position is None or not model.causal or ending is None:
        return position, None
    prompt = text[:ending[0]].rstrip()
    try:
        tokens = cache.get_run(name, prompt).tokens
    except InputError:
        return position, None
    if 0 < len(tokens) < len(base.tokens) and base.tokens[:len(tokens)] == tokens:
        return len(tokens) - 1, ending[1:]
    return position, None


# Pairs that differ in one word, tried in order; a model gets the first whose words it knows (no unknown token)
# and whose two sentences have the same number of tokens. The first is Wang et al. 2022's indirect-object
# template; the second is in the tiny model's own vocabulary (a list said again: the model copies its next word).
# "{mask}" is the model's mask token, for a masked LM to predict at.
PAIRS = [
    ("When Mary and John went to the store, John gave a drink to{mask}",
     "When Mary and John went to the store, Mary gave a drink to{mask}", "Mary", "John"),
    ("anna berg said : red lamp river cup . then tom lind said : red lamp river",
     "anna berg said : red lamp river box . then tom lind said : red lamp river", "cup", "box"),
]


def example_pair(name: str, model: Model) -> tuple[str, str] | None:
    """The first of PAIRS this model can run as a patching pair: (text, second sentence), or None."""
    mask = f" {model.mask_token}." if model.info.kind == "masked-lm" and model.mask_token else ""
    for text, source, *_ in PAIRS:
        text, source = text.format(mask=mask), source.format(mask=mask)
        try:
            a, b = cache.get_run(name, text), cache.get_run(name, source)
        except InputError:
            continue
        if not a.unknown and not b.unknown and len(a.tokens) == len(b.tokens) and a.tokens != b.tokens:
            return text, source
    return None


def kinds_metric(ctx: ViewContext, other, position: int, second: str) -> Metric | None:
    """The logit difference at the decoder's prediction position, its two tokens typed or kept (by default the
    swapped words, else each source's top prediction, as the one-stack view picks them)."""
    model, base = ctx.model, ctx.base
    first, against = answer_tokens(model, base, other, position, ctx.text, second)
    c1, c2 = st.columns(2)
    answer = c1.text_input("Answer token", value=shown_token(first), key=f"patch_answer|{first}",
                           help="The metric is logit(answer) − logit(against) at the decoder's prediction after "
                                "the target. Write a newline as \\n and a tab as \\t.")
    against = c2.text_input("Against", value=shown_token(against), key=f"patch_against|{against}")
    try:
        ids = model.token_id(typed_token(answer)), model.token_id(typed_token(against))
    except InputError as err:
        st.warning(md_safe(str(err)))
        return None
    return Metric("logit_diff", position=position, answer=ids[0], other=ids[1])


def describe_metric(ctx: ViewContext, metric: Metric) -> str:
    answer, other = (ctx.model.decode(i) for i in (metric.answer, metric.other))
    return md_safe(f"logit({quoted(answer)}) − logit({quoted(other)}) at "
                   f"{where(ctx.model, ctx.base, metric.position)}")
