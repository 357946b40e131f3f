"""The layer grid in a Jupyter notebook: `mha_viz.show(model, text)` (or `show(run)`).

The picture is the app's own browser code (mha_viz/web: the grid's module and its payload, which the app's
Streamlit component mounts too), inside a small anywidget wrapper (widget.js). A head's switch clicked in the page
calls back into Python: the model reruns with those heads off (per call, nothing stored on the model), the grid and
the effect readout update, and `widget.heads_off` / `widget.run` hold the new state for the code in the next cell.

No streamlit here. anywidget ships the JavaScript inside the Python package (a JupyterLab / Notebook 7 extension),
and our JavaScript travels in the widget's state: nothing is fetched from a CDN.
"""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Iterable

import anywidget
import numpy as np
import traitlets

from mha_viz import analysis, measures
from mha_viz.contract import AttentionRun, Head, InputError, Model, check_ablate, check_ablation
from mha_viz.names import head_names
from mha_viz.notebook import svg as _svg
from mha_viz.notebook.display import FallbackDisplay, esm
from mha_viz.web import grid_css, grid_js
from mha_viz.web import kinds as _kinds
from mha_viz.web.payload import deflate, grid_data, layer_codes

TOP_K = 5

_WIDGET_CSS = """
.mhw { font-family: var(--jp-ui-font-family, sans-serif); color: var(--jp-ui-font-color1, #222); }
.mhw-bar { display: flex; gap: 6px; align-items: center; margin-bottom: 4px; }
.mhw-status { font-size: 12px; color: #8a5a00; }
.mhw-readout { font-size: 12px; margin-top: 6px; }
.mhw-readout .mhw-metric { font-weight: 600; margin-bottom: 2px; }
.mhw-readout .mhw-note { color: #666; }
.mhw-top td, .mhw-top th { padding: 1px 10px 1px 0; text-align: left; font-family: monospace; }
"""


def token_labels(tokens: Iterable[str]) -> list[str]:
    """Printable labels, as the app's Layer view gives them (control characters made visible, "∅" for empty)."""
    from mha_viz.plotting import visible_text

    return [visible_text(t) or "∅" for t in tokens]


def badge_labels(run: AttentionRun, causal: bool) -> dict[Head, str]:
    """Each head's strongest measured score on this run, worded as the app's Layer view words it."""
    try:
        scores, baselines = analysis.run_scores(run, causal, names=measures.BADGES)
        support = analysis.run_support(run, causal, names=measures.BADGES)
    except Exception:  # badges are an extra; never block the grid
        return {}
    L, H = run.attentions.shape[:2]
    return {(layer, head): analysis.badge_caption(scores, baselines, support, layer, head, n=1)
            for layer in range(L) for head in range(H)}


def effect_readout(model: Model, base: AttentionRun, run: AttentionRun) -> dict:
    """What switching `run.ablated` off changed, as the app's Ablation effects view measures it: for a model with
    an LM head, KL(p_all_on || p_now) at the prediction position and the top-5 tokens before and after; for an
    encoder, the cosine of the sentence embeddings (mean of the final hidden states). -> a dict for the page."""
    off = len(run.ablated)
    if base.logits is not None and run.logits is not None:
        position = model.prediction_position(base)
        note = ""
        if position is None:  # a masked LM whose text holds no mask token
            position = len(base.tokens) - 1
            note = (f"No {model.mask_token or 'mask token'} in the text: predictions are read at the last position; "
                    "put the mask token where a word should be predicted.")
        before, after, row = base.logits, run.logits, position  # (T, V) each, and the row of `position`
        if base.logits_at is not None and run.logits_at is not None and base.logits_at[0] == run.logits_at[0]:
            # Two continuations (show(..., generate=N)): the first written token, chosen after the same prompt.
            position, before, after, row = base.logits_at[0], base.logits[:1], run.logits[:1], 0  # (1, V) each
        kl = analysis.next_token_kl(before, after, row)

        def top(logits):
            probs, ids = analysis.topk_predictions(logits[row], TOP_K)
            return [[model.decode(int(i)), float(p)] for p, i in zip(probs, ids)]

        # An encoder-decoder run's logits are over its target (the decoder's tokens), not over `tokens`.
        tokens = getattr(base, "target_tokens", None) or base.tokens
        off += len(getattr(run, "ablated_cross", ()))
        return {"kind": "lm", "position": int(position), "token": tokens[position], "kl": float(kl),
                "before": top(before), "after": top(after), "off": off, "note": note,
                "along": _kinds.along_target(model, base, run)}
    return {"kind": "encoder", "cosine": float(analysis.cosine_change(base.output, run.output)), "off": off,
            "note": ""}


class HeadGrid(FallbackDisplay, anywidget.AnyWidget):
    """Every head of one layer (tabs for the others), the app's Layer view in a notebook output.

    Readable from Python: `heads_off` (a frozenset of (layer, head), settable), `run` (the AttentionRun drawn,
    with those heads off), `base` (all heads on), `readout` (what changed), `layer` (the layer shown, following the
    tabs clicked in the page). `to_svg()` / `save_svg(path)` export the shown layer from Python; the grid's own
    Save SVG / PNG buttons export it in the page.

    A model with cross-attention (`show(model, source, target=...)`): `kind` ("Encoder", "Decoder" or "Cross",
    settable, and a switch in the page) picks the attention the grid shows, its layers numbered from 0; `heads_off`
    holds self-attention heads as `Model.run`'s `ablate` numbers them (decoder layers after the encoder's) and
    `cross_off` the cross-attention heads (`ablate_cross`). A switch clicked in the grid switches that kind's head.
    """

    _esm = esm("widget.js")
    _css = grid_css() + _WIDGET_CSS
    _grid_js = traitlets.Unicode(grid_js()).tag(sync=True)
    grid = traitlets.Dict().tag(sync=True)  # the payload without the weights (web/payload.py)
    att = traitlets.Bytes().tag(sync=True)  # every layer's (H, T, T) uint8 codes, deflated, one after another
    # (grid["parts"]: [[layer, bytes], ...]); all of them each time, so a view opened later draws from the traits
    layer = traitlets.Int(0).tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)  # the attention kind shown, "" for a model with one stack
    readout = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)

    def __init__(self, run: AttentionRun, model: Model | None = None, text: str | None = None, layer: int = 0,
                 cols: int = 4, ablation: str = "zero", shared_scale: bool = False, base: AttentionRun | None = None,
                 target: str | None = None, kind: str | None = None, writing=None):
        self._writing = writing  # GenerationSettings: the runs are continuations the model writes (show(generate=N))
        if target is not None and (model is None or not model.has_cross_attention):
            raise InputError("target= is the decoder's text of an encoder-decoder model (BART, Marian, T5); this "
                             "model reads one text: leave target out.")
        self._target = target
        if model is not None and model.has_cross_attention:
            kind = _kinds.check_kind(model, kind or _kinds.ENCODER)
            L = _kinds.n_layers(model, kind)
        elif kind is not None:
            raise InputError("kind= picks one of an encoder-decoder model's attention kinds (Encoder, Decoder, "
                             "Cross); this model has one stack: leave kind out.")
        else:
            L = int(run.attentions.shape[0])
        if not 0 <= layer < L:
            raise InputError(f"layer {layer} does not exist: this model has layers 0 to {L - 1}")
        if model is not None:
            check_ablation(ablation)
        self.t_show = time.time()  # when show() began (the browser tests measure show() -> drawn from it)
        self._model, self._text, self._ablation = model, text, ablation
        self._cols, self._shared = int(cols), bool(shared_scale)
        self._run, self._base = run, base if base is not None else (run if not run.ablated else None)
        self._handles, self._shown_at = [], None
        super().__init__(layer=layer, kind=kind or "")
        self.on_msg(self._on_msg)
        self._send_run()

    # -- what Python code reads ------------------------------------------------------------------------------
    @property
    def run(self) -> AttentionRun:
        return self._run

    @property
    def base(self) -> AttentionRun | None:
        """The run with every head on (None for `show(run)` of an ablated run without its model)."""
        return self._base

    @property
    def model(self) -> Model | None:
        return self._model

    @property
    def text(self) -> str | None:
        return self._text

    @property
    def heads_off(self) -> frozenset[Head]:
        return frozenset(self._run.ablated)

    @heads_off.setter
    def heads_off(self, heads: Iterable[Head]) -> None:
        self.set_heads_off(heads)

    @property
    def cross_off(self) -> frozenset[Head]:
        """The cross-attention heads off, (decoder layer, head); empty for a model with one stack."""
        return frozenset(getattr(self._run, "ablated_cross", ()))

    @cross_off.setter
    def cross_off(self, heads: Iterable[Head]) -> None:
        self.set_heads_off(self.heads_off, cross=heads)

    # -- switching heads --------------------------------------------------------------------------------------
    def set_heads_off(self, heads: Iterable[Head], cross: Iterable[Head] | None = None) -> AttentionRun:
        """Rerun the model with exactly `heads` off (and, for a model with cross-attention, the cross-attention
        heads `cross`; None keeps those off now); the grid and the readout follow. -> the new run."""
        if self._model is None or self._text is None:
            raise InputError("this widget shows a run without its model, so it cannot rerun: use "
                             "mha_viz.show(model, text) (or show(run, model=model, text=text)) to switch heads")
        two = self._model.has_cross_attention
        if not two and cross:
            raise InputError(f"{self._model.info.name} has no cross-attention, so there are no cross heads to "
                             "switch off; give heads_off only.")
        L = int(self._run.attentions.shape[0]) + (self._model.decoder_layers() if two else 0)
        off = check_ablate(heads, L, int(self._model.n_heads))
        cross = self.cross_off if cross is None or not two else \
            check_ablate(cross, self._model.decoder_layers(), int(self._model.n_heads))
        extra = {"target": self._target, "ablate_cross": cross} if two else {}
        if self._writing is not None:  # a continuation: written again with these heads off
            def run_of(ablate=(), **_):
                return self._model.generate(self._text, self._writing, ablate=ablate, ablation=self._ablation).run
        else:
            run_of = functools.partial(self._model.run, self._text)
        if self._base is None:
            self._base = run_of(**{**extra, "ablate_cross": ()})
        self._run = self._base if not (off or cross) else run_of(ablate=off, ablation=self._ablation, **extra)
        self._send_run()
        return self._run

    def toggle(self, layer: int, head: int, on: bool | None = None) -> AttentionRun:
        """Switch one head on (on=True), off (on=False) or over (None), as its switch in the page does; `layer`
        counts within the kind shown (`kind`) for a model with cross-attention."""
        is_cross, key = (False, (int(layer), int(head))) if not self.kind else \
            _kinds.model_head(self._model, self.kind, layer, head)
        off = set(self.cross_off if is_cross else self.heads_off)
        turn_on = (key in off) if on is None else bool(on)
        (off.discard if turn_on else off.add)(key)
        return self.set_heads_off(self.heads_off, cross=off) if is_cross else \
            self.set_heads_off(off, cross=self.cross_off if self.kind else None)

    def _on_msg(self, _widget, content, _buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            if kind == "toggle":
                self.toggle(content["layer"], content["head"], content.get("on"))
            elif kind == "reset":
                self.set_heads_off(())
            elif kind == "resend":  # the page lost layers (one failed to inflate): send the run again
                self._send_run()
        except Exception as err:  # the page shows it; raising here would only reach the kernel's log
            self.status = f"{type(err).__name__}: {err}"
            self.grid = {**self.grid, "rev": self.grid.get("rev", 0) + 1}  # redraw: clears the pending switch

    # -- what goes to the page ----------------------------------------------------------------------------------
    def _send_run(self) -> None:
        run = self._run
        causal = bool(self._model.causal) if self._model is not None else run.logits is not None
        if self.kind:  # one kind of an encoder-decoder run: readings on the encoder's and the decoder's
            shown = _kinds.view(run, self.kind)  # self-attention (each over its one text), none on cross-attention
            stack = _kinds.one_stack(run, self.kind)
            self._badges = {} if stack is None else badge_labels(*stack)
            off = _kinds.grid_heads(self._model, self.kind, run.ablated, getattr(run, "ablated_cross", ()))
            data, codes = grid_data(token_labels(shown.keys), shown.att, min(self.layer, shown.att.shape[0] - 1),
                                    off, self._cols, self._shared, self._badges,
                                    run.unknown if self.kind == _kinds.ENCODER else (),
                                    query_tokens=None if shown.queries is None else token_labels(shown.queries))
            data["kinds"], data["kind"] = list(_kinds.KINDS), self.kind
        else:
            self._badges = badge_labels(run, causal)
            labels = token_labels(run.tokens)
            if self._writing is not None:  # the written tokens marked, after the prompt (logits from its last)
                labels = [t + (" ✎" if i > run.logits_at[0] else "") for i, t in enumerate(labels)]
            data, codes = grid_data(labels, run.attentions, self.layer, run.ablated, self._cols,
                                    self._shared, self._badges, run.unknown)
        self._codes = codes
        readout = {}
        if self._model is not None and self._base is not None:
            readout = effect_readout(self._model, self._base, run)
        elif self._model is None:
            readout = {"kind": "none", "note": "A run without its model: switching heads needs "
                                               "mha_viz.show(model, text)."}
        layers = [deflate(layer_codes(codes, data, layer)) for layer in range(data["L"])]
        with self.hold_sync():  # one message for all of them
            self.grid = {**data, "parts": [[layer, len(z)] for layer, z in enumerate(layers)],
                         "rev": self.grid.get("rev", 0) + 1}
            self.att = b"".join(layers)
            self.readout = readout
            self.status = ""
        self._update_fallback()

    def _layer_codes(self, layer: int) -> np.ndarray:
        L, H, T = self.grid["L"], self.grid["H"], self.grid["T"]
        Q = self.grid.get("Q", T)
        if not 0 <= layer < L:
            raise InputError(f"layer {layer} does not exist: this model has layers 0 to {L - 1}")
        return np.frombuffer(self._codes, np.uint8).reshape(L, H, Q, T)[layer]  # (H, Q, T)

    def _title(self, layer: int) -> str:
        name = self._model.info.name if self._model is not None else "a run"
        off = sorted(self.heads_off)
        cross = sorted(self.cross_off)
        return (f"{name}, {self.kind.lower() + ' ' if self.kind else ''}layer {layer}"
                + (f", off: {head_names(off)}" if off else "") + (f", cross off: {head_names(cross)}" if cross else ""))

    def to_svg(self, layer: int | None = None) -> str:
        """The shown layer (or `layer`) as an SVG document: every head's heatmap in the grid's colours, its name,
        whether it is off and its measured score."""
        layer = self.layer if layer is None else int(layer)
        off = {(int(l), int(h)) for l, h in self.grid.get("off", [])}  # the grid's numbering, as its badges
        return _svg.layer_svg(self._layer_codes(layer), self.grid["tokens"], layer, off, self._badges, self._cols,
                              self._title(layer), query_tokens=self.grid.get("qtokens"))

    def save_svg(self, path, layer: int | None = None) -> Path:
        path = Path(path)
        path.write_text(self.to_svg(layer), encoding="utf-8")
        return path

    @traitlets.observe("kind")
    def _kind_changed(self, change) -> None:
        if not self.grid or change["new"] == change["old"]:
            return
        if self._model is None or not self._model.has_cross_attention:
            self.kind = change["old"]
            raise InputError("kind applies to an encoder-decoder model's grid (Encoder, Decoder, Cross).")
        try:
            kind = _kinds.check_kind(self._model, change["new"])
        except InputError:
            self.kind = change["old"]
            raise
        if kind != change["new"]:  # "cross" -> "Cross": this observer runs again with the page's spelling
            self.kind = kind
            return
        self.layer = min(self.layer, _kinds.n_layers(self._model, change["new"]) - 1)
        self._send_run()

    @traitlets.observe("layer")
    def _layer_changed(self, change) -> None:
        L = self.grid.get("L")
        if L is not None and not 0 <= change["new"] < L:
            self.layer = change["old"]
            raise InputError(f"layer {change['new']} does not exist: this model has layers 0 to {L - 1}")
        self._update_fallback()

    # -- display: the live widget, and the last picture for a notebook saved without its kernel (display.py) -------
    def _plain(self) -> str:
        return f"<mha-viz head grid: {self._title(self.layer)}>"

    def _fallback_ready(self) -> bool:
        return "L" in self.grid  # the first run has been sent
