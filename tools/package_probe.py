"""What one installed package imports, anywhere, is in its own virtual environment.

Run by ``tools/check-packages`` with the Python of a package's fresh virtual
environment (the package's wheel, its declared dependencies and its ``test``
extra, nothing else):

    VENV/bin/python tools/package_probe.py IMPORT_NAME DISTRIBUTION VENV TESTS_FOLDER

It prints one line per problem and exits 1 if there is any:

1. the package imports from inside VENV (not from the source tree);
2. every module of the package imports (``pkgutil.walk_packages``), so a
   lazily imported module that needs an undeclared distribution fails here
   even when no test of the package reaches it;
3. every entry point the wheel declares loads (console scripts, settings,
   extensions);
4. every import statement, at any depth (inside functions too), and every
   ``importlib.import_module("name")`` with a literal name, of the installed
   package and of its tests names a module this environment has,
   unless it is guarded (in the body of a ``try`` whose handler catches
   ``ImportError``, or under ``if TYPE_CHECKING``): an undeclared import
   inside a function fails here although importing its module does not.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterator

# Imports a package makes on purpose without declaring the distribution: the
# codec decodes a torch tensor with importlib.import_module("torch"), only
# when one arrives, and torch is not a dependency of the transport.
UNDECLARED_ON_PURPOSE = {"monarch_transport": {"torch"}}

CATCHES_IMPORT_ERROR = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (kind.id if isinstance(kind, ast.Name) else getattr(kind, "attr", None))
        in CATCHES_IMPORT_ERROR
        for kind in kinds
    )


def called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def imports(node: ast.AST, guarded: bool = False) -> Iterator[tuple[str, int, bool]]:
    """(module, line, guarded) for every absolute import under ``node``: import
    statements, and ``import_module``/``__import__`` calls that name a module."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, node.lineno, guarded
    elif isinstance(node, ast.ImportFrom):
        if not node.level and node.module:
            yield node.module, node.lineno, guarded
    elif (
        isinstance(node, ast.Call)
        and called(node) in ("import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and not node.args[0].value.startswith(".")
    ):  # importlib.import_module("kubernetes.client")
        yield node.args[0].value, node.lineno, guarded
        for child in ast.iter_child_nodes(node):
            yield from imports(child, guarded)
    elif isinstance(node, ast.Try | ast.TryStar):
        inside = guarded or any(catches_import_error(h) for h in node.handlers)
        for child in node.body:
            yield from imports(child, inside)
        for child in (*node.handlers, *node.orelse, *node.finalbody):
            yield from imports(child, guarded)
    elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        for child in node.orelse:
            yield from imports(child, guarded)
    else:
        for child in ast.iter_child_nodes(node):
            yield from imports(child, guarded)


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
    except Exception:
        return True  # there, but a parent failed to import: step 2 reports ours


def python_files(folder: str) -> list[str]:
    return [
        os.path.join(where, name)
        for where, _, names in os.walk(folder)
        for name in names
        if name.endswith(".py")
    ]


def main() -> int:
    package, distribution, venv, tests = sys.argv[1:5]
    problems: list[str] = []

    def failed(name: str) -> None:
        error = sys.exception()
        problems.append(f"import {name}: {type(error).__name__}: {error}")

    module = importlib.import_module(package)
    where = os.path.realpath(module.__file__ or "")
    if not where.startswith(os.path.realpath(venv) + os.sep):
        problems.append(f"{package} was imported from {where}, outside {venv}")

    for info in pkgutil.walk_packages(module.__path__, package + ".", onerror=failed):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # importing it runs its command; step 4 reads its imports
        try:
            importlib.import_module(info.name)
        except BaseException:
            failed(info.name)

    for point in importlib.metadata.distribution(distribution).entry_points:
        try:
            point.load()
        except BaseException as error:
            problems.append(f"entry point {point.group} {point.name} = {point.value}: {error!r}")

    sources = [path for root in module.__path__ for path in python_files(root)]
    helpers: set[str] = set()  # the tests' own modules and stand-ins, at any depth
    if os.path.isdir(tests):
        sources += python_files(tests)
        for where, folders, names in os.walk(tests):
            helpers.update(name[:-3] for name in names if name.endswith(".py"))
            helpers.update(
                f for f in folders if os.path.isfile(os.path.join(where, f, "__init__.py"))
            )
    for path in sorted(sources):
        with open(path, encoding="utf-8") as file:
            text = file.read()
        for name, line, guarded in imports(ast.parse(text, path)):
            top = name.partition(".")[0]
            if guarded or top in sys.stdlib_module_names or installed(name):
                continue
            if top in UNDECLARED_ON_PURPOSE.get(package, ()):
                continue
            if path.startswith(tests) and (top in helpers or f"{top}.py" in text):
                continue  # one of the tests' own modules, or one a test writes itself
            problems.append(f"{path}:{line}: imports {name}, which is not installed")

    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
