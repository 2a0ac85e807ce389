"""Flame graphs: folded stacks (`root;caller;callee count`, one distinct stack a line, as
measure/profiler.py writes profile.folded) drawn as one self-contained SVG.

Each frame is a box as wide as the share of samples that passed through it, stacked on its
caller (roots at the bottom); siblings are sorted by name, so the x axis is not time. A box's
tooltip (<title>) gives the frame, its samples and its share. Colours are warm hues chosen by
the frame's name, so one function has one colour everywhere. No scripts, no external files.
"""

from __future__ import annotations

import html
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

WIDTH_PX = 1200
ROW_PX = 17
FONT_PX = 11
CHAR_PX = 6.2  # average glyph width at FONT_PX in a monospace face
MIN_BOX_PX = 0.3  # narrower boxes are left out (they still count in their caller)


@dataclass
class Node:
    name: str
    count: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def read_folded(text: str) -> Node:
    """The call tree of folded stacks; the root node counts every sample."""
    root = Node("all")
    for line in text.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        root.count += count
        node = root
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, Node(frame))
            node.count += count
    return root


def _depth(node: Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


def _colour(name: str) -> str:
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{(h >> 8) % 180 + 40},{(h >> 16) % 55})"


def svg(root: Node, title: str, subtitle: str = "") -> str:
    """The flame graph of root as SVG text (a note instead when there are no samples)."""
    depth = _depth(root)
    top_px = 52
    height = top_px + depth * ROW_PX + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
        f'viewBox="0 0 {WIDTH_PX} {height}" font-family="monospace" '
        f'font-size="{FONT_PX}">',
        '<rect width="100%" height="100%" fill="#fdfdf6"/>',
        f'<text x="{WIDTH_PX / 2}" y="20" text-anchor="middle" font-size="15">'
        f"{html.escape(title)}</text>",
        f'<text x="{WIDTH_PX / 2}" y="38" text-anchor="middle" fill="#555">'
        f"{html.escape(subtitle)}</text>",
    ]
    if root.count == 0:
        parts.append(f'<text x="10" y="{top_px + 14}">no samples</text></svg>')
        return "\n".join(parts)
    scale = (WIDTH_PX - 20) / root.count

    def draw(node: Node, x: float, level: int) -> None:
        w = node.count * scale
        if w < MIN_BOX_PX:
            return
        y = height - 10 - (level + 1) * ROW_PX
        share = 100 * node.count / root.count
        label = html.escape(node.name)
        parts.append(
            f"<g><title>{label} ({node.count} samples, {share:.2f}%)</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW_PX - 1}" '
            f'fill="{"#e8e8e0" if level == 0 else _colour(node.name)}" rx="2"/>'
        )
        chars = int((w - 6) / CHAR_PX)
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[: chars - 2] + ".."
            parts.append(f'<text x="{x + 3:.2f}" y="{y + ROW_PX - 5}">{html.escape(text)}</text>')
        parts.append("</g>")
        cx = x
        for child in sorted(node.children.values(), key=lambda c: c.name):
            draw(child, cx, level + 1)
            cx += child.count * scale

    draw(root, 10.0, 0)
    parts.append("</svg>")
    return "\n".join(parts)


def draw_trial(trial_dir: Path) -> Path | None:
    """profile.svg from the trial's profile.folded and profile.json; None when the trial was
    not profiled. Redrawn only when the SVG is missing or older than the stacks."""
    trial_dir = Path(trial_dir)
    folded, info_file = trial_dir / "profile.folded", trial_dir / "profile.json"
    if not folded.is_file():
        return None
    out = trial_dir / "profile.svg"
    if out.is_file() and out.stat().st_mtime >= folded.stat().st_mtime:
        return out
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    root = read_folded(folded.read_text(errors="replace"))
    cost = info.get("profiler_cpu_pct_of_one_cpu")
    sub = (
        f"{info.get('tool', '?')} at {info.get('rate_hz', '?')} Hz, {root.count} samples"
        f" over {info.get('window_s', '?')} s"
        + (f"; profiler used {cost}% of one CPU" if cost is not None else "")
        + (f"; {info['note']}" if info.get("note") else "")
    )
    title = f"{trial_dir.parent.name}/{trial_dir.name}: where the server spent its time"
    out.write_text(svg(root, title, sub))
    return out


def draw_run(run_dir: Path) -> list[Path]:
    """Every profiled trial's profile.svg under run_dir/cells/."""
    return [
        p
        for p in (draw_trial(d) for d in sorted(Path(run_dir).glob("cells/*/trial-*")))
        if p is not None
    ]
