"""Every path, module and page the project's words name exists.

The words are the Markdown pages (the README, ``docs/``, any other ``*.md``
but the benches' own results), the docstrings and comments of every Python
file, and the comments of the Makefile, ``pyproject.toml`` and the scripts.
What they may name, and how each is checked:

- a repository path (``proxy/wire/layout.py``, ``benchmarks/results/load.md``,
  a folder, a ``{a,b}`` set or a ``*`` glob): it exists, from the root or from
  the naming file's folder. A backticked word is a path when it starts with a
  top-level folder; a bare one when it also ends in a file extension; a bare
  page name (``SOURCES.md``) is a file somewhere in the tree;
- a dotted module or attribute (``flatgate.proxy.errors.codes.CODES``, or short,
  ``wire.request.verify``, ``plumbing.serve``): it imports and has the
  attribute. A short name starts with the last part of one of the project's
  modules; a config key (``proxy.max_body_bytes``) is a name too. Dotted words
  that start with no module of the project are not checked;
- ``python -m`` and a module: the module runs as a script;
- a Markdown link to a file, with its anchor: the file exists and has that
  heading;
- a citation of a page's section, as ``docs/design.md, "Pools"`` (a heading
  of that page begins so); the design has no other name.

``NOT_PATHS`` and ``NOT_NAMES`` are the few words that look like one and are
not. The manual's own shape is checked too: the README stays a front door,
every page of ``docs/`` is reachable from its index, the configuration page
shows every key a config file may hold, every TOML example is a config's
shape, and the design's tree names every module.
"""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import io
import os
import re
import tokenize
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import msgspec
import pytest

from flatgate.proxy.backends.registry import PROTOCOLS, backends_of
from flatgate.proxy.gateway.document import GatewayDocument

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The folders that are not the project's words: the virtualenv, git, the flatc
# output, a setuptools build, and what the benches write.
NOT_OURS = (".venv", ".git", "generated", "build", "flatgate.egg-info", "benchmarks/results")
# The top-level folders a repository path starts with, and the files at the root.
TOP = ("proxy", "edge_translator", "benchmarks", "tests", "schema", "generated", "docs")
ROOT_FILES = ("README.md", "Makefile", "pyproject.toml")
EXTENSIONS = "py|md|toml|json|fbs|proto|sh|txt|png|svg|lua|pem|bfbs"
# The installed names of the folders (pyproject.toml's package-dir).
INSTALLED = {"proxy": "flatgate.proxy", "edge_translator": "flatgate.edge_translator"}
INSTALLED["generated"] = "flatgate.generated"

# Words that look like a path and are not one in the tree.
NOT_PATHS: dict[str, str] = {}
# Dotted words a project module's name starts and that name no module.
NOT_NAMES = {
    "stub.fault_after": "a CompletionRequest metadata key the stub reads",
    "section.key": "how a config key is written",
    "responses.connect": "the openai SDK's Responses WebSocket helper (client.responses.connect)",
    "client.responses.connect": "the openai SDK's Responses WebSocket helper",
    "openai.NewError": "a Go function of Ollama's, cited by a fixture's source",
    "flatgate.backend": "a span attribute (plumbing.telemetry)",
    "flatgate.request_id": "a span attribute (plumbing.telemetry)",
    "flatgate.tenant": "a span attribute (plumbing.telemetry)",
    "flatgate.client_api": "a span attribute (plumbing.telemetry)",
    "service.name": "OpenTelemetry's resource attribute",
}

# Backticked words a package's docstring may hold that name no module of it.
NOT_MODULES = {"flatgate": "the command, and the namespace package"}

README_MAX_LINES = 300


# -- the words ---------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """One piece of words: a page, a docstring or a run of comments; where it
    is, and the folder its relative paths start from."""

    where: str
    folder: Path
    text: str


def ours(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return not any(rel == n or rel.startswith(n + "/") for n in NOT_OURS)


@cache
def tree() -> tuple[Path, ...]:
    """Every file and folder below the root but the virtual environment's
    and git's (walked once: ``.venv`` holds the npm tools' thousands of files)."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        if here == ROOT:
            dirs[:] = [d for d in dirs if d not in (".venv", ".git")]
        out += [here / d for d in dirs] + [here / f for f in files]
    return tuple(out)


def pages() -> list[Path]:
    """Every Markdown page of the project."""
    return sorted(p for p in tree() if p.suffix == ".md" and ours(p))


def python_files() -> list[Path]:
    return sorted(p for folder in TOP for p in (ROOT / folder).rglob("*.py") if ours(p))


def script_files() -> list[Path]:
    """Files whose ``#`` comments are words: the Makefile, the TOML, the scripts
    and the pinned lists."""
    found = [ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in TOP:
        for ext in ("toml", "sh", "txt"):
            found += (ROOT / folder).rglob(f"*.{ext}")
    return sorted(p for p in found if ours(p))


def docstrings(source: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                first = node.body[0]
                yield first.lineno, doc


def comments(source: str) -> Iterator[tuple[int, str]]:
    """Each run of comment lines, as one text (a citation may span lines)."""
    run: list[str] = []
    first = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        if run and tok.start[0] != last + 1:
            yield first, "\n".join(run)
            run = []
        if not run:
            first = tok.start[0]
        run.append(tok.string.lstrip("#").strip())
        last = tok.start[0]
    if run:
        yield first, "\n".join(run)


@cache
def texts() -> tuple[Text, ...]:
    out: list[Text] = []
    for path in pages():
        rel = path.relative_to(ROOT).as_posix()
        out.append(Text(rel, path.parent, path.read_text()))
    for path in python_files():
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text()
        out += [Text(f"{rel}:{n}", path.parent, d) for n, d in docstrings(source)]
        out += [Text(f"{rel}:{n}", path.parent, c) for n, c in comments(source)]
    for path in script_files():
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        hashed = "\n".join(line[line.index("#") :] if "#" in line else "" for line in lines)
        out += [Text(f"{rel}:{n}", path.parent, c) for n, c in comments(hashed)]
    return tuple(out)


def backticked(text: str) -> Iterator[str]:
    for m in re.finditer(r"(`+)([^`\n]+?)\1", text):
        yield m.group(2).strip()


# -- paths -------------------------------------------------------------------

PATH_START = "|".join(TOP)
BARE_PATH = re.compile(
    rf"(?<![\w./:$~-])((?:{PATH_START})/[\w./{{}},*-]*?\.(?:{EXTENSIONS}))(?![\w/])"
    rf"|(?<![\w./:$~-])({'|'.join(re.escape(f) for f in ROOT_FILES)}|[\w-]+\.md)(?![\w/.])"
)


def expand(token: str) -> list[str]:
    """``load.{json,md}`` -> ``load.json``, ``load.md``."""
    m = re.search(r"\{([^{}]*)\}", token)
    if m is None:
        return [token]
    head, tail = token[: m.start()], token[m.end() :]
    return [x for alt in m.group(1).split(",") for x in expand(head + alt + tail)]


def exists(token: str, folder: Path) -> bool:
    for candidate in expand(token):
        if not any(glob.glob(str(base / candidate)) for base in (ROOT, folder)):
            return False
    return True


@cache
def file_names() -> frozenset[str]:
    found = [p for p in tree() if ours(p) or p.is_relative_to(ROOT / "benchmarks")]
    return frozenset(p.name for p in found)


def path_tokens(t: Text) -> Iterator[str]:
    for m in BARE_PATH.finditer(t.text):
        yield m.group(1) or m.group(2)
    for word in backticked(t.text):
        token = re.sub(r":\d+$", "", word)  # a line number
        if " " in token or "<" in token or "$" in token:
            continue
        if token in ROOT_FILES or re.match(rf"(?:{PATH_START})/", token):
            yield token


def missing_path(token: str, t: Text) -> bool:
    if token in NOT_PATHS:
        return False
    if "/" not in token:  # a bare page name: somewhere in the tree
        return token not in file_names()
    return not exists(token, t.folder)


def test_every_path_named_exists() -> None:
    missing = sorted(
        {
            f"{t.where}: {token}"
            for t in texts()
            for token in path_tokens(t)
            if missing_path(token, t)
        }
    )
    assert missing == []


# -- modules and attributes --------------------------------------------------


def module_names() -> list[str]:
    """Every module of the project, by the name it imports as."""
    names = []
    for folder in TOP:
        for path in (ROOT / folder).rglob("*.py"):
            if not ours(path) and folder != "generated":
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            if parts[0] in INSTALLED:
                parts[:1] = INSTALLED[parts[0]].split(".")
            names.append(".".join(parts))
    return names


@cache
def by_last_part() -> dict[str, tuple[str, ...]]:
    """A short name's first part -> the full modules it may stand for."""
    out: dict[str, set[str]] = {"flatgate": {"flatgate"}}
    for name in module_names():
        out.setdefault(name.rsplit(".", 1)[-1], set()).add(name)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def config_keys(t: type, prefix: str = "") -> Iterator[str]:
    """Every ``section.key`` a config file may hold, from the typed document."""
    for f in msgspec.inspect.type_info(t).fields:  # type: ignore[attr-defined]
        name = prefix + f.encode_name
        yield name
        for struct in structs_in(f.type):
            yield from config_keys(struct, name + ".")


def structs_in(info: msgspec.inspect.Type) -> Iterator[type]:
    if isinstance(info, msgspec.inspect.StructType):
        yield info.cls
    elif isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            yield from structs_in(member)
    elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
        yield from structs_in(info.item_type)


@cache
def all_config_keys() -> frozenset[str]:
    """The document's keys, a [[backends]] entry's those of every protocol."""
    keys = set(config_keys(GatewayDocument))
    for protocol in PROTOCOLS.values():
        keys.update(config_keys(protocol.config, "backends."))
    return frozenset(keys)


@cache
def resolves(dotted: str) -> bool:
    """``a.b.c`` imports as a module, or an attribute of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            continue
        try:
            obj: object = importlib.import_module(name)
        except ImportError:
            return False
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


DOTTED = re.compile(r"(?<![\w.$/-])([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?![\w(/-])")


def dotted_names(t: Text) -> Iterator[str]:
    for word in backticked(t.text):
        token = word.removesuffix("()")
        if DOTTED.fullmatch(token) and not re.search(rf"\.(?:{EXTENSIONS})$", token):
            yield token
    for m in re.finditer(r"(?<![\w.])(flatgate(?:\.\w+)+)", t.text):
        yield m.group(1).rstrip(".")


def names_nothing(dotted: str) -> bool:
    if dotted in NOT_NAMES or dotted in all_config_keys():
        return False
    head, rest = dotted.split(".", 1)
    candidates = by_last_part().get(head)
    if candidates is None:
        return False  # not a name of the project's: msgspec.Struct, delta.content
    return not any(resolves(f"{c}.{rest}") for c in candidates) and not resolves(dotted)


def test_every_module_named_exists() -> None:
    missing = sorted(
        {f"{t.where}: {d}" for t in texts() for d in dotted_names(t) if names_nothing(d)}
    )
    assert missing == []


def runs_as_script(module: str) -> bool:
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        return False
    if spec is None:
        return False
    if spec.submodule_search_locations is not None:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    assert spec.origin is not None
    return '__name__ == "__main__"' in Path(spec.origin).read_text()


def test_every_python_m_entry_point_runs() -> None:
    missing = sorted(
        {
            f"{t.where}: python -m {m}"
            for t in texts()
            for m in re.findall(r"python -m ([\w.]*\w)", t.text)
            if not runs_as_script(m)
        }
    )
    assert missing == []


# -- links, anchors and citations ----------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return [re.sub(r"[`*]", "", h).strip() for h in re.findall(r"^#{1,6} (.+)$", text, re.M)]


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in headings(page)} if page.suffix == ".md" else set()


def test_every_link_leads_somewhere() -> None:
    broken = []
    for page in pages():
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists() or (anchor and anchor not in anchors(dest)):
                broken.append(where)
    assert broken == []


CITATION = re.compile(
    rf"(?<![\w./:-])((?:(?:{PATH_START})/[\w./-]*|[\w-]+)\.md|README),\s+\"([^\"]+)\""
)


def test_every_section_cited_is_there() -> None:
    broken = []
    for t in texts():
        for page, quoted in CITATION.findall(t.text):
            name = "README.md" if page == "README" else page
            found = [p for p in (ROOT / name, t.folder / name) if p.is_file()]
            section = " ".join(quoted.split())
            if not found or not any(h.startswith(section) for h in headings(found[0])):
                broken.append(f'{t.where}: {page}, "{section}"')
        # The design document is docs/design.md, by that name.
        broken += [f"{t.where}: {m}" for m in re.findall(r"\bDESIGN\b[^\n]{0,20}", t.text)]
    assert broken == []


# -- the manual's shape ------------------------------------------------------


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    assert "docs/README.md" in "\n".join(lines)


def test_every_docs_page_is_reachable_from_the_index() -> None:
    seen: set[Path] = set()
    todo = [DOCS / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        for target in re.findall(r"\]\(([^)\s#]+)", page.read_text()):
            if not re.match(r"[a-z]+:", target):
                todo.append((page.parent / target).resolve())
    assert sorted(p.relative_to(ROOT) for p in DOCS.rglob("*.md") if p not in seen) == []


def reference_keys() -> set[str]:
    """The ``section.key`` pairs the configuration page's TOML blocks show,
    commented-out alternatives included."""
    text = (DOCS / "configuration.md").read_text()
    keys: set[str] = set()
    for block in re.findall(r"^```toml\n(.*?)^```", text, re.M | re.S):
        section = ""
        for line in block.splitlines():
            header = re.match(r"\[\[?([\w.]+)\]\]?", line)
            if header:
                section = header.group(1)
                parts = section.split(".")
                keys.update(".".join(parts[: i + 1]) for i in range(len(parts)))
                continue
            key = re.match(r"(?:#\s*)?(\w+)\s*=", line.strip())
            if key and section:
                keys.add(f"{section}.{key.group(1)}")
            for alternative in re.findall(r"# .*?\bor (\w+) =", line):
                keys.add(f"{section}.{alternative}")
    return keys


def test_the_configuration_page_shows_every_key() -> None:
    shown = reference_keys()
    assert sorted(all_config_keys() - shown) == []
    assert sorted(shown - all_config_keys()) == []


def toml_blocks() -> Iterator[tuple[str, str]]:
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for block in re.findall(r"^```toml\n(.*?)^```", page.read_text(), re.M | re.S):
            yield page.relative_to(ROOT).as_posix(), block


@pytest.mark.parametrize(("page", "block"), list(toml_blocks()), ids=lambda x: x[:40])
def test_every_toml_example_is_a_config(page: str, block: str) -> None:
    """Each TOML block of the pages parses, and its sections, keys and types are
    a config file's (the values may be placeholders)."""
    data = tomllib.loads(block)
    msgspec.convert({k: v for k, v in data.items() if k != "backends"}, GatewayDocument)
    backends_of(data)  # each entry its protocol's


def tree_rows() -> dict[str, str]:
    """The design's tree table: folder -> its row."""
    text = (DOCS / "design.md").read_text()
    return dict(re.findall(r"^\| `([\w/]+/)` \| (.*) \|$", text, re.M))


@pytest.mark.parametrize(
    "folder",
    sorted(
        p.parent.relative_to(ROOT).as_posix() + "/"
        for top in INSTALLED
        if top != "generated"
        for p in (ROOT / top).rglob("__init__.py")
    ),
)
def test_the_design_tree_names_every_module(folder: str) -> None:
    modules = sorted(p.stem for p in (ROOT / folder).glob("*.py") if not p.stem.startswith("_"))
    row = tree_rows().get(folder, "")
    assert row or not modules, f"docs/design.md's tree has no row for {folder}"
    named = set(re.findall(r"`(\w+)`", row))
    assert [m for m in modules if m not in named] == []


@pytest.mark.parametrize("word", sorted(NOT_PATHS) + sorted(NOT_NAMES))
def test_the_allow_lists_are_still_needed(word: str) -> None:
    """A word allowed that has become a real path or name leaves the lists."""
    if word in NOT_PATHS:
        assert not (ROOT / word).exists()
        return
    head, rest = word.split(".", 1)
    assert word not in all_config_keys()
    assert not any(resolves(f"{c}.{rest}") for c in by_last_part().get(head, ()))
    assert not resolves(word)


_PACKAGE_WORD = re.compile(r"``([a-z_][a-z0-9_]*)``")


def _package_docstrings() -> Iterator[tuple[str, str]]:
    """(installed package name, docstring) of every package of the product."""
    for top, installed in INSTALLED.items():
        if top == "generated":
            continue
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / top).parts
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            yield ".".join((installed, *rel)), doc


@pytest.mark.parametrize(("package", "doc"), list(_package_docstrings()))
def test_every_module_a_package_docstring_names_exists(package: str, doc: str) -> None:
    """A package's docstring names its modules in single backticked words
    (``serve``, ``config``): each is a module or subpackage of it, something
    it exports, a backend protocol, or one of ``NOT_MODULES``; a module
    renamed or gone fails here, not in a reader's head."""
    mod = importlib.import_module(package)
    stale = [
        w
        for w in sorted(set(_PACKAGE_WORD.findall(doc)))
        if importlib.util.find_spec(f"{package}.{w}") is None
        and not hasattr(mod, w)
        and w not in PROTOCOLS
        and w not in NOT_MODULES
    ]
    assert not stale, f"{package}'s docstring names no module of it: {stale}"
