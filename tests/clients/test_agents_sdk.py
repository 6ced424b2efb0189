"""The OpenAI Agents SDK's default model (``OpenAIResponsesModel``, over the
Responses API) running an agent with a function tool to its final output,
through the gateway to the stub in each backend protocol, whole and
streamed.

The SDK lives in its own pinned environment (``.venv/agents``, from
``tests/clients/requirements-agents.txt``; ``make test`` installs it) and runs
``agents_run.py`` there as a subprocess; what the agent did comes back as
JSON (see that script for the run itself).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.clients.conftest import PROTOCOLS, ROOT, ClientStack, model

pytestmark = pytest.mark.integration

PYTHON = ROOT / ".venv" / "agents" / "bin" / "python"
SCRIPT = ROOT / "tests" / "clients" / "agents_run.py"
KEY = "sk-flatgate-agents"
PROMPT = "what the agent asks the tool about"


Reports = dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def runs() -> dict[str, Reports]:
    """Each protocol's run (both modes), made by the first test that needs it."""
    return {}


def run_agent(stack: ClientStack, request_id: str, name: str) -> Reports:
    if not PYTHON.exists():
        raise RuntimeError(f"{PYTHON} is missing: `make test` installs it")
    done = subprocess.run(
        [str(PYTHON), str(SCRIPT), stack.base_url, KEY, request_id, name, PROMPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reports: Reports = json.loads(done.stdout.splitlines()[-1])
    return reports


@pytest.mark.parametrize("mode", ["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_agent_calls_its_tool_and_reaches_a_final_output(
    stack: ClientStack, runs: dict[str, Reports], protocol: str, mode: str
) -> None:
    name = model(protocol)
    if protocol not in runs:
        runs[protocol] = run_agent(stack, f"agents-{uuid.uuid4().hex}", name)
    report = runs[protocol][mode]
    rid = report["request_id"]
    assert report["model_class"] == "OpenAIResponsesModel"
    # The forced call carried the user's message; the tool ran once; the model
    # was called again with the tool's output and answered.
    assert report["looked_up"] == [PROMPT]
    assert report["items"] == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert report["final_output"] == PROMPT
    first, second = report["response_ids"]
    assert first.startswith("resp_") and second.startswith("resp_") and first != second
    assert report["output_tokens"][1] == len(PROMPT.split())
    if mode == "streamed":
        events = report["events"]
        assert events.count("response.created") == 2 and events.count("response.completed") == 2
        assert "response.function_call_arguments.delta" in events
        assert "response.output_text.delta" in events
    entries = stack.access(lambda e: bool(e["request_id"] == rid), 2)
    assert [(e["tenant"], e["model"]) for e in entries] == [("agents", name)] * 2
    assert [(e["path"], e["status"]) for e in entries] == [("/v1/responses", 200)] * 2
