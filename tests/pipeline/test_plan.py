from token_rows import row

from openjev_batch.core import lcp
from openjev_batch.pipeline.plan import plan


def test_lcp():
    assert lcp((1, 2, 3), (1, 2, 4)) == 2
    assert lcp((1, 2), (1, 2, 3)) == 2
    assert lcp((), (1,)) == 0
    assert lcp((5,), (6,)) == 0
    assert lcp((1, 2, 3), [1, 2]) == 2 and lcp([7, 8], (7, 9)) == 1


def test_shared_prefixes_become_adjacent_and_are_counted_once():
    system = [7] * 10
    rows = [row(0, system + [1, 1]), row(1, [3, 3, 3]), row(2, system + [2, 2]), row(3, system + [1, 1])]
    (w,) = plan(rows, kv_budget_tokens=10_000)
    assert [r.pos for r in w.rows] == [1, 0, 3, 2]
    # row1: 3 new; row0: 12 new; row3 repeats row0: 0; row2 shares 10 with row3: 2 new
    assert w.new_prefix_tokens == (3, 12, 0, 2)
    assert w.unique_tokens == 17 + 4 * 2 * 3
    assert w.logical_tokens == sum(len(r.prefix) * 2 + 6 for r in rows)


def test_windows_respect_the_budget_and_every_row_appears_once():
    rows = [row(i, [i % 5] * 20 + [i]) for i in range(50)]
    windows = plan(rows, kv_budget_tokens=100)
    seen = [r.pos for w in windows for r in w.rows]
    assert sorted(seen) == list(range(50))
    for w in windows:
        assert w.unique_tokens <= 100 or len(w.rows) == 1
    assert len(windows) > 1


def test_oversized_row_runs_alone_and_branch_cap():
    rows = [row(0, [1] * 500), row(1, [2] * 5), row(2, [3] * 5)]
    windows = plan(rows, kv_budget_tokens=50)
    assert [len(w.rows) for w in windows] == [1, 2]
    assert [len(w.rows) for w in plan(rows, 10_000, max_branches=2)] == [1, 1, 1]


def test_plan_is_pure():
    rows = [row(i, [9 - i]) for i in range(5)]
    a, b = plan(rows, 1000), plan(list(rows), 1000)
    assert a == b and [r.pos for r in rows] == list(range(5))
