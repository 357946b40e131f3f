"""A study's DuckDB file: its tables, written one checkpoint per transaction, and read back for the Training view.

    meta          key, value: the schema version, the census's size (CensusConfig), the control
    runs          run, path, layout
    checkpoints   run, step, path, digest (sha256 of the weights), model_name (what the app opens), status ("done" or
                  "failed"), error (one line), seconds, params, tokens, model, worker, measured_at
    heads         run, step, layer, head, score, value, low, high, control, named: the census per head (and the
                  circuits' OV copying score, without interval or control)
    composition   run, step, mode (q, k, v), from_layer, from_head, to_layer, to_head, value: the circuits'
                  composition scores, earlier head into later head

A checkpoint's rows and its checkpoints row are written in one transaction, so a file stopped at any moment (Ctrl-C,
a killed process, a full disk) holds each checkpoint whole or not at all, and a rerun measures exactly the
checkpoints without a row. duckdb is imported when a file is opened: the app starts without it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_viz.contract import InputError
from mha_viz.study.find import Checkpoint
from mha_viz.study.measure import Measured

SCHEMA_VERSION = 1  # raise it when a table changes; a file with a higher one is refused, not misread

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (run VARCHAR PRIMARY KEY, path VARCHAR, layout VARCHAR);
CREATE TABLE IF NOT EXISTS checkpoints (
    run VARCHAR, step BIGINT, path VARCHAR, digest VARCHAR, model_name VARCHAR, status VARCHAR, error VARCHAR,
    seconds DOUBLE, params BIGINT, tokens BIGINT, model VARCHAR, worker BIGINT, measured_at TIMESTAMP,
    PRIMARY KEY (run, step));
CREATE TABLE IF NOT EXISTS heads (
    run VARCHAR, step BIGINT, layer INTEGER, head INTEGER, score VARCHAR, value DOUBLE, low DOUBLE, high DOUBLE,
    control DOUBLE, named BOOLEAN);
CREATE TABLE IF NOT EXISTS composition (
    run VARCHAR, step BIGINT, mode VARCHAR, from_layer INTEGER, from_head INTEGER, to_layer INTEGER,
    to_head INTEGER, value DOUBLE);
"""
HEAD_COLUMNS = ("layer", "head", "score", "value", "low", "high", "control", "named")


class StudyFileError(InputError):
    """A study file that cannot be used: from a newer version, not a DuckDB file, locked, or a disk that filled."""


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise StudyFileError("reading or writing a study needs duckdb: pip install 'mha-viz[scale]'") from None
    return duckdb


def connect(path: str | Path, read_only: bool = False):
    """A connection to the study file at `path` (created, with its tables, unless read_only), its schema version
    checked. Raises StudyFileError with one line saying what is wrong and what to do."""
    duckdb = _duckdb()
    path = Path(path)
    if read_only and not path.is_file():
        raise StudyFileError(f"{path} does not exist: write a study with `mha-viz study RUN_DIR --out {path}`")
    try:
        if not read_only and not path.exists():
            _create(duckdb, path)
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as err:
        if "lock" in str(err).lower():
            raise StudyFileError(f"{path} is open for writing by another process (a study still running?): wait "
                                 "for it, or open a copy") from None
        if "not a valid duckdb" in str(err).lower():
            raise StudyFileError(f"{path} is not a study file (not a DuckDB database): give the file "
                                 "`mha-viz study ... --out FILE` wrote") from None
        raise StudyFileError(f"{path} cannot be opened as a study: {str(err).splitlines()[0]}") from None
    except duckdb.Error as err:
        raise StudyFileError(f"{path} is not a study file (DuckDB): {str(err).splitlines()[0]}") from None
    try:
        if not read_only:
            con.execute("BEGIN")
            con.execute(SCHEMA)
            con.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT DO NOTHING", [str(SCHEMA_VERSION)])
            con.execute("COMMIT")
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.Error as err:
        con.close()
        raise StudyFileError(f"{path} is not a study file: {str(err).splitlines()[0]}") from None
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        con.close()
        raise StudyFileError(f"{path} was written by a newer mha-viz (study schema {version}; this one reads up to "
                             f"{SCHEMA_VERSION}): upgrade mha-viz, or write this study to a new --out file")
    return con


BLOCK_SIZE = 16384  # DuckDB's default block is 256 KiB: a study of tiny's 23 checkpoints took 2.4 MB, with this 0.3


def _create(duckdb, path: Path) -> None:
    """A new, empty study file with small blocks (a block size is chosen when a file is made, then kept)."""
    with duckdb.connect() as con:
        quoted = str(path).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS study (BLOCK_SIZE {BLOCK_SIZE})")
        con.execute("DETACH study")


def meta(con) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM meta").fetchall())


def settle_config(con, config: dict | None, control: str) -> dict | None:
    """The census size this study measures with: the one its file keeps, or `config` for a new file. A rerun
    asking for another size is refused: its rows would not compare with the ones kept."""
    kept = meta(con)
    asked = json.dumps(config, sort_keys=True)
    if "census_config" in kept:
        if config is not None and kept["census_config"] != asked:
            raise StudyFileError(f"this study was measured with census {kept['census_config']}, not {asked}: run it "
                                 "again with the same size (or none), or write a new --out file")
        return json.loads(kept["census_config"])
    con.execute("BEGIN")
    con.execute("INSERT INTO meta VALUES ('census_config', ?), ('control', ?) ON CONFLICT DO NOTHING",
                [asked, control])
    con.execute("COMMIT")
    return config


def add_runs(con, runs: list[tuple[str, str, str]]) -> None:
    con.execute("BEGIN")
    con.executemany("INSERT INTO runs VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET path = excluded.path, "
                    "layout = excluded.layout", runs)
    con.execute("COMMIT")


def kept(con) -> dict[tuple[str, int], str]:
    """(run, step) -> the digest measured (done or failed): what a rerun skips when the digest is the same."""
    return {(r, s): d for r, s, d in con.execute("SELECT run, step, digest FROM checkpoints").fetchall()}


def write(con, checkpoint: Checkpoint, digest: str, result: Measured) -> None:
    """One checkpoint's rows, replacing any it had (an older digest), in one transaction: all of it or none."""
    import pyarrow as pa

    key = [checkpoint.run, checkpoint.step]
    heads = pa.table({"run": [checkpoint.run] * len(result.heads.get("layer", [])),
                      "step": [checkpoint.step] * len(result.heads.get("layer", [])),
                      **{c: result.heads.get(c, []) for c in HEAD_COLUMNS}},
                     schema=pa.schema([("run", pa.string()), ("step", pa.int64()), ("layer", pa.int32()),
                                       ("head", pa.int32()), ("score", pa.string()), ("value", pa.float64()),
                                       ("low", pa.float64()), ("high", pa.float64()), ("control", pa.float64()),
                                       ("named", pa.bool_())]))
    comp = _composition_table(checkpoint, result.composition)
    status = "failed" if result.error else "done"
    try:
        con.execute("BEGIN")
        for table in ("heads", "composition", "checkpoints"):
            con.execute(f"DELETE FROM {table} WHERE run = ? AND step = ?", key)
        con.register("new_heads", heads)
        con.register("new_composition", comp)
        con.execute("INSERT INTO heads SELECT * FROM new_heads")
        con.execute("INSERT INTO composition SELECT * FROM new_composition")
        con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())",
                    [*key, checkpoint.path, digest, checkpoint.model_name, status, result.error or None,
                     result.seconds, result.params, result.tokens, result.model, result.worker])
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection may be gone (a full disk); the file keeps its last commit
            pass
        raise
    finally:
        con.unregister("new_heads")
        con.unregister("new_composition")


def _composition_table(checkpoint: Checkpoint, composition: dict[str, np.ndarray]):
    import pyarrow as pa

    cols: dict[str, list] = {k: [] for k in ("mode", "from_layer", "from_head", "to_layer", "to_head", "value")}
    for mode, s in composition.items():
        idx = np.argwhere(np.isfinite(s))  # (n, 4): l1, h1, l2, h2 where l1 < l2
        cols["mode"] += [mode] * len(idx)
        for j, name in enumerate(("from_layer", "from_head", "to_layer", "to_head")):
            cols[name] += idx[:, j].tolist()
        cols["value"] += s[tuple(idx.T)].astype(np.float64).tolist()
    n = len(cols["mode"])
    return pa.table({"run": [checkpoint.run] * n, "step": [checkpoint.step] * n, **cols},
                    schema=pa.schema([("run", pa.string()), ("step", pa.int64()), ("mode", pa.string()),
                                      ("from_layer", pa.int32()), ("from_head", pa.int32()), ("to_layer", pa.int32()),
                                      ("to_head", pa.int32()), ("value", pa.float64())]))


# -- reading, for the Training view and the tests ----------------------------------------------------------------


@dataclass(frozen=True)
class StudyTables:
    """A study file read whole (small enough: a head's score per checkpoint), as pandas frames."""
    path: str
    meta: dict
    runs: object  # pandas.DataFrame
    checkpoints: object
    heads: object
    composition: object


def read_study(path: str | Path) -> StudyTables:
    """The study at `path`, read-only. Raises StudyFileError (one line) for a file that is not a study, is newer
    than this version, or is being written."""
    con = connect(path, read_only=True)
    try:
        frames = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").df()
                  for t in ("runs", "checkpoints", "heads", "composition")}
        return StudyTables(str(path), meta(con), **frames)
    finally:
        con.close()
