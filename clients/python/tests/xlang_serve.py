"""Serves a cross-language script's commands from one Python process.

The TypeScript client's cross-language specs drive the Python side of a
shared session or thread through a script (agents/xlang_py.py,
adk/xlang_adk_py.py, the TypeScript client's test/langgraph/py_graph.py)
whose ``main(argv)`` runs one command (a coroutine function, or a plain one). ``<script> serve`` runs them here, one
process per spec file, instead of one process (and one import of the agent
SDK, seconds of CPU) per command. Each command still opens its own client
and session service and ends with them, as a process of its own would.

Each line of stdin is a JSON object ``{"argv": [...], "stdin": "..."}``;
each answer is one JSON line, ``{"ok": true, "out": <what the command
printed>}`` or ``{"ok": false, "err": <why it failed>}``, in the order of
the requests. The commands run one after another on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import sys
import traceback
from typing import Any, Awaitable, Callable, Dict, List, Optional


Main = Callable[[List[str]], Optional[Awaitable[None]]]


def _run(loop: asyncio.AbstractEventLoop, main: Main, request: Dict[str, Any]) -> Dict[str, Any]:
    printed = io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(request.get("stdin", ""))
    try:
        with contextlib.redirect_stdout(printed):
            ran = main(list(request["argv"]))
            if inspect.isawaitable(ran):
                loop.run_until_complete(ran)
        return {"ok": True, "out": printed.getvalue()}
    except SystemExit as stop:
        if stop.code in (None, 0):
            return {"ok": True, "out": printed.getvalue()}
        return {"ok": False, "err": str(stop.code)}
    except Exception:  # noqa: BLE001  (the failure goes back to the caller whole)
        return {"ok": False, "err": traceback.format_exc()}
    finally:
        sys.stdin = saved_stdin


def serve(main: Main) -> None:
    """Answers each request line of stdin with main's result, until stdin ends."""
    answers = sys.stdout
    requests = sys.stdin
    loop = asyncio.new_event_loop()
    try:
        for line in requests:
            if line.strip():
                answers.write(json.dumps(_run(loop, main, json.loads(line)), ensure_ascii=False) + "\n")
                answers.flush()
    finally:
        loop.close()
