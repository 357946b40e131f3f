"""What both patching views read (views/patching.py for one-text models, app/patching_kinds.py for
encoder-decoder models): the default answer tokens, a token as a text box shows it, the second sentence's
session key, and the baseline a patch is read against."""
from __future__ import annotations

from mha_viz.app import cache
from mha_viz.app.common import md_safe
from mha_viz.app.context import ViewContext
from mha_viz.app.name_swap import changed_words
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
