"""What the checker reads from embedded Python without running it: the names a
snippet binds, and the type of a literal expression.

Both parse with CPython's `ast` and never execute anything; code that does not
parse yields nothing here (the runtime reports its syntax error).
"""

from __future__ import annotations

import ast as python_ast
import warnings


def python_bindings(code: str) -> tuple[set[str], set[str], bool]:
    """Names a Python snippet may bind, names it declares `global`, and whether it star-imports.

    Every binding anywhere in the snippet counts (conservatively, even inside
    its functions). Code that does not parse binds nothing: the runtime
    reports the syntax error.
    """
    # Odd string escapes make the parser warn; that is the runtime's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = python_ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return set(), set(), False
    names: set[str] = set()
    global_names: set[str] = set()
    star = False
    for node in python_ast.walk(tree):
        match node:
            case python_ast.Name(ctx=python_ast.Store() | python_ast.Del()):
                names.add(node.id)
            case python_ast.FunctionDef() | python_ast.AsyncFunctionDef() | python_ast.ClassDef():
                names.add(node.name)
            case python_ast.Import() | python_ast.ImportFrom():
                for alias in node.names:
                    star = star or alias.name == "*"
                    names.add(alias.asname or alias.name.split(".")[0])
            case python_ast.Global():
                global_names.update(node.names)
            case python_ast.ExceptHandler(name=str(name)) | python_ast.MatchAs(name=str(name)):
                names.add(name)
            case python_ast.MatchStar(name=str(name)) | python_ast.MatchMapping(rest=str(name)):
                names.add(name)
    return names, global_names, star


_NUMBERS = ("bool", "int", "float", "complex")
_CONTAINERS = {
    python_ast.List: "list",
    python_ast.Tuple: "tuple",
    python_ast.Dict: "dict",
    python_ast.Set: "set",
}


def literal_type(node: python_ast.expr) -> str | None:
    """The type name of a literal Python expression (`1 + 2` is int), or None if not literal."""
    if isinstance(node, python_ast.Constant):
        return "None" if node.value is None else type(node.value).__name__
    if type(node) in _CONTAINERS:
        return _CONTAINERS[type(node)]
    if isinstance(node, python_ast.UnaryOp) and not isinstance(node.op, python_ast.Not):
        operand = literal_type(node.operand)
        return "int" if operand == "bool" else operand if operand in _NUMBERS else None
    if isinstance(node, python_ast.BinOp):
        left, right = literal_type(node.left), literal_type(node.right)
        if left == right == "str" and isinstance(node.op, python_ast.Add):
            return "str"
        if left in _NUMBERS and right in _NUMBERS:
            if isinstance(node.op, python_ast.Div):
                return "complex" if "complex" in (left, right) else "float"
            return max(left, right, "int", key=_NUMBERS.index)
    return None
