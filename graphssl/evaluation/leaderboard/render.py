"""A leaderboard as text: the Markdown table on the terminal, and the Markdown, HTML and CSV files
a report run logs, with its metrics."""

from __future__ import annotations

import csv
import html
import math
import re
from pathlib import Path
from typing import Any

from graphssl.evaluation.leaderboard.board import Leaderboard, LeaderboardRow, Stat, selection_notes

__all__ = ["leaderboard_markdown", "leaderboard_metrics", "sources", "table", "write_leaderboard"]


def _num(v: float, scale: float, digits: int) -> str:
    return "—" if not math.isfinite(v) else f"{v * scale:.{digits}f}"


def _pm(s: Stat, scale: float, digits: int, sign: bool = False) -> str:
    """``mean ± std`` (``mean`` alone for one value, ``—`` for none)."""
    if s.n == 0:
        return "—"
    mean = f"{s.mean * scale:+.{digits}f}" if sign else f"{s.mean * scale:.{digits}f}"
    return mean if s.n < 2 else f"{mean} ± {s.std * scale:.{digits}f}"


def _epochs(row: LeaderboardRow) -> str:
    if row.epochs.n == 0:
        return "—"
    text = f"{row.epochs.mean:.0f}"
    if row.selected_epoch.n:
        text += f" (sel. {row.selected_epoch.mean:.0f})"
    return text


def _flag(row: LeaderboardRow, limit: int = 3) -> str:
    if not row.differs:
        return ""
    names = ", ".join(row.differs[:limit])
    more = f" +{len(row.differs) - limit}" if len(row.differs) > limit else ""
    return f"⚠ differ: {names}{more}"


def sources(board: Leaderboard) -> list[str]:
    """The sources of the published figures the table shows, in order of first appearance
    (a figure's cell refers to its source as ``[i]``, 1-based)."""
    out: list[str] = []
    for r in board.rows:
        for p in board.probes:
            fig = r.cells[p].published
            if fig is not None and fig.source not in out:
                out.append(fig.source)
    return out


def table(board: Leaderboard, scale: float = 100.0, digits: int = 1) -> list[list[str]]:
    """The leaderboard as display cells (header first): probe figures times ``scale``; a
    published figure names its source by its number in :func:`sources`."""
    refs = {src: i + 1 for i, src in enumerate(sources(board))}
    head = ["method", "dataset"] + (["variant"] if board.variant_by else []) + ["seeds"]
    for p in board.probes:
        head += [f"{p} {board.metric}", f"{p} untrained", f"{p} gain", f"{p} published"]
    head += ["epochs", "train s", "peak RSS GB", "flag"]
    out = [head]
    for r in board.rows:
        line = [r.method, r.dataset] + ([r.variant] if board.variant_by else [])
        line.append(str(len(r.run_ids)))
        for p in board.probes:
            c = r.cells[p]
            value = _pm(c.value, scale, digits)
            if c.value.n not in (0, len(r.run_ids)):
                value += f" (n={c.value.n})"
            pub = "—"
            if c.published is not None:
                diff = c.difference
                d = f" ({diff * scale:+.{digits}f})" if math.isfinite(diff) else ""
                pub = f"{c.published.value * scale:.{digits}f}{d} [{refs[c.published.source]}]"
            line += [value, _pm(c.baseline, scale, digits), _pm(c.gain, scale, digits, True), pub]
        line += [
            _epochs(r),
            _num(r.train_seconds.mean, 1.0, 0),
            _num(r.peak_rss_gb, 1.0, 2),
            _flag(r),
        ]
        out.append(line)
    return out


def _split_table(board: Leaderboard) -> list[list[str]]:
    """The variance splits (header first): total standard deviation (``ddof=0``) and each
    factor's share of the variance in %."""
    factors: list[str] = []
    for r in board.rows:
        for c in r.cells.values():
            if c.split is not None:
                factors += [f for f in c.split.components if f not in factors]
    head = ["method", "dataset", "probe", "n", "std (ddof=0)", *factors, "residual", "notes"]
    out = [head]
    for r in board.rows:
        for p in board.probes:
            s = r.cells[p].split
            if s is None:
                continue
            shares = [
                "—" if f not in s.components else _num(s.share(f), 100.0, 0) + " %" for f in factors
            ]
            label = f"{r.dataset} ({r.variant})" if r.variant else r.dataset
            out.append(
                [
                    r.method,
                    label,
                    p,
                    str(s.n),
                    f"{math.sqrt(s.total):.4f}",
                    *shares,
                    _num(s.share("residual"), 100.0, 0) + " %",
                    "; ".join(s.notes),
                ]
            )
    return out


def _md(cells: list[list[str]]) -> str:
    head, *body = cells
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in line) + " |" for line in body]
    return "\n".join(lines)


def leaderboard_markdown(board: Leaderboard, scale: float = 100.0, digits: int = 1) -> str:
    """The leaderboard as Markdown: the table, the variance splits (when computed), notes."""
    unit = " (×100)" if scale == 100.0 else ""
    md = [
        f"# Leaderboard: probe/<probe>/{board.metric}{unit}, mean ± std over seeds "
        f"({board.n_runs} runs)",
        "",
        _md(table(board, scale, digits)),
        "",
    ]
    refs = sources(board)
    if refs:
        md += ["Published: " + "; ".join(f"[{i + 1}] {src}" for i, src in enumerate(refs)), ""]
    protocols = selection_notes(board)
    if protocols:
        md += ["L2 strength selected by: " + " · ".join(protocols), ""]
    flagged = [r for r in board.rows if r.differs]
    if flagged:
        md += ["⚠: the row's runs differ in more than their seeds:", ""]
        md += [f"- {r.method} / {r.dataset}: {', '.join(r.differs)}" for r in flagged]
        md += [""]
    splits = _split_table(board)
    if len(splits) > 1:
        md += ["## Variance split (share of each seed in the spread)", "", _md(splits), ""]
    if board.notes:
        md += ["## Notes", "", *(f"- {n}" for n in board.notes), ""]
    return "\n".join(md)


def _html(board: Leaderboard, scale: float, digits: int) -> str:
    def render(cells: list[list[str]]) -> str:
        head, *body = cells
        rows = ["<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"]
        rows += [
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in body
        ]
        return "<table>\n" + "\n".join(rows) + "\n</table>"

    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>Leaderboard</title>',
        "<style>table{border-collapse:collapse;font:13px sans-serif}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "td:first-child,td:nth-child(2){text-align:left}</style></head><body>",
        f"<h1>Leaderboard: probe/&lt;probe&gt;/{html.escape(board.metric)}, mean ± std over "
        f"seeds ({board.n_runs} runs)</h1>",
        render(table(board, scale, digits)),
    ]
    refs = sources(board)
    if refs:
        parts += [
            "<p>Published: "
            + "; ".join(f"[{i + 1}] {html.escape(src)}" for i, src in enumerate(refs))
            + "</p>"
        ]
    protocols = selection_notes(board)
    if protocols:
        parts += ["<p>L2 strength selected by: " + html.escape(" · ".join(protocols)) + "</p>"]
    splits = _split_table(board)
    if len(splits) > 1:
        parts += ["<h2>Variance split</h2>", render(splits)]
    if board.notes:
        parts += ["<ul>", *(f"<li>{html.escape(n)}</li>" for n in board.notes), "</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def _csv_rows(board: Leaderboard) -> list[list[Any]]:
    """One line per (row, probe) in the runs' own units, full precision."""
    head = [
        "method",
        "dataset",
        "variant",
        "probe",
        "metric",
        "mean",
        "std",
        "n",
        "baseline_mean",
        "baseline_std",
        "baseline_n",
        "gain_mean",
        "gain_std",
        "published",
        "published_source",
        "difference",
        "selection",
        "epochs",
        "selected_epoch",
        "train_seconds",
        "peak_rss_gb",
        "seeds",
        "differs",
        "run_ids",
    ]
    out: list[list[Any]] = [head]
    for r in board.rows:
        for p in board.probes:
            c = r.cells[p]
            out.append(
                [
                    r.method,
                    r.dataset,
                    r.variant,
                    p,
                    c.metric,
                    c.value.mean,
                    c.value.std,
                    c.value.n,
                    c.baseline.mean,
                    c.baseline.std,
                    c.baseline.n,
                    c.gain.mean,
                    c.gain.std,
                    "" if c.published is None else c.published.value,
                    "" if c.published is None else c.published.source,
                    c.difference,
                    c.selection,
                    r.epochs.mean,
                    r.selected_epoch.mean,
                    r.train_seconds.mean,
                    r.peak_rss_gb,
                    " ".join(r.seeds),
                    " ".join(r.differs),
                    " ".join(r.run_ids),
                ]
            )
    return out


def write_leaderboard(
    board: Leaderboard, folder: Path, scale: float = 100.0, digits: int = 1
) -> tuple[list[Path], str]:
    """Write ``leaderboard.md``, ``leaderboard.html``, ``leaderboard.csv`` (and
    ``variance_split.csv`` when computed) into ``folder``.

    Returns:
        ``(paths, markdown)``; the Markdown is what the CLI prints.
    """
    folder.mkdir(parents=True, exist_ok=True)
    text = leaderboard_markdown(board, scale, digits)
    md = folder / "leaderboard.md"
    md.write_text(text)
    page = folder / "leaderboard.html"
    page.write_text(_html(board, scale, digits))
    data = folder / "leaderboard.csv"
    with data.open("w", newline="") as f:
        csv.writer(f).writerows(_csv_rows(board))
    paths = [md, page, data]
    splits = _split_table(board)
    if len(splits) > 1:
        p = folder / "variance_split.csv"
        with p.open("w", newline="") as f:
            csv.writer(f).writerows(splits)
        paths.append(p)
    return paths, text


_KEY = re.compile(r"[^0-9A-Za-z_\-.]+")


def leaderboard_metrics(board: Leaderboard) -> dict[str, float]:
    """``leaderboard/<probe>/<method>/<dataset>[/<variant>]`` = the row's mean (finite only)."""
    out = {}
    for r in board.rows:
        row = "/".join(_KEY.sub("_", s) for s in (r.method, r.dataset, r.variant) if s)
        for p in board.probes:
            v = r.cells[p].value.mean
            if math.isfinite(v):
                out[f"leaderboard/{_KEY.sub('_', p)}/{row}"] = v
    return out
