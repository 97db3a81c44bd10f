"""Suite-wide: the order test files are handed to the parallel workers.

With ``--dist loadfile`` each file is one unit of work, handed to whichever worker is free. The
long files go first (the browser tier, then the conformance tier), so the run does not end with
one worker on a long browser file while the other has nothing left (scripts/run_tests.sh passes
``--no-loadscope-reorder``, which keeps this order instead of xdist's most-tests-first). Tests
inside a file keep their order.
"""

from __future__ import annotations

import pytest

# Tiers whose files run longest (browsers and servers, then vLLM), in the order they are handed out.
FIRST = ("tests/e2e/", "tests/conformance/")


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: files and the tests in them keep their relative order
