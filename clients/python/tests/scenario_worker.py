"""The Python scenario worker of clients/scenarios (its README, "Worker
steps"): a run that pauses for a person (``approval``), a run that sleeps
durably (``sleep``), and a party that signals a wait (``signal``). The
scenario runners of every client start it as a child process, kill it
mid-wait and start it again, so everything it knows comes from the sidecar.

    scenario_worker.py approval --target HOST:PORT --namespace NS --run RUN --effects FILE
    scenario_worker.py sleep    --target HOST:PORT --namespace NS --run RUN --effects FILE --seconds S
    scenario_worker.py signal   --target HOST:PORT --namespace NS --run RUN --name NAME --payload TEXT
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Callable, List, Optional

from stepwell import Client, RetryPolicy, StepwellError

# A run rides over a sidecar that restarts under it: a worker retries longer
# than the default policy does.
PATIENT = RetryPolicy(max_attempts=100, initial_backoff=0.05, max_backoff=1.0)


def say(line: str) -> None:
    print(line, flush=True)


def restore_or_start(sw: Client, run: str, phase: str) -> None:
    """Restores the turn; a run without a checkpoint checkpoints ``phase``."""
    if sw.latest(run) is None:
        sw.checkpoint(run, phase, {})


def effect(sw: Client, run: str, effects: str, payload: bytes) -> str:
    """The run's side effect, through once(): one line appended to the effects file."""

    def append() -> str:
        with open(effects, "a", encoding="utf-8") as f:
            f.write(f"{run}\n")
        return "done:" + payload.decode("utf-8")

    result: str = sw.once(f"{run}/effect", append)
    return result


def approval(sw: Client, args: argparse.Namespace) -> None:
    restore_or_start(sw, args.run, "waiting")
    sw.create_wait(args.run, "approve")
    say("waiting")
    payload = sw.wait_for_signal(args.run, "approve")
    result = effect(sw, args.run, args.effects, payload)
    sw.checkpoint(args.run, "done", {})
    say(f"done {result}")


def sleep(sw: Client, args: argparse.Namespace) -> None:
    restore_or_start(sw, args.run, "sleeping")
    # A later worker of the run asks for a later time; the first creation stands.
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=args.seconds)
    sw.create_wait(args.run, "nap", resolve_at=when)
    say("sleeping")
    sw.sleep_until(args.run, "nap", when)
    effect(sw, args.run, args.effects, b"")
    sw.checkpoint(args.run, "woke", {})
    say("woke")


def signal(sw: Client, args: argparse.Namespace) -> None:
    settled = sw.signal(args.run, args.name, args.payload.encode("utf-8"))
    say("settled" if settled else "repeat")


def parse(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("approval", "sleep", "signal"):
        p = sub.add_parser(name)
        p.add_argument("--target", required=True)
        p.add_argument("--namespace", required=True)
        p.add_argument("--run", required=True)
        if name == "signal":
            p.add_argument("--name", required=True)
            p.add_argument("--payload", required=True)
        else:
            p.add_argument("--effects", required=True)
        if name == "sleep":
            p.add_argument("--seconds", type=float, required=True)
    return parser.parse_args(argv)


COMMANDS: dict[str, Callable[[Client, argparse.Namespace], None]] = {
    "approval": approval,
    "sleep": sleep,
    "signal": signal,
}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse(argv)
    try:
        with Client(args.target, namespace=args.namespace, retry=PATIENT) as sw:
            COMMANDS[args.command](sw, args)
    except StepwellError as err:
        print(f"scenario_worker {args.command}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
