"""Stage 1: files left out by extension points and scope preference, each with its reason."""

from selection.scope import FileInfo, clauses, coarse_filter

FILES = [
    FileInfo("test/test_ops.py", "operator tests over op_db"),
    FileInfo("test/test_autograd.py", "gradients and backward"),
    FileInfo("test/distributed/test_c10d_common.py", "process groups"),
    FileInfo("test/dynamo/test_export.py", "dynamo export"),
    FileInfo("test/inductor/test_torchinductor.py", "inductor codegen"),
    FileInfo("test/test_cuda.py", "cuda streams"),
    FileInfo("test/test_sparse.py", "sparse tensors"),
]


def test_areas_the_backend_does_not_hook_are_left_out_with_the_reason():
    result = coarse_filter(FILES, ["eager", "autograd", "sparse"], "")
    assert result.included == ["test/test_ops.py", "test/test_autograd.py", "test/test_sparse.py"]
    assert "does not hook distributed" in result.excluded["test/distributed/test_c10d_common.py"]
    assert "does not hook dynamo" in result.excluded["test/dynamo/test_export.py"]
    assert "another device" in result.excluded["test/test_cuda.py"]


def test_a_scope_preference_in_plain_words_leaves_out_files_and_tests():
    keys = [
        ("test/test_ops.py", "TestCommon", "test_fn_grad"),
        ("test/test_ops.py", "TestCommon", "test_variant_consistency_eager"),
    ]
    result = coarse_filter(
        FILES, ["eager", "autograd", "dynamo", "inductor", "distributed", "sparse"],
        "no autograd yet; skip distributed and compiled tests", keys,
    )  # fmt: skip
    assert result.included == ["test/test_ops.py", "test/test_sparse.py"]
    assert result.excluded["test/test_autograd.py"].startswith('scope preference "no autograd yet"')
    assert "distributed" in result.excluded["test/distributed/test_c10d_common.py"]
    assert "compiled" in result.excluded["test/inductor/test_torchinductor.py"]
    assert list(result.excluded_tests) == [keys[0]]
    assert '"grad"' in result.excluded_tests[keys[0]]


def test_a_file_whose_summary_means_the_subject_is_left_out_by_its_similarity():
    meaning = {"sparse": {"test/test_sparse.py": 0.2, "test/test_ops.py": 0.71}}
    result = coarse_filter(FILES[:1], ["eager"], "skip sparse", meaning=meaning)
    assert "similarity 0.71" in result.excluded["test/test_ops.py"]


def test_only_keeps_files_about_the_subject():
    result = coarse_filter(FILES, ["eager", "autograd", "sparse"], "only sparse for now")
    assert result.included == ["test/test_sparse.py"]
    assert "not about sparse" in result.excluded["test/test_ops.py"]


def test_clauses_read_direction_and_subject():
    parsed = clauses("No autograd yet. Focus on view ops")
    assert [(c.negative, c.subject) for c in parsed] == [(True, "autograd"), (False, "view ops")]
