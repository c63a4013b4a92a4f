"""MkDocs hook: lists written as GitHub renders them render the same in the site.

The pages are also read on GitHub (the README links to them), where a list may follow a
paragraph line directly and a nested list is indented by two spaces. Python-Markdown, which
MkDocs uses, needs a blank line before a list and four spaces per nesting level, and otherwise
runs the items into the paragraph. This hook rewrites each page's lists at build time (the files
keep their GitHub form): a blank line before a list that follows text, and nested items,
their continuation lines and the code fences inside them re-indented to four spaces a level.
tests/test_docs.py renders samples through it."""

from __future__ import annotations

import re

MARKER = re.compile(r"^( *)([-*+]|\d+[.)]) ")
FENCE = re.compile(r"^( *)(```|~~~)")


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    return lists_for_python_markdown(markdown)


def lists_for_python_markdown(markdown: str) -> str:
    out: list[str] = []
    # Open list items, innermost last: (marker's indent as written, its text's column as
    # written, the marker's indent as rewritten); an item's text goes 4 spaces past its marker.
    stack: list[tuple[int, int, int]] = []
    fence: str | None = None  # the fence's opening characters while inside a code block
    fence_shift = 0
    previous = ""
    # Whether the open item has had a blank line: its later paragraphs are blocks of their own,
    # which take the next item's line as a lazy continuation unless a blank line ends them.
    loose = False
    for line in markdown.split("\n"):
        if fence is not None:
            out.append(_shift(line, fence_shift))
            if line.strip().startswith(fence):
                fence = None
            previous = line
            continue
        indent = len(line) - len(line.lstrip(" "))
        fenced = FENCE.match(line)
        marker = MARKER.match(line)
        if not line.strip():
            loose = loose or bool(stack)
            out.append(line)
        elif marker and (stack or indent == 0):
            depth = len(stack)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            after_text = bool(previous.strip()) and not MARKER.match(previous)
            sibling = len(stack) < depth  # the text before was a closed item's, not a parent's
            if after_text and (loose or (stack and not sibling) or (
                    not stack and not sibling and not previous.startswith((" ", "|", "#")))):
                # a list right after a paragraph line, or, nested, after its parent item's text
                out.append("")
            loose = False
            rewritten = 4 * len(stack)
            stack.append((indent, indent + len(marker.group(2)) + 1, rewritten))
            out.append(" " * rewritten + line.lstrip(" "))
        elif stack and indent > 0:
            # Text or a fence of the innermost item it is indented under.
            while len(stack) > 1 and indent <= stack[-1][0]:
                stack.pop()
            shift = stack[-1][2] + 4 - stack[-1][1]
            if fenced:
                fence, fence_shift = fenced.group(2), shift
            out.append(_shift(line, shift))
        else:
            if fenced:
                fence, fence_shift = fenced.group(2), 0
            if not previous.strip():
                stack, loose = [], False  # text at the margin after a blank line ends the list
            out.append(line)
        previous = line
    return "\n".join(out)


def _shift(line: str, by: int) -> str:
    if by > 0:
        return " " * by + line if line.strip() else line
    if by < 0:
        spaces = len(line) - len(line.lstrip(" "))
        return line[min(-by, spaces):]
    return line
