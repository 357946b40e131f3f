"""The tiny model's heads on held-out inputs (issue 51): previous-token, induction and relation scores, per head,
on random in-vocabulary sequences and on ordinary sentences it was not trained on, against its untrained twin.

    python benchmarks/tiny_heads.py [FOLDER] [--steps]   # FOLDER: a tiny folder (default assets/tiny)

Printed per model (each saved step with --steps, then the trained and the untrained one): the best head's score of
- previous: attention to the previous token (Elhage et al. 2021), on 40 random in-vocabulary sequences of 128
  tokens; on 60 held-out WordNet passages of up to 128 tokens; on the test's 30 sentences; and in the last third
  of the random sequences (q >= 86), where a head that fades along the text would show it;
- induction: at the second copy, attention to the token after the same token's first copy (Olsson et al. 2022),
  on 40 sequences of 20-60 distinct random words said twice, and on held-out English said twice: the test's 30
  sentences and 60 WordNet passages;
- relation: from the token before the verb to its subject (Clark et al. 2019's attention reading), on 300 held-out
  agreement sentences whose attractor has the opposite number, and the agreement accuracy there (Linzen et al.
  2016: the agreeing verb form's logit above the other's).
Every score is a mean attention weight with its uniform baseline; "head" is (layer, head) as L{l} H{h}.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mha_viz.analysis.pairs import induction_score, previous_token_score, subject_score  # noqa: E402
from mha_viz.models.tiny import corpus  # noqa: E402
from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny  # noqa: E402
from mha_viz.models.tiny.vocabulary import BOS  # noqa: E402
from mha_viz.settings import ASSETS  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "models" / "tiny"))
from ordinary_sentences import SENTENCES  # noqa: E402

LENGTH = 128


def attentions(model, tokens: list[list[str]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each token list (with <bos>) through the model alone -> ([(L, H, T, T)], [(T, V)])."""
    att, logits = [], []
    with torch.no_grad():
        for toks in tokens:
            ids = torch.tensor([model.vocab.encode(toks)])  # (1, T)
            lg, _, a = model.lm(ids)  # (1, T, V), _, (1, L, H, T, T)
            att.append(a[0].float())
            logits.append(lg[0].float())
    return att, logits


def said_twice(tokens: list[str]) -> tuple[list[str], list[tuple[int, int]]]:
    """<bos> s s, and (first, second) for every token of the second copy but its last."""
    n = len(tokens)
    return [BOS, *tokens, *tokens], [(1 + i, 1 + n + i) for i in range(n - 1)]


def inputs(vocab) -> dict:
    rng = random.Random(51)
    sets: dict = {}
    sets["random"] = [list(ex.tokens) for ex in corpus.random_sequences(40, 5101, LENGTH - 1)]
    sets["english"] = [list(corpus.english_text(rng, LENGTH, "held-out").tokens) for _ in range(60)]
    sets["sentences"] = [[BOS, *vocab.tokenize(s)] for s in SENTENCES]
    rep = []
    for _ in range(40):
        words = rng.sample(corpus.vocabulary_words(), rng.randint(20, 60))
        rep.append(said_twice(words))
    sets["random twice"] = rep
    sets["sentences twice"] = [said_twice(vocab.tokenize(s)) for s in SENTENCES]
    sets["english twice"] = [said_twice(corpus.english_text(rng, rng.randint(20, LENGTH // 2), "held-out").tokens[1:])
                             for _ in range(60)]
    sets["agreement"] = corpus.agreement_examples(300, 5102, "opposite", LENGTH)
    return sets


def best(scores) -> tuple[str, float]:
    (l, h), v = scores.best()
    return f"L{l} H{h}", round(v, 3)


def measure(model, sets: dict) -> dict:
    out = {}
    for name in ("random", "english", "sentences"):
        att, _ = attentions(model, sets[name])
        s = previous_token_score(att)
        out[f"previous/{name}"] = (*best(s), round(s.baseline, 3))
        if name == "random":  # the last third of a 128-token text
            from mha_viz.analysis.pairs import score_pairs
            late = [[(q, q - 1) for q in range(2 * LENGTH // 3, a.shape[-1])] for a in att]
            s = score_pairs(att, late, "previous")
            out["previous/random, last third"] = (*best(s), round(s.baseline, 3))
    for name in ("random twice", "sentences twice", "english twice"):
        att, _ = attentions(model, [t for t, _ in sets[name]])
        s = induction_score(att, [r for _, r in sets[name]])
        out[f"induction/{name}"] = (*best(s), round(s.baseline, 3))
    examples = sets["agreement"]
    att, logits = attentions(model, [list(ex.tokens) for ex in examples])
    s = subject_score(att, [(ex.subject_pos, ex.verb_pos) for ex in examples])
    out["relation/agreement, opposite attractor"] = (*best(s), round(s.baseline, 3))
    right = 0
    for ex, lg in zip(examples, logits):
        good, bad = (model.vocab.id(ex.verb_forms[i]) for i in (int(ex.plural), 1 - int(ex.plural)))
        right += int(lg[ex.verb_pos - 1, good] > lg[ex.verb_pos - 1, bad])
    out["agreement accuracy"] = round(right / len(examples), 3)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(ASSETS / "tiny"))
    parser.add_argument("--steps", action="store_true", help="every saved checkpoint too")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = Path(args.folder)
    final = load_tiny(folder=folder)
    sets = inputs(final.vocab)
    models = [(f"step {s}", load_tiny(folder=folder, step=s)) for s in checkpoint_steps(folder)] if args.steps else []
    models += [("trained", final), ("untrained", load_tiny(trained=False, folder=folder))]
    report = {}
    for label, model in models:
        report[label] = measure(model, sets)
        print(f"== {folder.name}: {label}")
        for k, v in report[label].items():
            print(f"  {k:42s} {v}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
