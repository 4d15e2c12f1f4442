"""The code generator's bounded memo: least recently used entries go first once the weights pass the
limit, so a long-running process that keeps compiling new kernels holds a fixed amount of them."""

import threading

from jitorch.codegen.memo import BoundedMemo, BuiltOnce


def test_least_recently_used_entries_go_first_when_the_limit_is_passed():
    memo = BoundedMemo(10)
    memo.put("a", "aaaa")
    memo.put("b", "bbbb")
    assert memo.get("a") == "aaaa"  # now b is the least recently used
    memo.put("c", "cccc")
    assert "b" not in memo and memo.get("a") == "aaaa" and memo.get("c") == "cccc"
    assert (len(memo), memo.total) == (2, 8)


def test_a_replaced_entry_is_weighed_once_and_an_oversized_value_is_not_kept():
    memo = BoundedMemo(6)
    memo.put("a", "aaaa")
    memo.put("a", "aa")
    assert (memo.get("a"), memo.total) == ("aa", 2)
    memo.put("a", "a" * 7)  # heavier than the limit: the old value goes too, since it is stale
    assert "a" not in memo and memo.total == 0
    assert memo.get("a", "missing") == "missing"


def test_a_custom_weight_counts_entries():
    memo = BoundedMemo(3, size=lambda value: 1)
    for i in range(10):
        memo.put(i, [i] * 100)
    assert sorted(memo._entries) == [7, 8, 9]
    memo.clear()
    assert (len(memo), memo.total) == (0, 0)


def test_threads_putting_and_getting_keep_the_total_exact():
    memo = BoundedMemo(1000)

    def work(t):
        for i in range(2000):
            memo.put((t, i % 300), "x" * (1 + i % 13))
            memo.get((t, (i * 7) % 300))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert memo.total == sum(len(v) for v in memo._entries.values()) <= 1000


def test_built_once_builds_each_key_once_remembers_none_and_clears_past_its_limit():
    calls = []

    def build(*key):
        calls.append(key)
        return None if key == ("no",) else "+".join(key)
    made = BuiltOnce(build, limit=2)
    assert made("a", "b") == "a+b" and made("a", "b") == "a+b" and made("no") is None and made("no") is None
    assert calls == [("a", "b"), ("no",)] and made["a", "b"] == "a+b"
    made("c")
    made("d")  # a fourth key past the limit of 2: everything made so far goes, then "d" is made
    assert [k for k, _ in made.items()] == [("d",)]
    made("a", "b")
    assert calls[-1] == ("a", "b") and len(calls) == 5
