"""Onboarding a backend: its profile and its first config version, in one step.

`manage.py add_backend` and the admin-only page `/backends/new/` both call `add_backend`:
1. the profile is checked as the admin checks it (`Backend.full_clean`: slug, relay
   settings and token spec);
2. the first config is read in the format the team names: crcr's own, as it is, or a
   Torch Spyre config through the importer (`crcr_reuse.spyre`), whose report of
   what it changed and could not use comes back to the caller;
3. the config is validated by the reuse framework's strict loader against the PyTorch
   tree crcr tests (`CRCR_TORCH_ROOT`), so a path that matches no file is refused now;
4. only when all of it holds are the backend and config version 1 saved, together.
Any problem raises `OnboardingError` naming each field that is wrong; nothing is saved.
`progress` (a `selection.progress` callback) hears each step as it starts: a large
config is checked on a worker (`selection.submissions`) while its page shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crcr_reuse import spyre
from crcr_reuse.loader import ConfigError
from django.core.exceptions import ValidationError
from django.db import transaction

from runs.models import Backend
from selection import configwriter, pipeline
from selection.models import ConfigVersion
from selection.progress import Progress

FORMATS = ("crcr", "spyre")


class OnboardingError(Exception):
    """What is wrong, per field (`config` for the config file)."""

    def __init__(self, problems: dict[str, list[str]]):
        self.problems = problems
        super().__init__(
            "; ".join(f"{field}: {' '.join(texts)}" for field, texts in problems.items())
        )


@dataclass
class Onboarded:
    backend: Backend
    config: ConfigVersion
    report: spyre.ImportReport | None  # for a Spyre config: what the importer did


def add_backend(
    profile: dict[str, Any],
    config_text: str,
    config_name: str,
    config_format: str = "crcr",
    user: Any = None,
    tree: Path | None = None,
    progress: Progress | None = None,
    saved: Callable[[Onboarded], object] = lambda onboarded: None,
) -> Onboarded:
    """Create the backend from `profile` (Backend fields) and its first config; `saved`
    runs in the transaction that saves them (a worker's check ends with them)."""
    step = _steps(config_format, progress)
    step("checking the backend's profile")
    problems: dict[str, list[str]] = {}
    backend = Backend(**profile)
    try:
        backend.full_clean()
    except ValidationError as error:
        problems.update({field: list(texts) for field, texts in error.message_dict.items()})
    text, report = config_text, None
    try:
        text, report = read_config(config_text, config_name, config_format, tree, step)
    except OnboardingError as error:
        problems.update(error.problems)
    if problems:
        raise OnboardingError(problems)
    step("saving the backend and config v1")
    with transaction.atomic():
        backend.save()
        imported = f" (imported from Torch Spyre's {config_name})" if report else ""
        version = ConfigVersion.objects.create(
            backend=backend,
            number=1,
            yaml_text=text,
            sha256=ConfigVersion.hash_text(text),
            message=f"first config: {config_name}{imported}"[:300],
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        onboarded = Onboarded(backend, version, report)
        saved(onboarded)
    return onboarded


def read_config(
    text: str,
    name: str,
    config_format: str = "crcr",
    tree: Path | None = None,
    step: Callable[[str], None] = lambda stage: None,
) -> tuple[str, spyre.ImportReport | None]:
    """The first config in crcr's strict form (a Spyre one imported), validated against the
    tree; OnboardingError names the problems. `step(stage)` hears each step as it starts."""
    report = None
    if config_format not in FORMATS:
        raise OnboardingError(
            {"config_format": [f"'{config_format}' is not one of {', '.join(FORMATS)}"]}
        )
    if config_format == "spyre":
        step("importing the Torch Spyre config")
        try:
            text, report = spyre.import_text(text, name)
        except spyre.ImportProblem as error:
            raise OnboardingError({"config": [str(error)]}) from None
    step("validating the config against the PyTorch tree")
    try:
        configwriter.validate(text, tree or pipeline.default_tree())
    except ConfigError as error:
        shown = name if report is None else f"{name} (as imported)"
        raise OnboardingError({"config": [_located(error, shown)]}) from None
    return text, report


def _steps(config_format: str, progress: Progress | None) -> Callable[[str], None]:
    """Report each step as `progress(stage, steps done, steps in all)`."""
    steps = 4 if config_format == "spyre" else 3
    done = 0

    def step(stage: str) -> None:
        nonlocal done
        if progress is not None:
            progress(stage, done, steps)
        done += 1

    return step


def _located(error: ConfigError, name: str) -> str:
    """The loader's problems, each at `name:line:column` of the file as it was sent."""
    return "\n".join(
        f"{name}:{pos.line}:{pos.column}: {message}" for pos, message in error.problems
    )
