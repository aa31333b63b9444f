#!/usr/bin/env python3
"""The resume protocol of a durable workflow, on stepwell.

Each run (``--run-id``) is a stepwell turn. The whole state document (the
"state file": workflow_version and each phase's status) is checkpointed
before a phase starts (``<phase>:in_progress``) and after it finishes
(``<phase>:done``), so a crash at any point leaves a log that says exactly
where to continue. On start the run resumes from the log alone: Restore
newest-first, page size 1 (the latest state), with
``expect_workflow_version`` so a run written by another MAJOR version is
refused instead of silently resumed with a different phase structure.

Phases marked done are skipped; a phase found in_progress (the process died
inside it) is run again, so each phase's side effect goes through
``client.once()`` with a key ``{run_id}/{phase}``: a re-run never repeats an
effect that completed.

    python examples/resume_workflow.py --target 127.0.0.1:50051 --run-id r1 --crash-after phase_2
    python examples/resume_workflow.py --target 127.0.0.1:50051 --run-id r1

``--crash-after PHASE`` kills the process (os._exit) right after PHASE is
marked in_progress. Exit codes: 0 done, 3 workflow version mismatch,
137 simulated crash.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from typing import Any, Dict

from stepwell import Client, OnceContext, WorkflowVersionMismatch

WORKFLOW_VERSION = "1.3.0"
PHASES = ["phase_1", "phase_2", "phase_3", "phase_4"]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def write_state(client: Client, run_id: str, state: Dict[str, Any], phase: str, terminal: bool = False) -> None:
    # A new timestamp per write: every write is a new checkpoint; the newest wins.
    client.checkpoint(run_id, phase, state, workflow_version=WORKFLOW_VERSION, terminal=terminal)


def start_or_resume(client: Client, run_id: str) -> Dict[str, Any]:
    """Trust only the log: the latest checkpoint is the state."""
    latest = client.latest(run_id, expect_workflow_version=WORKFLOW_VERSION)
    if latest is not None:
        return json.loads(latest.state)
    state = {
        "workflow_id": run_id,
        "workflow_version": WORKFLOW_VERSION,
        "started_at": now(),
        "phases": {p: {"status": "pending"} for p in PHASES},
    }
    write_state(client, run_id, state, "created")
    return state


def run_phase_logic(client: Client, run_id: str, phase_id: str) -> Dict[str, Any]:
    """The phase's side effect, done at most once per run and phase."""

    def effect(ctx: OnceContext) -> Dict[str, Any]:
        if ctx.previous_lease_expired:
            print(f"  {phase_id}: an earlier attempt died mid-effect; checking downstream first", flush=True)
        return {"output_file": f"{phase_id}.json", "attempt": ctx.attempt}

    return client.once(f"{run_id}/{phase_id}", effect, lease=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="127.0.0.1:50051", help="host:port or unix:/path")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--namespace", default="")
    ap.add_argument("--crash-after", choices=PHASES, help="exit abruptly once this phase is marked in_progress")
    args = ap.parse_args()

    with Client(args.target, namespace=args.namespace) as client:
        try:
            state = start_or_resume(client, args.run_id)
        except WorkflowVersionMismatch as e:
            print(
                f"run {args.run_id} was recorded by workflow {e.recorded_version}, this is {WORKFLOW_VERSION}.\n"
                f"Options:\n  1. resume it with the old workflow ({e.recorded_version})\n"
                f"  2. start fresh with a new run id\n  3. migrate the run's state",
                file=sys.stderr,
            )
            return 3

        for phase_id in PHASES:
            phase = state["phases"].setdefault(phase_id, {"status": "pending"})
            if phase["status"] == "done":
                print(f"skip {phase_id} (done)", flush=True)
                continue
            # Before start: mark in_progress (a crash from here on re-runs it).
            phase["status"] = "in_progress"
            state["phase"] = phase_id
            write_state(client, args.run_id, state, f"{phase_id}:in_progress")
            if args.crash_after == phase_id:
                print(f"crash after marking {phase_id} in_progress", flush=True)
                os._exit(137)
            print(f"run {phase_id}", flush=True)
            try:
                result = run_phase_logic(client, args.run_id, phase_id)
            except Exception as e:
                phase["status"] = "failed"
                phase["error"] = str(e)
                write_state(client, args.run_id, state, f"{phase_id}:failed")
                raise
            # After completion: mark done, record the output.
            phase["status"] = "done"
            phase["completed_at"] = now()
            phase["output_file"] = result["output_file"]
            write_state(client, args.run_id, state, f"{phase_id}:done")

        state["phase"] = "finished"
        write_state(client, args.run_id, state, "finished", terminal=True)
        print(f"workflow {args.run_id} finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
