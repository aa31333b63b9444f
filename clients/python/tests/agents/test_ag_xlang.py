"""The Python side the TypeScript client's tests drive (xlang_py.py, served
as they run it, and on its own command line): items written by another
process in the shape the TypeScript SDK writes plain messages in are read
back unchanged, and a Python agent turn continues the conversation after
them."""

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


class Served:
    """xlang_py.py serve, as the TypeScript specs run it: one process, a JSON
    line per command in, a JSON line per answer out."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(XLANG), "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, *argv: str, stdin: str = "") -> Any:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"argv": list(argv), "stdin": stdin}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "xlang_py.py serve ended without answering"
        return json.loads(line)

    def run(self, *argv: str, stdin: str = "") -> str:
        answer = self.ask(*argv, stdin=stdin)
        assert answer["ok"], answer["err"]
        return answer["out"]

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        assert self.proc.wait(timeout=300) == 0


def test_python_continues_after_other_writers(ag_target: str, ag_namespace: str) -> None:
    sid = new_session_id()
    served = Served()
    try:
        assert json.loads(served.run(ag_target, ag_namespace, sid, "get")) == []
        served.run(ag_target, ag_namespace, sid, "add", stdin=json.dumps(FROM_TS))
        assert json.loads(served.run(ag_target, ag_namespace, sid, "get")) == FROM_TS
        assert served.run(ag_target, ag_namespace, sid, "run", "and you?").strip() == "py:and you?"
        items: List[Any] = json.loads(served.run(ag_target, ag_namespace, sid, "get"))
    finally:
        served.close()
    assert items[:2] == FROM_TS
    assert items[2] == {"role": "user", "content": "and you?"}
    assert items[3]["role"] == "assistant" and items[3]["content"][0]["text"] == "py:and you?"
    assert len(items) == 4
    # The same session read by a process of its own, as a person runs it.
    done = subprocess.run([sys.executable, str(XLANG), ag_target, ag_namespace, sid, "get"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == items


def test_usage_errors_fail(ag_target: str, ag_namespace: str) -> None:
    served = Served()
    try:
        for command, stdin in ((["nope"], ""), (["add"], '{"not": "a list"}'), (["run"], "")):
            answer = served.ask(ag_target, ag_namespace, new_session_id(), *command, stdin=stdin)
            assert not answer["ok"] and answer["err"], answer
        # Serving goes on after a failed command.
        assert json.loads(served.run(ag_target, ag_namespace, new_session_id(), "get")) == []
    finally:
        served.close()
    done = subprocess.run([sys.executable, str(XLANG), ag_target, ag_namespace, new_session_id(), "nope"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and done.stderr
