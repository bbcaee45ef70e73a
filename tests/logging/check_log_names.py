#!/usr/bin/env python3
"""A bad argument's WARN line must name the public function the user called and the parameter as
the public header spells it (STYLE.md). This reads the sources and checks, for every function
defined in runtime/, collectives/ and kernels/:
  - ACX_CHECK_NULL(p) logs __func__ and #p: it may appear only in a public function (declared in
    include/acx/*.h) and p must be the header's name for that parameter;
  - a literal "acx_x: argument 'p'" in a log line names a public function and one of its
    parameters (p, or p->field / p.field / p[i]);
  - no log string names an internal function ("acxi_...:", "check_...:").
Usage: check_log_names.py SOURCE_ROOT. Prints each finding; exits 1 if there is any."""
import glob
import os
import re
import sys


def strip_comments(s):
    # Keep the line count (findings name lines) and the string literals (checked below).
    out, i, n = [], 0, len(s)
    while i < n:
        if s.startswith('/*', i):
            j = s.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', s[i:j]))
            i = j
        elif s.startswith('//', i):
            j = s.find('\n', i)
            j = n if j < 0 else j
            i = j
        elif s[i] in '"\'':
            q, j = s[i], i + 1
            while j < n and s[j] != q:
                j += 2 if s[j] == '\\' else 1
            out.append(s[i:j + 1])
            i = j + 1
        else:
            out.append(s[i])
            i += 1
    return ''.join(out)


def split_params(params):
    parts, depth, cur = [], 0, ''
    for ch in params:
        depth += ch == '('
        depth -= ch == ')'
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    names = []
    for p in parts:
        p = p.strip()
        if p in ('', 'void', '...'):
            continue
        m = re.search(r'\(\s*\*\s*(\w+)\s*\)', p)  # a function pointer
        if not m:
            m = re.search(r'(\w+)\s*$', re.sub(r'\[[^\]]*\]', '', p))
        names.append(m.group(1) if m else '?')
    return names


# Internal interfaces between acx's own layers (executor, rings, shared memory, control plane,
# engines, the owner's token check): their arguments never come from a user's call, so their
# defensive checks may name them. A helper a public function calls with its user's arguments
# does not belong here: check in the public function, or pass it the name (ACX_CHECK_NULL_IN).
INTERNAL = re.compile(r'^(acxi_(ring|shm|ctrl|fd|heartbeat|fault|engine|ext|device_restart|token_admit|'
                      r'token_access|token_resolve)\w*|acxc_(ctrl|world|nccl)\w*|data_op|'
                      r'(cuda|host)_(create|host_region_\w+))$')
# Files whose every function is such an interface (the control messages' codec: peers' bytes).
INTERNAL_FILES = {'ctrl_msg.c'}
DECL = re.compile(r'\b(acx_\w+)\s*\(((?:[^;{()]|\([^()]*\))*)\)\s*(?:__attribute__\s*\(\(.*?\)\))?\s*;', re.S)
DEFN = re.compile(r'^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(((?:[^;{()]|\([^()]*\))*)\)\s*\{', re.M)
LIT_ARG = re.compile(r'"(acx_\w+): (?:arguments? )?\'(\w+)')
LIT_INTERNAL = re.compile(r'"((?:acxi_|check_)\w*):')


def public_decls(root):
    decls = {}
    for h in sorted(glob.glob(os.path.join(root, 'include/acx/*.h'))):
        s = strip_comments(open(h).read())
        for m in DECL.finditer(s):
            line_start = s.rfind('\n', 0, m.start()) + 1
            if re.match(r'\s*(#|typedef)', s[line_start:m.start()]):
                continue
            decls[m.group(1)] = split_params(m.group(2))
    return decls


def body_end(s, open_brace):
    depth, i = 0, open_brace
    while i < len(s):
        c = s[i]
        if c in '"\'':
            j = i + 1
            while j < len(s) and s[j] != c:
                j += 2 if s[j] == '\\' else 1
            i = j
        elif c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(s)


def check(root):
    decls = public_decls(root)
    findings = []
    files = set()
    for d in ('runtime', 'collectives', 'kernels'):
        files.update(glob.glob(os.path.join(root, d, '**', '*.c'), recursive=True))
    for path in sorted(files):
        s = strip_comments(open(path).read())
        rel = os.path.relpath(path, root)
        if os.path.basename(path) in INTERNAL_FILES:
            continue
        for m in DEFN.finditer(s):
            fn = m.group(1)
            if fn in ('if', 'for', 'while', 'switch', 'return', 'sizeof'):
                continue
            start = m.end() - 1
            body = s[start:body_end(s, start) + 1]
            line0 = s.count('\n', 0, start) + 1
            where = lambda off: f'{rel}:{line0 + body.count(chr(10), 0, off)}: {fn}'
            params = decls.get(fn)
            for c in re.finditer(r'\bACX_CHECK_NULL_AS\s*\(\s*\w+\s*,\s*"(\w+)"\s*\)', body):
                if params is not None and c.group(1) not in params:
                    findings.append(f"{where(c.start())}: ACX_CHECK_NULL_AS logs '{c.group(1)}', the header names "
                                    f'the parameters {params}')
            for c in re.finditer(r'\bACX_CHECK_NULL\s*\(\s*(\w+)\s*\)', body):
                if params is None and INTERNAL.match(fn):
                    continue
                if params is None:
                    findings.append(f'{where(c.start())}: ACX_CHECK_NULL({c.group(1)}) in a function that is not '
                                    'public logs its internal name: check in the public caller, or name it')
                elif c.group(1) not in params:
                    findings.append(f"{where(c.start())}: ACX_CHECK_NULL({c.group(1)}) logs '{c.group(1)}', the "
                                    f'header names the parameters {params}')
            for c in LIT_ARG.finditer(body):
                name, arg = c.group(1), c.group(2)
                if name not in decls:
                    findings.append(f'{where(c.start())}: a log line names {name}, not a public function')
                elif arg not in decls[name]:
                    findings.append(f"{where(c.start())}: a log line blames '{arg}', {name}'s parameters are "
                                    f'{decls[name]}')
            for c in LIT_INTERNAL.finditer(body):
                if INTERNAL.match(fn):
                    continue
                findings.append(f'{where(c.start())}: a log line names the internal {c.group(1)}')
    return decls, findings


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
    decls, findings = check(root)
    for f in findings:
        print(f)
    print(f'{len(decls)} public functions; {len(findings)} log lines with a wrong name')
    return 1 if findings or len(decls) < 50 else 0


if __name__ == '__main__':
    sys.exit(main())
