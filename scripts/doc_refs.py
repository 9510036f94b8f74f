"""Rewrite references to the project's internal design notes into references a user can follow.

Early code cited section numbers of design notes that are not part of the repository (written as
``spec §6``, ``scienceworld §4.8``, ``spec webshop.md §2.2``, ``specs/retrospex.md``). This script
replaces each with the docs/ section that holds the fact (``docs/algorithms.md, GRPO advantages``).
Which note a bare ``§N`` means depends on the file: ``envs/scienceworld`` -> ScienceWorld,
``envs/webshop`` -> WebShop, ``retrospex`` -> Retrospex, anything else -> EMPO².

    python scripts/doc_refs.py [--write] [PATH ...]     # default: src scripts benchmarks

Without ``--write`` it prints each replacement (file:line, before -> after) and changes nothing. It
is kept to re-apply the rewrite to code merged from branches that still carry the old form; a
reference it cannot map is reported and left alone.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ALG = "docs/algorithms.md"
ENV = "docs/environments.md"
WS = "docs/webshop.md"
RX = "docs/retrospex.md"

# (note, section prefix) -> docs section; the longest matching prefix wins
TARGETS: dict[str, dict[str, str]] = {
    "empo2": {
        "": ALG, "1": f"{ALG}, Returns", "2": "docs/architecture.md, One training iteration",
        "3": f"{ALG}, Modes", "4": f"{ALG}, EMPO² memory at run time",
        "5": f"{ALG}, EMPO² memory at run time", "6": f"{ALG}, GRPO advantages", "7": f"{ALG}, Policy loss",
        "8": f"{ALG}, Evaluation statistics",
    },
    "scienceworld": {
        "": f"{ENV}, ScienceWorld", "1": f"{ENV}, ScienceWorld", "1.7": f"{ENV}, Step limits",
        "2": f"{ENV}, ScienceWorld", "2.1": f"{ENV}, Actions", "2.3": f"{ALG}, Returns",
        "3": f"{ALG}, GiGPO", "3.4": f"{ALG}, GRPO advantages", "3.6": f"{ALG}, Policy loss",
        "4": f"{ALG}, Paper vs the authors' code", "4.1": f"{ALG}, Modes",
        "4.2": f"{ALG}, EMPO² memory at run time", "4.3": f"{ALG}, EMPO² memory at run time",
        "4.4": f"{ALG}, EMPO² memory at run time", "4.5": f"{ALG}, EMPO² memory at run time",
        "4.6": f"{ALG}, Modes", "4.7": f"{ALG}, Low-probability masking", "4.8": f"{ALG}, GRPO advantages",
        "5": f"{ALG}, Paper vs the authors' code", "5.1": f"{ALG}, Returns", "5.5": f"{ENV}, Actions",
        "5.13": f"{ALG}, GRPO advantages", "5.14": f"{ALG}, GiGPO", "5.4": f"{ENV}, ScienceWorld",
        "5.3": f"{ENV}, Step limits",
    },
    "webshop": {
        "": WS, "1": f"{WS}, What is implemented exactly", "2": f"{WS}, What is implemented exactly",
        "2.2": f"{WS}, What is approximate", "3": f"{WS}, What is implemented exactly",
        "3.4": f"{WS}, What is approximate", "5": f"{WS}, Environment contract",
    },
    "retrospex": {
        "": RX, "0": RX, "1": f"{RX}, 1. Imitation warm-up", "2": f"{RX}, 3. The critic",
        "3": f"{RX}, 4. Rescoring at inference", "4": f"{RX}, Scoring conventions",
        "5": f"{RX}, Departures from the authors' code", "6": f"{RX}, 3. The critic",
        "7": f"{RX}, Departures from the authors' code",
    },
}
NOTES = "empo2|scienceworld|webshop|retrospex"
SEC = r"[0-9]+(?:\.[0-9]+)?(?:\s*[–-]\s*[0-9]+(?:\.[0-9]+)?)?"
REF = re.compile(
    rf"(?:(?:``)?specs/(?P<file>{NOTES})\.md(?:``)?|(?:\bspec\s+)?(?:(?P<note>{NOTES})(?:\.md)?\s+)?(?=§)|\bspec\b\s*(?=§))"
    rf"(?P<secs>\s*§\s*{SEC}(?:\s*(?:,|and)\s*§?\s*{SEC})*)?")


# files outside envs/<name>/ and retrospex/ (experiments/retrospex) whose bare references mean another note
FILE_NOTES = {"sft/train.py": "retrospex", "demos/expert.py": "retrospex", "sft_config.py": "retrospex",
              "policy/scoring.py": "retrospex"}


def note_of(path: Path) -> str:
    """The design note a bare ``§N`` in ``path`` refers to."""
    p = path.as_posix()
    for suffix, note in FILE_NOTES.items():
        if p.endswith(suffix):
            return note
    for key in ("scienceworld", "webshop", "retrospex"):
        if f"envs/{key}" in p or (key == "retrospex" and "retrospex" in p):
            return key
    return "empo2"


def _lookup(note: str, sec: str) -> str | None:
    table = TARGETS[note]
    parts = sec.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in table:
            return table[key]
    return None


def targets(note: str, sec: str) -> list[str] | None:
    """The docs sections for section ``sec`` of ``note`` (``4.2``; a range ``3–5`` or ``4.2–4.4``
    gives those of its ends and, for whole sections, of the ones between)."""
    ends = re.split(r"\s*[–-]\s*", sec.strip())
    secs = ends
    if len(ends) == 2 and ends[0].isdigit() and ends[1].isdigit():
        secs = [str(i) for i in range(int(ends[0]), int(ends[1]) + 1)]
    out = [_lookup(note, s) for s in secs]
    if any(t is None for t in out):
        return None
    return [t for t in out if t is not None]


def join(refs: list[str]) -> str:
    """``docs/a.md, X; docs/a.md, Y; docs/b.md`` -> ``docs/a.md, X and Y; docs/b.md``."""
    by_file: dict[str, list[str]] = {}
    for r in refs:
        f, _, sec = r.partition(", ")
        secs = by_file.setdefault(f, [])
        if sec and sec not in secs:
            secs.append(sec)
    return "; ".join(f + (", " + " and ".join(s) if s else "") for f, s in by_file.items())


def rewrite(m: re.Match[str], default: str) -> str | None:
    """The replacement of one reference (``None``: no docs section is known for it)."""
    note = m.group("file") or m.group("note") or default
    secs = m.group("secs")
    if not secs:
        if m.group("file"):
            return TARGETS[note][""]
        return None
    out: list[str] = []
    for sec in re.split(r"\s*(?:,|and)\s*", secs.strip()):
        ts = targets(note, sec.replace("§", "").strip())
        if ts is None:
            return None
        out += [t for t in ts if t not in out]
    return join(out)


def process(path: Path, write: bool) -> int:
    """Rewrite one file; returns how many references were left alone (unmappable)."""
    default = note_of(path)
    text = path.read_text(encoding="utf-8")
    bad = 0
    lines = text.split("\n")
    for n, line in enumerate(lines):
        ctx = default  # an explicit note sets the meaning of the bare references after it on the line

        def sub(m: re.Match[str], line: str = line, n: int = n) -> str:
            nonlocal bad, ctx
            if not m.group(0).strip() or re.search(r"docs/[\w-]+\.md`?\s*$", line[:m.start()]):
                return m.group(0)  # empty, or a section of the project's own docs
            ctx = m.group("file") or m.group("note") or ctx
            new = rewrite(m, ctx)
            if new is None:
                bad += 1
                print(f"{path}:{n + 1}: cannot map {m.group(0)!r}", file=sys.stderr)
                return m.group(0)
            lead = " " if m.group(0)[:1].isspace() else ""
            print(f"{path}:{n + 1}: {m.group(0).strip()!r} -> {new!r}")
            return lead + new
        new_line = REF.sub(sub, line)
        if new_line != line:
            new_line = re.sub(r"^(\s*)Spec: ", r"\1See ", new_line)
        lines[n] = new_line
    new_text = "\n".join(lines)
    if write and new_text != text:
        path.write_text(new_text, encoding="utf-8")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=["src", "scripts", "benchmarks"])
    ap.add_argument("--write", action="store_true", help="change the files (default: only print)")
    args = ap.parse_args(argv)
    bad = 0
    for root in map(Path, args.paths):
        for p in sorted([root] if root.is_file() else root.rglob("*.py")):
            if p.name != Path(__file__).name:
                bad += process(p, args.write)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
