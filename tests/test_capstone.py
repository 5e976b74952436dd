"""Notebook 08's corpus: data/sonnets.txt.gz as torchcourse.text reads it."""

from collections import Counter

from torchcourse.text import read_sonnets, stanzas


def test_the_154_sonnets_in_order():
    sonnets = read_sonnets()
    assert len(sonnets) == 154
    assert all(s.endswith("\n") and not s.startswith("\n") and "\n\n" not in s for s in sonnets)
    # 152 sonnets of 14 lines; 99 has 15, 126 has 12 (six couplets)
    assert Counter(s.count("\n") for s in sonnets) == {14: 152, 15: 1, 12: 1}
    assert sonnets[98].count("\n") == 15 and sonnets[125].count("\n") == 12
    assert sonnets[0].startswith("From fairest creatures we desire increase,\n")
    assert sonnets[17].startswith("Shall I compare thee to a summer's day?\n")
    assert sonnets[-1].endswith("Love's fire heats water, water cools not love.\n")
    assert set("".join(sonnets)) <= set(" !'(),-.:;?\nABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def test_stanzas_cut_a_sonnet_into_quatrains_and_what_is_left():
    sonnet = read_sonnets()[17]
    pieces = stanzas(sonnet)
    assert "".join(pieces) == sonnet
    assert [p.count("\n") for p in pieces] == [4, 4, 4, 2]
    assert pieces[-1].startswith("  So long as men can breathe")  # the couplet keeps its indent
    assert [p.count("\n") for p in stanzas(read_sonnets()[98])] == [4, 4, 4, 3]
