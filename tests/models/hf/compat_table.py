"""docs/models.md's compatibility table, rendered from the architecture matrix's expectations (test_architectures.py),
which the matrix holds to with strict xfails: a check marked failing that passes, or one unmarked that fails, fails
the suite, so the table says what the matrix measured.

    python -m tests.models.hf.compat_table          write the table into docs/models.md between its markers
    python -m tests.models.hf.compat_table --check  exit 1 when docs/models.md's table differs
"""
from __future__ import annotations

import sys
from pathlib import Path

from tests.models.hf import matrix
from tests.models.hf.architectures import ARCHS
from tests.models.hf.expected import FAILING, NOT_LOADING

PAGE = Path(__file__).resolve().parents[3] / "docs" / "models.md"  # the page the table lives on
START = "<!-- architecture-matrix:start (python -m tests.models.hf.compat_table) -->"
END = "<!-- architecture-matrix:end -->"
# Checks that compare against transformers say "exact"; the others run and check their own shapes.
_RUNS = {"circuits", "census"}


def render() -> str:
    import transformers

    head = ["architecture", *matrix.CHECKS, "notes"]
    lines = [
        f"Tiny random models of each architecture (hidden 64, 3 layers, 4 heads), built by "
        f"`tests/models/hf/test_architectures.py` with transformers {transformers.__version__} and checked against "
        "transformers' own eager attention and a hook on the attention output projection. exact: equal to "
        "transformers' (attention, logits, a head switched off or patched, batched rows against single runs, inside "
        "a head's parts against the layer's output; 2e-5); runs: circuits (finite scores, and each head's W_V and "
        "W_O equal to what the forward computes) and the census complete; refused: loading stops before any "
        "weights load, with the reason in notes. Encoder-decoder rows (T5, BART, Marian: hidden 32, 2 encoder and 3 "
        "decoder layers, 4 heads) read a source and a target: attention is all three kinds (encoder, decoder, "
        "cross), and the edits switch off, patch and open an encoder, a decoder and a cross-attention head "
        "(`tests/models/hf/matrix_seq2seq.py`), in single runs and as rows of one batched forward; their circuits "
        "are measured per kind (cross-attention: Q-composition only, its keys and values reading the encoder's "
        "output), each kind's W_Q, W_K, W_V and W_O against the forward. generate: a continuation written with the "
        "key/value cache (a sliding-window model reruns the sequence instead), each step's attention equal to one "
        "forward over the final sequence with a head switched off, and its greedy tokens equal to transformers' "
        "`generate`; —: not a causal model, which says it cannot write.",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join("---" for _ in head) + " |",
    ]
    for arch in ARCHS:
        if arch.name in NOT_LOADING:
            cells = ["refused"] * len(matrix.CHECKS)
            notes = NOT_LOADING[arch.name]
        else:
            cells, notes = [], []
            for check in matrix.CHECKS:
                why = FAILING.get((arch.name, check))
                one_way = check == "generate" and "MaskedLM" in arch.model  # an encoder: it says it cannot write
                cells.append("fails" if why else "—" if one_way else ("runs" if check in _RUNS else "exact"))
                if why:
                    notes.append(f"{check}: {why}")
            notes = "; ".join(notes)
        lines.append("| " + " | ".join([arch.name, *cells, notes]) + " |")
    loads = sum(a.name not in NOT_LOADING for a in ARCHS)
    exact = sum(a.name not in NOT_LOADING and not any(k[0] == a.name for k in FAILING) for a in ARCHS)
    lines += ["", f"{loads} of {len(ARCHS)} load; {exact} pass every check."]
    return "\n".join(lines)


def current() -> str | None:
    text = PAGE.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return None
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def write() -> None:
    text = PAGE.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    PAGE.write_text(f"{before}{START}\n{render()}\n{END}{after}", encoding="utf-8")


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        sys.exit(0 if current() == render() else 1)
    write()
