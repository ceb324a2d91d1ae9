"""What happens to a run, announced to whoever records it (reproducibility).

`runs` never imports the apps that follow its runs: it sends these signals and
each event carries what a listener needs, computed once here. Listeners are
connected in their app's `ready()`; they run synchronously, in the sender's
transaction, so what they write commits (or rolls back) with the event.

- `run_planned(run, pytest)`: the run's shards exist; `pytest` is the
  `crcr_reuse.launcher.PytestRun` every process of the run starts from.
- `shard_attempt_started(run, shard, environment, built)`: a device worker claimed the
  shard (`shard.attempts` is this attempt) and will run it with `environment`'s
  variables in `built`, the combination's interpreter (`runs.environments`).
- `run_finished(run)`: the run has its final status (it may never have planned).
"""

from django.dispatch import Signal

run_planned = Signal()
shard_attempt_started = Signal()
run_finished = Signal()
