"""Load and strictly validate test configs, keeping file:line:column for every error.

Steps: refuse a text past the YAML limits (``yaml_limits.py``), parse YAML to nodes
(PyYAML's composer keeps marks), walk the nodes against the schema collecting every
problem, expand ``${TORCH_ROOT}`` / ``${TORCH_DEVICE_ROOT}`` and globs in ``path`` (on disk, or
over a given ``tree`` of files: ``pathglob.py``), then merge several configs (``merge.py``).
Any problem raises ``ConfigError`` listing them all; nothing here imports torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .inputs_reader import read_module
from .labels import read_labels, resolve_labels
from .pathglob import files_matching
from .schema import (
    MODES,
    NAME_FORM,
    SPYRE_ONLY,
    TAG_FORM,
    TOKENS,
    Config,
    Description,
    DtypeSpec,
    Edits,
    FileEntry,
    GlobalSection,
    ModuleSpec,
    NamePattern,
    OpSpec,
    Pos,
    Precision,
    Selection,
    TestEntry,
    canonical_dtype,
    config_op_name,
    is_regex,
)
from .yaml_limits import YamlLimitError, check

TOKEN = re.compile(r"\$\{([^}]*)\}")
FILE_KEYS = "path unlisted_test_mode bypass_device_restrictions labels tests description".split()  # noqa: SIM905
TEST_KEYS = "names mode tags labels no_grad edits bypass_device_restrictions description".split()  # noqa: SIM905


class ConfigError(Exception):
    """A config is invalid; ``problems`` holds (position, message) pairs."""

    def __init__(self, problems: Sequence[tuple[Pos, str]]):
        self.problems = sorted(problems, key=lambda p: (p[0].file, p[0].line, p[0].column))
        super().__init__("\n".join(f"{pos}: {message}" for pos, message in self.problems))


def load_configs(
    paths: Sequence[str | os.PathLike[str]], tokens: Mapping[str, str] | None = None
) -> Config:
    """Load, validate and merge configs; raise ConfigError naming every problem."""
    from .merge import merge_configs

    configs, problems = [], []
    for path in paths:
        try:
            configs.append(load_config(path, tokens))
        except ConfigError as error:
            problems.extend(error.problems)
    if problems:
        raise ConfigError(problems)
    return merge_configs(configs)


def load_config(path: str | os.PathLike[str], tokens: Mapping[str, str] | None = None) -> Config:
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError([(Pos(source, 1, 1), f"cannot read config: {error.strerror}")]) from error
    return load_text(text, source, tokens)


def load_text(
    text: str, source: str, tokens: Mapping[str, str] | None = None, base: Path | None = None,
    tree: Collection[str] | None = None,  # the files paths match (absolute), else the disk's
) -> Config:  # fmt: skip
    """A config from `text`, its problems at `source`; relative paths from `base` or its folder."""
    try:
        check(text, source)  # within the limits before anything expands an alias
    except YamlLimitError as error:
        raise ConfigError([(error.pos, error.message)]) from None
    reader = _Reader(source, text, token_values(tokens), base)
    reader.tree = tree
    config = reader.read()
    if reader.problems:
        raise ConfigError(reader.problems)
    return config


def token_values(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Token values: explicit options first, then the environment."""
    values = {name: os.environ[name] for name in TOKENS if os.environ.get(name)}
    values.update({k: v for k, v in (overrides or {}).items() if v})
    # A relative root means "from where I run", not from the config's folder.
    return {name: os.path.abspath(value) for name, value in values.items()}


class _Reader:
    """Walks one YAML document, building schema objects and collecting problems."""

    tree: Collection[str] | None = None  # the files that exist, when not read from disk

    def __init__(self, source: str, text: str, tokens: dict[str, str], base: Path | None):
        self.source = source
        self.lines = text.splitlines()
        self.text = text
        self.tokens = tokens
        self.problems: list[tuple[Pos, str]] = []
        self.base = base or Path(source).resolve().parent

    def pos(self, node: yaml.Node) -> Pos:
        return Pos(self.source, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node: yaml.Node, message: str) -> None:
        self.problems.append((self.pos(node), message))

    # -- generic node readers -------------------------------------------------

    def mapping(self, node: yaml.Node, where: str, allowed: Sequence[str]) -> dict[str, Any]:
        """Keys to value nodes; reports non-mappings, unknown and duplicate keys."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{where} must be a mapping")
            return {}
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in result:
                self.error(key_node, f"duplicate key '{key}' in {where}")
            elif key not in allowed:
                self.error(key_node, self._unknown_key(key, where, allowed))
            else:
                result[key] = value_node
        return result

    @staticmethod
    def _unknown_key(key: str, where: str, allowed: Sequence[str]) -> str:
        hint = (
            f" ({SPYRE_ONLY[key]} are not supported by crcr; for a Torch Spyre config run"
            " `python -m crcr_reuse import-spyre`)"
            if key in SPYRE_ONLY
            else ""
        )
        return f"unknown key '{key}' in {where}{hint}; allowed: {', '.join(allowed)}"

    def sequence(self, node: yaml.Node, where: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, f"{where} must be a list")
            return []
        return list(node.value)

    def string(self, node: yaml.Node, where: str) -> str | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            self.error(node, f"{where} must be a string")
            return None
        return str(node.value)

    def number(self, node: yaml.Node, where: str) -> float | None:
        # PyYAML reads "1e-3" (no dot) as a string: accept any float spelling.
        try:
            if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:bool":
                return float(node.value)
        except ValueError:
            pass
        self.error(node, f"{where} must be a number, not {_shown(node)}")
        return None

    def boolean(self, node: yaml.Node, where: str) -> bool:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:bool":
            return node.value.lower() in ("true", "yes", "on")
        self.error(node, f"{where} must be true or false")
        return False

    def flag(self, fields: dict[str, Any], key: str) -> bool | None:
        """An optional true/false key of a mapping: None when it is absent."""
        return self.boolean(fields[key], key) if key in fields else None

    def choice(self, node: yaml.Node, where: str, choices: Sequence[str]) -> str | None:
        value = self.string(node, where)
        if value is not None and value not in choices:
            self.error(node, f"{where} must be one of {', '.join(choices)}, not '{value}'")
            return None
        return value

    # -- the document ---------------------------------------------------------

    def read(self) -> Config:
        config = Config(sources=(self.source,))
        root = self._compose()
        if root is None:
            return config
        top = self.mapping(root, "the document", ["test_suite_config"])
        if "test_suite_config" not in top:
            if isinstance(root, yaml.MappingNode):
                self.error(root, "the document needs a 'test_suite_config' mapping")
            return config
        suite = self.mapping(
            top["test_suite_config"], "test_suite_config", ["labels", "files", "global"]
        )
        if "labels" in suite:
            config.labels = self._labels(suite["labels"])
        if "files" in suite:
            config.files = [self._file(node) for node in self.sequence(suite["files"], "files")]
        if "global" in suite:
            config.global_ = self._global(suite["global"])
        resolve_labels(config, self.source)
        return config

    def _compose(self) -> yaml.Node | None:
        try:
            # The C parser when PyYAML has it: a few hundred entries compose 10x faster.
            root = yaml.compose(self.text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            self.problems.append((Pos(self.source, line, column), f"invalid YAML: {error.problem}"))
            return None
        if root is None:
            self.problems.append((Pos(self.source, 1, 1), "the config is empty"))
        return root

    def _labels(self, node: yaml.Node) -> tuple[str, ...]:
        return read_labels(self, node)  # labels.py

    def _file(self, node: yaml.Node) -> FileEntry:
        fields = self.mapping(node, "a files entry", FILE_KEYS)
        entry = FileEntry("", "", (), self.pos(node), description=self._description(fields))
        if "labels" in fields:
            entry.labels = self._labels(fields["labels"])
            entry.labels_pos = self.pos(fields["labels"])
        if "path" not in fields:
            self.error(node, "a files entry needs a 'path'")
        else:
            self._resolve_path(fields["path"], entry)
        if "unlisted_test_mode" in fields:
            mode = self.choice(fields["unlisted_test_mode"], "unlisted_test_mode", MODES)
            entry.unlisted_test_mode = mode or entry.unlisted_test_mode
            entry.unlisted_pos = self.pos(fields["unlisted_test_mode"])
        if "bypass_device_restrictions" in fields:
            entry.bypass_device_restrictions = bool(self.flag(fields, "bypass_device_restrictions"))
            entry.bypass_pos = self.pos(fields["bypass_device_restrictions"])
        if "tests" in fields:
            entry.tests = [self._test(item) for item in self.sequence(fields["tests"], "tests")]
        return entry

    def _resolve_path(self, node: yaml.Node, entry: FileEntry) -> None:
        raw = self.string(node, "path")
        if raw is None:
            return
        entry.path = raw
        expanded = self._expand_tokens(node, raw)
        if expanded is None:
            return
        pattern = Path(expanded) if Path(expanded).is_absolute() else self.base / expanded
        entry.pattern = os.path.normpath(str(pattern))
        matches = files_matching(entry.pattern, self.tree)
        if not matches:
            self.error(node, f"path '{raw}' matches no file (looked for {entry.pattern})")
        entry.files = tuple(dict.fromkeys(matches))

    def _expand_tokens(self, node: yaml.Node, raw: str) -> str | None:
        ok = True

        def substitute(match: re.Match[str]) -> str:
            nonlocal ok
            name = match.group(1)
            if name not in TOKENS:
                self.error(node, f"unknown token '${{{name}}}' in path; known: {', '.join(TOKENS)}")
                ok = False
            elif name not in self.tokens:
                option = "--reuse-torch-root" if name == "TORCH_ROOT" else "--reuse-device-root"
                self.error(
                    node, f"${{{name}}} is not set (environment variable {name} or {option})"
                )
                ok = False
            return self.tokens.get(name, "")

        expanded = TOKEN.sub(substitute, raw)
        return expanded if ok else None

    def _test(self, node: yaml.Node) -> TestEntry:
        fields = self.mapping(
            node,
            "a tests entry",
            TEST_KEYS,
        )
        names = self._names(fields["names"]) if "names" in fields else ()
        if "names" not in fields:
            self.error(node, "a tests entry needs 'names'")
        mode = None
        if "mode" in fields:
            mode = self.choice(fields["mode"], "mode", MODES)
        else:
            self.error(node, f"a tests entry needs a 'mode' ({', '.join(MODES)})")
        tags = self._tags(fields["tags"]) if "tags" in fields else ()
        edits = self._edits(fields["edits"]) if "edits" in fields else Edits()
        description = self._description(fields)
        return TestEntry(
            names=names,
            mode=mode or "mandatory_success",
            pos=self.pos(node),
            tags=tags,
            edits=edits,
            reason=description.text if description else self._comment_above(node),
            bypass_device_restrictions=self.flag(fields, "bypass_device_restrictions"),
            labels=self._labels(fields["labels"]) if "labels" in fields else (),
            no_grad=bool(self.flag(fields, "no_grad")),
            description=description,
        )

    def _names(self, node: yaml.Node) -> tuple[NamePattern, ...]:
        items = self.sequence(node, "names")
        if isinstance(node, yaml.SequenceNode) and not items:
            self.error(node, "names must not be empty")
        patterns = []
        for item in items:
            text = self.string(item, "a test name")
            pattern = self._name_pattern(item, text) if text is not None else None
            if pattern is not None:
                patterns.append(pattern)
        return tuple(patterns)

    def _name_pattern(self, node: yaml.Node, text: str) -> NamePattern | None:
        parts = text.split("::")
        if len(parts) > 2:
            self.error(node, f"name '{text}' has more than one '::' (use Class::method or method)")
            return None
        cls, method = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        if not method or cls == "":
            self.error(node, f"name '{text}' is empty on one side of '::'")
            return None
        regex = is_regex(text)
        for part in (cls, method) if regex else ():
            try:
                if part is not None:
                    re.compile(part)
            except re.error as error:
                self.error(node, f"name '{text}' is not a valid regex: {error}")
                return None
        return NamePattern(text=text, pos=self.pos(node), cls=cls, method=method, is_regex=regex)

    def _tags(self, node: yaml.Node) -> tuple[str, ...]:
        tags = []
        for item in self.sequence(node, "tags"):
            tag = self.string(item, "a tag")
            if tag is not None and not TAG_FORM.fullmatch(tag):
                self.error(item, f"tag '{tag}' is not a valid marker name")
            elif tag is not None:
                tags.append(tag)
        return tuple(tags)

    def _description(self, fields: dict[str, Any]) -> Description | None:
        """An entry's or item's `description` (its reason) at its text's position, or None."""
        if "description" not in fields:
            return None
        text = (self.string(fields["description"], "description") or "").strip()
        return Description(text, self.pos(fields["description"])) if text else None

    def _comment_above(self, node: yaml.Node) -> str:
        """The comment lines right above an entry: its reason, by convention."""
        comments: list[str] = []
        line = node.start_mark.line - 1
        while line >= 0 and self.lines[line].strip().startswith("#"):
            comments.insert(0, self.lines[line].strip().lstrip("#").strip())
            line -= 1
        return " ".join(comments)

    # -- edits and global -----------------------------------------------------

    def _edits(self, node: yaml.Node) -> Edits:
        fields = self.mapping(node, "edits", ["dtypes", "ops", "modules", "functions"])
        return Edits(
            dtypes=self._selection(fields.get("dtypes"), "edits.dtypes", self._dtype),
            ops=self._selection(fields.get("ops"), "edits.ops", self._op),
            modules=self._selection(fields.get("modules"), "edits.modules", self._module),
            **(self._cpu_move(fields["functions"]) if "functions" in fields else {}),
        )

    def _cpu_move(self, node: yaml.Node) -> dict[str, Any]:
        """`functions: {cpu_move: [{name: assertEqual, description: …}, …]}`: Edits' fields."""
        fields = self.mapping(node, "edits.functions", ["cpu_move"])
        names, described = [], []
        for item in self.sequence(fields["cpu_move"], "cpu_move") if "cpu_move" in fields else []:
            method = self.mapping(item, "a cpu_move entry", ["name", "description"])
            description = self._description(method)
            if "name" not in method:
                if isinstance(item, yaml.MappingNode):
                    self.error(item, "a cpu_move entry needs a 'name'")
                continue
            name = self.string(method["name"], "a cpu_move name")
            if name is not None and not name.isidentifier():
                self.error(method["name"], f"'{name}' is not a method name")
            elif name is not None:
                names.append(name)
                described += [(name, description)] if description else []
        return {"cpu_move": tuple(names), "cpu_move_descriptions": tuple(described)}

    def _selection(self, node: yaml.Node | None, where: str, read_item: Any) -> Selection:
        if node is None:
            return Selection()
        fields = self.mapping(node, where, ["include", "exclude"])
        read: dict[str, list[Any]] = {way: [] for way in ("include", "exclude")}
        for way, items in read.items():
            for item in self.sequence(fields[way], f"{where}.{way}") if way in fields else []:
                items.append(read_item(item, f"{where}.{way}"))
        return Selection(
            **{way: tuple(i for i in items if i is not None) for way, items in read.items()}
        )

    def _dtype(self, node: yaml.Node, where: str) -> DtypeSpec | None:
        fields = self.mapping(
            node, f"a dtype in {where}", ["name", "precision", "force_xfail", "description"]
        )
        if "name" not in fields:
            if isinstance(node, yaml.MappingNode):
                self.error(node, f"a dtype in {where} needs a 'name'")
            return None
        raw = self.string(fields["name"], "a dtype name")
        name = canonical_dtype(raw) if raw is not None else None
        if raw is not None and name is None:
            self.error(fields["name"], f"unknown dtype '{raw}'")
        precision = self._precision(fields["precision"]) if "precision" in fields else None
        force = bool(self.flag(fields, "force_xfail"))
        if name is None:
            return None
        return DtypeSpec(name, self.pos(node), precision, force, self._description(fields))

    def _precision(self, node: yaml.Node) -> Precision:
        fields = self.mapping(node, "precision", ["atol", "rtol"])
        values = {key: self.number(value, f"precision.{key}") for key, value in fields.items()}
        if isinstance(node, yaml.MappingNode) and not fields:
            self.error(node, "precision needs atol and/or rtol")
        return Precision(atol=values.get("atol"), rtol=values.get("rtol"))

    def _op(self, node: yaml.Node, where: str) -> OpSpec | None:
        keys = ["name", "dtypes", "force_xfail", "description"]
        tagged = where == "edits.ops.include"  # an op's own markers: only where it is added
        fields = self.mapping(node, f"an op in {where}", keys + ["tags"] * tagged)
        name = self._dotted_name(fields, node, f"an op in {where}", "op")
        dtypes = None
        if "dtypes" in fields:
            items = self.sequence(fields["dtypes"], "an op's dtypes")
            dtypes = tuple(d for d in (self._dtype(i, "an op's dtypes") for i in items) if d)
        force = bool(self.flag(fields, "force_xfail"))
        tags = self._tags(fields["tags"]) if "tags" in fields else ()
        if name is None:
            return None
        name = config_op_name(name)
        return OpSpec(name, self.pos(node), dtypes, force, tags, self._description(fields))

    def _module(self, node: yaml.Node, where: str) -> ModuleSpec | None:
        return read_module(self, node, where)  # custom modules too (inputs_reader.py)

    def _dotted_name(
        self, fields: dict[str, Any], node: yaml.Node, where: str, kind: str
    ) -> str | None:
        if "name" not in fields:
            if isinstance(node, yaml.MappingNode):
                self.error(node, f"{where} needs a 'name'")
            return None
        return self._check_name(fields["name"], self.string(fields["name"], f"{kind} name"), kind)

    def _check_name(self, node: yaml.Node, name: str | None, kind: str) -> str | None:
        if name is not None and not NAME_FORM.fullmatch(name):
            self.error(node, f"'{name}' is not a valid {kind} name (torch's dotted form)")
            return None
        return name

    def _global(self, node: yaml.Node) -> GlobalSection:
        readers = {
            "supported_dtypes": self._dtype,
            "supported_ops": self._op,
            "supported_modules": self._module,
        }
        fields = self.mapping(node, "global", list(readers))
        section = GlobalSection()
        for key, read_item in readers.items():
            if key in fields:
                items = (read_item(item, key) for item in self.sequence(fields[key], key))
                setattr(section, key, tuple(item for item in items if item))
        return section


def _shown(node: yaml.Node) -> str:
    kind = "mapping" if isinstance(node, yaml.MappingNode) else "list"
    return repr(node.value) if isinstance(node, yaml.ScalarNode) else f"a {kind}"
