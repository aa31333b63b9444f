"""examples/adk_agent.py and the README's Google ADK section: the example,
its two processes against the test's sidecar, prints exactly the
transcript the README shows, and the session it leaves in stepwell holds
what the transcript says."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from adk_support import adk_namespace, adk_sidecar, adk_target  # noqa: F401  (fixtures)
from stepwell.adk import StepwellSessionService

CLIENT = Path(__file__).resolve().parents[2]
EXAMPLE = CLIENT / "examples" / "adk_agent.py"
README = CLIENT / "README.md"


def readme_block(marker: str) -> str:
    """The fenced block right after the README's ``<!-- marker: ... -->`` line."""
    lines = README.read_text().splitlines(keepends=True)
    at = [n for n, line in enumerate(lines) if line.startswith(f"<!-- {marker}: ")]
    assert len(at) == 1, f"README.md has {len(at)} {marker} markers"
    start = at[0] + 1
    assert lines[start].startswith("```"), f"no fenced block after the {marker} marker"
    end = next(n for n in range(start + 1, len(lines)) if lines[n].rstrip() == "```")
    return "".join(lines[start + 1:end])


def test_example_prints_the_readme_transcript(adk_target: str, adk_namespace: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE), "--target", adk_target, "--namespace", adk_namespace],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == readme_block("adk-transcript")

    async def read() -> object:
        async with StepwellSessionService.from_address(adk_target, namespace=adk_namespace) as service:
            return await service.get_session(app_name="shop", user_id="ann", session_id="cart-1")

    session = asyncio.run(read())
    # Four events per item added (the message, the call, the response, the
    # answer), two for the question.
    assert session is not None and len(session.events) == 3 * 4 + 2
    assert session.state == {"cart": ["tea", "milk", "honey"], "app:orders": 3, "user:orders": 3}
