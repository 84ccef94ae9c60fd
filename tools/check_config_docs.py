#!/usr/bin/env python3
"""Keeps docs/configuration.md true: every environment variable the code reads and every
parameter infra/template.yaml takes is listed there, and nothing else is.

Fails (exit 1, one line per problem) when:

  (a) the Rust code reads an environment variable docs/configuration.md does not list, or the
      doc lists one the code does not read;
  (b) the template has a parameter the doc does not list, or the doc lists one it lacks;
  (c) the template sets a variable in a function's (or Globals') `Environment: Variables:`
      that the doc does not list.

What counts as "the code reads NAME" (regexes, not a Rust parser; extend them when the code
grows a new way of reading the environment):

  * files: crates/*/src/**/*.rs — the functions (sender, scheduler, redrive), the crates they
    link (lambda, aws, core, provider, ses), the operator CLI (cli, ops) and what the CLI links
    for `local`, `run`, `canary` (harness) and the `punctual-sim` binary (sim);
  * test code is skipped: files named tests.rs or under a tests/ directory, modules declared
    `#[cfg(<anything naming test>)] mod m;` (their m.rs or m/ — e.g. core's `testing`, which
    is `#[cfg(any(test, feature = "testing"))]`, dev-side only), and any item (inline
    `mod tests { … }`, fn, impl) right after such a `#[cfg(…test…)]` attribute, up to its
    matching brace; `#[cfg(not(test))]` is not skipped. Comments are ignored;
  * a read is a string literal NAME (upper case, digits, _) passed as the first argument of
      - `env::var(` / `env::var_os(` (with or without `std::`);
      - the `punctual_lambda::config::Env` helpers `.required(`, `.optional(`, `.parse(`
        (optionally turbofished) and `.millis(` — every function's config goes through them;
      - `under(prefix, "NAME")`, a variable read under a channel's prefix or none (the
        provider token's, crates/aws/src/secrets.rs);
      - a local closure that wraps env::var, e.g. `let env = |k: &str| std::env::var(k)…;`
        then `env("RENEWALS_TABLE")` (the closure's name is learned per file);
  * libraries reading a variable for us are recognised by the call that makes them do it
    (LIBRARY_READS below, e.g. tracing's EnvFilter::try_from_default_env reads RUST_LOG).

What counts as "the doc lists NAME": a back-quoted name in the first column of a Markdown
table whose header's first cell is `variable` (environment variables) or `parameter`
(template parameters). One name per row is the convention; several are accepted.

Variables set by the AWS Lambda runtime or read only by the AWS SDK's own chain (AWS_REGION,
AWS_LAMBDA_*, _HANDLER, credentials) are in ALLOWED with the reason: the doc may list them
without the code reading them by name, and the code may read them without the doc listing
them.

Usage: tools/check_config_docs.py [--root DIR] [--doc PATH] [--template PATH] [--crates DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# Variables exempt from both directions of check (a), each with why.
ALLOWED = {
    "AWS_REGION": "set by the Lambda runtime; read by the SDK's region chain (the CLI also reads it by name)",
    "AWS_DEFAULT_REGION": "the SDK's fallback region variable (the CLI reads it by name, for emulators)",
    "AWS_ACCESS_KEY_ID": "credentials: set by the Lambda runtime, read by the SDK's credential chain",
    "AWS_SECRET_ACCESS_KEY": "credentials: set by the Lambda runtime, read by the SDK's credential chain",
    "AWS_SESSION_TOKEN": "credentials: set by the Lambda runtime, read by the SDK's credential chain",
    "AWS_PROFILE": "read by the SDK's credential and region chain (operator's shell)",
    "AWS_LAMBDA_RUNTIME_API": "set by the Lambda runtime; read by the lambda_runtime crate",
    "AWS_LAMBDA_FUNCTION_NAME": "set by the Lambda runtime; read by the lambda_runtime crate",
    "AWS_LAMBDA_FUNCTION_VERSION": "set by the Lambda runtime; read by the lambda_runtime crate",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "set by the Lambda runtime; read by the lambda_runtime crate",
    "AWS_LAMBDA_LOG_GROUP_NAME": "set by the Lambda runtime; read by the lambda_runtime crate",
    "AWS_LAMBDA_LOG_STREAM_NAME": "set by the Lambda runtime; read by the lambda_runtime crate",
    "_X_AMZN_TRACE_ID": "set by the Lambda runtime per invocation (Tracing: Active)",
    "_HANDLER": "set by the Lambda runtime (Handler: bootstrap); the custom runtime ignores it",
    "AWS_ENDPOINT_URL_SQS": "the SDK's per-service endpoint override (not read by name)",
}

# A call in the code that makes a library read a variable on the code's behalf.
LIBRARY_READS = {
    r"EnvFilter::(?:try_)?from_default_env\b": "RUST_LOG",
}

NAME = r"([A-Z][A-Z0-9_]*)"
DIRECT = re.compile(r"\benv::var(?:_os)?\s*\(\s*\"" + NAME + r"\"")
HELPER = re.compile(r"\.(?:required|optional|millis|parse(?:\s*::\s*<[^>]*>)?)\s*\(\s*\"" + NAME + r"\"")
# A variable read under a channel's prefix or none: `under(prefix, "PROVIDER_TOKEN")` (crates/aws/src/secrets.rs).
PREFIXED = re.compile(r"\bunder\s*\(\s*\w+\s*,\s*\"" + NAME + r"\"")
CLOSURE_DEF = re.compile(r"\blet\s+(\w+)\s*=\s*(?:move\s+)?\|[^|]*\|[^;]*?\benv::var(?:_os)?\s*\(")
TEST_CFG = re.compile(r"#\[cfg\(([^\]]*)\)\]")
CFG_TEST_MOD_DECL = re.compile(r"#\[cfg\(([^\]]*)\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def names_test(cfg: str) -> bool:
    """True for a cfg predicate that gates test-only code (`test`, `any(test, …)`,
    `feature = "testing"`), false for `not(test)`."""
    cfg = re.sub(r"not\s*\([^)]*\)", "", cfg)
    return bool(re.search(r"\btest\b|\"testing\"", cfg))


def strip_comments(src: str) -> str:
    """The source with comments blanked (strings, chars and lifetimes kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(src[i:end])
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        elif c == "'":
            m = re.match(r"'(?:\\.[^']*|[^'\\])'", src[i:])
            if m:
                out.append(m.group(0))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(src: str, start: int) -> int:
    """The end of the item beginning at `start`: its matching `}` or its `;`, whichever
    closes it (braces inside strings and char literals ignored)."""
    i, n, depth = start, len(src), 0
    while i < n:
        c = src[i]
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(?:\\.[^']*|[^'\\])'", src[i:])
            if m:
                i += len(m.group(0))
                continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def strip_test_items(src: str) -> str:
    """The source without the items under a test-only `#[cfg(…)]`."""
    out, pos = [], 0
    for m in TEST_CFG.finditer(src):
        if m.start() < pos or not names_test(m.group(1)):
            continue
        out.append(src[pos : m.start()])
        # Skip further attributes, then the item.
        k = m.end()
        while True:
            a = re.match(r"\s*#\[[^\]]*\]", src[k:])
            if not a:
                break
            k += len(a.group(0))
        pos = item_end(src, k)
    out.append(src[pos:])
    return "".join(out)


def test_only_paths(files: list[Path]) -> set[Path]:
    """Files and directories of modules declared under a test-only cfg (`#[cfg(test)] mod m;`)."""
    gated: set[Path] = set()
    for f in files:
        text = strip_comments(f.read_text(encoding="utf-8"))
        for m in CFG_TEST_MOD_DECL.finditer(text):
            if not names_test(m.group(1)):
                continue
            base = f.parent if f.name in ("lib.rs", "main.rs", "mod.rs") else f.parent / f.stem
            gated |= {base / f"{m.group(2)}.rs", base / m.group(2)}
    return gated


def code_reads(crates: Path) -> dict[str, set[str]]:
    """Variable name -> the files (relative to crates/) that read it."""
    files = sorted(p for p in crates.glob("*/src/**/*.rs"))
    gated = test_only_paths(files)
    reads: dict[str, set[str]] = {}
    for f in files:
        rel = f.relative_to(crates)
        if f.name == "tests.rs" or "tests" in rel.parts[2:-1]:
            continue
        if f in gated or any(g in f.parents for g in gated):
            continue
        text = strip_test_items(strip_comments(f.read_text(encoding="utf-8")))
        found = set(DIRECT.findall(text)) | set(HELPER.findall(text)) | set(PREFIXED.findall(text))
        for closure in set(CLOSURE_DEF.findall(text)):
            found |= set(re.findall(r"(?<![\w.])" + re.escape(closure) + r"\s*\(\s*\"" + NAME + r"\"", text))
        for pattern, var in LIBRARY_READS.items():
            if re.search(pattern, text):
                found.add(var)
        for name in found:
            reads.setdefault(name, set()).add(str(rel))
    return reads


def template_parameters(template: Path) -> list[str]:
    """The keys of the template's top-level `Parameters:` block (2-space indented), read line
    by line: the template's short tags (!Ref, !Sub) make a YAML loader need custom tags."""
    params, inside = [], False
    for line in template.read_text(encoding="utf-8").splitlines():
        if re.match(r"^Parameters:\s*(#.*)?$", line):
            inside = True
            continue
        if inside and re.match(r"^[^\s#]", line):
            break
        m = re.match(r"^  ([A-Za-z0-9]+):\s*(#.*)?$", line) if inside else None
        if m:
            params.append(m.group(1))
    return params


def template_variables(template: Path) -> set[str]:
    """Every key under an `Environment:` → `Variables:` mapping in the template."""
    names: set[str] = set()
    lines = template.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)Variables:\s*$", line)
        if not m or i == 0 or not re.match(r"^\s*Environment:\s*$", lines[i - 1]):
            continue
        indent = len(m.group(1))
        for follow in lines[i + 1 :]:
            if not follow.strip() or follow.lstrip().startswith("#"):
                continue
            depth = len(follow) - len(follow.lstrip())
            if depth <= indent:
                break
            k = re.match(r"^\s*([A-Z][A-Z0-9_]*):", follow)
            if k and depth == indent + 2:
                names.add(k.group(1))
    return names


def doc_tables(doc: Path) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """(variables, parameters) the doc's tables list, each name -> the lines listing it."""
    variables: dict[str, list[int]] = {}
    parameters: dict[str, list[int]] = {}
    kind = None
    lines = doc.read_text(encoding="utf-8").splitlines()
    for no, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            kind = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if kind is None:
            head = cells[0].lower()
            kind = {"variable": variables, "parameter": parameters}.get(head, {})
            continue
        if re.match(r"^:?-+:?$", cells[0]):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            kind.setdefault(name, []).append(no)
    return variables, parameters


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--doc", type=Path)
    ap.add_argument("--template", type=Path)
    ap.add_argument("--crates", type=Path)
    a = ap.parse_args()
    doc = a.doc or a.root / "docs/configuration.md"
    template = a.template or a.root / "infra/template.yaml"
    crates = a.crates or a.root / "crates"

    problems = []
    reads = code_reads(crates)
    doc_vars, doc_params = doc_tables(doc)
    for name in sorted(reads):
        if name not in doc_vars and name not in ALLOWED:
            where = ", ".join(f"{crates.name}/{f}" for f in sorted(reads[name]))
            problems.append(f"{name}: read by {where} but not listed in {doc}")
    for name in sorted(doc_vars):
        if not re.fullmatch("_*" + NAME, name):
            problems.append(f"{doc}:{doc_vars[name][0]}: `{name}` in a variable table is not a variable name")
        elif name not in reads and name not in ALLOWED:
            problems.append(f"{name}: listed in {doc} (line {doc_vars[name][0]}) but no code reads it")

    params = template_parameters(template)
    if not params:
        problems.append(f"{template}: no Parameters: block found")
    for name in params:
        if name not in doc_params:
            problems.append(f"parameter {name}: in {template} but not listed in {doc}")
    for name in sorted(doc_params):
        if name not in params:
            problems.append(f"parameter {name}: listed in {doc} (line {doc_params[name][0]}) but not in {template}")

    # A channel's variable (CHANNEL_{NAME}_X for a name the template's CHANNELS declares) is
    # documented by its X, which the channel reads under its prefix, or by the per-channel
    # table's `CHANNEL_{NAME}_X`.
    text = template.read_text(encoding="utf-8")
    doc_text = doc.read_text(encoding="utf-8")
    prefixes = {"CHANNEL_" + n.upper().replace("-", "_") + "_"
                for v in re.findall(r'^\s*CHANNELS:.*?"([a-z0-9,-]+)"', text, re.M) for n in v.split(",")}

    def documented(name: str) -> bool:
        base = next((name[len(p):] for p in prefixes if name.startswith(p)), None)
        return name in doc_vars or name in ALLOWED or (
            base is not None and (base in doc_vars or f"`CHANNEL_{{NAME}}_{base}`" in doc_text))

    for name in sorted(template_variables(template)):
        if not documented(name):
            problems.append(f"{name}: set in {template}'s Environment but not listed in {doc}")

    for p in problems:
        print(f"check_config_docs: {p}", file=sys.stderr)
    if problems:
        print(f"check_config_docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"==> {doc.name} lists the {len(reads)} variables the code reads and the {len(params)} template parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
