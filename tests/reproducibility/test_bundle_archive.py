"""A bundle's archive, written in parts by two threads, unpacks as one checked folder."""

import json
import shutil
import subprocess
import tarfile

import pytest

from reproducibility.bundle_archive import BundleArchive, Encoded, json_document
from reproducibility.reproduce import verify_folder

LONG = "results/" + "a-very-long-folder-name/" * 5 + "p001.log"  # past ustar's 100 bytes


def test_parts_and_long_or_accented_names_unpack_as_one_folder_that_verifies(tmp_path):
    archive = BundleArchive(tmp_path / "bundle.tar.gz", "crcr-run-x")
    results = archive.part()  # written before the archive's own members in the file
    results.add_bytes(LONG, b"one\n")
    results.add_bytes("results/shard-0/attempt-1/p001.ids", b"t.py::test_a\n")
    script = tmp_path / "reproduce"
    script.write_text("#!/usr/bin/env python3\n")
    archive.add_file("reproduce", script, mode=0o755)
    archive.add_bytes("tree/test/test_dépôt.py", b"def test_x(): pass\n")
    archive.close({"files": archive.all_files})

    with tarfile.open(tmp_path / "bundle.tar.gz") as tar:
        tar.extractall(tmp_path / "out", filter="data")
    top = tmp_path / "out" / "crcr-run-x"
    assert (top / LONG).read_bytes() == b"one\n"
    assert (top / "tree/test/test_dépôt.py").is_file()
    assert (top / "reproduce").stat().st_mode & 0o111
    assert verify_folder(top) == []
    assert len(json.loads((top / "manifest.json").read_text())["files"]) == 4


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar on this host")
def test_gnu_tar_reads_the_joined_gzip_streams(tmp_path):
    archive = BundleArchive(tmp_path / "bundle.tar.gz", "crcr-run-x")
    archive.part().add_bytes("results/shard-0/attempt-1/p001.log", b"x" * 5000)
    archive.add_bytes("README.md", b"# run\n")
    archive.close({"files": archive.all_files})
    listed = subprocess.run(
        ["tar", "tzf", str(tmp_path / "bundle.tar.gz")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "crcr-run-x/results/shard-0/attempt-1/p001.log" in listed
    assert "crcr-run-x/manifest.json" in listed


def test_a_document_keeps_one_list_item_a_line_and_texts_made_elsewhere_as_they_are():
    text = json_document({"b": [1, {"x": 2}], "a": Encoded(['{"node_id" : "t"}']), "c": {}})
    assert json.loads(text) == {"a": [{"node_id": "t"}], "b": [1, {"x": 2}], "c": {}}
    assert text.decode().splitlines()[1:6] == [
        '  "a": [', '    {"node_id" : "t"}', "  ],", '  "b": [', "    1,",
    ]  # fmt: skip
