"""The attribute docstrings of a dataclass (the string literal under each field, as litgpt writes its configs):
read from the class's source for `--help` texts, and written into the class docstring so that `help(SpecClass)`
shows each field with its type, default and meaning (Python keeps no attribute docstrings at run time)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

FIELDS_HEADING = "Fields:"
WRAP = 100  # characters per line of a field's docstring in help(): pydoc's 4-character margin and the 8-character
# indent below keep it under the 120 of the code's lines (pyproject.toml, ruff)


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring on one line; fields without one are left out ({} without source, e.g. a frozen
    install)."""
    try:
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    except (OSError, TypeError):
        return {}
    docs = {}
    for node, doc in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            docs[node.target.id] = " ".join(str(doc.value.value).split())
    return docs


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f" = {f.default!r}"
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return f" = {type(value).__name__}()" if dataclasses.is_dataclass(value) else f" = {value!r}"
    return ""


def document_fields(cls: type) -> type:
    """Append a "Fields:" section to `cls.__doc__`: each field as `name: type = default` and its docstring below it,
    wrapped. Idempotent; returns `cls`."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    if FIELDS_HEADING in doc.splitlines():
        return cls
    docs, lines = field_docs(cls), ["", FIELDS_HEADING]
    for f in dataclasses.fields(cls):
        lines.append(f"    {f.name}: {f.type if isinstance(f.type, str) else f.type.__name__}{_default(f)}")
        if f.name in docs:
            lines += textwrap.wrap(docs[f.name], WRAP, initial_indent=" " * 8, subsequent_indent=" " * 8)
    cls.__doc__ = "\n".join([doc, *lines])
    return cls
