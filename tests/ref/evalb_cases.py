#!/usr/bin/env python3
"""evalb_cases.py: random gold and test tree files for comparing tfm-score -m f1 with EVALB.

    evalb_cases.py SEED N DIR

writes DIR/gold and DIR/test, N lines each, one tree a line.  The gold trees mix
function tags and indices (NP-SBJ-1, S=2), labels cut to nothing (-NONE- and =X as
phrase labels), unary chains, empty constituents and traces (-NONE-), punctuation and
quote tags (deleted by COLLINS.prm and new.prm), the words that QUOTE_LABEL and EQ_WORD
name, the outer "( ...)" and (TOP ...) brackets, and whitespace of every kind EVALB
skips.  Each test tree keeps the gold's preterminals in a fresh random bracketing, with
some tags changed (punctuation on and off), some words changed, dropped or added, traces
dropped, and now and then a line EVALB reads as a skip or an error: empty, "( )",
"(S )", "(S (X))".  EVALB cannot read a word followed by whitespace before its ')' nor
more than 200 words, so neither is written.
"""
import random
import sys

seed, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
PHRASES = ["S", "NP", "VP", "PP", "ADVP", "PRT", "SBAR", "NP-SBJ", "NP-SBJ-1", "S=2", "PRN",
           "ADJP", "S1", "X", "NP-TMP=3", "TOP", "WHNP-1", "-NONE-", "=X", "NP-", "A", "B"]
TAGS = ["NN", "DT", "VB", "IN", "JJ", "RB", "RP", "NNS", "VBZ", "POS", "CD", ",", ":", "``",
        "''", ".", "?", "!", "-NONE-", "-LRB-", "PRP$", "A", "B"]
WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "is", "was", "This", "this", "'", '"',
         "/", ",", ".", "*T*-1", "0", "--", "'s", "!", "?", "-LRB-", "x=y", "a-b", "\u00e9"]
PUNCT = {",": ",", ":": "--", ".": ".", "``": "``", "''": "''"}


def space():
    return " " if rng.random() < 0.85 else rng.choice(["  ", "\t", " \t ", "\r", "\v", "\f"])


def maybe_space():
    return "" if rng.random() < 0.8 else space()


def leaf():
    tag = rng.choice(TAGS)
    if tag == "-NONE-":
        return [tag, rng.choice(["*T*-1", "0", "*", "*U*"])]
    if tag in PUNCT and rng.random() < 0.7:
        return [tag, PUNCT[tag] if rng.random() < 0.7 else rng.choice(["'", '"', "/"])]
    return [tag, rng.choice(WORDS)]


def tree(depth, n):
    if depth > 6 or (n == 1 and rng.random() < 0.6):
        kids = [leaf() for _ in range(n)]
    else:
        kids, left = [], n
        while left > 0:
            k = rng.randint(1, left)
            kids.append(leaf() if k == 1 and rng.random() < 0.5 else tree(depth + 1, k))
            left -= k
        if rng.random() < 0.1:
            kids.insert(rng.randint(0, len(kids)), ["-NONE-", "*T*-1"])
        if rng.random() < 0.05:
            kids.insert(rng.randint(0, len(kids)), [rng.choice(PHRASES), [["-NONE-", "*"]]])
    node = [rng.choice(PHRASES), kids]
    if rng.random() < 0.1:
        node = [rng.choice(PHRASES), [node]]
    return node


def leaves(t):
    if isinstance(t[1], str):
        return [t]
    return [x for k in t[1] for x in leaves(k)]


def text(t):
    if isinstance(t[1], str):
        return "(" + t[0] + space() + t[1] + ")"
    if not t[1]:
        return rng.choice(["(" + t[0] + " )", "(" + t[0] + ")"])
    head = "(" + t[0] + (maybe_space() if rng.random() < 0.3 else space())
    return head + maybe_space().join(text(k) for k in t[1]) + maybe_space() + ")"


def bracket(lv, depth=0):
    out, i = [], 0
    while i < len(lv):
        k = rng.randint(1, len(lv) - i)
        if k == 1 and rng.random() < 0.5:
            out.append(lv[i])
        elif depth < 6 and k > 1:
            out.append([rng.choice(PHRASES), bracket(lv[i:i + k], depth + 1)])
        else:
            out.append([rng.choice(PHRASES), lv[i:i + k]])
        i += k
    return out


def test_of(g):
    if rng.random() < 0.03:
        return ""
    lv = [list(x) for x in leaves(g)]
    if rng.random() < 0.3:
        for x in lv:
            if x[0] != "-NONE-" and rng.random() < 0.2:
                x[0] = rng.choice(TAGS[:-2])
    if rng.random() < 0.05 and lv:
        lv[rng.randrange(len(lv))][1] = rng.choice(WORDS)
    if rng.random() < 0.05 and lv:
        del lv[rng.randrange(len(lv))]
    if rng.random() < 0.05:
        lv.insert(rng.randint(0, len(lv)), leaf())
    if rng.random() < 0.2:
        lv = [x for x in lv if x[0] != "-NONE-"]
    if not lv:
        return rng.choice(["", "( )", "(S )", "(S (X))", "(TOP (-NONE- *))"])
    return text([rng.choice(["S", "S", "TOP", "S1"]), bracket(lv)])


def wrap(s):
    r = rng.random()
    return "( " + s + ")" if r < 0.2 else "(TOP " + s + ")" if r < 0.3 else s


with open(out + "/gold", "w", encoding="utf-8") as gf, \
        open(out + "/test", "w", encoding="utf-8") as tf:
    for _ in range(count):
        g = tree(0, rng.choice([1, 2, 3, 4, 6, 8, 12, 30, 60]))
        t = test_of(g)
        gf.write(wrap(text(g)) + "\n")
        tf.write((wrap(t) if t and rng.random() < 0.9 else t) + "\n")
