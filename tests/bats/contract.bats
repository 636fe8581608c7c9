#!/usr/bin/env bats
# The documented contract, checked mechanically so that it cannot drift: each tool's
# --help against its man page (the options, their short and long spellings, the range of
# every numeric option), the usage against the help's option list and the SYNOPSIS,
# tfm-config(5) against the keys the tools read, and examples of the pages against what
# the tools do.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-train > /dev/null || skip "the tools are not built yet"
    command -v python3 > /dev/null || skip "no python3"
}

TOOLS="tfm-avg tfm-batch tfm-cat tfm-decode tfm-score tfm-tokenize tfm-train"

# Compare the options of tool $1's --help with those of its man page; prints each
# difference, a line each, and nothing when they agree.
#   long    every --long option the help names, and every one that begins an item of the
#           man page's option lists (.It Fl ...), both ways
#   pairs   every "-x, --long" of the help, and every ".It Fl x ..., Fl -long" item
# (usage_diff holds the usage to the help's option list and to the SYNOPSIS)
options_diff() {
    "$1" --help > "$BATS_TEST_TMPDIR/help" || { echo "$1 --help failed"; return; }
    python3 - "$1" "$BATS_TEST_TMPDIR/help" "$TFM_ROOT/man/$1.1" <<'EOF'
import re, sys
tool, help_text, man = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
LONG = r'(?<![\w-])--([a-z][a-z0-9-]*)'

help_long = set(re.findall(LONG, help_text))
help_pairs = set(re.findall(r'(?<![\w-])-([A-Za-z0-9]), --([a-z][a-z0-9-]*)', help_text))

man_long, man_pairs = set(), set()
for line in man.splitlines():
    if not line.startswith('.It Fl '):
        continue
    words = line.split()[1:]
    # after Fl every word is a flag until the next macro: "Fl t , -tokens Ar n"
    flags, in_fl = [], False
    for w in words:
        if w == 'Fl':
            in_fl = True
        elif re.fullmatch(r'[A-Z][a-z]', w):
            in_fl = False
        elif in_fl and w not in (',', '|'):
            flags.append(w)
    longs = [f[1:] for f in flags if f.startswith('-')]
    shorts = [f for f in flags if re.fullmatch(r'[A-Za-z0-9]', f)]
    man_long.update(longs)
    man_pairs.update((s, l) for s in shorts for l in longs)

def report(what, a, b, an, bn):
    for x in sorted(a - b):
        print(f'{tool}: {what}{x} is in {an}, not in {bn}')
    for x in sorted(b - a):
        print(f'{tool}: {what}{x} is in {bn}, not in {an}')

report('--', help_long, man_long, '--help', 'the man page\'s OPTIONS')
# a long option the help names beside another ("-v, --per-sentence (also --verbose)")
# pairs with the short one only in the man page: compare the help's pairs one way
for s, l in sorted(help_pairs - man_pairs):
    print(f'{tool}: -{s}, --{l} is in --help, not in the man page\'s OPTIONS')
for s, l in sorted(man_pairs):
    if l in help_long and (s, l) not in help_pairs and any(l2 == l for _, l2 in help_pairs):
        print(f'{tool}: -{s}, --{l} is in the man page, --help pairs --{l} otherwise')
EOF
}

# Compare the usage of tool $1's --help with the option list after it and with the
# SYNOPSIS of its man page, a synopsis at a time (a subcommand's, a mode's); prints each
# difference, a line each, and nothing when they agree.
#   list      every option of the list (by its short or its long spelling) is in the
#             usage, but --help and --version; an option of a subcommand's section of
#             the list ("train:") in that subcommand's synopsis, one of another section
#             ("common:") in every subcommand's; and the usage names no other option
#   synopsis  the Nth synopsis of the usage ("usage: TOOL ...", "       TOOL ...") names
#             the options of the Nth .Nm of the SYNOPSIS, and its subcommand
usage_diff() {
    "$1" --help > "$BATS_TEST_TMPDIR/help" || { echo "$1 --help failed"; return; }
    python3 - "$1" "$BATS_TEST_TMPDIR/help" "$TFM_ROOT/man/$1.1" <<'EOF'
import re, sys
tool, help_text, man = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
OPT = r'(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z0-9])(?![\w-])'
lines = help_text.splitlines()

# the usage: its first line and the lines that continue it (indented, not an option),
# cut into synopses, each begun by the tool's name; a word after it that is not an
# option is a subcommand
n = 1
while n < len(lines) and lines[n].startswith(' ' * 4) and not lines[n].lstrip().startswith('-'):
    n += 1
synopses = []                                   # [subcommand or None, options]
for line in lines[:n]:
    words = line.split()
    if words[:1] == ['usage:']:
        words = words[1:]
    if words[:1] == [tool]:
        sub = words[1] if len(words) > 1 and re.fullmatch(r'[a-z]+', words[1]) else None
        synopses.append([sub, set()])
    elif not synopses:
        sys.exit(print(f'{tool}: the usage does not begin with "usage: {tool}"'))
    synopses[-1][1].update(re.findall(OPT, line))
subs = {sub for sub, _ in synopses if sub}

# the list: the items of the lines indented by a few spaces, "-x, --long ARG", "-x",
# "--long", several joined by " / "; a line "word:" at the margin begins a section
ITEM = re.compile(r'(?:-([A-Za-z0-9])(?:, --([a-z][a-z0-9-]*))?|--([a-z][a-z0-9-]*))'
                  r'(?: (?![-/])\S+)?')
items, section = [], None                       # (section or None, spellings)
for line in lines[n:]:
    m = re.match(r'([a-z]+):', line)
    if m:
        section = m.group(1) if m.group(1) in subs else None
        continue
    m = re.match(r' {2,8}(?=-)', line)
    pos = m and m.end()
    while m:
        m = ITEM.match(line, pos)
        if m:
            names = {'-' + m.group(1)} if m.group(1) else set()
            names |= {'--' + l for l in (m.group(2), m.group(3)) if l}
            items.append((section, names))
            if not line.startswith(' / ', m.end()):
                break
            pos = m.end() + 3
if not items:
    print(f'{tool}: no option list in --help')

def where(sub):
    return f'{tool} {sub}' if sub else tool
for section, names in items:
    if names & {'--help', '--version'}:
        continue
    if section:
        targets = [s for s in synopses if s[0] == section]
    elif subs:
        targets = [s for s in synopses if s[0]]
    else:
        targets = [(None, set().union(*(opts for _, opts in synopses)))]
    for sub, opts in targets:
        if not names & opts:
            print(f'{where(sub)}: {max(names, key=len)} is in the list of --help, '
                  f'not in the usage')
for sub, opts in synopses:
    known = set().union(*(nm for s, nm in items if s is None or s == sub))
    for o in sorted(opts - known):
        print(f'{where(sub)}: {o} is in the usage, not in the list of --help')

# the SYNOPSIS, a synopsis a .Nm
syn = man[man.index('.Sh SYNOPSIS'):man.index('.Sh DESCRIPTION')]
blocks = re.split(r'^\.Nm\b.*\n', syn, flags=re.M)[1:]
if len(blocks) != len(synopses):
    print(f'{tool}: {len(synopses)} synopses in the usage, {len(blocks)} in the SYNOPSIS')
for k, ((sub, opts), block) in enumerate(zip(synopses, blocks), 1):
    m = re.match(r'\.Cm ([a-z]+)$', block, re.M)
    if (m and m.group(1)) != sub:
        print(f'{tool}: synopsis {k}: subcommand {sub} in the usage, '
              f'{m and m.group(1)} in the SYNOPSIS')
    have = {'-' + o for o in re.findall(r'Fl (-[a-z][a-z0-9-]*|[A-Za-z0-9]\b)', block)}
    for o in sorted(opts - have):
        print(f'{where(sub)}: {o} is in synopsis {k} of the usage, not in the SYNOPSIS\'s')
    for o in sorted(have - opts):
        print(f'{where(sub)}: {o} is in synopsis {k} of the SYNOPSIS, not in the usage\'s')
EOF
}

@test "every option of --help is in the man page, and every option there is in --help" {
    for t in $TOOLS; do
        run options_diff "$t"
        assert_output ""
    done
}

@test "the usage names every option of --help's list (a subcommand's its own), as the SYNOPSIS does" {
    every_tool() { for t in $TOOLS; do usage_diff "$t"; done; }
    run every_tool
    assert_output ""
}

@test "every short option a tool takes is in its --help, paired with its long one" {
    # a short option the option table accepts but the help does not name is undocumented
    for t in $TOOLS; do
        "$t" --help > "$BATS_TEST_TMPDIR/help"
        run python3 - "$t" "$TFM_ROOT/bin/$t.c" "$BATS_TEST_TMPDIR/help" <<'EOF'
import re, sys
tool, src, help_text = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
shorts = set()
for s in re.findall(r'getopt_long\([^,]+,[^,]+,\s*([^,]+),', src):
    s = s.strip()
    if s.startswith('"'):
        shorts |= set(s.strip('"').replace(':', ''))
    else:       # a table of option strings (per subcommand): every string literal in it
        m = re.search(re.escape(s.split('[')[0]) + r'\[[^]]*\]\s*=\s*\{([^}]*)\}', src)
        for lit in re.findall(r'"([^"]*)"', m.group(1) if m else ''):
            shorts |= set(lit.replace(':', ''))
table = dict(re.findall(r'\{"([a-z][a-z0-9-]*)",\s*\w+_argument,\s*NULL,\s*\'(.)\'\}', src))
for s in sorted(shorts):
    longs = [l for l, c in table.items() if c == s]
    if not longs:
        print(f'{tool}: -{s} has no long form')
    elif not any(re.search(rf'(?<![\w-])-{s}, --{l}\b', help_text) for l in longs):
        print(f'{tool}: -{s} (--{longs[0]}) is not in --help as "-{s}, --{longs[0]}"')
for l in table:
    if not re.search(rf'(?<![\w-])--{l}\b', help_text):
        print(f'{tool}: --{l} is not in --help')
EOF
        assert_output ""
    done
}

@test "tfm-config(5) has every key with the default and the range the tools use, and no other" {
    # the defaults: a configuration file without keys; the ranges: the message that
    # refuses a value out of range, which states them
    run tfm-train -c /dev/null --print-config
    assert_success
    printf '%s\n' "$output" > "$BATS_TEST_TMPDIR/defaults"
    while read -r key _ _; do
        for v in -99999999999999999999 no-such-choice; do
            tfm-train -c /dev/null --print-config --set "$key=$v" 2>&1 | head -1
        done
    done < "$BATS_TEST_TMPDIR/defaults" > "$BATS_TEST_TMPDIR/ranges"
    run python3 - "$BATS_TEST_TMPDIR/defaults" "$BATS_TEST_TMPDIR/ranges" \
        "$TFM_ROOT/man/tfm-config.5" <<'EOF'
import re, sys
defaults = dict(l.split(' = ', 1) for l in open(sys.argv[1]).read().splitlines())
ranges, choices = {}, {}
for l in open(sys.argv[2]).read().splitlines():
    m = re.search(r"key '(\w+)': \S+ is out of range \[(\S+), (\S+)\]", l)
    if m:
        ranges[m.group(1)] = (m.group(2), m.group(3))
    m = re.search(r"key '(\w+)': '\S+' is not one of (\S+)", l)
    if m:
        choices[m.group(1)] = m.group(2).split('|')
man = open(sys.argv[3]).read()
keys = man[man.index('.Sh KEYS'):man.index('.Sh DECISIONS')]
items = {}
for block in re.split(r'\n\.It Cm ', keys)[1:]:
    head = block.split('\n', 1)[0].split()
    if len(head) > 2 and head[1] == 'Ns' and head[2] == '=':   # a key, not a choice's item
        items[head[0]] = block
for k in sorted(set(defaults) - set(items)):
    print(f'key {k} is not in tfm-config(5)')
for k in sorted(set(items) - set(defaults)):
    print(f'tfm-config(5) has key {k}, which the tools do not know')
for k, block in items.items():
    if k not in defaults:
        continue
    m = re.search(r'^Default (\S+)\.$', block, re.M)
    if not m or m.group(1) != defaults[k]:
        print(f'{k}: default {defaults[k]}, tfm-config(5) says {m and m.group(1)}')
    if k in ranges:
        m = re.search(r'^Range (\S+) to (\S+)\.$', block, re.M)
        if not m or tuple(map(float, m.groups())) != tuple(map(float, ranges[k])):
            print(f'{k}: range {ranges[k]}, tfm-config(5) says {m and m.groups()}')
    elif k in choices:
        head = block.split('\n', 1)[0]
        listed = [w for w in head.split()[3:] if w not in ('Ar', '|', 'Cm', 'Ns')]
        if listed != choices[k]:
            print(f'{k}: choices {choices[k]}, tfm-config(5) says {listed}')
    else:
        print(f'{k}: neither a range nor choices in the messages')
EOF
    assert_output ""
}

@test "an example that batches for a config batches within the config's budget" {
    # tfm-train refuses batches over the config's tokens: an example of README.md or a
    # man page that pipes or passes tfm-batch --tokens N to tfm-train -c configs/X.conf
    # must have N within X's budget (or raise it with --set tokens=)
    run python3 - "$TFM_ROOT" <<'EOF2'
import glob, os, re, subprocess, sys
root = sys.argv[1]
def budget(conf):
    out = subprocess.run(['tfm-train', '-c', os.path.join(root, conf), '--print-config'],
                         capture_output=True, text=True).stdout
    return int(re.search(r'^tokens = (\d+)$', out, re.M).group(1))
blocks = []
text = open(os.path.join(root, 'README.md')).read()
blocks += [('README.md', b) for b in re.findall(r'```sh\n(.*?)```', text, re.S)]
for page in sorted(glob.glob(os.path.join(root, 'man', '*.[15]'))):
    text = open(page).read()
    blocks += [(os.path.basename(page), b)
               for b in re.findall(r'^\.Bd -literal[^\n]*\n(.*?)^\.Ed', text, re.S | re.M)]
checked = 0
for where, block in blocks:
    tokens = re.findall(r'tfm-batch [^|>\n]*--tokens (\d+)', block)
    confs = re.findall(r'tfm-train [^|\n]*-c (configs/[\w-]+\.conf)', block)
    if not tokens or not confs or 'tokens=' in block:
        continue
    for conf in confs:
        checked += 1
        for n in tokens:
            if int(n) > budget(conf):
                print(f'{where}: tfm-batch --tokens {n} for {conf}, whose budget is '
                      f'{budget(conf)}')
if checked == 0:
    print('no example pairs tfm-batch --tokens with tfm-train -c')
EOF2
    assert_output ""
}

@test "tfm(5)'s example of tfm-cat output is what tfm-cat prints for a token stream" {
    T="$BATS_TEST_TMPDIR"
    seq 1 300 | awk '{ print "the cat sat on mat number " $1 }' > "$T/train.en"
    tfm-tokenize train -q -m "$T/spm.model" --vocab 60 -O hard_vocab_limit=false "$T/train.en"
    tfm-tokenize encode -q -m "$T/spm.model" -o "$T/train.en.tfm" "$T/train.en"
    # the example: its command, then its output up to the end of the block
    awk '/^\$ tfm-cat train.en.tfm \| head/ { on = 1; print; next }
         on && /^\.Ed/ { exit } on' "$TFM_ROOT/man/tfm.5" > "$T/example"
    n=$(sed -n '1s/.*head -\([0-9]*\)$/\1/p' "$T/example")
    [ -n "$n" ]
    [ "$(sed 1d "$T/example" | wc -l)" -eq "$n" ]
    # the same lines, the values of a vocabulary's size and CRC aside
    (cd "$T" && tfm-cat train.en.tfm | head -n "$n") | sed 's/=.*//' > "$T/got"
    sed 1d "$T/example" | sed 's/=.*//' > "$T/want"
    run diff "$T/want" "$T/got"
    assert_success
}

@test "the range every numeric option refuses outside is in the man page's item of that option" {
    # each option of --help given a number far out of range says the range it takes
    # ("expected an integer from LO to HI", "a number in [LO, HI]"): both bounds must be
    # in the option's item of the man page (as decimals, 1e6, or 2^63\-1)
    run python3 - "$TFM_ROOT" <<'EOF2'
import re, subprocess, sys, os
root = sys.argv[1]
def man_items(tool):
    man = open(f'{root}/man/{tool}.1').read()
    opts = man[man.index('.Sh OPTIONS'):]
    opts = opts[:opts.index('\n.Sh ', 1)]
    items = {}
    for block in re.split(r'\n(?=\.It Fl )', opts)[1:]:
        head = block.split('\n', 1)[0]
        for l in re.findall(r'(?:Fl |, )-([a-z][a-z0-9-]*)', head):
            items.setdefault(l, '')
            items[l] += block
    return items
def values(text):
    text = text.replace('\\-', '-').replace('\\(mi', '-')
    vals = set()
    for m in re.finditer(r'(?<![\w.])(2\^(\d+)(-1)?|\d+(?:\.\d+)?(?:e[+-]?\d+)?)', text):
        if m.group(2):
            v = 2 ** int(m.group(2)) - (1 if m.group(3) else 0)
        else:
            v = float(m.group(1))
        vals.add(float(v))
    return vals
out, checked = [], 0
for tool, sub in [('tfm-tokenize', 'train'), ('tfm-tokenize', 'encode'), ('tfm-batch', None),
                  ('tfm-train', None), ('tfm-avg', None), ('tfm-decode', None), ('tfm-score', None)]:
    help_text = subprocess.run([tool, '--help'], capture_output=True, text=True).stdout
    items = man_items(tool)
    for l in sorted(set(re.findall(r'(?<![\w-])--([a-z][a-z0-9-]*)', help_text))):
        args = [tool] + ([sub] if sub else []) + [f'--{l}', '-99999999999999999999']
        p = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
        m = re.search(r"expected (?:an integer from (\S+) to (\S+)|a number in [\[(](\S+), (\S+)\])", p.stderr)
        if not m:
            continue
        lo, hi = [float(x.rstrip(']')) for x in (m.group(1, 2) if m.group(1) else m.group(3, 4))]
        checked += 1
        have = values(items.get(l, ''))
        for b in (lo, hi):
            if b not in have:
                out.append(f'{tool}: --{l}: {lo:g} to {hi:g}: {b:g} is not in the man page')
for line in sorted(set(out)):
    print(line)
if checked < 30:
    print(f'only {checked} numeric options found')
EOF2
    assert_output ""
}

@test "every Markdown file the code, the tests and the docs cite ships with them" {
    # an upper-case Markdown name (README.md, RESULTS.md, PROVENANCE.md) is a document of the
    # repository; a comment that cites one found nowhere in it points outside the code
    cd "$TFM_ROOT"
    run bash -c "find . -path ./build -prune -o -path ./.git -prune -o -type f -print |
        xargs grep -IohE '\\b[A-Z][A-Z0-9_]*\\.md\\b' | sort -u |
        while read -r f; do [ -n \"\$(find . -path ./.git -prune -o -name \"\$f\" -print -quit)\" ] ||
            echo \"cited, not in the repository: \$f\"; done"
    assert_success
    assert_output ""
}

@test "no word after a closing delimiter on an Fl line of a man page: it would print as a flag" {
    # ".Fl o ) ; a regular file" prints "-o); -a -regular -file": mdoc takes every word
    # after Fl for a flag until the next macro, delimiters or not; text goes on a line of
    # its own
    run python3 - "$TFM_ROOT"/man/*.[15] <<'EOF2'
import re, sys
for path in sys.argv[1:]:
    for n, line in enumerate(open(path), 1):
        if not line.startswith('.') or ' Fl' not in ' ' + line[1:]:
            continue
        in_fl = closed = False
        for w in line[1:].split():
            if re.fullmatch(r'[A-Z][a-z]{1,2}', w):
                in_fl, closed = w == 'Fl', False
            elif not in_fl:
                continue
            elif w in (')', ']', ';', ':', '.', '?', '!'):
                closed = True
            elif closed and w not in (',', '|', '(', '['):
                print(f'{path.split("/")[-1]}:{n}: {line.rstrip()}')
                break
EOF2
    assert_success
    assert_output ""
}
