#!/usr/bin/env python3
"""tools/gen-api-reference.py [HEADER] [OUT] - write docs/api-reference.md: every
constant, enum value, struct field (with its type) and function of the public
header, in header order under the header's own section banners, each with the
header's comment. docs/api.md explains; this file lists, so nothing public can
be left out of the documentation. `make api-reference` regenerates it and
tests/check_api_reference.sh fails when it is stale."""
import re
import sys

HDR = sys.argv[1] if len(sys.argv) > 1 else "include/qwinfer.h"
OUT = sys.argv[2] if len(sys.argv) > 2 else "docs/api-reference.md"


def clean_comment(text):
    """The words of a /* ... */ block (or of several), one paragraph."""
    text = re.sub(r"/\*+|\*+/", " ", text)
    lines = [re.sub(r"^\s*\*\s?", "", ln).rstrip() for ln in text.splitlines()]
    return " ".join(ln.strip() for ln in lines if ln.strip())


def md(text):
    return text.replace("|", "\\|")


def body_entries(body, sep):
    """(declaration, comment) pairs of an enum (sep ',') or struct (sep ';') body."""
    entries = []
    in_comment = False   # inside a /* ... */ that started on an earlier line
    for line in body.splitlines():
        if in_comment:
            code, comment = "", line
        else:
            code, _, comment = line.partition("/*")
        in_comment = bool(comment) and "*/" not in comment
        code = code.strip()
        comment = clean_comment("/*" + comment) if comment.strip() else ""
        if code:
            for part in [p.strip() for p in code.split(sep) if p.strip()]:
                entries.append([part, comment])
        elif comment and entries:
            entries[-1][1] = (entries[-1][1] + " " + comment).strip()
    return entries


def main():
    src = open(HDR, encoding="utf-8").read()
    # drop the include guard, the C++ guard and QW_API's definition
    out = ["# qwinfer API reference", "",
           "Generated from `include/qwinfer.h` by `tools/gen-api-reference.py` (`make api-reference`);",
           "`tests/check_api_reference.sh` fails when it is stale. Every constant, enum value, struct",
           "field and function of the public header, with the header's comment. `docs/api.md` is the",
           "guide: how the pieces work together.", ""]
    pos = 0
    pending = ""          # the comment just before the next declaration
    tok = re.compile(r"/\*.*?\*/|^[ \t]*#[^\n]*|typedef\s+enum\s+\w+\s*\{.*?\}\s*\w+\s*;"
                     r"|typedef\s+struct\s+\w+\s*\{.*?\}\s*\w+\s*;|typedef[^;{]*;|QW_API[^;]*;", re.S | re.M)
    for m in tok.finditer(src):
        gap = src[pos:m.start()]
        if gap.strip():
            pending = ""      # code between a comment and a declaration: not its comment
        pos = m.end()
        t = m.group(0)
        if t.startswith("/*"):
            if re.match(r"/\*\s*-{10,}", t):       # a section banner: title, then text
                lines = [re.sub(r"^\s*\*\s?", "", ln).strip() for ln in t[2:-2].splitlines()]
                lines = [ln for ln in lines if ln and not re.fullmatch(r"-+", ln)]
                out += ["", f"## {lines[0] if lines else ''}", ""]
                if len(lines) > 1:
                    out += [md(" ".join(lines[1:])), ""]
                pending = ""
            else:
                c = clean_comment(t)
                sub = re.match(r"-{3,}\s*(.*?)\s*-{3,}\s*(.*?)\s*-*$", c)
                if sub:   # "---- Title ---- text": a subsection with its own text
                    out += ["", f"### {sub.group(1)}", ""]
                    if sub.group(2):
                        out += [md(sub.group(2)), ""]
                    pending = ""
                else:
                    pending = (pending + " " + c).strip()
            continue
        if t.lstrip().startswith("#"):
            m2 = re.match(r"\s*#\s*define\s+(QW_[A-Z0-9_]+)\s+(\S.*)$", t)
            if m2 and "(" not in m2.group(1) and m2.group(1) not in ("QW_API",):
                out.append(f"- `#define {m2.group(1)} {m2.group(2).strip()}`" + (f": {md(pending)}" if pending else ""))
            pending = ""
            continue
        if t.startswith("typedef") and "{" in t:
            kind = "enum" if re.match(r"typedef\s+enum", t) else "struct"
            name = re.search(r"\}\s*(\w+)\s*;\s*$", t).group(1)
            body = t[t.index("{") + 1:t.rindex("}")]
            out += ["", f"### `{kind} {name}`", ""]
            if pending:
                out += [md(pending), ""]
            if kind == "enum":
                out += ["| name | value | meaning |", "|---|---|---|"]
                for decl, comment in body_entries(body, ","):
                    n, _, v = decl.partition("=")
                    out.append(f"| `{n.strip()}` | {v.strip()} | {md(comment)} |")
            else:
                out += ["| field | type | meaning |", "|---|---|---|"]
                for decl, comment in body_entries(body, ";"):
                    m3 = re.match(r"(.*?)(\w+)(\[[^\]]*\])?$", decl)
                    typ = (m3.group(1) + (m3.group(3) or "")).strip()
                    out.append(f"| `{m3.group(2)}` | `{typ}` | {md(comment)} |")
            out.append("")
            pending = ""
            continue
        if t.startswith("typedef"):
            decl = " ".join(t.split())
            out += [f"- `{decl}`" + (f": {md(pending)}" if pending else "")]
            pending = ""
            continue
        if t.startswith("QW_API"):
            decl = " ".join(t[len("QW_API"):].split())
            name = re.search(r"(\w+)\s*\(", decl).group(1)
            out += ["", f"### `{name}`", "", "```c", decl, "```"]
            if pending:
                out += ["", md(pending)]
            out.append("")
            pending = ""
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"
    open(OUT, "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    main()
