#!/usr/bin/env python3
"""Every link into the docs resolves: `docs/x.md#anchor` in include/acx/*.h, docs/*.md and
README.md (or `docs/x.md, "Section"` in a header), and markdown links `](x.md)` / `](x.md#anchor)` in docs/*.md and README.md, name a file
that exists and, with an anchor, a heading of it (GitHub's anchors: lower case, punctuation
dropped, spaces to hyphens). Usage: check_doc_links.py SOURCE_ROOT; exits 1 on any dangling one."""
import glob
import os
import re
import sys


def slug(title):
    return re.sub(r'[^\w\- ]', '', title.strip().lower()).replace(' ', '-')


def anchors(path):
    out, seen = set(), {}
    fence = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        if fence or not line.startswith('#'):
            continue
        m = re.match(r'#+\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        a = slug(m.group(1))
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f'{a}-{n}')
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
    docs = os.path.join(root, 'docs')
    refs = []  # (where, target file, anchor or None)
    for h in sorted(glob.glob(os.path.join(root, 'include/acx/*.h*'))):
        for i, line in enumerate(open(h, encoding='utf-8'), 1):
            for m in re.finditer(r'docs/([\w.-]+\.md)(?:#([\w-]+)|,\s*"([^"]+)")?', line):
                # A section named in quotes ("docs/x.md, \"Data path\"") must be a heading too.
                anchor = m.group(2) or (slug(m.group(3)) if m.group(3) else None)
                refs.append((f'{os.path.relpath(h, root)}:{i}', os.path.join(docs, m.group(1)), anchor))
    mds = sorted(glob.glob(os.path.join(docs, '*.md'))) + [os.path.join(root, 'README.md')]
    for md in mds:
        text = open(md, encoding='utf-8').read()
        base = os.path.dirname(md)
        for m in re.finditer(r'\]\(\s*([\w./-]+\.md)(?:#([\w-]+))?\s*\)', text):
            line = text.count('\n', 0, m.start()) + 1
            refs.append((f'{os.path.relpath(md, root)}:{line}', os.path.normpath(os.path.join(base, m.group(1))),
                         m.group(2)))
        for m in re.finditer(r'(?<![\w/(])docs/([\w.-]+\.md)#([\w-]+)', text):
            line = text.count('\n', 0, m.start()) + 1
            refs.append((f'{os.path.relpath(md, root)}:{line}', os.path.join(docs, m.group(1)), m.group(2)))
    bad, cache = 0, {}
    for where, target, anchor in refs:
        if not os.path.isfile(target):
            print(f'{where}: {os.path.relpath(target, root)} does not exist')
            bad += 1
            continue
        if anchor:
            if target not in cache:
                cache[target] = anchors(target)
            if anchor not in cache[target]:
                print(f'{where}: {os.path.relpath(target, root)} has no heading #{anchor}')
                bad += 1
    print(f'{len(refs)} links into the docs; {bad} dangling')
    return 1 if bad or not refs else 0


if __name__ == '__main__':
    sys.exit(main())
