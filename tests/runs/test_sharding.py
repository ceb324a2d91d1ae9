"""The shard planner: estimates, grouping, caps, serial files and balance quality."""

import heapq
import json
import math
import random

import pytest

from runs.areas import TestItem, area_for, file_key
from runs.durations import (
    DurationStats,
    Source,
    file_seeds,
    load_test_times,
    shared_data_dir,
    update_duration,
)
from runs.sharding import balance, lower_bound, plan_shards
from tests.data import FIXTURES


def make_items(files: dict[str, int], labels: tuple[str, ...] = ()) -> list[TestItem]:
    """`count` tests per file, ids `file::TestX::test_<n>`."""
    return [
        TestItem(f"{path}::TestX::test_{n}", path, labels)
        for path, count in files.items()
        for n in range(count)
    ]


def all_ids(plan) -> list[str]:
    return [test_id for shard in plan.shards for test_id in shard.test_ids]


def plain_lpt_makespan(durations: list[float], shards: int) -> float:
    loads = [0.0] * shards
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


# --- properties of a plan ---------------------------------------------------------------


def test_every_test_lands_in_exactly_one_shard():
    rng = random.Random(7)
    items = make_items({f"test/test_f{i}.py": rng.randint(1, 60) for i in range(40)})
    history = {item.test_id: rng.uniform(0.1, 30) for item in items if rng.random() < 0.8}

    plan = plan_shards(items, history, max_shard_seconds=600)

    ids = all_ids(plan)
    assert sorted(ids) == sorted(item.test_id for item in items)
    assert len(ids) == len(set(ids))


def test_no_shard_exceeds_the_cap_when_every_test_fits():
    rng = random.Random(3)
    items = make_items({f"test/test_f{i}.py": 50 for i in range(30)})
    history = {item.test_id: rng.uniform(1, 20) for item in items}

    plan = plan_shards(items, history, max_shard_seconds=900)

    assert plan.shards
    assert all(shard.seconds <= 900 for shard in plan.shards)
    assert not any(shard.over_cap for shard in plan.shards)


def test_it_uses_the_fewest_shards_that_meet_the_cap():
    # 35 tests of 100 s: 3,500 s need at least 4 shards of 1,000 s, and 4 suffice.
    items = make_items({"test/test_torch.py": 35})
    history = {item.test_id: 100.0 for item in items}

    plan = plan_shards(items, history, max_shard_seconds=1000)

    assert len(plan.shards) == 4
    assert max(shard.seconds for shard in plan.shards) <= 1000


def test_a_serial_file_stays_whole_in_one_shard():
    items = make_items({"test/test_serial.py": 40, "test/test_other.py": 200})
    history = {item.test_id: 10.0 for item in items}

    plan = plan_shards(items, history, max_shard_seconds=600, serial_files=["test_serial"])

    holding = [s for s in plan.shards if any("test_serial" in t for t in s.test_ids)]
    assert len(holding) == 1
    assert sum("test_serial" in t for t in holding[0].test_ids) == 40


def test_a_serial_file_longer_than_the_cap_gets_a_shard_of_its_own_flagged_over_cap():
    items = make_items({"test/test_big.py": 10, "test/test_small.py": 10})
    history = {item.test_id: (100.0 if "big" in item.test_id else 5.0) for item in items}

    plan = plan_shards(items, history, max_shard_seconds=600, serial_files=["test/test_big.py"])

    big = [s for s in plan.shards if any("test_big" in t for t in s.test_ids)]
    assert len(big) == 1
    assert big[0].over_cap and big[0].seconds == 1000
    assert all("test_big" in t for t in big[0].test_ids)
    assert plan.notes


def test_files_longer_than_half_the_cap_each_open_a_shard_the_small_tests_fill():
    items = make_items({f"test/test_big_{n}.py": 1 for n in range(5)})
    items += make_items({"test/test_small.py": 20})
    history = {item.test_id: (60.0 if "big" in item.test_id else 10.0) for item in items}
    serial = [f"test/test_big_{n}.py" for n in range(5)]

    plan = plan_shards(items, history, max_shard_seconds=100, serial_files=serial)

    assert len(plan.shards) == 5
    assert all(shard.seconds <= 100 for shard in plan.shards)


def test_a_fixed_shard_count_spreads_over_every_shard_that_helps():
    # On 3 shards the best is 11 s (10 | 9+2 | 9); the fourth shard brings it to 10 s.
    seconds = {"test_a": 10.0, "test_b": 9.0, "test_c": 9.0, "test_d": 2.0}
    items = [TestItem(name, f"test/{name}.py") for name in seconds]

    plan = plan_shards(items, seconds, shard_count=4, isolate_groups=False)

    assert len(plan.shards) == 4
    assert plan.makespan == 10.0


def test_a_fixed_shard_count_ignores_the_cap():
    items = make_items({"test/test_torch.py": 10})

    plan = plan_shards(items, {item.test_id: 600.0 for item in items}, shard_count=2)

    assert plan.max_shard_seconds is None
    assert [shard.seconds for shard in plan.shards] == [3000.0, 3000.0]
    assert not any(shard.over_cap for shard in plan.shards) and not plan.notes


def test_a_fixed_shard_count_is_an_upper_bound_and_empty_shards_are_dropped():
    items = make_items({"test/test_torch.py": 3})
    history = {item.test_id: 5.0 for item in items}

    assert len(plan_shards(items, history, shard_count=8).shards) == 3
    assert len(plan_shards(make_items({"test/test_torch.py": 90}), {}, shard_count=8).shards) == 8


def test_each_shard_holds_one_group_of_tests():
    items = make_items({"test/inductor/test_a.py": 30, "test/test_ops.py": 30})
    items += make_items({"test/test_nn.py": 30}, labels=("serial",))

    plan = plan_shards(items, {}, max_shard_seconds=20)

    assert {shard.groups for shard in plan.shards} == {("inductor",), ("ops",), ("nn[serial]",)}
    for shard in plan.shards:
        assert all(t.split("::")[0] == shard.test_ids[0].split("::")[0] for t in shard.test_ids)


def test_groups_share_shards_when_a_fixed_count_is_smaller_than_the_groups():
    items = make_items({"test/inductor/test_a.py": 10, "test/test_ops.py": 10, "test_nn.py": 10})

    plan = plan_shards(items, {}, shard_count=2)

    assert len(plan.shards) == 2
    assert sorted(all_ids(plan)) == sorted(item.test_id for item in items)
    assert "3 groups share 2 shards" in plan.notes


def test_a_fixed_count_goes_to_the_groups_with_the_most_work():
    items = make_items({"test/test_ops.py": 300, "test/test_nn.py": 10})

    plan = plan_shards(items, {}, shard_count=6)

    per_group = [shard.groups[0] for shard in plan.shards]
    assert per_group.count("ops") == 5 and per_group.count("nn") == 1


def test_shards_keep_the_input_order_of_their_tests():
    items = make_items({"test/test_a.py": 20, "test/test_b.py": 20, "test/test_c.py": 20})
    position = {item.test_id: n for n, item in enumerate(items)}

    plan = plan_shards(items, {}, shard_count=2, isolate_groups=False)

    for shard in plan.shards:
        assert [position[t] for t in shard.test_ids] == sorted(position[t] for t in shard.test_ids)


def test_a_test_listed_twice_is_rejected():
    items = make_items({"test/test_a.py": 2})
    with pytest.raises(ValueError, match="listed twice"):
        plan_shards(items + items[:1], {})


def test_a_plan_needs_a_cap_or_a_shard_count():
    with pytest.raises(ValueError):
        plan_shards(make_items({"test/test_a.py": 2}), {}, max_shard_seconds=None)
    with pytest.raises(ValueError):
        plan_shards(make_items({"test/test_a.py": 2}), {}, shard_count=0)


# --- estimates --------------------------------------------------------------------------


def test_estimates_fall_back_from_history_to_file_to_seed_to_group_to_default():
    items = [
        TestItem("a::1", "test/test_torch.py"),
        TestItem("a::2", "test/test_torch.py"),
        TestItem("a::3", "test/test_torch.py"),
        TestItem("a::new", "test/test_torch.py"),
        TestItem("s::1", "test/test_seeded.py"),
        TestItem("s::2", "test/test_seeded.py"),
        TestItem("g::1", "test/test_view_ops.py"),
        TestItem("i::1", "test/inductor/test_x.py"),
    ]
    history = {"a::1": 1.0, "a::2": 2.0, "a::3": 9.0}

    plan = plan_shards(items, history, seeds={"test_seeded": 30.0}, default_seconds=4.0)
    estimates = plan.estimates

    assert estimates["a::1"] == (1.0, Source.HISTORY)
    assert estimates["a::new"] == (2.0, Source.FILE_MEDIAN)
    assert estimates["s::1"] == (15.0, Source.SEED)
    # test_view_ops shares the "eager" group with test_torch and test_seeded.
    assert estimates["g::1"] == (2.0, Source.GROUP_MEDIAN)
    assert estimates["i::1"] == (4.0, Source.DEFAULT)


def test_file_paths_normalise_to_test_times_keys():
    assert file_key("test/inductor/test_torchinductor.py") == "inductor/test_torchinductor"
    assert file_key("/src/pytorch/test/test_ops.py") == "test_ops"
    assert file_key("./test_ops.py") == "test_ops"
    dtensor = "distributed/_tensor/test_dtensor_ops"
    assert file_key(dtensor) == dtensor


@pytest.mark.parametrize(
    ("path", "area"),
    [
        ("test/test_ops.py", "ops"),
        ("test/test_ops_gradients.py", "ops"),
        ("test/test_view_ops.py", "eager"),
        ("test/test_torch.py", "eager"),
        ("test/test_nn.py", "nn"),
        ("test/nn/test_convolution.py", "nn"),
        ("test/inductor/test_torchinductor.py", "inductor"),
        ("test/distributed/fsdp/test_fsdp_core.py", "distributed"),
        ("test/dynamo/test_misc.py", "dynamo"),
        ("test/dynamo/cpython/3_13/test_set.py", "dynamo"),
        ("test/cpython/test_list.py", "dynamo"),
    ],
)
def test_each_file_belongs_to_an_area(path, area):
    assert area_for(path) == area


def test_seeds_are_read_per_job_and_config_with_ci_paths_made_keys():
    test_times = load_test_times(FIXTURES / "test-times.json")

    seeds = file_seeds(test_times, "linux-jammy-py3.10-gcc11", "default")
    default = file_seeds(test_times, "default", "default")

    assert seeds == {"test_nn": 498.0, "test_ops": 3712.2, "test_torch": 341.5}
    assert default["profiler/test_cupti_monitor"] == 0.8  # CI's absolute path, as a key
    assert "distributed/test_c10d_nccl" not in default  # another config's file
    assert file_seeds(test_times, "default", "no such config") == {}


def test_seeds_come_from_the_real_test_times_file(real_data):
    test_times = load_test_times(real_data / "test-times.json")

    seeds = file_seeds(test_times, "default", "default")

    assert seeds["test_ops"] > 0
    assert "inductor/test_torchinductor" in seeds
    assert file_seeds(test_times, "no such job", "default") == {}


def test_the_real_data_counts_as_absent_where_its_folder_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("CRCR_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path

    monkeypatch.setenv("CRCR_SHARED_DATA", str(tmp_path / "missing"))
    assert shared_data_dir() is None


def test_a_malformed_test_times_file_is_refused(tmp_path):
    path = tmp_path / "test-times.json"
    path.write_text(json.dumps({"job": {"config": {"test_ops": "slow"}}}))

    with pytest.raises(ValueError, match="job"):
        load_test_times(path)


# --- balance ----------------------------------------------------------------------------


def test_refinement_fixes_the_classic_lpt_trap():
    # LPT puts 3+2+2 against 3+2 (makespan 7); the optimum is 3+3 against 2+2+2.
    durations = [3.0, 3.0, 2.0, 2.0, 2.0]

    bins = balance(durations, 2)

    assert max(sum(durations[i] for i in b) for b in bins) == 6.0


def test_balance_is_never_worse_than_plain_lpt_and_never_below_the_lower_bound():
    rng = random.Random(11)
    for _ in range(60):
        durations = [rng.paretovariate(1.2) for _ in range(rng.randint(1, 80))]
        shards = rng.randint(1, 12)

        bins = balance(durations, shards)

        makespan = max(sum(durations[i] for i in b) for b in bins)
        assert sorted(i for b in bins for i in b) == list(range(len(durations)))
        assert makespan <= plain_lpt_makespan(durations, shards) + 1e-9
        assert makespan >= lower_bound(durations, shards) - 1e-9


# --- duration history -------------------------------------------------------------------


def history_after(observations: list[float]) -> DurationStats:
    state = None
    for seconds in observations:
        state = update_duration(state, seconds)
    assert state is not None
    return state


def test_the_first_observation_is_the_estimate():
    assert update_duration(None, 12.5) == DurationStats(mean=12.5, spread=0.0, count=1)


def test_one_outlier_moves_the_estimate_little():
    rng = random.Random(5)
    steady = [10.0 + rng.uniform(-0.5, 0.5) for _ in range(20)]

    before = history_after(steady)
    after = update_duration(before, 600.0)

    assert abs(after.mean - before.mean) / before.mean < 0.1
    # …and the next ordinary runs pull it straight back.
    assert abs(history_after([*steady, 600.0, 10.0, 10.0, 10.0]).mean - 10.0) < 1.0


def test_a_lasting_change_is_followed_within_a_few_runs():
    state = history_after([10.0] * 20 + [30.0] * 12)

    assert math.isclose(state.mean, 30.0, rel_tol=0.1)


def test_history_state_survives_a_round_trip_through_json():
    state = history_after([3.0, 4.0, 5.0])

    assert DurationStats.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_a_negative_or_infinite_duration_is_refused():
    with pytest.raises(ValueError):
        update_duration(None, -1.0)
    with pytest.raises(ValueError):
        update_duration(None, math.inf)
