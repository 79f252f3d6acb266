"""Which launches a session keeps: the policy's sequence, its text form, and the CLI's errors."""

from __future__ import annotations

import pytest
from helpers.cli import run_cli

from proton_inject.collect.keep_policy import NEVER, KeepPolicy, LaunchCounts
from proton_inject.errors import UserError


def _kept(policy: KeepPolicy, launches: int) -> list[int]:
    """The launch numbers (from 1) of one build that the launch path asks to keep."""
    c = LaunchCounts("k", policy)
    out = []
    for _ in range(launches):
        c.seen += 1
        if c.seen >= c.next_keep:
            out.append(c.seen)
            c.next_keep = policy.next_after(c.seen)
    return out


def test_default_keeps_the_first_then_one_in_a_hundred():
    assert _kept(KeepPolicy(), 450) == [*range(1, 21), 100, 200, 300, 400]
    assert KeepPolicy().total == 2000


def test_all_keeps_every_launch_and_every_zero_stops_after_the_first():
    assert _kept(KeepPolicy.parse("all"), 50) == list(range(1, 51))
    p = KeepPolicy.parse("first=3,every=0")
    assert _kept(p, 1000) == [1, 2, 3] and p.next_after(3) == NEVER


def test_spec_keys_and_bound():
    p = KeepPolicy.parse(" first=5, every=1000 ,max=none")
    assert (p.first, p.every, p.total) == (5, 1000, None)
    assert KeepPolicy.parse("max=7").with_total(3).total == 3
    assert KeepPolicy.parse("max=7").with_total(None).total == 7
    assert KeepPolicy.from_options(None, 10) == KeepPolicy(every=10, rate=None)  # (1 in N asked: 1 in N)
    assert KeepPolicy.parse("rate=5").rate == 5 and KeepPolicy.parse("rate=none").rate is None
    assert KeepPolicy.from_options(None, None) is None
    assert "1 in 100" in KeepPolicy().describe() and KeepPolicy.parse("all").describe() == "every launch"


def test_a_policy_written_as_its_spec_reads_back_the_same():
    for text in ("all", "first=5,every=7,max=none", "first=0,every=0,max=3", "rate=none", "rate=3", ""):
        p = KeepPolicy.parse(text)
        assert KeepPolicy.parse(p.spec()) == p


def test_replays_of_a_graph_follow_the_policy():
    p = KeepPolicy.parse("first=2,every=50")
    assert [r for r in range(1, 151) if p.keeps_replay(r)] == [1, 2, 50, 100, 150]


def test_the_rate_allows_a_seconds_worth_at_once_then_its_rate():
    p = KeepPolicy(rate=20)
    assert p.within_rate(19, 0.0) and not p.within_rate(20, 0.0)
    assert p.within_rate(39, 1.0) and not p.within_rate(40, 1.0)
    assert KeepPolicy(rate=None).within_rate(10**9, 0.0)
    assert "1 in 100 up to 20 a second," in p.describe() and "a second" not in KeepPolicy(rate=None).describe()


@pytest.mark.parametrize("spec", ["some", "first=-1", "every=x", "max", "first=none", "first=1;every=2",
                                  "rate=-1", "rate=1.5"])
def test_bad_spec_is_a_user_error(spec):
    with pytest.raises(UserError, match="--keep-launches"):
        KeepPolicy.parse(spec)


def test_bad_spec_on_the_command_line_is_one_line_exit_2(tmp_path):
    p = run_cli(["profile", "--keep-launches", "every=often", "-o", "o", "--", "python", "-c", "pass"],
                cwd=tmp_path, code=2)
    assert "--keep-launches 'every=often'" in p.stderr and "Traceback" not in p.stderr

