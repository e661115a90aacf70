"""LangGraph's own conformance suite (`langgraph-checkpoint-conformance`) against `LedgerSaver`.

The suite registers a saver factory (`checkpointer_test`) and `validate` runs, for each
capability, that capability's spec against a fresh saver: the five base ones (put, put_writes,
get_tuple, list, delete_thread) and each extended one the saver implements (it detects them
by which async methods are overridden). Each capability is a test here, failing with the
suite's own failure messages, and a last test holds that every extended capability is
implemented, so none is skipped silently.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    ALL_CAPABILITIES,
    DetectedCapabilities,
)

from eventstore.file_sink import Durability  # noqa: E402
from sections.adapters.langgraph import LedgerSaver  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One run of the whole suite: every saver on a memory in its own data directory."""
    made = []

    @checkpointer_test(name="LedgerSaver")
    async def ledger_saver():
        root = tmp_path_factory.mktemp("conformance")
        memory = Memory.open(root, durability=Durability.UNSAFE_NO_FSYNC)
        made.append(memory)
        yield LedgerSaver(memory)
        memory.close()

    found = asyncio.run(validate(ledger_saver))
    found.print_report()
    return found


@pytest.mark.parametrize("capability", sorted(c.value for c in ALL_CAPABILITIES))
def test_capability_passes_langgraph_conformance(report, capability):
    result = report.results[capability]
    assert result.detected, f"{capability} is not implemented"
    assert result.passed is True, "\n".join(result.failures)
    assert result.tests_failed == 0 and result.tests_passed > 0


def test_every_capability_is_implemented():
    saver = LedgerSaver()
    try:
        assert DetectedCapabilities.from_instance(saver).missing == frozenset()
    finally:
        saver.close()
