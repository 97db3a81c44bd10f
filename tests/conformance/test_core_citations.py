"""Every vLLM file:line the core cites (comments and docstrings of explorer/core/) names lines
of the installed vLLM that are about what the citation sits in.

The rules (what a citation is, which release and file it names, what "about" means) are in
`core_citations`. One test per citation, named by our file:line and the citation as written,
so a stale one says where it is. The checker's own tests below show it fails a wrong citation.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from tests.conformance import core_citations as cc

pytestmark = pytest.mark.conformance

CITATIONS = cc.all_citations()


@pytest.mark.parametrize("release", sorted(cc.RELEASES))
def test_each_cited_release_is_installed(release: str) -> None:
    root = cc.site(release)
    assert root is not None, f"vLLM {release} is not installed ({cc.RELEASES[release]})"
    dist = next(root.glob("vllm-*.dist-info"), None)
    assert dist is not None and dist.name.startswith(f"vllm-{release}"), dist


def test_the_finder_sees_every_citation_in_the_core() -> None:
    # Each ".py:<digit>" in the core's text is one citation found, none in code the finder
    # cannot read; and the core does cite vLLM a lot.
    assert len(CITATIONS) == cc.raw_citation_count()
    assert len(CITATIONS) > 100


@pytest.mark.parametrize("citation", CITATIONS, ids=[c.id for c in CITATIONS])
def test_each_core_citation_points_at_the_code_it_sits_in(citation: cc.Citation) -> None:
    assert not cc.problems(citation), "\n".join([citation.id, *cc.problems(citation)])


# ---- the checker fails wrong citations ----------------------------------------------------


def _one(tmp_path: Path, source: str) -> cc.Citation:
    path = tmp_path / "mirror.py"
    path.write_text(source, encoding="utf-8")
    (found,) = cc.citations_in(path)
    return found


def test_a_citation_of_the_right_code_holds(tmp_path: Path) -> None:
    c = _one(tmp_path, 'def get_computed_blocks():\n    """The lookup (kv_cache_manager.py:264-321)."""\n')
    assert c.ranges == ((264, 321),) and c.release == "0.31.0"
    assert cc.problems(c) == []


def test_a_citation_of_another_method_fails(tmp_path: Path) -> None:
    # allocate_slots' lines cited from our get_computed_blocks
    c = _one(tmp_path, 'def get_computed_blocks():\n    """The lookup (kv_cache_manager.py:558-576)."""\n')
    (problem,) = cc.problems(c)
    assert "allocate_slots" in problem and "get_computed_blocks" in problem


def test_a_name_written_next_to_a_citation_counts(tmp_path: Path) -> None:
    source = "def _fits():\n    # allocate_slots' capacity check (kv_cache_manager.py:558-576)\n    pass\n"
    assert cc.problems(_one(tmp_path, source)) == []
    moved = "def _fits():\n    # allocate_slots' capacity check (kv_cache_manager.py:264-280)\n    pass\n"
    assert cc.problems(_one(tmp_path, moved))


def test_a_range_past_the_end_fails(tmp_path: Path) -> None:
    c = _one(tmp_path, "# the pool (block_pool.py:99990-99999)\n")
    assert "outside the file" in cc.problems(c)[0]


def test_a_range_that_spills_onto_the_next_definition_fails(tmp_path: Path) -> None:
    # 810-829 is evict_blocks plus the blank line after it
    c = _one(tmp_path, 'def evict_blocks():\n    """Drop hashes (block_pool.py:810-829)."""\n')
    assert any("blank line" in p or "first line of" in p for p in cc.problems(c))


def test_a_release_marker_picks_the_release(tmp_path: Path) -> None:
    after = _one(tmp_path, "# x (scheduler.py:1-2, 5 in 0.33.0)\n")
    before = _one(tmp_path, "# x (0.33.0, base.py:550-566)\n")
    unmarked = _one(tmp_path, "# x (scheduler.py:1-2)\n")
    assert (after.release, after.ranges) == ("0.33.0", ((1, 2), (5, 5)))
    assert before.release == "0.33.0" and unmarked.release == "0.31.0"


@pytest.mark.parametrize("release", sorted(cc.RELEASES))
def test_the_short_name_table_holds_only_ambiguous_names(release: str) -> None:
    files = cc.vllm_files(release)
    for name, target in cc.SHORT_NAMES.items():
        assert target in files, f"{target} is not in vLLM {release}"
        assert sum(f.endswith("/" + name) for f in files) > 1, f"{name} is unique: cite it without the table"


def test_an_ambiguous_name_outside_the_table_fails() -> None:
    assert "utils.py" not in cc.SHORT_NAMES
    with pytest.raises(AssertionError, match="names .* files"):
        cc.resolve("utils.py", "0.31.0")
    assert cc.resolve("sched/utils.py", "0.31.0") == "vllm/v1/core/sched/utils.py"


def test_a_citation_moved_at_random_mostly_fails() -> None:
    # The name rule is not vacuous: each citation moved to random lines of its file (same
    # length) passes only when the new lines happen to mention one of its names.
    rng = random.Random(23)
    moved = []
    for c in CITATIONS:
        n = len(cc.vllm_source(cc.resolve(c.path, c.release), c.release).lines)
        for _ in range(5):
            ranges = []
            for first, last in c.ranges:
                start = rng.randint(1, max(1, n - (last - first)))
                ranges.append((start, start + last - first))
            moved.append(dataclasses.replace(c, ranges=tuple(ranges)))
    failing = [c for c in moved if cc.problems(c)]
    assert len(failing) >= 0.75 * len(moved), (len(failing), len(moved))
