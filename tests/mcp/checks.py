"""What the MCP client scripts of tests/mcp/ share: the checks they make and the report they end with.

Each script records what it saw in `seen`, calls `check` for each expectation (a failed one is printed on
stderr at once), and ends with `report()`: one JSON document `{"seen", "failures"}` as the last line on stdout
(tests/it/mcp.rs reads it), exit 0 when every check passed, 1 otherwise.
"""

import json
import sys

failures = []
seen = {}


def check(ok, what, detail=None):
    if not ok:
        failures.append(what if detail is None else f"{what}: {detail}")
        print(f"FAILED: {what}" + ("" if detail is None else f": {detail}"), file=sys.stderr, flush=True)


def texts_of(result):
    """The text blocks of a tool result."""
    return [block.text for block in result.content if getattr(block, "type", None) == "text"]


def images_of(result):
    """The image blocks of a tool result."""
    return [block for block in result.content if getattr(block, "type", None) == "image"]


def report():
    print(json.dumps({"seen": seen, "failures": failures}))
    sys.exit(1 if failures else 0)
