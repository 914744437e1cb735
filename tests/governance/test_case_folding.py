"""Case-ignoring path patterns compare case foldings (``str.casefold``), wildcards included.

A deny rule marked ``(?i)`` must catch every spelling a case-insensitive reading equates
(``straße``, ``STRASSE``), and ignoring case must never make a rule match less than it does
case-sensitively. The reference matcher here is written from the documented semantics with
another algorithm (a memoised recursion over the folded segment, the characters that fold to
each string found by brute force), independently of the implementation.
"""

from __future__ import annotations

import fnmatch
import functools
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lionexec.governance import PermissionPolicy, ignoring_case

#: characters whose case folding is longer than one character, or that fold to another one
TRICKY = "ßẞﬁﬃǰİΣσςŉΐſKÅµ"
NAME_CHARS = "abSxZ.-_" + TRICKY


def denied(rule: str, subject: str) -> bool:
    policy = PermissionPolicy(mode="rules", deny={"read": [rule]}, allow={"read": ["/**"]})
    return policy.check("read", subject, {}, kind="path").behavior == "deny"


def variants(name: str) -> set[str]:
    return {name, name.upper(), name.lower(), name.casefold(), name.swapcase()}


@pytest.mark.parametrize(
    ("rule", "subject"),
    [
        ("/data/*straße*", "/data/straße.txt"),
        ("/data/*straße*", "/data/STRASSE.txt"),
        ("/data/*straße*", "/data/Strasse.txt"),
        ("/data/*STRASSE*", "/data/straße.txt"),
        ("/data/x/stra?e", "/data/x/straße"),  # ? is one character as written: ß
        ("/data/x/stra?e", "/data/x/STRASSE"),  # ... so SS and ss, which fold alike
        ("/data/x/stra?e", "/data/x/strasse"),
        ("/data/x/stra?e", "/data/x/strase"),
        ("/data/x/stra[ßs]e", "/data/x/STRASSE"),
        ("/data/x/stra[!a]e", "/data/x/straße"),
        ("/data/x/*ﬁle*", "/data/x/PROFILE.txt"),
        ("/data/x/?ile", "/data/x/ﬁle"),  # ﬁ folds to fi: ? is the f, the i is literal
        ("/data/x/*ǰ*", "/data/x/J\u030c"),
        ("/data/x/?", "/data/x/ŉ"),
        ("/data/x/[İ]", "/data/x/i\u0307"),
        ("/data/x/*ς", "/data/x/ΟΔΟΣ"),
    ],
)
def test_a_case_ignoring_deny_rule_with_wildcards_catches_every_folding(
    rule: str, subject: str
) -> None:
    assert denied(ignoring_case(rule), subject), (rule, subject)


@pytest.mark.parametrize(
    ("rule", "subject"),
    [
        ("/data/x/stra?e", "/data/x/strae"),
        ("/data/x/stra[!ß]e", "/data/x/STRAẞE"),
        ("/data/x/stra[a]e", "/data/x/straße"),
        ("/data/*straße*", "/data/strase.txt"),
    ],
)
def test_a_case_ignoring_rule_with_wildcards_matches_nothing_more(rule: str, subject: str) -> None:
    assert not denied(ignoring_case(rule), subject), (rule, subject)


# -- properties -----------------------------------------------------------------------------


@given(
    name=st.text(st.sampled_from(NAME_CHARS), min_size=1, max_size=8).filter(
        lambda n: n not in (".", "..")
    ),
    around=st.sampled_from(["{}", "*{}", "{}*", "*{}*", "?{}", "{}?", "[ßx]{}*", "*{}[!.]"]),
    before=st.sampled_from(["", "x", "ß", "SS", "ẞ"]),  # each one character folded, as ß
    after=st.sampled_from(["", "y", "ß", "ẞ", "ǰ", "SS", "ﬁ"]),
)
@example(name="straße", around="*{}*", before="", after="")
@example(name="straße", around="{}", before="", after="")
@example(name="ǰİΣς", around="{}?", before="", after="ß")
def test_a_case_ignoring_name_matches_every_case_variant_of_it(
    name: str, around: str, before: str, after: str
) -> None:
    glob = around.format(name)
    # what the wildcards around the name stand for; a "?" or "[...]" is one character
    if around.startswith(("?", "[")):
        before = before or "x"
    elif not around.startswith("*"):
        before = ""
    if around.endswith(("?", "]")):
        after = after or "y"
    elif not around.endswith("*"):
        after = ""
    rule = ignoring_case(f"/data/{glob}")
    for variant in variants(name):
        assert denied(rule, f"/data/{before}{variant}{after}"), (glob, variant)
        assert denied(rule, f"/data/{before}{variant}{after}".upper()), (glob, variant)


#: one token of a segment glob: what it is written as, and its meaning for the reference
TOKENS = [
    *NAME_CHARS,
    "?",
    "*",
    "[ßx]",
    "[a-z]",
    "[A-Z]",
    "[ﬁΣ]",
]
NEGATED = ["[!a]", "[!ß]", "[!A-Z]"]
SUBJECT_CHARS = NAME_CHARS + "ASsfiFIJ\u030c\u0307ΣσΣ"


@functools.cache
def sources() -> dict[str, frozenset[str]]:
    """Each string some character case-folds to → those characters."""
    found: dict[str, set[str]] = {}
    for code in range(0x110000):
        c = chr(code)
        found.setdefault(c.casefold(), set()).add(c)
    return {folded: frozenset(chars) for folded, chars in found.items()}


def ref_matches(glob: list[str], segment: str) -> bool:
    """The documented meaning: literals compared folded, ``*`` any run of the folded segment,
    ``?`` and ``[...]`` the folding of one character (of the set, ignoring case)."""
    folded = segment.casefold()

    @functools.cache
    def match(i: int, j: int) -> bool:
        if j == len(glob):
            return i == len(folded)
        token = glob[j]
        if token == "*":
            return match(i, j + 1) or (i < len(folded) and match(i + 1, j))
        if len(token) == 1 and token != "?":
            f = token.casefold()
            return folded.startswith(f, i) and match(i + len(f), j + 1)
        for k in (1, 2, 3):
            chars = sources().get(folded[i : i + k], frozenset())
            fits = i + k <= len(folded)
            if fits and any(one(token, c) for c in chars) and match(i + k, j + 1):
                return True
        return False

    return match(0, 0)


def one(token: str, c: str) -> bool:
    if token == "?":
        return True
    negate = token.startswith("[!")
    inner = token[2:-1] if negate else token[1:-1]
    return (re.fullmatch(f"[{inner}]", c, re.IGNORECASE) is None) == negate


@given(
    glob=st.lists(st.sampled_from(TOKENS + NEGATED), min_size=1, max_size=7),
    segment=st.text(st.sampled_from(SUBJECT_CHARS), min_size=1, max_size=9),
)
@example(glob=list("stra?e"), segment="straße")
@example(glob=["*", "a", "?", "*", "b"], segment="aﬃb")
@example(glob=["*", "x", "?", "?", "b", "*"], segment="xﬀﬁbb")
def test_a_case_ignoring_segment_glob_matches_as_its_reference(
    glob: list[str], segment: str
) -> None:
    if segment in (".", "..") or "".join(glob) in (".", "..", "**"):
        return  # not a segment glob
    rule = ignoring_case("/d/" + "".join(glob))
    assert denied(rule, f"/d/{segment}") == ref_matches(glob, segment), (glob, segment)


def piece_for(token: str, data: st.DataObject) -> str:
    """A piece of a segment that *token* matches case-sensitively."""
    if token == "*":
        return data.draw(st.text(st.sampled_from(SUBJECT_CHARS), max_size=3))
    if token == "?":
        return data.draw(st.sampled_from(SUBJECT_CHARS))
    if token.startswith("["):
        fits = [c for c in SUBJECT_CHARS + token if fnmatch.fnmatchcase(c, token)]
        return data.draw(st.sampled_from(fits))
    return token


@given(glob=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=7), data=st.data())
def test_ignoring_case_never_makes_a_rule_match_less(glob: list[str], data: st.DataObject) -> None:
    """What a rule matches case-sensitively, it matches ignoring case, in every case (but
    for a negated set: ``[!a]`` matches ``A``, not ignoring case). The segment is built to
    match the glob (drawn at random, one in a hundred did, and the rest checked nothing)."""
    pattern = "".join(glob)
    segment = "".join(piece_for(token, data) for token in glob)
    if segment in ("", ".", ".."):
        return  # not a segment
    assert fnmatch.fnmatchcase(segment, pattern)
    for variant in variants(segment):
        if variant.casefold() == segment.casefold():
            assert denied(ignoring_case(f"/d/{pattern}"), f"/d/{variant}"), (pattern, variant)


@pytest.mark.timeout(10)  # the budget: a backtracking matcher takes far longer
def test_a_long_hostile_segment_does_not_make_a_case_ignoring_rule_slow() -> None:
    rule = ignoring_case("/d/a*a?a*a[ßa]a*b")
    assert not denied(rule, "/d/" + "a" * 200_000)
    assert denied(rule, "/d/" + "A" * 1_000 + "B")


@pytest.mark.parametrize("subject", ["cat /data/STRASSE.txt", "cat /data/straße.txt"])
def test_a_case_ignoring_command_rule_folds_as_a_path_rule_does(subject: str) -> None:
    # text and command rules used re.IGNORECASE, which does not take ß for ss
    policy = PermissionPolicy(
        mode="rules", deny={"bash": ["(?i)cat *straße*"]}, allow={"bash": ["cat *"]}
    )
    assert policy.check("bash", subject, {}, kind="command").behavior == "deny"
    text = PermissionPolicy(mode="rules", deny={"note": ["(?i)*straße*"]}, allow={"note": ["*"]})
    assert text.check("note", subject, {}, kind="text").behavior == "deny"
