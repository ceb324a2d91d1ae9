"""Fault profiles: make chosen operators misbehave on the reference device.

A profile is YAML or JSON, given by ``CRCR_REFDEV_FAULTS`` (a file path, or the
text itself when it starts with ``{`` or ``[``)::

    faults:
      - op: hypot            # operator packet ("hypot") or overload ("hypot.out")
        dtypes: [float64]    # optional: only when a tensor argument has one of these
        kind: deviation      # deviation | crash | hang
        amount: 0.5          # deviation only: added to every floating result element
      - op: lcm
        kind: crash          # crash: SIGSEGV by default, or signal: abort
        signal: abort
      - kind: poison         # the whole device goes bad: once it has run this many
        after_ops: 400       # compute operators (counted in this process), every
        amount: 0.5          # floating result is off by `amount`, until the process ends

A poisoned device is what the device's health probe (``probe`` in ``__init__.py``)
catches; a fresh process starts with a healthy device, as a real device's fresh
context does.

The profile is read lazily, on the first kernel call, so a test tree's conftest
may still set the variable. Without the variable, a profile a build baked into the
package (``built_faults.yaml`` beside this file) applies: the reference build's
stand-in for a backend compiled against PyTorch core (deploy/reference_build.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_FAULTS = "CRCR_REFDEV_FAULTS"
BUILT_FAULTS = Path(__file__).with_name("built_faults.yaml")
KINDS = ("deviation", "crash", "hang", "poison")
# A poison rule names no operator: it is kept under this key.
EVERY_OP = "*"


@dataclass(frozen=True)
class Fault:
    op: str
    kind: str
    dtypes: frozenset[str] = frozenset()
    amount: float = 0.5
    signal: str = "segv"
    after_ops: int = 0  # poison only


class FaultProfileError(ValueError):
    pass


def parse_profile(text: str, origin: str) -> dict[str, list[Fault]]:
    """Parse profile text into faults keyed by operator name."""
    import yaml

    try:
        data = _load(text, origin) or {}
    except ValueError as error:  # over the engine's YAML limits
        raise FaultProfileError(str(error)) from None
    except yaml.YAMLError as error:
        raise FaultProfileError(f"{origin}: not YAML/JSON: {error}") from error
    rules = data.get("faults", []) if isinstance(data, dict) else data
    if not isinstance(rules, list):
        raise FaultProfileError(f"{origin}: 'faults' must be a list")
    faults: dict[str, list[Fault]] = {}
    for index, rule in enumerate(rules):
        fault = _parse_rule(rule, f"{origin}: fault {index}")
        faults.setdefault(fault.op, []).append(fault)
    return faults


def _load(text: str, origin: str) -> Any:
    """The profile's data, within the engine's YAML limits where the engine is around:
    the device also ships alone (deploy/reference_build.py packages this folder as
    `crcr_refdev`), and a profile is an operator's own file."""
    try:
        from ..yaml_limits import safe_load
    except ImportError:
        import yaml

        return yaml.safe_load(text)
    return safe_load(text, origin)


def _parse_rule(rule: Any, where: str) -> Fault:
    if isinstance(rule, dict) and rule.get("kind") == "poison":
        return _parse_poison(rule, where)
    if not isinstance(rule, dict) or "op" not in rule or "kind" not in rule:
        raise FaultProfileError(f"{where}: needs 'op' and 'kind'")
    unknown = set(rule) - {"op", "kind", "dtypes", "amount", "signal"}
    if unknown:
        raise FaultProfileError(f"{where}: unknown key(s) {sorted(unknown)}")
    if rule["kind"] not in KINDS:
        raise FaultProfileError(f"{where}: kind must be one of {KINDS}, not {rule['kind']!r}")
    if rule.get("signal", "segv") not in ("segv", "abort"):
        raise FaultProfileError(f"{where}: signal must be segv or abort")
    op = str(rule["op"]).removeprefix("aten::")
    return Fault(
        op=op,
        kind=rule["kind"],
        dtypes=frozenset(str(d).removeprefix("torch.") for d in rule.get("dtypes") or ()),
        amount=float(rule.get("amount", 0.5)),
        signal=rule.get("signal", "segv"),
    )


def _parse_poison(rule: dict[str, Any], where: str) -> Fault:
    unknown = set(rule) - {"kind", "after_ops", "amount"}
    if unknown:
        raise FaultProfileError(f"{where}: unknown key(s) {sorted(unknown)} for kind poison")
    after = rule.get("after_ops")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise FaultProfileError(f"{where}: poison needs 'after_ops', a whole number 0 or more")
    return Fault(op=EVERY_OP, kind="poison", amount=float(rule.get("amount", 0.5)), after_ops=after)


class FaultTable:
    """Faults by operator, loaded from the environment on first use."""

    def __init__(self) -> None:
        self._faults: dict[str, list[Fault]] | None = None
        self._ops = 0  # compute operators run in this process, for a poison rule

    def load(self) -> dict[str, list[Fault]]:
        if self._faults is None:
            spec = os.environ.get(ENV_FAULTS, "").strip()
            if not spec and BUILT_FAULTS.is_file():
                self._faults = parse_profile(BUILT_FAULTS.read_text(), str(BUILT_FAULTS))
            elif not spec:
                self._faults = {}
            elif spec[0] in "{[":
                self._faults = parse_profile(spec, ENV_FAULTS)
            else:
                self._faults = parse_profile(Path(spec).read_text(), spec)
        return self._faults

    def find(self, packet: str, overload: str, dtypes: set[str]) -> Fault | None:
        faults = self.load()
        if not faults:
            return None
        for fault in faults.get(overload, []) + faults.get(packet, []):
            if not fault.dtypes or fault.dtypes & dtypes:
                return fault
        return None

    def poison(self) -> Fault | None:
        """Count one compute operator; the poison rule once the device has run more than
        its `after_ops` (it stays poisoned), else None."""
        rules = self.load().get(EVERY_OP)
        if not rules:
            return None
        self._ops += 1
        if self._ops <= rules[0].after_ops:
            return None
        if self._ops == rules[0].after_ops + 1:
            sys.stderr.write(f"crcr reference device: poisoned after {rules[0].after_ops} ops\n")
        return rules[0]


def trigger(fault: Fault, op_name: str) -> None:
    """Crash or hang the process as the fault says (deviation is applied by the kernel)."""
    sys.stdout.flush()
    sys.stderr.write(f"crcr reference device: injected {fault.kind} in {op_name}\n")
    sys.stderr.flush()
    if fault.kind == "crash":
        os.kill(os.getpid(), signal.SIGABRT if fault.signal == "abort" else signal.SIGSEGV)
    elif fault.kind == "hang":
        while True:  # an interruptible hang: a per-test timeout can still end it
            time.sleep(3600)


def describe(faults: dict[str, list[Fault]]) -> str:
    return json.dumps({op: [f.kind for f in fs] for op, fs in faults.items()}, sort_keys=True)
