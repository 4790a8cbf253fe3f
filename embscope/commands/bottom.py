"""The bottom line as the terminal's last lines: one verdict per section, its next command below it
(the record is :class:`embscope.verdict.BottomLine`, ``summary.json`` → ``bottom_line``)."""

from __future__ import annotations

#: mark and colour per verdict level
MARKS = {"ok": ("✓", "green"), "note": ("•", "yellow"), "act": ("✗", "red")}


def print_bottom_line(summary) -> None:
    """``Bottom line:`` and a line per verdict (``→ next command`` under it); nothing when the run
    has no verdict."""
    from embscope.commands.console import console, print_whole
    from rich.text import Text

    from embscope.report.escape import display_token

    bl = summary.bottom_line
    if bl is None or not bl.verdicts:
        return
    con = console()
    con.print(Text("Bottom line:", style="bold"))
    for v in bl.verdicts:
        mark, style = MARKS.get(v.level, ("•", ""))
        con.print(Text(f"  {mark} ", style=style) + Text(display_token(v.text)))
        if v.next:
            print_whole(con, Text(f"    → {display_token(v.next)}", style="dim"))
