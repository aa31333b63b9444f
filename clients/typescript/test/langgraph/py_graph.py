"""The Python half of cross-language.spec.ts: a LangGraph graph on stepwell's
Python saver, driven one command at a time by the spec.

The spec runs a JavaScript graph and this one against one sidecar, in one
namespace, under one auth file, and checks what each language's saver sees of
the other's threads. It calls

    python py_graph.py TARGET NAMESPACE SECURITY_DIR COMMAND JSON_ARGS

or, as the spec does, ``python py_graph.py serve``, which runs those
commands, each a JSON line of stdin, in one process (the Python client's
tests/xlang_serve.py)

where SECURITY_DIR holds what scripts/make-test-pki writes (the CA, the client
certificate and key, and the token this side authenticates with, the same one
the JavaScript side uses). The command's answer is one JSON line on stdout;
an error the spec expects is part of that answer, anything else exits
non-zero with its traceback.

The graph has the shape of the spec's JavaScript one: three nodes in a row,
each appending "<lang>:<node>" to the list `log`. Its second node waits until
the peer thread (the JavaScript graph's) has a checkpoint, so the two graphs
are seen to run at the same time.
"""

from __future__ import annotations

import json
import operator
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Dict, List, Optional, TypedDict

from langgraph.graph import END, START, StateGraph

from stepwell import TLS
from stepwell.langgraph import StepwellSaver
from stepwell.v1 import records_pb2 as rec

PEER_WAIT_SECONDS = 60.0


class State(TypedDict):
    log: Annotated[list, operator.add]


def connect(target: str, namespace: str, security_dir: str) -> StepwellSaver:
    """A saver on the spec's sidecar, over mutual TLS, with the shared token."""
    d = Path(security_dir)
    tls = TLS(ca=d / "ca.pem", cert=d / "client.pem", key=d / "client.key", server_name="localhost")
    return StepwellSaver.from_address(target, namespace=namespace, token=(d / "token").read_text().strip(), tls=tls)


def wait_for_thread(saver: StepwellSaver, thread_id: str) -> None:
    """Polls the store until the thread has a checkpoint; raises after PEER_WAIT_SECONDS.

    It asks for the records, not for a checkpoint tuple, because the peer's
    checkpoints may be in a format this side cannot read."""
    deadline = time.monotonic() + PEER_WAIT_SECONDS
    req = rec.ListRecordsRequest(namespace=saver.namespace, turn_id=thread_id, kind="checkpoint", page_size=1)
    while not saver.client.record_stub.ListRecords(req, timeout=10).entries:
        if time.monotonic() > deadline:
            raise TimeoutError(f"thread {thread_id!r} had no checkpoint after {PEER_WAIT_SECONDS} s")
        time.sleep(0.05)


def build(saver: StepwellSaver, lang: str, peer: Optional[str]) -> Any:
    """The three-node graph, compiled with the saver."""

    def node(name: str) -> Callable[[State], Dict[str, list]]:
        def run(state: State) -> Dict[str, list]:
            if name == "s2" and peer:
                wait_for_thread(saver, peer)
            return {"log": [f"{lang}:{name}"]}

        return run

    g = StateGraph(State)
    for name in ("s1", "s2", "s3"):
        g.add_node(name, node(name))
    g.add_edge(START, "s1")
    g.add_edge("s1", "s2")
    g.add_edge("s2", "s3")
    g.add_edge("s3", END)
    return g.compile(checkpointer=saver)


def config(thread: str, tag: str = "") -> Dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "metadata": {"lang": "py", "xlang": tag}}


def cmd_run(saver: StepwellSaver, a: Dict[str, Any]) -> Any:
    """Runs the graph on a thread: the first run, or a continuation of any thread."""
    try:
        out = build(saver, "py", a.get("peer")).invoke({"log": a["input"]}, config(a["thread"], a["tag"]))
        return {"log": out["log"]}
    except Exception as exc:  # the spec asserts what happens, either way
        return {"error": f"{type(exc).__name__}: {exc}"}


def cmd_list(saver: StepwellSaver, a: Dict[str, Any]) -> Any:
    """The cross-thread list with a metadata filter, newest first."""
    return [
        {"thread_id": t.config["configurable"]["thread_id"], "lang": t.metadata.get("lang"), "step": t.metadata.get("step")}
        for t in saver.list(None, filter=a["filter"])
    ]


def cmd_get(saver: StepwellSaver, a: Dict[str, Any]) -> Any:
    """A thread's newest checkpoint as this side reads it (or the error reading it)."""
    try:
        t = saver.get_tuple({"configurable": {"thread_id": a["thread"]}})
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if t is None:
        return {"found": False}
    return {"found": True, "values": t.checkpoint["channel_values"], "metadata": t.metadata, "id": t.checkpoint["id"]}


def cmd_delete(saver: StepwellSaver, a: Dict[str, Any]) -> Any:
    saver.delete_thread(a["thread"])
    return {"deleted": a["thread"]}


COMMANDS = {"run": cmd_run, "list": cmd_list, "get": cmd_get, "delete": cmd_delete}


def main(argv: List[str]) -> None:
    target, namespace, security_dir, command, args = argv[:5]
    with connect(target, namespace, security_dir) as saver:
        print(json.dumps(COMMANDS[command](saver, json.loads(args)), default=repr), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        # The Python client's tests hold the serving loop (xlang_serve.py).
        sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python" / "tests"))
        from xlang_serve import serve

        serve(main)
    else:
        main(sys.argv[1:])
