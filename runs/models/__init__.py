"""Upstream events, runs, shards, results, HUD callbacks and API tokens, one module per subject."""

from runs.models.backends import Backend
from runs.models.intake import Dispatch, Trigger
from runs.models.relay import RelayBudget, RelayCallback
from runs.models.results import Failure, Shard, TestDuration, TestResult, TestResultQuerySet
from runs.models.runs import Artifact, Run
from runs.models.tokens import ApiToken

__all__ = [
    "ApiToken",
    "Artifact",
    "Backend",
    "Dispatch",
    "Failure",
    "RelayBudget",
    "RelayCallback",
    "Run",
    "Shard",
    "TestDuration",
    "TestResult",
    "TestResultQuerySet",
    "Trigger",
]
