"""Written vs learned in a notebook: `mha_viz.show_twins("written-induction")` shows, for each learned twin of a
written model, the table the Census view shows (`analysis.twins.TwinComparison`: one summary row per twin, one row
per written head, and the sentences the measurements give), as HTML. No widget: a table, kept when the notebook is
saved without its kernel."""
from __future__ import annotations

import html

from mha_viz.contract import InputError, Model


class TwinTables:
    """The comparisons of one written model with its twins: `.comparisons` (TwinComparison each, best read with
    `.rows()`, `.summary()`, `.sentences()`), drawn as HTML tables in a notebook."""

    def __init__(self, written: str, comparisons: list):
        self.written = written
        self.comparisons = list(comparisons)

    def summary(self) -> list[dict]:
        return [c.summary() for c in self.comparisons]

    def _repr_html_(self) -> str:
        from mha_viz.analysis.twins import DISTANCE, MATCH_AT

        parts = [f"<h3>{html.escape(self.written)}: written vs learned</h3>", _table(self.summary()),
                 f"<p><small>Distance: {html.escape(DISTANCE)}; a learned head under {MATCH_AT} bits attends like "
                 "the written one. Off: switched off (zero), the share of positions still right.</small></p>"]
        for c in self.comparisons:
            parts += [f"<h4>{html.escape(c.learned)}</h4>", _table(c.rows()),
                      "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in c.sentences()) + "</ul>"]
        return "\n".join(parts)

    def __repr__(self) -> str:
        lines = [f"{self.written}: written vs learned"]
        for row in self.summary():
            lines.append("  " + "; ".join(f"{k}: {v}" for k, v in row.items()))
        return "\n".join(lines)


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def show_twins(written: Model | str, learned=None, *, n_texts: int = 200, seed: int = 0,
               display: bool = True) -> TwinTables:
    """A written model (or its name) beside its learned twins (`learned`: a model, a name, a list of them; None:
    every twin that ships, `mha_viz.models.registry.twins`), measured by `mha_viz.compare_twins` on `n_texts`
    held-out inputs. Displayed here once (in a notebook) and returned; display=False only returns it."""
    import mha_viz
    from mha_viz.models.registry import twins

    written = mha_viz.load_model(written) if isinstance(written, str) else written
    if learned is None:
        learned = twins(written.name)
        if not learned:
            raise InputError(f"{written.name} has no learned twin that ships; train some with `mha-viz train-twin "
                             "COMPILED_FOLDER --seeds 3` and pass them as learned=...")
    elif isinstance(learned, (str, Model)):
        learned = [learned]
    tables = TwinTables(written.name, [mha_viz.compare_twins(written, m, n_texts, seed) for m in learned])
    if display:
        try:
            from IPython.display import display as _display
        except ImportError:
            return tables
        _display(tables)
    return tables
