#!/usr/bin/env python3
"""The link check (run by `make lint-template`, so by `make test`).

Fails, naming file:line, when
- a relative link or image in a tracked Markdown file points at a file that does not exist, or
  outside the repository;
- a link's anchor (`file.md#section`, `#section`) names no heading of that file, by GitHub's
  rules: lowercase, punctuation dropped except `-` and `_`, each space a `-`, and a repeated
  heading gets `-1`, `-2`… (an `<a id>`/`<a name>` counts too; `#L12` on a non-Markdown file is
  a line and is accepted);
- a `docs/….md#anchor` reference in code, tools, the Makefile or the template (comments
  included) does not resolve from the repository's root;
- an alarm of `infra/template.yaml` does not end its `AlarmDescription` with
  `Runbook: docs/operations.md#<section>`, names a section docs/operations.md lacks, names a
  section that does not mention the alarm by its logical id, or is longer than CloudWatch's
  1,024 characters.

    tools/check_links.py [--root DIR]

Tracked files are `git ls-files` (untracked, not ignored files too, so a new page is checked
before its first commit). Exit 0 when every link resolves, 1 otherwise.
"""

import argparse
import pathlib
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

RUNBOOK = "docs/operations.md"
TEMPLATE = "infra/template.yaml"
ALARM_TYPES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
# What a CloudWatch alarm description may hold.
MAX_DESCRIPTION = 1024
# Files whose text may cite a page of docs/ by its repository path (comments included).
CODE_SUFFIXES = {".rs", ".py", ".sh", ".yaml", ".yml", ".toml", ".json"}
CODE_NAMES = {"Makefile"}
DOC_REFERENCE = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)(?:#([\w-]+))?")


def tracked(root):
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout
    return sorted({p for p in out.split("\0") if p and (root / p).is_file()})


# --- Markdown ----------------------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks, with code spans blanked."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, blank_code_spans(line)


def blank_code_spans(line):
    """The line with the inside of each code span replaced by spaces (same length)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            ticks = line[i:j]
            end = line.find(ticks, j)
            if end < 0:
                out.append(line[i:j])
                i = j
                continue
            out.append(ticks + " " * (end - j) + ticks)
            i = end + len(ticks)
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def heading_text(raw):
    """A heading's text as GitHub renders it, before the slug: links → their text, no images,
    no code-span backticks, no emphasis asterisks, no inline HTML."""
    t = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)
    t = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", t)
    t = re.sub(r"<[^>]+>", "", t)
    return t.replace("`", "").replace("*", "")


def slug(text):
    """GitHub's anchor for a heading text."""
    kept = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LNM":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(text):
    """Every anchor a Markdown text defines: its headings (duplicates suffixed) and HTML ids."""
    seen, out = {}, set()
    lines = list(prose_lines(text))
    raw = text.splitlines()
    for idx, (n, line) in enumerate(lines):
        m = re.match(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$", line)
        title = None
        if m:
            # The heading's own text, code spans intact (blanked only to find links).
            title = re.match(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$", raw[n - 1]).group(1) or ""
        elif idx + 1 < len(lines) and lines[idx + 1][0] == n + 1 and line.strip() \
                and re.match(r"^ {0,3}(=+|-+)[ \t]*$", lines[idx + 1][1]) \
                and not re.match(r"^ {0,3}([-*+]|\d+[.)])[ \t]", line) and "|" not in line:
            title = raw[n - 1].strip()
        if title is not None:
            base = slug(heading_text(title))
            k = seen.get(base, 0)
            out.add(base if k == 0 else f"{base}-{k}")
            seen[base] = k + 1
        for h in re.finditer(r"<a\s[^>]*(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", raw[n - 1]):
            out.add(h.group(1))
    return out


INLINE = re.compile(r"(!?)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")


def links(text):
    """(line, target) of every inline link, image and reference definition outside code."""
    for n, line in prose_lines(text):
        for m in INLINE.finditer(line):
            yield n, m.group(2).strip("<>")
        m = REFDEF.match(line)
        if m:
            yield n, m.group(1).strip("<>")


def external(target):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)) or target.startswith("//")


class Checker:
    def __init__(self, root):
        self.root = root.resolve()
        self.errors = []
        self.anchor_cache = {}
        self.checked = 0

    def error(self, path, line, msg):
        self.errors.append(f"{path}:{line}: {msg}")

    def anchors_of(self, path):
        if path not in self.anchor_cache:
            self.anchor_cache[path] = anchors(path.read_text(encoding="utf-8"))
        return self.anchor_cache[path]

    def resolve(self, src, line, target, base):
        """Checks one target (path and/or #anchor) relative to directory `base`."""
        self.checked += 1
        path_part, _, anchor = target.partition("#")
        path_part, anchor = unquote(path_part), unquote(anchor)
        if path_part:
            dest = (self.root / path_part.lstrip("/")) if path_part.startswith("/") else (base / path_part)
            dest = pathlib.Path(*pathlib.Path(dest).parts).resolve()
        else:
            dest = (self.root / src).resolve()
        try:
            rel = dest.relative_to(self.root)
        except ValueError:
            self.error(src, line, f"link '{target}' points outside the repository")
            return
        if not dest.exists():
            self.error(src, line, f"link '{target}': {rel} does not exist")
            return
        if not anchor:
            return
        if dest.is_dir():
            self.error(src, line, f"link '{target}': an anchor on a directory ({rel}/)")
        elif dest.suffix.lower() == ".md":
            if anchor not in self.anchors_of(dest):
                self.error(src, line, f"link '{target}': {rel} has no heading with anchor #{anchor}")
        elif not re.fullmatch(r"L\d+(-L\d+)?", anchor):
            self.error(src, line, f"link '{target}': #{anchor} on {rel}, which is not Markdown (only #L<line> works there)")

    def markdown(self, rel):
        path = self.root / rel
        for n, target in links(path.read_text(encoding="utf-8")):
            if not target or external(target):
                continue
            self.resolve(rel, n, target, path.parent)

    def code(self, rel):
        path = self.root / rel
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return
        for n, line in enumerate(text.splitlines(), 1):
            for m in DOC_REFERENCE.finditer(line):
                if rel == TEMPLATE and line[:m.start()].rstrip().endswith("Runbook:"):
                    continue  # an alarm's runbook: checked, with more to say, by alarms()
                target = m.group(1) + (f"#{m.group(2)}" if m.group(2) else "")
                self.resolve(rel, n, target, self.root)

    def alarms(self):
        """Each alarm's description names a runbook section that exists and is about it."""
        path = self.root / TEMPLATE
        if not path.exists():
            return
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        runbook = self.root / RUNBOOK
        runbook_text = runbook.read_text(encoding="utf-8") if runbook.exists() else ""
        sections = sections_of(runbook_text)
        found = 0
        for name, start, end in resources(lines):
            block = lines[start:end]
            if not any(re.match(rf"^    Type:\s*{re.escape(t)}\s*$", b) for b in block for t in ALARM_TYPES):
                continue
            found += 1
            desc_line, desc = description(block)
            where = start + 1 + (desc_line if desc_line is not None else 0)
            runbook_line = next((start + 1 + i for i, b in enumerate(block) if "Runbook:" in b), where)
            if desc is None:
                self.error(TEMPLATE, where, f"{name}: no AlarmDescription (it must end with 'Runbook: {RUNBOOK}#<section>')")
                continue
            if len(desc) > MAX_DESCRIPTION:
                self.error(TEMPLATE, where, f"{name}: AlarmDescription is {len(desc)} characters; CloudWatch takes at most {MAX_DESCRIPTION}")
            m = re.search(r"Runbook:\s*(\S+?)#([\w-]+)\.?\s*$", desc)
            if not m:
                self.error(TEMPLATE, where, f"{name}: AlarmDescription does not end with 'Runbook: {RUNBOOK}#<section>'")
                continue
            page, anchor = m.group(1), m.group(2)
            if page != RUNBOOK:
                self.error(TEMPLATE, runbook_line, f"{name}: the runbook is {RUNBOOK}, not {page}")
                continue
            self.checked += 1
            if anchor not in sections:
                self.error(TEMPLATE, runbook_line, f"{name}: names {RUNBOOK}#{anchor}, and {RUNBOOK} has no such section")
            elif not re.search(rf"\b{re.escape(name)}\b", sections[anchor][1]):
                self.error(TEMPLATE, runbook_line, f"{name}: {RUNBOOK}#{anchor} (line {sections[anchor][0]}) does not mention {name}")
        if not found:
            self.error(TEMPLATE, 1, "no CloudWatch alarm found (the check reads `  Name:` blocks under Resources:)")


def resources(lines):
    """(logical id, first line, end line) of each two-space resource under Resources:."""
    out, start, inside = [], None, False
    for i, line in enumerate(lines):
        if re.match(r"^\S", line):
            if start:
                out.append((start[0], start[1], i))
                start = None
            inside = line.startswith("Resources:")
            continue
        m = re.match(r"^  (\w+):\s*$", line)
        if inside and m:
            if start:
                out.append((start[0], start[1], i))
            start = (m.group(1), i)
    if start:
        out.append((start[0], start[1], len(lines)))
    return out


def description(block):
    """(offset in block, text) of a resource's AlarmDescription: plain, quoted or folded."""
    for i, line in enumerate(block):
        m = re.match(r"^(\s+)AlarmDescription:\s*(.*)$", line)
        if not m:
            continue
        indent, rest = len(m.group(1)), m.group(2).strip()
        if rest and rest[0] in ">|":
            body = []
            for cont in block[i + 1:]:
                if cont.strip() and len(cont) - len(cont.lstrip()) <= indent:
                    break
                body.append(cont.strip())
            sep = " " if rest[0] == ">" else "\n"
            return i, sep.join(b for b in body if b)
        return i, rest.strip("'\"")
    return None, None


def sections_of(markdown):
    """{anchor: (line, text up to the next heading of the same or a higher level)}."""
    heads = []
    seen = {}
    for n, line in prose_lines(markdown):
        m = re.match(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", line)
        if m:
            raw = re.match(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", markdown.splitlines()[n - 1]).group(1)
            base = slug(heading_text(raw))
            k = seen.get(base, 0)
            seen[base] = k + 1
            heads.append((n, len(m.group(1)), base if k == 0 else f"{base}-{k}"))
    lines = markdown.splitlines()
    out = {}
    for i, (n, level, anchor) in enumerate(heads):
        end = next((m for m, lv, _ in heads[i + 1:] if lv <= level), len(lines) + 1)
        out[anchor] = (n, "\n".join(lines[n - 1:end - 1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    a = ap.parse_args()
    c = Checker(a.root)
    files = tracked(c.root)
    pages = [f for f in files if f.lower().endswith(".md")]
    for rel in pages:
        c.markdown(rel)
    for rel in files:
        p = pathlib.PurePosixPath(rel)
        if (p.suffix in CODE_SUFFIXES or p.name in CODE_NAMES) and rel != "tools/check_links.py":
            c.code(rel)
    c.alarms()
    for e in c.errors:
        print(e, file=sys.stderr)
    if c.errors:
        print(f"check_links: {len(c.errors)} broken of {c.checked} links checked", file=sys.stderr)
        return 1
    print(f"==> {c.checked} links in {len(pages)} Markdown pages, the code's docs/ references and "
          f"the template's alarm runbooks resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
