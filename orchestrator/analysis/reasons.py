"""Why a cell's trials were invalid or noisy, said once per cell: the trials' reasons grouped.

A trial's reasons (trials.csv `invalid_reasons`, `noise_reasons`) are sentences joined with
"; ", each of one stable shape, whichever code wrote it (loadgen/validity.py,
measure/noise.py, run/trial_row.py, the cluster's):

    [WHERE: ]KIND FIGURES... [(aside)] [, more | : cause] [. Fix: what to do]

WHERE names a cluster's shard or host ("shard h1: ", "h1: "); KIND is the reason's first
words (`reason_kind`); the figures are its numbers. A cell of six trials late for the same
reason then reads as one line and one fix, not six paragraphs:

    send lateness x6: moved the p50 latency by up to 2.0–21.3%
      Fix: pin the load generator to a CPU of its own (...)

`parse` takes one sentence apart: its fix (from "Fix: " on), its headline (the sentence
without its asides - a parenthesis that is not a limit such as "(> 10%)", a "; see LOG"
pointer; the parentheses stay when they hold its only figures, "(exit 1)" - and cut after
its first figure at the first ", " or ": ", where what follows
explains rather than measures) and the headline's figures. `group` gathers the reasons of
many trials: one group per (where, kind), counting each trial once, the headlines that differ
only in their figures merged with each figure's range (2.0–21.3%); `lines` writes them, each
distinct fix once, under the first group that needs it. Shapes it does not know still group,
by identical headline: nothing is ever dropped but the asides. Old runs' reasons are the same
sentences, so their trials.csv groups alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# a number standing alone (not the 99 of "p99", the 1 of "h1"): "12.3", "-5.0", "0" of "0,1"
_NUMBER = re.compile(r"(?<![\w.])[-+±]?\d+(?:\.\d+)?(?![\w]|\.\d)")
_LIMIT = re.compile(r"^\((?:[<>]=?|≤|≥|limit\b)")  # an aside that is the limit stays
_WHERE = re.compile(r"^((?:shard )?[^\s:;]+): (?=\S)")
_FIX = re.compile(r"(?:^|(?<=[.:]) )Fix: ")
SLOT = "\x00"  # a figure's place in a headline's template


def reason_kind(reason: str) -> str:
    """What a reason is about, in its own first words: "send lateness (p99 2.10 ms) moved..."
    -> "send lateness", "12 arrivals dropped past..." -> "arrivals dropped past the
    outstanding-request cap" (the words before the first one holding a number, a bracket, a
    colon or a comparison)."""
    words: list[str] = []
    for w in reason.split():
        if w.endswith(":") and not re.search(r"[\d(:>=<]", w[:-1]):
            words.append(w[:-1])  # "... off before the load: why" ends at "load"
            break
        if re.search(r"[\d(:>=<]", w):
            if words:
                break
            continue
        words.append(w.rstrip(".,"))
    return " ".join(words) or reason.strip()[:40]


def split_reasons(text) -> list[str]:
    """A trial's reasons from its joined column (None, NaN, "" -> none). A "see LOG" piece
    is the end of the sentence before it ("server died ... (exit 1); see .../server.log")."""
    if text is None or text != text:
        return []
    out: list[str] = []
    for piece in str(text).split("; "):
        piece = piece.strip()
        if not piece:
            continue
        if piece.startswith("see ") and out:
            out[-1] = f"{out[-1]}; {piece}"
        else:
            out.append(piece)
    return out


@dataclass(frozen=True)
class Reason:
    """One reason taken apart (see the module docstring)."""

    text: str  # as written
    where: str  # "shard h1", "h1" or ""
    kind: str
    template: str  # the headline after its kind, each figure a SLOT
    figures: tuple[str, ...]  # the headline's figures as written, in order
    fix: str  # what to do, without "Fix: " ("" when the reason gives none)

    @property
    def headline(self) -> str:
        return fill(self.template, list(self.figures))


def _without_asides(head: str, keep: bool = False) -> str:
    """head without its parentheses (but the limits; all of them with keep) and its
    "; see LOG" pointer."""
    head = head.split("; see ", 1)[0]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(head):
        if ch == "(":
            if depth == 0:
                out.append(head[start:i])
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                aside = head[start : i + 1]
                out.append(aside if keep or _LIMIT.match(aside) else "")
                start = i + 1
    out.append(head[start:])
    text = re.sub(r"\s+", " ", "".join(out)).strip()
    return re.sub(r"\s+([,:.])", r"\1", text)


def _cut(headline: str) -> str:
    """The headline up to the first ", " or ": " after its first figure."""
    first = _NUMBER.search(headline)
    if first is None:
        return headline
    ends = [i for i in (headline.find(", ", first.end()), headline.find(": ", first.end()))]
    ends = [i for i in ends if i >= 0]
    return headline[: min(ends)] if ends else headline


def parse(reason: str) -> Reason:
    """One reason's where, kind, headline figures and fix (module docstring)."""
    text = " ".join(reason.split())
    m = _WHERE.match(text)
    where = ""
    # "shard h1: ..." and "h1: ...": a place (one word), not a kind ending in a colon
    # ("network injection off before the load: ...", several words)
    if m:
        where, text = m.group(1), text[m.end() :]
    parts = _FIX.split(text, maxsplit=1)
    head, fix = parts[0].strip().rstrip("."), (parts[1].strip() if len(parts) > 1 else "")
    kind = reason_kind(head)
    plain = _without_asides(head)
    if not _NUMBER.search(plain):  # the asides hold its only specifics: "(exit 1)"
        plain = _without_asides(head, keep=True)
    headline = _cut(plain).rstrip(".:, ")
    if headline.startswith(kind):
        rest = headline[len(kind) :]
    else:  # "12 arrivals dropped past ...": the figures come first
        rest = headline.replace(kind, "", 1)
    rest = rest.strip(" :,")
    figures = tuple(m.group(0) for m in _NUMBER.finditer(rest))
    return Reason(reason, where, kind, _NUMBER.sub(SLOT, rest), figures, fix)


def fill(template: str, figures: list[str]) -> str:
    it = iter(figures)
    return re.sub(SLOT, lambda _: next(it), template)


def _value(figure: str) -> float:
    return float(figure.replace("±", ""))


def figure_range(figures: list[str]) -> str:
    """One figure over several trials: "2.0–21.3" (as each was written), or the one value."""
    lo = min(figures, key=_value)
    hi = max(figures, key=_value)
    if _value(lo) == _value(hi):
        return lo
    dash = " to " if lo.startswith("-") or hi.startswith("-") else "–"
    return f"{lo}{dash}{hi}"


@dataclass
class ReasonGroup:
    """The reasons of one kind (at one place) among a cell's trials."""

    where: str
    kind: str
    trials: int = 0  # how many trials gave it
    # template -> (trials, each trial's figures), in order of first appearance
    variants: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    fixes: list[str] = field(default_factory=list)  # distinct, in order of appearance

    @property
    def label(self) -> str:
        head = f"{self.where}: {self.kind}" if self.where else self.kind
        return f"{head} x{self.trials}" if self.trials > 1 else head

    @property
    def detail(self) -> str:
        """Each headline with its figures' ranges; "(xN)" after each when they differ."""
        parts = []
        for template, figs in self.variants.items():
            ranged = [figure_range([f[i] for f in figs]) for i in range(template.count(SLOT))]
            text = fill(template, ranged)
            if len(self.variants) > 1 and len(figs) > 1:
                text += f" (x{len(figs)})"
            if text:
                parts.append(text)
        return ", ".join(parts)

    @property
    def line(self) -> str:
        detail = self.detail
        if not detail:
            return self.label
        return f"{self.label} {detail}" if detail.startswith("(") else f"{self.label}: {detail}"


def group(texts: Iterable) -> list[ReasonGroup]:
    """The reasons of many trials (each trial's joined column) grouped by where and kind,
    most trials first, then in order of appearance. A kind counts once per trial."""
    groups: dict[tuple[str, str], ReasonGroup] = {}
    for text in texts:
        seen: set[tuple[str, str]] = set()
        for r in map(parse, split_reasons(text)):
            key = (r.where, r.kind)
            g = groups.setdefault(key, ReasonGroup(r.where, r.kind))
            if key not in seen:
                g.trials += 1
                seen.add(key)
            g.variants.setdefault(r.template, []).append(r.figures)
            if r.fix and r.fix not in g.fixes:
                g.fixes.append(r.fix)
    order = list(groups)
    return sorted(groups.values(), key=lambda g: (-g.trials, order.index((g.where, g.kind))))


def lines(texts: Iterable, fix_indent: str = "  ") -> list[str]:
    """The grouped reasons as text: a line per group, and under the first group that gives
    it, each distinct fix once ("Fix: ...", indented by fix_indent)."""
    out: list[str] = []
    said: set[str] = set()
    for g in group(texts):
        out.append(g.line)
        for fix in g.fixes:
            if fix not in said:
                said.add(fix)
                out.append(f"{fix_indent}Fix: {fix}")
    return out
