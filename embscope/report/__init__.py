"""The offline HTML report: ``render(out_dir)`` writes ``out_dir/index.html`` from the tables.

See ``docs/schema.md`` for the tables it reads.
"""

from embscope.report.escape import display_token, script_json
from embscope.report.render import render

__all__ = ["render", "display_token", "script_json"]
