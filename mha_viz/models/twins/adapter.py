"""A learned twin behind the data contract: the written model's tokenizer (whitespace-separated items of the
program's vocabulary, BOS first: `models.items`, shared with the written model) in front of a `TwinLM`; its readout
is the program's output value per position (`program_output`), as the written model's is, so every view reads the
two alike. It has no LM head: `run.logits` is None, and the views that read next-token predictions say so.

A twin's folder (written by `train.py`):
    config.json        the stack's `TinyConfig`
    twin.json          the program's vocabulary, encoding, BOS, length limit and output values, the written model it
                       copies, the training recipe and the accuracy measured on held-out inputs
    model.safetensors  the weights, float16 (a few hundred KB), computed in float32
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from mha_viz.contract import Embeddings, HeadWeights, ModelInfo, ModelLoadError, check_index
from mha_viz.models.interventions import Forward, HeadEdit
from mha_viz.models.items import ItemsModel, ItemText
from mha_viz.models.placement import module_device, place
from mha_viz.models.tiny.architecture import TinyConfig
from mha_viz.models.twins.architecture import TwinLM, build_twin

FORMAT = "mha-viz learned twin 1"
CONFIG_FILE, TWIN_FILE, WEIGHTS_FILE = "config.json", "twin.json", "model.safetensors"


class TwinModel(ItemsModel):
    """A TwinLM behind the contract. Read-only after construction, so one instance serves every session."""

    def __init__(self, lm: TwinLM, twin: dict, name: str, folder: str | Path | None = None):
        self.lm = lm.eval()
        self._device = module_device(lm)
        self.blocks = lm.blocks
        self.twin = twin
        self.config = lm.cfg
        self.folder = None if folder is None else Path(folder)
        self.decoding: tuple = tuple(twin["decoding"])
        self.max_seq_len = int(twin["max_seq_len"])
        self.items = ItemText(name, tuple(twin["vocab"]), dict(twin["encoding"]), twin["bos"], self.max_seq_len,
                              f"was trained for (at most {self.max_seq_len})", f"the vocabulary of {twin['written']}")
        acc = twin.get("held_out", {}).get("accuracy")
        self.info = ModelInfo(
            name=name, title=f"{name}: the in-repo stack trained on what {twin['written']} computes"
            + (f" ({100 * acc:.1f}% of held-out positions right)" if acc is not None else ""),
            kind="program", n_layers=lm.cfg.n_layers, n_heads=lm.cfg.n_heads, max_tokens=self.max_seq_len + 1,
            causal=True)

    @property
    def written_name(self) -> str:
        """The name of the written model this twin was trained to copy (e.g. "written-induction")."""
        return self.twin["written"]

    @property
    def held_out_accuracy(self) -> float | None:
        """The share of held-out positions (where the program has a value) whose readout equals the program's."""
        return self.twin.get("held_out", {}).get("accuracy")

    # -- one forward ---------------------------------------------------------------------------------------
    can_resume = True  # TinyLM.forward resumes at edit.start
    pads = True  # causal: no position sees the padding to its right
    grows = True

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        ids, _ = self.batch(ids, lengths)  # (B, T); causal: no key mask
        _, hidden, att = self.lm(ids, None, edit, patterns=attentions)  # (B, T, O), (B, T, D), (B, L, H, T, T)
        return Forward(hidden=hidden, logits=None, attentions=att)

    def head_weights(self, layer: int) -> HeadWeights:
        """Layer `layer`'s per-head maps, sliced from the fused qkv projection (rows [q; k; v])."""
        attn = self.lm.blocks[check_index(layer, self.n_layers, "layer")].attn
        w_q, w_k, w_v = attn.qkv.weight.split(attn.d_model)  # 3 x (D, D)
        b_q, b_k, b_v = attn.qkv.bias.split(attn.d_model)  # 3 x (D,)
        return self.head_weights_from(layer, w_q, w_k, w_v, b_q, b_k, b_v, rotary=False)

    def embeddings(self) -> Embeddings:
        served = self.lm.pos.weight[: self.config.max_len]  # (max_len, D)
        return Embeddings(tokens=self.lm.tok.weight.detach().float().cpu(), positions=served.detach().float().cpu(),
                          unembed=None, labels=list(self.items.labels))

    # -- what it shares with the written model ------------------------------------------------------------------
    def readout_scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states (..., T, D) -> scores over the program's output values (..., T, O)."""
        return hidden.float().cpu() @ self.lm.head.weight.detach().float().cpu().T  # (..., T, O)

    def program_output(self, run) -> list:
        """The program's output value the twin reads out at each position of a run (BOS first reads as BOS), from
        the run's final hidden states, with whatever heads the run switched off. Unlike the written model it
        always names a value: it was trained only where the program has one."""
        best = self.readout_scores(run.output).argmax(-1)  # (T,)
        return [self.twin["bos"]] + [self.decoding[int(i)] for i in best[1:]]


def read_twin(folder: str | Path) -> dict:
    """A twin folder's twin.json, checked for the keys the adapter reads; ModelLoadError saying the fix."""
    path = Path(folder) / TWIN_FILE
    fix = "train it again with `mha-viz train-twin COMPILED_FOLDER --out FOLDER`"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{path} cannot be read as a learned twin's description ({err}); {fix}") from None
    need = ("format", "written", "vocab", "encoding", "bos", "max_seq_len", "decoding")
    missing = [k for k in need if k not in data]
    if missing or data.get("format") != FORMAT:
        raise ModelLoadError(f"{path} is not a learned twin of this version (missing {missing}, format "
                             f"{data.get('format')!r}, expected {FORMAT!r}); {fix}")
    return data


def is_twin_folder(folder) -> bool:
    try:
        return (Path(folder) / TWIN_FILE).is_file() and (Path(folder) / WEIGHTS_FILE).is_file()
    except (TypeError, OSError):
        return False


def load_twin(folder: str | Path, name: str | None = None) -> TwinModel:
    """A learned twin's folder (see the module docstring), float32 on MHA_VIZ_DEVICE."""
    folder = Path(folder)
    twin = read_twin(folder)
    weights = folder / WEIGHTS_FILE
    if not weights.exists():
        raise ModelLoadError(f"no weights at {weights}; train the twin with `make train-twins`")
    cfg = TinyConfig.from_json((folder / CONFIG_FILE).read_text())
    lm = build_twin(cfg, len(twin["decoding"]))
    state = {k: v.float() for k, v in load_file(str(weights)).items()}
    missing, unexpected = lm.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelLoadError(f"{weights} does not match its config.json (missing {missing}, unexpected "
                             f"{unexpected}); train the twin again with `make train-twins`")
    return TwinModel(place(lm, float32=True), twin, name or str(folder), folder)
