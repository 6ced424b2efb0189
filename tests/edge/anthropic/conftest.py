"""The Messages API tests' shared fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.edge.anthropic.stack import MessagesStack, messages_stack


@pytest.fixture(scope="package")
def messages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    """The real stack (``stack.messages_stack``), started once for the
    package's modules that ask for it, and stopped after them."""
    with messages_stack(tmp_path_factory.mktemp("messages")) as stack:
        yield stack
