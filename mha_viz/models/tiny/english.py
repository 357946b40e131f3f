"""Ordinary English for the tiny model: the example sentences of WordNet 3.0 (Princeton University), one a line.

    python -m mha_viz.models.tiny.english   # rewrites assets/tiny/english.txt.gz from Debian's wordnet-base

WordNet's glosses quote about 48,000 short sentences and phrases of everyday English ("he arranged his robes to
avoid a trip-up later", "I give you two minutes to respond"), written to show a word in use: school, news, stories
and instructions, the kind of text a student types. They are shipped, extracted and deduplicated, in
assets/tiny/english.txt.gz (0.65 MB), so `make train` needs no download; this module rebuilds that file from
Debian's `wordnet-base` package (`apt-get install wordnet-base`, files in /usr/share/wordnet).

WordNet's license allows copying and distributing the database and what is derived from it, for any purpose, with
its notice kept: "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved." (the full text:
assets/tiny/WORDNET-LICENSE). The README names the source.

The sentences are split once, by a hash of the sentence: one in `HELD_OUT_EVERY` is held out, never trained on,
so the heads can be measured on ordinary sentences the model has not seen.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import re
from functools import lru_cache
from pathlib import Path

from mha_viz.settings import ASSETS

ENGLISH = ASSETS / "tiny" / "english.txt.gz"
WORDNET = Path("/usr/share/wordnet")  # where Debian's wordnet-base puts the database
HELD_OUT_EVERY = 20  # one sentence in 20 (by hash) is held out of training


def extract(wordnet: Path = WORDNET) -> list[str]:
    """Every quoted example sentence of WordNet's data.{noun,verb,adj,adv}, in file order, each once."""
    files = [wordnet / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv")]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"WordNet's data files are missing ({', '.join(missing)}); "
                                "install Debian's wordnet-base (apt-get install wordnet-base)")
    seen: set[str] = set()
    out = []
    for path in files:
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):  # the license header
                continue
            gloss = line.split(" | ", 1)
            for sentence in re.findall(r'"([^"]+)"', gloss[1] if len(gloss) == 2 else ""):
                sentence = " ".join(sentence.split())
                if sentence and sentence not in seen:
                    seen.add(sentence)
                    out.append(sentence)
    return out


def held_out(sentence: str) -> bool:
    """Whether a sentence is in the held-out part (a fixed hash, so the split never depends on order)."""
    return int(hashlib.sha256(sentence.encode()).hexdigest()[:8], 16) % HELD_OUT_EVERY == 0


@lru_cache(maxsize=2)
def sentences(part: str = "train", path: Path = ENGLISH) -> tuple[str, ...]:
    """The shipped sentences of one part: "train" (what training reads), "held-out" (never trained on) or "all"."""
    if part not in ("train", "held-out", "all"):
        raise ValueError(f"part is 'train', 'held-out' or 'all'; got {part!r}")
    if not Path(path).exists():
        raise FileNotFoundError(f"{path} is missing; rebuild it with `python -m mha_viz.models.tiny.english`")
    every = gzip.decompress(Path(path).read_bytes()).decode().splitlines()
    if part == "all":
        return tuple(every)
    return tuple(s for s in every if held_out(s) == (part == "held-out"))


def write(out: Path = ENGLISH, wordnet: Path = WORDNET) -> Path:
    # mtime=0: the same sentences give the same bytes.
    Path(out).write_bytes(gzip.compress(("\n".join(extract(wordnet)) + "\n").encode(), 9, mtime=0))
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wordnet", default=str(WORDNET), help="folder with WordNet's data.* files")
    parser.add_argument("--out", default=str(ENGLISH))
    args = parser.parse_args(argv)
    path = write(Path(args.out), Path(args.wordnet))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(sentences('all', path))} sentences)")


if __name__ == "__main__":
    main()
