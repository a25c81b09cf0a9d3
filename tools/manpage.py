#!/usr/bin/env python3
"""A manual page from a program's own help, at build time (doc/man/meson.build).

  manpage.py --name NAME --section N --version V --summary TEXT --description FILE
             --out FILE [--see-also NAME(N)...] -- CMD... [--- TITLE -- CMD...]...

The DESCRIPTION is the hand-written paragraph of FILE (what the program is
for; blank lines separate paragraphs); USAGE is what CMD prints (stdout and
stderr, any exit status: some programs print their usage on an error exit),
verbatim, so the page says what the installed program accepts. Each further
`--- TITLE -- CMD...` adds a section TITLE with CMD's output (droce-ctl's
settings table). Lines of DPDK's EAL log ("EAL: ...") are left out.
"""
import argparse
import subprocess
import sys


def escape(line):
    line = line.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + line if line.startswith((".", "'")) else line


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       timeout=60, check=False)
    lines = p.stdout.decode("utf-8", "replace").splitlines()
    lines = [l.rstrip() for l in lines if not l.startswith("EAL: ")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        sys.exit(f"manpage.py: {' '.join(cmd)} printed nothing")
    return lines


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("manpage.py: no command (-- CMD...)")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    for opt in ("--name", "--section", "--version", "--summary", "--description", "--out"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--see-also", nargs="*", default=[])
    a = ap.parse_args(argv[:cut])
    sections, title, rest = [], "USAGE", argv[cut + 1:]
    while True:
        cmd = rest[:rest.index("---")] if "---" in rest else rest
        sections.append((title, run(cmd)))
        if "---" not in rest:
            break
        rest = rest[rest.index("---") + 1:]
        if "--" not in rest:
            sys.exit("manpage.py: --- TITLE -- CMD...")
        title, rest = " ".join(rest[:rest.index("--")]), rest[rest.index("--") + 1:]
    with open(a.description, encoding="utf-8") as f:
        paragraphs = [p.strip() for p in f.read().split("\n\n") if p.strip()]
    out = [f'.TH "{a.name.upper()}" "{a.section}" "" "droce {a.version}" "droce"',
           ".SH NAME", f"{escape(a.name)} \\- {escape(a.summary)}", ".SH DESCRIPTION"]
    for i, p in enumerate(paragraphs):
        if i:
            out.append(".PP")
        out += [escape(l) for l in p.splitlines()]
    for title, lines in sections:
        out += [f".SH {title}", ".nf"] + [escape(l) for l in lines] + [".fi"]
    if a.see_also:
        refs = []
        for s in a.see_also:
            name, _, sec = s.partition("(")
            refs.append(f".BR {escape(name)} ({sec}")
        out += [".SH SEE ALSO"] + [r + ("," if i + 1 < len(refs) else "") for i, r in enumerate(refs)]
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
