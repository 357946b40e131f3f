"""The sentence: the text box with its examples, and the tokens the model made of it (a strip of chips, drawn by the
views that do not draw their own: the Layer grid has its strip, with the same chips). A model with cross-attention
reads two texts: the box is its source, and a second box beside it holds the target (the decoder's text; empty:
the model's own greedy continuation)."""
from __future__ import annotations

import html

import streamlit as st

from mha_viz.app import reconnect, state
from mha_viz.app.cache import TARGET
from mha_viz.app.common import md_safe, visible
from mha_viz.app.names import UNKNOWN_MARK, unknown_words
from mha_viz.contract import AttentionRun, Model

DEFAULT_TEXT = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."
MAX_TEXT_CHARS = 200_000  # longer text is cut before tokenizing, and the page says so
LONG_STRIP = 80  # a strip of more tokens folds into an expander, so it does not push the heatmaps off screen


def _set_text(text: str) -> None:
    st.session_state["text_box"] = text
    st.session_state["text"] = text


def _set_pair(source: str, target: str) -> None:
    """Both boxes of a model with cross-attention, and the texts the run reads (an example pair; an example without
    a target clears it: the model's own greedy continuation)."""
    _set_text(source)
    st.session_state[TARGET_BOX] = st.session_state[TARGET] = target


def _first_pair(model: Model) -> None:
    """A model with cross-attention opened on the page's default sentence and no target (the one-text models'
    first sentence, the decoder left to continue it greedily) starts on its first example pair instead, once per
    session: a source with the target it is paired with. A sentence the visitor or a link chose is kept."""
    pairs = model.example_pairs()  # [] for a model that reads one text
    if not pairs or st.session_state.get(FIRST_PAIR):
        return
    st.session_state[FIRST_PAIR] = True
    if (st.session_state.get("text") == DEFAULT_TEXT and st.session_state.get("text_box", DEFAULT_TEXT) == DEFAULT_TEXT
            and not st.session_state.get(TARGET) and not st.session_state.get(TARGET_BOX)):
        _set_pair(pairs[0][1], pairs[0][2])


def _submit_text() -> None:
    st.session_state["text"] = st.session_state.get("text_box", "")
    if TARGET_BOX in st.session_state:
        st.session_state[TARGET] = st.session_state[TARGET_BOX]  # what cache.get_run runs


TARGET_BOX = state.TARGET_BOX  # the target box's value; the target sent is cache.TARGET, which the link carries
FIRST_PAIR = "_first_pair_given"  # a model with cross-attention was given its first example pair in this session


def text_input(model: Model) -> str:
    """The text box, its submit button and the model's examples on one row; returns the text to run."""
    st.session_state.setdefault("text", DEFAULT_TEXT)
    # The box's first draw in a session rebuilt after its server process died takes the browser's resent value: the
    # last sentence the visitor sent from it (reconnect.resends).
    resent = reconnect.resends("text_box")
    if not resent:
        _first_pair(model)
    if not resent:
        st.session_state.setdefault("text_box", st.session_state["text"])
    default = st.session_state["text"] if resent and "text_box" not in st.session_state else ""
    examples = model.examples() or [("agreement", DEFAULT_TEXT, DEFAULT_TEXT)]
    # One row: the box, and beside it the submit button over the examples (submit buttons too, so they can sit in
    # the form; each sets the text in its callback).
    with st.form("text_form", border=False):
        box, buttons = st.columns([3.2, 1])
        two = model.has_cross_attention
        if two:  # the source and the target side by side, each labelled: which box feeds which stack
            box, target_box = box.columns(2)
            st.session_state.setdefault(TARGET_BOX, st.session_state.get(TARGET, ""))
            target_box.text_area("Target (the decoder's text)", key=TARGET_BOX, height=96,
                                 placeholder="Empty: the model's own greedy continuation",
                                 help="The decoder reads its start token, then this text's tokens (teacher-forced); "
                                      "left empty, the model continues the source greedily itself.")
        sent = box.text_area("Source (the encoder's text)" if two else "Sentence", value=default, key="text_box",
                             height=96, max_chars=None, label_visibility="visible" if two else "collapsed",
                             placeholder="Type a sentence, then Show attention",
                             help="Any text; it is cut at the model's token limit and the page says how much was "
                                  "dropped.")
        buttons.form_submit_button("Show attention", type="primary", on_click=_submit_text, width="stretch")
        with buttons.popover("Examples", width="stretch"):
            if two and model.example_pairs():  # source and target at once; the sentences alone after them
                for i, (label, source, target) in enumerate(model.example_pairs()[:8]):
                    st.form_submit_button(label, key=f"pair{i}", on_click=_set_pair, args=(source, target),
                                          help=f"Source “{source}”, target “{target}”", width="stretch")
            for i, (label, text, hint) in enumerate(examples[:8]):
                st.form_submit_button(label, key=f"ex{i}", on_click=_set_pair if two else _set_text,
                                      args=(text, "") if two else (text,), help=f"{hint} — “{text}”",
                                      width="stretch")
    reconnect.drawn("text_box")
    if resent and sent and sent.strip() and sent != st.session_state["text"]:
        st.session_state["text"] = sent  # run the sentence the visitor sent as the old process died
    text = st.session_state["text"]
    if len(text) > MAX_TEXT_CHARS:
        st.info(f"The text has {len(text):,} characters; only the first {MAX_TEXT_CHARS:,} are tokenized.")
        text = text[:MAX_TEXT_CHARS]
    read = read_text(text)
    if read != text and read and model.token_count(read) != model.token_count(text):  # only where it made a token
        st.caption("The space or line break at the end of the text is left out: this model's tokenizer would make "
                   "it a token of its own, and the last token is where the token views start and the next word is "
                   "predicted.")
    return read


def kept_text() -> str:
    """The text to run when the box is not drawn (a view that brings its own input, page.OWN_INPUT): the sentence
    last sent from the box, which the link keeps and the other views show again. Cut and trimmed as the box's is,
    without saying so: nothing on such a view shows it."""
    return read_text(st.session_state.setdefault("text", DEFAULT_TEXT)[:MAX_TEXT_CHARS])


def read_text(text: str) -> str:
    """A typed sentence as the page runs it: without trailing whitespace, which is nearly always what typing or
    pasting leaves behind (Enter at the end, a copied line's newline), not part of the sentence. Leading and
    inner whitespace are kept: they change the tokens of the words around them."""
    return text.rstrip()


def chip(token: str, title: str, style: str = "", note: str = "") -> str:
    """One token as an HTML chip (the token strip, the change strip): escaped, `title` on hover, `note` small
    after it. `title`, `style` and `note` are ours, never user text."""
    after = f" <small>{note}</small>" if note else ""
    return (f"<span style='display:inline-block;border:1px solid #ccc;border-radius:4px;padding:0 4px;margin:1px;"
            f"font-family:monospace;font-size:12px;{style}' title='{title}'>{html.escape(visible(token))}{after}"
            "</span>")


def token_strip(run: AttentionRun, model: Model, chips: bool = True) -> None:
    """The run's tokens as chips (unknown ones highlighted), then one caption: how many (unless a long strip's
    expander says it), how many were dropped, which map to the unknown token. `chips=False` for a view that draws
    its own strip."""
    unknown = set(run.unknown)
    folded = chips and len(run.tokens) > LONG_STRIP
    if chips:
        items = [chip(tok, f"position {i}", "background:#fde2e1;border-color:#c44e52" if i in unknown else "")
                 for i, tok in enumerate(run.tokens)]
        strip = f"<div data-testid='token-strip'>{''.join(items)}</div>"
        if folded:
            with st.expander(f"Tokens ({len(items)})"):
                st.markdown(strip, unsafe_allow_html=True)
        else:
            st.markdown(strip, unsafe_allow_html=True)
    notes = [] if folded else [f"{len(run.tokens)} tokens"]  # a folded strip's expander says how many
    if run.truncated:
        notes.append(
            f"**{run.truncated} tokens were dropped**: the text is longer than the {model.info.max_tokens} tokens "
            "this view handles, so only the start is shown"
        )
    if unknown:
        words = ", ".join(sorted({visible(run.tokens[i]) for i in unknown}))
        content = len(run.tokens) - len(set(run.special))
        notes.append(f"**{unknown_words(len(unknown), content, model.info.title)}**: {md_safe(words[:200])} "
                     f"(marked “{UNKNOWN_MARK.strip()}” on the axes; the model reads its unknown token there, and two "
                     "unknowns never count as the same word)")
    if notes:
        st.caption(" · ".join(notes))
