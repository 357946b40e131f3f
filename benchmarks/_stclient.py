"""A protocol-level visitor: Streamlit's own websocket (/_stcore/stream), as the page's JavaScript speaks it, without
a browser. One visit = open the websocket (through nginx or to one app process), ask for a run of the page with a
link's query string (model, text, heads off: `state.read_url_once` applies it as it does for a browser), and wait
for the server's "script finished". So load figures measure the server, not 30 Chromium tabs on two cores.

    result = asyncio.run(visit("http://127.0.0.1:8501", "model=smollm2&text=...&off=L0H1", timeout_s=120))
"""
from __future__ import annotations

import asyncio
import time
from urllib.parse import urlencode

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

_FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}


def query(**params) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def _texts(msg: ForwardMsg) -> list[tuple[str, str]]:
    """(kind, text) of the alerts and markdown a delta carries: what a visitor would read."""
    el = msg.delta.new_element
    kind = el.WhichOneof("type")
    if kind == "alert":
        return [("alert", el.alert.body)]
    if kind == "markdown":
        return [("markdown", el.markdown.body)]
    if kind == "exception":
        return [("exception", f"{el.exception.type}: {el.exception.message}")]
    return []


async def visit(url: str, query_string: str, timeout_s: float = 120, cookie: str | None = None) -> dict:
    """One page run: {ok, seconds, bytes, deltas, alerts (st.info/warning/error bodies), texts (markdown),
    exceptions, error, cookie}. Never raises for a server
    fault (refused, reset, timed out): it is reported in `error`, so a load run counts it as lost."""
    ws_url = url.replace("http://", "ws://", 1) + "/_stcore/stream"
    headers = {"Origin": url, **({"Cookie": cookie} if cookie else {})}
    out = {"ok": False, "seconds": None, "bytes": 0, "deltas": 0, "alerts": [], "texts": [], "exceptions": [],
           "error": None}
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with websockets.connect(ws_url, subprotocols=["streamlit"], additional_headers=headers,
                                          max_size=None, open_timeout=timeout_s, ping_interval=None) as ws:
                set_cookie = ws.response.headers.get("Set-Cookie", "")
                out["cookie"] = set_cookie.split(";", 1)[0] or None
                back = BackMsg()
                back.rerun_script.query_string = query_string
                await ws.send(back.SerializeToString())
                async for raw in ws:
                    out["bytes"] += len(raw)
                    msg = ForwardMsg()
                    msg.ParseFromString(raw)
                    kind = msg.WhichOneof("type")
                    if kind == "delta":
                        out["deltas"] += 1
                        for what, text in _texts(msg):
                            out[{"exception": "exceptions", "alert": "alerts"}.get(what, "texts")].append(text)
                    elif kind == "script_finished":
                        if msg.script_finished in _FINISHED:
                            out["ok"] = not out["exceptions"]
                            break
                        if msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                            out["error"] = f"script finished with status {msg.script_finished}"
                            break
    except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as err:
        out["error"] = f"{type(err).__name__}: {err}"
    out["seconds"] = time.monotonic() - t0
    return out
