"""thefuzz 0.19 token_set_ratio emulation: values derived by hand from the algorithm (spec §2.5).

Notation: R(x, y) = round(100 · 2M / (|x| + |y|)) with M the characters matched by difflib's
SequenceMatcher (longest block first, then recursively left and right of it), Python's
round-half-to-even.
"""

from __future__ import annotations

from empo2.envs.webshop.fuzz import full_process, ratio, token_set_ratio


def test_full_process_deletes_only_latin1_and_replaces_non_word():
    assert full_process("DUMMY_ATTR") == "dummy_attr"  # underscore is a word character
    assert full_process("  Navy/White!  ") == "navy white"
    assert full_process("café") == "caf"  # é = U+00E9 lies in 128..255 and is deleted
    assert full_process("ćx") == "ćx"  # U+0107 is outside 128..255: kept (and a word char)
    assert full_process(("color", "navy blue")) == "color    navy blue"  # str() of the tuple


def test_pack_of_12_vs_pack_of_6_is_88():
    # sect = "of pack" (7), c12 = "of pack 12" (10), c21 = "of pack 6" (9)
    # R(sect, c21) = 2·7/16 = 87.5 -> 88 (half to even); R(sect, c12) = 14/17 -> 82;
    # R(c12, c21): "of pack " matches (8) -> 16/19 -> 84. max = 88.
    assert token_set_ratio("pack of 12", "pack of 6") == 88


def test_x_large_vs_size_large_tuple_is_83():
    # {x, large} vs {size, large}: sect = "large", c12 = "large x", c21 = "large size".
    # R(sect, c12) = 10/12 -> 83; R(sect, c21) = 10/15 -> 67; R(c12, c21) = 2·6/17 -> 71.
    assert token_set_ratio("x-large", ("size", "large")) == 83


def test_gray_vs_grey_is_75():
    # disjoint token sets: sect = "" so only R("gray", "grey") counts: "gr" + "y" = 3 -> 6/8.
    assert token_set_ratio("gray", "grey") == 75


def test_essential_oil_vs_oils_is_96():
    # R("essential oil", "essential oils") = 26/27 = 0.963 -> 96
    assert token_set_ratio("essential oil", "essential oils") == 96


def test_subset_scores_100():
    assert token_set_ratio("powder snow", "cool powder snow") == 100
    assert token_set_ratio("large", "x-large") == 100
    assert token_set_ratio("x-large", ("size", "x-large")) == 100
    assert token_set_ratio("navy", ("color", "navy blue")) == 100


def test_half_rounds_to_even():
    # one token each, only "h" in common: M = 1, |x| + |y| = 16 -> 12.5 -> 12 (not 13)
    assert token_set_ratio("abcdefgh", "hijklmno") == 12


def test_empty_and_none():
    assert token_set_ratio("!!!", "abc") == 0
    assert token_set_ratio(None, "abc") == 0
    assert token_set_ratio("", "") == 0
    assert ratio("", "") == 100  # fuzz.ratio checks equality before emptiness
    assert ratio("", "a") == 0
