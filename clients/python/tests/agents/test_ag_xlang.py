"""The command-line interface the TypeScript client's tests drive
(xlang_py.py): items written by another process in the shape the
TypeScript SDK writes plain messages in are read back unchanged, and a
Python agent turn continues the conversation after them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, List

from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)

XLANG = Path(__file__).with_name("xlang_py.py")

# Messages as the TypeScript SDK stores them (JSON.stringify of its items).
FROM_TS = [
    {"type": "message", "role": "user", "content": "bonjour 🎉"},
    {"type": "message", "role": "assistant", "status": "completed", "id": "msg_ts",
     "content": [{"type": "output_text", "text": "ts:bonjour 🎉", "annotations": []}]},
]


def xlang(target: str, namespace: str, sid: str, *command: str, stdin: str = "") -> str:
    done = subprocess.run([sys.executable, str(XLANG), target, namespace, sid, *command], input=stdin,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_python_continues_after_other_writers(ag_target: str, ag_namespace: str) -> None:
    sid = new_session_id()
    assert json.loads(xlang(ag_target, ag_namespace, sid, "get")) == []
    xlang(ag_target, ag_namespace, sid, "add", stdin=json.dumps(FROM_TS))
    assert json.loads(xlang(ag_target, ag_namespace, sid, "get")) == FROM_TS
    assert xlang(ag_target, ag_namespace, sid, "run", "and you?").strip() == "py:and you?"
    items: List[Any] = json.loads(xlang(ag_target, ag_namespace, sid, "get"))
    assert items[:2] == FROM_TS
    assert items[2] == {"role": "user", "content": "and you?"}
    assert items[3]["role"] == "assistant" and items[3]["content"][0]["text"] == "py:and you?"
    assert len(items) == 4


def test_usage_errors_exit_non_zero(ag_target: str, ag_namespace: str) -> None:
    for command, stdin in ((["nope"], ""), (["add"], '{"not": "a list"}'), (["run"], "")):
        done = subprocess.run([sys.executable, str(XLANG), ag_target, ag_namespace, new_session_id(), *command],
                              input=stdin, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and done.stderr
