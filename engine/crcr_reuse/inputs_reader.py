"""The loader's part for custom modules: ``edits.modules.include`` items and their input specs.

Same rules as the rest of the loader (``loader._Reader``): every problem is reported
with the file:line:column of the value at fault, and a form crcr does not know (an
unknown key, an ``init`` it cannot build, a Python expression that is more than a
literal) is an error, never dropped. The result is ``inputs.py``'s model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from .inputs import (
    COMPLEX,
    CONFIG_REF,
    FLOATING,
    INITS,
    TENSOR_DTYPES,
    Invocation,
    ModuleInputs,
    TensorSpec,
    Value,
    kwarg_dtype,
    literal,
)
from .schema import DOTTED_FORM, ModuleSpec

if TYPE_CHECKING:
    from .loader import _Reader

CUSTOM_KEYS = ("module_path", "constructor_inputs", "forward_inputs", "sample_inputs_func")
TENSOR_KEYS = ("shape", "dtype", "device", "init", "init_args", "stride", "storage_offset")
ARGUMENT_KINDS = ("tensor", "tensor_list", "value", "py")
NOT_BUILT = "tensors loaded from files (init: file) are not supported by crcr"


def read_module(reader: _Reader, node: yaml.Node, where: str) -> ModuleSpec | None:
    """A module of a global list or of an edit; custom keys only in ``edits.modules.include``."""
    if isinstance(node, yaml.ScalarNode):
        name = reader._check_name(node, reader.string(node, "a module name"), "module")
        return ModuleSpec(name=name, pos=reader.pos(node)) if name else None
    custom = CUSTOM_KEYS if where == "edits.modules.include" else ()
    fields = reader.mapping(node, f"a module in {where}", ["name", "description", *custom])
    name = reader._dotted_name(fields, node, f"a module in {where}", "module")
    inputs = None
    if any(key in fields for key in CUSTOM_KEYS):
        inputs = _Inputs(reader).module(node, fields)
    if not name:
        return None
    return ModuleSpec(name, reader.pos(node), inputs, description=reader._description(fields))


class _Inputs:
    def __init__(self, reader: _Reader):
        self.reader = reader
        self.error = reader.error

    def module(self, node: yaml.Node, fields: dict[str, Any]) -> ModuleInputs | None:
        if "module_path" not in fields:
            self.error(node, "a custom module needs a 'module_path' (the inputs say how to "
                       "build and call the class it names)")  # fmt: skip
            return None
        path = self.reader.string(fields["module_path"], "module_path")
        if path is not None and not (DOTTED_FORM.fullmatch(path) and "." in path):
            self.error(fields["module_path"], f"module_path '{path}' is not an import path "
                       "(package.module.Class)")  # fmt: skip
            path = None
        constructor = Invocation()
        if "constructor_inputs" in fields:
            constructor = self.invocation(fields["constructor_inputs"], "constructor_inputs")
        if "forward_inputs" in fields and "sample_inputs_func" in fields:
            self.error(fields["sample_inputs_func"], "give forward_inputs or sample_inputs_func "
                       "(its legacy spelling), not both")  # fmt: skip
        forward: tuple[Invocation, ...] = (Invocation(),)
        for key in ("forward_inputs", "sample_inputs_func"):
            if key in fields:
                forward = self.forwards(fields[key], key)
        document = {key: _plain(fields[key]) for key in CUSTOM_KEYS if key in fields}
        return ModuleInputs(path, constructor, forward, document) if path else None

    def forwards(self, node: yaml.Node, where: str) -> tuple[Invocation, ...]:
        """One invocation, or a list of them (each a ModuleInput of its own)."""
        if not isinstance(node, yaml.SequenceNode):
            return (self.invocation(node, where),)
        if not node.value:
            self.error(node, f"{where} must not be empty")
        return tuple(self.invocation(item, f"an invocation of {where}") for item in node.value)

    def invocation(self, node: yaml.Node, where: str) -> Invocation:
        fields = self.reader.mapping(node, where, ["args", "kwargs"])
        args = []
        for item in self.reader.sequence(fields["args"], "args") if "args" in fields else []:
            args.append(self.argument(item, "an argument"))
        kwargs = []
        for key, value in self.keywords(fields["kwargs"]) if "kwargs" in fields else []:
            kwargs.append((key, self.argument(value, f"kwarg '{key}'", bare=True)))
        return Invocation(
            args=tuple(a for a in args if a is not None),
            kwargs=tuple((k, v) for k, v in kwargs if v is not None),
        )

    def keywords(self, node: yaml.Node) -> list[tuple[str, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            self.error(node, "kwargs must be a mapping")
            return []
        found: dict[str, yaml.Node] = {}
        for key_node, value in node.value:
            key = key_node.value
            if not (isinstance(key, str) and key.isidentifier()):
                self.error(key_node, f"kwarg '{key}' is not a Python name")
            elif key in found:
                self.error(key_node, f"duplicate kwarg '{key}'")
            else:
                found[key] = value
        return list(found.items())

    def argument(self, node: yaml.Node, where: str, bare: bool = False) -> Value | None:
        """``{tensor: …}``, ``{tensor_list: […]}``, ``{value: …}``, ``{py: "…"}``; in kwargs
        also bare data."""
        if not isinstance(node, yaml.MappingNode):
            if bare:
                return self.plain(node, "kwarg")
            self.error(node, f"{where} must be a mapping with one of {', '.join(ARGUMENT_KINDS)}")
            return None
        fields = self.reader.mapping(node, where, ARGUMENT_KINDS)
        if len(fields) != 1:
            if len(fields) > 1 or not node.value:
                self.error(node, f"{where} needs exactly one of {', '.join(ARGUMENT_KINDS)}")
            return None
        kind, value = next(iter(fields.items()))
        if kind == "tensor":
            spec = self.tensor(value)
            return Value("tensor", spec) if spec else None
        if kind == "tensor_list":
            specs = [self.tensor(item) for item in self.reader.sequence(value, "tensor_list")]
            return Value("tensor_list", tuple(specs)) if all(specs) else None
        if kind == "py":
            return self.py(value)
        return self.plain(value, "value")

    def py(self, node: yaml.Node) -> Value | None:
        text = self.reader.string(node, "py")
        if text is None:
            return None
        try:
            literal(text)
        except ValueError as error:
            self.error(node, f"py: {error}")
            return None
        return Value("py", text)

    def plain(self, node: yaml.Node, kind: str) -> Value | None:
        data = _plain(node)
        if isinstance(data, str) and data.startswith("<config:") and not CONFIG_REF.fullmatch(data):
            self.error(node, f"'{data}' is not a config reference (<config:package.module.Class>)")
            return None
        return Value(kind, data)

    def tensor(self, node: yaml.Node) -> TensorSpec | None:
        fields = self.reader.mapping(node, "a tensor", TENSOR_KEYS)
        missing = [key for key in ("shape", "dtype") if key not in fields]
        if missing and isinstance(node, yaml.MappingNode):
            self.error(node, f"a tensor needs {' and '.join(repr(key) for key in missing)}")
        shape = self.integers(fields["shape"], "shape") if "shape" in fields else None
        dtype = self.dtype(fields["dtype"]) if "dtype" in fields else None
        init = self.init(fields["init"]) if "init" in fields else "rand"
        limits = self.init_args(fields["init_args"]) if "init_args" in fields else {}
        stride = None
        if "stride" in fields and _plain(fields["stride"]) is not None:
            stride = self.integers(fields["stride"], "stride")
        offset = self.integer(fields["storage_offset"], "storage_offset") if "storage_offset" in fields else 0  # fmt: skip
        on_host = False
        if "device" in fields:
            on_host = self.reader.string(fields["device"], "a tensor's device") == "cpu"
        if shape is None or dtype is None or init is None or limits is None or offset is None:
            return None
        spec = TensorSpec(
            shape, dtype, init, on_host, stride=stride, storage_offset=offset, **limits
        )
        problem = _inconsistent(spec)
        if problem:
            self.error(node, f"a tensor {problem}")
            return None
        return spec

    def dtype(self, node: yaml.Node) -> str | None:
        text = self.reader.string(node, "a tensor's dtype")
        name = kwarg_dtype(text) if text is not None else None
        if text is not None and name is None:
            self.error(node, f"dtype '{text}' is not one crcr builds tensors in "
                       f"({', '.join(TENSOR_DTYPES)})")  # fmt: skip
        return name

    def init(self, node: yaml.Node) -> str | None:
        text = self.reader.string(node, "init")
        if text == "file":
            self.error(node, NOT_BUILT)
        elif text is not None and text not in INITS:
            self.error(node, f"init must be one of {', '.join(INITS)}, not '{text}'")
        return text if text in INITS else None

    def init_args(self, node: yaml.Node) -> dict[str, float] | None:
        if isinstance(node, yaml.MappingNode) and any(
            k.value in ("path", "key") for k, _ in node.value
        ):
            self.error(node, NOT_BUILT)
            return None
        fields = self.reader.mapping(node, "init_args", ["low", "high", "fill_value"])
        values = {
            key: self.reader.number(value, f"init_args.{key}") for key, value in fields.items()
        }
        return None if None in values.values() else values  # type: ignore[return-value]

    def integers(self, node: yaml.Node, where: str) -> tuple[int, ...] | None:
        items = [
            self.integer(item, f"a {where} entry") for item in self.reader.sequence(node, where)
        ]
        return tuple(items) if isinstance(node, yaml.SequenceNode) and None not in items else None  # type: ignore[arg-type]

    def integer(self, node: yaml.Node, where: str) -> int | None:
        value = _plain(node)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        self.error(node, f"{where} must be a whole number ≥ 0, not {value!r}")
        return None


def _inconsistent(spec: TensorSpec) -> str | None:
    """What makes a tensor spec unbuildable, in words (None: it is fine)."""
    rank = len(spec.shape)
    checks = [
        (spec.init == "xavier" and spec.dtype not in FLOATING, "with init xavier needs a floating dtype"),
        (spec.init == "xavier" and rank < 2, "with init xavier needs 2 or more dimensions"),
        (spec.init == "randint" and spec.high is None, "with init randint needs init_args.high"),
        (spec.init == "randint" and spec.dtype in COMPLEX, "with init randint needs a real dtype"),
        (spec.init == "randint" and (spec.high or 0) <= spec.low, "needs init_args.high above init_args.low"),
        (spec.init == "full" and spec.fill_value is None, "with init full needs init_args.fill_value"),
        (spec.init == "arange" and rank != 1, "with init arange needs one dimension"),
        (spec.init == "eye" and (rank != 2 or spec.shape[0] != spec.shape[1]), "with init eye needs a square shape"),
        (spec.stride is not None and len(spec.stride) != rank, "needs one stride per dimension"),
    ]  # fmt: skip
    return next((message for failed, message in checks if failed), None)


def _plain(node: yaml.Node) -> Any:
    """A node as plain Python data (what ``yaml.safe_load`` would give)."""
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
